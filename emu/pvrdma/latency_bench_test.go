package pvrdma_test

// Latency benchmarks: what one operation waits for, as percentiles, not a
// throughput. They report the median (p50-ns), the 99th percentile (p99-ns)
// and the worst case (max-ns) of the iterations, next to ns/op.
//
//	go test -run XXX -bench 'Latency' ./emu/

import (
	"encoding/binary"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	doorbell "github.com/hcaemu/hcaemu/doorbell/pvrdma"
	"github.com/hcaemu/hcaemu/emu/benchtest"
	"github.com/hcaemu/hcaemu/emu/pvrdma"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// BenchmarkLatencyDoorbellToCompletion is ib_write_lat's inner step on one
// side: post one signaled 64-byte RDMA_WRITE (WQE in the ring, doorbell), and
// wait for its CQE: the requester sends, the responder writes and ACKs, the
// requester completes. The guest waits the way the driver does when the CQ is
// empty: arm, look again, sleep until the completion interrupt.
func BenchmarkLatencyDoorbellToCompletion(b *testing.B) {
	benchDoorbellLatency(b, func(s *streamer, _ int) { s.run(b, 1) })
}

// BenchmarkLatencyDoorbellToCompletionPolled is the same step with the
// guest polling its CQ instead of sleeping for the interrupt, as perftest's
// latency tests do (they busy-poll ibv_poll_cq): what the device itself adds
// between the doorbell and the CQE, without the wake-up of a sleeping guest.
func BenchmarkLatencyDoorbellToCompletionPolled(b *testing.B) {
	benchDoorbellLatency(b, func(s *streamer, i int) {
		s.send.WRID = uint64(i)
		s.qa.PostSend(s.send)
		benchtest.Spin(b, benchWait, s.reap)
	})
}

// benchDoorbellLatency times step (post one 64-byte WRITE and wait for its
// completion) b.N times and reports the percentiles.
func benchDoorbellLatency(b *testing.B, step func(s *streamer, i int)) {
	s := newStreamer(b, uverbs.OpRDMAWrite, 64)
	s.run(b, 64) // warm up
	samples := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		step(s, i)
		samples = append(samples, time.Since(start))
	}
	b.StopTimer()
	benchtest.ReportPercentiles(b, samples)
}

// BenchmarkLatencyRegisterReadUnderLoad measures what a vCPU's read of a
// BAR1 register (ERR, as the driver reads after every command) waits while
// the device streams 64 KiB RDMA_WRITEs with a full send queue: the vfio
// reader must not wait behind a batch of received frames or a send queue's
// worth of WQEs.
func BenchmarkLatencyRegisterReadUnderLoad(b *testing.B) {
	reg := make([]byte, 4)
	benchVCPUUnderLoad(b, func(dev *pvrdma.Device) error { return dev.ReadRegion(1, abi.RegErr, reg) })
}

// BenchmarkLatencyDoorbellUnderLoad is the same for a UAR doorbell write,
// which takes the device lock (ownership checks, CQ arming): it waits for one
// frame or one QP's bounded batch of work, not for a whole batch of frames.
// The doorbell names a QP that does not exist, so it changes nothing.
func BenchmarkLatencyDoorbellUnderLoad(b *testing.B) {
	db := binary.LittleEndian.AppendUint32(nil, doorbell.QPSend|0xFFFFF)
	benchVCPUUnderLoad(b, func(dev *pvrdma.Device) error { return dev.WriteRegion(2, 0, db) })
}

// benchVCPUUnderLoad times access, one vCPU exit, while the device streams
// 64 KiB RDMA_WRITEs with a full send queue.
func benchVCPUUnderLoad(b *testing.B, access func(*pvrdma.Device) error) {
	s := newStreamer(b, uverbs.OpRDMAWrite, 64<<10)
	s.run(b, 64) // warm up
	var stop atomic.Bool
	var wg sync.WaitGroup
	var loadErr atomic.Value
	wg.Add(1)
	go func() {
		defer wg.Done()
		// b.Fatal must not run off the benchmark goroutine: keep the
		// error and report it afterwards.
		for !stop.Load() {
			if err := s.stream(benchSQ); err != nil {
				loadErr.Store(err)
				return
			}
		}
	}()
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		// Space the accesses out (a vCPU exits now and then, not in a
		// tight loop), so that they sample the whole streaming period.
		for pause := time.Now(); time.Since(pause) < 20*time.Microsecond; {
			runtime.Gosched()
		}
		start := time.Now()
		if err := access(s.a.dev); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(start))
	}
	b.StopTimer()
	stop.Store(true)
	wg.Wait()
	if err, ok := loadErr.Load().(error); ok {
		b.Fatal(err)
	}
	benchtest.ReportPercentiles(b, samples)
}
