package hca

import (
	"io"
	"log/slog"
	"testing"
	"time"
)

// TestCoreFrozenTimers: with FreezeTimers (a replay) a timer is armed and
// stopped with its generations as always but never expires: the engine's
// next work is the kick that follows, not the expiry of a timer armed long
// before it.
func TestCoreFrozenTimers(t *testing.T) {
	m := &fakeModel{services: make(chan service, 16), fatal: make(chan struct{}, 1)}
	c := &Core{}
	c.FreezeTimers()
	c.Start(m, slog.New(slog.NewTextHandler(io.Discard, nil)), 1, nil)
	t.Cleanup(c.Stop)
	qp := &QP{Handle: 9}
	c.Lock()
	c.ArmTimer(qp, time.Microsecond)
	gen := qp.timer.gen
	c.Unlock()
	time.Sleep(20 * time.Millisecond) // long past the deadline
	c.Kick(TargetQP, 4, WorkSend)
	if s := waitService(t, m); s.handle != 4 || s.expired {
		t.Fatalf("serviced %+v first, want QP 4's send (no expiry)", s)
	}
	c.Lock()
	armed := qp.timer.armed
	c.StopTimer(qp)
	stale := c.TimerExpired(qp, gen)
	c.Unlock()
	if !armed || stale {
		t.Errorf("armed %v, expired after stopping %v; want true, false", armed, stale)
	}
}
