package mlx5

import (
	doorbell "github.com/hcaemu/hcaemu/doorbell/mlx5"
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// SyndCQOutstanding: a resize to fewer entries than the CQEs not yet
// consumed (with BAD_SIZE_OUTS_CQES).
const SyndCQOutstanding = syndBase | 0x00a0

// modifyCQ: MODIFY_CQ with op_mod RESIZE (spec §6.5; mlx5_ib_resize_cq,
// kernel and user CQs alike). The new ring (log_cq_size, cqe_sz,
// log_page_size, page_offset and its pas[]) is checked as CREATE_CQ
// checks one. The device then writes a RESIZE CQE at its producer
// counter P in the old ring and goes on at P+1 in the new one, the
// counter unbroken: software copies its unconsumed CQEs (counter i to
// slot i+1 of the new ring) up to the RESIZE CQE (ib/cq.c:
// copy_resize_cqes, the provider's mlx5_cq_resize_copy_cqes). A resize
// that cannot hold the CQEs not yet consumed (P - CI of the doorbell
// record) fails with BAD_SIZE_OUTS_CQES and leaves the CQ as it was; so
// does one whose old ring has no room left for the RESIZE CQE. The EQ,
// UAR, doorbell record and arming stay.
func (d *Device) modifyCQ(in, _ []byte) result {
	const op = ifc.OpModifyCQ
	h := ifc.ObjIn.Get(in)
	c := d.fn.obj.cqs.Get(h)
	if c == nil {
		return d.unknown(op, "modify_cq_in.cqn", h, "CQ")
	}
	if opMod := ifc.MboxInOpMod.Get(in); opMod != ifc.CQOpModResize {
		return d.badField(op, "modify_cq_in.op_mod=%d: resize (1) only (cq_moderation=0)", opMod)
	}
	const resize = ifc.ModifyCQMaskLogSize | ifc.ModifyCQMaskPgOffset | ifc.ModifyCQMaskPgSize
	if sel := ifc.ModifyCQInFieldSelect.Get(in); sel != resize {
		return d.badField(op, "modify_cq_in.resize_field_select=%#x: log_size, page_offset and page_size (%#x)", sel, resize)
	}
	ring, r := d.readCQRing(op, "modify_cq_in", in, ifc.ModifyCQInCQC.Bytes(in))
	if r != ok {
		return r
	}
	var rec [doorbell.RecordSize]byte
	if err := d.readGuest(rec[:], c.dbr); err != nil {
		d.fn.pins.Unpin(len(ring.pas))
		return d.refuse(ifc.StatBadResStateErr, SyndDBR, hca.FindingDoorbell, op, "cq %#x: doorbell record at %#x unreadable: %v", h, c.dbr, err)
	}
	outstanding := (c.pi - doorbell.DecodeCQRecord(rec[:]).CI) & 0xffffff
	if outstanding > 1<<ring.logSize || outstanding >= 1<<c.logSize {
		// Not a driver mistake: the verb's caller asked (pyverbs
		// test_resize_cq does, on purpose).
		d.log.Debug("MODIFY_CQ: resize refused", "cqn", h, "log_cq_size", ring.logSize, "not_consumed", outstanding, "entries", 1<<c.logSize)
		d.fn.pins.Unpin(len(ring.pas))
		return result{ifc.StatBadSizeOutsCQEs, SyndCQOutstanding}
	}
	// The RESIZE CQE, op_own last, in the old ring at P.
	var b [uverbs.CQESize64]byte
	geo := uverbs.CQ{LogSize: c.logSize, CQESize: int(c.cqeSize)}
	b[uverbs.OpOwnOffset] = uverbs.CQEResizeCQ<<4 | geo.Owner(c.pi)
	off := geo.Offset(c.pi) // the 64-byte structure, last in a 128-byte CQE
	if d.writeBuf(c.pas, c.pageShift, c.pageOffset, off, b[:uverbs.OpOwnOffset]) != nil ||
		d.writeBuf(c.pas, c.pageShift, c.pageOffset, off+uverbs.OpOwnOffset, b[uverbs.OpOwnOffset:]) != nil {
		d.fn.pins.Unpin(len(ring.pas))
		return d.refuse(ifc.StatBadResStateErr, SyndPAS, hca.FindingPageDir, op, "cq %#x: the old ring is not writable for the RESIZE CQE", h)
	}
	d.fn.pins.Unpin(len(c.pas))
	c.cqRing = ring
	c.pi++
	return ok
}
