package pvrdma

import (
	doorbell "github.com/hcaemu/hcaemu/doorbell/pvrdma"
	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
)

// The PVRDMA device's work, as its core's engine runs it: UAR doorbells
// become kicks, and a kicked QP is serviced under the device lock.

// doorbell handles a UAR write (reader goroutine).
func (d *Device) doorbell(off uint64, v uint32) {
	db, ok := doorbell.Decode(off, 4, v)
	if !ok {
		return
	}
	d.core.Lock()
	defer d.unlock()
	if !d.active {
		return
	}
	switch db.Kind {
	case doorbell.QP:
		qp := d.res.qp.get(db.Handle)
		if qp == nil || !d.ownsPage(qp.ctx, db.Page) {
			d.findDoorbell("QP", db.Handle, db.Page, qp == nil)
			return
		}
		if db.Flags&doorbell.QPSend != 0 && qp.state < abi.QPStateRTS {
			d.find(hca.FindingDoorbell, "ignored", "qp %d: send doorbell (PVRDMA_UAR_QP_SEND) in %s: post_send needs RTS (or SQD, ERR)", db.Handle, stateNames[qp.state])
		}
		if db.Flags&doorbell.QPRecv != 0 && qp.state == abi.QPStateReset {
			d.find(hca.FindingDoorbell, "ignored", "qp %d: receive doorbell (PVRDMA_UAR_QP_RECV) in RESET", db.Handle)
		}
		var f hca.Work
		if db.Flags&doorbell.QPSend != 0 {
			f |= hca.WorkSend
		}
		if db.Flags&doorbell.QPRecv != 0 {
			f |= hca.WorkRecv
		}
		if f != 0 {
			d.core.Kick(hca.TargetQP, db.Handle, f)
		}
	case doorbell.CQ:
		c := d.res.cq.get(db.Handle)
		if c == nil || !d.ownsPage(c.ctx, db.Page) {
			d.findDoorbell("CQ", db.Handle, db.Page, c == nil)
			return
		}
		// Arming is done here, in order with the guest's later ring checks.
		switch {
		case db.Flags&doorbell.CQArm != 0:
			d.arm(c, armNext)
		case db.Flags&doorbell.CQArmSol != 0:
			d.arm(c, armSolicited)
		}
	case doorbell.SRQ:
		s := d.res.srq.get(db.Handle)
		if s == nil || !d.ownsPage(s.ctx, db.Page) {
			d.findDoorbell("SRQ", db.Handle, db.Page, s == nil)
			return
		}
		if db.Flags&doorbell.SRQRecv != 0 {
			d.core.Kick(hca.TargetSRQ, db.Handle, hca.WorkRecv)
		}
	}
}

// ownsPage reports whether UAR page page belongs to context ctx (page 0 to
// the kernel, ctx 0).
func (d *Device) ownsPage(ctx, page uint32) bool {
	if ctx == 0 {
		return page == 0
	}
	u := d.res.uc.get(ctx)
	return u != nil && u.uar == page
}

// serviceQP does what a QP's doorbells asked for.
func (d *Device) serviceQP(qp *qp, flags hca.Work) {
	if (qp.faultHasEvent || qp.faultErr) && d.faultPending(qp) {
		return
	}
	switch qp.state {
	case abi.QPStateReset:
		return
	case abi.QPStateErr:
		if qp.RC != nil && flags&hca.WorkResp != 0 {
			qp.RC.FlushResponses() // the NAK it may still owe (rc.QP.nak)
		}
		d.flush(qp)
		return
	}
	if flags&hca.WorkRecv != 0 && qp.srq == 0 {
		// Receive WQEs stay in the ring until a message consumes them; check
		// the guest's producer index now so a corrupt one fails early.
		if _, err := d.pendingWQEs(qp.pages, &qp.rq); err != nil {
			d.find(hca.FindingRingIndex, "QP to ERR with QP_FATAL", "qp %d rq pvrdma_ring.prod_tail: %v", qp.Handle, err)
			d.qpError(qp, hca.EventQPFatal)
			return
		}
	}
	if qp.RC != nil {
		if flags&hca.WorkResp != 0 {
			qp.RC.FlushResponses()
		}
		if flags&(hca.WorkSend|hca.WorkTimer) != 0 {
			qp.RC.Pump()
		}
		return
	}
	if flags&hca.WorkSend != 0 && qp.state == abi.QPStateRTS {
		d.processSQ(qp)
	}
}

// coreModel is the PVRDMA device as the model its core (hca.Core) runs.
type coreModel struct{ d *Device }

func (m coreModel) Service(target hca.Target, h uint32, work hca.Work, timerGen uint64, expired bool) {
	d := m.d
	switch target {
	case hca.TargetQP:
		if qp := d.res.qp.get(h); qp != nil {
			if expired {
				d.qpTimer(qp, timerGen)
			}
			d.serviceQP(qp, work)
		}
	case hca.TargetSRQ:
		// SRQ WQEs are consumed when a message arrives; nothing to do.
	}
}

func (m coreModel) ReceiveFrame(frame []byte)    { m.d.wire.ReceiveFrame(frame) }
func (m coreModel) ReceiveBatch(b *fabric.Batch) { m.d.wire.ReceiveBatch(b) }
func (m coreModel) DeviceFatal()                 { m.d.event(hca.EventDeviceFatal, 0) }

// BeforeUnlock shows the guest the ring indexes the hold advanced, and sends
// the packets built under the lock before it is let go.
func (m coreModel) BeforeUnlock() {
	d := m.d
	d.publishDirty()
	d.wire.FlushOut()
}

// sqBatch is how many UD send WQEs are taken per lock hold; the QP is kicked
// again for more.
const sqBatch = 64

// Sync waits until every doorbell written and every frame received before
// the call has been processed (tests and fake drivers use it instead of
// sleeping). Work those cause (responses, completions of their own) may
// still be queued: loop on Idle for quiescence.
func (d *Device) Sync() { d.core.Sync() }

// Idle reports whether the device has no queued frames or doorbells.
func (d *Device) Idle() bool { return d.core.Idle() }
