package hca

import (
	"errors"
	"runtime"
	"sync/atomic"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/fabric"
)

// Payloads lent between HCAs of one process. A run's payload (the MIDDLE
// packets of a SEND or WRITE, handed to another HCA without frames) need not
// be copied into the batch: the sender validates it against its memory
// regions and lends its guest-physical extents, and the receiver copies
// them straight from the sender's guest memory into its own. One copy of
// each byte instead of two.
//
// The sender's guest memory is a dma.Map, which any goroutine may read (an
// access pins its DMA window; an unmapped window fails the read, never
// touches memory). What no goroutine but the sender's engine may read is
// the sender's region table, so the extents are resolved by the sender,
// and a loan stays good only while no region of the sender changed: every
// change that could end a region's hold on its pages (deregistration,
// invalidation, a fast-register, a reset) revokes all loans first. A
// receiver pins the loan for its reads (Pin fails once revoked: the run is
// lost, as on a wire, and the requester sends it again, finding the region
// gone itself); revoke waits until no read is pinned. So a receiver never
// reads a page after the region it was lent from stopped covering it.

// Lender lends a device's guest memory to the other HCAs of the process
// (fabric.Lender).
type Lender struct {
	mem   dma.Memory
	epoch atomic.Uint64 // the loans' generation: revoke moves it
	pins  atomic.Int64  // reads in progress
}

// Pin starts reads of a loan made at epoch: false when it was revoked.
func (l *Lender) Pin(epoch uint64) bool {
	l.pins.Add(1)
	if l.epoch.Load() != epoch {
		l.pins.Add(-1)
		return false
	}
	return true
}

// Unpin ends the reads Pin started.
func (l *Lender) Unpin() { l.pins.Add(-1) }

// ReadAt reads lent guest memory.
func (l *Lender) ReadAt(p []byte, addr uint64) error { return l.mem.ReadAt(p, addr) }

// Revoke ends every loan made so far and waits for the reads of them in
// progress (a receiver's copy of at most one run: it waits for nothing
// else, so this is short). A device never revokes while it holds a pin
// itself (a loan to itself, between two of its QPs, included): what it does
// while pinned is execute MIDDLE packets, which change no region.
func (l *Lender) Revoke() {
	l.epoch.Add(1)
	for l.pins.Load() != 0 {
		runtime.Gosched()
	}
}

// NewLender lends mem.
func NewLender(mem dma.Memory) *Lender { return &Lender{mem: mem} }

// Epoch is the loans' generation now: a batch records it with its first
// lent run, and a receiver's Pin of it fails once the loans are revoked.
func (l *Lender) Epoch() uint64 { return l.epoch.Load() }

var errLentShort = errors.New("lent payload shorter than its length")

// LentPayload is a run's payload lent by another HCA (mr.Source): Len
// bytes at extents of the lender's memory.
type LentPayload struct {
	from fabric.Lender
	ext  []fabric.Extent
	n    int
	// A cursor: extent idx starts at byte base of the payload (reads come
	// in order, one guest page at a time).
	idx  int
	base uint64
}

func (p *LentPayload) Len() int { return p.n }

func (p *LentPayload) ReadAt(b []byte, off uint64) error {
	if off+uint64(len(b)) > uint64(p.n) {
		return errLentShort
	}
	if off < p.base {
		p.idx, p.base = 0, 0
	}
	for len(b) > 0 {
		if p.idx >= len(p.ext) {
			return errLentShort
		}
		e := p.ext[p.idx]
		if off >= p.base+e.Len {
			p.base += e.Len
			p.idx++
			continue
		}
		in := off - p.base
		k := min(e.Len-in, uint64(len(b)))
		if err := p.from.ReadAt(b[:k], e.Addr+in); err != nil {
			return err
		}
		b, off = b[k:], off+k
	}
	return nil
}

// Lend makes p the n-byte payload lent by from at extents ext (its cursor
// at the start).
func (p *LentPayload) Lend(from fabric.Lender, ext []fabric.Extent, n int) {
	*p = LentPayload{from: from, ext: ext, n: n}
}

// Forget lets go of what p was lent.
func (p *LentPayload) Forget() { *p = LentPayload{} }
