// Package benchtest holds what the device models' data-path benchmarks
// share: the yardstick (copy()'s rate), the process's CPU time and the
// latency percentiles they report, so that the PVRDMA and mlx5 figures
// are measured the same way (docs/performance.md).
package benchtest

import (
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"
)

// CopyRate is the bytes per second of copy() from src to dst, measured now
// for about d.
func CopyRate(dst, src []byte, d time.Duration) float64 {
	n := 0
	start := time.Now()
	for time.Since(start) < d {
		for range 16 {
			copy(dst, src)
		}
		n += 16
	}
	return float64(n) * float64(len(src)) / time.Since(start).Seconds()
}

// CPUTime is the process's user + system CPU time.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ReportStream adds a streaming benchmark's metrics, measured from cpu0
// (CPUTime before the timed loop) with the timer stopped: messages per
// second; the whole process's CPU time per message (both devices'
// engines, the fake guest, the GC), which unlike ns/op does not depend on
// how busy the rest of the machine is; and, when size > 0, copy() of the
// same size between dst and src now (copy-MB/s) and the stream's rate as
// a share of it (x-copy).
func ReportStream(b *testing.B, cpu0 time.Duration, size int, dst, src []byte) {
	cpu := CPUTime() - cpu0
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
	if size == 0 {
		return
	}
	rate := CopyRate(dst[:size], src[:size], 50*time.Millisecond)
	b.ReportMetric(rate/1e6, "copy-MB/s")
	b.ReportMetric(float64(size)*float64(b.N)/b.Elapsed().Seconds()/rate, "x-copy")
}

// ReportPercentiles adds the median, 99th percentile and maximum of
// samples to the benchmark's metrics.
func ReportPercentiles(b *testing.B, samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	at := func(q float64) time.Duration { return samples[min(len(samples)-1, int(q*float64(len(samples))))] }
	b.ReportMetric(float64(at(0.50).Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(at(0.99).Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(samples[len(samples)-1].Nanoseconds()), "max-ns")
}

// Stream is a streaming benchmark's body: run(n) moves n messages of size
// bytes (at most 128 in flight) and waits for their completions. It warms
// up (frame pools, maps, timers), times b.N messages and reports them
// with ReportStream against copy() from src to dst.
func Stream(b *testing.B, size int, run func(n int), dst, src []byte) {
	run(min(128, b.N))
	b.SetBytes(int64(size))
	b.ReportAllocs()
	cpu0 := CPUTime()
	b.ResetTimer()
	run(b.N)
	b.StopTimer()
	ReportStream(b, cpu0, size, dst, src)
}

// Spin polls until poll reports a completion, as perftest's latency tests
// busy-poll their CQ, yielding between polls (the guest's vCPU is a thread
// of its own; here it shares the Go scheduler's threads with the
// engines); it fails the benchmark on poll's error or after wait.
func Spin(b *testing.B, wait time.Duration, poll func() (int, error)) {
	start := time.Now()
	for spins := 0; ; spins++ {
		got, err := poll()
		if err != nil {
			b.Fatal(err)
		}
		if got > 0 {
			return
		}
		runtime.Gosched()
		if spins%(1<<16) == 0 && time.Since(start) > wait {
			b.Fatalf("no completion in %v", wait)
		}
	}
}
