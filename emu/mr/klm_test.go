package mr_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/mr"
)

// TestIndirect: an indirect region (KLMs) lays its entries end to end: a
// write across it lands in each entry's range of its region, in order
// (here the DMA key's and the 3-page region's); an L_Key and an R_Key of
// it both work; an entry whose region was registered again, or that the
// region no longer covers, makes every access through it stale, and an
// entry naming another indirect region reaches nothing.
func TestIndirect(t *testing.T) {
	space, ram, regions := newSpace()
	const ikey = 7<<8 | 1
	dmaRef := mr.Ref{Handle: 1, Key: dmaKey, PD: pd, Gen: regions[1].Gen}
	regRef := mr.Ref{Handle: 2, Key: key, PD: pd, Gen: regions[2].Gen}
	ind := &mr.Region{PD: pd, Access: mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead, Valid: true, FRMR: true,
		Start: 0x9000, Length: 20, LKey: ikey, RKey: ikey,
		KLMs: []mr.Seg{{Ref: dmaRef, Addr: ramBase + 0x10, Len: 6}, {Ref: regRef, Addr: va + dma.PageSize - 4, Len: 14}}}
	regions[7] = ind
	msg := []byte("0123456789abcdefghij")
	ref, ok := space.Remote(pd, ikey, 0x9000, 20, mr.RemoteWrite)
	if !ok {
		t.Fatal("Remote refused the indirect region")
	}
	if err := space.Write(ref, 0x9000, msg); err != nil {
		t.Fatal(err)
	}
	// Entry 0: 6 bytes at GPA ramBase+0x10. Entry 1: 14 bytes at
	// va+0xffc, offset 0x17fc from the region's first page: its second
	// page (GPA 2 pages in), at 0x7fc.
	want := map[uint64][]byte{
		0x10:                   msg[:6],
		2*dma.PageSize + 0x7fc: msg[6:20],
	}
	for off, w := range want {
		if got := ram.Mem[off:][:len(w)]; !bytes.Equal(got, w) {
			t.Errorf("ram+%#x = %q, want %q", off, got, w)
		}
	}
	got := make([]byte, 20)
	segs, n, err := space.Segs(pd, []mr.SGE{{Addr: 0x9000, Length: 20, LKey: ikey}}, false)
	if err != nil || n != 20 {
		t.Fatalf("Segs: %v %d", err, n)
	}
	if err := space.Copy(segs, 0, got, false); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("read through the L_Key: %q %v", got, err)
	}
	if _, ok := space.Remote(pd, ikey, 0x9000+10, 11, mr.RemoteRead); ok {
		t.Error("Remote past the indirect region's length")
	}
	// The 3-page region registered again: entry 1 is stale.
	regions[2].Gen++
	if err := space.Write(ref, 0x9000+4, msg[:4]); !errors.Is(err, mr.ErrStale) {
		t.Errorf("write across a stale entry: %v, want ErrStale", err)
	}
	if err := space.Write(ref, 0x9000, msg[:6]); err != nil {
		t.Errorf("write inside the live entry: %v", err)
	}
	// An entry naming an indirect region reaches nothing.
	regions[8] = &mr.Region{PD: pd, Access: mr.RemoteRead, Valid: true, Start: 0, Length: 4, LKey: 8 << 8, RKey: 8 << 8,
		KLMs: []mr.Seg{{Ref: mr.Ref{Handle: 7, Key: ikey, PD: pd, Gen: ind.Gen}, Addr: 0x9000, Len: 4}}}
	nref, ok := space.Remote(pd, 8<<8, 0, 4, mr.RemoteRead)
	if !ok {
		t.Fatal("Remote refused the outer region")
	}
	if err := space.Read(nref, 0, got[:4]); !errors.Is(err, mr.ErrStale) {
		t.Errorf("read through nested indirect regions: %v, want ErrStale", err)
	}
	// Invalidation (en_rinval: FRMR) frees it.
	if !space.Invalidate(pd, ikey) || ind.Valid {
		t.Error("the indirect region was not invalidated")
	}
}
