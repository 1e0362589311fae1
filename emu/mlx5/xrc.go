package mlx5

import (
	"github.com/hcaemu/hcaemu/emu/roce"
)

// XRC QPs (spec §6.8, §7.6): an XRC initiator (st XRC with a send queue)
// sends as an RC requester whose requests carry the XRC SRQ number of
// their WQE's XRC segment in an XRCETH; an XRC target (st XRC, no send
// queue, made by the kernel for ibv_open_qp) answers as an RC responder
// whose receive WQEs come from the XRC SRQ each request's XRCETH names,
// which must be an XRC SRQ of the target's XRC domain. Both are the
// core's RC transport with Config.XRC (the XRC opcodes).

// xrcAccept checks an XRC packet for XRC QP q before its RC transport
// takes it: an initiator takes responses only, a target requests only,
// each naming an XRC SRQ of the target's XRC domain (kept in the env for
// the receive WQE the request may consume, its PD for the R_Keys the
// request names). false: the packet does nothing.
func (d *Device) xrcAccept(q *qp, t *roce.Packet) bool {
	info, _ := t.Opcode().Info()
	if t.Opcode().Transport() != roce.TransportXRC {
		return false
	}
	if !q.xrcTarget() {
		return info.Response
	}
	if info.Response || t.XRCETH == nil {
		return false
	}
	n := t.XRCETH.SRQ()
	s := d.fn.obj.srqs.Get(n)
	if s == nil || !s.xrc || s.xrcd != q.xrcdn {
		return false
	}
	q.env.xrcSRQN = n
	// Its RDMA and atomic requests reach memory of the XRC SRQ's PD (the
	// kernel makes the target QP in a PD of its own, devr->p0).
	q.RC.SetPD(s.pd)
	return true
}
