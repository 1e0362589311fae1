// Package pvrdma reads PVRDMA page directories: the two-level translation
// tables (a directory page of page-table addresses, tables of page
// addresses) the vmw_pvrdma driver describes every guest buffer with (rings,
// CQs, QPs, SRQs, MRs, fast-register page lists). What it returns is a
// dma.Pages, the model-neutral page list the rest of the device uses.
//
// Importers name it pagedir; another model's translation tables (mlx5's MTT
// and KLM lists) sit beside it (dma/<model>).
package pvrdma

import (
	"encoding/binary"
	"fmt"

	"github.com/hcaemu/hcaemu/dma"
)

// MaxDirPages is the most pages one PVRDMA page directory can describe: one
// directory page of 512 page tables of 512 entries.
const MaxDirPages = 512 * 512

const entriesPerPage = dma.PageSize / 8

// Read walks the two-level page directory at pdir and returns the GPAs
// of its first n data pages. n must be in 1..limit (limit <= MaxDirPages).
// Every table and data page address must be non-zero, page aligned and inside
// mapped guest memory.
func Read(m dma.Memory, pdir uint64, n, limit uint32) (dma.Pages, error) {
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
	pages := make(dma.Pages, 0, n)
	table := make([]byte, dma.PageSize)
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

func checkPage(m dma.Memory, gpa uint64) error {
	if gpa == 0 || gpa%dma.PageSize != 0 {
		return dma.Fault(gpa, dma.PageSize, "page address zero or unaligned")
	}
	return m.Access(gpa, dma.PageSize, false, func([]byte) {})
}
