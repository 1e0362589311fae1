// Package mr models memory regions and their keys (IBTA verbs, "Memory
// Regions"): what a registered region covers, the L_Key and R_Key checks
// against its protection domain, access rights and bounds, the
// translation of a virtual address range (or an SGE list) into the guest
// pages behind it (pages of any power-of-two size from 4 KiB, the region's
// own), and the references that in-flight work holds.
//
// A key is the region's handle (bits 31:8) and a variant (bits 7:0, the
// IBTA "key" portion): the device picks a new variant every time it
// registers a handle, the consumer picks it on a fast-register, so a key
// kept past a deregistration does not name the region that next holds the
// handle. A region may also be a memory window (bound onto another
// region) or indirect (a list of byte ranges of other regions, mlx5's KLM
// mkeys). A reference names one registration of a region (handle, key and
// registration generation) and is re-validated on every use: work that
// outlives that registration fails instead of touching memory the region
// no longer owns, whatever now holds the handle or key. The package belongs to no
// device model: the device keeps the handle table (registration is its
// command ABI) and hands this package a Table to look regions up in.
package mr

import (
	"errors"
	"sync/atomic"
	"unsafe"

	"github.com/hcaemu/hcaemu/dma"
)

// Access flags (IBTA access rights; the verbs numbering).
const (
	LocalWrite   = 1
	RemoteWrite  = 2
	RemoteRead   = 4
	RemoteAtomic = 8
	MWBind       = 16
	ZeroBased    = 32
	OnDemand     = 64
	KnownAccess  = LocalWrite | RemoteWrite | RemoteRead | RemoteAtomic | MWBind | ZeroBased
)

// Region is a registered memory region.
type Region struct {
	PD     uint32 // protection domain handle
	Ctx    uint32 // owning user context, 0 = kernel
	Access uint32
	DMA    bool   // the kernel's local DMA L_Key: GPA addressing
	FRMR   bool   // fast-register MR
	Valid  bool   // FRMRs are invalid until registered
	Start  uint64 // I/O virtual address of byte 0
	Length uint64
	// Pages translate the region: the guest-physical address of each of
	// its pages, of 1<<PageShift bytes each (0: 4 KiB), byte 0 of the
	// first page being Start rounded down to the page size. A model whose
	// keys carry a page size (mlx5's log_page_size) sets PageShift; each
	// page address is aligned to it (validated by the model).
	Pages     dma.Pages
	PageShift uint8
	LKey      uint32
	RKey      uint32
	MaxPages  uint32 // FRMR page list capacity
	// Gen identifies the registration: a number the device never hands
	// out twice, set on every registration and fast-register. References
	// hold it, so one re-registered under the same key does not resolve.
	Gen uint64
	// Window, when set, makes the region a memory window (IBTA "Memory
	// Windows"): it has no pages of its own; while Valid (bound) its
	// [Start, Start+Length) maps onto the region Window.Target names. A
	// window is reached by its R_Key only, never as an L_Key.
	Window *Window
	// KLMs, when set, make the region indirect (mlx5's KLM access mode: a
	// kernel fast-registered MR of the SG_GAPS type): it has no pages of
	// its own; byte Start+o of it is byte o of its entries laid end to
	// end, each a range of another region of the same protection domain,
	// resolved by reference on every use (an entry names neither a window
	// nor another indirect region). Length is the entries' total. Each
	// entry is a Seg: Len bytes at Addr of the region its Ref names.
	KLMs []Seg
}

// Window is a memory window's binding.
type Window struct {
	Type2 bool   // type 2: remote invalidation, bound to one QP
	QPN   uint32 // type 2: the QP it was bound through (only it reaches it)
	// Target names the region the window is bound to (by its L_Key,
	// resolved on every use: a window outlives no registration of it) and
	// Addr the address in it of window byte Start.
	Target Ref
	Addr   uint64
}

// Handle is the region handle a key names (bits 31:8; bits 7:0 are the
// key's variant).
func Handle(key uint32) uint32 { return key >> 8 }

// Variant is the key's variant (bits 7:0, the IBTA "key" portion).
func Variant(key uint32) uint8 { return uint8(key) }

// MaxHandle is the largest handle a key can name.
const MaxHandle = 1<<24 - 1

// Key is the key of handle (at most MaxHandle) with variant.
func Key(handle uint32, variant uint8) uint32 { return handle<<8 | uint32(variant) }

// NextVariant is the variant a handle's next registration gets when its
// previous one ended with variant prev: prev+1, wrapping from 255 to 0, so
// a reused handle never gets its previous key back (only after 256
// registrations of that handle, as the 8-bit key portion allows).
func NextVariant(prev uint8) uint8 { return prev + 1 }

// Table looks regions up by handle (the device's MR table).
type Table interface {
	Region(handle uint32) *Region
}

// Lookup finds the valid region a key names: the whole key must match its
// L_Key (local) or R_Key (remote; never the DMA region).
func Lookup(regions Table, key uint32, remote bool) *Region {
	region := regions.Region(Handle(key))
	if region == nil || !region.Valid {
		return nil
	}
	if remote {
		if region.DMA || region.RKey != key {
			return nil
		}
	} else if region.LKey != key || region.Window != nil {
		return nil
	}
	return region
}

// LookupAny finds a valid or invalid region by either of its keys
// (invalidation).
func LookupAny(regions Table, key uint32) *Region {
	region := regions.Region(Handle(key))
	if region == nil || (region.RKey != key && region.LKey != key) {
		return nil
	}
	return region
}

// InRange reports whether [va, va+n) lies inside the region.
func (r *Region) InRange(va, n uint64) bool {
	end, ok := dma.End(va, n)
	if r.DMA {
		return ok
	}
	regionEnd, _ := dma.End(r.Start, r.Length)
	return ok && va >= r.Start && end <= regionEnd
}

// Span visits the guest memory behind [va, va+n) of the region, split into
// pieces that are contiguous in guest-physical memory (at its page
// boundaries). The caller has checked InRange.
func (r *Region) Span(va, n uint64, fn func(gpa, n, done uint64) error) error {
	if r.DMA {
		return fn(va, n, 0)
	}
	shift := r.PageShift
	if shift == 0 {
		shift = dma.PageShift
	}
	// (RangeShift refuses a shift outside 12..40; a larger one makes base 0
	// here, harmlessly, in Go.)
	base := r.Start &^ (uint64(1)<<shift - 1)
	return r.Pages.RangeShift(shift, va-base, n, fn)
}

// Ref is what in-flight work holds instead of a region: resolved (and so
// re-validated) on every use.
type Ref struct {
	Handle uint32
	Key    uint32
	PD     uint32
	Remote bool   // Key is an R_Key
	Gen    uint64 // the registration it was taken from (Region.Gen)
}

// Resolve returns the region the reference still names: registered, valid,
// the same registration, with the same key and protection domain; nil
// otherwise.
func (ref Ref) Resolve(regions Table) *Region {
	region := Lookup(regions, ref.Key, ref.Remote)
	if region == nil || Handle(ref.Key) != ref.Handle || region.PD != ref.PD || region.Gen != ref.Gen {
		return nil
	}
	return region
}

// SGE is a scatter/gather element: a local address range and its L_Key.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// Seg is one validated piece of local memory an SGE names.
type Seg struct {
	Ref  Ref
	Addr uint64
	Len  uint64
}

// MaxMessage is the largest message an SGE list may describe (2^31 bytes).
const MaxMessage = 1 << 31

// Errors of SGE validation (the completion statuses LOC_PROT_ERR and
// LOC_LEN_ERR).
var (
	ErrProtection = errors.New("SGE outside the memory regions of its protection domain")
	ErrLength     = errors.New("SGE list longer than 2^31 bytes")
)

// ErrStale reports a reference that no longer resolves: its region was
// deregistered, invalidated or registered again since the reference was
// taken (or the range left it).
var ErrStale = errors.New("memory region no longer registered")

// Space is the memory a transport reaches: guest memory and the regions
// registered on it.
type Space struct {
	Mem     dma.Memory
	Regions Table
	// QPN is the QP the space is of (a device that has memory windows
	// sets it): only it reaches a type-2 window bound through it, and only
	// it invalidates one remotely.
	QPN uint32
	// Changed, when set, is called after Invalidate changed a region
	// (the device calls it after every change to its regions it makes
	// itself): a payload lent from the region may not be read after it.
	Changed func()
	// Filler, when set, is reused by CopyFrom and WriteFrom (else they
	// make one per call).
	Filler *Filler
}

// Segs validates an SGE list against protection domain pd: every L_Key must
// name a valid region of that PD, with LOCAL_WRITE when the device writes
// into it, and each [addr, addr+len) must lie inside the region; the total
// must fit 31 bits. It returns the segments and their total length.
func (s Space) Segs(pd uint32, sges []SGE, write bool) ([]Seg, uint32, error) {
	return s.SegsInto(nil, pd, sges, write)
}

// SegsInto is Segs with the segments in dst's storage when it holds them
// (a finished request's, reused: no allocation).
func (s Space) SegsInto(dst []Seg, pd uint32, sges []SGE, write bool) ([]Seg, uint32, error) {
	segs := dst[:0]
	if cap(segs) < len(sges) {
		segs = make([]Seg, 0, len(sges))
	}
	var total uint64
	for _, sge := range sges {
		region := Lookup(s.Regions, sge.LKey, false)
		if region == nil || region.PD != pd {
			return nil, 0, ErrProtection
		}
		if write && region.Access&LocalWrite == 0 {
			return nil, 0, ErrProtection
		}
		if !region.InRange(sge.Addr, uint64(sge.Length)) {
			return nil, 0, ErrProtection
		}
		total += uint64(sge.Length)
		if total > MaxMessage {
			return nil, 0, ErrLength
		}
		if sge.Length > 0 {
			ref := Ref{Handle: Handle(sge.LKey), Key: sge.LKey, PD: pd, Gen: region.Gen}
			segs = append(segs, Seg{Ref: ref, Addr: sge.Addr, Len: uint64(sge.Length)})
		}
	}
	return segs, uint32(total), nil
}

// spanSegs visits, in order, the guest-physical pieces of n bytes from
// byte off of the segment list (done: where a piece starts in those n
// bytes), each segment's reference resolved, and so re-validated, before
// anything of it is visited.
func (s Space) spanSegs(segs []Seg, off, n uint64, fn func(gpa, k, done uint64) error) error {
	return s.walkSegs(segs, off, n, true, fn)
}

// walkSegs is spanSegs; with indirect false (an indirect region's
// entries), a segment whose region is itself indirect is stale: entries
// nest no further.
func (s Space) walkSegs(segs []Seg, off, n uint64, indirect bool, fn func(gpa, k, done uint64) error) error {
	left := n
	var pos uint64
	for _, seg := range segs {
		if left == 0 {
			break
		}
		if off >= seg.Len {
			off -= seg.Len
			continue
		}
		k := min(seg.Len-off, left)
		region := seg.Ref.Resolve(s.Regions)
		addr, ok := dma.End(seg.Addr, off)
		if region == nil || !ok || !indirect && (region.KLMs != nil || !region.InRange(addr, k)) {
			return ErrStale
		}
		base := pos
		visit := func(gpa, m, done uint64) error { return fn(gpa, m, base+done) }
		var err error
		if indirect {
			err = s.spanRegion(region, addr, k, visit)
		} else {
			err = region.Span(addr, k, visit)
		}
		if err != nil {
			return err
		}
		pos += k
		left -= k
		off = 0
	}
	if left != 0 {
		return dma.Fault(0, left, "SGE list shorter than the data")
	}
	return nil
}

// Copy copies between buf and the segments' memory starting at byte off of
// the segment list (toGuest: buf -> guest).
func (s Space) Copy(segs []Seg, off uint64, buf []byte, toGuest bool) error {
	return s.spanSegs(segs, off, uint64(len(buf)), func(gpa, k, done uint64) error {
		if toGuest {
			return s.Mem.WriteAt(buf[done:done+k], gpa)
		}
		return s.Mem.ReadAt(buf[done:done+k], gpa)
	})
}

// Extents visits, in order, the guest-physical pieces of n bytes from byte
// off of the segment list, each segment's reference resolved (and so
// re-validated) as Copy does; it fails where Copy would, before visiting
// anything of the failing segment.
func (s Space) Extents(segs []Seg, off, n uint64, fn func(gpa, n uint64) error) error {
	return s.spanSegs(segs, off, n, func(gpa, k, _ uint64) error { return fn(gpa, k) })
}

// Source is bytes to bring into guest memory that lie outside it (another
// HCA's guest memory): ReadAt fills p with its bytes from byte off on; Len
// is how many it has.
type Source interface {
	ReadAt(p []byte, off uint64) error
	Len() int
}

// CopyFrom is Copy into guest memory, the bytes coming from src instead of
// a buffer: each piece of guest memory is filled straight from src.
func (s Space) CopyFrom(segs []Seg, off uint64, src Source) error {
	f := s.filler(src)
	defer f.done()
	return s.spanSegs(segs, off, uint64(src.Len()), f.visit)
}

// WriteFrom is Write with the bytes coming from src.
func (s Space) WriteFrom(ref Ref, va uint64, src Source) error {
	f := s.filler(src)
	defer f.done()
	return s.span(ref, va, uint64(src.Len()), f.visit)
}

// Filler is the state of CopyFrom and WriteFrom while they fill guest
// memory from a Source, kept by a Space's user and reused: the functions
// they hand on (to Span, and per piece of memory to Mem.Access) are made
// once, where closures would be an allocation per call or per page.
type Filler struct {
	mem   dma.Memory
	src   Source
	off   uint64
	err   error
	fn    func([]byte)
	visit func(gpa, n, done uint64) error
}

// NewFiller makes a Filler.
func NewFiller() *Filler {
	f := &Filler{}
	f.fn = f.fill
	f.visit = f.piece
	return f
}

// filler readies the Space's Filler (or a new one) to fill from src.
func (s Space) filler(src Source) *Filler {
	f := s.Filler
	if f == nil {
		f = NewFiller()
	}
	f.mem, f.src = s.Mem, src
	return f
}

// done lets go of what the Filler was given.
func (f *Filler) done() { f.mem, f.src, f.err = nil, nil, nil }

// piece fills guest memory [gpa, gpa+n) with the source's bytes from done
// on.
func (f *Filler) piece(gpa, n, done uint64) error {
	f.off, f.err = done, nil
	if err := f.mem.Access(gpa, n, true, f.fn); err != nil {
		return err
	}
	return f.err
}

func (f *Filler) fill(b []byte) { f.err = f.src.ReadAt(b, f.off) }

// Remote checks an R_Key: a region of protection domain pd granting access
// and covering [va, va+n). It returns the reference to use.
func (s Space) Remote(pd, key uint32, va, n uint64, access uint32) (Ref, bool) {
	region := Lookup(s.Regions, key, true)
	if region == nil || region.PD != pd || region.Access&access == 0 || !region.InRange(va, n) {
		return Ref{}, false
	}
	ref := Ref{Handle: Handle(key), Key: key, PD: pd, Remote: true, Gen: region.Gen}
	if region.Window != nil {
		if _, _, ok := s.through(region, va, n); !ok {
			return Ref{}, false
		}
	}
	return ref, true
}

// Valid reports whether ref still resolves and its region covers [va,
// va+n).
func (s Space) Valid(ref Ref, va, n uint64) bool {
	_, _, ok := s.resolve(ref, va, n)
	return ok
}

// resolve resolves ref for [va, va+n): the region whose pages hold it (a
// window's: the region it is bound to) and the address there.
func (s Space) resolve(ref Ref, va, n uint64) (*Region, uint64, bool) {
	region := ref.Resolve(s.Regions)
	if region == nil || !region.InRange(va, n) {
		return nil, 0, false
	}
	if region.Window == nil {
		return region, va, true
	}
	return s.through(region, va, n)
}

// through maps [va, va+n) of window w (in range) onto the region it is
// bound to: that region must still be the registration bound (its L_Key,
// PD and generation) and hold the whole range; a type-2 window is reached
// through the QP it was bound through only.
func (s Space) through(w *Region, va, n uint64) (*Region, uint64, bool) {
	b := w.Window
	if !w.Valid || (b.Type2 && b.QPN != s.QPN) {
		return nil, 0, false
	}
	target := b.Target.Resolve(s.Regions)
	if target == nil || target.Window != nil {
		return nil, 0, false
	}
	tva, ok := dma.End(b.Addr, va-w.Start)
	if !ok || !target.InRange(tva, n) {
		return nil, 0, false
	}
	return target, tva, true
}

// span resolves ref and visits [va, va+n) of its region.
func (s Space) span(ref Ref, va, n uint64, fn func(gpa, n, done uint64) error) error {
	region, va, ok := s.resolve(ref, va, n)
	if !ok {
		return ErrStale
	}
	return s.spanRegion(region, va, n, fn)
}

// spanRegion is region.Span for any region the space resolves: an
// indirect one (KLMs) is visited entry by entry, each entry's reference
// resolved and its range checked first (the walk is bounded by the
// entries; entries nest no further).
func (s Space) spanRegion(region *Region, va, n uint64, fn func(gpa, n, done uint64) error) error {
	if region.KLMs == nil {
		return region.Span(va, n, fn)
	}
	return s.walkSegs(region.KLMs, va-region.Start, n, false, fn) // the caller checked InRange
}

// Write copies b into the region at va.
func (s Space) Write(ref Ref, va uint64, b []byte) error {
	return s.span(ref, va, uint64(len(b)), func(gpa, n, done uint64) error {
		return s.Mem.WriteAt(b[done:done+n], gpa)
	})
}

// Read copies the region's bytes at va into b.
func (s Space) Read(ref Ref, va uint64, b []byte) error {
	return s.span(ref, va, uint64(len(b)), func(gpa, n, done uint64) error {
		return s.Mem.ReadAt(b[done:done+n], gpa)
	})
}

// Atomic performs a 64-bit compare-and-swap (cas) or fetch-and-add at va
// and returns the original value.
func (s Space) Atomic(ref Ref, va uint64, cas bool, compare, swapAdd uint64) (orig uint64, err error) {
	err = s.span(ref, va, 8, func(gpa, n, _ uint64) error {
		if n != 8 {
			return dma.Fault(gpa, 8, "atomic target crosses a page")
		}
		return s.Mem.Access(gpa, 8, true, func(b []byte) {
			word := (*uint64)(unsafe.Pointer(&b[0]))
			for {
				orig = atomic.LoadUint64(word)
				next := orig + swapAdd
				if cas {
					if orig != compare {
						return
					}
					next = swapAdd
				}
				if atomic.CompareAndSwapUint64(word, orig, next) {
					return
				}
			}
		})
	})
	return orig, err
}

// Invalidate invalidates the fast-register region of protection domain pd
// that key names (LOCAL_INV, SEND_WITH_INV), or the type-2 window it names
// bound through the space's QP (SEND_WITH_INV); false if there is none.
func (s Space) Invalidate(pd, key uint32) bool {
	region := LookupAny(s.Regions, key)
	if region == nil || region.PD != pd {
		return false
	}
	if w := region.Window; w != nil {
		if !w.Type2 || !region.Valid || w.QPN != s.QPN || region.RKey != key {
			return false
		}
	} else if !region.FRMR {
		return false
	}
	region.Valid = false
	if s.Changed != nil {
		s.Changed()
	}
	return true
}
