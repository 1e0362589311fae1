package dma

import (
	"encoding/binary"
	"errors"
	"testing"
)

// dirRAM builds guest RAM with a page directory of n data pages.
func dirRAM(t *testing.T, n int) (*Flat, uint64) {
	t.Helper()
	ntables := (n + 511) / 512
	ram := NewFlat(0, (2+ntables+n)*PageSize)
	dir := uint64(PageSize)
	for tb := 0; tb < ntables; tb++ {
		tbl := uint64(2+tb) * PageSize
		binary.LittleEndian.PutUint64(ram.Mem[dir+uint64(8*tb):], tbl)
		for e := 0; e < 512 && tb*512+e < n; e++ {
			page := uint64(2+ntables+tb*512+e) * PageSize
			binary.LittleEndian.PutUint64(ram.Mem[tbl+uint64(8*e):], page)
		}
	}
	return ram, dir
}

func TestReadPageDir(t *testing.T) {
	ram, dir := dirRAM(t, 600) // two page tables
	pages, err := ReadPageDir(ram, dir, 600, MaxDirPages)
	if err != nil || len(pages) != 600 {
		t.Fatalf("%d pages, %v", len(pages), err)
	}
	if pages[513] != uint64(2+2+513)*PageSize {
		t.Errorf("page 513 at %#x", pages[513])
	}
	// Range and copies across page boundaries.
	want := []byte("across a page boundary")
	if err := pages.WriteAt(ram, want, PageSize-5); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if err := pages.ReadAt(ram, got, PageSize-5); err != nil || string(got) != string(want) {
		t.Fatalf("%q %v", got, err)
	}
	if err := pages.ReadAt(ram, got, pages.Size()-3); !errors.Is(err, ErrFault) {
		t.Errorf("read past the end: %v", err)
	}
	if _, ok := pages.Addr(pages.Size()); ok {
		t.Error("Addr past the end")
	}
	if err := pages.Range(^uint64(0)-1, 8, func(_, _, _ uint64) error { return nil }); !errors.Is(err, ErrFault) {
		t.Errorf("overflowing range: %v", err)
	}
}

func TestReadPageDirRejects(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(ram *Flat, dir uint64)
		dir   uint64
		n     uint32
		limit uint32
	}{
		{"zero pages", nil, 0, 0, MaxDirPages},
		{"over the limit", nil, 0, 10, 4},
		{"over the directory", nil, 0, MaxDirPages + 1, MaxDirPages + 1},
		{"directory unaligned", nil, PageSize + 8, 4, MaxDirPages},
		{"directory outside RAM", nil, 1 << 40, 4, MaxDirPages},
		{"table entry zero", func(ram *Flat, dir uint64) { binary.LittleEndian.PutUint64(ram.Mem[dir:], 0) }, 0, 4, MaxDirPages},
		{"page entry zero", func(ram *Flat, dir uint64) {
			tbl := binary.LittleEndian.Uint64(ram.Mem[dir:])
			binary.LittleEndian.PutUint64(ram.Mem[tbl+8:], 0)
		}, 0, 4, MaxDirPages},
		{"page entry unaligned", func(ram *Flat, dir uint64) {
			tbl := binary.LittleEndian.Uint64(ram.Mem[dir:])
			binary.LittleEndian.PutUint64(ram.Mem[tbl+8:], 0x3010)
		}, 0, 4, MaxDirPages},
		{"page outside RAM", func(ram *Flat, dir uint64) {
			tbl := binary.LittleEndian.Uint64(ram.Mem[dir:])
			binary.LittleEndian.PutUint64(ram.Mem[tbl+16:], 1<<40)
		}, 0, 4, MaxDirPages},
	}
	for _, c := range cases {
		ram, dir := dirRAM(t, 4)
		if c.edit != nil {
			c.edit(ram, dir)
		}
		if c.dir != 0 {
			dir = c.dir
		}
		if _, err := ReadPageDir(ram, dir, c.n, c.limit); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
}

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
