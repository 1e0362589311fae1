package hca

import (
	"errors"
	"testing"

	"github.com/hcaemu/hcaemu/emu/mr"
)

// TestTable: handles are handed out round-robin in [first, limit), a freed
// handle as late as possible, never the reserved one, and a full table
// refuses; Put takes a chosen handle once, in range.
func TestTable(t *testing.T) {
	tab := NewTable[int]("QP", 1, 5) // handles 1..4
	tab.Reserved = 1
	var got []uint32
	for i := range 3 {
		v := i
		h, err := tab.Add(&v)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, h)
	}
	if want := []uint32{2, 3, 4}; got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("handles %v, want %v (1 reserved)", got, want)
	}
	if _, err := tab.Add(new(int)); !errors.Is(err, ErrTableFull) {
		t.Errorf("add past the reserved handle's room: %v", err)
	}
	if err := tab.Put(1, new(int)); err != nil {
		t.Errorf("put of the reserved handle: %v", err)
	}
	if err := tab.Put(1, new(int)); !errors.Is(err, ErrHandleInUse) {
		t.Errorf("put twice: %v", err)
	}
	for _, h := range []uint32{0, 5, 1 << 31} {
		if err := tab.Put(h, new(int)); !errors.Is(err, ErrHandleRange) {
			t.Errorf("put of handle %d: %v", h, err)
		}
	}
	tab.Del(3)
	if tab.Get(3) != nil || tab.Len() != 3 {
		t.Errorf("after Del(3): %v, %d objects", tab.Get(3), tab.Len())
	}
	if h, err := tab.Add(new(int)); err != nil || h != 3 {
		t.Errorf("the only free handle: %d, %v", h, err)
	}
	if hs := tab.Handles(); len(hs) != 4 || hs[0] != 1 || hs[3] != 4 {
		t.Errorf("handles %v", hs)
	}
}

// TestMRKeys: a handle's registrations get successive key variants
// (wrapping after 256), following a variant a fast-register chose;
// generations never repeat.
func TestMRKeys(t *testing.T) {
	var k MRKeys
	if key := k.NewKey(7); key != mr.Key(7, 0) {
		t.Errorf("first key %#x", key)
	}
	if key := k.NewKey(7); key != mr.Key(7, 1) {
		t.Errorf("second key %#x", key)
	}
	k.Ended(7, 0xff)
	if key := k.NewKey(7); key != mr.Key(7, 0) {
		t.Errorf("after variant 0xff: %#x", key)
	}
	if key := k.NewKey(8); key != mr.Key(8, 0) {
		t.Errorf("another handle: %#x", key)
	}
	if a, b := k.NewGen(), k.NewGen(); a == b || a == 0 {
		t.Errorf("generations %d, %d", a, b)
	}
}

// TestPinBudget: the budget refuses what would pass MaxPinnedPages and
// holds nothing of a refused pin.
func TestPinBudget(t *testing.T) {
	var b PinBudget
	if err := b.Pin(MaxPinnedPages - 10); err != nil {
		t.Fatal(err)
	}
	if err := b.Pin(11); !errors.Is(err, ErrPinBudget) || b.Pinned() != MaxPinnedPages-10 {
		t.Errorf("pin past the budget: %v, %d held", err, b.Pinned())
	}
	b.Unpin(10)
	if err := b.Pin(20); err != nil {
		t.Error(err)
	}
	b.Reset()
	if b.Pinned() != 0 {
		t.Error("reset kept pins")
	}
}
