package emu

import (
	"time"

	"github.com/hcaemu/hcaemu/emu/pvrdma"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
	"github.com/hcaemu/hcaemu/emu/transport/rc"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// Fault injection inside the device. The device asks its FaultHook at named
// points ("a command of opcode X is about to run", "a completion for QP q
// is about to be written", "the responder of QP q is about to act on PSN
// p", "the device is about to reach a WR's buffers") and does what the
// answer says, with the effects the Linux driver handles: an error in ERR,
// a completion status, an async event, a NAK. The hook (package
// emu/fault) owns the rules, schedules, counters and log; the device only
// owns the states the actions change.

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
	Command  pvrdma.Opcode // FaultAtCommand
	QPN      uint32        // the other points: the local QP's number
	WROpcode string        // completion, DMA: the work request's opcode (WROpcodeNames)
	Key      uint32        // DMA: the lkey of the first SGE; responder: the RETH's or AtomicETH's rkey
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
	Event    uint32        // qp_error: a pvrdma QP event
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

// fault asks the hook (d.mu held); no hook: nothing happens.
func (d *Device) fault(ev *FaultEvent) FaultAction {
	if d.faults == nil {
		return FaultAction{}
	}
	return d.faults.Fault(ev)
}

// faultCommand runs at command dispatch: a non-nil error fails the
// command (the driver reads ERR non-zero and returns -EFAULT whatever the
// value; pvrdma_cmd_post).
func (d *Device) faultCommand(op pvrdma.Opcode) *cmdErr {
	act := d.fault(&FaultEvent{Point: FaultAtCommand, Command: op})
	if act.Kind == FaultFailCommand {
		e := fail(act.Errno, "fault injected: %s fails", op)
		e.mistake = false
		return e
	}
	d.deviceFault(act, nil, nil)
	return nil
}

// faultCompletion runs before a completion of qp is written; it may
// change the CQE's status. It reports whether the CQE is still written.
func (d *Device) faultCompletion(qp *qp, cqe *uverbs.CQE, op transport.WCOpcode, c *cq) bool {
	if d.faults == nil {
		return true
	}
	name := ""
	if int(op) < len(WROpcodeNames) {
		name = WROpcodeNames[op]
	}
	act := d.fault(&FaultEvent{Point: FaultAtCompletion, QPN: qp.qpn, WROpcode: name, Size: cqe.ByteLen, Status: cqe.Status})
	switch act.Kind {
	case FaultCompleteStatus:
		cqe.Status = act.Status
		if act.Status != uverbs.WCSuccess {
			cqe.ByteLen = 0
			// An error completion leaves the QP in ERR (no async event:
			// the CQE is the report); the engine moves it after this
			// completion, outside the transport's call.
			qp.faultErr = true
			d.eng.kick(targetQP, qp.handle, workSend)
		}
	case FaultCQError:
		if c != nil && !c.broken {
			c.broken = true
			d.event(pvrdma.EventCQErr, c.handle)
		}
		return false
	default:
		d.deviceFault(act, qp, c)
	}
	return true
}

// faultDMA runs before the device reaches a WR's buffers; true: the access
// fails.
func (d *Device) faultDMA(qp *qp, op transport.WCOpcode, sges []uverbs.SGE, size uint32) bool {
	if d.faults == nil {
		return false
	}
	ev := FaultEvent{Point: FaultAtDMA, QPN: qp.qpn, Size: size}
	if int(op) < len(WROpcodeNames) {
		ev.WROpcode = WROpcodeNames[op]
	}
	if len(sges) > 0 {
		ev.Key, ev.HasKey = sges[0].LKey, true
	}
	act := d.fault(&ev)
	if act.Kind == FaultFailDMA {
		return true
	}
	d.deviceFault(act, qp, nil)
	return false
}

// responderFault is an RC QP's rc.Config.Responder.
func (env *qpEnv) responderFault(pkt roce.Packet) rc.ResponderFault {
	d := env.d
	ev := FaultEvent{Point: FaultAtResponder, QPN: env.qp.qpn, PSN: pkt.BTH.PSN(), Opcode: pkt.Opcode(), Size: uint32(len(pkt.Payload))}
	switch {
	case pkt.Headers()&roce.HasRETH != 0:
		ev.Key, ev.HasKey = pkt.RETH.RKey(), true
	case pkt.Headers()&roce.HasAtomicETH != 0:
		ev.Key, ev.HasKey = pkt.AtomicETH.RKey(), true
	}
	act := d.fault(&ev)
	switch act.Kind {
	case FaultNAK:
		return rc.ResponderFault{Kind: rc.FaultNAK, NAK: act.NAK}
	case FaultRNRNAK:
		return rc.ResponderFault{Kind: rc.FaultRNRNAK, RNRTimer: act.RNRTimer}
	case FaultSuppressACK:
		return rc.ResponderFault{Kind: rc.FaultSuppressACK}
	}
	d.deviceFault(act, env.qp, nil)
	return rc.ResponderFault{}
}

// deviceFault carries out the actions that need no more than the device,
// and the QP (and its CQ) of the point when there is one (d.mu held).
func (d *Device) deviceFault(act FaultAction, qp *qp, c *cq) {
	switch act.Kind {
	case FaultQPError:
		if qp != nil && qp.state != pvrdma.QPStateErr && qp.state != pvrdma.QPStateReset {
			// Deferred to the engine: the point may be inside the QP's
			// transport, which ERR flushes.
			qp.faultEvent = act.Event
			d.eng.kick(targetQP, qp.handle, workSend)
		}
	case FaultSRQError, FaultSRQLimit:
		if qp != nil && qp.srq != 0 {
			ev := uint32(pvrdma.EventSRQErr)
			if act.Kind == FaultSRQLimit {
				ev = pvrdma.EventSRQLimitReached
				if s := d.res.srq.get(qp.srq); s != nil {
					s.limit = 0 // the limit is armed once (ibv_modify_srq)
				}
			}
			d.event(ev, qp.srq)
		}
	case FaultCQError:
		if qp != nil && c == nil {
			c = d.res.cq.get(qp.sendCQ)
		}
		if c != nil && !c.broken {
			c.broken = true
			d.event(pvrdma.EventCQErr, c.handle)
		}
	case FaultPortDown:
		d.portDownFor(act.Duration)
	case FaultGIDChange:
		d.event(pvrdma.EventGIDChange, 1)
	case FaultDeviceFatal:
		if !d.fatal {
			d.log.Error("device fatal: fault injected")
			d.fatal = true
			d.event(pvrdma.EventDeviceFatal, 0)
		}
	}
}

// faultPending carries out a QP's deferred fault (engine, d.mu held): it
// reports whether the QP went to ERR.
func (d *Device) faultPending(qp *qp) bool {
	switch {
	case qp.faultEvent != 0:
		ev := qp.faultEvent
		qp.faultEvent, qp.faultErr = 0, false
		d.qpError(qp, ev)
		return true
	case qp.faultErr:
		qp.faultErr = false
		if qp.state != pvrdma.QPStateErr {
			d.setState(qp, pvrdma.QPStateErr)
		}
		return true
	}
	return false
}

// portDownFor takes port 1 down: PORT_ERR now, QUERY_PORT reports DOWN,
// every frame the port would send or receive is lost (RC requesters
// retry; past their retry count they complete with RETRY_EXC_ERR), and
// after dur the port comes back with PORT_ACTIVE. A flap while down
// extends it.
func (d *Device) portDownFor(dur time.Duration) {
	if !d.portDown {
		d.portDown = true
		d.event(pvrdma.EventPortErr, 1)
		d.log.Info("port down: fault injected", "for", dur)
	}
	d.portGen++
	gen := d.portGen
	if d.portTimer != nil {
		d.portTimer.Stop()
	}
	d.portTimer = time.AfterFunc(dur, func() {
		d.mu.Lock()
		defer d.unlock()
		if d.closed || !d.portDown || d.portGen != gen {
			return
		}
		d.portDown = false
		d.portTimer = nil
		d.event(pvrdma.EventPortActive, 1)
		d.log.Info("port up: fault injected flap over")
	})
}

// PortDown reports whether a fault holds the port down (tests).
func (d *Device) PortDown() bool {
	d.mu.Lock()
	defer d.unlock()
	return d.portDown
}
