package mlx5

import (
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
)

// srq is a shared receive queue (spec §6.6): an RMP (a basic SRQ,
// CREATE_RMP) or an XRC SRQ (CREATE_XRC_SRQ), in one number space as the
// driver's SRQ table keeps them, kept for the receive WQE consumption of
// Stage 3: a linked list of 1<<logSize WQEs of 1<<logStride bytes at
// byte pageOffset of the pages in pas, and its doorbell record. An XRC
// SRQ also has its XRC domain, the CQ its completions go to and its user
// index (the CQEs' with cqe_version 1).
type srq struct {
	xrc        bool
	pd         uint32
	xrcd, cqn  uint32 // XRC SRQs only
	userIndex  uint32 // XRC SRQs only
	logSize    uint8
	logStride  uint8 // log2 of the WQE's bytes
	lwm        uint32
	dbr        uint64
	pageShift  uint8
	pageOffset uint64
	pas        []uint64
	// refs counts the QPs whose srqn_rmpn_xrqn names it.
	refs int
	// st is the consumption of its linked list (srqrecv.go).
	st srqState
}

// maxLogRQWQE is log2 of the largest receive WQE (max_wqe_sz_rq).
func maxLogRQWQE() uint32 {
	n := uint32(0)
	for 1<<(n+1) <= capMax(ifc.CmdHCACapMaxWQESzRQ) {
		n++
	}
	return n
}

// createRMP: CREATE_RMP (a basic SRQ with ISSI 1). The rmp context: state
// RDY, a linked-list wq in an existing PD, WQEs of 16 to max_wqe_sz_rq
// bytes, at most 1<<log_max_srq_sz of them, the doorbell record, the page
// size and offset, and the PAS covering the WQEs.
func (d *Device) createRMP(in, out []byte) result {
	const op = ifc.OpCreateRMP
	rmpc := ifc.CreateRMPInCtx.Bytes(in)
	wq := func(f ifc.Field) uint32 { return ifc.RMPWQ(f).Get(rmpc) }
	stride, size, lps := wq(ifc.WQLogStride), wq(ifc.WQLogSz), wq(ifc.WQLogPgSz)
	switch {
	case ifc.RMPCState.Get(rmpc) != ifc.RMPStateRDY:
		return d.badField(op, "create_rmp_in.ctx.state=%d: RDY (1) only", ifc.RMPCState.Get(rmpc))
	case wq(ifc.WQType) != ifc.WQTypeLinkedList:
		return d.badField(op, "create_rmp_in.ctx.wq.wq_type=%d: linked list (0) only", wq(ifc.WQType))
	case stride < 4 || stride > maxLogRQWQE():
		return d.badField(op, "create_rmp_in.ctx.wq.log_wq_stride=%d: WQEs of 16 to max_wqe_sz_rq=%d bytes", stride, capMax(ifc.CmdHCACapMaxWQESzRQ))
	case size > capMax(ifc.CmdHCACapLogMaxSRQSz):
		return d.badField(op, "create_rmp_in.ctx.wq.log_wq_sz=%d > log_max_srq_sz=%d", size, capMax(ifc.CmdHCACapLogMaxSRQSz))
	case lps > maxLogPageSize:
		return d.badField(op, "create_rmp_in.ctx.wq.log_wq_pg_sz=%d > %d", lps, maxLogPageSize)
	}
	s := &srq{pd: wq(ifc.WQPD), logSize: uint8(size), logStride: uint8(stride), lwm: wq(ifc.WQLWM),
		dbr: ifc.RMPWQ(ifc.WQDBRAddr).Get64(rmpc), pageShift: uint8(ifc.AdapterPageShift + lps)}
	s.pageOffset = uint64(wq(ifc.WQPageOffset)) << (s.pageShift - 6)
	return d.addSRQ(op, "create_rmp_in", "create_rmp_in.ctx.wq", in, out, s)
}

// createXRCSRQ: CREATE_XRC_SRQ. The XRC SRQ context: an existing XRC
// domain, CQ and PD, WQEs of 16 to max_wqe_sz_rq bytes, at most
// 1<<log_max_srq_sz of them, the user index, the doorbell record, the
// page size and offset, and the PAS covering the WQEs.
func (d *Device) createXRCSRQ(in, out []byte) result {
	const op = ifc.OpCreateXRCSRQ
	ctx := ifc.CreateXRCSRQInCtx.Bytes(in)
	stride := ifc.XRCSRQCLogRQStride.Get(ctx) + 4
	size, lps := ifc.XRCSRQCLogSize.Get(ctx), ifc.XRCSRQCLogPageSize.Get(ctx)
	switch {
	case stride > maxLogRQWQE():
		return d.badField(op, "create_xrc_srq_in.xrc_srq_context_entry.log_rq_stride=%d: WQEs of 16 to max_wqe_sz_rq=%d bytes", stride-4, capMax(ifc.CmdHCACapMaxWQESzRQ))
	case size > capMax(ifc.CmdHCACapLogMaxSRQSz):
		return d.badField(op, "create_xrc_srq_in.xrc_srq_context_entry.log_xrc_srq_size=%d > log_max_srq_sz=%d", size, capMax(ifc.CmdHCACapLogMaxSRQSz))
	case lps > maxLogPageSize:
		return d.badField(op, "create_xrc_srq_in.xrc_srq_context_entry.log_page_size=%d > %d", lps, maxLogPageSize)
	}
	s := &srq{xrc: true, pd: ifc.XRCSRQCPD.Get(ctx), xrcd: ifc.XRCSRQCXRCD.Get(ctx), cqn: ifc.XRCSRQCCQN.Get(ctx),
		userIndex: ifc.XRCSRQCUserIndex.Get(ctx), logSize: uint8(size), logStride: uint8(stride), lwm: ifc.XRCSRQCLWM.Get(ctx),
		dbr: uint64(ifc.XRCSRQCDBRAddrH.Get(ctx))<<32 | uint64(ifc.XRCSRQCDBRAddrL.Get(ctx)&^3), pageShift: uint8(ifc.AdapterPageShift + lps)}
	s.pageOffset = uint64(ifc.XRCSRQCPageOffset.Get(ctx)) << (s.pageShift - 6)
	if d.fn.obj.xrcds.Get(s.xrcd) == nil {
		return d.badRef(op, "create_xrc_srq_in.xrc_srq_context_entry.xrcd", s.xrcd, "XRCD")
	}
	if d.fn.obj.cqs.Get(s.cqn) == nil {
		return d.badRef(op, "create_xrc_srq_in.xrc_srq_context_entry.cqn", s.cqn, "CQ")
	}
	return d.addSRQ(op, "create_xrc_srq_in", "create_xrc_srq_in.xrc_srq_context_entry", in, out, s)
}

// addSRQ does what both SRQ kinds share: the PD, the doorbell record, the
// PAS, a number, the references.
func (d *Device) addSRQ(op ifc.Opcode, st, ctx string, in, out []byte, s *srq) result {
	p := d.fn.obj.pds.Get(s.pd)
	if p == nil {
		return d.badRef(op, ctx+".pd", s.pd, "PD")
	}
	dbrField := ctx + ".dbr_addr"
	if s.xrc {
		dbrField = ctx + ".db_record_addr"
	}
	if r := d.checkDBR(op, dbrField, s.dbr, 4, 4); r != ok {
		return r
	}
	pas, r := d.readPAS(op, in, pasList{st: st, at: ifc.PASOffset, shift: s.pageShift, off: s.pageOffset,
		n: uint64(1) << (s.logSize + s.logStride), synd: SyndPAS, lenSynd: SyndPASLen})
	if r != ok {
		return r
	}
	s.pas = pas
	h, r := add(d, &d.fn.obj.srqs, s, op)
	if r != ok {
		d.fn.pins.Unpin(len(pas))
		return r
	}
	p.refs++
	if s.xrc {
		d.fn.obj.xrcds.Get(s.xrcd).refs++
		d.fn.obj.cqs.Get(s.cqn).refs++
	}
	ifc.ObjOut.Set(out, h)
	return ok
}

// destroyRMP: DESTROY_RMP; destroyXRCSRQ: DESTROY_XRC_SRQ. Each destroys
// its own kind, when no QP names it.
func (d *Device) destroyRMP(in, _ []byte) result {
	return d.destroySRQ(ifc.OpDestroyRMP, "destroy_rmp_in.rmpn", false, ifc.ObjIn.Get(in))
}

func (d *Device) destroyXRCSRQ(in, _ []byte) result {
	return d.destroySRQ(ifc.OpDestroyXRCSRQ, "destroy_xrc_srq_in.xrc_srqn", true, ifc.ObjIn.Get(in))
}

func (d *Device) destroySRQ(op ifc.Opcode, field string, xrc bool, h uint32) result {
	s := d.fn.obj.srqs.Get(h)
	what := "RMP"
	if xrc {
		what = "XRC SRQ"
	}
	if s == nil || s.xrc != xrc {
		return d.unknown(op, field, h, what)
	}
	if r := d.destroyable(op, field, h, true, s.refs, what, "QPs"); r != ok {
		return r
	}
	if p := d.fn.obj.pds.Get(s.pd); p != nil {
		p.refs--
	}
	if s.xrc {
		if x := d.fn.obj.xrcds.Get(s.xrcd); x != nil {
			x.refs--
		}
		if c := d.fn.obj.cqs.Get(s.cqn); c != nil {
			c.refs--
		}
	}
	d.fn.pins.Unpin(len(s.pas))
	d.fn.obj.srqs.Del(h)
	return ok
}
