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
	end, ok := End(off, n)
	if !ok || end > p.Size() {
		return fmt.Errorf("%w: [%#x, +%#x) outside a %d-page buffer", ErrFault, off, n, len(p))
	}
	for done := uint64(0); done < n; {
		o := off + done
		chunk := min(n-done, PageSize-o%PageSize)
		if err := fn(p[o/PageSize]+o%PageSize, chunk, done); err != nil {
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
