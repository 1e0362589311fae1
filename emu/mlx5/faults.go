package mlx5

import (
	"encoding/binary"
	"syscall"

	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
	"github.com/hcaemu/hcaemu/emu/transport/rc"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// Fault injection inside the device (docs/faults.md, "Transport and
// device actions"): the device asks its hca.FaultHook (Config.Faults) at
// the core's points and does what the answer says the way a ConnectX
// reports it to mlx5_core and mlx5_ib: a command answered with a failing
// status and syndrome, an error CQE with the mlx5 syndrome of the status,
// the QP, CQ and SRQ error EQEs of spec §6.9 on the async EQ, PORT_CHANGE
// EQEs with the port state the SMA and the vport context report following
// them (port.go), and DEVICE_FATAL as firmware shows it: a syndrome in the
// health buffer with the reset-request bit (initseg.go), which the
// driver's health poll turns into its internal error state.

// Event types of the EQEs the fault actions post (enum mlx5_event) and
// the CQ error's syndrome (MLX5_CQ_ERROR_SYNDROME_CQ_OVERRUN).
const (
	eventCQError      = 0x04
	eventSRQCatas     = 0x12
	eventSRQRQLimit   = 0x14
	cqErrorOverrun    = 0x01
	eqeCQErrCQN       = ifc.EQEData      // struct mlx5_eqe_cq_err: cqn
	eqeCQErrSyndrome  = ifc.EQEData + 11 // and its syndrome byte
	eqePortChangePort = ifc.EQEData + 8  // struct mlx5_eqe_port_state: port << 4
)

// SyndFaultInjected is the syndrome of a command a fault plan failed.
const SyndFaultInjected = syndBase | 0x00f0

// faultStatuses maps the errno a fail_command action names to the command
// status mlx5_core's cmd_status_to_err turns back into that errno (EINVAL
// for the bad parameter the plan gives by default); an errno no status
// gives is answered with INT_ERR (EIO).
var faultStatuses = map[uint32]ifc.Status{
	uint32(syscall.EINVAL): ifc.StatBadParamErr,
	uint32(syscall.EIO):    ifc.StatIntErr,
	uint32(syscall.EBUSY):  ifc.StatResBusy,
	uint32(syscall.ENOMEM): ifc.StatLimErr,
	uint32(syscall.EAGAIN): ifc.StatNoResErr,
}

// faultStatus is the command status of a fail_command's errno.
func faultStatus(errno uint32) ifc.Status {
	if st, ok := faultStatuses[errno]; ok {
		return st
	}
	return ifc.StatIntErr
}

// faultSyndromes are the error CQE syndromes of the ibv_wc_status values a
// complete_status action may give beyond those the transport reports
// (mapping.go's); any other status gets syndromeGeneral, which the
// provider's mlx5_handle_error_cqe (and mlx5_ib's) reports as
// IBV_WC_GENERAL_ERR.
var faultSyndromes = map[transport.Status]uint8{
	6:  uverbs.SyndromeMWBindErr,        // IBV_WC_MW_BIND_ERR
	8:  uverbs.SyndromeLocalAccessErr,   // IBV_WC_LOC_ACCESS_ERR
	16: uverbs.SyndromeRemoteAbortedErr, // IBV_WC_REM_ABORT_ERR
}

// syndromeGeneral is a syndrome no MLX5_CQE_SYNDROME_* has.
const syndromeGeneral = 0xff

// faultState is a device's fault bookkeeping (lock held), apart from the
// port's (port.go).
type faultState struct {
	hook hca.FaultHook
}

// qpFault is a QP's deferred fault, carried out by the engine outside the
// transport's call that asked (faultPending): an error completion's move
// to ERR (err), or a qp_error's ERR with its event.
type qpFault struct {
	err      bool
	hasEvent bool
	event    transport.Event
	// traced is the state the last trace event reported (observe.go).
	traced uint8
}

// fault asks the hook (lock held); no hook: nothing happens.
func (d *Device) fault(ev *hca.FaultEvent) hca.FaultAction {
	if d.x.fault.hook == nil {
		return hca.FaultAction{}
	}
	return d.x.fault.hook.Fault(ev)
}

// faultCommand runs at dispatch, before the handler: a fail_command fails
// the command with the status of its errno and SyndFaultInjected (no
// finding: not the driver's mistake); the device actions are carried out
// and the command runs.
func (d *Device) faultCommand(op ifc.Opcode) (result, bool) {
	act := d.fault(&hca.FaultEvent{Point: hca.FaultAtCommand, Command: command(op)})
	if act.Kind == hca.FaultFailCommand {
		d.log.Info("fault injected: command fails", "op", op.String(), "errno", act.Errno)
		return result{faultStatus(act.Errno), SyndFaultInjected}, true
	}
	d.deviceFault(act, nil, nil)
	return ok, false
}

// faultCompletion runs before a completion of q is written: it may change
// its status (an error status: byte count 0, and the QP to ERR after it,
// without an event: the CQE is the report). It reports whether the CQE is
// still written: not to a CQ a cq_error broke.
func (d *Device) faultCompletion(q *qp, c *transport.Completion) bool {
	cqn := q.sndCQ
	if c.Recv {
		cqn = q.rcvCQ
	}
	target := d.fn.obj.cqs.Get(cqn)
	if target != nil && target.broken {
		return false
	}
	if d.x.fault.hook == nil {
		return true
	}
	ev := hca.FaultEvent{Point: hca.FaultAtCompletion, QPN: q.QPN, WROpcode: hca.WROpcodeName(c.Opcode), Size: c.ByteLen, Status: uint32(c.Status)}
	act := d.fault(&ev)
	switch act.Kind {
	case hca.FaultCompleteStatus:
		c.Status = transport.Status(act.Status)
		if c.Status != transport.StatusSuccess {
			c.ByteLen = 0
			c.Signaled = true
			q.fault.err = true
			d.core.Kick(hca.TargetQP, q.Handle, hca.WorkSend)
		}
	case hca.FaultCQError:
		if target != nil {
			d.cqError(target)
		}
		return false
	default:
		d.deviceFault(act, q, target)
	}
	return true
}

// faultDMA runs before the device reaches a send WR's buffers (its
// data segments validated): true, the access fails (the WR completes with
// LOC_PROT_ERR, as for a bad lkey).
func (d *Device) faultDMA(q *qp, wr *transport.SendWR, sges []uverbs.DataSeg) bool {
	if d.x.fault.hook == nil {
		return false
	}
	ev := hca.FaultEvent{Point: hca.FaultAtDMA, QPN: q.QPN, WROpcode: hca.WROpcodeName(wr.Opcode.Completion()), Size: wr.Length}
	if len(sges) > 0 {
		ev.Key, ev.HasKey = sges[0].LKey, true
	}
	act := d.fault(&ev)
	if act.Kind == hca.FaultFailDMA {
		return true
	}
	d.deviceFault(act, q, nil)
	return false
}

// responder is the rc.Config.Responder of a QP: nil without a hook.
func (env *qpEnv) responder() func(roce.Packet) rc.ResponderFault {
	if env.d.x.fault.hook == nil {
		return nil
	}
	return env.responderFault
}

func (env *qpEnv) responderFault(pkt roce.Packet) rc.ResponderFault {
	ev := hca.ResponderEvent(env.q.QPN, &pkt)
	act := env.d.fault(&ev)
	if f, ok := hca.ResponderAnswer(act); ok {
		return f
	}
	env.d.deviceFault(act, env.q, nil)
	return rc.ResponderFault{}
}

// qpErrorEvents are the transport events of the qp_error actions' events
// (qpEvent turns them into WQ_CATAS_ERROR, WQ_INVAL_REQ_ERROR and
// WQ_ACCESS_ERROR EQEs, which mlx5_ib reports as IB_EVENT_QP_FATAL,
// IB_EVENT_QP_REQ_ERR and IB_EVENT_QP_ACCESS_ERR).
var qpErrorEvents = map[hca.Event]transport.Event{
	hca.EventQPFatal:     transport.EventQPFatal,
	hca.EventQPReqErr:    transport.EventQPRequestErr,
	hca.EventQPAccessErr: transport.EventQPAccessError,
}

// deviceFault carries out the actions that need no more than the device,
// and the QP (and its CQ) of the point when there is one (lock held).
func (d *Device) deviceFault(act hca.FaultAction, q *qp, c *cq) {
	switch act.Kind {
	case hca.FaultQPError:
		if q != nil && q.env != nil && q.state != ifc.QPStateERR && q.state != ifc.QPStateRST {
			ev, known := qpErrorEvents[act.Event]
			if !known {
				ev = transport.EventQPFatal
			}
			// Deferred to the engine: the point may be inside the QP's
			// transport, which ERR flushes.
			q.fault.hasEvent, q.fault.event = true, ev
			d.core.Kick(hca.TargetQP, q.Handle, hca.WorkSend)
		}
	case hca.FaultSRQError, hca.FaultSRQLimit:
		if q == nil || ifc.QPCRQType.Get(q.ctx[:]) != ifc.RQTypeSRQ {
			return
		}
		s := d.fn.obj.srqs.Get(q.srqn)
		if s == nil {
			return
		}
		typ := uint8(eventSRQCatas)
		if act.Kind == hca.FaultSRQLimit {
			typ = eventSRQRQLimit
			s.lwm = 0 // the limit is armed once (ibv_modify_srq)
		}
		d.resourceEvent(typ, q.srqn)
	case hca.FaultCQError:
		if q != nil && c == nil {
			c = d.fn.obj.cqs.Get(q.sndCQ)
		}
		if c != nil {
			d.cqError(c)
		}
	case hca.FaultPortDown:
		d.portDownFor(act.Duration)
	case hca.FaultGIDChange:
		d.portChange(portChangeGUID)
	case hca.FaultDeviceFatal:
		if !d.core.Fatal {
			d.log.Error("device fatal: fault injected (health syndrome set)")
			d.latchFatal()
		}
	}
}

// faultPending carries out a QP's deferred fault (engine, lock held).
func (d *Device) faultPending(q *qp) {
	switch f := &q.fault; {
	case f.hasEvent:
		ev := f.event
		f.hasEvent, f.err = false, false
		if q.env != nil {
			q.env.Error(ev)
		}
	case f.err:
		f.err = false
		if q.state != ifc.QPStateERR {
			q.state = ifc.QPStateERR
			if q.RC != nil {
				q.RC.SetState(transport.StateErr)
			}
			d.traceState(q)
		}
	}
}

// cqError breaks CQ c: a CQ_ERROR EQE (syndrome CQ overrun), which
// mlx5_core logs and mlx5_ib reports as IB_EVENT_CQ_ERR to the CQ's
// owner; the CQ takes no more CQEs.
func (d *Device) cqError(c *cq) {
	if c.broken {
		return
	}
	c.broken = true
	var eqe [ifc.EQESize]byte
	eqe[ifc.EQEType] = eventCQError
	binary.BigEndian.PutUint32(eqe[eqeCQErrCQN:], c.cqn&0xffffff)
	eqe[eqeCQErrSyndrome] = cqErrorOverrun
	d.postAsync(&eqe)
}

// resourceEvent posts an SRQ (or QP) event of type typ for object n
// (struct mlx5_eqe_qp_srq: the number at the QPN's place).
func (d *Device) resourceEvent(typ uint8, n uint32) {
	var eqe [ifc.EQESize]byte
	eqe[ifc.EQEType] = typ
	binary.BigEndian.PutUint32(eqe[eqeQPNumber:], n&0xffffff)
	d.postAsync(&eqe)
}

// postAsync posts an EQE to the lowest numbered EQ subscribed to its type
// (the async EQ), if any.
func (d *Device) postAsync(eqe *[ifc.EQESize]byte) bool {
	typ := eqe[ifc.EQEType]
	for n := range 1 << LogMaxEQ {
		e := d.fn.eqs[uint8(n)]
		if e != nil && e.mask[typ/64]&(1<<(typ%64)) != 0 {
			return d.postEQE(e, eqe)
		}
	}
	return false
}
