package dma

import "fmt"

// Pages is the validated page list of one guest buffer (a ring, a QP, an MR):
// the guest-physical address of each of its 4 KiB pages, in order. It is read
// from the guest's page directory once, when the object is created, and never
// re-read.
type Pages []uint64

// Size is the byte size of the buffer.
func (p Pages) Size() uint64 { return uint64(len(p)) * PageSize }

// Range calls fn for each piece of [off, off+n) of the buffer, split at page
// boundaries, with the piece's GPA, length and offset from off.
func (p Pages) Range(off, n uint64, fn func(gpa, n, done uint64) error) error {
	return p.RangeShift(PageShift, off, n, fn)
}

// PageShift is log2 of PageSize.
const PageShift = 12

// Page shifts a page list may have (RangeShift): 4 KiB up to 1 TiB pages.
const (
	MinPageShift = PageShift
	MaxPageShift = 40
)

// RangeShift is Range over a list whose pages are 1<<shift bytes each (a
// memory key's page size: 4 KiB, 64 KiB, 2 MiB huge pages...), each page
// address aligned to its size (the caller validated the list). A shift
// outside MinPageShift..MaxPageShift visits nothing and faults.
func (p Pages) RangeShift(shift uint8, off, n uint64, fn func(gpa, n, done uint64) error) error {
	if shift < MinPageShift || shift > MaxPageShift {
		return Fault(off, n, "page shift outside 12..40")
	}
	size := uint64(1) << shift
	end, ok := End(off, n)
	if !ok || uint64(len(p)) > (1<<64-1)>>shift || end > uint64(len(p))<<shift {
		return fmt.Errorf("%w: [%#x, +%#x) outside a %d-page buffer of %d-byte pages", ErrFault, off, n, len(p), size)
	}
	mask := size - 1 // a mask, not %: size is a variable power of two
	for done := uint64(0); done < n; {
		o := off + done
		in := o & mask
		chunk := min(n-done, size-in)
		if err := fn(p[o>>shift]+in, chunk, done); err != nil {
			return err
		}
		done += chunk
	}
	return nil
}

// ReadAt copies the buffer's bytes at off into b.
func (p Pages) ReadAt(m Memory, b []byte, off uint64) error {
	return p.Range(off, uint64(len(b)), func(gpa, n, done uint64) error {
		return m.ReadAt(b[done:done+n], gpa)
	})
}

// WriteAt copies b into the buffer at off.
func (p Pages) WriteAt(m Memory, b []byte, off uint64) error {
	return p.Range(off, uint64(len(b)), func(gpa, n, done uint64) error {
		return m.WriteAt(b[done:done+n], gpa)
	})
}

// Addr is the GPA of byte off of the buffer.
func (p Pages) Addr(off uint64) (uint64, bool) {
	if off >= p.Size() {
		return 0, false
	}
	return p[off/PageSize] + off%PageSize, true
}
