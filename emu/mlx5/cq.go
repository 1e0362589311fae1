package mlx5

import (
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
)

// cq is a completion queue as CREATE_CQ set it up (spec §6.5), kept for
// the CQE writing of Stage 2: a ring of 1<<logSize CQEs of cqeSize bytes
// at byte pageOffset of the pages in pas, its doorbell record, the UAR
// its arm doorbells name and the EQ its completion events go to.
type cq struct {
	cqn uint32
	cqRing
	oi  bool
	uar uint32
	eqn uint8
	dbr uint64
	// refs counts the QPs (send or receive CQ) and XRC SRQs that name it.
	refs int
	// pi counts the CQEs written; armed (armSol: for a solicited or
	// error CQE) says the next CQE posts a COMP EQE.
	pi            uint32
	armed, armSol bool
	// broken: a cq_error fault posted CQ_ERROR; the CQ takes no more CQEs.
	broken bool
}

// cqRing is a CQ's ring: 1<<logSize CQEs of cqeSize bytes at byte
// pageOffset of the pages in pas.
type cqRing struct {
	logSize    uint8
	cqeSize    uint32 // 64 or 128
	pageShift  uint8
	pageOffset uint64 // bytes
	pas        []uint64
}

// readCQRing checks the ring a cq context describes (log_cq_size within
// log_max_cq_sz, 64- or 128-byte CQEs, no compression, the page size and
// offset) and reads the PAS covering it, which it pins; st names the
// input structure (create_cq_in, modify_cq_in).
func (d *Device) readCQRing(op ifc.Opcode, st string, in, cqc []byte) (cqRing, result) {
	logSize := ifc.CQCLogCQSize.Get(cqc)
	sz := ifc.CQCCQESz.Get(cqc)
	lps := ifc.CQCLogPageSz.Get(cqc)
	switch maxSz := capMax(ifc.CmdHCACapLogMaxCQSz); {
	case logSize > maxSz:
		return cqRing{}, d.badField(op, "%s.cq_context.log_cq_size=%d > log_max_cq_sz=%d", st, logSize, maxSz)
	case sz != ifc.CQESize64 && sz != ifc.CQESize128:
		return cqRing{}, d.badField(op, "%s.cq_context.cqe_sz=%d: 64 (0) or 128 (1) bytes", st, sz)
	case ifc.CQCCQECompEn.Get(cqc) != 0:
		return cqRing{}, d.badField(op, "%s.cq_context.cqe_comp_en=1: no CQE compression (cqe_compression=0)", st)
	case lps > maxLogPageSize:
		return cqRing{}, d.badField(op, "%s.cq_context.log_page_size=%d > %d", st, lps, maxLogPageSize)
	}
	ring := cqRing{logSize: uint8(logSize), cqeSize: uint32(64) << sz, pageShift: uint8(ifc.AdapterPageShift + lps)}
	ring.pageOffset = uint64(ifc.CQCPageOffset.Get(cqc)) << (ring.pageShift - 6)
	pas, r := d.readPAS(op, in, pasList{st: st, at: ifc.PASOffset, shift: ring.pageShift,
		off: ring.pageOffset, n: uint64(ring.cqeSize) << logSize, synd: SyndPAS, lenSynd: SyndPASLen})
	ring.pas = pas
	return ring, r
}

// createCQ: CREATE_CQ. The cq context: its ring (readCQRing), an EQ that
// exists (c_eqn), a UAR the function holds, the doorbell record (8 bytes,
// 8-byte aligned, in guest memory).
func (d *Device) createCQ(in, out []byte) result {
	const op = ifc.OpCreateCQ
	cqc := ifc.CreateCQInCQC.Bytes(in)
	eqn := ifc.CQCCEQN.Get(cqc)
	uar := ifc.CQCUARPage.Get(cqc)
	e := d.fn.eqs[uint8(eqn)]
	if eqn > 0xff || e == nil {
		return d.badRef(op, "create_cq_in.cq_context.c_eqn_or_apu_element", eqn, "EQ")
	}
	if _, held := d.fn.uars[uar]; !held {
		return d.badRef(op, "create_cq_in.cq_context.uar_page", uar, "UAR ALLOC_UAR handed out")
	}
	dbr := ifc.CQCDBRAddr.Get64(cqc)
	if r := d.checkDBR(op, "create_cq_in.cq_context.dbr_addr", dbr, 8, 8); r != ok {
		return r
	}
	ring, r := d.readCQRing(op, "create_cq_in", in, cqc)
	if r != ok {
		return r
	}
	c := &cq{cqRing: ring, oi: ifc.CQCOI.Get(cqc) != 0, uar: uar, eqn: uint8(eqn), dbr: dbr}
	h, r := add(d, &d.fn.obj.cqs, c, op)
	if r != ok {
		d.fn.pins.Unpin(len(ring.pas))
		return r
	}
	c.cqn = h
	e.refs++
	ifc.ObjOut.Set(out, h)
	return ok
}

// destroyCQ: DESTROY_CQ of a CQ no QP or XRC SRQ names.
func (d *Device) destroyCQ(in, _ []byte) result {
	const op = ifc.OpDestroyCQ
	h := ifc.ObjIn.Get(in)
	c := d.fn.obj.cqs.Get(h)
	if c == nil {
		return d.unknown(op, "destroy_cq_in.cqn", h, "CQ")
	}
	if r := d.destroyable(op, "destroy_cq_in.cqn", h, true, c.refs, "CQ", "QPs or XRC SRQs"); r != ok {
		return r
	}
	if e := d.fn.eqs[c.eqn]; e != nil {
		e.refs--
	}
	d.fn.pins.Unpin(len(c.pas))
	d.fn.obj.cqs.Del(h)
	return ok
}
