package uc

import (
	"bytes"
	"testing"

	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
	"github.com/hcaemu/hcaemu/emu/transport/transporttest"
)

// The QP's peer, PSNs and path MTU; its memory is the fake Env's.
const (
	testDestQPN = 0x22
	testSQPSN   = 500
	testRQPSN   = 100
	testPMTU    = 256
)

type harness struct {
	*transporttest.Env
	qp *QP
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{Env: transporttest.NewEnv(t)}
	h.qp = New(h.Env, h.Mem(), nil)
	h.QP = h.qp
	h.qp.Configure(Config{PD: transporttest.PD, DestQPN: testDestQPN, PMTU: testPMTU, SQPSN: testSQPSN, RQPSN: testRQPSN,
		Access: mr.RemoteWrite})
	transporttest.Connect(h.qp)
	return h
}

// post posts a send request over [off, off+n) and pumps the QP.
func (h *harness) post(wr transport.SendWR, off, n int) {
	h.Post(wr, off, n)
	h.qp.Pump()
}

// receive delivers a packet built from f.
func (h *harness) receive(f roce.PacketFields) {
	h.T.Helper()
	h.qp.Receive(transporttest.Parsed(h.T, f))
}

func pkt(op roce.Opcode, psn uint32, payload []byte) roce.PacketFields {
	f := roce.PacketFields{Payload: payload}
	f.BTH = roce.BTHFields{Opcode: op, PKey: roce.DefaultPKey, DestQP: 0x33, PSN: psn}
	return f
}

func TestUCSendSegments(t *testing.T) {
	tests := []struct {
		name string
		op   transport.Opcode
		n    int
		want []roce.Opcode
	}{
		{"send 0 bytes", transport.OpSend, 0, []roce.Opcode{roce.UCSendOnly}},
		{"send one PMTU", transport.OpSend, testPMTU, []roce.Opcode{roce.UCSendOnly}},
		{"send 3 packets", transport.OpSend, 2*testPMTU + 1, []roce.Opcode{roce.UCSendFirst, roce.UCSendMiddle, roce.UCSendLast}},
		{"send imm 2 packets", transport.OpSendImm, testPMTU + 5, []roce.Opcode{roce.UCSendFirst, roce.UCSendLastWithImmediate}},
		{"send imm only", transport.OpSendImm, 5, []roce.Opcode{roce.UCSendOnlyWithImmediate}},
		{"write 3 packets", transport.OpWrite, 3 * testPMTU, []roce.Opcode{roce.UCRDMAWriteFirst, roce.UCRDMAWriteMiddle, roce.UCRDMAWriteLast}},
		{"write imm only", transport.OpWriteImm, 7, []roce.Opcode{roce.UCRDMAWriteOnlyWithImmediate}},
		{"write imm 2", transport.OpWriteImm, testPMTU + 7, []roce.Opcode{roce.UCRDMAWriteFirst, roce.UCRDMAWriteLastWithImmediate}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			data := h.Fill(0, tt.n, 3)
			h.post(transport.SendWR{ID: 9, Opcode: tt.op, Signaled: true, Imm: 0xabcd, RemoteAddr: 0x1000, RKey: 77}, 0, tt.n)
			sent := h.Take()
			if len(sent) != len(tt.want) {
				t.Fatalf("%d packets, want %d", len(sent), len(tt.want))
			}
			var got []byte
			for i, p := range sent {
				f := p.Fields
				if f.BTH.Opcode != tt.want[i] || f.BTH.PSN != uint32(testSQPSN+i) || f.BTH.DestQP != testDestQPN || f.BTH.AckReq {
					t.Errorf("packet %d: %v PSN %d QP %#x ackreq %v", i, f.BTH.Opcode, f.BTH.PSN, f.BTH.DestQP, f.BTH.AckReq)
				}
				info, _ := f.BTH.Opcode.Info()
				if info.Headers&roce.HasRETH != 0 && (f.RETH.VA != 0x1000 || f.RETH.RKey != 77 || f.RETH.DMALength != uint32(tt.n)) {
					t.Errorf("RETH %+v", f.RETH)
				}
				if info.Headers&roce.HasImmDt != 0 && f.ImmDt != 0xabcd {
					t.Errorf("imm %#x", f.ImmDt)
				}
				got = append(got, p.Payload...)
			}
			transporttest.CheckPayload(t, "payload", got, data)
			transporttest.CheckCompletions(t, h.Completions(), []transport.Completion{
				{WRID: 9, Opcode: tt.op.Completion(), ByteLen: uint32(tt.n)}})
			// The next message continues the PSNs.
			h.post(transport.SendWR{ID: 10, Opcode: transport.OpSend}, 0, 1)
			if s := h.Take(); len(s) != 1 || s[0].Fields.BTH.PSN != uint32(testSQPSN+len(tt.want)) {
				t.Errorf("next message: %+v", s)
			}
		})
	}
}

func TestUCSendRefused(t *testing.T) {
	for _, op := range []transport.Opcode{transport.OpRead, transport.OpCompSwap, transport.OpSendInv} {
		h := newHarness(t)
		h.post(transport.SendWR{ID: 4, Opcode: op, Signaled: true}, 0, 8)
		if len(h.Take()) != 0 || len(h.Events) != 1 || h.qp.State() != transport.StateErr {
			t.Errorf("%v: sent, events %v, state %v", op, h.Events, h.qp.State())
		}
		transporttest.CheckCompletions(t, h.Completions(), []transport.Completion{
			{WRID: 4, Status: transport.StatusLocQPOpErr, Opcode: op.Completion()}})
	}
}

func TestUCSendBusy(t *testing.T) {
	h := newHarness(t)
	h.Busy = 1
	h.post(transport.SendWR{ID: 1, Opcode: transport.OpSend}, 0, 2*testPMTU)
	if len(h.Take()) != 0 || len(h.Completions()) != 0 || len(h.Kicks) != 1 {
		t.Fatalf("busy wire: kicks %v", h.Kicks)
	}
	h.qp.Pump()
	if len(h.Take()) != 2 || len(h.Completions()) != 1 {
		t.Fatal("not sent after the kick")
	}
}

// TestUCReceive plays packet sequences at the responder: what it places,
// what it completes, and what it drops.
func TestUCReceive(t *testing.T) {
	full := func(seed byte) []byte {
		b := make([]byte, testPMTU)
		for i := range b {
			b[i] = seed + byte(i)
		}
		return b
	}
	a, b, c := full(1), full(2), []byte("tail")
	withImm := func(f roce.PacketFields) roce.PacketFields { f.ImmDt = 0x01020304; return f }
	tests := []struct {
		name    string
		pkts    []roce.PacketFields
		want    []transport.Completion
		placed  []byte // at the receive buffer
		ePSN    uint32
		lost    uint64
		dropped bool
	}{
		{"only", []roce.PacketFields{pkt(roce.UCSendOnly, testRQPSN, c)},
			[]transport.Completion{{WRID: 1, Opcode: transport.WCRecv, ByteLen: 4, Recv: true}}, c, testRQPSN + 1, 0, false},
		{"first middle last", []roce.PacketFields{pkt(roce.UCSendFirst, testRQPSN, a), pkt(roce.UCSendMiddle, testRQPSN+1, b), withImm(pkt(roce.UCSendLastWithImmediate, testRQPSN+2, c))},
			[]transport.Completion{{WRID: 1, Opcode: transport.WCRecv, ByteLen: 2*testPMTU + 4, Recv: true}}, append(append(append([]byte{}, a...), b...), c...), testRQPSN + 3, 0, false},
		{"gap in the middle loses the message, the next completes in the same WQE",
			[]roce.PacketFields{pkt(roce.UCSendFirst, testRQPSN, a), pkt(roce.UCSendLast, testRQPSN+2, c), pkt(roce.UCSendOnly, testRQPSN+3, c)},
			[]transport.Completion{{WRID: 1, Opcode: transport.WCRecv, ByteLen: 4, Recv: true}}, c, testRQPSN + 4, 1, true},
		{"middle without first dropped", []roce.PacketFields{pkt(roce.UCSendMiddle, testRQPSN, a), pkt(roce.UCSendLast, testRQPSN+1, c)},
			nil, nil, testRQPSN + 2, 0, true},
		{"first after first abandons the first message", []roce.PacketFields{pkt(roce.UCSendFirst, testRQPSN, a), pkt(roce.UCSendFirst, testRQPSN+1, b), pkt(roce.UCSendLast, testRQPSN+2, c)},
			[]transport.Completion{{WRID: 1, Opcode: transport.WCRecv, ByteLen: testPMTU + 4, Recv: true}}, append(append([]byte{}, b...), c...), testRQPSN + 3, 1, false},
		{"wrong PSN only starts anew", []roce.PacketFields{pkt(roce.UCSendOnly, testRQPSN+50, c)},
			[]transport.Completion{{WRID: 1, Opcode: transport.WCRecv, ByteLen: 4, Recv: true}}, c, testRQPSN + 51, 0, false},
		{"a write inside a send is dropped", []roce.PacketFields{pkt(roce.UCSendFirst, testRQPSN, a), pkt(roce.UCRDMAWriteMiddle, testRQPSN+1, b), pkt(roce.UCSendLast, testRQPSN+2, c)},
			[]transport.Completion{{WRID: 1, Opcode: transport.WCRecv, ByteLen: testPMTU + 4, Recv: true}}, append(append([]byte{}, a...), c...), testRQPSN + 3, 0, true},
		{"short middle drops the message", []roce.PacketFields{pkt(roce.UCSendFirst, testRQPSN, a), pkt(roce.UCSendMiddle, testRQPSN+1, append(append([]byte{}, a...), b...)), pkt(roce.UCSendLast, testRQPSN+2, c)},
			nil, nil, testRQPSN + 3, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.PostRecv(1, 0, 4096)
			for _, f := range tt.pkts {
				h.receive(f)
			}
			transporttest.CheckCompletions(t, h.Completions(), tt.want)
			if tt.placed != nil {
				transporttest.CheckPayload(t, "placed", h.BytesAt(0, len(tt.placed)), tt.placed)
			}
			st := h.qp.Stats()
			if h.qp.ExpectedPSN() != tt.ePSN || st.MessagesLost != tt.lost || (st.Dropped > 0) != tt.dropped {
				t.Errorf("ePSN %d lost %d dropped %d, want %d %d %v", h.qp.ExpectedPSN(), st.MessagesLost, st.Dropped, tt.ePSN, tt.lost, tt.dropped)
			}
			if len(h.Take()) != 0 || len(h.Events) != 0 {
				t.Errorf("UC answered or failed: %v", h.Events)
			}
		})
	}
}

func TestUCReceiveNoWQE(t *testing.T) {
	h := newHarness(t)
	h.receive(pkt(roce.UCSendOnly, testRQPSN, []byte("x")))
	if len(h.Completions()) != 0 || h.qp.Stats().Dropped != 1 {
		t.Fatal("a SEND without a receive request was not dropped")
	}
	h.PostRecv(1, 0, 16)
	h.receive(pkt(roce.UCSendOnly, testRQPSN+1, []byte("y")))
	transporttest.CheckCompletions(t, h.Completions(), []transport.Completion{{WRID: 1, Opcode: transport.WCRecv, ByteLen: 1, Recv: true}})
}

func TestUCReceiveTooLong(t *testing.T) {
	h := newHarness(t)
	h.PostRecv(1, 0, 3)
	h.receive(pkt(roce.UCSendOnly, testRQPSN, []byte("four")))
	transporttest.CheckCompletions(t, h.Completions(), []transport.Completion{{WRID: 1, Status: transport.StatusLocLenErr, Opcode: transport.WCRecv, Recv: true}})
	if h.qp.State() != transport.StateErr {
		t.Error("a local length error did not move the QP to ERR")
	}
	if !bytes.Equal(h.BytesAt(0, 4), make([]byte, 4)) {
		t.Error("bytes placed")
	}
}

func TestUCWrite(t *testing.T) {
	data := bytes.Repeat([]byte{0x5a}, testPMTU)
	reth := func(f roce.PacketFields, va uint64, key, n uint32) roce.PacketFields {
		f.RETH = roce.RETHFields{VA: va, RKey: key, DMALength: n}
		return f
	}
	tests := []struct {
		name   string
		access uint32
		pkts   []roce.PacketFields
		at     int // region offset the data should be at (-1: nowhere)
		comps  int
	}{
		{"write only", mr.RemoteWrite, []roce.PacketFields{reth(pkt(roce.UCRDMAWriteOnly, testRQPSN, data), transporttest.VA+4096, transporttest.Key, testPMTU)}, 4096, 0},
		{"write imm", mr.RemoteWrite, []roce.PacketFields{func() roce.PacketFields {
			f := reth(pkt(roce.UCRDMAWriteOnlyWithImmediate, testRQPSN, data), transporttest.VA+4096, transporttest.Key, testPMTU)
			f.ImmDt = 5
			return f
		}()}, 4096, 1},
		{"wrong rkey", mr.RemoteWrite, []roce.PacketFields{reth(pkt(roce.UCRDMAWriteOnly, testRQPSN, data), transporttest.VA+4096, transporttest.Key+1, testPMTU)}, -1, 0},
		{"no remote write on the QP", 0, []roce.PacketFields{reth(pkt(roce.UCRDMAWriteOnly, testRQPSN, data), transporttest.VA+4096, transporttest.Key, testPMTU)}, -1, 0},
		{"beyond the region", mr.RemoteWrite, []roce.PacketFields{reth(pkt(roce.UCRDMAWriteOnly, testRQPSN, data), transporttest.VA+transporttest.Pages*4096-10, transporttest.Key, testPMTU)}, -1, 0},
		{"longer than the RETH", mr.RemoteWrite, []roce.PacketFields{reth(pkt(roce.UCRDMAWriteOnly, testRQPSN, data), transporttest.VA+4096, transporttest.Key, testPMTU-1)}, -1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			cfg := h.qp.cfg
			cfg.Access = tt.access
			h.qp.Configure(cfg)
			h.PostRecv(1, 0, 16)
			for _, f := range tt.pkts {
				h.receive(f)
			}
			if tt.at >= 0 {
				transporttest.CheckPayload(t, "written", h.BytesAt(tt.at, len(data)), data)
			} else {
				for off := 0; off < transporttest.Pages*4096; off += 4096 {
					if bytes.Contains(h.BytesAt(off, 4096), []byte{0x5a, 0x5a, 0x5a, 0x5a}) {
						t.Fatalf("data written at page %d", off/4096)
					}
				}
			}
			if len(h.Completions()) != tt.comps || len(h.Events) != 0 {
				t.Errorf("completions/events: %v", h.Events)
			}
		})
	}
}

// TestUCHeldRecv: the receive request a lost message took stays the QP's:
// the next message completes in it, and the QP going to ERR flushes it
// (it is off the queue).
func TestUCHeldRecv(t *testing.T) {
	h := newHarness(t)
	h.PostRecv(1, 0, 4096)
	h.PostRecv(2, 4096, 4096)
	full := make([]byte, testPMTU)
	h.receive(pkt(roce.UCSendFirst, testRQPSN, full))
	h.receive(pkt(roce.UCSendLast, testRQPSN+2, []byte("x"))) // the middle was lost
	if len(h.Recvs) != 1 || len(h.Completions()) != 0 {
		t.Fatalf("%d receives posted", len(h.Recvs))
	}
	h.qp.SetState(transport.StateErr)
	transporttest.CheckCompletions(t, h.Completions(), []transport.Completion{
		{WRID: 1, Status: transport.StatusWRFlushErr, Opcode: transport.WCRecv, Recv: true}})
}

// TestUCPumpBudget: one Pump takes on at most pumpPackets packets and
// requests and asks to be called again for the rest.
func TestUCPumpBudget(t *testing.T) {
	h := newHarness(t)
	const n = 300 // one packet each: 600 > pumpPackets
	for i := range n {
		h.Post(transport.SendWR{ID: uint64(i), Opcode: transport.OpSend}, 0, 1)
	}
	h.qp.Pump()
	first := len(h.Take())
	if first >= n || first < pumpPackets/2-1 || len(h.Kicks) != 1 || len(h.Completions()) != first {
		t.Fatalf("first Pump: %d packets, kicks %v", first, h.Kicks)
	}
	h.qp.Pump()
	if got := len(h.Take()); first+got != n || len(h.Completions()) != n-first {
		t.Fatalf("second Pump sent %d packets", got)
	}
}
