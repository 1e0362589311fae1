package pvrdma

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/hcaemu/hcaemu/dma"
)

// dirRAM builds guest RAM with a page directory of n data pages.
func dirRAM(t *testing.T, n int) (*dma.Flat, uint64) {
	t.Helper()
	ntables := (n + 511) / 512
	ram := dma.NewFlat(0, (2+ntables+n)*dma.PageSize)
	dir := uint64(dma.PageSize)
	for tb := 0; tb < ntables; tb++ {
		tbl := uint64(2+tb) * dma.PageSize
		binary.LittleEndian.PutUint64(ram.Mem[dir+uint64(8*tb):], tbl)
		for e := 0; e < 512 && tb*512+e < n; e++ {
			page := uint64(2+ntables+tb*512+e) * dma.PageSize
			binary.LittleEndian.PutUint64(ram.Mem[tbl+uint64(8*e):], page)
		}
	}
	return ram, dir
}

func TestRead(t *testing.T) {
	ram, dir := dirRAM(t, 600) // two page tables
	pages, err := Read(ram, dir, 600, MaxDirPages)
	if err != nil || len(pages) != 600 {
		t.Fatalf("%d pages, %v", len(pages), err)
	}
	if pages[513] != uint64(2+2+513)*dma.PageSize {
		t.Errorf("page 513 at %#x", pages[513])
	}
	// Range and copies across page boundaries.
	want := []byte("across a page boundary")
	if err := pages.WriteAt(ram, want, dma.PageSize-5); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if err := pages.ReadAt(ram, got, dma.PageSize-5); err != nil || string(got) != string(want) {
		t.Fatalf("%q %v", got, err)
	}
	if err := pages.ReadAt(ram, got, pages.Size()-3); !errors.Is(err, dma.ErrFault) {
		t.Errorf("read past the end: %v", err)
	}
	if _, ok := pages.Addr(pages.Size()); ok {
		t.Error("Addr past the end")
	}
	if err := pages.Range(^uint64(0)-1, 8, func(_, _, _ uint64) error { return nil }); !errors.Is(err, dma.ErrFault) {
		t.Errorf("overflowing range: %v", err)
	}
}

func TestReadPageDirRejects(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(ram *dma.Flat, dir uint64)
		dir   uint64
		n     uint32
		limit uint32
	}{
		{"zero pages", nil, 0, 0, MaxDirPages},
		{"over the limit", nil, 0, 10, 4},
		{"over the directory", nil, 0, MaxDirPages + 1, MaxDirPages + 1},
		{"directory unaligned", nil, dma.PageSize + 8, 4, MaxDirPages},
		{"directory outside RAM", nil, 1 << 40, 4, MaxDirPages},
		{"table entry zero", func(ram *dma.Flat, dir uint64) { binary.LittleEndian.PutUint64(ram.Mem[dir:], 0) }, 0, 4, MaxDirPages},
		{"page entry zero", func(ram *dma.Flat, dir uint64) {
			tbl := binary.LittleEndian.Uint64(ram.Mem[dir:])
			binary.LittleEndian.PutUint64(ram.Mem[tbl+8:], 0)
		}, 0, 4, MaxDirPages},
		{"page entry unaligned", func(ram *dma.Flat, dir uint64) {
			tbl := binary.LittleEndian.Uint64(ram.Mem[dir:])
			binary.LittleEndian.PutUint64(ram.Mem[tbl+8:], 0x3010)
		}, 0, 4, MaxDirPages},
		{"page outside RAM", func(ram *dma.Flat, dir uint64) {
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
		if _, err := Read(ram, dir, c.n, c.limit); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
}
