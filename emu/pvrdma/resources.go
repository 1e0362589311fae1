package pvrdma

import (
	"net/netip"
	"sort"

	"github.com/hcaemu/hcaemu/dma"
	pagedir "github.com/hcaemu/hcaemu/dma/pvrdma"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
)

// table is a handle table: handles are small integers in [first, limit),
// handed out round-robin (the next free one after the last handed out, so a
// freed handle is reused as late as possible), and at most limit-first
// objects exist.
type table[T any] struct {
	name  string
	first uint32
	limit uint32
	objs  map[uint32]*T
	next  uint32 // search hint
	// reserved is a handle add never hands out (the GSI QP's 1); 0 = none.
	reserved uint32
}

func newTable[T any](name string, first, limit uint32) table[T] {
	return table[T]{name: name, first: first, limit: limit, objs: map[uint32]*T{}, next: first}
}

func (t *table[T]) get(h uint32) *T { return t.objs[h] }

func (t *table[T]) add(v *T) (uint32, *cmdErr) {
	n := t.limit - t.first
	if uint32(len(t.objs)) >= n || (t.reserved != 0 && uint32(len(t.objs)) >= n-1 && t.objs[t.reserved] == nil) {
		return 0, fail(errNoMem, "%s table full (%d)", t.name, n)
	}
	h := t.next
	for i := uint32(0); i < n; i++ {
		if h < t.first || h >= t.limit {
			h = t.first
		}
		if _, used := t.objs[h]; !used && (h != t.reserved || h == 0) {
			t.objs[h] = v
			t.next = h + 1
			return h, nil
		}
		h++
	}
	return 0, fail(errNoMem, "%s table full (%d)", t.name, n)
}

// put installs v at a chosen handle (the GSI QP).
func (t *table[T]) put(h uint32, v *T) *cmdErr {
	if h < t.first || h >= t.limit {
		return fail(errInval, "%s handle %d: out of range", t.name, h).as(FindingHandle)
	}
	if _, used := t.objs[h]; used {
		return fail(errBusy, "%s handle %d: in use", t.name, h).as(FindingHandle)
	}
	t.objs[h] = v
	return nil
}

func (t *table[T]) del(h uint32) { delete(t.objs, h) }

// handles lists live handles in ascending order.
func (t *table[T]) handles() []uint32 {
	hs := make([]uint32, 0, len(t.objs))
	for h := range t.objs {
		hs = append(hs, h)
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i] < hs[j] })
	return hs
}

// GIDEntry is one entry of the port's GID table.
type GIDEntry struct {
	GID   [16]byte
	Type  uint8 // abi.GIDTypeFlagRoCEv1 or abi.GIDTypeFlagRoCEv2
	Valid bool
}

func (g GIDEntry) String() string { return netip.AddrFrom16(g.GID).String() }

type ucontext struct {
	uar uint32 // UAR page index owned by this context
}

type pd struct {
	ctx  uint32 // 0 = kernel
	refs int    // MRs, QPs and SRQs using it
}

// resources are the device's object tables and GID table.
type resources struct {
	uc   table[ucontext]
	pd   table[pd]
	mr   table[mr.Region] // memory regions (package mr checks their keys)
	cq   table[cq]
	qp   table[qp]
	srq  table[srq]
	gids []GIDEntry

	pinned uint64 // page-list entries held by all objects

	// mrVariants holds the key variant each MR handle last ended with
	// (kept across deregistrations and device resets, at most one entry
	// per handle of the MR table), so its next registration gets another
	// key (mr.NextVariant).
	mrVariants map[uint32]uint8
	// mrGen numbers registrations (mr.Region.Gen): never reset.
	mrGen uint64
}

// maxPinnedPages bounds the page lists one device keeps (4M entries, 32 MiB),
// so a guest cannot make the emulator allocate without limit.
const maxPinnedPages = 4 << 20

func (r *resources) init(c *abi.DeviceCaps) {
	r.uc = newTable[ucontext]("context", 1, c.MaxUAR)
	r.pd = newTable[pd]("PD", 1, min(c.MaxPD+1, 1<<24))
	r.mr = newTable[mr.Region]("MR", 1, min(c.MaxMR+1, 1<<24))
	r.cq = newTable[cq]("CQ", 1, c.MaxCQ)
	r.qp = newTable[qp]("QP", 1, min(c.MaxQP, 1<<16))
	r.qp.reserved = 1 // QPN 1 is the GSI QP's
	r.srq = newTable[srq]("SRQ", 1, c.MaxSRQ)
	r.gids = make([]GIDEntry, c.GIDTblLen)
	r.pinned = 0
	if r.mrVariants == nil {
		r.mrVariants = map[uint32]uint8{}
	}
}

// newMRKey is the key of a new registration of MR handle h: variant 0 the
// first time the device registers h, then the one after the variant its
// previous registration ended with.
func (r *resources) newMRKey(h uint32) uint32 {
	variant := uint8(0)
	if prev, used := r.mrVariants[h]; used {
		variant = mr.NextVariant(prev)
	}
	r.mrVariants[h] = variant
	return mr.Key(h, variant)
}

// newMRGen is the generation of a new registration.
func (r *resources) newMRGen() uint64 {
	r.mrGen++
	return r.mrGen
}

func (r *resources) count() int {
	return len(r.uc.objs) + len(r.pd.objs) + len(r.mr.objs) + len(r.cq.objs) + len(r.qp.objs) + len(r.srq.objs)
}

func (r *resources) pin(n uint32) *cmdErr {
	if r.pinned+uint64(n) > maxPinnedPages {
		return fail(errNoMem, "device page-list budget exhausted (%d pages held)", r.pinned)
	}
	r.pinned += uint64(n)
	return nil
}

func (r *resources) unpin(n int) { r.pinned -= uint64(n) }

// pinPages reads the page list of a new object (n pages from the directory
// at pdir, read once and kept) and counts it against the page budget.
func (d *Device) pinPages(what string, pdir uint64, n uint32) (dma.Pages, *cmdErr) {
	if e := d.res.pin(n); e != nil {
		return nil, e
	}
	pages, err := pagedir.Read(d.mem, pdir, n, pagedir.MaxDirPages)
	if err != nil {
		d.res.unpin(int(n))
		return nil, fail(errInval, "%s pdir_dma=%#x (%d pages): %v", what, pdir, n, err).as(FindingPageDir)
	}
	return pages, nil
}

// destroyContextObjects frees whatever a user context still holds (a process
// that died without cleaning up), children before parents.
func (d *Device) destroyContextObjects(ctx uint32) {
	r := &d.res
	for _, h := range r.qp.handles() {
		if qp := r.qp.get(h); qp.ctx == ctx {
			d.destroyQP(h, qp)
		}
	}
	for _, h := range r.srq.handles() {
		if s := r.srq.get(h); s.ctx == ctx {
			d.destroySRQ(h, s)
		}
	}
	for _, h := range r.cq.handles() {
		if c := r.cq.get(h); c.ctx == ctx {
			d.destroyCQ(h, c)
		}
	}
	for _, h := range r.mr.handles() {
		if m := r.mr.get(h); m.Ctx == ctx {
			d.destroyMR(h, m)
		}
	}
	for _, h := range r.pd.handles() {
		if p := r.pd.get(h); p.ctx == ctx {
			r.pd.del(h)
		}
	}
}

// --- PD ------------------------------------------------------------------------

func (d *Device) checkCtx(ctx uint32) *cmdErr {
	if ctx != 0 && d.res.uc.get(ctx) == nil {
		return fail(errInval, "ctx_handle=%d: no such context", ctx).as(FindingHandle)
	}
	return nil
}

func (d *Device) cmdCreatePD(req *abi.CmdCreatePD) (abi.Response, *cmdErr) {
	ctx := req.CtxHandle
	if e := d.checkCtx(ctx); e != nil {
		return nil, e
	}
	h, e := d.res.pd.add(&pd{ctx: ctx})
	if e != nil {
		return nil, e
	}
	return &abi.CmdCreatePDResp{PDHandle: h}, nil
}

func (d *Device) cmdDestroyPD(req *abi.CmdDestroyPD) (abi.Response, *cmdErr) {
	h := req.PDHandle
	pd := d.res.pd.get(h)
	if pd == nil {
		return nil, fail(errInval, "pd_handle=%d: no such PD", h).as(FindingHandle)
	}
	if pd.refs > 0 {
		return nil, fail(errBusy, "pd_handle=%d: still used by %d objects", h, pd.refs)
	}
	d.res.pd.del(h)
	return nil, nil
}

// --- MR ------------------------------------------------------------------------

// maxFRMRPages is the largest fast-register page list (the driver's limit).
const maxFRMRPages = abi.MaxFastRegPages

func (d *Device) cmdCreateMR(req *abi.CmdCreateMR) (abi.Response, *cmdErr) {
	start, length, pdir := req.Start, req.Length, req.PdirDMA
	pdh, access, flags, nchunks := req.PDHandle, req.AccessFlags, req.Flags, req.NChunks
	pd := d.res.pd.get(pdh)
	if pd == nil {
		return nil, fail(errInval, "pd_handle=%d: no such PD", pdh).as(FindingHandle)
	}
	access &= 0xFFFFF // optional bits >= 20 (relaxed ordering...) are hints
	if access&^mr.KnownAccess != 0 {
		return nil, fail(errInval, "pvrdma_cmd_create_mr.access_flags=%#x: unknown bits %#x", access, access&^mr.KnownAccess)
	}
	if access&(mr.RemoteWrite|mr.RemoteAtomic) != 0 && access&mr.LocalWrite == 0 {
		return nil, fail(errInval, "pvrdma_cmd_create_mr.access_flags=%#x: remote write or atomic without LOCAL_WRITE", access)
	}
	m := &mr.Region{PD: pdh, Ctx: pd.ctx, Access: access}
	switch flags {
	case abi.MRFlagDMA:
		if pd.ctx != 0 {
			return nil, fail(errPerm, "pvrdma_cmd_create_mr.flags=DMA on PD %d of a user context", pdh)
		}
		if access != mr.LocalWrite {
			return nil, fail(errInval, "pvrdma_cmd_create_mr.access_flags=%#x: a DMA MR takes LOCAL_WRITE only", access)
		}
		m.DMA, m.Valid = true, true
	case abi.MRFlagFRMR:
		if nchunks == 0 || nchunks > maxFRMRPages {
			return nil, fail(errInval, "pvrdma_cmd_create_mr.nchunks=%d: a fast-register MR takes 1..%d pages", nchunks, maxFRMRPages)
		}
		m.FRMR, m.MaxPages = true, nchunks
	case 0:
		if length == 0 || length > d.caps.MaxMRSize {
			return nil, fail(errInval, "pvrdma_cmd_create_mr.length=%#x: not 1..%#x", length, d.caps.MaxMRSize)
		}
		end, ok := dma.End(start, length)
		if !ok {
			return nil, fail(errInval, "pvrdma_cmd_create_mr.start=%#x + length=%#x: overflows", start, length)
		}
		want := (end+dma.PageSize-1)/dma.PageSize - start/dma.PageSize
		if uint64(nchunks) != want {
			return nil, fail(errInval, "pvrdma_cmd_create_mr.nchunks=%d: [start=%#x, +length=%#x) spans %d pages", nchunks, start, length, want).as(FindingPageDir)
		}
		pages, e := d.pinPages("MR", pdir, nchunks)
		if e != nil {
			return nil, e
		}
		m.Pages, m.Start, m.Length, m.Valid = pages, start, length, true
	default:
		return nil, fail(errInval, "pvrdma_cmd_create_mr.flags=%#x: not 0, DMA or FRMR", flags)
	}
	h, e := d.res.mr.add(m)
	if e != nil {
		d.res.unpin(len(m.Pages))
		return nil, e
	}
	m.LKey = d.res.newMRKey(h)
	m.RKey = m.LKey
	m.Gen = d.res.newMRGen()
	pd.refs++
	return &abi.CmdCreateMRResp{MRHandle: h, LKey: m.LKey, RKey: m.RKey}, nil
}

func (d *Device) cmdDestroyMR(req *abi.CmdDestroyMR) (abi.Response, *cmdErr) {
	h := req.MRHandle
	m := d.res.mr.get(h)
	if m == nil {
		return nil, fail(errInval, "mr_handle=%d: no such MR", h).as(FindingHandle)
	}
	d.destroyMR(h, m)
	return nil, nil
}

// destroyMR frees MR h. Work in flight that still refers to it fails on
// its next use (its mr.Ref no longer resolves): nothing touches the
// region's pages after this returns.
func (d *Device) destroyMR(h uint32, m *mr.Region) {
	d.revokeLoans()
	d.res.mrVariants[h] = mr.Variant(m.LKey) // a fast-register may have changed it
	d.res.unpin(len(m.Pages))
	if pd := d.res.pd.get(m.PD); pd != nil {
		pd.refs--
	}
	d.res.mr.del(h)
}
