package mlx5

// Data-path benchmarks of the ConnectX model, the counterparts of
// emu/pvrdma's (bench_test.go, latency_bench_test.go) and measured the
// same way (emu/benchtest): two devices on one InfiniBand subnet, each
// probed by the fake mlx5_core/mlx5_ib (mlx5test), one RC QP pair at PMTU
// 1024 (PVRDMA's benchmarks' MTU), 128 signaled WQEs in flight. The
// benchmark goroutine plays the guest: it posts WQEs and rings the
// doorbell as the provider does, polls the CQ by its owner bit and, when
// it is empty, arms it and sleeps until the completion EQ's interrupt
// (MSI-X vector 1), as mlx5_ib does.
//
//	go test -run XXX -bench . -benchmem ./emu/mlx5/
//
// scripts/bench-models runs these and PVRDMA's alternated
// (docs/performance.md).

import (
	"fmt"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/benchtest"
	"github.com/hcaemu/hcaemu/emu/ib/subnet"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

const (
	benchSQ   = 128 // WQEs in flight, as PVRDMA's benchmarks and perftest's -t 128
	benchWait = 10 * time.Second
	benchRAM  = 64 << 20
)

// mlxStreamer keeps messages of one kind flowing from a to b.
type mlxStreamer struct {
	a, b  *rcEnd
	irq   chan struct{} // a token on a's completion interrupt
	sn    uint8         // a's CQ arm sequence number
	wqe   uverbs.SendWQE
	cqe   [uverbs.CQESize64]byte
	timer *time.Timer
	// guard makes the guest's reads of what the engines write (CQEs,
	// EQEs) and its posts hold the device lock, for the race detector
	// (a real guest orders them by the owner bits; tests only).
	guard bool
}

// locked runs fn under d's lock when s.guard is set.
func (s *mlxStreamer) locked(d *Device, fn func()) {
	if !s.guard {
		fn()
		return
	}
	d.core.Lock()
	defer d.core.Unlock()
	fn()
}

// newMLXStreamer connects two devices and prepares a signaled RDMA WRITE
// of size bytes from a's buffer into b's.
func newMLXStreamer(b testing.TB, size int) *mlxStreamer {
	b.Helper()
	sub := subnet.New(subnet.Config{})
	irq := make(chan struct{}, 1)
	end := func(name string, guid uint64, msix func(int)) *rcEnd {
		d, drv := newDevice(b, Config{Name: name, Subnet: sub, NodeGUID: guid, MSIX: msix}, benchRAM)
		if err := drv.Probe(); err != nil {
			b.Fatal(err)
		}
		ib, err := drv.IBProbe()
		if err != nil {
			b.Fatal(err)
		}
		data := uint64(max(size, 4096)+4095) &^ 4095
		e := addEndSized(b, d, drv, ib, rcSize{data: data, cqes: 2 * benchSQ, logSQ: 8}, nil)
		// The guest writes its rings without the device lock, as a
		// guest does (the race detector would see the device read them
		// concurrently: TestBenchStreamer sets guard).
		e.wq.Hold = nil
		return e
	}
	a := end("hca0", 0x0002c90300000100, func(v int) {
		if v == 1 { // the completion EQ's vector (mlx5test.compEQ)
			select {
			case irq <- struct{}{}:
			default:
			}
		}
	})
	bb := end("hca1", 0x0002c90300000200, nil)
	a.connect(b, bb.lid, bb.wq.Q.QPN)
	bb.connect(b, a.lid, a.wq.Q.QPN)
	a.drv.UpdateCI(a.drv.CompEQ, true)
	fill := a.mem(0, size)
	for i := range fill {
		fill[i] = byte(i*7 + 3)
	}
	return &mlxStreamer{a: a, b: bb, irq: irq, timer: time.NewTimer(benchWait),
		wqe: uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeRDMAWrite, FMCESE: signaled},
			Segs: uverbs.HasRAddr, RAddr: uverbs.RAddrSeg{RAddr: bb.data, RKey: bb.key},
			Data: []uverbs.DataSeg{a.seg(0, uint32(size))}}}
}

// stream sends n messages, at most benchSQ outstanding, and waits for all
// of them to complete.
func (s *mlxStreamer) stream(n int) error {
	posted, done := 0, 0
	for done < n {
		for posted < n && posted-done < benchSQ {
			s.a.drv.PostSend(s.a.wq, &s.wqe)
			posted++
		}
		got, err := s.reap()
		if err != nil {
			return err
		}
		if got == 0 {
			// Nothing to poll: arm the CQ, look once more (a CQE that
			// landed before the arm posts its event at once), then sleep
			// until the completion EQ's interrupt.
			if got, err = s.waitIRQ(); err != nil {
				return fmt.Errorf("%w: %d of %d done, %d posted", err, done, n, posted)
			}
		}
		done += got
	}
	return nil
}

// waitIRQ arms a's CQ and, if there is still nothing to poll, waits for
// the completion interrupt, consumes the EQ's events and re-arms the EQ
// (mlx5_eq_comp_int), then polls.
func (s *mlxStreamer) waitIRQ() (int, error) {
	d := s.a.drv
	d.ArmCQ(s.a.cq, d.UAR, s.a.ci, s.sn, false)
	if got, err := s.reap(); got != 0 || err != nil {
		return got, err
	}
	s.timer.Reset(benchWait)
	select {
	case <-s.irq:
	case <-s.timer.C:
		return 0, fmt.Errorf("no completion in %v", benchWait)
	}
	s.timer.Stop()
	s.locked(s.a.d, func() {
		for d.NextEQE(d.CompEQ) != nil {
			s.sn++ // mlx5_cq_completion: cq->arm_sn++
		}
	})
	d.UpdateCI(d.CompEQ, true)
	return s.reap()
}

// reap polls a's CQ and returns the number of send completions.
func (s *mlxStreamer) reap() (n int, err error) {
	s.locked(s.a.d, func() {
		for s.a.drv.PollCQTo(s.a.cq, &s.a.ci, s.cqe[:]) {
			if s.cqe[uverbs.OpOwnOffset]>>4 != uverbs.CQEReq {
				err = fmt.Errorf("send completion %+v", uverbs.DecodeErrCQE(s.cqe[:]))
				return
			}
			n++
		}
	})
	return n, err
}

func (s *mlxStreamer) run(b *testing.B, n int) {
	if err := s.stream(n); err != nil {
		b.Fatal(err)
	}
}

func benchMLXWrite(b *testing.B, size int) {
	s := newMLXStreamer(b, size)
	benchtest.Stream(b, size, func(n int) { s.run(b, n) }, s.b.mem(0, size), s.a.mem(0, size))
}

// BenchmarkRCWrite is ib_write_bw: RC RDMA WRITE, 128 WQEs in flight,
// every one signaled; x-copy is the rate as a share of copy() of the same
// size between the same two buffers, in the same run.
func BenchmarkRCWrite(b *testing.B) {
	for _, sz := range []struct {
		name string
		n    int
	}{{"4KiB", 4 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}} {
		b.Run(sz.name, func(b *testing.B) { benchMLXWrite(b, sz.n) })
	}
}

// BenchmarkRCMessageRate is the small-message rate: 64-byte WRITEs, one
// packet each, so the cost is per WQE and per packet.
func BenchmarkRCMessageRate(b *testing.B) {
	b.Run("WRITE64", func(b *testing.B) { benchMLXWrite(b, 64) })
}

// BenchmarkLatencyDoorbellToCompletion is ib_write_lat's inner step on one
// side: post one signaled 64-byte WRITE, ring the doorbell and wait for
// its CQE, sleeping for the interrupt when the CQ is empty.
func BenchmarkLatencyDoorbellToCompletion(b *testing.B) {
	benchMLXLatency(b, func(s *mlxStreamer) { s.run(b, 1) })
}

// BenchmarkLatencyDoorbellToCompletionPolled is the same step with the
// guest polling its CQ, as perftest's latency tests do.
func BenchmarkLatencyDoorbellToCompletionPolled(b *testing.B) {
	benchMLXLatency(b, func(s *mlxStreamer) {
		s.a.drv.PostSend(s.a.wq, &s.wqe)
		benchtest.Spin(b, benchWait, s.reap)
	})
}

// benchMLXLatency times step b.N times and reports the percentiles.
func benchMLXLatency(b *testing.B, step func(s *mlxStreamer)) {
	s := newMLXStreamer(b, 64)
	s.run(b, 64) // warm up
	samples := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		step(s)
		samples = append(samples, time.Since(start))
	}
	b.StopTimer()
	benchtest.ReportPercentiles(b, samples)
}

// TestBenchStreamer runs the benchmarks' streamer for a few messages of
// each size and checks the data arrived: the benchmarks measure a data
// path that works.
func TestBenchStreamer(t *testing.T) {
	for _, size := range []int{64, 64 << 10} {
		s := newMLXStreamer(t, size)
		s.guard = true
		s.a.wq.Hold = func(fn func()) { s.locked(s.a.d, fn) }
		s.a.cq.Hold = s.a.wq.Hold
		if err := s.stream(3 * benchSQ); err != nil {
			t.Fatal(err)
		}
		s.b.d.Sync()
		s.locked(s.b.d, func() {
			if got, want := s.b.mem(0, size), s.a.mem(0, size); string(got) != string(want) {
				t.Errorf("%d bytes: the WRITE's data differ", size)
			}
		})
	}
}
