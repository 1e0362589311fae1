package pvrdma

import (
	"time"

	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
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

// fault asks the hook (d.mu held); no hook: nothing happens.
func (d *Device) fault(ev *hca.FaultEvent) hca.FaultAction {
	if d.faults == nil {
		return hca.FaultAction{}
	}
	return d.faults.Fault(ev)
}

// faultCommand runs at command dispatch: a non-nil error fails the
// command (the driver reads ERR non-zero and returns -EFAULT whatever the
// value; pvrdma_cmd_post).
func (d *Device) faultCommand(op abi.Opcode) *cmdErr {
	act := d.fault(&hca.FaultEvent{Point: hca.FaultAtCommand, Command: command(op)})
	if act.Kind == hca.FaultFailCommand {
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
	act := d.fault(&hca.FaultEvent{Point: hca.FaultAtCompletion, QPN: qp.QPN, WROpcode: hca.WROpcodeName(op), Size: cqe.ByteLen, Status: cqe.Status})
	switch act.Kind {
	case hca.FaultCompleteStatus:
		cqe.Status = act.Status
		if act.Status != uverbs.WCSuccess {
			cqe.ByteLen = 0
			// An error completion leaves the QP in ERR (no async event:
			// the CQE is the report); the engine moves it after this
			// completion, outside the transport's call.
			qp.faultErr = true
			d.core.Kick(hca.TargetQP, qp.Handle, hca.WorkSend)
		}
	case hca.FaultCQError:
		if c != nil && !c.broken {
			c.broken = true
			d.event(hca.EventCQErr, c.handle)
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
	ev := hca.FaultEvent{Point: hca.FaultAtDMA, QPN: qp.QPN, Size: size, WROpcode: hca.WROpcodeName(op)}
	if len(sges) > 0 {
		ev.Key, ev.HasKey = sges[0].LKey, true
	}
	act := d.fault(&ev)
	if act.Kind == hca.FaultFailDMA {
		return true
	}
	d.deviceFault(act, qp, nil)
	return false
}

// responderFault is an RC QP's rc.Config.Responder.
func (env *qpEnv) responderFault(pkt roce.Packet) rc.ResponderFault {
	ev := hca.ResponderEvent(env.qp.QPN, &pkt)
	act := env.d.fault(&ev)
	if f, ok := hca.ResponderAnswer(act); ok {
		return f
	}
	env.d.deviceFault(act, env.qp, nil)
	return rc.ResponderFault{}
}

// deviceFault carries out the actions that need no more than the device,
// and the QP (and its CQ) of the point when there is one (d.mu held).
func (d *Device) deviceFault(act hca.FaultAction, qp *qp, c *cq) {
	switch act.Kind {
	case hca.FaultQPError:
		if qp != nil && qp.state != abi.QPStateErr && qp.state != abi.QPStateReset {
			// Deferred to the engine: the point may be inside the QP's
			// transport, which ERR flushes.
			qp.faultEvent, qp.faultHasEvent = act.Event, true
			d.core.Kick(hca.TargetQP, qp.Handle, hca.WorkSend)
		}
	case hca.FaultSRQError, hca.FaultSRQLimit:
		if qp != nil && qp.srq != 0 {
			ev := hca.EventSRQErr
			if act.Kind == hca.FaultSRQLimit {
				ev = hca.EventSRQLimitReached
				if s := d.res.srq.get(qp.srq); s != nil {
					s.limit = 0 // the limit is armed once (ibv_modify_srq)
				}
			}
			d.event(ev, qp.srq)
		}
	case hca.FaultCQError:
		if qp != nil && c == nil {
			c = d.res.cq.get(qp.sendCQ)
		}
		if c != nil && !c.broken {
			c.broken = true
			d.event(hca.EventCQErr, c.handle)
		}
	case hca.FaultPortDown:
		d.portDownFor(act.Duration)
	case hca.FaultGIDChange:
		d.event(hca.EventGIDChange, 1)
	case hca.FaultDeviceFatal:
		if !d.core.Fatal {
			d.log.Error("device fatal: fault injected")
			d.core.Fatal = true
			d.event(hca.EventDeviceFatal, 0)
		}
	}
}

// faultPending carries out a QP's deferred fault (engine, d.mu held): it
// reports whether the QP went to ERR.
func (d *Device) faultPending(qp *qp) bool {
	switch {
	case qp.faultHasEvent:
		ev := qp.faultEvent
		qp.faultHasEvent, qp.faultErr = false, false
		d.qpError(qp, ev)
		return true
	case qp.faultErr:
		qp.faultErr = false
		if qp.state != abi.QPStateErr {
			d.setState(qp, abi.QPStateErr)
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
	if !d.wire.Down {
		d.wire.Down = true
		d.event(hca.EventPortErr, 1)
		d.log.Info("port down: fault injected", "for", dur)
	}
	d.portHold.Hold(&d.core, dur, d.unlock, func() {
		if !d.wire.Down {
			return
		}
		d.wire.Down = false
		d.event(hca.EventPortActive, 1)
		d.log.Info("port up: fault injected flap over")
	})
}

// PortDown reports whether a fault holds the port down (tests).
func (d *Device) PortDown() bool {
	d.core.Lock()
	defer d.unlock()
	return d.wire.Down
}
