// Package mlx5 reads the ConnectX (mlx5) translation tables: the PAS lists
// that describe every queue buffer (QP, CQ, SRQ/RMP, XRC SRQ, EQ: page
// addresses of 4 KiB << log_page_size bytes, the buffer starting
// page_offset × page_size/64 bytes into the first page), the MTT lists of
// memory keys in MTT access mode (the same big-endian page addresses, with
// an absolute log_page_size and the page offset of start_addr), and the KLM
// lists of indirect keys and memory windows (byte_count, mkey, address
// triples). What it returns is a dma.Pages with its page shift, the
// model-neutral page list the rest of the device uses (mr.Region.Pages and
// PageShift), or a KLM list.
//
// The lists come from command mailboxes and UMR WQEs: the caller copies the
// bytes out of guest memory once; everything here validates them (page
// alignment, the count against the length the list must cover, checked
// arithmetic, the caller's bound) and never panics.
//
// Importers name it mtt, beside dma/pvrdma (pagedir). Names follow
// mlx5_ifc.h (cmd_pas, klm) spelled as Go does.
package mlx5

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/hcaemu/hcaemu/dma"
)

var be = binary.BigEndian

// Sizes.
const (
	PASEntrySize = 8  // struct mlx5_ifc_cmd_pas_bits: one big-endian 64-bit address
	KLMSize      = 16 // struct mlx5_klm / mlx5_wqe_umr_klm_seg
	// AdapterPageShift is the page size queue contexts count log_page_size
	// from (MLX5_ADAPTER_PAGE_SHIFT).
	AdapterPageShift = 12
	// PageOffsetUnits is what a queue context's page_offset counts in: the
	// page size divided by 64.
	PageOffsetUnits = 64
	// MTTAccessBits are the low bits of an MTT entry that carry access
	// flags when the mkey has pg_access (mlx5.md §6.4).
	MTTAccessBits = 7
	// MaxKLMByteCount is the largest byte_count of a KLM ("up to 2GB",
	// mlx5dv.h struct mlx5_wqe_umr_klm_seg).
	MaxKLMByteCount = 1 << 31
)

// ErrTranslation is what every error of this package matches (errors.Is).
var ErrTranslation = errors.New("bad translation list")

func errf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrTranslation}, args...)...)
}

// Translation is a validated PAS or MTT list: Pages of 1<<Shift bytes each,
// the buffer (or memory key) starting Offset bytes into Pages[0] and
// running Length bytes.
type Translation struct {
	Pages  dma.Pages
	Shift  uint8
	Offset uint64
	Length uint64
}

// QueueBuffer reads the pas[] of a queue context from b (the list's bytes
// as the command carried them: at least the entries the buffer covers;
// entries past them, the mailbox's padding, are not read).
// logPageSize is the context's log_page_size (page_shift − 12, or an RMP's
// log_wq_pg_sz), pageOffset its page_offset (in units of page_size/64),
// length the queue's size in bytes (not zero), maxPages the device's bound
// on the list.
func QueueBuffer(b []byte, logPageSize uint8, pageOffset uint32, length uint64, maxPages int) (Translation, error) {
	if logPageSize > dma.MaxPageShift-AdapterPageShift {
		return Translation{}, errf("log_page_size %d above %d", logPageSize, dma.MaxPageShift-AdapterPageShift)
	}
	if pageOffset >= PageOffsetUnits {
		return Translation{}, errf("page_offset %d outside 0..63", pageOffset)
	}
	if length == 0 {
		return Translation{}, errf("empty queue")
	}
	shift := AdapterPageShift + logPageSize
	return decode(b, shift, uint64(pageOffset)<<(shift-6), length, 0, maxPages)
}

// MTT reads the MTT list of a memory key in MTT access mode from b (the
// klm_pas_mtt entries; an odd count is padded by one entry, not read).
// logPageSize is mkc.log_page_size, absolute (12 for 4 KiB pages);
// startAddr and length are mkc.start_addr and len; pgAccess (mkc's
// pg_access) makes the low MTTAccessBits of each entry flags, masked off.
// The Translation's Pages start at startAddr rounded down to the page size
// (mr.Region's convention), Offset being startAddr's offset in its page.
func MTT(b []byte, logPageSize uint8, startAddr, length uint64, pgAccess bool, maxPages int) (Translation, error) {
	if logPageSize < dma.MinPageShift || logPageSize > dma.MaxPageShift {
		return Translation{}, errf("log_page_size %d outside %d..%d", logPageSize, dma.MinPageShift, dma.MaxPageShift)
	}
	var mask uint64
	if pgAccess {
		mask = MTTAccessBits
	}
	if _, ok := dma.End(startAddr, length); !ok {
		return Translation{}, errf("start_addr %#x + len %#x overflows", startAddr, length)
	}
	return decode(b, logPageSize, startAddr&(1<<logPageSize-1), length, mask, maxPages)
}

// decode reads the entries covering [offset, offset+length) of pages of
// 1<<shift bytes (shift within dma's bounds).
func decode(b []byte, shift uint8, offset, length, flagMask uint64, maxPages int) (Translation, error) {
	size := uint64(1) << shift
	end, ok := dma.End(offset, length)
	if !ok {
		return Translation{}, errf("offset %#x + length %#x overflows", offset, length)
	}
	npages := end >> shift
	if end&(size-1) != 0 {
		npages++
	}
	if maxPages < 0 || npages > uint64(maxPages) {
		return Translation{}, errf("%d pages of %d bytes, at most %d", npages, size, max(maxPages, 0))
	}
	if npages > uint64(len(b)/PASEntrySize) {
		return Translation{}, errf("%d pages of %d bytes to cover, %d entries given", npages, size, len(b)/PASEntrySize)
	}
	pages := make(dma.Pages, npages)
	for i := range pages {
		p := be.Uint64(b[i*PASEntrySize:]) &^ flagMask
		if p&(size-1) != 0 {
			return Translation{}, errf("entry %d: %#x not aligned to %d bytes", i, p, size)
		}
		if _, ok := dma.End(p, size); !ok {
			return Translation{}, errf("entry %d: page at %#x runs past 2^64", i, p)
		}
		pages[i] = p
	}
	return Translation{Pages: pages, Shift: shift, Offset: offset, Length: length}, nil
}

// Range calls fn for each piece of [off, off+n) of the buffer (offsets
// from its byte 0), split at page boundaries, with the piece's
// guest-physical address, length and offset from off.
func (t Translation) Range(off, n uint64, fn func(gpa, n, done uint64) error) error {
	end, ok := dma.End(off, n)
	if !ok || end > t.Length {
		return dma.Fault(off, n, fmt.Sprintf("outside a %d-byte buffer", t.Length))
	}
	return t.Pages.RangeShift(t.Shift, t.Offset+off, n, fn)
}

// Extent is a piece of guest-physical memory.
type Extent struct{ GPA, Len uint64 }

// Extents appends to dst the guest-physical extents of [off, off+n) of the
// buffer, one per page touched.
func (t Translation) Extents(dst []Extent, off, n uint64) ([]Extent, error) {
	err := t.Range(off, n, func(gpa, n, _ uint64) error {
		dst = append(dst, Extent{gpa, n})
		return nil
	})
	return dst, err
}

// Addr is the guest-physical address of byte off of the buffer.
func (t Translation) Addr(off uint64) (uint64, bool) {
	if off >= t.Length {
		return 0, false
	}
	o := t.Offset + off
	return t.Pages[o>>t.Shift] + o&(1<<t.Shift-1), true
}

// ReadAt copies the buffer's bytes at off into b.
func (t Translation) ReadAt(m dma.Memory, b []byte, off uint64) error {
	return t.Range(off, uint64(len(b)), func(gpa, n, done uint64) error {
		return m.ReadAt(b[done:done+n], gpa)
	})
}

// WriteAt copies b into the buffer at off.
func (t Translation) WriteAt(m dma.Memory, b []byte, off uint64) error {
	return t.Range(off, uint64(len(b)), func(gpa, n, done uint64) error {
		return m.WriteAt(b[done:done+n], gpa)
	})
}
