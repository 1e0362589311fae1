package hca

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hcaemu/hcaemu/emu/fabric"
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
	c        *Core
	mu       sync.Mutex
	pending  map[uint64]Work   // kind<<32|handle -> OR of kick flags
	spare    map[uint64]Work   // the other map, handed back empty by run
	fired    map[uint32]uint64 // QP handle -> generation of its expired timer
	barriers []chan struct{}   // closed once the work queued before them is done
	wake     chan struct{}
	rx       chan []byte // frames from the fabric
	rxDrops  uint64      // frames refused: the queue was full
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
	w      Worker // the engine goroutine's own
}

// Worker is what an engine goroutine carries through its work: the engines
// of the HCAs it delivered batches to without waking them (fabric.Batch's
// Helped), which it offers to help once its unit of work is done. It
// belongs to one goroutine.
type Worker struct {
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
func (w *Worker) add(e *engine) {
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
func (w *Worker) offer() {
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

// Target is what a kick's handle names.
type Target uint32

// The targets.
const (
	TargetQP  Target = 1
	TargetSRQ Target = 2
)

// Work is what a kicked object has to do, in flags.
type Work uint32

// The work.
const (
	WorkSend  Work = 1 << iota // the send queue has new WQEs
	WorkRecv                   // the receive queue has new WQEs
	WorkTimer                  // the QP's timer expired
	WorkResp                   // the RC responder has queued responses to send
)

const (
	backoff = 50 * time.Microsecond // wait for a busy receiver

	// RxQueue: frames queued per device; beyond that the wire drops.
	RxQueue = 8192
	rxBatch = 256 // frames handled per wake-up before doorbell work gets a turn
	// directQueue: batches queued per device (fabric.BatchBytes each).
	directQueue = 64
)

func (eng *engine) start(c *Core) {
	eng.pending, eng.spare = map[uint64]Work{}, map[uint64]Work{}
	eng.fired = map[uint32]uint64{}
	eng.wake = make(chan struct{}, 1)
	eng.rx = make(chan []byte, RxQueue)
	eng.c, eng.w = c, Worker{self: eng}
	eng.quit = make(chan struct{})
	eng.done = make(chan struct{})
	go eng.run(c)
}

func (eng *engine) kick(kind Target, handle uint32, flags Work) {
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
	eng.pending[uint64(TargetQP)<<32|uint64(h)] |= WorkTimer
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

func (eng *engine) run(c *Core) {
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
			c.receiveLocked(w, first)
		frames:
			for i := 1; i < rxBatch; i++ {
				select {
				case f := <-eng.rx:
					c.receiveLocked(w, f)
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
			c.work(w, func() {
				if closed = c.Closed; closed {
					return
				}
				kind, h := Target(key>>32), uint32(key)
				var gen uint64
				var expired bool
				if kind == TargetQP && flags&WorkTimer != 0 {
					gen, expired = fired[h]
				}
				c.model.Service(kind, h, flags, gen, expired)
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
					c.receiveLocked(w, f)
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
func (c *Core) receiveLocked(w *Worker, frame []byte) {
	if !c.work(w, func() { c.model.ReceiveFrame(frame) }) {
		fabric.Release(frame) // a fatal device takes no frames
	}
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
func (eng *engine) takeBatches(w *Worker, max int) {
	helper := w != &eng.w
	for ; max > 0; max-- {
		if !helper {
			eng.c.mu.Lock()
		} else if !eng.c.mu.TryLock() {
			return
		}
		b := eng.pop()
		if b == nil {
			eng.c.mu.Unlock()
			return
		}
		eng.rxbHeld.Add(-1)
		if helper {
			eng.helped.Add(1)
		}
		eng.c.workLocked(w, func() { eng.c.model.ReceiveBatch(b) })
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

// Receive takes a frame from the fabric (any goroutine; never blocks): the
// device's fabric port calls it. A full queue drops the frame and reports
// it, so the sender backs off.
func (c *Core) Receive(frame []byte) bool {
	eng := &c.eng
	select {
	case eng.rx <- frame:
		return true
	default:
		eng.mu.Lock()
		eng.rxDrops++
		eng.mu.Unlock()
		fabric.Release(frame)
		return false
	}
}

// RxDrops is how many frames the device's full receive queue refused.
func (c *Core) RxDrops() uint64 {
	c.eng.mu.Lock()
	defer c.eng.mu.Unlock()
	return c.eng.rxDrops
}

// kickLater services QP h again after a short back-off (a busy receiver).
func (eng *engine) kickLater(h uint32, flags Work) {
	time.AfterFunc(backoff, func() { eng.kick(TargetQP, h, flags) })
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
func (c *Core) Sync() { c.eng.sync() }

// Idle reports whether the device has no queued frames or doorbells.
func (c *Core) Idle() bool {
	c.eng.mu.Lock()
	defer c.eng.mu.Unlock()
	return len(c.eng.rx) == 0 && len(c.eng.pending) == 0 && c.eng.queued() == 0
}
