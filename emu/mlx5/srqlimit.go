package mlx5

import (
	"encoding/binary"

	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
)

// An SRQ's limit (spec §6.6): MODIFY_RMP arms it (wq.lwm, mlx5_ib's
// arm_rmp_cmd for ibv_modify_srq's IBV_SRQ_LIMIT), QUERY_RMP reads it
// back (ibv_query_srq's srq_limit), and the consumption that leaves
// fewer WQEs posted than the limit posts SRQ_RQ_LIMIT to the async EQ
// and disarms it (the limit reads 0 again), as IBTA 10.2.9.4 has it.

// eqeTypeQP and eqeTypeSRQ are a queue's type in a QP or SRQ event (struct
// mlx5_eqe_qp_srq: MLX5_EVENT_QUEUE_TYPE_QP 0, _RQ 1 for an SRQ's).
const (
	eqeTypeQP  = 0
	eqeTypeSRQ = 1
)

// asyncEvent posts an event of type typ naming queue n of queue type
// qtype to the EQ that asked for events of its type (the lowest
// numbered), if any.
func (d *Device) asyncEvent(typ, qtype uint8, n uint32) {
	for i := range 1 << LogMaxEQ {
		e := d.fn.eqs[uint8(i)]
		if e == nil || e.mask[typ/64]&(1<<(typ%64)) == 0 {
			continue
		}
		var eqe [ifc.EQESize]byte
		eqe[ifc.EQEType] = typ
		eqe[eqeQPType] = qtype
		binary.BigEndian.PutUint32(eqe[eqeQPNumber:], n&0xffffff)
		d.postEQE(e, &eqe)
		return
	}
}

// rmp is the RMP a MODIFY_RMP or QUERY_RMP names (an XRC SRQ is not one).
func (d *Device) rmp(op ifc.Opcode, field string, in []byte) (*srq, uint32, result) {
	h := ifc.ObjIn.Get(in)
	s := d.fn.obj.srqs.Get(h)
	if s == nil || s.xrc {
		return nil, h, d.unknown(op, field, h, "RMP")
	}
	return s, h, ok
}

// modifyRMP: MODIFY_RMP of an RMP in RDY that stays RDY, changing its
// limit (bitmask.lwm) and nothing else; the limit at most the RMP's
// WQEs.
func (d *Device) modifyRMP(in, _ []byte) result {
	const op = ifc.OpModifyRMP
	s, _, r := d.rmp(op, "modify_rmp_in.rmpn", in)
	if r != ok {
		return r
	}
	rmpc := ifc.ModifyRMPInCtx.Bytes(in)
	lwm := ifc.RMPWQ(ifc.WQLWM).Get(rmpc)
	switch {
	case ifc.ModifyRMPInRMPState.Get(in) != ifc.RMPStateRDY || ifc.RMPCState.Get(rmpc) != ifc.RMPStateRDY:
		return d.badField(op, "modify_rmp_in.rmp_state=%d, ctx.state=%d: RDY (1) to RDY only", ifc.ModifyRMPInRMPState.Get(in), ifc.RMPCState.Get(rmpc))
	case ifc.ModifyRMPInBitmaskLWM.Get(in) == 0:
		return ok // nothing to change
	case lwm > 1<<s.logSize:
		return d.badField(op, "modify_rmp_in.ctx.wq.lwm=%d > the RMP's %d WQEs", lwm, 1<<s.logSize)
	}
	s.lwm = lwm
	return ok
}

// queryRMP: QUERY_RMP: the rmpc as CREATE_RMP made it (state RDY, a
// linked list), with the limit now armed (0 once it fired).
func (d *Device) queryRMP(in, out []byte) result {
	s, _, r := d.rmp(ifc.OpQueryRMP, "query_rmp_in.rmpn", in)
	if r != ok {
		return r
	}
	rmpc := ifc.QueryRMPOutCtx.Bytes(out)
	wq := func(f ifc.Field, v uint32) { ifc.RMPWQ(f).Set(rmpc, v) }
	ifc.RMPCState.Set(rmpc, ifc.RMPStateRDY)
	wq(ifc.WQType, ifc.WQTypeLinkedList)
	wq(ifc.WQLWM, s.lwm)
	wq(ifc.WQPD, s.pd)
	ifc.RMPWQ(ifc.WQDBRAddr).Set64(rmpc, s.dbr)
	wq(ifc.WQLogStride, uint32(s.logStride))
	wq(ifc.WQLogPgSz, uint32(s.pageShift-ifc.AdapterPageShift))
	wq(ifc.WQLogSz, uint32(s.logSize))
	wq(ifc.WQPageOffset, uint32(s.pageOffset>>(s.pageShift-6)))
	return ok
}

// srqConsumed checks an armed RMP's limit after one of its WQEs was
// consumed: fewer posted than the limit posts SRQ_RQ_LIMIT and disarms.
func (d *Device) srqConsumed(s *srq, n uint32) {
	if s.lwm == 0 || s.xrc {
		return
	}
	var rec [4]byte
	if err := d.readGuest(rec[:], s.dbr); err != nil {
		return
	}
	posted := uint16(binary.BigEndian.Uint32(rec[:]))
	if left := uint32(uint16(posted - s.st.consumed)); left < s.lwm {
		s.lwm = 0
		d.asyncEvent(ifc.EventSRQRQLimit, eqeTypeSRQ, n)
	}
}
