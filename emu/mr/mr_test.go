package mr_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/mr"
)

type table map[uint32]*mr.Region

func (t table) Region(handle uint32) *mr.Region { return t[handle] }

const (
	ramBase = 0x10_0000
	pd      = 3
	va      = 0x4000_0800 // not page aligned: byte 0 is at offset 0x800 of the first page
	length  = 3 * dma.PageSize
	key     = 2 << 8
	dmaKey  = 1 << 8
)

// newSpace is 8 pages of RAM with a 3-page region whose pages are out of
// order in guest-physical memory, and the kernel's DMA region.
func newSpace() (mr.Space, *dma.Flat, table) {
	ram := dma.NewFlat(ramBase, 8*dma.PageSize)
	regions := table{
		1: {PD: pd, Access: mr.LocalWrite, DMA: true, Valid: true, LKey: dmaKey, RKey: dmaKey},
		2: {PD: pd, Access: mr.LocalWrite | mr.RemoteRead | mr.RemoteWrite, Valid: true, Start: va, Length: length,
			Pages: dma.Pages{ramBase + 5*dma.PageSize, ramBase + 2*dma.PageSize, ramBase + 7*dma.PageSize, ramBase},
			LKey:  key, RKey: key},
	}
	return mr.Space{Mem: ram, Regions: regions}, ram, regions
}

func TestLookup(t *testing.T) {
	space, _, regions := newSpace()
	regions[4] = &mr.Region{PD: pd, FRMR: true, LKey: 4 << 8, RKey: 4 << 8} // not yet registered
	tests := []struct {
		name   string
		key    uint32
		remote bool
		want   uint32 // handle, 0: none
	}{
		{"L_Key", key, false, 2},
		{"R_Key", key, true, 2},
		{"other variant", key | 1, false, 0},
		{"no such handle", 9 << 8, false, 0},
		{"DMA L_Key", dmaKey, false, 1},
		{"DMA region is never remote", dmaKey, true, 0},
		{"invalid FRMR", 4 << 8, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mr.Lookup(space.Regions, tt.key, tt.remote)
			if (got == nil) != (tt.want == 0) || (got != nil && got != regions[tt.want]) {
				t.Errorf("Lookup(%#x, remote %v) = %v, want handle %d", tt.key, tt.remote, got, tt.want)
			}
		})
	}
	if mr.LookupAny(space.Regions, 4<<8) != regions[4] {
		t.Error("LookupAny misses an invalid FRMR")
	}
}

func TestSegs(t *testing.T) {
	space, _, regions := newSpace()
	regions[5] = &mr.Region{PD: pd, Access: 0, Valid: true, Start: va, Length: length,
		Pages: regions[2].Pages, LKey: 5 << 8, RKey: 5 << 8} // read-only locally
	tests := []struct {
		name  string
		pd    uint32
		sges  []mr.SGE
		write bool
		segs  int
		total uint32
		err   error
	}{
		{"one SGE", pd, []mr.SGE{{Addr: va, Length: 100, LKey: key}}, true, 1, 100, nil},
		{"zero-length SGEs are skipped", pd, []mr.SGE{{Addr: va, Length: 0, LKey: key}, {Addr: va + 8, Length: 8, LKey: key}}, false, 1, 8, nil},
		{"whole region", pd, []mr.SGE{{Addr: va, Length: length, LKey: key}}, false, 1, length, nil},
		{"past the end", pd, []mr.SGE{{Addr: va + 1, Length: length, LKey: key}}, false, 0, 0, mr.ErrProtection},
		{"before the start", pd, []mr.SGE{{Addr: va - 1, Length: 2, LKey: key}}, false, 0, 0, mr.ErrProtection},
		{"address overflow", pd, []mr.SGE{{Addr: ^uint64(0) - 2, Length: 8, LKey: dmaKey}}, false, 0, 0, mr.ErrProtection},
		{"another PD", pd + 1, []mr.SGE{{Addr: va, Length: 8, LKey: key}}, false, 0, 0, mr.ErrProtection},
		{"bad key", pd, []mr.SGE{{Addr: va, Length: 8, LKey: key + 1}}, false, 0, 0, mr.ErrProtection},
		{"write without LOCAL_WRITE", pd, []mr.SGE{{Addr: va, Length: 8, LKey: 5 << 8}}, true, 0, 0, mr.ErrProtection},
		{"read without LOCAL_WRITE", pd, []mr.SGE{{Addr: va, Length: 8, LKey: 5 << 8}}, false, 1, 8, nil},
		{"over 2^31 bytes", pd, []mr.SGE{{Addr: 0, Length: 1 << 31, LKey: dmaKey}, {Addr: 0, Length: 1, LKey: dmaKey}}, false, 0, 0, mr.ErrLength},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			segs, total, err := space.Segs(tt.pd, tt.sges, tt.write)
			if !errors.Is(err, tt.err) || len(segs) != tt.segs || total != tt.total {
				t.Errorf("Segs = %d segs, %d bytes, %v; want %d, %d, %v", len(segs), total, err, tt.segs, tt.total, tt.err)
			}
		})
	}
}

// TestCopy: data crosses the region's pages wherever they are in guest
// memory, and reads back the same; a reference to a region deregistered or
// re-registered under another PD is refused.
func TestCopy(t *testing.T) {
	space, ram, regions := newSpace()
	segs, _, err := space.Segs(pd, []mr.SGE{{Addr: va + 0x700, Length: 0x200, LKey: key}, {Addr: va + 0x1F00, Length: 0x1000, LKey: key}}, true)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 0x1000)
	for i := range data {
		data[i] = byte(i * 31)
	}
	if err := space.Copy(segs, 0x100, data, true); err != nil {
		t.Fatal(err)
	}
	// Byte 0x100 of the list is va+0x800: offset 0 of the region's second
	// page (GPA page 2).
	if got := ram.Mem[2*dma.PageSize : 2*dma.PageSize+0x100]; !bytes.Equal(got, data[:0x100]) {
		t.Error("first segment not at the region's second page")
	}
	back := make([]byte, len(data))
	if err := space.Copy(segs, 0x100, back, false); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, data) {
		t.Error("read back differs")
	}
	if err := space.Copy(segs, 0x1000, make([]byte, 0x201), false); err == nil {
		t.Error("copy past the end of the SGE list succeeded")
	}
	tests := []struct {
		name   string
		change func()
	}{
		{"deregistered", func() { delete(regions, 2) }},
		{"invalidated", func() { regions[2].Valid = false }},
		{"re-registered in another PD", func() { r := *regions[2]; r.PD = pd + 1; regions[2] = &r }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			saved := *regions[2]
			defer func() { regions[2] = &saved }()
			tt.change()
			if err := space.Copy(segs, 0, make([]byte, 16), true); err == nil {
				t.Error("copy through a stale reference succeeded")
			}
		})
	}
}

func TestRemote(t *testing.T) {
	space, ram, _ := newSpace()
	tests := []struct {
		name   string
		pd     uint32
		key    uint32
		va, n  uint64
		access uint32
		ok     bool
	}{
		{"read", pd, key, va, 8, mr.RemoteRead, true},
		{"write", pd, key, va + length - 8, 8, mr.RemoteWrite, true},
		{"no atomic right", pd, key, va, 8, mr.RemoteAtomic, false},
		{"other PD", pd + 1, key, va, 8, mr.RemoteRead, false},
		{"out of range", pd, key, va + length - 4, 8, mr.RemoteRead, false},
		{"DMA key", pd, dmaKey, 0, 8, mr.RemoteRead, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, ok := space.Remote(tt.pd, tt.key, tt.va, tt.n, tt.access); ok != tt.ok {
				t.Errorf("Remote = %v, want %v", ok, tt.ok)
			}
		})
	}
	ref, _ := space.Remote(pd, key, va, length, mr.RemoteWrite)
	if err := space.Write(ref, va+0x7FC, []byte{1, 2, 3, 4, 5, 6, 7, 8}); err != nil {
		t.Fatal(err)
	}
	if got := ram.Mem[5*dma.PageSize+0xFFC:][:4]; !bytes.Equal(got, []byte{1, 2, 3, 4}) {
		t.Errorf("write before the page boundary: %v", got)
	}
	if got := ram.Mem[2*dma.PageSize:][:4]; !bytes.Equal(got, []byte{5, 6, 7, 8}) {
		t.Errorf("write after the page boundary: %v", got)
	}
	if _, err := space.Atomic(ref, va+0x7F8, false, 0, 1); err != nil {
		t.Errorf("aligned atomic: %v", err)
	}
	if err := space.Write(ref, va+length-2, []byte{1, 2, 3}); err == nil {
		t.Error("write past the region succeeded")
	}
}

func TestInvalidate(t *testing.T) {
	space, _, regions := newSpace()
	regions[4] = &mr.Region{PD: pd, FRMR: true, Valid: true, LKey: 4<<8 | 7, RKey: 4<<8 | 7}
	tests := []struct {
		name string
		pd   uint32
		key  uint32
		ok   bool
	}{
		{"not an FRMR", pd, key, false},
		{"other PD", pd + 1, 4<<8 | 7, false},
		{"other variant", pd, 4 << 8, false},
		{"FRMR", pd, 4<<8 | 7, true},
		{"again (already invalid)", pd, 4<<8 | 7, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if ok := space.Invalidate(tt.pd, tt.key); ok != tt.ok {
				t.Errorf("Invalidate = %v, want %v", ok, tt.ok)
			}
		})
	}
	if regions[4].Valid {
		t.Error("FRMR still valid")
	}
}

// TestKeyVariants: a key is its handle and a variant; a handle's next
// registration never gets the previous variant back, wrapping from 255 to
// 0, and only its 256th registration comes back to a variant it had.
func TestKeyVariants(t *testing.T) {
	tests := []struct {
		handle  uint32
		variant uint8
		key     uint32
	}{
		{1, 0, 0x100},
		{2, 0x11, 0x211},
		{mr.MaxHandle, 0xFF, 0xFFFFFFFF},
	}
	for _, tt := range tests {
		key := mr.Key(tt.handle, tt.variant)
		if key != tt.key || mr.Handle(key) != tt.handle || mr.Variant(key) != tt.variant {
			t.Errorf("Key(%d, %#x) = %#x (handle %d, variant %#x), want %#x", tt.handle, tt.variant, key,
				mr.Handle(key), mr.Variant(key), tt.key)
		}
	}
	for _, tt := range []struct{ prev, next uint8 }{{0, 1}, {0x41, 0x42}, {0xFE, 0xFF}, {0xFF, 0}} {
		if got := mr.NextVariant(tt.prev); got != tt.next {
			t.Errorf("NextVariant(%#x) = %#x, want %#x", tt.prev, got, tt.next)
		}
	}
	seen := map[uint8]bool{}
	variant := uint8(0x80)
	for i := 0; i < 256; i++ {
		next := mr.NextVariant(variant)
		if next == variant || seen[next] {
			t.Fatalf("registration %d: variant %#x again", i, next)
		}
		seen[next] = true
		variant = next
	}
}

// TestRefGeneration: a reference resolves to the registration it was taken
// from only: not after the region is invalidated, nor once it is
// registered again, even under the same key and PD.
func TestRefGeneration(t *testing.T) {
	space, _, regions := newSpace()
	regions[2].Gen = 5
	ref, ok := space.Remote(pd, key, va, 8, mr.RemoteRead)
	if !ok || ref.Gen != 5 {
		t.Fatalf("Remote = %+v, %v", ref, ok)
	}
	segs, _, err := space.Segs(pd, []mr.SGE{{Addr: va, Length: 8, LKey: key}}, false)
	if err != nil || segs[0].Ref.Gen != 5 {
		t.Fatalf("Segs = %+v, %v", segs, err)
	}
	tests := []struct {
		name   string
		change func(r *mr.Region)
		ok     bool
	}{
		{"unchanged", func(*mr.Region) {}, true},
		{"invalidated", func(r *mr.Region) { r.Valid = false }, false},
		{"registered again", func(r *mr.Region) { r.Gen = 6 }, false},
		{"other PD", func(r *mr.Region) { r.PD = pd + 1; r.Gen = 6 }, false},
		{"other key", func(r *mr.Region) { r.LKey, r.RKey, r.Gen = key|1, key|1, 6 }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			space, _, regions := newSpace()
			regions[2].Gen = 5
			tt.change(regions[2])
			if got := space.Valid(ref, va, 8); got != tt.ok {
				t.Errorf("remote reference valid = %v, want %v", got, tt.ok)
			}
			if got := segs[0].Ref.Resolve(space.Regions) != nil; got != tt.ok {
				t.Errorf("local reference resolves = %v, want %v", got, tt.ok)
			}
			buf := make([]byte, 8)
			if err := space.Read(ref, va, buf); (err == nil) != tt.ok || (err != nil && !errors.Is(err, mr.ErrStale)) {
				t.Errorf("Read = %v, want ok %v or ErrStale", err, tt.ok)
			}
		})
	}
}
