package emu

import (
	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/uverbs"
)

// rxPkt is one received, validated packet.
type rxPkt struct {
	u   roce.Unframed
	p   roce.Packet
	psn uint32
}

// receiveFrame handles one frame from the fabric (engine goroutine, d.mu
// held). Frames that do not decode, fail the ICRC or name no QP are
// dropped, as hardware does.
func (d *Device) receiveFrame(frame []byte) {
	defer fabric.Release(frame)
	if d.dsr == nil || !d.active {
		return
	}
	u, err := roce.Unframe(frame)
	if err != nil {
		d.log.Debug("dropped frame", "err", err)
		return
	}
	if err := u.VerifyICRC(); err != nil {
		d.log.Debug("dropped frame: bad ICRC")
		return
	}
	p, err := roce.Parse(u.IB)
	if err != nil {
		d.log.Debug("dropped packet", "err", err)
		return
	}
	if p.BTH.TVer() != 0 {
		return
	}
	pkt := &rxPkt{u: u, p: p, psn: p.BTH.PSN()}
	qpn := p.BTH.DestQP()
	x := d.res.qp.get(qpn)
	if x == nil || x.qpn != qpn {
		return
	}
	switch p.Opcode().Transport() {
	case roce.TransportUD:
		if x.typ == QPTypeUD || x.typ == QPTypeGSI {
			d.recvUD(x, pkt)
		}
	case roce.TransportRC:
		if x.typ == QPTypeRC {
			d.recvRC(x, pkt)
		}
	}
}

// recvWQE is a receive WQE taken for a message.
type recvWQE struct {
	w    uverbs.RecvWQE
	segs []seg
	cap  uint32
}

// peekRecv reads the next receive WQE of the QP (its RQ or its SRQ) without
// consuming it. ok=false: none posted. A WQE that fails validation is
// returned with status != success.
func (d *Device) peekRecv(x *qp) (r recvWQE, status uint32, ok bool) {
	pages, w := x.pages, &x.rq
	if x.srq != 0 {
		s := d.res.srq.get(x.srq)
		if s == nil {
			return r, 0, false
		}
		pages, w = s.pages, &s.q
	}
	n, err := d.pendingWQEs(pages, w)
	if err != nil || n == 0 {
		return r, 0, false
	}
	buf := make([]byte, w.stride)
	off := w.base + uint64(w.ring.Slot(w.cons))*uint64(w.stride)
	if err := pages.ReadAt(d.mem, buf, off); err != nil {
		return r, uverbs.WCLocProtErr, true
	}
	r.w, err = uverbs.DecodeRecvWQE(buf, w.maxSGE)
	if err != nil {
		return r, uverbs.WCLocLenErr, true
	}
	var st uint32
	r.segs, r.cap, st = d.segsFor(x, r.w.SGE, true)
	return r, st, true
}

// popRecv consumes the WQE peekRecv returned.
func (d *Device) popRecv(x *qp) {
	if x.srq == 0 {
		x.rq.cons = x.rq.ring.Next(x.rq.cons)
		dma.StoreUint32(d.mem, x.pages[0]+x.rq.consOff, x.rq.cons)
		return
	}
	s := d.res.srq.get(x.srq)
	if s == nil {
		return
	}
	s.q.cons = s.q.ring.Next(s.q.cons)
	dma.StoreUint32(d.mem, s.pages[0]+s.q.consOff, s.q.cons)
	if s.limit != 0 {
		if n, err := d.pendingWQEs(s.pages, &s.q); err == nil && n < s.limit {
			s.limit = 0
			d.event(EvSRQLimitReached, s.handle)
		}
	}
}

// completeRecv posts a receive completion to the QP's receive CQ.
func (d *Device) completeRecv(x *qp, e *uverbs.CQE, solicited bool) {
	c := d.res.cq.get(x.recvCQ)
	if c == nil {
		return
	}
	e.QP = uint64(x.handle)
	e.PortNum = 1
	if c.ctx != 0 {
		e.WCFlags &= uverbs.WCFlagGRH | uverbs.WCFlagImm // user CQs: the provider passes flags raw
		e.NetworkHdrType = 0
	}
	d.post(c, e, solicited)
}
