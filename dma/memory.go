// Package dma models the device's view of guest memory: the DMA windows a
// vfio-user client maps, bounds- and overflow-checked reads and writes through
// them, and the PVRDMA two-level page directories that describe guest buffers.
package dma

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// PageSize is the size of a guest page and of every PVRDMA ring page.
const PageSize = 4096

// ErrFault is returned (wrapped) for any access that is not wholly inside one
// mapped, permitted window.
var ErrFault = errors.New("dma fault")

// Memory is guest-physical memory as a device sees it.
//
// Every method checks gpa+len for overflow and against the mapped windows; an
// access that is not wholly inside one window fails with an error wrapping
// ErrFault and touches nothing.
type Memory interface {
	// ReadAt copies guest memory at gpa into p.
	ReadAt(p []byte, gpa uint64) error
	// WriteAt copies p into guest memory at gpa.
	WriteAt(p []byte, gpa uint64) error
	// Access calls fn with the host view of [gpa, gpa+n). The range stays
	// mapped until fn returns; fn must not keep b. write asks for a writable
	// window.
	Access(gpa, n uint64, write bool, fn func(b []byte)) error
}

// Fault builds an ErrFault-wrapping error for an access.
func Fault(gpa, n uint64, why string) error {
	return fmt.Errorf("%w: [%#x, +%#x): %s", ErrFault, gpa, n, why)
}

// End returns gpa+n, or ok=false when that overflows.
func End(gpa, n uint64) (end uint64, ok bool) {
	end = gpa + n
	return end, end >= gpa
}

// WordAccess is a Memory that loads and stores aligned 32-bit words
// itself. LoadUint32 and StoreUint32 use it when the memory has it: a ring
// index read or written through Access costs a closure on the heap (an
// allocation per ring index on the data path); through these, none.
type WordAccess interface {
	// Load32 atomically loads the 32-bit word at the 4-byte aligned gpa.
	Load32(gpa uint64) (uint32, error)
	// Store32 atomically stores v at the 4-byte aligned gpa.
	Store32(gpa uint64, v uint32) error
}

// LoadUint32 atomically loads the little-endian 32-bit value at gpa, which
// must be 4-byte aligned (ring indices shared with the guest).
func LoadUint32(m Memory, gpa uint64) (uint32, error) {
	if gpa&3 != 0 {
		return 0, Fault(gpa, 4, "unaligned 32-bit load")
	}
	if w, ok := m.(WordAccess); ok {
		return w.Load32(gpa)
	}
	return loadUint32(m, gpa)
}

// loadUint32 is LoadUint32 through Access (apart, so that the value the
// callback sets escapes only on this path).
func loadUint32(m Memory, gpa uint64) (v uint32, err error) {
	err = m.Access(gpa, 4, false, func(b []byte) {
		v = atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[0])))
	})
	return v, err
}

// StoreUint32 atomically stores v at the 4-byte aligned gpa.
func StoreUint32(m Memory, gpa uint64, v uint32) error {
	if gpa&3 != 0 {
		return Fault(gpa, 4, "unaligned 32-bit store")
	}
	if w, ok := m.(WordAccess); ok {
		return w.Store32(gpa, v)
	}
	return m.Access(gpa, 4, true, func(b []byte) {
		atomic.StoreUint32((*uint32)(unsafe.Pointer(&b[0])), v)
	})
}

// Flat is guest memory backed by one byte slice starting at guest-physical
// address Base: the RAM of tests and fake drivers.
type Flat struct {
	Base uint64
	Mem  []byte
}

// NewFlat returns size bytes of zeroed guest RAM at base. size is rounded up
// to a multiple of 8 so that aligned atomics stay inside the slice.
func NewFlat(base uint64, size int) *Flat {
	return &Flat{Base: base, Mem: make([]byte, (size+7)&^7)}
}

func (f *Flat) window(gpa, n uint64) ([]byte, error) {
	end, ok := End(gpa, n)
	if !ok || gpa < f.Base || end > f.Base+uint64(len(f.Mem)) {
		return nil, Fault(gpa, n, "outside guest RAM")
	}
	off := gpa - f.Base
	return f.Mem[off : off+n : off+n], nil
}

// ReadAt implements Memory.
func (f *Flat) ReadAt(p []byte, gpa uint64) error {
	b, err := f.window(gpa, uint64(len(p)))
	if err != nil {
		return err
	}
	copy(p, b)
	return nil
}

// WriteAt implements Memory.
func (f *Flat) WriteAt(p []byte, gpa uint64) error {
	b, err := f.window(gpa, uint64(len(p)))
	if err != nil {
		return err
	}
	copy(b, p)
	return nil
}

// Load32 implements WordAccess.
func (f *Flat) Load32(gpa uint64) (uint32, error) {
	if gpa&3 != 0 {
		return 0, Fault(gpa, 4, "unaligned 32-bit load")
	}
	b, err := f.window(gpa, 4)
	if err != nil {
		return 0, err
	}
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[0]))), nil
}

// Store32 implements WordAccess.
func (f *Flat) Store32(gpa uint64, v uint32) error {
	if gpa&3 != 0 {
		return Fault(gpa, 4, "unaligned 32-bit store")
	}
	b, err := f.window(gpa, 4)
	if err != nil {
		return err
	}
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&b[0])), v)
	return nil
}

// Access implements Memory.
func (f *Flat) Access(gpa, n uint64, write bool, fn func(b []byte)) error {
	b, err := f.window(gpa, n)
	if err != nil {
		return err
	}
	fn(b)
	return nil
}
