package hca

import (
	"time"

	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
	"github.com/hcaemu/hcaemu/emu/transport/rc"
)

// Fault injection inside an HCA. The device asks its FaultHook at named
// points ("a command X is about to run", "a completion for QP q is about
// to be written", "the responder of QP q is about to act on PSN p", "the
// device is about to reach a WR's buffers") and does what the answer says,
// with the effects its driver handles: an error in ERR, a completion
// status, an async event, a NAK. The hook (package emu/fault) owns the
// rules, schedules, counters and log; the device model owns the states the
// actions change, and maps them to its own formats.

// FaultPoint names a point where the device asks its fault hook.
type FaultPoint uint8

// The points.
const (
	// FaultAtCommand: a command is about to run (Command).
	FaultAtCommand FaultPoint = iota + 1
	// FaultAtCompletion: a completion of QPN's work request (WROpcode,
	// Size, Status) is about to be written.
	FaultAtCompletion
	// FaultAtResponder: QPN's RC responder is about to execute and
	// acknowledge the in-order request packet PSN (Opcode, Size).
	FaultAtResponder
	// FaultAtDMA: the device is about to reach the buffers of QPN's work
	// request (WROpcode, Key: the first SGE's lkey, Size).
	FaultAtDMA
)

var faultPointNames = [...]string{FaultAtCommand: "command", FaultAtCompletion: "completion",
	FaultAtResponder: "responder", FaultAtDMA: "dma"}

func (p FaultPoint) String() string {
	if int(p) < len(faultPointNames) && faultPointNames[p] != "" {
		return faultPointNames[p]
	}
	return "unknown"
}

// FaultEvent is what the device tells the hook at a point.
type FaultEvent struct {
	Point    FaultPoint
	Command  Command // FaultAtCommand
	QPN      uint32  // the other points: the local QP's number
	WROpcode string  // completion, DMA: the work request's opcode (WROpcodeNames)
	Key      uint32  // DMA: the lkey of the first SGE; responder: the RETH's or AtomicETH's rkey
	HasKey   bool
	Size     uint32      // message (completion: byte_len; responder: payload) size
	Status   uint32      // completion: the status the device was to write
	PSN      uint32      // responder: the request's PSN
	Opcode   roce.Opcode // responder: the request's BTH opcode
}

// FaultActionKind is what a device fault does.
type FaultActionKind uint8

// The device's fault actions.
const (
	FaultNone           FaultActionKind = iota
	FaultFailCommand                    // the command fails with Errno in ERR
	FaultCompleteStatus                 // the completion carries Status; an error status moves the QP to ERR
	FaultQPError                        // the QP moves to ERR with async event Event
	FaultCQError                        // CQ_ERR on the completion's CQ; it takes no more CQEs
	FaultSRQError                       // SRQ_ERR on the QP's SRQ
	FaultSRQLimit                       // SRQ_LIMIT_REACHED on the QP's SRQ
	FaultPortDown                       // PORT_ERR; QUERY_PORT says DOWN and frames are lost for Duration; then PORT_ACTIVE
	FaultGIDChange                      // GID_CHANGE on port 1
	FaultDeviceFatal                    // DEVICE_FATAL; the device does no more engine work until reset
	FaultFailDMA                        // the DMA to the WR's buffers fails: the WR completes with LOC_PROT_ERR
	FaultNAK                            // the responder answers with a NAK of code NAK
	FaultRNRNAK                         // the responder answers with an RNR NAK of timer RNRTimer
	FaultSuppressACK                    // the responder executes the request but sends no ACK for it
)

// FaultAction is the hook's answer.
type FaultAction struct {
	Kind     FaultActionKind
	Errno    uint32        // fail_command
	Status   uint32        // complete_status: an ibv_wc_status
	Event    Event         // qp_error: the QP's async event
	NAK      roce.NAKCode  // nak
	RNRTimer uint8         // rnr_nak: IB timer code
	Duration time.Duration // port_down
}

// FaultHook decides, at each point, whether the device misbehaves. It is
// called under the device lock, on the goroutine doing the device's work,
// so the events a device produces reach it in a deterministic order.
type FaultHook interface {
	Fault(ev *FaultEvent) FaultAction
}

// WROpcodeNames names the work-request opcodes a fault can match: the send
// opcodes and the receive ones (ibv_wc_opcode's, spelled as the verbs do).
var WROpcodeNames = [...]string{
	transport.WCSend: "send", transport.WCWrite: "rdma_write", transport.WCRead: "rdma_read",
	transport.WCCompSwap: "comp_swap", transport.WCFetchAdd: "fetch_add",
	transport.WCLocalInv: "local_inv", transport.WCFastReg: "fast_reg_mr",
	transport.WCRecv: "recv", transport.WCRecvWriteImm: "recv_rdma_with_imm",
}

// ResponderEvent is the FaultAtResponder event of the in-order request
// packet pkt of local QP qpn: its PSN, opcode and payload size, and the
// rkey of its RETH or AtomicETH.
func ResponderEvent(qpn uint32, pkt *roce.Packet) FaultEvent {
	ev := FaultEvent{Point: FaultAtResponder, QPN: qpn, PSN: pkt.BTH.PSN(), Opcode: pkt.Opcode(), Size: uint32(len(pkt.Payload))}
	switch {
	case pkt.Headers()&roce.HasRETH != 0:
		ev.Key, ev.HasKey = pkt.RETH.RKey(), true
	case pkt.Headers()&roce.HasAtomicETH != 0:
		ev.Key, ev.HasKey = pkt.AtomicETH.RKey(), true
	}
	return ev
}

// ResponderAnswer is what the RC responder does for a transport action
// (nak, rnr_nak, suppress_ack); false for an action the device carries
// out itself.
func ResponderAnswer(act FaultAction) (rc.ResponderFault, bool) {
	switch act.Kind {
	case FaultNAK:
		return rc.ResponderFault{Kind: rc.FaultNAK, NAK: act.NAK}, true
	case FaultRNRNAK:
		return rc.ResponderFault{Kind: rc.FaultRNRNAK, RNRTimer: act.RNRTimer}, true
	case FaultSuppressACK:
		return rc.ResponderFault{Kind: rc.FaultSuppressACK}, true
	}
	return rc.ResponderFault{}, false
}

// WROpcodeName is the fault plans' name of a completion opcode ("" for
// one they have none for).
func WROpcodeName(op transport.WCOpcode) string {
	if int(op) < len(WROpcodeNames) {
		return WROpcodeNames[op]
	}
	return ""
}

// PortHold is the timer of a port a fault holds down (port_down): each
// Hold restarts it; when it runs out, up runs with the device lock held,
// unless a later Hold or a Release came, or the device closed.
type PortHold struct {
	gen   uint64
	timer *time.Timer
}

// Hold (device lock held) runs up after dur under the device lock, which
// the timer takes with c.Lock and releases with unlock (the model's own,
// when it publishes before the lock goes).
func (h *PortHold) Hold(c *Core, dur time.Duration, unlock, up func()) {
	h.gen++
	gen := h.gen
	if h.timer != nil {
		h.timer.Stop()
	}
	h.timer = time.AfterFunc(dur, func() {
		c.Lock()
		defer unlock()
		if c.Closed || h.gen != gen {
			return
		}
		h.timer = nil
		up()
	})
}

// Release (device lock held) cancels the pending up.
func (h *PortHold) Release() {
	h.gen++
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
}
