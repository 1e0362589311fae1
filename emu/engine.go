package emu

import (
	"sync"
	"time"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/doorbell"
	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/uverbs"
)

// engine runs the device's work queues off the connection's reader: a
// doorbell only records which queue has news (coalesced, so pending work is
// bounded by the number of queues) and the engine goroutine does the DMA.
type engine struct {
	mu       sync.Mutex
	pending  map[uint64]uint32 // kind<<32|handle -> OR of kick flags
	spare    map[uint64]uint32 // the other map, handed back empty by run
	fired    map[uint32]uint64 // QP handle -> generation of its expired timer
	barriers []chan struct{}   // closed once the work queued before them is done
	wake     chan struct{}
	rx       chan []byte // frames from the fabric
	rxDrops  uint64
	quit     chan struct{}
	done     chan struct{}
}

const (
	kickQP  = 1
	kickSRQ = 2

	kickSend  = 1
	kickRecv  = 2
	kickTimer = 4
	kickResp  = 8 // the RC responder has queued responses to send

	backoff = 50 * time.Microsecond // wait for a busy receiver

	rxQueue = 8192 // frames queued per device; beyond that the wire drops
)

func (e *engine) start(d *Device) {
	e.pending, e.spare = map[uint64]uint32{}, map[uint64]uint32{}
	e.fired = map[uint32]uint64{}
	e.wake = make(chan struct{}, 1)
	e.rx = make(chan []byte, rxQueue)
	e.quit = make(chan struct{})
	e.done = make(chan struct{})
	go e.run(d)
}

func (e *engine) kick(kind uint32, handle, flags uint32) {
	e.mu.Lock()
	e.pending[uint64(kind)<<32|uint64(handle)] |= flags
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// kickTimer reports that QP h's timer of generation gen expired (timer
// goroutine).
func (e *engine) kickTimer(h uint32, gen uint64) {
	e.mu.Lock()
	e.fired[h] = gen
	e.mu.Unlock()
	e.kick(kickQP, h, kickTimer)
}

// drop forgets pending kicks (device reset).
func (e *engine) drop() {
	e.mu.Lock()
	clear(e.pending)
	clear(e.fired)
	e.mu.Unlock()
}

func (e *engine) stop() {
	close(e.quit)
	<-e.done
}

func (e *engine) run(d *Device) {
	defer close(e.done)
	for {
		var first []byte
		select {
		case <-e.quit:
			e.drainRx()
			return
		case <-e.wake:
		case first = <-e.rx:
		}
		if first != nil {
			d.mu.Lock()
			d.receiveFrame(first)
		batch:
			for i := 0; i < 256; i++ {
				select {
				case f := <-e.rx:
					d.receiveFrame(f)
				default:
					break batch
				}
			}
			d.unlock()
		}
		e.mu.Lock()
		if len(e.pending) == 0 && len(e.barriers) == 0 {
			e.mu.Unlock()
			continue
		}
		work, barriers, fired := e.pending, e.barriers, e.fired
		e.pending, e.spare, e.barriers = e.spare, nil, nil
		if len(fired) > 0 {
			e.fired = map[uint32]uint64{}
		} else {
			fired = nil // e.fired stays the timers'; never read it unlocked
		}
		e.mu.Unlock()
		d.mu.Lock()
		for key, flags := range work {
			if d.closed {
				break
			}
			kind, h := uint32(key>>32), uint32(key)
			switch kind {
			case kickQP:
				if x := d.res.qp.get(h); x != nil {
					if gen, ok := fired[h]; ok && flags&kickTimer != 0 {
						d.rcTimer(x, gen)
					}
					d.serviceQP(x, flags)
				}
			case kickSRQ:
				// SRQ WQEs are consumed when a message arrives; nothing to do.
			}
		}
		d.unlock()
		clear(work)
		e.mu.Lock()
		e.spare = work // the two maps alternate: no allocation per wake-up
		e.mu.Unlock()
		for _, b := range barriers {
			close(b)
		}
	}
}

func (e *engine) drainRx() {
	for {
		select {
		case f := <-e.rx:
			fabric.Release(f)
		default:
			return
		}
	}
}

// receive takes a frame from the fabric (any goroutine; never blocks). A
// full queue drops the frame and reports it, so the sender backs off.
func (d *Device) receive(frame []byte) bool {
	select {
	case d.eng.rx <- frame:
		return true
	default:
		d.eng.mu.Lock()
		d.eng.rxDrops++
		d.eng.mu.Unlock()
		fabric.Release(frame)
		return false
	}
}

// kickLater services QP h again after a short back-off (a busy receiver).
func (e *engine) kickLater(h, flags uint32) {
	time.AfterFunc(backoff, func() { e.kick(kickQP, h, flags) })
}

// sync waits until the work queued before the call has been done.
func (e *engine) sync() {
	b := make(chan struct{})
	e.mu.Lock()
	e.barriers = append(e.barriers, b)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
	select {
	case <-b:
	case <-e.done:
	}
}

// Sync waits until every doorbell written before the call has been
// processed (tests and fake drivers use it instead of sleeping).
func (d *Device) Sync() { d.eng.sync() }

// Idle reports whether the device has no queued frames or doorbells.
func (d *Device) Idle() bool {
	d.eng.mu.Lock()
	defer d.eng.mu.Unlock()
	return len(d.eng.rx) == 0 && len(d.eng.pending) == 0
}

// doorbell handles a UAR write (reader goroutine).
func (d *Device) doorbell(off uint64, v uint32) {
	db, ok := doorbell.Decode(off, 4, v)
	if !ok {
		return
	}
	d.mu.Lock()
	defer d.unlock()
	if !d.active {
		return
	}
	switch db.Kind {
	case doorbell.QP:
		x := d.res.qp.get(db.Handle)
		if x == nil || !d.ownsPage(x.ctx, db.Page) {
			d.log.Debug("QP doorbell for an unknown or foreign QP", "qp", db.Handle, "uar", db.Page)
			return
		}
		var f uint32
		if db.Flags&doorbell.QPSend != 0 {
			f |= kickSend
		}
		if db.Flags&doorbell.QPRecv != 0 {
			f |= kickRecv
		}
		if f != 0 {
			d.eng.kick(kickQP, db.Handle, f)
		}
	case doorbell.CQ:
		c := d.res.cq.get(db.Handle)
		if c == nil || !d.ownsPage(c.ctx, db.Page) {
			d.log.Debug("CQ doorbell for an unknown or foreign CQ", "cq", db.Handle, "uar", db.Page)
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
			return
		}
		if db.Flags&doorbell.SRQRecv != 0 {
			d.eng.kick(kickSRQ, db.Handle, kickRecv)
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
func (d *Device) serviceQP(x *qp, flags uint32) {
	switch x.state {
	case StateReset:
		return
	case StateErr:
		d.flush(x)
		return
	}
	if flags&kickRecv != 0 && x.srq == 0 {
		// Receive WQEs stay in the ring until a message consumes them; check
		// the guest's producer index now so a corrupt one fails early.
		if _, err := d.pendingWQEs(x.pages, &x.rq); err != nil {
			d.log.Warn("RQ producer index invalid", "qp", x.handle, "err", err)
			d.qpError(x, EvQPFatal)
			return
		}
	}
	if x.typ == QPTypeRC {
		if flags&kickResp != 0 {
			d.rcFlushOut(x)
		}
		if flags&(kickSend|kickTimer) != 0 {
			d.rcPump(x)
		}
		return
	}
	if flags&kickSend != 0 && x.state == StateRTS {
		d.processSQ(x)
	}
}

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
	off := w.base + uint64(w.ring.Slot(w.cons))*uint64(w.stride)
	if err := pages.ReadAt(d.mem, buf[:w.stride], off); err != nil {
		return err
	}
	w.cons = w.ring.Next(w.cons)
	return dma.StoreUint32(d.mem, pages[0]+w.consOff, w.cons)
}

// processSQ executes posted send WQEs in order, at most one ring's worth per
// call.
func (d *Device) processSQ(x *qp) {
	n, err := d.pendingWQEs(x.pages, &x.sq)
	if err != nil {
		d.log.Warn("SQ producer index invalid", "qp", x.handle, "err", err)
		d.qpError(x, EvQPFatal)
		return
	}
	buf := make([]byte, x.sq.stride)
	for ; n > 0 && x.state != StateErr; n-- {
		if err := d.takeWQE(x.pages, &x.sq, buf); err != nil {
			d.log.Warn("SQ WQE unreadable", "qp", x.handle, "err", err)
			d.qpError(x, EvQPFatal)
			return
		}
		w, err := uverbs.DecodeSendWQE(buf, x.sq.maxSGE)
		if err != nil {
			d.completeSend(x, &w, uverbs.WCLocLenErr, 0)
			d.qpError(x, EvQPReqErr)
			return
		}
		d.sendUD(x, &w)
	}
	if x.state == StateErr {
		d.flush(x)
	}
}

// completeSend posts the send-side completion of a WQE when it is signaled
// (or failed).
func (d *Device) completeSend(x *qp, w *uverbs.SendWQE, status, byteLen uint32) {
	if status == uverbs.WCSuccess && !x.sigAll && w.SendFlags&uverbs.SendSignaled == 0 {
		return
	}
	c := d.res.cq.get(x.sendCQ)
	if c == nil {
		return
	}
	e := uverbs.CQE{WRID: w.WRID, QP: uint64(x.handle), Opcode: sendWCOpcode(w.Opcode),
		Status: status, ByteLen: byteLen, PortNum: 1}
	d.post(c, &e, false)
}

func sendWCOpcode(op uint32) uint32 {
	switch op {
	case uverbs.OpRDMAWrite, uverbs.OpRDMAWriteImm:
		return uverbs.WCRDMAWrite
	case uverbs.OpRDMARead:
		return uverbs.WCRDMARead
	case uverbs.OpAtomicCmpSwp:
		return uverbs.WCCompSwap
	case uverbs.OpAtomicFetchAdd:
		return uverbs.WCFetchAdd
	case uverbs.OpLocalInv:
		return uverbs.WCLocalInv
	case uverbs.OpFastRegMR:
		return uverbs.WCFastRegMR
	}
	return uverbs.WCSend
}

// flush completes every outstanding WQE of an ERR QP with WR_FLUSH_ERR:
// send WQEs to the send CQ, receive WQEs (own RQ only) to the receive CQ.
func (d *Device) flush(x *qp) {
	if n, err := d.pendingWQEs(x.pages, &x.sq); err == nil {
		buf := make([]byte, x.sq.stride)
		for ; n > 0; n-- {
			if d.takeWQE(x.pages, &x.sq, buf) != nil {
				break
			}
			w, _ := uverbs.DecodeSendWQE(buf, x.sq.maxSGE)
			d.completeSend(x, &w, uverbs.WCWRFlushErr, 0)
		}
	}
	if x.srq != 0 {
		return
	}
	if n, err := d.pendingWQEs(x.pages, &x.rq); err == nil {
		buf := make([]byte, x.rq.stride)
		c := d.res.cq.get(x.recvCQ)
		for ; n > 0; n-- {
			if d.takeWQE(x.pages, &x.rq, buf) != nil {
				break
			}
			w, _ := uverbs.DecodeRecvWQE(buf, x.rq.maxSGE)
			if c != nil {
				e := uverbs.CQE{WRID: w.WRID, QP: uint64(x.handle), Opcode: uverbs.WCRecv,
					Status: uverbs.WCWRFlushErr, PortNum: 1}
				d.post(c, &e, false)
			}
		}
	}
}
