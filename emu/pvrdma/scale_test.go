package pvrdma_test

import (
	"bytes"
	"log/slog"
	"net/netip"
	"runtime"
	"strings"
	"testing"

	"github.com/hcaemu/hcaemu/emu/emutest"
	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/pvrdma"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// TestSixteenHCAs: one segment carries sixteen HCAs (what one hcaemu serve
// with sixteen sockets holds): each of eight pairs, first with last, runs
// an RC SEND whose bytes arrive.
func TestSixteenHCAs(t *testing.T) {
	checkGoroutines(t)
	sw := fabric.NewSwitch()
	hosts := make([]*host, 16)
	for i := range hosts {
		hosts[i] = newHostRAM(t, sw, i+1, 4<<20)
	}
	for i := range 8 {
		a, b := hosts[i], hosts[15-i]
		qa, qb := pairRC(t, a, b, defaultRC(), defaultRC())
		const n = 3000
		src, lkA, _ := a.mr(t, n, allAccess)
		dst, lkB, _ := b.mr(t, n, allAccess)
		fill(a.RAM.Mem[src:src+n], byte(i+1))
		qb.PostRecv(uverbs.RecvWQE{WRID: 7, SGE: []uverbs.SGE{{Addr: dst, Length: n, LKey: lkB}}})
		qa.PostSend(send(uverbs.OpSend, 9, 0, uverbs.SGE{Addr: src, Length: n, LKey: lkA}))
		if e := poll(t, a.cq, a, b); e.Status != uverbs.WCSuccess || e.WRID != 9 {
			t.Fatalf("pair %d: sender CQE %+v", i, e)
		}
		if e := poll(t, b.cq, a, b); e.Status != uverbs.WCSuccess || e.WRID != 7 || e.ByteLen != n {
			t.Fatalf("pair %d: receiver CQE %+v", i, e)
		}
		if !bytes.Equal(b.RAM.Mem[dst:dst+n], a.RAM.Mem[src:src+n]) {
			t.Fatalf("pair %d: the bytes differ", i)
		}
	}
}

// heapAfterGC is the live heap after a collection.
func heapAfterGC() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkIdleMemory measures what idle guests cost the host: the heap an
// HCA keeps once the driver has probed it (its DSR, rings and GIDs set up,
// a PD and a CQ made), with sixteen on one segment as one hcaemu serve
// holds them; and an idle RC QP in RTS (connected, nothing posted) with
// perftest's queue depths (128 send, 512 receive WRs), 1000 of them over
// two HCAs. Guest memory is the test's own RAM and is not counted; nor is
// the Go runtime's baseline. Reported per device and per QP, with the
// goroutines each adds.
//
//	go test -run XXX -bench IdleMemory ./emu/
func BenchmarkIdleMemory(b *testing.B) {
	b.Run("device", func(b *testing.B) {
		for b.Loop() {
			const n = 16
			drvs := make([]*emutest.Driver, n)
			for i := range drvs {
				drvs[i] = emutest.New(1 << 20)
			}
			sw := fabric.NewSwitch()
			g0, h0 := runtime.NumGoroutine(), heapAfterGC()
			devs := make([]*pvrdma.Device, n)
			for i, drv := range drvs {
				mac := [6]byte{0x52, 0x54, 10, 0, 0, byte(i + 1)}
				devs[i] = pvrdma.New(pvrdma.Config{Name: "hca", Mem: drv.RAM, MSIX: drv.IRQ.Raise,
					Log: slog.New(slog.DiscardHandler), MAC: mac, Attach: attachTo(sw, "hca", mac)})
				drv.Dev = devs[i]
				if err := drv.Probe(); err != nil {
					b.Fatal(err)
				}
				gid := netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}).As16()
				gid[10], gid[11] = 0xff, 0xff
				if err := drv.BindGID(1, gid); err != nil {
					b.Fatal(err)
				}
				if _, err := drv.CreatePD(0); err != nil {
					b.Fatal(err)
				}
				if _, err := drv.CreateCQ(0, 512); err != nil {
					b.Fatal(err)
				}
			}
			h1, g1 := heapAfterGC(), runtime.NumGoroutine()
			b.ReportMetric(float64(h1-h0)/n, "heap-B/device")
			b.ReportMetric(float64(g1-g0)/n, "goroutines/device")
			for _, d := range devs {
				d.Close()
			}
			runtime.KeepAlive(drvs)
		}
	})
	b.Run("RC-QP", func(b *testing.B) {
		for b.Loop() {
			sw := fabric.NewSwitch()
			ha, hb := newBenchHost(b, sw, 1), newBenchHost(b, sw, 2)
			const pairs = 500
			g0, h0 := runtime.NumGoroutine(), heapAfterGC()
			qps := make([]*emutest.QP, 0, 2*pairs)
			for range pairs {
				qa, qb := benchPair(b, ha, hb)
				qps = append(qps, qa, qb)
			}
			h1, g1 := heapAfterGC(), runtime.NumGoroutine()
			b.ReportMetric(float64(h1-h0)/float64(len(qps)), "heap-B/QP")
			b.ReportMetric(float64(g1-g0)/float64(len(qps)), "goroutines/QP")
			for _, q := range qps {
				if err := q.Modify(abi.AttrState, abi.QPAttr{State: abi.QPStateReset}); err != nil {
					b.Fatal(err)
				}
			}
		}
	}) // The most QPs a device can advertise (--max-qp 65535): every handle
	// taken on each of two HCAs by connected RC QPs in RTS (one send and one
	// receive WQE each, the least a QP has), and the next CREATE_QP refused
	// with ENOMEM. -short makes 2048 pairs (the CI smoke run).
	b.Run("RC-QP-64K", func(b *testing.B) {
		caps := pvrdma.DefaultCaps()
		caps.MaxQP = 65535
		pairs := int(caps.MaxQP) - 2 // handles 1..65534, the GSI QP's kept
		if testing.Short() {
			pairs = 2048
		}
		const pagesPerQP = 5 // ring state, SQ, RQ, page directory and table
		ram := (pairs*pagesPerQP + 64) * 4096
		for b.Loop() {
			sw := fabric.NewSwitch()
			ha, hb := newBenchHostWith(b, sw, 1, ram, &caps), newBenchHostWith(b, sw, 2, ram, &caps)
			g0, h0 := runtime.NumGoroutine(), heapAfterGC()
			for range pairs {
				benchPairWR(b, ha, hb, 1, 1)
			}
			h1, g1 := heapAfterGC(), runtime.NumGoroutine()
			b.ReportMetric(float64(h1-h0)/float64(2*pairs), "heap-B/QP")
			b.ReportMetric(float64(g1-g0)/float64(2*pairs), "goroutines/QP")
			if !testing.Short() {
				_, err := ha.CreateQP(emutest.QPSpec{PD: ha.pd, SendCQ: ha.cq, RecvCQ: ha.cq, Type: abi.QPTypeRC, SendWR: 1, RecvWR: 1, SendSGE: 1, RecvSGE: 1})
				if err == nil || !strings.HasSuffix(err.Error(), " 12") {
					b.Fatalf("QP %d on a device advertising max_qp %d: %v, want ENOMEM (12)", pairs+2, caps.MaxQP, err)
				}
			}
		}
	})
}
