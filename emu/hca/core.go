package hca

import (
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/transport"
)

// Model is what the core asks of the device model it runs: the work it
// schedules, done under the device lock on the engine's goroutine (or a
// helper's), and what must happen before the lock goes.
type Model interface {
	// Service does what an object's kicks asked for: work flags, and for a
	// QP whose timer expired (expired), that expiry's generation.
	Service(target Target, handle uint32, work Work, timerGen uint64, expired bool)
	// ReceiveFrame takes a frame from the fabric; it owns the frame.
	ReceiveFrame(frame []byte)
	// ReceiveBatch takes a batch of packets another HCA of the process sent
	// without frames (the core releases the batch after).
	ReceiveBatch(b *fabric.Batch)
	// BeforeUnlock runs last under the lock: what the guest or the other
	// HCAs must see before it goes (ring indexes, the batch being built).
	BeforeUnlock()
	// DeviceFatal declares the device dead to its driver (its DEVICE_FATAL
	// event): the engine panicked on the device's work.
	DeviceFatal()
}

// Core is the part of an HCA every device model shares: the device lock,
// with the interrupts raised under it sent once it is released, and the
// engine that runs the device's work off the vCPUs (doorbell kicks,
// frames, batches from the other HCAs, timers).
//
// Lock order: the engine's taking lock, then the device lock, then the
// engine's queue locks (engine.go).
type Core struct {
	model Model
	log   *slog.Logger
	msix  func(int)
	// pending counts, per MSI-X vector, the interrupts raised while mu was
	// held; Unlock sends them once mu is released, so no eventfd write
	// happens under the device lock. raised: some pending is non-zero.
	pending []atomic.Uint32
	raised  atomic.Bool

	eng engine

	// mu, the device lock, is held while a command, a doorbell or a unit
	// of the engine's work runs; the model's state is under it too.
	mu sync.Mutex
	// w: the engine goroutine working under the lock, nil for any other
	// holder (a vCPU's register write, a command).
	w *Worker
	// timerGens numbers the armings of the QPs' timers (timer.go);
	// frozen: they never expire (FreezeTimers).
	timerGens uint64
	frozen    bool
	// Fatal: the device is dead (a panic in its work, an injected fault,
	// strict mode's latch): the engine does no more work for it until the
	// model clears it (a reset). Closed: the device is gone. Both under mu.
	Fatal, Closed bool
}

// Start makes c the core of model, with vectors MSI-X vectors raised
// through msix (never blocking; nil drops them), and starts its engine.
func (c *Core) Start(model Model, log *slog.Logger, vectors int, msix func(int)) {
	if msix == nil {
		msix = func(int) {}
	}
	c.model, c.log, c.msix = model, log, msix
	c.pending = make([]atomic.Uint32, vectors)
	c.eng.start(c)
}

// Stop stops the engine and waits for it (the device is closed).
func (c *Core) Stop() { c.eng.stop() }

// Lock takes the device lock.
func (c *Core) Lock() { c.mu.Lock() }

// Unlock lets the device lock go, the model's BeforeUnlock first, then
// sends the interrupts raised while it was held: an MSI-X write (an
// eventfd) never happens under the lock.
func (c *Core) Unlock() {
	c.model.BeforeUnlock()
	c.w = nil
	if !c.raised.Load() {
		c.mu.Unlock()
		return // the common case: nothing raised while the lock was held
	}
	c.raised.Store(false)
	// Taken while the lock is still held, so that every interrupt is sent
	// by the goroutine that raised it, before its Unlock returns: a
	// command's response interrupt before the reply to its REQUEST write.
	// (Swapped after the release, another holder could take and send it
	// a moment after this Unlock returned.)
	var buf [32]uint32
	counts := buf[:0]
	if len(c.pending) > len(buf) {
		counts = make([]uint32, 0, len(c.pending))
	}
	for v := range c.pending {
		counts = append(counts, c.pending[v].Swap(0))
	}
	c.mu.Unlock()
	for v, n := range counts {
		for ; n > 0; n-- {
			c.msix(v)
		}
	}
}

// Raise asks for MSI-X vector v, sent when the lock is let go (lock held).
func (c *Core) Raise(v int) {
	if v < 0 || v >= len(c.pending) {
		return
	}
	c.pending[v].Add(1)
	c.raised.Store(true)
}

// Worker is the engine goroutine working under the lock now, nil for any
// other holder (lock held).
func (c *Core) Worker() *Worker { return c.w }

// Kick records that an object has work (any goroutine; never blocks); the
// engine does it.
func (c *Core) Kick(target Target, handle uint32, work Work) { c.eng.kick(target, handle, work) }

// KickLater kicks QP h again after a short back-off (a busy receiver).
func (c *Core) KickLater(h uint32, work Work) { c.eng.kickLater(h, work) }

// KickQP is a QP's transport.Env Kick: QP h has sends to take or
// (WorkRespond) responses to send, now or (later) after the back-off.
func (c *Core) KickQP(h uint32, work transport.Work, later bool) {
	flags := WorkSend
	if work == transport.WorkRespond {
		flags = WorkResp
	}
	if later {
		c.KickLater(h, flags)
	} else {
		c.Kick(TargetQP, h, flags)
	}
}

// KickTimer reports that QP h's timer of generation gen expired (timer
// goroutine).
func (c *Core) KickTimer(h uint32, gen uint64) { c.eng.kickTimer(h, gen) }

// Drop forgets pending kicks (device reset; lock held).
func (c *Core) Drop() { c.eng.drop() }

// DirectReceiver is the engine as the taker of the batches other HCAs send
// this device (fabric.Port.SetDirect).
func (c *Core) DirectReceiver() fabric.DirectReceiver { return &c.eng }

// Helps records that w delivered a batch to r without waking it: w offers
// to take it once its unit of work is done. A receiver that is not an
// engine of this package is left alone (it was woken by its Deliver).
func (w *Worker) Helps(r fabric.DirectReceiver) {
	if e, ok := r.(*engine); ok {
		w.add(e)
	}
}

// Work runs fn as one unit of the engine's work (a received frame, one QP's
// news) under the device lock, and reports whether it ran. A panic in it
// is a bug, but one that guest or peer input reached: it costs this device,
// not the process and every other guest on it. It is logged with its stack,
// the model declares the device fatal, and the engine does no more work for
// the device until it is reset.
//
// w is the engine goroutine doing the work, this device's or a helper's
// (nil: none, as in tests): batches the work sends go to their receivers
// without waking them, and w offers to take them once the work is done.
func (c *Core) Work(w *Worker, fn func()) bool { return c.work(w, fn) }

func (c *Core) work(w *Worker, fn func()) (ran bool) {
	c.mu.Lock()
	return c.workLocked(w, fn)
}

// workLocked is work once the lock is taken; it lets it go.
func (c *Core) workLocked(w *Worker, fn func()) (ran bool) {
	c.w = w
	defer c.Unlock()
	if c.Fatal {
		return false
	}
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("device fatal: panic in the engine", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			c.Fatal = true
			c.model.DeviceFatal()
		}
	}()
	ran = true // fn owns what it was given, even if it panics
	fn()
	return ran
}

// Helped is how many batches another device's engine took for this one.
func (c *Core) Helped() uint64 { return c.eng.helped.Load() }

// HoldTaking runs fn while holding the right to take the device's queued
// batches, as its engine or a helper does while it takes them (tests).
func (c *Core) HoldTaking(fn func()) {
	c.eng.taking.Lock()
	defer c.eng.taking.Unlock()
	fn()
}
