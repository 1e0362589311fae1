package mlx5

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/mr"
)

func pas(addrs ...uint64) []byte {
	b := make([]byte, 8*len(addrs))
	for i, a := range addrs {
		binary.BigEndian.PutUint64(b[8*i:], a)
	}
	return b
}

// TestQueueBuffer: byte b of a queue is at pas[(off+b)/page_size] +
// (off+b)%page_size with off = page_offset × page_size/64 (mlx5.md §7.1).
func TestQueueBuffer(t *testing.T) {
	// A 6 KiB CQ in 4 KiB pages starting 0x400 into its first page
	// (page_offset 16 × 64).
	tr, err := QueueBuffer(pas(0x10000, 0x7000, 0xdead0000), 0, 16, 6<<10, 8)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Pages) != 2 || tr.Offset != 0x400 || tr.Shift != 12 {
		t.Fatalf("%+v", tr)
	}
	ext, err := tr.Extents(nil, 0, 6<<10)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Extent{{0x10400, 0xc00}, {0x7000, 0xc00}}; !cmp.Equal(ext, want) {
		t.Fatalf("extents %v, want %v", ext, want)
	}
	if a, ok := tr.Addr(0xc00); !ok || a != 0x7000 {
		t.Fatalf("Addr(0xc00) = %#x %v", a, ok)
	}
	if _, ok := tr.Addr(6 << 10); ok {
		t.Fatal("Addr past the end")
	}
	if _, err := tr.Extents(nil, 1, 6<<10); !errors.Is(err, dma.ErrFault) {
		t.Fatalf("range past the end: %v", err)
	}
	// A QP on 2 MiB pages (log_page_size 9): one page, page_offset 1 is
	// 32 KiB in.
	tr, err = QueueBuffer(pas(0x40000000), 9, 1, 64<<10, 1)
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := tr.Addr(0x10); a != 0x40008010 || tr.Shift != 21 {
		t.Fatalf("huge page Addr = %#x, shift %d", a, tr.Shift)
	}
	// Reading and writing through the buffer.
	m := dma.NewFlat(0, 0x20000)
	tr, _ = QueueBuffer(pas(0x10000, 0x2000), 0, 63, 0x100, 2)
	if err := tr.WriteAt(m, []byte("0123456789"), 0x3c); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 10)
	if err := tr.ReadAt(m, got, 0x3c); err != nil || string(got) != "0123456789" || string(m.Mem[0x10ffc:0x11000]) != "0123" || string(m.Mem[0x2000:0x2006]) != "456789" {
		t.Fatalf("read %q %v", got, err)
	}
}

// TestMTT: an MR's MTT list (mlx5.md §6.4): pages from start_addr rounded
// down, idx = (v − align_down(start_addr)) >> ps; it translates as
// mr.Region does with Pages and PageShift.
func TestMTT(t *testing.T) {
	start, length := uint64(0x7f0000012345), uint64(0x3000)
	tr, err := MTT(pas(0x100000, 0x200000, 0x300000, 0x400000, 0), 12, start, length, false, 16)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Pages) != 4 || tr.Offset != 0x345 {
		t.Fatalf("%+v", tr)
	}
	r := mr.Region{Start: start, Length: length, Pages: tr.Pages, PageShift: tr.Shift}
	var fromRegion, fromMTT []Extent
	if err := r.Span(start+0x100, 0x2000, func(gpa, n, _ uint64) error {
		fromRegion = append(fromRegion, Extent{gpa, n})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if fromMTT, err = tr.Extents(nil, 0x100, 0x2000); err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(fromRegion, fromMTT) || fromMTT[0] != (Extent{0x100445, 0xbbb}) {
		t.Fatalf("mr.Region %v, MTT %v", fromRegion, fromMTT)
	}
	// pg_access: the low 3 bits are flags.
	if tr, err = MTT(pas(0x200007), 21, 0x200000, 0x200000, true, 1); err != nil || tr.Pages[0] != 0x200000 {
		t.Fatalf("pg_access: %+v %v", tr, err)
	}
	// A zero-length key has no pages.
	if tr, err = MTT(nil, 12, 0x1000, 0, false, 0); err != nil || len(tr.Pages) != 0 {
		t.Fatalf("empty: %+v %v", tr, err)
	}
}

// TestTranslationMalformed: lists the device refuses.
func TestTranslationMalformed(t *testing.T) {
	for _, c := range []struct {
		name string
		err  func() error
	}{
		{"queue: unaligned page", func() error { _, err := QueueBuffer(pas(0x10800), 0, 0, 4096, 1); return err }},
		{"queue: unaligned huge page", func() error { _, err := QueueBuffer(pas(0x1000), 9, 0, 4096, 1); return err }},
		{"queue: too few entries", func() error { _, err := QueueBuffer(pas(0x1000), 0, 1, 4096, 2); return err }},
		{"queue: short entry", func() error { _, err := QueueBuffer(pas(0x1000)[:7], 0, 0, 4096, 1); return err }},
		{"queue: above the bound", func() error { _, err := QueueBuffer(pas(0x1000, 0x2000), 0, 0, 8192, 1); return err }},
		{"queue: negative bound", func() error { _, err := QueueBuffer(pas(0x1000), 0, 0, 4096, -1); return err }},
		{"queue: page_offset 64", func() error { _, err := QueueBuffer(pas(0x1000), 0, 64, 64, 1); return err }},
		{"queue: log_page_size 29", func() error { _, err := QueueBuffer(pas(0), 29, 0, 64, 1); return err }},
		{"queue: empty", func() error { _, err := QueueBuffer(pas(0x1000), 0, 0, 0, 1); return err }},
		{"queue: length overflows", func() error { _, err := QueueBuffer(pas(0x1000), 0, 1, 1<<64-1, 1<<30); return err }},
		{"queue: page past 2^64", func() error { _, err := QueueBuffer(pas(1<<64-4096), 0, 0, 64, 1); return err }},
		{"mtt: log_page_size 11", func() error { _, err := MTT(pas(0x800), 11, 0, 64, false, 1); return err }},
		{"mtt: log_page_size 41", func() error { _, err := MTT(pas(0), 41, 0, 64, false, 1); return err }},
		{"mtt: flag bits without pg_access", func() error { _, err := MTT(pas(0x1001), 12, 0, 64, false, 1); return err }},
		{"mtt: start + len overflows", func() error { _, err := MTT(pas(0x1000), 12, 1<<64-4096, 8192, false, 2); return err }},
		{"mtt: too few entries", func() error { _, err := MTT(pas(0x1000), 12, 0xfff, 2, false, 4); return err }},
	} {
		if err := c.err(); !errors.Is(err, ErrTranslation) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// TestKLMs: decoding, bounds and translation across entries; zero entries
// (a UMR's padding) translate nothing.
func TestKLMs(t *testing.T) {
	want := KLMs{{0x100, 0x1234, 0x8000}, {0, 0, 0}, {0x80, 0x5678, 0x10}, {0, 0, 0}}
	b := make([]byte, 64)
	want.Encode(b)
	k, err := DecodeKLMs(b, 4, 4)
	if err != nil || !cmp.Equal(k, want) || k.Length() != 0x180 {
		t.Fatalf("%v %v", k, err)
	}
	type piece struct {
		mkey          uint32
		addr, n, done uint64
	}
	var got []piece
	if err := k.Range(0xf0, 0x20, func(mkey uint32, addr, n, done uint64) error {
		got = append(got, piece{mkey, addr, n, done})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if w := []piece{{0x1234, 0x80f0, 0x10, 0}, {0x5678, 0x10, 0x10, 0x10}}; !cmp.Equal(got, w, cmp.AllowUnexported(piece{})) {
		t.Fatalf("pieces %+v", got)
	}
	if err := k.Range(0x100, 0x81, func(uint32, uint64, uint64, uint64) error { return nil }); !errors.Is(err, dma.ErrFault) {
		t.Fatalf("range past the end: %v", err)
	}
	for _, c := range []struct {
		name string
		b    []byte
		n    int
	}{
		{"above the bound", b, 5},
		{"short", b[:63], 4},
		{"negative", b, -1},
		{"byte_count above 2 GiB", (KLMs{{MaxKLMByteCount + 1, 1, 0}}).bytes(), 1},
		{"past 2^64", (KLMs{{0x10, 1, 1<<64 - 8}}).bytes(), 1},
	} {
		if _, err := DecodeKLMs(c.b, c.n, 4); !errors.Is(err, ErrTranslation) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

func (k KLMs) bytes() []byte {
	b := make([]byte, len(k)*KLMSize)
	k.Encode(b)
	return b
}

// FuzzQueueBuffer: whatever list and parameters decode translate every byte
// of a range exactly as the byte-by-byte reference does, reading the
// entries straight from the input: gpa(x) = entry[(off+x) >> shift] +
// (off+x) mod page size (masked entries for an MTT with pg_access).
func FuzzQueueBuffer(f *testing.F) {
	f.Add(pas(0x10000, 0x7000, 0xdead0000), uint8(0), uint32(16), uint64(6<<10), false, uint64(0), uint64(0), uint16(6<<10))
	f.Add(pas(0x40000000), uint8(9), uint32(1), uint64(64<<10), false, uint64(0x7fff0), uint64(0), uint16(0x20))
	f.Add(pas(0x100000, 0x200007), uint8(12), uint32(0), uint64(0x1800), true, uint64(0x800), uint64(0x7f0000000800), uint16(0x1000))
	f.Fuzz(func(t *testing.T, b []byte, logPS uint8, pgOff uint32, length uint64, mtt bool, off, start uint64, n uint16) {
		var tr Translation
		var err error
		var flags uint64
		if mtt {
			pgAccess := pgOff&1 != 0
			if pgAccess {
				flags = MTTAccessBits
			}
			tr, err = MTT(b, logPS, start, length, pgAccess, 1<<12)
		} else {
			tr, err = QueueBuffer(b, logPS, pgOff, length, 1<<12)
		}
		if err != nil {
			if !errors.Is(err, ErrTranslation) {
				t.Fatalf("error %v", err)
			}
			return
		}
		if len(tr.Pages)*8 > len(b) || len(tr.Pages) > 1<<12 {
			t.Fatalf("%d pages from %d bytes", len(tr.Pages), len(b))
		}
		if tr.Length > 0 {
			off %= tr.Length
		}
		ref := func(x uint64) uint64 {
			o := tr.Offset + x
			e := binary.BigEndian.Uint64(b[(o>>tr.Shift)*8:]) &^ flags
			return e + o&(1<<tr.Shift-1)
		}
		next := off
		err = tr.Range(off, uint64(n), func(gpa, pn, done uint64) error {
			if off+done != next || pn == 0 {
				t.Fatalf("piece at %#x (+%#x), expected %#x", off+done, pn, next)
			}
			for x := range pn {
				if ref(off+done+x) != gpa+x {
					t.Fatalf("byte %#x: %#x, reference %#x", off+done+x, gpa+x, ref(off+done+x))
				}
				if x == pn-1 || x == 0 {
					if a, ok := tr.Addr(off + done + x); !ok || a != gpa+x {
						t.Fatalf("Addr(%#x) = %#x %v", off+done+x, a, ok)
					}
				}
			}
			next += pn
			return nil
		})
		end, ok := dma.End(off, uint64(n))
		if inside := ok && end <= tr.Length; inside != (err == nil) {
			t.Fatalf("range [%#x, +%#x) of %#x bytes: %v", off, n, tr.Length, err)
		}
		if err == nil && next != off+uint64(n) {
			t.Fatalf("range covered up to %#x of %#x", next, off+uint64(n))
		}
	})
}

// FuzzKLMs: a decoded list translates every byte of a range as the
// reference does, walking the input's entries for each byte.
func FuzzKLMs(f *testing.F) {
	f.Add((KLMs{{0x100, 0x1234, 0x8000}, {0, 0, 0}, {0x80, 0x5678, 0x10}}).bytes(), uint8(3), uint64(0xf0), uint16(0x20))
	f.Fuzz(func(t *testing.T, b []byte, n uint8, off uint64, size uint16) {
		k, err := DecodeKLMs(b, int(n), 16)
		if err != nil {
			if !errors.Is(err, ErrTranslation) {
				t.Fatalf("error %v", err)
			}
			return
		}
		if l := k.Length(); l > 0 {
			off %= l
		}
		ref := func(x uint64) (uint32, uint64) {
			for i := 0; i < int(n); i++ {
				e := b[i*16:]
				bc := uint64(binary.BigEndian.Uint32(e))
				if x < bc {
					return binary.BigEndian.Uint32(e[4:]), binary.BigEndian.Uint64(e[8:]) + x
				}
				x -= bc
			}
			t.Fatal("reference: byte outside the list")
			return 0, 0
		}
		next := off
		err = k.Range(off, uint64(size), func(mkey uint32, addr, pn, done uint64) error {
			if off+done != next || pn == 0 {
				t.Fatalf("piece at %#x, expected %#x", off+done, next)
			}
			for x := range pn {
				if rk, ra := ref(off + done + x); rk != mkey || ra != addr+x {
					t.Fatalf("byte %#x: key %#x addr %#x, reference %#x %#x", off+done+x, mkey, addr+x, rk, ra)
				}
			}
			next += pn
			return nil
		})
		end, ok := dma.End(off, uint64(size))
		if inside := ok && end <= k.Length(); inside != (err == nil) {
			t.Fatalf("range [%#x, +%#x) of %#x: %v", off, size, k.Length(), err)
		}
	})
}
