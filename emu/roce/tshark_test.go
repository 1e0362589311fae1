package roce

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/fabric/capture"
)

// TestTshark writes frames built by this package (the vectors of spec §9
// plus one packet per opcode over IPv4 and IPv6, and one frame with a
// corrupted ICRC) to a pcap, has tshark dissect it, and checks that tshark
// decodes every frame as infiniband with the expected BTH fields. Since
// Wireshark does not verify the ICRC (spec §8.3), the independent Lua
// checker of testdata/roce_icrc.lua recomputes it inside tshark.
func TestTshark(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not found in PATH; install it (Debian: apt-get install -y tshark) to run this test")
	}
	type want struct {
		opcode  Opcode
		destQP  uint32
		psn     uint32
		ack     bool
		extra   map[string]string // more tshark fields
		icrcOK  bool
		ipv6    bool
		comment string
	}
	var frames [][]byte
	var wants []want
	vs := specVectors(t, loadVectors(t))
	for i := range vs {
		v := &vs[i]
		w := want{opcode: v.pkt.BTH.Opcode, destQP: v.pkt.BTH.DestQP, psn: v.pkt.BTH.PSN, ack: v.pkt.BTH.AckReq,
			icrcOK: true, ipv6: v.frame.SrcIP.Is6() && !v.frame.SrcIP.Is4In6(), comment: v.name,
			extra: map[string]string{}}
		if v.pkt.BTH.Opcode != CNP {
			// tshark 4.0 stops at the unknown opcode 0x81 (spec §8.3).
			w.extra["infiniband.invariant.crc"] = "0x" + v.icrc
		}
		switch v.name {
		case "V2":
			w.extra["infiniband.reth.va"] = "0x00007f1234560000"
			w.extra["infiniband.reth.r_key"] = "0x00abcdef"
			w.extra["infiniband.reth.dmalen"] = "600"
		case "V3":
			w.extra["infiniband.aeth.syndrome"] = "31"
			w.extra["infiniband.aeth.msn"] = "1"
		case "V4":
			w.extra["infiniband.aeth.syndrome"] = "46"
		case "V5":
			w.extra["infiniband.bth.padcnt"] = "2"
			w.extra["infiniband.bth.se"] = "1"
			w.extra["data.len"] = "20"
		case "V6":
			w.extra["infiniband.deth.q_key"] = "0x0000000011111111"
		case "V7":
			w.extra["infiniband.mad.attributeid"] = "0x0010"
			w.extra["infiniband.cm.req.localqpn"] = "0x000011"
		}
		frames = append(frames, buildFrame(t, v))
		wants = append(wants, w)
	}
	for _, pf := range allOpcodeSamples() {
		for _, v6 := range []bool{false, true} {
			ib, err := Build(make([]byte, 512), &pf)
			if err != nil {
				t.Fatal(err)
			}
			ff := FrameFields{Dst: macB, Src: macA, SrcIP: ip4A, DstIP: ip4B, HopLimit: 64, IPID: 7,
				SrcPort: UDPSourcePort(0, qpA, qpB)}
			if v6 {
				ff.SrcIP, ff.DstIP, ff.UDPChecksum = ip6A, ip6B, true
			}
			fr, err := Frame(make([]byte, 1024), &ff, ib)
			if err != nil {
				t.Fatal(err)
			}
			frames = append(frames, fr)
			wants = append(wants, want{opcode: pf.BTH.Opcode, destQP: pf.BTH.DestQP, psn: pf.BTH.PSN,
				ack: pf.BTH.AckReq, icrcOK: true, ipv6: v6, comment: pf.BTH.Opcode.String()})
		}
	}
	bad := append([]byte(nil), frames[0]...)
	bad[len(bad)-2] ^= 0x10
	frames = append(frames, bad)
	w0 := wants[0]
	w0.icrcOK, w0.comment = false, "V1 with corrupted ICRC"
	w0.extra = nil
	wants = append(wants, w0)

	dir := t.TempDir()
	path := filepath.Join(dir, "roce.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	pw, err := capture.NewPcapWriter(f, capture.PcapOptions{Nanosecond: true})
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Unix(1700000000, 0)
	for i, fr := range frames {
		if err := pw.WritePacket(ts.Add(time.Duration(i)*time.Millisecond), fr); err != nil {
			t.Fatal(err)
		}
	}
	if err := pw.Close(); err != nil {
		t.Fatal(err)
	}

	fields := []string{"frame.protocols", "infiniband.bth.opcode", "infiniband.bth.destqp",
		"infiniband.bth.psn", "infiniband.bth.a", "roce_icrc.ok", "roce_icrc.calc", "ip.checksum.status",
		"udp.checksum.status"}
	extraNames := map[string]bool{}
	for _, w := range wants {
		for k := range w.extra {
			extraNames[k] = true
		}
	}
	for k := range extraNames {
		fields = append(fields, k)
	}
	lua, err := filepath.Abs("testdata/roce_icrc.lua")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-n", "-X", "lua_script:" + lua, "-o", "ip.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE",
		"-r", path, "-T", "fields", "-E", "separator=/t", "-E", "occurrence=f"}
	for _, fl := range fields {
		args = append(args, "-e", fl)
	}
	cmd := exec.Command(tshark, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != len(frames) {
		t.Fatalf("tshark printed %d lines for %d frames\n%s", len(lines), len(frames), stderr.String())
	}
	col := map[string]int{}
	for i, fl := range fields {
		col[fl] = i
	}
	for i, line := range lines {
		v := strings.Split(line, "\t")
		w := wants[i]
		get := func(name string) string { return v[col[name]] }
		name := fmt.Sprintf("frame %d (%s)", i+1, w.comment)
		proto := "eth:ethertype:ip:udp:infiniband"
		if w.ipv6 {
			proto = "eth:ethertype:ipv6:udp:infiniband"
		}
		if !strings.HasPrefix(get("frame.protocols"), proto) {
			t.Errorf("%s: protocols %q", name, get("frame.protocols"))
		}
		checks := map[string]string{
			"infiniband.bth.opcode": strconv.Itoa(int(w.opcode)),
			"infiniband.bth.destqp": fmt.Sprintf("0x%06x", w.destQP),
			"infiniband.bth.psn":    strconv.Itoa(int(w.psn)),
			"infiniband.bth.a":      map[bool]string{false: "0", true: "1"}[w.ack],
			"roce_icrc.ok":          map[bool]string{false: "0", true: "1"}[w.icrcOK],
		}
		if !w.ipv6 {
			checks["ip.checksum.status"] = "1" // good
		}
		if w.ipv6 {
			checks["udp.checksum.status"] = "1"
		}
		for k, val := range w.extra {
			checks[k] = val
		}
		for k, val := range checks {
			if got := get(k); got != val {
				t.Errorf("%s: %s = %q, want %q", name, k, got, val)
			}
		}
	}
	if t.Failed() {
		t.Logf("tshark stderr:\n%s", stderr.String())
	}
}
