package mlx5

import "time"

// The device clock (spec §4.3): a free-running 64-bit counter at
// device_frequency_khz (DeviceFrequencyKHz: 1 GHz, so it counts
// nanoseconds), read through internal_timer_h/l (BAR0 0x1000 and 0x1004,
// the page mlx5_ib maps read-only into every user process for
// ibv_query_rt_values_ex) and written into every CQE's timestamp. With it,
// mlx5_core registers its clock and the clock-info page that
// mlx5dv_get_clock_info and mlx5dv_ts_to_ns convert timestamps with.
//
// A device made with Config.StepClock (recording and replay, which compare
// every register read and CQE byte) counts instead of telling time: the
// timer advances one step per register read, a CQE's timestamp one step
// per CQE; each sequence is deterministic on its own (a vCPU's reads and
// the engine's CQEs may interleave differently between a recording and its
// replay), at the cost of timestamps that do not follow the timer.

// DeviceFrequencyKHz is the clock's rate the capabilities report.
const DeviceFrequencyKHz = 1_000_000

// clockStep is how far a step clock moves per read or CQE (ns).
const clockStep = 1000

// deviceClock is the counter's state (under the device lock).
type deviceClock struct {
	start       time.Time
	step        bool
	reads, cqes uint64
}

func newDeviceClock(step bool) deviceClock { return deviceClock{start: time.Now(), step: step} }

// timerRead is the counter as a read of internal_timer_h or _l sees it.
func (c *deviceClock) timerRead() uint64 {
	if c.step {
		c.reads++
		return c.reads * clockStep
	}
	return uint64(time.Since(c.start))
}

// cqeTime is the timestamp of the CQE being written.
func (c *deviceClock) cqeTime() uint64 {
	if c.step {
		c.cqes++
		return c.cqes * clockStep
	}
	return uint64(time.Since(c.start))
}
