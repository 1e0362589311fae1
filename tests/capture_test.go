package tests

import (
	"bytes"
	"fmt"
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
// the packets of every multi-packet message carry consecutive PSNs, but for
// a go-back-N resumption (which may start at a MIDDLE) by a sender that
// said it retransmitted (see resumers); and every RC destination QPN is one
// the tools reported. toolOutput is the run's output (for the QPNs, the
// HCAs' log and soft-RoCE's counters).
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
	said := resumers(toolOutput)
	resumed := 0
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
		// (a retransmission may restart the message: a new FIRST). A
		// go-back-N resumption goes back to the oldest PSN not
		// acknowledged, which may be a MIDDLE or LAST of this message or of
		// an earlier one: only where the sender said it retransmitted. A
		// PSN repeated or skipped otherwise is a defect (of the sender, or
		// of the capture: issue 29).
		key := flow{f[5], f[6], f[2]}
		isFirstOrMiddle := op == 0 || op == 1 || op == 6 || op == 7
		isMiddleOrLast := op == 1 || op == 2 || op == 3 || op == 7 || op == 8 || op == 9
		if p, ok := open[key]; ok && isMiddleOrLast && psn != (p.psn+1)&0xFFFFFF {
			back := (p.psn - psn) & 0xFFFFFF // how far back it went
			if back < 1<<23 && said.retransmitted(f[5], qp) {
				resumed++
			} else {
				t.Errorf("frame %d: opcode %d PSN %d after PSN %d in the same message (%s to %s QPN %s; %s)",
					i+1, op, psn, p.psn, f[5], f[6], f[2], said.about(f[5]))
			}
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
	t.Logf("%d frames: %d RoCEv2, opcodes %v; the guests' own %v; %d go-back-N resumptions inside a message (%s)",
		len(lines), roce, seen, guests, resumed, said.summary())
}

// retransmitters is what a run's output says of the senders that
// retransmitted: by guest (its IPv4 address, 10.0.0.k+1), the steps (a
// tool's run: its output up to its RESULT line) in which the guest's side
// sent requests again.
type retransmitters struct {
	marked map[string][]*step // guest address -> its marked steps
	// unsure: addresses whose HCA's log lines were suppressed (ratelog): a
	// retransmitting QP may have gone unsaid.
	unsure map[string]bool
	// how many steps were marked by the HCA's log and by soft-RoCE's counters.
	byLog, byCounters int
}

// step is a guest's step: the QPNs its lines printed, and whether it
// retransmitted.
type step struct {
	qpns   map[uint64]bool
	marked bool
}

// resumers reads out (hcaemu run's output, the guests' lines prefixed
// "[gK] ") in the order it was written: a guest's step holds the QPNs its
// lines printed ("QPN 0x…": perftest and the pingpongs print the local and
// the remote QP); the step is marked as retransmitting when hcaemu's HCA of
// that guest logs "QP retransmitted" for one of them as the QP is
// destroyed (its per-QP counter: run with --log-level info), or when
// soft-RoCE's requester counters (RXESTAT lines: "rdma statistic show",
// printed after each RESULT) moved during the step.
func resumers(out string) *retransmitters {
	r := &retransmitters{marked: map[string][]*step{}, unsure: map[string]bool{}}
	guestLine := regexp.MustCompile(`^\[g(\d+)\] (.*)$`)
	qpnRe := regexp.MustCompile(`QPN\s+0x([0-9a-fA-F]+)`)
	logRe := regexp.MustCompile(`msg="QP retransmitted" .*?\bdev=hca(\d+) .*?\bqpn=0x([0-9a-f]+) retransmitted=(\d+)`)
	addr := func(k string) string { n, _ := strconv.Atoi(k); return "10.0.0." + strconv.Itoa(n+1) }
	cur := map[string]*step{}  // the open step of each guest
	last := map[string]*step{} // its last closed step
	stats := map[string]map[string]uint64{}
	mark := func(a string, s *step) {
		if !s.marked {
			s.marked = true
			r.marked[a] = append(r.marked[a], s)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if m := logRe.FindStringSubmatch(l); m != nil {
			a := addr(m[1])
			if strings.Contains(l, "suppressed=") {
				r.unsure[a] = true
			}
			qpn, _ := strconv.ParseUint(m[2], 16, 32)
			if n, _ := strconv.ParseUint(m[3], 10, 64); n == 0 {
				continue
			}
			// The QP is destroyed as its tool exits: its step is the open
			// one, or the one just closed (the guest's console lags).
			for _, s := range []*step{cur[a], last[a]} {
				if s != nil && s.qpns[qpn] {
					mark(a, s)
					r.byLog++
					break
				}
			}
			continue
		}
		m := guestLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		a, text := addr(m[1]), m[2]
		if cur[a] == nil {
			cur[a] = &step{qpns: map[uint64]bool{}}
		}
		for _, q := range qpnRe.FindAllStringSubmatch(text, -1) {
			v, _ := strconv.ParseUint(q[1], 16, 32)
			cur[a].qpns[v] = true
		}
		switch {
		case strings.HasPrefix(text, "RESULT "):
			last[a], cur[a] = cur[a], &step{qpns: map[uint64]bool{}}
		case strings.HasPrefix(text, "RXESTAT "):
			now := rxeCounters(text)
			if prev := stats[a]; prev != nil && last[a] != nil {
				for _, c := range []string{"completer_retry_err", "rcvd_seq_err", "rcvd_rnr_err", "retry_exceeded_err", "retry_rnr_exceeded_err"} {
					if now[c] > prev[c] {
						mark(a, last[a])
						r.byCounters++
						break
					}
				}
			}
			stats[a] = now
		}
	}
	return r
}

// rxeCounters reads the "name value" pairs of an "rdma statistic show" line.
func rxeCounters(line string) map[string]uint64 {
	f := strings.Fields(line)
	c := map[string]uint64{}
	for i := 0; i+1 < len(f); i++ {
		if v, err := strconv.ParseUint(f[i+1], 10, 64); err == nil {
			c[f[i]] = v
			i++
		}
	}
	return c
}

// retransmitted reports whether the guest at address src said it
// retransmitted in a step that involved QP qpn (the flow's destination).
func (r *retransmitters) retransmitted(src string, qpn uint64) bool {
	if r.unsure[src] {
		return true
	}
	for _, s := range r.marked[src] {
		if s.qpns[qpn] {
			return true
		}
	}
	return false
}

// about says what is known of the retransmissions of the guest at src.
func (r *retransmitters) about(src string) string {
	return fmt.Sprintf("%s said it retransmitted in %d steps, none with that QPN", src, len(r.marked[src]))
}

// summary says which steps retransmitted, by guest.
func (r *retransmitters) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "steps with retransmissions: %d said by hcaemu's log, %d by soft-RoCE's counters", r.byLog, r.byCounters)
	for a, steps := range r.marked {
		for _, s := range steps {
			fmt.Fprintf(&b, "; %s QPNs", a)
			for q := range s.qpns {
				fmt.Fprintf(&b, " %#x", q)
			}
		}
	}
	return b.String()
}

// TestResumers: checkCapture learns which senders retransmitted, and in
// which steps, from hcaemu's log (QPs destroyed after retransmitting) and
// from soft-RoCE's counters moving during a step; a step that said nothing
// allows no resumption.
func TestResumers(t *testing.T) {
	out := strings.Join([]string{
		"[g1] RXESTAT link rxe0/1 sent_pkts 0 completer_retry_err 0 rcvd_seq_err 0",
		"[g0]  local address: LID 0000 QPN 0x0c2a11 PSN 0x1",
		"[g1]  local address: LID 0000 QPN 0x0011 PSN 0x2",
		"[g0]  remote address: LID 0000 QPN 0x0011 PSN 0x2",
		"[g1]  remote address: LID 0000 QPN 0x0c2a11 PSN 0x1",
		`time=2026-11-27T19:00:00.000Z level=INFO msg="QP retransmitted" dev=hca0 qpn=0xc2a11 retransmitted=7 timeouts=1 psn_sequence_naks=0 rnr_naks=0`,
		"[g0] RESULT 0 0 ib_write_bw -d vmw_pvrdma0 -x 1 -F -s 65536 -n 20",
		"[g1] RESULT 0 0 ib_write_bw -d rxe0 -x 1 -F -s 65536 -n 20",
		"[g1] RXESTAT link rxe0/1 sent_pkts 90 completer_retry_err 0 rcvd_seq_err 0",
		// The next step: soft-RoCE's requester retransmits, hcaemu's does not.
		"[g0]  local address: LID 0000 QPN 0x0c2a12 PSN 0x1",
		"[g1]  local address: LID 0000 QPN 0x0012 PSN 0x2",
		"[g0]  remote address: LID 0000 QPN 0x0012 PSN 0x2",
		"[g1]  remote address: LID 0000 QPN 0x0c2a12 PSN 0x1",
		"[g0] RESULT 0 1 ib_send_bw -d vmw_pvrdma0 -x 1 -F -s 65536 -n 20",
		"[g1] RESULT 0 1 ib_send_bw -d rxe0 -x 1 -F -s 65536 -n 20",
		"[g1] RXESTAT link rxe0/1 sent_pkts 180 completer_retry_err 1 rcvd_seq_err 0",
	}, "\n")
	r := resumers(out)
	for _, c := range []struct {
		src  string
		qpn  uint64
		want bool
	}{
		{"10.0.0.1", 0x0011, true},    // hcaemu's QP 0xc2a11 to 0x11: logged
		{"10.0.0.1", 0x0012, false},   // hcaemu's QP 0xc2a12: nothing said
		{"10.0.0.2", 0x0c2a11, false}, // soft-RoCE in the first step: counters still
		{"10.0.0.2", 0x0c2a12, true},  // in the second: completer_retry_err moved
	} {
		if got := r.retransmitted(c.src, c.qpn); got != c.want {
			t.Errorf("%s to QPN %#x: retransmitted %v, want %v (%s)", c.src, c.qpn, got, c.want, r.summary())
		}
	}
}
