package mr_test

import (
	"bytes"
	"testing"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/mr"
)

// TestWindow: a bound window maps [Start, Start+Length) onto the region
// its Target names from Addr on, with its own access rights; it is never
// an L_Key; a type-2 window answers its QP only and is invalidated by
// that QP's SEND_WITH_INV; a window whose region went reaches nothing.
func TestWindow(t *testing.T) {
	space, ram, regions := newSpace()
	const wkey, qpn = 9<<8 | 3, 0x42
	target := mr.Ref{Handle: 2, Key: key, PD: pd, Gen: regions[2].Gen}
	w := &mr.Region{PD: pd, Access: mr.RemoteRead | mr.RemoteWrite, Valid: true, Start: 0, Length: 0x1000,
		LKey: wkey, RKey: wkey, Window: &mr.Window{Type2: true, QPN: qpn, Target: target, Addr: va + 0x100}}
	regions[9] = w
	space.QPN = qpn
	for _, tt := range []struct {
		name   string
		va, n  uint64
		access uint32
		ok     bool
	}{
		{"inside", 0, 0x1000, mr.RemoteWrite, true},
		{"past the window", 0xff8, 16, mr.RemoteRead, false},
		{"no atomic right", 0, 8, mr.RemoteAtomic, false},
	} {
		if _, ok := space.Remote(pd, wkey, tt.va, tt.n, tt.access); ok != tt.ok {
			t.Errorf("%s: Remote = %v, want %v", tt.name, ok, tt.ok)
		}
	}
	ref, ok := space.Remote(pd, wkey, 0x6fc, 8, mr.RemoteWrite)
	if !ok {
		t.Fatal("Remote through the window refused")
	}
	// Window byte 0x6fc is region byte 0x7fc (its address va+0x7fc): the
	// first page's last 4 bytes and the second page's first 4.
	if err := space.Write(ref, 0x6fc, []byte{1, 2, 3, 4, 5, 6, 7, 8}); err != nil {
		t.Fatal(err)
	}
	if got := ram.Mem[5*dma.PageSize+0xFFC:][:4]; !bytes.Equal(got, []byte{1, 2, 3, 4}) {
		t.Errorf("write through the window: %v", got)
	}
	if _, _, err := space.Segs(pd, []mr.SGE{{Addr: 0, Length: 8, LKey: wkey}}, false); err == nil {
		t.Error("a window's key served as an L_Key")
	}
	other := space
	other.QPN = qpn + 1
	if _, ok := other.Remote(pd, wkey, 0, 8, mr.RemoteRead); ok {
		t.Error("a type-2 window answered another QP")
	}
	if other.Invalidate(pd, wkey) {
		t.Error("another QP invalidated a type-2 window")
	}
	if !space.Invalidate(pd, wkey) || w.Valid {
		t.Error("SEND_WITH_INV of the window failed")
	}
	if err := space.Write(ref, 0x6fc, []byte{1}); err == nil {
		t.Error("write through an invalidated window")
	}
	w.Valid = true
	regions[2].Gen++ // the region registered again: the binding is gone
	if _, ok := space.Remote(pd, wkey, 0, 8, mr.RemoteRead); ok {
		t.Error("a window reached a region registered after its bind")
	}
}
