package mlx5

import (
	"encoding/binary"

	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
)

// Page lists (PAS, MTT): every object whose memory the device reaches is
// described by one — an EQ's, CQ's, QP's or SRQ's buffer by a pas[] of
// big-endian page addresses after its context, a memory key's translation
// by the MTT entries after its mkc. They are read here, once, at
// creation, and kept: readPAS is the one place that decodes them, so that
// package dma/mlx5 (the PAS/MTT/KLM translation being written beside this
// model) can take its place without the commands changing.

// pasList is a buffer's geometry and where its page list is in a
// command's input: n bytes from byte off of the first page (the context's
// page_offset), pages of 1<<shift bytes, the list at byte at of in.
type pasList struct {
	st    string // the input structure, for findings ("create_cq_in")
	at    int
	shift uint8
	off   uint64
	n     uint64
	// mtt: entries are MTT entries, whose low 3 bits are flags (and 0
	// without pg_access): masked off.
	mtt bool
	// synd and lenSynd are the syndromes of a bad entry and of an input
	// too short for the list.
	synd, lenSynd uint32
}

// maxPASPages bounds one list: what the longest command message carries.
const maxPASPages = ifc.MaxCmdMsgSize / 8

// readPAS reads the page list of a buffer: one entry per page the buffer
// touches, each aligned to the page size and inside guest memory as far
// as the buffer reaches into it. It counts the entries against the
// device's page-list budget (the caller unpins them when the object
// goes, or at once if it fails after this). A buffer of 0 bytes has no
// list.
func (d *Device) readPAS(op ifc.Opcode, in []byte, p pasList) ([]uint64, result) {
	if p.n == 0 {
		return nil, ok
	}
	pageSize := uint64(1) << p.shift
	end := p.off + p.n // both bounded by the callers: no overflow
	npages := (end + pageSize - 1) >> p.shift
	if need := uint64(p.at) + 8*npages; npages > maxPASPages || uint64(len(in)) < need {
		return nil, d.refuse(ifc.StatBadInpLenErr, p.lenSynd, hca.FindingPageDir, op, "%s: inlen=%d < %d for the %d pas[] entries of %d bytes in %d-byte pages", p.st, len(in), need, npages, p.n, pageSize)
	}
	if err := d.fn.pins.Pin(uint32(npages)); err != nil {
		return nil, d.refuse(ifc.StatNoResErr, SyndPinBudget, hca.FindingCommand, op, "%s: %d pas[] entries: %v", p.st, npages, err)
	}
	pas := make([]uint64, npages)
	for i := range pas {
		addr := binary.BigEndian.Uint64(in[p.at+8*i:])
		if p.mtt {
			addr &^= 7
		}
		// The part of page i the buffer uses.
		lo := max(p.off, uint64(i)*pageSize) - uint64(i)*pageSize
		hi := min(end, uint64(i+1)*pageSize) - uint64(i)*pageSize
		var r result
		if addr&(pageSize-1) != 0 {
			r = d.refuse(ifc.StatBadParamErr, p.synd, hca.FindingPageDir, op, "%s.pas[%d]=%#x: not aligned to the %d-byte page", p.st, i, addr, pageSize)
		} else if err := d.guestRange(addr+lo, hi-lo); err != nil {
			r = d.refuse(ifc.StatBadParamErr, p.synd, hca.FindingPageDir, op, "%s.pas[%d]=%#x: %v", p.st, i, addr, err)
		}
		if r != ok {
			d.fn.pins.Unpin(len(pas))
			return nil, r
		}
		pas[i] = addr
	}
	return pas, ok
}

// checkDBR checks a doorbell record's address: n bytes, aligned to
// align, inside guest memory.
func (d *Device) checkDBR(op ifc.Opcode, field string, addr, n, align uint64) result {
	if addr%align != 0 {
		return d.refuse(ifc.StatBadParamErr, SyndDBR, hca.FindingCommand, op, "%s=%#x: not %d-byte aligned", field, addr, align)
	}
	if err := d.guestRange(addr, n); err != nil {
		return d.refuse(ifc.StatBadParamErr, SyndDBR, hca.FindingCommand, op, "%s=%#x: %v", field, addr, err)
	}
	return ok
}
