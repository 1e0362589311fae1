package hca

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/fabric"
)

// TestLentPayload: a lent payload reads the lender's memory at its
// extents, in order or from the start again, and never past its length.
func TestLentPayload(t *testing.T) {
	ram := dma.NewFlat(0x1000, 0x3000)
	for i := range ram.Mem {
		ram.Mem[i] = byte(i * 7)
	}
	l := NewLender(ram)
	var p LentPayload
	ext := []fabric.Extent{{Addr: 0x2800, Len: 0x100}, {Addr: 0x1000, Len: 0x80}, {Addr: 0x3f00, Len: 0x100}}
	p.Lend(l, ext, 0x280)
	want := append(append(append([]byte(nil), ram.Mem[0x1800:0x1900]...), ram.Mem[0:0x80]...), ram.Mem[0x2f00:0x3000]...)
	got := make([]byte, 0x280)
	for off := 0; off < len(got); off += 0x40 { // in pieces, as a scatter reads
		if err := p.ReadAt(got[off:off+0x40], uint64(off)); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, want) {
		t.Error("lent bytes differ from the lender's memory at the extents")
	}
	again := make([]byte, 0x10)
	if err := p.ReadAt(again, 0x100); err != nil || !bytes.Equal(again, want[0x100:0x110]) {
		t.Errorf("a read behind the cursor: %v", err)
	}
	if err := p.ReadAt(make([]byte, 2), 0x27f); !errors.Is(err, errLentShort) {
		t.Errorf("a read past the payload: %v", err)
	}
	p.Forget()
	if p.Len() != 0 {
		t.Error("Forget kept a length")
	}
}

// TestLenderRevoke: a pin of a revoked epoch fails; Revoke waits for the
// pins in progress.
func TestLenderRevoke(t *testing.T) {
	l := NewLender(dma.NewFlat(0, 0x1000))
	e := l.Epoch()
	if !l.Pin(e) {
		t.Fatal("pin of the current epoch failed")
	}
	revoked := make(chan struct{})
	go func() { l.Revoke(); close(revoked) }()
	select {
	case <-revoked:
		t.Fatal("Revoke returned while a read was pinned")
	case <-time.After(20 * time.Millisecond): // it must still be waiting; no timing is relied on for a pass
	}
	l.Unpin()
	<-revoked
	if l.Pin(e) {
		t.Error("a pin of a revoked epoch succeeded")
	}
	if !l.Pin(l.Epoch()) {
		t.Error("a pin of the new epoch failed")
	}
	l.Unpin()
}
