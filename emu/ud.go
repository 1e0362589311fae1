package emu

import (
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/uverbs"
)

// udMTU is the largest UD payload: the port's active MTU.
const udMTU = 1024

// grhSize is the GRH area at the start of every UD receive buffer.
const grhSize = 40

// sendUD transmits one UD or GSI send WQE as a single SEND_ONLY datagram and
// completes it locally.
func (d *Device) sendUD(x *qp, w *uverbs.SendWQE) {
	if w.Opcode != uverbs.OpSend && w.Opcode != uverbs.OpSendImm {
		d.completeSend(x, w, uverbs.WCLocQPOpErr, 0)
		d.qpError(x, EvQPReqErr)
		return
	}
	segs, n, st := d.segsFor(x, w.SGE, false)
	if st != uverbs.WCSuccess {
		d.completeSend(x, w, st, 0)
		d.qpError(x, EvQPAccessErr)
		return
	}
	rqpn, qkey, av := w.UD()
	if qkey&0x80000000 != 0 {
		qkey = x.attr.QKey
	}
	if x.typ == QPTypeGSI {
		qkey = roce.GSIQKey
	}
	p, ok := d.pathFor(av.GIDIndex, av.DGID)
	if !ok || rqpn > roce.Mask24 {
		d.completeSend(x, w, uverbs.WCLocQPOpErr, 0)
		d.qpError(x, EvQPReqErr)
		return
	}
	if n > udMTU {
		// IBTA C10-93.1.1, as rxe: complete without sending.
		d.completeSend(x, w, uverbs.WCSuccess, n)
		return
	}
	p.dmac, p.hopLimit, p.tclass, p.flowLabel = av.DMAC, av.HopLimit, av.TrafficClass(), av.FlowLabel()
	p.srcPort = roce.UDPSourcePortHash(x.qpn)
	f := roce.PacketFields{}
	f.BTH.Opcode = roce.UDSendOnly
	if w.Opcode == uverbs.OpSendImm {
		f.BTH.Opcode = roce.UDSendOnlyWithImmediate
		f.ImmDt = be32(w.Ex)
	}
	f.BTH.SE = w.SendFlags&uverbs.SendSolicited != 0
	f.BTH.PKey = roce.DefaultPKey
	f.BTH.DestQP = rqpn
	f.BTH.PSN = x.udPSN
	x.udPSN = roce.PSNAdd(x.udPSN, 1)
	f.DETH.QKey = qkey
	f.DETH.SrcQP = x.qpn
	err := d.transmit(&p, &f, int(n), func(b []byte) error { return d.copySegs(segs, 0, b, false) })
	if err != nil {
		d.log.Debug("UD send failed", "qp", x.handle, "err", err)
		d.completeSend(x, w, uverbs.WCLocProtErr, 0)
		d.qpError(x, EvQPAccessErr)
		return
	}
	d.completeSend(x, w, uverbs.WCSuccess, n)
}

// recvUD delivers a UD datagram into the QP's next receive WQE: the GRH
// area (the received IP header), then the payload.
func (d *Device) recvUD(x *qp, pkt *rxPkt) {
	if x.state != StateRTR && x.state != StateRTS && x.state != StateSQD {
		return
	}
	if pkt.p.DETH.QKey() != x.attr.QKey {
		d.res.qkeyViolations++
		return
	}
	r, st, ok := d.peekRecv(x)
	if !ok {
		return // no receive WQE: dropped
	}
	if st != uverbs.WCSuccess {
		d.popRecv(x)
		d.completeRecv(x, &uverbs.CQE{WRID: r.w.WRID, Opcode: uverbs.WCRecv, Status: st}, false)
		d.qpError(x, EvQPAccessErr)
		return
	}
	payload := pkt.p.Payload
	need := uint64(grhSize) + uint64(len(payload))
	if need > uint64(r.cap) {
		return // does not fit: dropped, WQE kept
	}
	var grh [grhSize]byte
	hdrType := uint8(2)
	if len(pkt.u.IP) == 20 {
		copy(grh[20:], pkt.u.IP)
		hdrType = 1
	} else {
		copy(grh[:], pkt.u.IP)
	}
	if err := d.copySegs(r.segs, 0, grh[:], true); err != nil {
		return
	}
	if err := d.copySegs(r.segs, grhSize, payload, true); err != nil {
		return
	}
	d.popRecv(x)
	e := uverbs.CQE{WRID: r.w.WRID, Opcode: uverbs.WCRecv, ByteLen: uint32(need),
		SrcQP: pkt.p.DETH.SrcQP(), WCFlags: uverbs.WCFlagGRH | uverbs.WCFlagNetworkHdrType, NetworkHdrType: hdrType}
	if pkt.p.ImmDt != nil {
		copy(e.ImmData[:], pkt.p.ImmDt)
		e.WCFlags |= uverbs.WCFlagImm
	}
	d.completeRecv(x, &e, pkt.p.BTH.SE())
}

func be32(b [4]byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}
