package hca

import (
	"sync/atomic"
	"time"
)

// A QP's timer (the RC requester's retransmission and RNR timer): armed
// and stopped under the device lock, its expiry kicks the engine, which
// hands it to the model (Model.Service with expired) only if it is the
// expiry of the arming in force. Each arming has a generation, numbered
// device-wide, so a late expiry never matches a later arming, of this QP or
// of another that took its handle.
type qpTimer struct {
	timer *time.Timer // made at the first arming and reset after: no allocation per arming
	gen   uint64      // the arming in force (device lock)
	armed bool        // whether it runs (device lock)
	// The timer goroutine reads fireGen and deadline, set before each
	// reset, to tell its own expiry from an earlier one's late run.
	fireGen  atomic.Uint64
	deadline atomic.Int64 // of the arming in force, on monoClock
}

// ArmTimer (re)arms qp's timer to expire after dur (device lock held).
func (c *Core) ArmTimer(qp *QP, dur time.Duration) {
	t := &qp.timer
	c.timerGens++
	t.gen, t.armed = c.timerGens, true
	// The deadline before the generation: fire reads them the other way.
	t.deadline.Store(int64(monoClock() + dur))
	t.fireGen.Store(t.gen)
	if c.frozen {
		return
	}
	if t.timer == nil {
		handle := qp.Handle
		t.timer = time.AfterFunc(dur, func() { c.fire(t, handle) })
	} else {
		t.timer.Reset(dur)
	}
}

// fire is the timer's function (timer goroutine). An expiry whose run
// starts after the timer was armed again reads the new arming's deadline,
// still ahead, and does nothing (the reset timer fires again); one that
// reads the old generation is stale to TimerExpired, which drops it.
func (c *Core) fire(t *qpTimer, handle uint32) {
	gen := t.fireGen.Load()
	if monoClock() < time.Duration(t.deadline.Load()) {
		return
	}
	c.KickTimer(handle, gen)
}

// StopTimer stops qp's timer (device lock held); an expiry already on its
// way is stale.
func (c *Core) StopTimer(qp *QP) {
	t := &qp.timer
	if t.timer != nil {
		t.timer.Stop()
	}
	t.armed = false
	c.timerGens++
	t.gen = c.timerGens
}

// TimerExpired reports whether an expiry of generation gen is that of qp's
// arming in force, and disarms it if so (device lock held): the model then
// lets the QP's transport time out.
func (c *Core) TimerExpired(qp *QP, gen uint64) bool {
	t := &qp.timer
	if gen != t.gen || !t.armed {
		return false
	}
	t.armed = false
	return true
}

// monoEpoch is where monoClock counts from.
var monoEpoch = time.Now()

// monoClock is the monotonic time since monoEpoch.
func monoClock() time.Duration { return time.Since(monoEpoch) }

// FreezeTimers makes the QPs' timers never expire: they are armed and
// stopped as always, with their generations, but no expiry is ever
// kicked (before Start). A replay of a recording uses it: it runs at no
// wall-clock pace, and the recordings it replays have no expiry in them.
func (c *Core) FreezeTimers() { c.frozen = true }
