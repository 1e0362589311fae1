package mlx5

import (
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/ib"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
	"github.com/hcaemu/hcaemu/emu/transport/uc"
)

// UC QPs (spec §11 Stage 3): a QP of service type UC is bound to the
// core's Unreliable Connected transport (package uc) through the same
// qpEnv as an RC QP: its WQEs, its CQEs and its IB path are an RC QP's;
// what differs is the transport (no ACKs, no retransmission, a lost
// packet loses its message).

// ucTransition gives a UC QP its transport when it leaves RST and hands
// it the merged context at every transition; 2RST forgets its state.
func (d *Device) ucTransition(q *qp) {
	switch {
	case q.state == ifc.QPStateRST && q.uc != nil:
		q.uc.SetState(transport.StateReset)
		q.env.reset()
		return
	case q.state == ifc.QPStateRST:
		return
	case q.env == nil:
		q.env = d.newEnv(q)
		q.uc = uc.New(q.env, q.env.mem, d.log.With("qpn", q.QPN))
	}
	ctx := q.ctx[:]
	var access uint32
	if ifc.QPCRWE.Get(ctx) != 0 {
		access |= mr.RemoteWrite // UC: remote write only
	}
	q.env.setPath()
	q.uc.Configure(uc.Config{PD: q.PD, DestQPN: ifc.QPCRemoteQPN.Get(ctx) & roce.Mask24,
		PMTU:  transport.PMTU(ifc.QPCMTU.Get(ctx)),
		SQPSN: ifc.QPCNextSendPSN.Get(ctx), RQPSN: ifc.QPCNextRcvPSN.Get(ctx), Access: access})
	q.uc.SetState(transportState(q.state))
}

// serviceUC does what a kicked UC QP asked for: send what is posted, or
// flush its queues in ERR.
func (d *Device) serviceUC(q *qp, work hca.Work) {
	if q.state == ifc.QPStateERR {
		q.uc.Flush()
		q.env.flush()
		return
	}
	if work&hca.WorkSend != 0 {
		q.uc.Pump()
	}
}

// receiveUC hands a UC packet to its QP's transport if it has a UC opcode
// and came from the QP's remote LID to this port's LID with the default
// P_Key (a UC packet carries no source QPN: the LID is all that says
// where it came from).
func (d *Device) receiveUC(q *qp, pkt *ib.Packet) {
	t := &pkt.Transport
	if pkt.LRH.DLID() != d.ibPort.LID() || pkt.LRH.SLID() != q.env.dlid || q.env.dlid == 0 ||
		t.BTH.PKey()&0x7fff != 0x7fff || t.Opcode().Transport() != roce.TransportUC {
		d.stats.RxDropped++
		return
	}
	q.CountRx(t, 1, len(t.Payload))
	if !q.uc.Receive(t) {
		d.stats.RxDropped++
	}
}
