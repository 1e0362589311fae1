package mlx5

import (
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/mr"
)

// The verbs objects of the function (spec §6): protection domains, XRC
// domains, memory keys, CQs, QPs and SRQs (RMPs and XRC SRQs, one number
// space as the driver's SRQ table has it), each in a handle table of the
// core (hca.Table) bounded by the capability the device reports
// (log_max_pd, log_max_qp as SET_HCA_CAP left it, ...). Memory keys are
// mr.Regions, their page lists counted in the function's hca.PinBudget
// with every other object's; QPs embed hca.QP with a QPN from hca.QPNs.
// An object counts who names it (refs), and a destroy of an object still
// named fails with RES_BUSY.

// Syndromes of the verbs commands' failures (see dispatch.go): one per
// cause, whatever the object.
const (
	SyndUnknown   = syndBase | 0x0070 // the object the command names does not exist
	SyndBusy      = syndBase | 0x0071 // destroy of an object another still names
	SyndTableFull = syndBase | 0x0072 // every handle of the object's table in use
	SyndContext   = syndBase | 0x0073 // a context field out of range or not implemented
	SyndRef       = syndBase | 0x0074 // a context names an object that does not exist
	SyndPAS       = syndBase | 0x0075 // a PAS or MTT entry misaligned or outside guest memory
	SyndPASLen    = syndBase | 0x0076 // inlen too short for the PAS or MTT the object needs
	SyndDBR       = syndBase | 0x0077 // a doorbell record misaligned or outside guest memory
	SyndPinBudget = syndBase | 0x0078 // the device's page-list budget is spent
	SyndQPState   = syndBase | 0x0079 // a transition from a state it does not leave
	SyndOptParam  = syndBase | 0x007a // opt_param_mask bits the transition does not take
	SyndVport     = syndBase | 0x007b // another vport or port
)

// objects are the function's verbs objects (from INIT_HCA; TEARDOWN_HCA
// and DISABLE_HCA forget them).
type objects struct {
	pds   hca.Table[refd]
	xrcds hca.Table[refd]
	mkeys hca.Table[mr.Region]
	// umrEn are the mkeys created with umr_en (UMR WQEs may change them,
	// umr.go), by index.
	umrEn map[uint32]bool
	cqs   hca.Table[cq]
	qps   hca.Table[qp]
	srqs  hca.Table[srq]
	// qpnBits is how many low bits of a QPN are its handle.
	qpnBits uint
}

// FirstMkey is the first mkey index the device hands out: index 1 with
// variant 0 would be lkey 0x100, the receive scatter list's terminator
// (spec §12 risk 10).
const FirstMkey = 16

// firstQP is the first QP handle: QPNs 0 and 1 are the wire's names of
// QP0 and QP1, never hardware QPNs (spec §6.7.1).
const firstQP = 2

// newObjects makes the tables with the limits the capabilities report.
func (d *Device) newObjects() objects {
	logMaxQP := capMax(ifc.CmdHCACapLogMaxQP)
	if d.fn.cur.general {
		logMaxQP = min(logMaxQP, d.fn.cur.logMaxQP)
	}
	qpLimit := uint32(1) << min(logMaxQP, 16)
	mkeyLimit := uint32(1) << min(capMax(ifc.CmdHCACapLogMaxMkey), 24)
	if d.mkeys > 0 {
		mkeyLimit = min(mkeyLimit, FirstMkey+uint32(d.mkeys))
	}
	return objects{
		pds:     hca.NewTable[refd]("PD", 1, 1<<min(capMax(ifc.CmdHCACapLogMaxPD), 24)),
		xrcds:   hca.NewTable[refd]("XRCD", 1, 1<<min(capMax(ifc.CmdHCACapLogMaxXRCD), 24)),
		mkeys:   hca.NewTable[mr.Region]("mkey", FirstMkey, mkeyLimit),
		cqs:     hca.NewTable[cq]("CQ", 1, 1<<min(capMax(ifc.CmdHCACapLogMaxCQ), 24)),
		qps:     hca.NewTable[qp]("QP", firstQP, max(qpLimit, 4)),
		srqs:    hca.NewTable[srq]("SRQ", 1, 1<<min(capMax(ifc.CmdHCACapLogMaxSRQ), capMax(ifc.CmdHCACapLogMaxRMP), 24)),
		qpnBits: hca.HandleBits(max(qpLimit, 4)),
	}
}

// capMax is the MAX value of a general capability the device reports.
func capMax(f ifc.Field) uint32 {
	for _, c := range generalCaps {
		if c.f == f {
			return c.v
		}
	}
	return 0
}

// count is how many verbs objects exist.
func (o *objects) count() int {
	if o.pds.Limit() == 0 {
		return 0
	}
	return o.pds.Len() + o.xrcds.Len() + o.mkeys.Len() + o.cqs.Len() + o.qps.Len() + o.srqs.Len()
}

// add installs v in t, or refuses with LIM_ERR when the table is full.
func add[T any](d *Device, t *hca.Table[T], v *T, op ifc.Opcode) (uint32, result) {
	h, err := t.Add(v)
	if err != nil {
		return 0, d.refuse(ifc.StatLimErr, SyndTableFull, hca.FindingCommand, op, "%v", err)
	}
	return h, ok
}

// unknown refuses a command naming an object that does not exist.
func (d *Device) unknown(op ifc.Opcode, field string, v uint32, what string) result {
	return d.refuse(ifc.StatBadResErr, SyndUnknown, hca.FindingHandle, op, "%s=%#x: no such %s", field, v, what)
}

// busy refuses the destroy of an object others still name.
func (d *Device) busy(op ifc.Opcode, field string, v uint32, refs int, by string) result {
	return d.refuse(ifc.StatResBusy, SyndBusy, hca.FindingHandle, op, "%s=%#x: still named by %d %s", field, v, refs, by)
}

// badRef refuses a context that names an object that does not exist.
func (d *Device) badRef(op ifc.Opcode, field string, v uint32, what string) result {
	return d.refuse(ifc.StatBadParamErr, SyndRef, hca.FindingHandle, op, "%s=%#x: no such %s", field, v, what)
}

// badField refuses a context field out of range.
func (d *Device) badField(op ifc.Opcode, format string, args ...any) result {
	return d.refuse(ifc.StatBadParamErr, SyndContext, hca.FindingCommand, op, format, args...)
}

// --- PD, XRCD ----------------------------------------------------------------

// refd is a protection or XRC domain: what names it counts in refs (a
// PD's mkeys, QPs and SRQs; an XRCD's QPs and XRC SRQs).
type refd struct{ refs int }

// destroyable checks a destroy of the object a command names: it exists
// (else BAD_RES) and nothing names it (else RES_BUSY).
func (d *Device) destroyable(op ifc.Opcode, field string, h uint32, exists bool, refs int, what, by string) result {
	switch {
	case !exists:
		return d.unknown(op, field, h, what)
	case refs > 0:
		return d.busy(op, field, h, refs, by)
	}
	return ok
}

// allocPD: ALLOC_PD (spec §6.3); allocXRCD: ALLOC_XRCD (spec §6.8; two
// at mlx5_ib's load).
func (d *Device) allocPD(_, out []byte) result { return d.allocRefd(ifc.OpAllocPD, &d.fn.obj.pds, out) }
func (d *Device) allocXRCD(_, out []byte) result {
	return d.allocRefd(ifc.OpAllocXRCD, &d.fn.obj.xrcds, out)
}

func (d *Device) allocRefd(op ifc.Opcode, t *hca.Table[refd], out []byte) result {
	h, r := add(d, t, &refd{}, op)
	if r == ok {
		ifc.ObjOut.Set(out, h)
	}
	return r
}

// deallocPD: DEALLOC_PD of a PD nothing is in; deallocXRCD: DEALLOC_XRCD
// of an XRCD no QP or XRC SRQ is in.
func (d *Device) deallocPD(in, _ []byte) result {
	return d.deallocRefd(ifc.OpDeallocPD, "dealloc_pd_in.pd", "PD", "mkeys, QPs or SRQs", &d.fn.obj.pds, in)
}

func (d *Device) deallocXRCD(in, _ []byte) result {
	return d.deallocRefd(ifc.OpDeallocXRCD, "dealloc_xrcd_in.xrcd", "XRCD", "QPs or XRC SRQs", &d.fn.obj.xrcds, in)
}

func (d *Device) deallocRefd(op ifc.Opcode, field, what, by string, t *hca.Table[refd], in []byte) result {
	h := ifc.ObjIn.Get(in)
	x := t.Get(h)
	var refs int
	if x != nil {
		refs = x.refs
	}
	if r := d.destroyable(op, field, h, x != nil, refs, what, by); r != ok {
		return r
	}
	t.Del(h)
	return ok
}

// --- Memory keys -------------------------------------------------------------

// An MTT's log_page_size (absolute) is 4 KiB to 1 GiB; an MTT mkey is at
// most 64 TiB long (its MTT still has to fit a command: readPAS).
const (
	minLogMTTPage = 12
	maxLogMTTPage = 30
	maxMkeyLen    = 1 << 46
)

// createMkey: CREATE_MKEY (spec §6.4). The mkey context: access mode PA
// (the kernel's DMA MR: length64, every address its own), MTT (a user
// MR: start, length, page size and the MTT entries after the context,
// read once and kept as the region's page list), or KLM for a memory
// window (free until a UMR WQE binds it: Stage 5); the access flags (lr
// always), the PD. The key is the index the device assigns and the
// driver's variant (mkey_7_0), on all 32 bits.
func (d *Device) createMkey(in, out []byte) result {
	const op = ifc.OpCreateMkey
	mkc := ifc.CreateMkeyInMkc.Bytes(in)
	mode := ifc.MkcAccessMode42.Get(mkc)<<2 | ifc.MkcAccessMode10.Get(mkc)
	free := ifc.MkcFree.Get(mkc) != 0
	pdn := ifc.MkcPD.Get(mkc)
	p := d.fn.obj.pds.Get(pdn)
	if p == nil {
		return d.badRef(op, "create_mkey_in.memory_key_mkey_entry.pd", pdn, "PD")
	}
	if ifc.CreateMkeyInPgAccess.Get(in) != 0 {
		return d.badField(op, "create_mkey_in.pg_access=1: no on-demand paging (pg=0)")
	}
	if ifc.MkcLR.Get(mkc) == 0 {
		return d.badField(op, "create_mkey_in.memory_key_mkey_entry.lr=0: local read is always granted")
	}
	region := &mr.Region{PD: pdn, Access: mkeyAccess(mkc), Valid: !free}
	start, length := ifc.MkcStartAddr.Get64(mkc), ifc.MkcLen.Get64(mkc)
	switch mode {
	case ifc.MkcAccessModePA:
		if ifc.MkcLength64.Get(mkc) == 0 || start != 0 || free {
			return d.badField(op, "create_mkey_in.memory_key_mkey_entry: access_mode PA with length64=%d start_addr=%#x free=%v: only the whole-memory DMA key (length64=1, start_addr=0)", ifc.MkcLength64.Get(mkc), start, free)
		}
		region.DMA = true
	case ifc.MkcAccessModeMTT:
		if r := d.mkeyMTT(in, mkc, region, start, length); r != ok {
			return r
		}
	case ifc.MkcAccessModeKLM:
		if !free {
			return d.badField(op, "create_mkey_in.memory_key_mkey_entry.access_mode=KLM with free=0: only memory windows (free until bound), indirect mkeys are not implemented")
		}
		region.MaxPages = ifc.MkcTranslationsOctwordSize.Get(mkc)
		region.Window = &mr.Window{Type2: ifc.MkcEnRinval.Get(mkc) != 0, QPN: 0xffffff} // mw.go
	default:
		return d.badField(op, "create_mkey_in.memory_key_mkey_entry.access_mode=%d: PA, MTT or KLM only", mode)
	}
	h, r := add(d, &d.fn.obj.mkeys, region, op)
	if r != ok {
		d.fn.pins.Unpin(len(region.Pages))
		return r
	}
	region.LKey = mr.Key(h, uint8(ifc.MkcMkey70.Get(mkc)))
	region.RKey = region.LKey
	region.Gen = d.mrKeys.NewGen()
	p.refs++
	if ifc.MkcUMREn.Get(mkc) != 0 {
		if d.fn.obj.umrEn == nil {
			d.fn.obj.umrEn = map[uint32]bool{} // bounded by the mkey table
		}
		d.fn.obj.umrEn[h] = true
	}
	ifc.ObjOut.Set(out, h)
	return ok
}

// mkeyAccess is the region's access flags from the mkc's (lr is implied).
func mkeyAccess(mkc []byte) uint32 {
	var a uint32
	for _, f := range []struct {
		bit  ifc.Field
		flag uint32
	}{{ifc.MkcLW, mr.LocalWrite}, {ifc.MkcRW, mr.RemoteWrite}, {ifc.MkcRR, mr.RemoteRead}, {ifc.MkcA, mr.RemoteAtomic}} {
		if f.bit.Get(mkc) != 0 {
			a |= f.flag
		}
	}
	return a
}

// mkeyMTT checks an MTT mkey's range and page size and reads its MTT:
// one entry per page of [start, start+len) from start rounded down to the
// page (spec §6.4's translation), of the translations the driver sent.
// A free MTT mkey (UMR-managed) has no translation yet.
func (d *Device) mkeyMTT(in, mkc []byte, region *mr.Region, start, length uint64) result {
	const op = ifc.OpCreateMkey
	lps := ifc.MkcLogPageSize.Get(mkc)
	octs := ifc.MkcTranslationsOctwordSize.Get(mkc)
	switch {
	case ifc.MkcLength64.Get(mkc) != 0:
		return d.badField(op, "create_mkey_in.memory_key_mkey_entry.length64=1 with access_mode MTT")
	case lps < minLogMTTPage || lps > maxLogMTTPage:
		return d.badField(op, "create_mkey_in.memory_key_mkey_entry.log_page_size=%d: not %d..%d", lps, minLogMTTPage, maxLogMTTPage)
	}
	region.PageShift = uint8(lps)
	if !region.Valid {
		// A free mkey (a kernel fast-register MR, UMR-managed): no range
		// or translation until a UMR WQE gives it one (Stage 5).
		if octs > maxPASPages/2 {
			return d.badField(op, "create_mkey_in.memory_key_mkey_entry.translations_octword_size=%#x: beyond %#x", octs, maxPASPages/2)
		}
		region.MaxPages = 2 * octs
		return ok
	}
	if length == 0 || length > maxMkeyLen {
		return d.badField(op, "create_mkey_in.memory_key_mkey_entry.len=%#x: empty or beyond %#x", length, uint64(maxMkeyLen))
	}
	if _, fits := endOf(start, length); !fits {
		return d.badField(op, "create_mkey_in.memory_key_mkey_entry.start_addr=%#x len=%#x: wraps", start, length)
	}
	region.Start, region.Length = start, length
	off := start & (1<<lps - 1)
	npages := (off + length + 1<<lps - 1) >> lps
	if uint64(2*octs) < npages || uint64(2*ifc.CreateMkeyInTranslationsOctwordActualSize.Get(in)) < npages {
		return d.refuse(ifc.StatBadParamErr, SyndPASLen, hca.FindingPageDir, op, "create_mkey_in: translations_octword_size=%d, translations_octword_actual_size=%d for the %d pages of [%#x, +%#x)", octs, ifc.CreateMkeyInTranslationsOctwordActualSize.Get(in), npages, start, length)
	}
	pages, r := d.readPAS(op, in, pasList{st: "create_mkey_in.klm_pas_mtt", at: ifc.PASOffset, shift: uint8(lps),
		off: off, n: length, mtt: true, synd: SyndPAS, lenSynd: SyndPASLen})
	if r != ok {
		return r
	}
	region.Pages = pages
	return ok
}

// endOf is a+n and whether it does not wrap.
func endOf(a, n uint64) (uint64, bool) { return a + n, a+n >= a }

// destroyMkey: DESTROY_MKEY (mkey_index = key >> 8).
func (d *Device) destroyMkey(in, _ []byte) result {
	h := ifc.ObjIn.Get(in)
	m := d.fn.obj.mkeys.Get(h)
	if m == nil {
		return d.unknown(ifc.OpDestroyMkey, "destroy_mkey_in.mkey_index", h, "mkey")
	}
	d.wire.RevokeLoans()                        // the region's pages may be lent to another HCA
	d.fn.pins.Unpin(len(m.Pages) + len(m.KLMs)) // a UMR may have loaded either (umrexec.go)
	if p := d.fn.obj.pds.Get(m.PD); p != nil {
		p.refs--
	}
	d.fn.obj.mkeys.Del(h)
	delete(d.fn.obj.umrEn, h)
	return ok
}

// Region implements mr.Table (lock held): the mkey of an index (the data
// path checks the whole key against it, mr.Lookup), as pvrdma's
// resources do.
func (o *objects) Region(h uint32) *mr.Region {
	if o.mkeys.Limit() == 0 {
		return nil
	}
	return o.mkeys.Get(h)
}

// --- HCA vport context -------------------------------------------------------

const (
	// SubnetTimeout is PortInfo's SubnetTimeOut (spec §5.4.1).
	SubnetTimeout = 18
	// capMaskSystemImageGUID is PortInfo.CapabilityMask's
	// IsSystemImageGUIDSupported (bit 11).
	capMaskSystemImageGUID = 1 << 11
)

// Port states of the vport context (IB PortInfo numbering).
const (
	portStateActive   = 4
	portPhysStateLink = 5
)

// queryHCAVportContext: QUERY_HCA_VPORT_CONTEXT (spec §5.4.1), issued in
// both port access modes (mlx5_port_immutable reads grh_required): this
// function's own vport on port 1 (port_num 0 when num_ports is 1), ACTIVE
// and LinkUp, an SMI, no GRH required, the GUIDs, LID and SM LID of the
// configuration and the capability mask ib_cm set through PCAP.
func (d *Device) queryHCAVportContext(in, out []byte) result {
	const op = ifc.OpQueryHCAVportContext
	other := ifc.QueryHCAVportContextInOtherVport.Get(in)
	port := ifc.QueryHCAVportContextInPortNum.Get(in)
	vport := ifc.QueryHCAVportContextInVportNumber.Get(in)
	if other != 0 || vport != 0 || port > 1 {
		return d.refuse(ifc.StatBadParamErr, SyndVport, hca.FindingCommand, op, "query_hca_vport_context_in.other_vport=%d port_num=%d vport_number=%d: only this function's vport on port 1", other, port, vport)
	}
	// The context's fields up to sm_sl's word (QueryHCAVportContextOutSize).
	ctx := out[ifc.QueryHCAVportContextOutCtx.ByteOff():]
	ifc.HCAVportHasSMI.Set(ctx, 1)
	ifc.HCAVportGRHRequired.Set(ctx, 0)
	state, phys := d.vportStates() // the SMA's: ACTIVE and LinkUp unless a fault holds the port down
	ifc.HCAVportPortPhysicalState.Set(ctx, phys)
	ifc.HCAVportPortState.Set(ctx, state)
	ifc.HCAVportVportState.Set(ctx, state)
	ifc.HCAVportSystemImageGUID.Set64(ctx, d.port.SystemImageGUID)
	ifc.HCAVportPortGUID.Set64(ctx, d.port.PortGUID)
	ifc.HCAVportNodeGUID.Set64(ctx, d.port.NodeGUID)
	ifc.HCAVportCapMask1.Set(ctx, d.fn.pcap|capMaskSystemImageGUID)
	ifc.HCAVportLID.Set(ctx, uint32(d.port.LID))
	ifc.HCAVportSubnetTimeout.Set(ctx, SubnetTimeout)
	ifc.HCAVportSMLID.Set(ctx, uint32(d.port.MasterSMLID))
	return ok
}
