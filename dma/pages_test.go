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
