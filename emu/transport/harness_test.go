package transport

import (
	"bytes"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/roce"
)

// The harness drives one RC QP with no device: guest memory is a byte
// slice with one registered region, the send and receive queues are
// slices, packets out are recorded, and the timer is armed and fired by
// hand.

const (
	testPD      = 7
	testKey     = 1 << 8 // region handle 1, variant 0
	testVA      = 0x7000_0000
	testRAMBase = 0x10_0000
	testPages   = 16
	testDestQPN = 0x22
	testSQPSN   = 500
	testRQPSN   = 100
	testPMTU    = 256
	testTimeout = 14 // local ACK timeout code
	testMinRNR  = 12 // min RNR timer code
)

type regionTable map[uint32]*mr.Region

func (t regionTable) Region(handle uint32) *mr.Region { return t[handle] }

// sentPacket is a packet the QP put on the wire.
type sentPacket struct {
	f       roce.PacketFields
	payload []byte
}

type harness struct {
	t       *testing.T
	qp      *RC
	ram     *dma.Flat
	regions regionTable
	sends   []SendWR
	recvs   []RecvWR
	sent    []sentPacket
	done    []Completion
	events  []Event
	kicks   []Work
	timer   time.Duration // armed duration; 0: stopped
	noPath  bool
}

func newHarness(t *testing.T, tweak func(*RCConfig)) *harness {
	t.Helper()
	h := &harness{t: t, ram: dma.NewFlat(testRAMBase, testPages*dma.PageSize), regions: regionTable{}}
	pages := make(dma.Pages, testPages)
	for i := range pages {
		pages[i] = testRAMBase + uint64(i)*dma.PageSize
	}
	h.regions[mr.Handle(testKey)] = &mr.Region{PD: testPD, Access: mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic,
		Valid: true, Start: testVA, Length: testPages * dma.PageSize, Pages: pages, LKey: testKey, RKey: testKey}
	cfg := RCConfig{PD: testPD, DestQPN: testDestQPN, PMTU: testPMTU, SQPSN: testSQPSN, RQPSN: testRQPSN,
		SQDepth: 16, RetryCnt: 3, RNRRetry: 3, Timeout: testTimeout, MinRNRTimer: testMinRNR,
		MaxRdAtomic: 4, MaxDestRdAtomic: 4, Access: mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic}
	if tweak != nil {
		tweak(&cfg)
	}
	h.qp = NewRC(h, h.mem(), nil)
	h.qp.Configure(cfg)
	for _, s := range []State{StateInit, StateRTR, StateRTS} {
		h.qp.SetState(s)
	}
	return h
}

func (h *harness) mem() mr.Space { return mr.Space{Mem: h.ram, Regions: h.regions} }

// bytesAt is guest memory at region offset off.
func (h *harness) bytesAt(off, n int) []byte { return h.ram.Mem[off : off+n] }

// fill writes a recognisable pattern at region offset off.
func (h *harness) fill(off, n int, seed byte) []byte {
	b := h.bytesAt(off, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return append([]byte(nil), b...)
}

// segs is the segment list of [off, off+n) of the region.
func (h *harness) segs(off, n int) []mr.Seg {
	h.t.Helper()
	segs, _, err := h.mem().Segs(testPD, []mr.SGE{{Addr: testVA + uint64(off), Length: uint32(n), LKey: testKey}}, true)
	if err != nil {
		h.t.Fatal(err)
	}
	return segs
}

// post queues a send request over [off, off+n) and rings the doorbell.
func (h *harness) post(wr SendWR, off, n int) {
	wr.Segs, wr.Length = h.segs(off, n), uint32(n)
	h.sends = append(h.sends, wr)
	h.qp.Pump()
}

// postRecv queues a receive request over [off, off+n).
func (h *harness) postRecv(id uint64, off, n int) {
	h.recvs = append(h.recvs, RecvWR{ID: id, Segs: h.segs(off, n), Cap: uint32(n)})
}

// receive delivers a packet built from f.
func (h *harness) receive(f roce.PacketFields) {
	h.t.Helper()
	buf := make([]byte, 8192)
	b, err := roce.Build(buf, &f)
	if err != nil {
		h.t.Fatalf("build %v: %v", f.BTH.Opcode, err)
	}
	pkt, err := roce.Parse(b)
	if err != nil {
		h.t.Fatalf("parse %v: %v", f.BTH.Opcode, err)
	}
	h.qp.Receive(&pkt)
}

// fire expires the armed timer.
func (h *harness) fire() {
	h.t.Helper()
	if h.timer == 0 {
		h.t.Fatal("timer fired while not armed")
	}
	h.timer = 0
	h.qp.Timeout()
}

// take returns and forgets the packets sent so far.
func (h *harness) take() []sentPacket {
	sent := h.sent
	h.sent = nil
	return sent
}

// completions returns and forgets the completions so far.
func (h *harness) completions() []Completion {
	done := h.done
	h.done = nil
	return done
}

// --- Env ------------------------------------------------------------------------

func (h *harness) PendingSends() (uint32, bool) { return uint32(len(h.sends)), true }

func (h *harness) TakeSend() (SendWR, bool) {
	wr := h.sends[0]
	h.sends = h.sends[1:]
	return wr, true
}

func (h *harness) PeekRecv() (RecvWR, Status, bool) {
	if len(h.recvs) == 0 {
		return RecvWR{}, 0, false
	}
	return h.recvs[0], StatusSuccess, true
}

func (h *harness) PopRecv() { h.recvs = h.recvs[1:] }

func (h *harness) Complete(c Completion) { h.done = append(h.done, c) }

func (h *harness) LocalOp(*SendWR) Status { return StatusSuccess }

func (h *harness) Error(ev Event) {
	h.events = append(h.events, ev)
	h.qp.SetState(StateErr)
}

func (h *harness) Drained() {}

func (h *harness) Path() (Path, bool) { return Path{}, !h.noPath }

func (h *harness) PathTo(*AddressHandle) (Path, bool) { return Path{}, !h.noPath }

func (h *harness) Transmit(_ Path, f roce.PacketFields, payload Payload) error {
	b := make([]byte, payload.Len)
	if payload.Len > 0 {
		if err := payload.Gather(h.mem(), b); err != nil {
			return err
		}
	}
	h.sent = append(h.sent, sentPacket{f: f, payload: b})
	return nil
}

func (h *harness) ArmTimer(d time.Duration) { h.timer = d }

func (h *harness) StopTimer() { h.timer = 0 }

func (h *harness) Kick(work Work, _ bool) { h.kicks = append(h.kicks, work) }

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

func checkPackets(t *testing.T, got []sentPacket, want []wantPacket) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d packets out, want %d: %v", len(got), len(want), describe(got))
	}
	for i, w := range want {
		f := &got[i].f
		if f.BTH.Opcode != w.op || f.BTH.PSN != w.psn || f.BTH.AckReq != w.ackReq || f.BTH.DestQP != testDestQPN {
			t.Errorf("packet %d: %v PSN %d AckReq %v to QP %#x, want %v PSN %d AckReq %v to QP %#x",
				i, f.BTH.Opcode, f.BTH.PSN, f.BTH.AckReq, f.BTH.DestQP, w.op, w.psn, w.ackReq, testDestQPN)
		}
		if info, _ := w.op.Info(); info.Headers&roce.HasAETH != 0 && (f.AETH.Syndrome != w.syn || f.AETH.MSN != w.msn) {
			t.Errorf("packet %d: AETH %v MSN %d, want %v MSN %d", i, f.AETH.Syndrome, f.AETH.MSN, w.syn, w.msn)
		}
	}
}

func describe(pkts []sentPacket) []string {
	var out []string
	for _, p := range pkts {
		out = append(out, p.f.BTH.Opcode.String())
	}
	return out
}

// checkCompletions compares completions on the fields a test names.
func checkCompletions(t *testing.T, got, want []Completion) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d completions, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.WRID != w.WRID || g.Status != w.Status || g.Opcode != w.Opcode || g.ByteLen != w.ByteLen || g.Recv != w.Recv {
			t.Errorf("completion %d: %+v, want %+v", i, g, w)
		}
	}
}

func checkPayload(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Errorf("%s: %d bytes differ from the %d expected", what, len(got), len(want))
	}
}
