package dma

import (
	"errors"
	"testing"
)

// accessOnly hides a memory's WordAccess: LoadUint32 and StoreUint32 take
// the Access path.
type accessOnly struct{ Memory }

// TestWordAccess: aligned words load and store the same through WordAccess
// (Flat) and through Access (a memory without it), little-endian in guest
// memory; unaligned and outside addresses fault either way, touching
// nothing.
func TestWordAccess(t *testing.T) {
	for _, tc := range []struct {
		name string
		mem  func(f *Flat) Memory
	}{
		{"WordAccess", func(f *Flat) Memory { return f }},
		{"Access", func(f *Flat) Memory { return accessOnly{f} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFlat(0x1000, 0x1000)
			m := tc.mem(f)
			if err := StoreUint32(m, 0x1ffc, 0xa1b2c3d4); err != nil {
				t.Fatal(err)
			}
			if got := f.Mem[0xffc:]; got[0] != 0xd4 || got[3] != 0xa1 {
				t.Fatalf("stored % x", got)
			}
			if v, err := LoadUint32(m, 0x1ffc); err != nil || v != 0xa1b2c3d4 {
				t.Fatalf("loaded %#x, %v", v, err)
			}
			for _, gpa := range []uint64{0x1ffe, 0x2000, 0xffc, 1<<64 - 4} {
				if err := StoreUint32(m, gpa, 1); !errors.Is(err, ErrFault) {
					t.Errorf("store at %#x: %v", gpa, err)
				}
				if _, err := LoadUint32(m, gpa); !errors.Is(err, ErrFault) {
					t.Errorf("load at %#x: %v", gpa, err)
				}
			}
			for i, b := range f.Mem[:0xffc] {
				if b != 0 {
					t.Fatalf("byte %#x written", i)
				}
			}
		})
	}
}

// TestRangeShift: a page list of big pages is split at its own page
// boundaries; a range past its end, an overflowing one, or a shift out of
// 12..40 faults before visiting anything.
func TestRangeShift(t *testing.T) {
	p := Pages{0x40_0000, 0x20_0000}
	type piece struct{ gpa, n, done uint64 }
	var got []piece
	visit := func(gpa, n, done uint64) error { got = append(got, piece{gpa, n, done}); return nil }
	if err := p.RangeShift(21, 0x1f_f000, 0x2000, visit); err != nil {
		t.Fatal(err)
	}
	if want := []piece{{0x5f_f000, 0x1000, 0}, {0x20_0000, 0x1000, 0x1000}}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("pieces %+v, want %+v", got, want)
	}
	for _, tc := range []struct {
		name   string
		shift  uint8
		off, n uint64
	}{
		{"past the end", 21, 0x3f_ff00, 0x200},
		{"overflow", 21, 1<<64 - 0x100, 0x200},
		{"shift too small", 11, 0, 16},
		{"shift too large", 41, 0, 16},
	} {
		got = nil
		if err := p.RangeShift(tc.shift, tc.off, tc.n, visit); !errors.Is(err, ErrFault) || got != nil {
			t.Errorf("%s: err %v, visited %+v", tc.name, err, got)
		}
	}
}
