package hca

import (
	"errors"
	"fmt"
	"sort"

	"github.com/hcaemu/hcaemu/emu/mr"
)

// The resource bookkeeping every model needs: handle tables, the keys and
// generations of memory-region registrations, and the budget of page-list
// entries a guest can make the device hold.

// Errors of the tables (a model answers them in its own terms: PVRDMA's
// ENOMEM, EINVAL, EBUSY in ERR; mlx5's status and syndrome).
var (
	ErrTableFull   = errors.New("table full")
	ErrHandleRange = errors.New("handle out of range")
	ErrHandleInUse = errors.New("handle in use")
	ErrPinBudget   = errors.New("device page-list budget exhausted")
)

// Table is a handle table: handles are small integers in [first, limit),
// handed out round-robin (the next free one after the last handed out, so a
// freed handle is reused as late as possible), and at most limit-first
// objects exist. A guest's bad handle finds nothing (Get returns nil).
type Table[T any] struct {
	name  string
	first uint32
	limit uint32
	objs  map[uint32]*T
	next  uint32 // search hint
	// Reserved is a handle Add never hands out (the GSI QP's 1); 0 = none.
	Reserved uint32
}

// NewTable makes an empty table of handles in [first, limit).
func NewTable[T any](name string, first, limit uint32) Table[T] {
	return Table[T]{name: name, first: first, limit: limit, objs: map[uint32]*T{}, next: first}
}

// Get is the object of handle h, nil when there is none.
func (t *Table[T]) Get(h uint32) *T { return t.objs[h] }

// Len is the number of objects.
func (t *Table[T]) Len() int { return len(t.objs) }

// Limit is the end of the handle range.
func (t *Table[T]) Limit() uint32 { return t.limit }

// Add installs v at a free handle and returns it; ErrTableFull when none is.
func (t *Table[T]) Add(v *T) (uint32, error) {
	n := t.limit - t.first
	if uint32(len(t.objs)) >= n || (t.Reserved != 0 && uint32(len(t.objs)) >= n-1 && t.objs[t.Reserved] == nil) {
		return 0, fmt.Errorf("%s %w (%d)", t.name, ErrTableFull, n)
	}
	h := t.next
	for i := uint32(0); i < n; i++ {
		if h < t.first || h >= t.limit {
			h = t.first
		}
		if _, used := t.objs[h]; !used && (h != t.Reserved || h == 0) {
			t.objs[h] = v
			t.next = h + 1
			return h, nil
		}
		h++
	}
	return 0, fmt.Errorf("%s %w (%d)", t.name, ErrTableFull, n)
}

// Put installs v at a chosen handle (the GSI QP's).
func (t *Table[T]) Put(h uint32, v *T) error {
	if h < t.first || h >= t.limit {
		return fmt.Errorf("%s handle %d: %w", t.name, h, ErrHandleRange)
	}
	if _, used := t.objs[h]; used {
		return fmt.Errorf("%s handle %d: %w", t.name, h, ErrHandleInUse)
	}
	t.objs[h] = v
	return nil
}

// Del removes handle h's object.
func (t *Table[T]) Del(h uint32) { delete(t.objs, h) }

// Handles lists live handles in ascending order.
func (t *Table[T]) Handles() []uint32 {
	hs := make([]uint32, 0, len(t.objs))
	for h := range t.objs {
		hs = append(hs, h)
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i] < hs[j] })
	return hs
}

// MRKeys hands out the keys and generations of memory-region
// registrations: a handle's next registration gets the key variant after
// the one its previous registration ended with (kept across
// deregistrations and resets, one entry per handle), so a key kept past a
// deregistration does not name the next registration of its handle; every
// registration gets a generation never handed out before (mr.Region.Gen).
type MRKeys struct {
	variants map[uint32]uint8
	gen      uint64
}

// NewKey is the key of a new registration of MR handle h: variant 0 the
// first time, then the one after its previous registration's.
func (k *MRKeys) NewKey(h uint32) uint32 {
	if k.variants == nil {
		k.variants = map[uint32]uint8{}
	}
	variant := uint8(0)
	if prev, used := k.variants[h]; used {
		variant = mr.NextVariant(prev)
	}
	k.variants[h] = variant
	return mr.Key(h, variant)
}

// Ended records the variant a registration of handle h ended with (a
// fast-register chooses its own key; its next registration follows it).
func (k *MRKeys) Ended(h uint32, variant uint8) {
	if k.variants == nil {
		k.variants = map[uint32]uint8{}
	}
	k.variants[h] = variant
}

// NewGen is the generation of a new registration.
func (k *MRKeys) NewGen() uint64 {
	k.gen++
	return k.gen
}

// MaxPinnedPages bounds the page lists one device keeps (4M entries,
// 32 MiB), so a guest cannot make the emulator allocate without limit.
const MaxPinnedPages = 4 << 20

// PinBudget counts the page-list entries a device holds for its objects.
type PinBudget struct{ pinned uint64 }

// Pin counts n more entries, or fails with ErrPinBudget past
// MaxPinnedPages.
func (b *PinBudget) Pin(n uint32) error {
	if b.pinned+uint64(n) > MaxPinnedPages {
		return fmt.Errorf("%w (%d pages held)", ErrPinBudget, b.pinned)
	}
	b.pinned += uint64(n)
	return nil
}

// Unpin releases n entries.
func (b *PinBudget) Unpin(n int) { b.pinned -= uint64(n) }

// Pinned is how many entries are held.
func (b *PinBudget) Pinned() uint64 { return b.pinned }

// Reset forgets every entry (the device's objects are gone).
func (b *PinBudget) Reset() { b.pinned = 0 }
