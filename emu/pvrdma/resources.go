package pvrdma

import (
	"errors"
	"net/netip"

	"github.com/hcaemu/hcaemu/dma"
	pagedir "github.com/hcaemu/hcaemu/dma/pvrdma"
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
)

// table is a handle table of the core (hca.Table), its errors answered as
// the PVRDMA driver reads them (ERR: ENOMEM, EINVAL, EBUSY).
type table[T any] struct{ hca.Table[T] }

func newTable[T any](name string, first, limit uint32) table[T] {
	return table[T]{hca.NewTable[T](name, first, limit)}
}

func (t *table[T]) get(h uint32) *T { return t.Get(h) }

func (t *table[T]) add(v *T) (uint32, *cmdErr) {
	h, err := t.Add(v)
	if err != nil {
		return 0, fail(errNoMem, "%v", err)
	}
	return h, nil
}

// put installs v at a chosen handle (the GSI QP).
func (t *table[T]) put(h uint32, v *T) *cmdErr {
	switch err := t.Put(h, v); {
	case errors.Is(err, hca.ErrHandleRange):
		return fail(errInval, "%v", err).as(hca.FindingHandle)
	case err != nil:
		return fail(errBusy, "%v", err).as(hca.FindingHandle)
	}
	return nil
}

func (t *table[T]) del(h uint32) { t.Del(h) }

// handles lists live handles in ascending order.
func (t *table[T]) handles() []uint32 { return t.Handles() }

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

	pins hca.PinBudget // page-list entries held by all objects
	// mrKeys hands out MR keys and registration generations (never reset:
	// a key kept past a reset does not name a later registration).
	mrKeys hca.MRKeys
}

func (r *resources) init(c *abi.DeviceCaps) {
	r.uc = newTable[ucontext]("context", 1, c.MaxUAR)
	r.pd = newTable[pd]("PD", 1, min(c.MaxPD+1, 1<<24))
	r.mr = newTable[mr.Region]("MR", 1, min(c.MaxMR+1, 1<<24))
	r.cq = newTable[cq]("CQ", 1, c.MaxCQ)
	r.qp = newTable[qp]("QP", 1, min(c.MaxQP, 1<<16))
	r.qp.Reserved = 1 // QPN 1 is the GSI QP's
	r.srq = newTable[srq]("SRQ", 1, c.MaxSRQ)
	r.gids = make([]GIDEntry, c.GIDTblLen)
	r.pins.Reset()
}

// newMRKey is the key of a new registration of MR handle h (hca.MRKeys).
func (r *resources) newMRKey(h uint32) uint32 { return r.mrKeys.NewKey(h) }

// newMRGen is the generation of a new registration.
func (r *resources) newMRGen() uint64 { return r.mrKeys.NewGen() }

func (r *resources) count() int {
	return r.uc.Len() + r.pd.Len() + r.mr.Len() + r.cq.Len() + r.qp.Len() + r.srq.Len()
}

func (r *resources) pin(n uint32) *cmdErr {
	if err := r.pins.Pin(n); err != nil {
		return fail(errNoMem, "%v", err)
	}
	return nil
}

func (r *resources) unpin(n int) { r.pins.Unpin(n) }

// pinPages reads the page list of a new object (n pages from the directory
// at pdir, read once and kept) and counts it against the page budget.
func (d *Device) pinPages(what string, pdir uint64, n uint32) (dma.Pages, *cmdErr) {
	if e := d.res.pin(n); e != nil {
		return nil, e
	}
	pages, err := pagedir.Read(d.mem, pdir, n, pagedir.MaxDirPages)
	if err != nil {
		d.res.unpin(int(n))
		return nil, fail(errInval, "%s pdir_dma=%#x (%d pages): %v", what, pdir, n, err).as(hca.FindingPageDir)
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
		return fail(errInval, "ctx_handle=%d: no such context", ctx).as(hca.FindingHandle)
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
		return nil, fail(errInval, "pd_handle=%d: no such PD", h).as(hca.FindingHandle)
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
		return nil, fail(errInval, "pd_handle=%d: no such PD", pdh).as(hca.FindingHandle)
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
			return nil, fail(errInval, "pvrdma_cmd_create_mr.nchunks=%d: [start=%#x, +length=%#x) spans %d pages", nchunks, start, length, want).as(hca.FindingPageDir)
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
		return nil, fail(errInval, "mr_handle=%d: no such MR", h).as(hca.FindingHandle)
	}
	d.destroyMR(h, m)
	return nil, nil
}

// destroyMR frees MR h. Work in flight that still refers to it fails on
// its next use (its mr.Ref no longer resolves): nothing touches the
// region's pages after this returns.
func (d *Device) destroyMR(h uint32, m *mr.Region) {
	d.revokeLoans()
	d.res.mrKeys.Ended(h, mr.Variant(m.LKey)) // a fast-register may have changed it
	d.res.unpin(len(m.Pages))
	if pd := d.res.pd.get(m.PD); pd != nil {
		pd.refs--
	}
	d.res.mr.del(h)
}
