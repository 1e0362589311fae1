package rc

import (
	"testing"

	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
	"github.com/hcaemu/hcaemu/emu/transport/transporttest"
)

// The harness drives one RC QP with no device, on the fake Env of package
// transporttest (its guest memory, queues, wire and hand-driven timer).

const (
	testPD      = transporttest.PD
	testKey     = transporttest.Key
	testVA      = transporttest.VA
	testDestQPN = 0x22
	testSQPSN   = 500
	testRQPSN   = 100
	testPMTU    = 256
	testTimeout = 14 // local ACK timeout code
	testMinRNR  = 12 // min RNR timer code
)

type harness struct {
	*transporttest.Env
	qp *QP
}

func newHarness(t *testing.T, tweak func(*Config)) *harness {
	t.Helper()
	h := &harness{Env: transporttest.NewEnv(t)}
	cfg := Config{PD: testPD, DestQPN: testDestQPN, PMTU: testPMTU, SQPSN: testSQPSN, RQPSN: testRQPSN,
		SQDepth: 16, RetryCnt: 3, RNRRetry: 3, Timeout: testTimeout, MinRNRTimer: testMinRNR,
		MaxRdAtomic: 4, MaxDestRdAtomic: 4, Access: mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic}
	if tweak != nil {
		tweak(&cfg)
	}
	h.qp = New(h.Env, h.Mem(), nil)
	h.QP = h.qp
	h.qp.Configure(cfg)
	for _, s := range []transport.State{transport.StateInit, transport.StateRTR, transport.StateRTS} {
		h.qp.SetState(s)
	}
	return h
}

// post queues a send request over [off, off+n) and rings the doorbell.
func (h *harness) post(wr transport.SendWR, off, n int) {
	wr.Segs, wr.Length = h.Segs(off, n), uint32(n)
	h.Sends = append(h.Sends, wr)
	h.qp.Pump()
}

// receive delivers a packet built from f.
func (h *harness) receive(f roce.PacketFields) {
	h.T.Helper()
	buf := make([]byte, 8192)
	b, err := roce.Build(buf, &f)
	if err != nil {
		h.T.Fatalf("build %v: %v", f.BTH.Opcode, err)
	}
	pkt, err := roce.Parse(b)
	if err != nil {
		h.T.Fatalf("parse %v: %v", f.BTH.Opcode, err)
	}
	h.qp.Receive(&pkt)
}

// fire expires the armed timer.
func (h *harness) fire() {
	h.T.Helper()
	if h.Timer == 0 {
		h.T.Fatal("timer fired while not armed")
	}
	h.Timer = 0
	h.qp.Timeout()
}

// --- packets in -----------------------------------------------------------------

// ack is an ACK (or NAK, with syn) for psn from the peer.
func ack(psn uint32, syn roce.Syndrome, msn uint32) roce.PacketFields {
	f := roce.PacketFields{}
	f.BTH = roce.BTHFields{Opcode: roce.RCAcknowledge, PKey: roce.DefaultPKey, DestQP: 1, PSN: psn}
	f.AETH = roce.AETHFields{Syndrome: syn, MSN: msn}
	return f
}

// reqPacket is a request packet from the peer.
func reqPacket(op roce.Opcode, psn uint32, ackReq bool, payload []byte) roce.PacketFields {
	f := roce.PacketFields{Payload: payload}
	f.BTH = roce.BTHFields{Opcode: op, PKey: roce.DefaultPKey, DestQP: 1, PSN: psn, AckReq: ackReq}
	return f
}

// --- checks ---------------------------------------------------------------------

// wantPacket is what a test expects of a packet out.
type wantPacket struct {
	op     roce.Opcode
	psn    uint32
	ackReq bool
	syn    roce.Syndrome // ACK, NAK, READ response first/last/only, atomic ACK
	msn    uint32
}

func checkPackets(t *testing.T, got []transporttest.Packet, want []wantPacket) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d packets out, want %d: %v", len(got), len(want), describe(got))
	}
	for i, w := range want {
		f := &got[i].Fields
		if f.BTH.Opcode != w.op || f.BTH.PSN != w.psn || f.BTH.AckReq != w.ackReq || f.BTH.DestQP != testDestQPN {
			t.Errorf("packet %d: %v PSN %d AckReq %v to QP %#x, want %v PSN %d AckReq %v to QP %#x",
				i, f.BTH.Opcode, f.BTH.PSN, f.BTH.AckReq, f.BTH.DestQP, w.op, w.psn, w.ackReq, testDestQPN)
		}
		if info, _ := w.op.Info(); info.Headers&roce.HasAETH != 0 && (f.AETH.Syndrome != w.syn || f.AETH.MSN != w.msn) {
			t.Errorf("packet %d: AETH %v MSN %d, want %v MSN %d", i, f.AETH.Syndrome, f.AETH.MSN, w.syn, w.msn)
		}
	}
}

func describe(pkts []transporttest.Packet) []string {
	var out []string
	for _, p := range pkts {
		out = append(out, p.Fields.BTH.Opcode.String())
	}
	return out
}
