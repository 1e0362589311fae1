package ib_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/fabric/capture"
	"github.com/hcaemu/hcaemu/emu/ib"
)

// TestTshark writes the sample packets (local and global, RC and UD, a MAD
// to QP1, a multicast) in pcap link type 252 with the exported-PDU
// dissector "infiniband" (shared/spec/mlx5.md §5.9) and checks that tshark
// decodes each as LRH (and GRH) and BTH with the fields Build wrote, and
// shows the ICRC and VCRC it carries.
func TestTshark(t *testing.T) {
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Skip("tshark not found in PATH; install it (Debian: apt-get install -y tshark) to run this test")
	}
	var buf bytes.Buffer
	w, err := capture.NewPcapWriter(&buf, capture.PcapOptions{Dissector: "infiniband"})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i, f := range ib.SamplePackets() {
		pkt, err := ib.Build(make([]byte, 8192), &f)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WritePacket(time.Unix(int64(i), 0), pkt); err != nil {
			t.Fatal(err)
		}
		n := len(pkt)
		line := []string{fmt.Sprintf("0x%02x", f.LRH.VL), fmt.Sprint(f.LRH.SL), fmt.Sprint(f.LRH.DLID), fmt.Sprint(f.LRH.SLID),
			fmt.Sprint((n - 2) / 4), fmt.Sprint(int(f.Transport.BTH.Opcode)),
			fmt.Sprintf("0x%06x", f.Transport.BTH.DestQP), fmt.Sprint(f.Transport.BTH.PSN),
			fmt.Sprint(f.Transport.BTH.PKey), "", "", "",
			"0x" + hex.EncodeToString(pkt[n-6:n-2]), "0x" + hex.EncodeToString(pkt[n-2:])}
		if f.GRH != nil {
			line[9], line[10] = gidString(f.GRH.DGID), fmt.Sprint(n-8-40-2)
			line[11] = fmt.Sprintf("0x%016x", f.Transport.DETH.QKey)
		}
		want = append(want, strings.Join(line, ","))
	}
	p := filepath.Join(t.TempDir(), "ib.pcap")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("tshark", "-r", p, "-T", "fields", "-E", "separator=,",
		"-e", "infiniband.lrh.vl", "-e", "infiniband.lrh.sl", "-e", "infiniband.lrh.dlid", "-e", "infiniband.lrh.slid",
		"-e", "infiniband.lrh.pktlen", "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp",
		"-e", "infiniband.bth.psn", "-e", "infiniband.bth.p_key", "-e", "infiniband.grh.dgid",
		"-e", "infiniband.grh.paylen", "-e", "infiniband.deth.q_key",
		"-e", "infiniband.invariant.crc", "-e", "infiniband.variant.crc").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(got) != len(want) {
		t.Fatalf("tshark shows %d packets, want %d:\n%s", len(got), len(want), out)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("packet %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
}

// gidString is a GID as tshark prints it (IPv6 notation).
func gidString(g ib.GID) string {
	var parts []string
	for i := 0; i < 16; i += 2 {
		parts = append(parts, fmt.Sprintf("%x", uint16(g[i])<<8|uint16(g[i+1])))
	}
	s := strings.Join(parts, ":")
	// tshark compresses the longest run of zero groups.
	for _, z := range []string{":0:0:0:0:0:0:", ":0:0:0:0:0:", ":0:0:0:0:", ":0:0:0:", ":0:0:"} {
		if strings.Contains(s, z) {
			return strings.Replace(s, z, "::", 1)
		}
	}
	return s
}
