package hca

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/fabric"
)

// fakeModel records what the core asks of it.
type fakeModel struct {
	services chan service
	fatal    chan struct{}
	unlocks  int
	panicOn  uint32 // a handle whose Service panics
}

type service struct {
	target  Target
	handle  uint32
	work    Work
	gen     uint64
	expired bool
}

func (m *fakeModel) Service(target Target, h uint32, work Work, gen uint64, expired bool) {
	if h == m.panicOn && h != 0 {
		panic("bug reached by guest input")
	}
	m.services <- service{target, h, work, gen, expired}
}
func (m *fakeModel) ReceiveFrame(frame []byte)    { fabric.Release(frame) }
func (m *fakeModel) ReceiveBatch(b *fabric.Batch) {}
func (m *fakeModel) BeforeUnlock()                { m.unlocks++ }
func (m *fakeModel) DeviceFatal()                 { m.fatal <- struct{}{} }

func newCore(t *testing.T) (*Core, *fakeModel, *[]int) {
	t.Helper()
	m := &fakeModel{services: make(chan service, 16), fatal: make(chan struct{}, 1)}
	var raised []int
	c := &Core{}
	c.Start(m, slog.New(slog.NewTextHandler(io.Discard, nil)), 3, func(v int) { raised = append(raised, v) })
	t.Cleanup(c.Stop)
	return c, m, &raised
}

func waitService(t *testing.T, m *fakeModel) service {
	t.Helper()
	select {
	case s := <-m.services:
		return s
	case <-time.After(time.Minute): // a watchdog, not a timing
		t.Fatal("the engine never serviced the kick")
		return service{}
	}
}

// TestCoreKicksAndInterrupts: kicks reach the model as work for their
// object, serviced under the lock (kicks pending together are coalesced:
// an engine that woke for the first of two may already have taken it, so
// the two may come as one service or as two, never as more and never for
// another object); vectors raised under the lock are sent after Unlock,
// out-of-range ones dropped.
func TestCoreKicksAndInterrupts(t *testing.T) {
	c, m, raised := newCore(t)
	c.Lock()
	c.Kick(TargetQP, 5, WorkSend)
	c.Kick(TargetQP, 5, WorkRecv)
	c.Raise(2)
	c.Raise(7) // no such vector
	if len(*raised) != 0 {
		t.Error("an interrupt was sent under the lock")
	}
	c.Unlock()
	if len(*raised) != 1 || (*raised)[0] != 2 {
		t.Errorf("vectors sent %v, want [2]", *raised)
	}
	var work Work
	for services := 1; work != WorkSend|WorkRecv; services++ {
		s := waitService(t, m)
		if s.target != TargetQP || s.handle != 5 || s.work&^(WorkSend|WorkRecv) != 0 || s.expired || services > 2 {
			t.Fatalf("service %d: %+v, want QP 5 with send and receive work, in at most two", services, s)
		}
		work |= s.work
	}
	c.Sync()
	select {
	case s := <-m.services:
		t.Errorf("a service more: %+v", s)
	default:
	}
}

// TestCoreTimer: an armed timer's expiry reaches the model with its
// generation, once; an expiry of an arming since stopped or re-armed is
// stale.
func TestCoreTimer(t *testing.T) {
	c, m, _ := newCore(t)
	qp := &QP{Handle: 9}
	c.Lock()
	c.ArmTimer(qp, time.Millisecond)
	c.Unlock()
	s := waitService(t, m)
	if s.handle != 9 || !s.expired || s.work&WorkTimer == 0 {
		t.Fatalf("serviced %+v, want QP 9's expiry", s)
	}
	c.Lock()
	first := c.TimerExpired(qp, s.gen)
	again := c.TimerExpired(qp, s.gen)
	c.ArmTimer(qp, time.Hour)
	stale := c.TimerExpired(qp, s.gen)
	c.StopTimer(qp)
	c.Unlock()
	if !first || again || stale {
		t.Errorf("expired: first %v, again %v, after re-arming %v; want true, false, false", first, again, stale)
	}
}

// TestCorePanicIsDeviceFatal: a panic in the device's work costs the
// device (DeviceFatal, no more work), not the process.
func TestCorePanicIsDeviceFatal(t *testing.T) {
	c, m, _ := newCore(t)
	m.panicOn = 3
	c.Kick(TargetQP, 3, WorkSend)
	select {
	case <-m.fatal:
	case <-time.After(time.Minute):
		t.Fatal("no device fatal after a panic")
	}
	if c.Work(nil, func() {}) {
		t.Error("a fatal device still does work")
	}
}
