package pvrdma

import (
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/transport"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// SetTracer makes the device report every step of every QP to t; nil
// stops it. With no tracer the device builds no events (one nil check per
// step).
func (d *Device) SetTracer(t hca.Tracer) {
	d.core.Lock()
	defer d.unlock()
	d.wire.Tracer = t
}

// trace hands ev to the tracer, stamped (d.mu held; d.wire.Tracer != nil).
func (d *Device) trace(ev *hca.TraceEvent) { d.wire.Trace(ev) }

// traceWQE reports a send work request taken from the send queue.
func (d *Device) traceWQE(qp *qp, wr *transport.SendWR) {
	id := wr.ID
	ev := hca.TraceEvent{QPN: qp.QPN, Event: "wqe", WRID: &id, Len: int(wr.Length)}
	if op := wr.Opcode.Completion(); int(op) < len(hca.WROpcodeNames) && wr.Opcode != transport.OpUnsupported {
		ev.Opcode = hca.WROpcodeNames[op]
	}
	if wr.Status != transport.StatusSuccess {
		ev.Status = hca.WCStatusName(wcStatus(wr.Status))
	}
	d.trace(&ev)
}

// traceCQE reports a completion written for a QP.
func (d *Device) traceCQE(qp *qp, cqe *uverbs.CQE, op transport.WCOpcode, recv bool) {
	id := cqe.WRID
	ev := hca.TraceEvent{QPN: qp.QPN, Event: "cqe", WRID: &id, Status: hca.WCStatusName(cqe.Status), ByteLen: cqe.ByteLen, Recv: recv}
	if int(op) < len(hca.WROpcodeNames) {
		ev.Opcode = hca.WROpcodeNames[op]
	}
	d.trace(&ev)
}

// traceState reports a QP state change.
func (d *Device) traceState(qp *qp, prev, next uint8) {
	d.trace(&hca.TraceEvent{QPN: qp.QPN, Event: "state", From: stateName(prev), To: stateName(next)})
}

// traceAsync reports an async event; QP events name their QP.
func (d *Device) traceAsync(typ hca.Event, info uint32) {
	ev := hca.TraceEvent{Event: "async", Async: typ.String(), Handle: info}
	switch typ {
	case hca.EventQPFatal, hca.EventQPReqErr, hca.EventQPAccessErr, hca.EventCommEst,
		hca.EventSQDrained, hca.EventPathMig, hca.EventPathMigErr, hca.EventQPLastWQEReached:
		if qp := d.res.qp.get(info); qp != nil {
			ev.QPN, ev.Handle = qp.QPN, 0
		}
	}
	d.trace(&ev)
}

func stateName(s uint8) string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "?"
}

// Name is the device's name (Config.Name), as traces and logs call it.
func (d *Device) Name() string { return d.name }
