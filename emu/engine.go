package emu

import (
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	doorbell "github.com/hcaemu/hcaemu/doorbell/pvrdma"
	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/pvrdma"
)

// engine runs the device's work queues off the connection's reader: a
// doorbell only records which queue has news (coalesced, so pending work is
// bounded by the number of queues) and the engine goroutine does the DMA.
//
// Batches of packets from other HCAs of the process (fabric.Batch) wait in
// a queue of their own, and whoever holds taking handles them, in the order
// they came: this engine, or the engine of the HCA that sent them, which
// offers to take them as soon as it has sent them (worker.offer) instead of
// waking this one. A packet and its answer then cost no goroutine hand-off:
// the sender's engine runs the receiver's part too, under the receiver's
// lock, and finds the answer in its own queue when it is done. Where the
// offer fails (this engine or another helper is taking already, or this
// device's lock is busy: a helper never waits for one), this engine is
// woken as before.
type engine struct {
	d        *Device
	mu       sync.Mutex
	pending  map[uint64]uint32 // kind<<32|handle -> OR of kick flags
	spare    map[uint64]uint32 // the other map, handed back empty by run
	fired    map[uint32]uint64 // QP handle -> generation of its expired timer
	barriers []chan struct{}   // closed once the work queued before them is done
	wake     chan struct{}
	rx       chan []byte // frames from the fabric
	rxDrops  uint64
	// Batches from other HCAs: a ring of directQueue (Reserve bounds it),
	// under qmu; rxbHeld counts the reserved room (queued or being built).
	qmu     sync.Mutex
	queue   [directQueue]*fabric.Batch
	qhead   int
	qlen    int
	rxbHeld atomic.Int32
	helped  atomic.Uint64 // batches another device's engine took for this one
	// taking is held by whoever takes batches off the queue and handles
	// them (this engine, or a helper), so they are handled in order.
	taking sync.Mutex
	quit   chan struct{}
	done   chan struct{}
	w      worker // the engine goroutine's own
}

// worker is what an engine goroutine carries through its work: the engines
// of the HCAs it delivered batches to without waking them (fabric.Batch's
// Helped), which it offers to help once its unit of work is done. It
// belongs to one goroutine.
type worker struct {
	self *engine
	help []*engine // help[next:] are still to be offered
	next int
}

// maxHelp bounds the engines a worker helps after one unit of work (the
// receivers' answers may add more); the rest are woken instead.
const maxHelp = 8

// add records that e has a batch the worker promised to offer to take.
// Every such batch is offered (or its engine woken) after it was
// delivered: e is added again if its offer has been made already.
func (w *worker) add(e *engine) {
	for _, h := range w.help[w.next:] {
		if h == e {
			return
		}
	}
	w.help = append(w.help, e)
}

// offer takes the batches it delivered (and those its taking delivered in
// turn) for their receivers where it can, and wakes the receivers where it
// cannot. No lock is held when it is called.
func (w *worker) offer() {
	for w.next < len(w.help) {
		e := w.help[w.next]
		w.next++
		switch {
		case e == w.self:
			e.signal() // its own queue: the engine's loop goes round again
		case w.next > maxHelp || !e.taking.TryLock():
			e.signal()
		default:
			e.takeBatches(w, rxBatch)
			e.taking.Unlock()
			if e.queued() > 0 {
				e.signal() // more than it takes, or its lock was busy
			}
		}
	}
	clear(w.help)
	w.help, w.next = w.help[:0], 0
}

// A kick names its object by a target and a handle ...
const (
	targetQP  = 1
	targetSRQ = 2
)

// ... and says what the object has to do, in flags.
const (
	workSend  = 1 << iota // the send queue has new WQEs
	workRecv              // the receive queue has new WQEs
	workTimer             // the QP's timer expired
	workResp              // the RC responder has queued responses to send
)

const (
	backoff = 50 * time.Microsecond // wait for a busy receiver

	rxQueue = 8192 // frames queued per device; beyond that the wire drops
	rxBatch = 256  // frames handled per wake-up before doorbell work gets a turn
	// directQueue: batches queued per device (fabric.BatchBytes each).
	directQueue = 64
	sqBatch     = 64 // UD send WQEs taken per lock hold; the QP is kicked again for more
)

func (eng *engine) start(d *Device) {
	eng.pending, eng.spare = map[uint64]uint32{}, map[uint64]uint32{}
	eng.fired = map[uint32]uint64{}
	eng.wake = make(chan struct{}, 1)
	eng.rx = make(chan []byte, rxQueue)
	eng.d, eng.w = d, worker{self: eng}
	eng.quit = make(chan struct{})
	eng.done = make(chan struct{})
	go eng.run(d)
}

func (eng *engine) kick(kind uint32, handle, flags uint32) {
	eng.mu.Lock()
	eng.pending[uint64(kind)<<32|uint64(handle)] |= flags
	eng.mu.Unlock()
	eng.signal()
}

// signal wakes the engine goroutine (any goroutine; never blocks).
func (eng *engine) signal() {
	select {
	case eng.wake <- struct{}{}:
	default:
	}
}

// kickTimer reports that QP h's timer of generation gen expired (timer
// goroutine).
//
// The expiry and its kick are recorded under one hold of the lock: run
// takes pending work and fired timers together, and a kick recorded apart
// from its expiry could reach run after the expiry had been taken (and
// dropped, its QP having no timer kick yet) — the timer's expiry lost, the
// QP waiting for ever for a retransmission timeout that had already fired.
func (eng *engine) kickTimer(h uint32, gen uint64) {
	eng.mu.Lock()
	eng.fired[h] = gen
	eng.pending[uint64(targetQP)<<32|uint64(h)] |= workTimer
	eng.mu.Unlock()
	eng.signal()
}

// drop forgets pending kicks (device reset).
func (eng *engine) drop() {
	eng.mu.Lock()
	clear(eng.pending)
	clear(eng.fired)
	eng.mu.Unlock()
}

func (eng *engine) stop() {
	close(eng.quit)
	<-eng.done
}

func (eng *engine) run(d *Device) {
	defer close(eng.done)
	w := &eng.w
	for {
		var first []byte
		select {
		case <-eng.quit:
			eng.drainRx()
			return
		case <-eng.wake:
		case first = <-eng.rx:
		}
		if first != nil {
			// The lock is taken per frame (per batch of packets), not for
			// all of them: a doorbell or a command from a vCPU waits for
			// one frame (batch) at most.
			d.receiveLocked(w, first)
		frames:
			for i := 1; i < rxBatch; i++ {
				select {
				case f := <-eng.rx:
					d.receiveLocked(w, f)
				default:
					break frames
				}
			}
			w.offer()
		}
		if eng.queued() > 0 {
			eng.taking.Lock()
			eng.takeBatches(w, rxBatch)
			eng.taking.Unlock()
			if eng.queued() > 0 {
				eng.signal() // more than one turn's worth: doorbell work first
			}
			w.offer()
		}
		eng.mu.Lock()
		if len(eng.pending) == 0 && len(eng.barriers) == 0 {
			eng.mu.Unlock()
			continue
		}
		work, barriers, fired := eng.pending, eng.barriers, eng.fired
		eng.pending, eng.spare, eng.barriers = eng.spare, nil, nil
		if len(fired) > 0 {
			eng.fired = map[uint32]uint64{}
		} else {
			fired = nil // e.fired stays the timers'; never read it unlocked
		}
		eng.mu.Unlock()
		for key, flags := range work {
			// One QP per lock hold: a doorbell or command waits for one
			// QP's bounded batch of work at most (sqBatch WQEs, a window of
			// RC packets), not for every QP with news.
			closed := false
			d.engineWork(w, func() {
				if closed = d.closed; closed {
					return
				}
				kind, h := uint32(key>>32), uint32(key)
				switch kind {
				case targetQP:
					if qp := d.res.qp.get(h); qp != nil {
						if gen, ok := fired[h]; ok && flags&workTimer != 0 {
							d.qpTimer(qp, gen)
						}
						d.serviceQP(qp, flags)
					}
				case targetSRQ:
					// SRQ WQEs are consumed when a message arrives; nothing to do.
				}
			})
			w.offer()
			if closed {
				break
			}
		}
		clear(work)
		eng.mu.Lock()
		eng.spare = work // the two maps alternate: no allocation per wake-up
		eng.mu.Unlock()
		if len(barriers) > 0 {
			// A barrier also covers the frames received before it: handle
			// those queued now (bounded by the queue's length at this point).
			for n := len(eng.rx); n > 0; n-- {
				select {
				case f := <-eng.rx:
					d.receiveLocked(w, f)
				default:
					n = 1
				}
			}
			eng.taking.Lock()
			eng.takeBatches(w, eng.queued())
			eng.taking.Unlock()
			w.offer()
		}
		for _, b := range barriers {
			close(b)
		}
	}
}

// receiveLocked handles one received frame under the device lock.
func (d *Device) receiveLocked(w *worker, frame []byte) {
	if !d.engineWork(w, func() { d.receivePort(frame) }) {
		fabric.Release(frame) // a fatal device takes no frames
	}
}

// engineWork runs one unit of the engine's work (a received frame, one QP's
// news) under the device lock, and reports whether it ran. A panic in it is
// a bug, but one that guest or peer input reached: it costs this device, not
// the process and every other guest on it. It is logged with its stack, the
// device declares DEVICE_FATAL (the driver passes it on to its consumers as
// IB_EVENT_DEVICE_FATAL), and the engine does no more work for the device
// until it is reset.
//
// w is the engine goroutine doing the work, this device's or a helper's:
// batches the work sends go to their receivers without waking them, and w
// offers to take them once the work is done (worker.offer).
func (d *Device) engineWork(w *worker, fn func()) (ran bool) {
	d.mu.Lock()
	return d.workLocked(w, fn)
}

// workLocked is engineWork once the lock is taken; it lets it go.
func (d *Device) workLocked(w *worker, fn func()) (ran bool) {
	d.w = w
	defer d.unlock()
	if d.fatal {
		return false
	}
	defer func() {
		if r := recover(); r != nil {
			d.log.Error("device fatal: panic in the engine", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			d.fatal = true
			d.event(pvrdma.EventDeviceFatal, 0)
		}
	}()
	ran = true // fn owns what it was given, even if it panics
	fn()
	return ran
}

func (eng *engine) drainRx() {
	for {
		select {
		case f := <-eng.rx:
			fabric.Release(f)
		default:
			eng.taking.Lock()
			for b := eng.pop(); b != nil; b = eng.pop() {
				eng.rxbHeld.Add(-1)
				b.Release()
			}
			eng.taking.Unlock()
			return
		}
	}
}

// queued is the number of batches waiting in the queue.
func (eng *engine) queued() int {
	eng.qmu.Lock()
	defer eng.qmu.Unlock()
	return eng.qlen
}

// pop takes the batch queued first, nil when none is.
func (eng *engine) pop() *fabric.Batch {
	eng.qmu.Lock()
	defer eng.qmu.Unlock()
	if eng.qlen == 0 {
		return nil
	}
	b := eng.queue[eng.qhead]
	eng.queue[eng.qhead] = nil
	eng.qhead = (eng.qhead + 1) % directQueue
	eng.qlen--
	return b
}

// takeBatches handles up to max queued batches, in order, each under the
// device lock, for worker w; the caller holds taking. A helper (another
// device's engine) never waits for the lock: it stops where the lock is
// busy, leaving the rest to this engine.
func (eng *engine) takeBatches(w *worker, max int) {
	helper := w != &eng.w
	for ; max > 0; max-- {
		if !helper {
			eng.d.mu.Lock()
		} else if !eng.d.mu.TryLock() {
			return
		}
		b := eng.pop()
		if b == nil {
			eng.d.mu.Unlock()
			return
		}
		eng.rxbHeld.Add(-1)
		if helper {
			eng.helped.Add(1)
		}
		eng.d.workLocked(w, func() { eng.d.receiveDirect(b) })
		b.Release()
	}
}

// Reserve makes room for one batch from another HCA (fabric.DirectReceiver;
// any goroutine): false when directQueue batches wait already.
func (eng *engine) Reserve() bool {
	if eng.rxbHeld.Add(1) > directQueue {
		eng.rxbHeld.Add(-1)
		return false
	}
	return true
}

// Deliver queues a batch Reserve made room for (any goroutine; never
// blocks), and wakes the engine unless the sender will offer to take it.
func (eng *engine) Deliver(b *fabric.Batch) {
	helped := b.Helped // b is the taker's once queued
	eng.qmu.Lock()
	if eng.qlen == directQueue { // Reserve bounds the queue: not reached
		eng.qmu.Unlock()
		eng.rxbHeld.Add(-1)
		b.Release()
		return
	}
	eng.queue[(eng.qhead+eng.qlen)%directQueue] = b
	eng.qlen++
	eng.qmu.Unlock()
	if !helped {
		eng.signal()
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
func (eng *engine) kickLater(h, flags uint32) {
	time.AfterFunc(backoff, func() { eng.kick(targetQP, h, flags) })
}

// sync waits until the work queued before the call has been done.
func (eng *engine) sync() {
	b := make(chan struct{})
	eng.mu.Lock()
	eng.barriers = append(eng.barriers, b)
	eng.mu.Unlock()
	select {
	case eng.wake <- struct{}{}:
	default:
	}
	select {
	case <-b:
	case <-eng.done:
	}
}

// Sync waits until every doorbell written and every frame received before
// the call has been processed (tests and fake drivers use it instead of
// sleeping). Work those cause (responses, completions of their own) may
// still be queued: loop on Idle for quiescence.
func (d *Device) Sync() { d.eng.sync() }

// Idle reports whether the device has no queued frames or doorbells.
func (d *Device) Idle() bool {
	d.eng.mu.Lock()
	defer d.eng.mu.Unlock()
	return len(d.eng.rx) == 0 && len(d.eng.pending) == 0 && d.eng.queued() == 0
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
		qp := d.res.qp.get(db.Handle)
		if qp == nil || !d.ownsPage(qp.ctx, db.Page) {
			d.findDoorbell("QP", db.Handle, db.Page, qp == nil)
			return
		}
		if db.Flags&doorbell.QPSend != 0 && qp.state < pvrdma.QPStateRTS {
			d.find(FindingDoorbell, "ignored", "qp %d: send doorbell (PVRDMA_UAR_QP_SEND) in %s: post_send needs RTS (or SQD, ERR)", db.Handle, stateNames[qp.state])
		}
		if db.Flags&doorbell.QPRecv != 0 && qp.state == pvrdma.QPStateReset {
			d.find(FindingDoorbell, "ignored", "qp %d: receive doorbell (PVRDMA_UAR_QP_RECV) in RESET", db.Handle)
		}
		var f uint32
		if db.Flags&doorbell.QPSend != 0 {
			f |= workSend
		}
		if db.Flags&doorbell.QPRecv != 0 {
			f |= workRecv
		}
		if f != 0 {
			d.eng.kick(targetQP, db.Handle, f)
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
			d.eng.kick(targetSRQ, db.Handle, workRecv)
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
func (d *Device) serviceQP(qp *qp, flags uint32) {
	if (qp.faultEvent != 0 || qp.faultErr) && d.faultPending(qp) {
		return
	}
	switch qp.state {
	case pvrdma.QPStateReset:
		return
	case pvrdma.QPStateErr:
		if qp.rc != nil && flags&workResp != 0 {
			qp.rc.FlushResponses() // the NAK it may still owe (rc.QP.nak)
		}
		d.flush(qp)
		return
	}
	if flags&workRecv != 0 && qp.srq == 0 {
		// Receive WQEs stay in the ring until a message consumes them; check
		// the guest's producer index now so a corrupt one fails early.
		if _, err := d.pendingWQEs(qp.pages, &qp.rq); err != nil {
			d.find(FindingRingIndex, "QP to ERR with QP_FATAL", "qp %d rq pvrdma_ring.prod_tail: %v", qp.handle, err)
			d.qpError(qp, pvrdma.EventQPFatal)
			return
		}
	}
	if qp.rc != nil {
		if flags&workResp != 0 {
			qp.rc.FlushResponses()
		}
		if flags&(workSend|workTimer) != 0 {
			qp.rc.Pump()
		}
		return
	}
	if flags&workSend != 0 && qp.state == pvrdma.QPStateRTS {
		d.processSQ(qp)
	}
}
