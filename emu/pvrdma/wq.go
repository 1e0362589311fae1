package pvrdma

import (
	"fmt"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	"github.com/hcaemu/hcaemu/emu/transport"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// Work queues in guest rings (SQ, RQ, SRQ): producer indices, taking WQEs,
// receive WQEs for incoming messages, completions, and flushing.

// pendingWQEs reads the guest-owned producer index of a work queue and
// returns how many WQEs are posted but not consumed.
func (d *Device) pendingWQEs(pages dma.Pages, w *wq) (uint32, error) {
	prod, err := dma.LoadUint32(d.mem, pages[0]+w.prodOff)
	if err != nil {
		return 0, err
	}
	if !w.ring.Valid(prod) {
		return 0, dma.Fault(pages[0]+w.prodOff, 4, "producer index out of range")
	}
	n := w.ring.Pending(prod, w.cons)
	if n > w.ring.N {
		return 0, dma.Fault(pages[0]+w.prodOff, 4, "producer index more than a ring ahead")
	}
	return n, nil
}

// takeWQE copies the WQE at the consumer index out of guest memory (once)
// and advances the consumer index.
func (d *Device) takeWQE(pages dma.Pages, w *wq, buf []byte) error {
	if err := d.readWQE(pages, w, buf); err != nil {
		return err
	}
	w.cons = w.ring.Next(w.cons)
	return dma.StoreUint32(d.mem, pages[0]+w.consOff, w.cons)
}

// readWQE copies the WQE at w's consumer index out of guest memory.
func (d *Device) readWQE(pages dma.Pages, w *wq, buf []byte) error {
	off := w.base + uint64(w.ring.Slot(w.cons))*uint64(w.stride)
	return pages.ReadAt(d.mem, buf[:w.stride], off)
}

// takeSendWQE is takeWQE for qp's send queue, whose consumer index the
// guest sees once per batch: publishRings stores it.
func (d *Device) takeSendWQE(qp *qp, buf []byte) error {
	if err := d.readWQE(qp.pages, &qp.sq, buf); err != nil {
		return err
	}
	qp.sq.cons = qp.sq.ring.Next(qp.sq.cons)
	if !qp.sqDirty {
		qp.sqDirty = true
		d.dirtySQs = append(d.dirtySQs, qp)
	}
	return nil
}

// publishDirty publishes the ring indexes the guest has not seen, if any
// (small enough to inline where the lock is let go).
func (d *Device) publishDirty() {
	if len(d.dirtyCQs)+len(d.dirtySQs) > 0 {
		d.publishRings()
	}
}

// publishRings stores the ring indexes the device advanced since it last
// did (a CQ's prod_tail, a send queue's cons_head), once each: the guest
// sees the entries of a batch together. unlock calls it before the lock
// goes, so the guest never waits for more than the hold that wrote them,
// and before any interrupt of that hold. An object destroyed in the
// meantime is skipped: each is looked up again by its handle.
func (d *Device) publishRings() {
	for i, c := range d.dirtyCQs {
		d.dirtyCQs[i] = nil
		c.dirty = false
		if d.res.cq.get(c.handle) != c {
			continue
		}
		if err := dma.StoreUint32(d.mem, c.pages[0]+uverbs.RxProdTail, c.prod); err != nil && !c.broken {
			d.find(hca.FindingPageDir, "CQ_ERR, the CQ takes no more", "cq %d pvrdma_ring.prod_tail: %v", c.handle, err)
			c.broken = true
			d.event(hca.EventCQErr, c.handle)
		}
	}
	d.dirtyCQs = d.dirtyCQs[:0]
	type lostSQ struct {
		qp  *qp
		err error
	}
	var lost []lostSQ // send queues whose index the guest cannot be shown
	for i, qp := range d.dirtySQs {
		d.dirtySQs[i] = nil
		qp.sqDirty = false
		if d.res.qp.get(qp.Handle) != qp {
			continue
		}
		if err := dma.StoreUint32(d.mem, qp.pages[0]+qp.sq.consOff, qp.sq.cons); err != nil && qp.state != abi.QPStateErr {
			lost = append(lost, lostSQ{qp, err})
		}
	}
	d.dirtySQs = d.dirtySQs[:0]
	// A guest that cannot see its send queue emptied would wait for a slot
	// for ever: its QP fails instead, and the flush it takes is published
	// in turn (a QP in ERR is not failed again, so this ends).
	for _, l := range lost {
		d.find(hca.FindingPageDir, "QP to ERR with QP_FATAL", "qp %d sq pvrdma_ring.cons_head: %v", l.qp.Handle, l.err)
		d.qpError(l.qp, hca.EventQPFatal)
	}
	if len(lost) > 0 {
		d.publishDirty()
	}
}

// processSQ hands posted send WQEs of a UD or GSI QP to its transport in
// order, at most one ring's worth per call.
func (d *Device) processSQ(qp *qp) {
	if qp.UD == nil {
		return
	}
	n, ok := qp.env.PendingSends()
	if !ok {
		return
	}
	if n > sqBatch {
		// Come back for the rest after other queues and frames have had
		// the device lock.
		n = sqBatch
		d.core.Kick(hca.TargetQP, qp.Handle, hca.WorkSend)
	}
	buf := make([]byte, qp.sq.stride)
	for ; n > 0 && qp.state != abi.QPStateErr; n-- {
		slot := qp.sq.ring.Slot(qp.sq.cons)
		if err := d.takeSendWQE(qp, buf); err != nil {
			d.log.Warn("SQ WQE unreadable", "qp", qp.Handle, "err", err)
			d.qpError(qp, hca.EventQPFatal)
			return
		}
		w, err := uverbs.DecodeSendWQEInto(buf, qp.sq.maxSGE, qp.env.wqeSGEs)
		if err != nil {
			d.findSendWQE(qp, slot, &w)
			cqe := uverbs.CQE{WRID: w.WRID, Opcode: sendWCOpcode(w.Opcode), Status: uverbs.WCLocLenErr}
			d.completeSend(qp, &cqe, false)
			d.qpError(qp, hca.EventQPReqErr)
			return
		}
		qp.env.wqeSGEs = w.SGE[:0]
		// A UD request is sent and completed here: the next reuses its
		// segment list.
		wr := &qp.env.udWR
		*wr = transport.SendWR{Segs: wr.Segs[:0]}
		qp.env.sendWR(wr, &w, nil, slot)
		if d.wire.Tracer != nil {
			d.traceWQE(qp, wr)
		}
		qp.UD.Send(wr)
	}
	if qp.state == abi.QPStateErr {
		d.flush(qp)
	}
}

// sendWCOpcode is the completion opcode of a PVRDMA send opcode.
func sendWCOpcode(op uint32) uint32 { return wcOpcode(opcodeOf(op).Completion()) }

// completeSend posts a send-side completion when it is signaled (or
// failed).
func (d *Device) completeSend(qp *qp, cqe *uverbs.CQE, signaled bool) {
	if cqe.Status == uverbs.WCSuccess && !qp.sigAll && !signaled {
		return
	}
	c := d.res.cq.get(qp.sendCQ)
	if c == nil {
		return
	}
	cqe.QP, cqe.PortNum = uint64(qp.Handle), 1
	d.post(c, cqe, false)
}

// flush completes every outstanding WQE of an ERR QP with WR_FLUSH_ERR:
// send WQEs to the send CQ, receive WQEs (own RQ only) to the receive CQ.
func (d *Device) flush(qp *qp) {
	if n, err := d.pendingWQEs(qp.pages, &qp.sq); err == nil {
		buf := make([]byte, qp.sq.stride)
		for ; n > 0; n-- {
			if d.takeSendWQE(qp, buf) != nil {
				break
			}
			w, _ := uverbs.DecodeSendWQE(buf, qp.sq.maxSGE)
			cqe := uverbs.CQE{WRID: w.WRID, Opcode: sendWCOpcode(w.Opcode), Status: uverbs.WCWRFlushErr}
			d.completeSend(qp, &cqe, false)
		}
	}
	if qp.srq != 0 {
		return
	}
	if n, err := d.pendingWQEs(qp.pages, &qp.rq); err == nil {
		buf := make([]byte, qp.rq.stride)
		c := d.res.cq.get(qp.recvCQ)
		for ; n > 0; n-- {
			if d.takeWQE(qp.pages, &qp.rq, buf) != nil {
				break
			}
			w, _ := uverbs.DecodeRecvWQE(buf, qp.rq.maxSGE)
			if c != nil {
				e := uverbs.CQE{WRID: w.WRID, QP: uint64(qp.Handle), Opcode: uverbs.WCRecv,
					Status: uverbs.WCWRFlushErr, PortNum: 1}
				d.post(c, &e, false)
			}
		}
	}
}

// peekRecv reads the next receive WQE of the QP (its RQ or its SRQ) without
// consuming it. ok=false: none posted. A WQE that fails validation is
// returned with status != success.
func (d *Device) peekRecv(env *qpEnv) (wr transport.RecvWR, status transport.Status, ok bool) {
	qp := env.qp
	pages, w := qp.pages, &qp.rq
	if qp.srq != 0 {
		s := d.res.srq.get(qp.srq)
		if s == nil {
			return wr, 0, false
		}
		pages, w = s.pages, &s.q
	}
	n, err := d.pendingWQEs(pages, w)
	if err != nil {
		if qp.srq != 0 {
			d.find(hca.FindingRingIndex, "the SRQ reads as empty", "srq %d pvrdma_ring.prod_tail: %v", qp.srq, err)
		}
		return wr, 0, false
	}
	if n == 0 {
		return wr, 0, false
	}
	// The WQE, its SGEs and its segments in the QP's buffers, reused: the
	// responder holds one receive request at a time (the SEND in
	// progress), and peeks the next only once that one is done.
	if uint32(cap(env.rwqe)) < w.stride {
		env.rwqe = make([]byte, w.stride)
	}
	buf := env.rwqe[:w.stride]
	slot := w.ring.Slot(w.cons)
	off := w.base + uint64(slot)*uint64(w.stride)
	if err := pages.ReadAt(d.mem, buf, off); err != nil {
		return wr, transport.StatusLocProtErr, true
	}
	wqe, err := uverbs.DecodeRecvWQEInto(buf, w.maxSGE, env.rwqeSGEs)
	wr.ID = wqe.WRID
	if err != nil {
		queue := fmt.Sprintf("qp %d rq", qp.Handle)
		if qp.srq != 0 {
			queue = fmt.Sprintf("srq %d", qp.srq)
		}
		d.find(hca.FindingWQE, "completed with LOC_LEN_ERR", "%s[%d] pvrdma_rq_wqe_hdr.num_sge=%d > max_recv_sge=%d", queue, slot, wqe.NumSGE, w.maxSGE)
		return wr, transport.StatusLocLenErr, true
	}
	env.rwqeSGEs = wqe.SGE[:0]
	wr.Segs, wr.Cap, status = env.segs(wqe.SGE, true, env.recvSegs)
	env.recvSegs = wr.Segs[:0]
	return wr, status, true
}

// popRecv consumes the WQE peekRecv returned.
func (d *Device) popRecv(qp *qp) {
	if qp.srq == 0 {
		qp.rq.cons = qp.rq.ring.Next(qp.rq.cons)
		dma.StoreUint32(d.mem, qp.pages[0]+qp.rq.consOff, qp.rq.cons)
		return
	}
	s := d.res.srq.get(qp.srq)
	if s == nil {
		return
	}
	s.q.cons = s.q.ring.Next(s.q.cons)
	dma.StoreUint32(d.mem, s.pages[0]+s.q.consOff, s.q.cons)
	if s.limit != 0 {
		if n, err := d.pendingWQEs(s.pages, &s.q); err == nil && n < s.limit {
			s.limit = 0
			d.event(hca.EventSRQLimitReached, s.handle)
		}
	}
}

// completeRecv posts a receive completion to the QP's receive CQ.
func (d *Device) completeRecv(qp *qp, cqe *uverbs.CQE, solicited bool) {
	c := d.res.cq.get(qp.recvCQ)
	if c == nil {
		return
	}
	cqe.QP = uint64(qp.Handle)
	cqe.PortNum = 1
	if c.ctx != 0 {
		cqe.WCFlags &= uverbs.WCFlagGRH | uverbs.WCFlagImm // user CQs: the provider passes flags raw
		cqe.NetworkHdrType = 0
	}
	d.post(c, cqe, solicited)
}
