package tests

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// checkCapture decodes a run's pcap with tshark and checks it: it holds the
// whole segment, the guests' own traffic (ARP, and the TCP the tools
// exchange their QP numbers over) as well as RoCEv2; every RoCEv2 frame
// (Ethernet/IP/UDP 4791/InfiniBand) has an ICRC that an
// independent checker (a Lua post-dissector with its own CRC-32, not the
// code under test) accepts; the RC, UD and ACK opcodes the tools use appear;
// the packets of every multi-packet message carry consecutive PSNs; and
// every RC destination QPN is one the tools reported. toolOutput is the
// run's output (for the QPNs).
func checkCapture(t *testing.T, pcap, toolOutput string) {
	t.Helper()
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Fatal("tshark not found: install it (apt-get install -y tshark); .ci/run does")
	}
	lua, err := filepath.Abs("../emu/roce/testdata/roce_icrc.lua")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tshark, "-n", "-X", "lua_script:"+lua, "-r", pcap, "-T", "fields",
		"-E", "separator=/t", "-E", "occurrence=f",
		"-e", "frame.protocols", "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp",
		"-e", "infiniband.bth.psn", "-e", "roce_icrc.ok", "-e", "ip.src", "-e", "ip.dst",
		"-e", "infiniband.cm.req.localqpn", "-e", "infiniband.cm.rep.localqpn", "-e", "udp.dstport")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("tshark: %v\n%s", err, stderr.String())
	}
	// Only the last newline goes: a frame's empty fields are trailing tabs,
	// which trimming all white space would take from the last line (a
	// guest's ICMPv6 frame, say) and leave it short.
	lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	if len(lines) < 100 {
		t.Fatalf("only %d frames captured", len(lines))
	}
	// The QPNs the tools printed, and those rdma_cm exchanged in CM REQ and
	// REP MADs over QP1.
	qpns := map[uint64]bool{1: true}
	for _, m := range regexp.MustCompile(`QPN\s+0x([0-9a-fA-F]+)`).FindAllStringSubmatch(toolOutput, -1) {
		v, _ := strconv.ParseUint(m[1], 16, 32)
		qpns[v] = true
	}
	for _, l := range lines {
		f := strings.Split(l, "\t")
		for _, cm := range f[min(7, len(f)):min(9, len(f))] {
			if cm == "" {
				continue
			}
			if v, err := strconv.ParseUint(strings.TrimPrefix(cm, "0x"), 16, 32); err == nil {
				qpns[v] = true
			} else if v, err := strconv.ParseUint(cm, 10, 32); err == nil {
				qpns[v] = true
			}
		}
	}
	type flow struct{ src, dst, qp string }
	type last struct {
		op  int
		psn uint64
	}
	open := map[flow]last{}
	seen := map[int]int{}
	qp1 := 0
	bad := 0
	guests := map[string]int{} // the guests' own frames, by protocol
	roce := 0
	for i, l := range lines {
		f := strings.Split(l, "\t")
		if len(f) < 7 {
			t.Fatalf("frame %d: %q", i+1, l)
		}
		if len(f) > 9 && f[9] == "4791" || strings.Contains(f[0], ":infiniband") {
			if !strings.HasSuffix(f[0], ":udp:infiniband") && !strings.Contains(f[0], ":udp:infiniband:") {
				t.Errorf("frame %d to UDP 4791 is not decoded as RoCEv2: %s", i+1, f[0])
			}
		} else {
			switch {
			case strings.HasPrefix(f[0], "eth:ethertype:arp"):
				guests["arp"]++
			case strings.Contains(f[0], ":tcp"):
				guests["tcp"]++
			default:
				guests["other"]++
			}
			continue
		}
		roce++
		if f[4] != "1" {
			bad++
			if bad < 5 {
				t.Errorf("frame %d: independent ICRC check failed (%q)", i+1, f[4])
			}
		}
		op, _ := strconv.Atoi(f[1])
		seen[op]++
		if op == 100 && f[2] == "0x000001" {
			qp1++
		}
		qp, _ := strconv.ParseUint(strings.TrimPrefix(f[2], "0x"), 16, 32)
		psn, _ := strconv.ParseUint(f[3], 10, 32)
		if op < 0x20 && !qpns[qp] {
			t.Errorf("frame %d: RC packet to QPN %#x, which no tool reported", i+1, qp)
		}
		// Within a message: FIRST/MIDDLE are followed by MIDDLE/LAST at PSN+1
		// (a retransmission may restart the message: a new FIRST).
		key := flow{f[5], f[6], f[2]}
		isFirstOrMiddle := op == 0 || op == 1 || op == 6 || op == 7
		isMiddleOrLast := op == 1 || op == 2 || op == 3 || op == 7 || op == 8 || op == 9
		if p, ok := open[key]; ok && isMiddleOrLast && psn != (p.psn+1)&0xFFFFFF {
			t.Errorf("frame %d: opcode %d PSN %d after PSN %d in the same message", i+1, op, psn, p.psn)
		}
		if isFirstOrMiddle {
			open[key] = last{op, psn}
		} else if op < 0x0c {
			delete(open, key)
		}
	}
	for _, want := range []struct {
		op   int
		name string
	}{
		{0, "SEND FIRST"}, {1, "SEND MIDDLE"}, {2, "SEND LAST"}, {4, "SEND ONLY"},
		{6, "RDMA WRITE FIRST"}, {8, "RDMA WRITE LAST"}, {10, "RDMA WRITE ONLY"},
		{12, "RDMA READ REQUEST"}, {13, "READ RESPONSE FIRST"}, {15, "READ RESPONSE LAST"},
		{17, "ACKNOWLEDGE"}, {18, "ATOMIC ACKNOWLEDGE"}, {100, "UD SEND ONLY"},
	} {
		if seen[want.op] == 0 {
			t.Errorf("no %s (opcode %d) in the capture", want.name, want.op)
		}
	}
	if seen[19]+seen[20] == 0 {
		t.Error("no atomic request in the capture")
	}
	if qp1 == 0 {
		t.Error("no datagram to QP1 (CM MADs) in the capture")
	}
	if guests["arp"] == 0 || guests["tcp"] == 0 {
		t.Errorf("the capture lacks the guests' own traffic: %v", guests)
	}
	t.Logf("%d frames: %d RoCEv2, opcodes %v; the guests' own %v", len(lines), roce, seen, guests)
}
