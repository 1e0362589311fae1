package mlx5

import (
	"encoding/binary"
	"testing"

	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
)

// readTimer reads internal_timer_h and _l as mlx5_read_time does (h, l,
// h; l again if h moved), through BAR0 as a vCPU would.
func readTimer(t *testing.T, d *Device) uint64 {
	t.Helper()
	word := func(off uint64) uint32 {
		var b [4]byte
		if err := d.ReadRegion(regionInit, off, b[:]); err != nil {
			t.Fatal(err)
		}
		return binary.BigEndian.Uint32(b[:])
	}
	h1 := word(ifc.InitSegInternalTimerH)
	l := word(ifc.InitSegInternalTimerL)
	h2 := word(ifc.InitSegInternalTimerH)
	if h1 != h2 {
		l = word(ifc.InitSegInternalTimerL)
	}
	return uint64(h2)<<32 | uint64(l)
}

// TestClock: the internal timer counts nanoseconds (the rate the caps
// report) and only forward; a CQE's timestamp is the timer's value when
// it is written; a step clock counts reads and CQEs, deterministically.
func TestClock(t *testing.T) {
	d := New(Config{Name: "clock"})
	defer d.Close()
	t1 := readTimer(t, d)
	t2 := readTimer(t, d)
	d.core.Lock()
	c := d.clock.cqeTime()
	d.core.Unlock()
	t3 := readTimer(t, d)
	if !(t1 <= t2 && t2 <= c && c <= t3) || t3 == t1 {
		t.Errorf("timer %d, %d, CQE %d, timer %d: want a clock moving forward", t1, t2, c, t3)
	}

	s := New(Config{Name: "step", StepClock: true})
	defer s.Close()
	var got []uint64
	for range 2 {
		got = append(got, readTimer(t, s))
	}
	s.core.Lock()
	got = append(got, s.clock.cqeTime(), s.clock.cqeTime())
	s.core.Unlock()
	// Three register reads per readTimer (h, l, h): the l read is the
	// second of each three.
	want := []uint64{2 * clockStep, 5 * clockStep, clockStep, 2 * clockStep}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("step clock %v, want %v", got, want)
		}
	}
}
