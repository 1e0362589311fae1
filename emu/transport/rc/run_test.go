package rc

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
	"github.com/hcaemu/hcaemu/emu/transport/transporttest"
)

// TestRequesterRuns: on a wire that carries runs, the MIDDLE packets of a
// SEND or WRITE go as runs of at most what the wire takes; the first and
// last packets go alone, and the payload is the message's, in order. On a
// wire that takes none, every packet goes alone, as before.
func TestRequesterRuns(t *testing.T) {
	const length = 10*testPMTU + 10 // 11 packets: FIRST, 9 MIDDLE, LAST
	for _, c := range []struct {
		name  string
		op    transport.Opcode
		limit int
		want  []wantPacket
		runs  []int
	}{
		{"WRITE, runs of 4", transport.OpWrite, 4, []wantPacket{
			{op: roce.RCRDMAWriteFirst, psn: testSQPSN},
			{op: roce.RCRDMAWriteMiddle, psn: testSQPSN + 1},
			{op: roce.RCRDMAWriteMiddle, psn: testSQPSN + 5},
			{op: roce.RCRDMAWriteMiddle, psn: testSQPSN + 9},
			{op: roce.RCRDMAWriteLast, psn: testSQPSN + 10, ackReq: true},
		}, []int{0, 4, 4, 0, 0}}, // one MIDDLE left: it goes alone
		{"SEND, one run", transport.OpSend, 100, []wantPacket{
			{op: roce.RCSendFirst, psn: testSQPSN},
			{op: roce.RCSendMiddle, psn: testSQPSN + 1},
			{op: roce.RCSendLast, psn: testSQPSN + 10, ackReq: true},
		}, []int{0, 9, 0}},
		{"no runs", transport.OpWrite, 0, nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.RunLimit = c.limit
			want := h.Fill(0, length, 9)
			h.post(transport.SendWR{ID: 1, Opcode: c.op, Signaled: true, RemoteAddr: 0x1000, RKey: 9}, 0, length)
			sent := h.Take()
			if c.want == nil {
				if len(sent) != 11 {
					t.Fatalf("%d packets, want 11 one at a time: %v", len(sent), describe(sent))
				}
				for _, p := range sent {
					if p.Run != 0 {
						t.Fatalf("a run (%d) on a wire that takes none", p.Run)
					}
				}
			} else {
				checkPackets(t, sent, c.want)
				for i, p := range sent {
					if p.Run != c.runs[i] {
						t.Errorf("packet %d stands for %d packets, want %d", i, p.Run, c.runs[i])
					}
				}
			}
			var got []byte
			for _, p := range sent {
				got = append(got, p.Payload...)
			}
			transporttest.CheckPayload(t, "payload on the wire", got, want)
		})
	}
}

// The runs equivalence fuzzer plays a peer sending requests to a responder
// twice over: one responder gets each run whole (ReceiveRunFrom), the other
// the same run taken apart into its packets, one at a time (Receive), as a
// wire that carries no runs would deliver them; a third gets it whole with
// its payload lent (read from an mr.Source, as from another HCA's memory). Everything they do must be
// the same, byte for byte: packets out, completions, errors, guest memory,
// and the responder's state.

// runStep is one step of the peer, decoded from 4 bytes.
type runStep struct {
	kind   uint8 // see runKinds
	psnOff int   // PSN relative to the responder's expected PSN
	n      int   // packets a run stands for
	per    int   // payload bytes per packet of a run
	ackReq bool
	badKey bool // a FIRST or ONLY WRITE names a key that is not the region's
	length uint32
}

var runKinds = []roce.Opcode{
	roce.RCSendFirst, roce.RCSendMiddle, roce.RCSendLast, roce.RCSendOnly,
	roce.RCRDMAWriteFirst, roce.RCRDMAWriteMiddle, roce.RCRDMAWriteLast, roce.RCRDMAWriteOnly,
	roce.RCRDMAReadResponseMiddle, // a run of responses: never executed as one
}

func decodeStep(b []byte) runStep {
	s := runStep{kind: b[0] % uint8(len(runKinds)+1), psnOff: int(b[1]%7) - 3, n: 1 + int(b[2]%6)}
	s.per = testPMTU
	if b[3]%4 == 3 {
		s.per = 2 * testPMTU // a valid PMTU that is not the QP's
	}
	s.ackReq = b[3]&8 != 0
	s.badKey = b[3]&16 != 0
	s.length = uint32(b[2]) * 97
	return s
}

// How a harness gets the runs.
const (
	runWhole = iota
	runApart
	runLent
)

// lentBytes is a lent payload for the tests: bytes behind an mr.Source.
type lentBytes []byte

func (b lentBytes) Len() int { return len(b) }

func (b lentBytes) ReadAt(p []byte, off uint64) error {
	if off > uint64(len(b)) || uint64(len(p)) > uint64(len(b))-off {
		return mr.ErrStale
	}
	copy(p, b[off:])
	return nil
}

// apply plays step s on h, giving it runs as how says.
func (h *harness) apply(t *testing.T, s runStep, how int) {
	t.Helper()
	psn := roce.PSNAdd(h.qp.ePSN, s.psnOff)
	if int(s.kind) == len(runKinds) {
		// The region goes: the rest of a message in flight finds it gone.
		delete(h.Regions, mr.Handle(testKey))
		return
	}
	op := runKinds[s.kind]
	f := reqPacket(op, psn, s.ackReq, nil)
	n := 1
	size := s.per
	switch op {
	case roce.RCSendMiddle, roce.RCRDMAWriteMiddle, roce.RCRDMAReadResponseMiddle:
		n = s.n
	case roce.RCSendLast, roce.RCRDMAWriteLast, roce.RCSendOnly, roce.RCRDMAWriteOnly:
		size = 1 + int(s.length%700)
		if op == roce.RCRDMAWriteLast && s.n%2 == 0 && h.qp.writeRem > 0 && h.qp.writeRem <= testPMTU {
			size = int(h.qp.writeRem) // the rest of the WRITE
		}
	}
	if op == roce.RCRDMAWriteFirst || op == roce.RCRDMAWriteOnly {
		key := uint32(testKey)
		if s.badKey {
			key++
		}
		f.RETH = roce.RETHFields{VA: testVA + uint64(s.length), RKey: key, DMALength: s.length * 3}
	}
	f.Payload = bytes.Repeat([]byte{byte(s.length) | 1}, n*size)
	for i := range f.Payload {
		f.Payload[i] += byte(i)
	}
	b, err := roce.BuildRun(make([]byte, 8192), &f, n)
	if err != nil {
		t.Fatalf("build %v ×%d: %v", op, n, err)
	}
	pkt, err := roce.ParseRun(b, n)
	if err != nil {
		t.Fatalf("parse %v ×%d: %v", op, n, err)
	}
	switch {
	case how == runWhole:
		h.qp.ReceiveRunFrom(&pkt, n, netip.Addr{}, netip.Addr{}, nil, nil)
		return
	case how == runLent && n > 1:
		lent := f
		lent.Payload = nil
		b, err := roce.BuildRunLent(make([]byte, 64), &lent, n, len(f.Payload))
		if err != nil {
			t.Fatalf("build lent %v ×%d: %v", op, n, err)
		}
		pkt, err := roce.ParseRunLent(b, n, len(f.Payload))
		if err != nil || len(pkt.Payload) != 0 {
			t.Fatalf("parse lent %v ×%d: %v", op, n, err)
		}
		h.qp.ReceiveRunFrom(&pkt, n, netip.Addr{}, netip.Addr{}, lentBytes(f.Payload), make([]byte, len(f.Payload)))
		return
	case how == runLent:
		h.qp.ReceiveRunFrom(&pkt, n, netip.Addr{}, netip.Addr{}, nil, nil)
		return
	}
	var bth [roce.BTHSize]byte
	for i := range n {
		one := pkt
		if n > 1 {
			one = roce.RunPacket(&pkt, i, n, bth[:])
		}
		h.qp.Receive(&one)
	}
}

// responderState is what the equivalence compares besides the Env.
type responderState struct {
	EPSN, MSN, WriteRem uint32
	WriteVA, RecvOff    uint64
	InSend, InWrite     bool
	NAKSent             bool
	State               transport.State
}

func (h *harness) responderState() responderState {
	return responderState{EPSN: h.qp.ePSN, MSN: h.qp.msn, WriteRem: uint32(h.qp.writeRem), WriteVA: h.qp.writeVA,
		RecvOff: h.qp.recvOff, InSend: h.qp.inSend, InWrite: h.qp.inWrite, NAKSent: h.qp.nakSent, State: h.qp.State()}
}

// FuzzRunEquivalent: a run received whole does exactly what its packets
// received one at a time do (see above).
// runSeeds are programs of runSteps for the fuzz targets below.
func runSeeds() [][]byte {
	// WRITE FIRST, a run of 3, LAST; a SEND FIRST, a run of 5, LAST; the
	// same again.
	whole := []byte{4, 3, 4, 0, 5, 3, 2, 8, 6, 3, 7, 0, 0, 3, 0, 0, 1, 3, 4, 8, 2, 3, 0, 8}
	return [][]byte{
		append(whole, whole...),
		// A run out of sequence, a duplicate run, a run of a foreign PMTU.
		{4, 3, 9, 0, 5, 5, 2, 0, 5, 1, 2, 0, 5, 3, 2, 3, 5, 3, 2, 0},
		// A run longer than the WRITE, a run past the receive buffer.
		{4, 3, 1, 0, 5, 3, 5, 0, 0, 3, 0, 0, 1, 3, 5, 0, 1, 3, 5, 0, 1, 3, 5, 0},
		// The region goes mid-message; a bad key; a run of READ responses.
		{4, 3, 40, 0, 5, 3, 3, 0, 9, 0, 0, 0, 5, 3, 3, 0, 4, 3, 4, 16, 8, 3, 3, 0},
	}
}

func FuzzRunEquivalent(f *testing.F) {
	for _, prog := range runSeeds() {
		f.Add(prog)
	}
	f.Fuzz(func(t *testing.T, prog []byte) {
		whole, apart, lent := newHarness(t, nil), newHarness(t, nil), newHarness(t, nil)
		for _, h := range []*harness{whole, apart, lent} {
			h.PostRecv(100, 0, 3000)
			h.PostRecv(101, 4096, 700)
			h.PostRecv(102, 8192, 8000)
		}
		for step := 0; len(prog) >= 4 && step < 64; step++ {
			s := decodeStep(prog[:4])
			prog = prog[4:]
			whole.apply(t, s, runWhole)
			apart.apply(t, s, runApart)
			lent.apply(t, s, runLent)
			want := apart.Take()
			wantDone := apart.Completions()
			for _, h := range []*harness{whole, lent} {
				name := map[*harness]string{whole: "whole", lent: "lent"}[h]
				if diff := cmp.Diff(want, h.Take()); diff != "" {
					t.Fatalf("step %d %+v: packets out differ (-apart +%s):\n%s", step, s, name, diff)
				}
				if diff := cmp.Diff(wantDone, h.Completions()); diff != "" {
					t.Fatalf("step %d %+v: completions differ (-apart +%s):\n%s", step, s, name, diff)
				}
				if diff := cmp.Diff(apart.responderState(), h.responderState()); diff != "" {
					t.Fatalf("step %d %+v: responder state differs (-apart +%s):\n%s", step, s, name, diff)
				}
				if diff := cmp.Diff(apart.Events, h.Events); diff != "" {
					t.Fatalf("step %d %+v: events differ (-apart +%s):\n%s", step, s, name, diff)
				}
				if !bytes.Equal(apart.RAM.Mem, h.RAM.Mem) {
					t.Fatalf("step %d %+v: guest memory differs (apart, %s)", step, s, name)
				}
			}
		}
	})
}

// FuzzHeldEquivalent: a responder that holds its responses over windows of
// steps (rc.QP.HoldResponses: a batch of packets taken at once) does what
// one answering each packet at once does: the same completions, events,
// responder state and guest memory, and the same responses in the same
// order, but that each unbroken series of plain ACKs in a window collapses
// into its last (ACKs are cumulative).
func FuzzHeldEquivalent(f *testing.F) {
	for i, prog := range runSeeds() {
		f.Add(uint8(i+2), prog)
	}
	f.Fuzz(func(t *testing.T, window uint8, prog []byte) {
		every := 1 + int(window%8)
		eager, held := newHarness(t, nil), newHarness(t, nil)
		for _, h := range []*harness{eager, held} {
			h.PostRecv(100, 0, 3000)
			h.PostRecv(101, 4096, 700)
			h.PostRecv(102, 8192, 8000)
		}
		var eagerOut []transporttest.Packet
		var eagerDone []transport.Completion
		for step := 0; len(prog) >= 4 && step < 64; step++ {
			s := decodeStep(prog[:4])
			prog = prog[4:]
			if step%every == 0 {
				held.qp.HoldResponses()
			}
			eager.apply(t, s, runApart)
			held.apply(t, s, runApart)
			eagerOut = append(eagerOut, eager.Take()...)
			eagerDone = append(eagerDone, eager.Completions()...)
			if (step+1)%every != 0 && len(prog) >= 4 && step+1 < 64 {
				continue
			}
			held.qp.ReleaseResponses()
			if diff := cmp.Diff(collapseACKs(eagerOut), held.Take()); diff != "" {
				t.Fatalf("step %d: packets out differ (-eager, ACKs collapsed +held):\n%s", step, diff)
			}
			if diff := cmp.Diff(eagerDone, held.Completions()); diff != "" {
				t.Fatalf("step %d: completions differ (-eager +held):\n%s", step, diff)
			}
			if diff := cmp.Diff(eager.responderState(), held.responderState()); diff != "" {
				t.Fatalf("step %d: responder state differs (-eager +held):\n%s", step, diff)
			}
			if diff := cmp.Diff(eager.Events, held.Events); diff != "" {
				t.Fatalf("step %d: events differ (-eager +held):\n%s", step, diff)
			}
			if !bytes.Equal(eager.RAM.Mem, held.RAM.Mem) {
				t.Fatalf("step %d: guest memory differs", step)
			}
			eagerOut, eagerDone = nil, nil
		}
	})
}

// collapseACKs keeps the last of each unbroken series of plain ACKs.
func collapseACKs(pkts []transporttest.Packet) []transporttest.Packet {
	plain := func(p *transporttest.Packet) bool {
		return p.Fields.BTH.Opcode == roce.RCAcknowledge && p.Fields.AETH.Syndrome.IsACK()
	}
	var out []transporttest.Packet
	for i := range pkts {
		if n := len(out); n > 0 && plain(&pkts[i]) && plain(&out[n-1]) {
			out[n-1] = pkts[i]
			continue
		}
		out = append(out, pkts[i])
	}
	return out
}
