package pvrdma_test

import (
	"log/slog"
	"runtime"
	"testing"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/emutest"
	"github.com/hcaemu/hcaemu/emu/pvrdma"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
)

// BenchmarkMRHostMemory measures what a registered memory region costs the
// host: the heap it keeps while registered (heap-B/MR, after a GC, averaged
// over several regions) and what one CREATE_MR + DESTROY_MR allocates
// (B/op), for page lists of several lengths and layouts: contiguous guest
// pages, scattered ones (every other page), and one page repeated (the
// cheapest way for a guest to describe a long region).
//
//	go test -run XXX -bench MRHostMemory -benchmem ./emu/
func BenchmarkMRHostMemory(b *testing.B) {
	layouts := []struct {
		name string
		page func(base uint64, i int) uint64
		span int // guest pages the layout needs per page of the region
	}{
		{"contiguous", func(base uint64, i int) uint64 { return base + uint64(i)*dma.PageSize }, 1},
		{"scattered", func(base uint64, i int) uint64 { return base + uint64(2*i)*dma.PageSize }, 2},
		{"repeated", func(base uint64, _ int) uint64 { return base }, 0},
	}
	sizes := []struct {
		name  string
		pages int
	}{{"4KiB", 1}, {"1MiB", 256}, {"16MiB", 4096}, {"1GiB", 262144}}
	for _, layout := range layouts {
		for _, size := range sizes {
			if layout.span*size.pages > 8192 {
				continue // more guest RAM than the bench guest has
			}
			b.Run(layout.name+"/"+size.name, func(b *testing.B) {
				drv := emutest.New(64 << 20)
				dev := pvrdma.New(pvrdma.Config{Name: "bench", Mem: drv.RAM, MSIX: drv.IRQ.Raise,
					Log: slog.New(slog.DiscardHandler), MAC: [6]byte{0x00, 0x50, 0x56, 0, 0, 9}})
				defer dev.Close()
				drv.Dev = dev
				if err := drv.Probe(); err != nil {
					b.Fatal(err)
				}
				pd, err := drv.CreatePD(0)
				if err != nil {
					b.Fatal(err)
				}
				base := drv.AllocPages(max(1, layout.span*size.pages))
				pages := make([]uint64, size.pages)
				for i := range pages {
					pages[i] = layout.page(base, i)
				}
				req := abi.CmdCreateMR{Start: base, Length: uint64(size.pages) * dma.PageSize,
					PdirDMA: drv.PageDir(pages), PDHandle: pd, AccessFlags: 1, NChunks: uint32(size.pages)}
				// Retained: several regions at once (within the device's
				// 4M-entry page budget), after a GC.
				held := min(16, (4<<20)/size.pages)
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				handles := make([]uint32, 0, held)
				for range held {
					rsp, err := drv.CreateMR(req)
					if err != nil {
						b.Fatal(err)
					}
					handles = append(handles, rsp.MRHandle)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				retained := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(held)
				for _, h := range handles {
					if err := drv.MustCmd(&abi.CmdDestroyMR{MRHandle: h}, nil); err != nil {
						b.Fatal(err)
					}
				}
				b.ResetTimer()
				for range b.N {
					rsp, err := drv.CreateMR(req)
					if err != nil {
						b.Fatal(err)
					}
					if err := drv.MustCmd(&abi.CmdDestroyMR{MRHandle: rsp.MRHandle}, nil); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(retained, "heap-B/MR")
				b.ReportMetric(retained/float64(size.pages), "heap-B/page")
			})
		}
	}
}
