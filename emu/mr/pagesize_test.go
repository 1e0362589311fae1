package mr_test

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/mr"
)

// TestSpanPageSizes: a region translates through pages of its own size
// (mlx5 keys carry log_page_size): a range is split at the region's page
// boundaries, not at 4 KiB, byte 0 of its first page being Start rounded
// down to the page size.
func TestSpanPageSizes(t *testing.T) {
	type piece struct{ gpa, n, done uint64 }
	for _, tc := range []struct {
		name  string
		shift uint8
		start uint64
		pages dma.Pages
		va, n uint64
		want  []piece
	}{
		{"4 KiB default", 0, 0x4000_0800, dma.Pages{0x5000, 0x2000}, 0x4000_0f00, 0x200,
			[]piece{{0x5f00, 0x100, 0}, {0x2000, 0x100, 0x100}}},
		{"64 KiB within a page", 16, 0x7_0000_1000, dma.Pages{0x30_0000, 0x10_0000}, 0x7_0000_2000, 0x8000,
			[]piece{{0x30_2000, 0x8000, 0}}},
		{"64 KiB across pages", 16, 0x7_0000_1000, dma.Pages{0x30_0000, 0x10_0000}, 0x7_0000_f000, 0x2000,
			[]piece{{0x30_f000, 0x1000, 0}, {0x10_0000, 0x1000, 0x1000}}},
		{"2 MiB huge pages", 21, 0x20_0000, dma.Pages{0x8000_0000, 0x4000_0000}, 0x3f_ff00, 0x200,
			[]piece{{0x801f_ff00, 0x100, 0}, {0x4000_0000, 0x100, 0x100}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &mr.Region{Valid: true, Start: tc.start, Length: uint64(len(tc.pages)) << max(tc.shift, 12), Pages: tc.pages, PageShift: tc.shift}
			var got []piece
			err := r.Span(tc.va, tc.n, func(gpa, n, done uint64) error {
				got = append(got, piece{gpa, n, done})
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("pieces %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("piece %d: %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
	// A page size outside 4 KiB..1 TiB visits nothing.
	for _, shift := range []uint8{1, 11, 41, 63, 255} {
		r := &mr.Region{Valid: true, Start: 0, Length: 4096, Pages: dma.Pages{0}, PageShift: shift}
		visited := false
		if err := r.Span(0, 16, func(_, _, _ uint64) error { visited = true; return nil }); err == nil || visited {
			t.Errorf("page shift %d: err %v, visited %v", shift, err, visited)
		}
	}
}

// TestPageSizeEquivalent: the same bytes registered as one region of big
// pages and as one of 4 KiB pages (the big pages cut in 4 KiB pieces) read
// and write alike through Space, for random page sizes, offsets and
// ranges: the oracle is the 4 KiB translation every earlier test checked.
func TestPageSizeEquivalent(t *testing.T) {
	rng := rand.New(rand.NewPCG(24, 5))
	for round := 0; round < 200; round++ {
		shift := uint8(12 + rng.IntN(5)) // 4 KiB .. 64 KiB
		size := uint64(1) << shift
		npages := 1 + rng.IntN(4)
		ram := dma.NewFlat(0, int(uint64(2*npages+1)*size))
		// Big pages at shuffled, size-aligned addresses.
		slots := rng.Perm(2 * npages)[:npages]
		big := make(dma.Pages, npages)
		var small dma.Pages
		for i, s := range slots {
			big[i] = uint64(s+1) * size
			for o := uint64(0); o < size; o += dma.PageSize {
				small = append(small, big[i]+o)
			}
		}
		start := 0x1_0000_0000 + rng.Uint64N(size)
		small = small[start%size/dma.PageSize:] // the 4 KiB region starts at the piece holding start
		length := uint64(npages)*size - start%size
		regions := table{
			1: {PD: pd, Access: mr.LocalWrite, Valid: true, Start: start, Length: length, Pages: big, PageShift: shift, LKey: 1 << 8},
			2: {PD: pd, Access: mr.LocalWrite, Valid: true, Start: start, Length: length, Pages: small, LKey: 2 << 8},
		}
		space := mr.Space{Mem: ram, Regions: regions}
		off := rng.Uint64N(length)
		n := 1 + rng.Uint64N(length-off)
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		bigSegs, _, err := space.Segs(pd, []mr.SGE{{Addr: start + off, Length: uint32(n), LKey: 1 << 8}}, true)
		if err != nil {
			t.Fatal(err)
		}
		smallSegs, _, err := space.Segs(pd, []mr.SGE{{Addr: start + off, Length: uint32(n), LKey: 2 << 8}}, true)
		if err != nil {
			t.Fatal(err)
		}
		if err := space.Copy(bigSegs, 0, data, true); err != nil {
			t.Fatalf("round %d: write through %d-byte pages: %v", round, size, err)
		}
		back := make([]byte, n)
		if err := space.Copy(smallSegs, 0, back, false); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(back, data) {
			t.Fatalf("round %d (page %#x, start %#x, off %#x, n %#x): bytes written through big pages differ read through 4 KiB ones", round, size, start, off, n)
		}
	}
}
