package dma

import (
	"encoding/binary"
	"fmt"
)

// MaxDirPages is the most pages one PVRDMA page directory can describe: one
// directory page of 512 page tables of 512 entries.
const MaxDirPages = 512 * 512

const entriesPerPage = PageSize / 8

// Pages is the validated page list of one guest buffer (a ring, a QP, an MR):
// the guest-physical address of each of its 4 KiB pages, in order. It is read
// from the guest's page directory once, when the object is created, and never
// re-read.
type Pages []uint64

// ReadPageDir walks the two-level page directory at pdir and returns the GPAs
// of its first n data pages. n must be in 1..limit (limit <= MaxDirPages).
// Every table and data page address must be non-zero, page aligned and inside
// mapped guest memory.
func ReadPageDir(m Memory, pdir uint64, n, limit uint32) (Pages, error) {
	if limit > MaxDirPages {
		limit = MaxDirPages
	}
	if n == 0 || n > limit {
		return nil, fmt.Errorf("page count %d outside 1..%d", n, limit)
	}
	if err := checkPage(m, pdir); err != nil {
		return nil, fmt.Errorf("directory: %w", err)
	}
	ntables := (n + entriesPerPage - 1) / entriesPerPage
	dir := make([]byte, 8*ntables)
	if err := m.ReadAt(dir, pdir); err != nil {
		return nil, fmt.Errorf("directory: %w", err)
	}
	pages := make(Pages, 0, n)
	table := make([]byte, PageSize)
	for t := uint32(0); t < ntables; t++ {
		tgpa := binary.LittleEndian.Uint64(dir[8*t:])
		if err := checkPage(m, tgpa); err != nil {
			return nil, fmt.Errorf("page table %d: %w", t, err)
		}
		cnt := min(n-t*entriesPerPage, entriesPerPage)
		if err := m.ReadAt(table[:8*cnt], tgpa); err != nil {
			return nil, fmt.Errorf("page table %d: %w", t, err)
		}
		for e := uint32(0); e < cnt; e++ {
			p := binary.LittleEndian.Uint64(table[8*e:])
			if err := checkPage(m, p); err != nil {
				return nil, fmt.Errorf("page %d: %w", t*entriesPerPage+e, err)
			}
			pages = append(pages, p)
		}
	}
	return pages, nil
}

func checkPage(m Memory, gpa uint64) error {
	if gpa == 0 || gpa%PageSize != 0 {
		return Fault(gpa, PageSize, "page address zero or unaligned")
	}
	return m.Access(gpa, PageSize, false, func([]byte) {})
}

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
