package mlx5

import (
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/ib"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
	"github.com/hcaemu/hcaemu/emu/transport/uc"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// UC QPs (spec §11 Stage 3): a QP of service type UC is bound to the
// core's Unreliable Connected transport (package uc) through the same
// qpEnv as an RC QP: its WQEs, its CQEs and its IB path are an RC QP's;
// what differs is the transport (no ACKs, no retransmission, a lost
// packet loses its message).

// ucTransition gives a UC QP its transport when it leaves RST and hands
// it the merged context at every transition; 2RST forgets its state.
func (d *Device) ucTransition(q *qp) {
	if q.state == ifc.QPStateRST {
		if q.uc != nil {
			q.uc.SetState(transport.StateReset)
		}
		if q.env != nil {
			q.env.reset()
		}
		return
	}
	if q.env == nil {
		q.env = &qpEnv{d: d, q: q, mem: d.space(), sq: make([]byte, q.sqBytes), st: uverbs.ST(q.st)}
		q.uc = uc.New(q.env, q.env.mem, d.log.With("qpn", q.QPN))
	}
	ctx := q.ctx[:]
	var access uint32
	if ifc.QPCRWE.Get(ctx) != 0 {
		access |= mr.RemoteWrite
	}
	q.env.dlid = uint16(ifc.PriPath(ifc.ADSRLID).Get(ctx))
	q.env.sl = uint8(ifc.PriPath(ifc.ADSSL).Get(ctx) & 0xf)
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

// receiveUC hands a UC packet to its QP's transport if it came from the
// QP's remote LID and QPN... to this port's LID with the default P_Key
// (UC carries no source QPN: the connected QP is the remote LID's).
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
