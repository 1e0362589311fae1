package pvrdma

import (
	"time"

	"github.com/hcaemu/hcaemu/dma"
	pagedir "github.com/hcaemu/hcaemu/dma/pvrdma"
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
	"github.com/hcaemu/hcaemu/emu/transport/rc"
	"github.com/hcaemu/hcaemu/emu/transport/ud"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// The glue between a PVRDMA QP and its transport (an rc.QP or a ud.QP, on
// the shared ground of package transport): the device turns its WQEs into
// work requests, the transport's completions into CQEs, and gives it the
// QP's timer, paths and rings.

// qpEnv is a QP's transport.Env.
type qpEnv struct {
	d        *Device
	qp       *qp
	mem      mr.Space
	wqe      []byte           // one SQ slot, reused
	wqeSGEs  []uverbs.SGE     // the SGEs of the WQE being taken, reused
	udWR     transport.SendWR // a UD send (sent at once): its Segs storage is reused
	rwqe     []byte           // the receive WQE being peeked, reused
	rwqeSGEs []uverbs.SGE     // its SGEs, reused
	recvSegs []mr.Seg         // its segments, reused (see peekRecv)
	sges     []mr.SGE         // the SGE list being validated, reused
	// The path Path resolved last, by the GID table's generation
	// (d.gidGen) and the QP's address vector and destination QP.
	path hca.PathCache[pathKey]
}

// Region implements mr.Table: the MR table.
func (r *resources) Region(handle uint32) *mr.Region { return r.mr.get(handle) }

// space is the memory the device's transports reach.
func (d *Device) space() mr.Space {
	return mr.Space{Mem: d.mem, Regions: &d.res, Changed: d.revokeLoans, Filler: d.wire.Filler()}
}

// bindTransport gives a QP its transport object the first time it leaves
// RESET (a QP of another type has none).
func (d *Device) bindTransport(qp *qp) {
	if qp.env != nil {
		return
	}
	env := &qpEnv{d: d, qp: qp, mem: d.space()}
	log := d.log.With("qp", qp.Handle)
	switch qp.typ {
	case abi.QPTypeRC:
		qp.RC = rc.New(env, env.mem, log)
	case abi.QPTypeUD, abi.QPTypeGSI:
		qp.UD = ud.New(env, env.mem, log)
	default:
		return
	}
	qp.env = env
}

// configureTransport hands the QP's attributes to its transport.
func (d *Device) configureTransport(qp *qp) {
	a := &qp.attr
	switch {
	case qp.RC != nil:
		qp.RC.Configure(rc.Config{
			PD: qp.PD, DestQPN: a.DestQPN, PMTU: transport.PMTU(a.PathMTU),
			SQPSN: a.SQPSN, RQPSN: a.RQPSN, SQDepth: qp.sq.ring.N,
			RetryCnt: a.RetryCnt, RNRRetry: a.RNRRetry, Timeout: a.Timeout, MinRNRTimer: a.MinRNRTimer,
			MaxRdAtomic: a.MaxRdAtomic, MaxDestRdAtomic: a.MaxDestRdAtomic, Access: a.AccessFlags,
			Responder: qp.env.responder(),
		})
	case qp.UD != nil:
		qp.UD.Configure(ud.Config{QPN: qp.QPN, QKey: a.QKey, GSI: qp.typ == abi.QPTypeGSI, MTU: uint32(transport.PMTU(d.activeMTU))})
	}
}

// resetTransport forgets the QP's transport state and stops its timer
// (destroyed QP).
func (d *Device) resetTransport(qp *qp) {
	if qp.RC != nil {
		qp.RC.Reset()
	}
}

// qpTimer handles QP x's expired timer of generation gen.
func (d *Device) qpTimer(qp *qp, gen uint64) {
	if qp.RC == nil || !d.core.TimerExpired(&qp.QP, gen) {
		return
	}
	qp.RC.Timeout()
}

func (env *qpEnv) PendingSends() (uint32, bool) {
	d, qp := env.d, env.qp
	n, err := d.pendingWQEs(qp.pages, &qp.sq)
	if err != nil {
		d.find(hca.FindingRingIndex, "QP to ERR with QP_FATAL", "qp %d sq pvrdma_ring.prod_tail: %v", qp.Handle, err)
		d.qpError(qp, hca.EventQPFatal)
		return 0, false
	}
	return n, true
}

func (env *qpEnv) TakeSend(wr *transport.SendWR) bool {
	d, qp := env.d, env.qp
	if uint32(len(env.wqe)) != qp.sq.stride {
		env.wqe = make([]byte, qp.sq.stride)
	}
	slot := qp.sq.ring.Slot(qp.sq.cons)
	if err := d.takeSendWQE(qp, env.wqe); err != nil {
		d.qpError(qp, hca.EventQPFatal)
		return false
	}
	w, err := uverbs.DecodeSendWQEInto(env.wqe, qp.sq.maxSGE, env.wqeSGEs)
	if err == nil {
		env.wqeSGEs = w.SGE[:0] // (sendWR keeps none of them)
	}
	env.sendWR(wr, &w, err, slot)
	if d.wire.Tracer != nil {
		d.traceWQE(qp, wr)
	}
	return true
}

// sendWR turns a decoded send WQE into a work request in *wr (zero but for
// the storage of its Segs): its variant as the QP type reads it, and its
// SGEs validated against the QP's PD.
func (env *qpEnv) sendWR(wr *transport.SendWR, w *uverbs.SendWQE, decodeErr error, slot uint32) {
	qp := env.qp
	wr.ID, wr.Opcode = w.WRID, opcodeOf(w.Opcode)
	wr.Signaled = w.SendFlags&uverbs.SendSignaled != 0
	wr.Solicited = w.SendFlags&uverbs.SendSolicited != 0
	wr.Fence = w.SendFlags&uverbs.SendFence != 0
	if decodeErr != nil {
		env.d.findSendWQE(qp, slot, w)
		wr.Status = transport.StatusLocLenErr
		return
	}
	env.d.checkSendOpcode(qp, slot, w.Opcode, wr.Opcode)
	switch wr.Opcode {
	case transport.OpSendImm, transport.OpWriteImm:
		wr.Imm = be32(w.Ex)
	case transport.OpSendInv, transport.OpLocalInv:
		wr.InvalidateKey = w.InvalidateRKey()
	case transport.OpFastReg:
		fr := w.FastReg()
		wr.FastReg = transport.FastReg{IOVA: fr.IOVA, PageListDir: fr.PageListDir, PageShift: fr.PageShift,
			PageListLen: fr.PageListLen, Length: fr.Length, Access: fr.Access, Key: fr.RKey}
	}
	if qp.typ == abi.QPTypeUD || qp.typ == abi.QPTypeGSI {
		var av uverbs.AV
		wr.DestQPN, wr.QKey, av = w.UD()
		wr.AH = transport.AddressHandle{GIDIndex: av.GIDIndex, DGID: av.DGID, DMAC: av.DMAC,
			HopLimit: av.HopLimit, TrafficClass: av.TrafficClass(), FlowLabel: av.FlowLabel()}
	} else {
		switch wr.Opcode {
		case transport.OpWrite, transport.OpWriteImm, transport.OpRead:
			wr.RemoteAddr, wr.RKey = w.RDMA()
		case transport.OpCompSwap, transport.OpFetchAdd:
			wr.RemoteAddr, wr.CompareAdd, wr.Swap, wr.RKey = w.Atomic()
		}
	}
	if wr.Opcode.HasSGEs() {
		if env.d.faultDMA(qp, wr.Opcode.Completion(), w.SGE, sgeBytes(w.SGE)) {
			wr.Status = transport.StatusLocProtErr
			return
		}
		wr.Segs, wr.Length, wr.Status = env.segs(w.SGE, wr.Opcode.WritesLocal(), wr.Segs[:0])
	}
}

// segs validates an SGE list against the QP's PD (write: the device writes
// into it).
func (env *qpEnv) segs(sges []uverbs.SGE, write bool, dst []mr.Seg) ([]mr.Seg, uint32, transport.Status) {
	env.sges = env.sges[:0]
	for _, sge := range sges {
		env.sges = append(env.sges, mr.SGE(sge))
	}
	segs, n, err := env.mem.SegsInto(dst, env.qp.PD, env.sges, write)
	if st := transport.SegsStatus(err); st != transport.StatusSuccess {
		return nil, 0, st
	}
	return segs, n, transport.StatusSuccess
}

func (env *qpEnv) PeekRecv() (transport.RecvWR, transport.Status, bool) {
	return env.d.peekRecv(env)
}

func (env *qpEnv) PopRecv() { env.d.popRecv(env.qp) }

func (env *qpEnv) Complete(c transport.Completion) {
	d, qp := env.d, env.qp
	cqe := uverbs.CQE{WRID: c.WRID, Opcode: wcOpcode(c.Opcode), Status: wcStatus(c.Status), ByteLen: c.ByteLen}
	if d.faults != nil && (c.Recv || c.Signaled || qp.sigAll || c.Status != transport.StatusSuccess) {
		cqh := qp.sendCQ
		if c.Recv {
			cqh = qp.recvCQ
		}
		if !d.faultCompletion(qp, &cqe, c.Opcode, d.res.cq.get(cqh)) {
			return
		}
	}
	if d.wire.Tracer != nil && (c.Recv || c.Signaled || qp.sigAll || c.Status != transport.StatusSuccess) {
		d.traceCQE(qp, &cqe, c.Opcode, c.Recv)
	}
	if !c.Recv {
		d.completeSend(qp, &cqe, c.Signaled)
		return
	}
	cqe.SrcQP, cqe.ImmData, cqe.NetworkHdrType = c.SrcQP, c.Imm, c.NetworkHdrType
	if c.GRH {
		cqe.WCFlags |= uverbs.WCFlagGRH | uverbs.WCFlagNetworkHdrType
	}
	if c.HasImm {
		cqe.WCFlags |= uverbs.WCFlagImm
	}
	if c.Invalidated {
		cqe.WCFlags |= uverbs.WCFlagInvalidate
	}
	d.completeRecv(qp, &cqe, c.Solicited)
}

func (env *qpEnv) Error(ev transport.Event) { env.d.qpError(env.qp, hca.QPErrorEvent(ev)) }

func (env *qpEnv) Drained() { env.d.checkDrained(env.qp) }

func (env *qpEnv) Publish() { env.d.publishDirty() }

// Path is where an RC QP's packets go: its primary path.
func (env *qpEnv) Path() (transport.Path, bool) {
	qp := env.qp
	key := pathKey{ah: qp.attr.AH, destQPN: qp.attr.DestQPN}
	if p, ok, hit := env.path.Get(env.d.gidGen, key); hit {
		return p, ok
	}
	ah := &key.ah
	p, ok := env.d.pathFor(ah.SGIDIndex, ah.DGID)
	if ok {
		p.DMAC, p.HopLimit, p.TClass, p.FlowLabel = ah.DMAC, ah.HopLimit, ah.TrafficClass, ah.FlowLabel
		p.SrcPort = roce.UDPSourcePort(ah.FlowLabel, qp.QPN, qp.attr.DestQPN)
	}
	env.path.Put(env.d.gidGen, key, p, ok)
	return p, ok
}

// pathKey is what an RC QP's path is resolved from.
type pathKey struct {
	ah      abi.AHAttr
	destQPN uint32
}

// PathTo is where a UD datagram to ah goes.
func (env *qpEnv) PathTo(ah *transport.AddressHandle) (transport.Path, bool) {
	p, ok := env.d.pathFor(ah.GIDIndex, ah.DGID)
	if !ok {
		return p, false
	}
	p.DMAC, p.HopLimit, p.TClass, p.FlowLabel = ah.DMAC, ah.HopLimit, ah.TrafficClass, ah.FlowLabel
	p.SrcPort = roce.UDPSourcePortHash(env.qp.QPN)
	return p, true
}

func (env *qpEnv) Transmit(path transport.Path, f roce.PacketFields, payload transport.Payload) error {
	d := env.d
	if d.wire.Down {
		d.wire.Stats.PortDown++
		return nil // a port held down by a fault: the frame is lost
	}
	err := d.wire.Transmit(&path, &f, &payload, env.mem)
	if err == nil {
		again := env.qp.CountTx(&f, payload.Len)
		if d.wire.Tracer != nil {
			d.wire.TraceTx(env.qp.QPN, &f, payload.Len, again)
		}
	}
	return err
}

// TransmitRun sends a run when the wire needs no frames. A port held down
// by a fault, or a device tracing its packets, takes none: they go one at
// a time, as faults and traces expect.
func (env *qpEnv) TransmitRun(path transport.Path, f roce.PacketFields, payload transport.Payload, n int) (int, error) {
	d := env.d
	if d.wire.Down || d.wire.Tracer != nil || n < 1 {
		return 0, nil
	}
	taken, err := d.wire.TransmitRun(&path, &f, &payload, n, env.mem)
	if err == nil && taken > 0 {
		env.qp.CountTxRun(&f, payload.Len/n*taken, taken)
	}
	return taken, err
}

func (env *qpEnv) LocalOp(wr *transport.SendWR) transport.Status {
	return env.d.localOp(env.qp, wr, env.mem)
}

func (env *qpEnv) ArmTimer(dur time.Duration) { env.d.core.ArmTimer(&env.qp.QP, dur) }

func (env *qpEnv) StopTimer() { env.d.core.StopTimer(&env.qp.QP) }

func (env *qpEnv) Kick(work transport.Work, later bool) {
	env.d.core.KickQP(env.qp.Handle, work, later)
}

// localOp executes LOCAL_INV and FAST_REG_MR.
func (d *Device) localOp(qp *qp, wr *transport.SendWR, mem mr.Space) transport.Status {
	d.revokeLoans() // a region is about to change
	switch wr.Opcode {
	case transport.OpLocalInv:
		if !mem.Invalidate(qp.PD, wr.InvalidateKey) {
			return transport.StatusLocProtErr
		}
	case transport.OpFastReg:
		fr := &wr.FastReg
		region := d.res.mr.get(mr.Handle(fr.Key))
		if region == nil || !region.FRMR || region.PD != qp.PD || region.Valid {
			return transport.StatusLocProtErr
		}
		if fr.PageShift != 12 || fr.PageListLen == 0 || fr.PageListLen > region.MaxPages ||
			fr.Access&^mr.KnownAccess != 0 || uint64(fr.Length) > uint64(fr.PageListLen)*dma.PageSize {
			return transport.StatusLocProtErr
		}
		if _, ok := dma.End(fr.IOVA, uint64(fr.Length)); !ok {
			return transport.StatusLocProtErr
		}
		pages, err := pagedir.Read(d.mem, fr.PageListDir, fr.PageListLen, region.MaxPages)
		if err != nil {
			return transport.StatusLocProtErr
		}
		if e := d.res.pin(uint32(len(pages))); e != nil {
			return transport.StatusLocProtErr
		}
		d.res.unpin(len(region.Pages))
		region.Pages, region.Start, region.Length, region.Access = pages, fr.IOVA, uint64(fr.Length), fr.Access
		// The consumer chose the key's variant (ib_update_fast_reg_key);
		// references to the previous registration stop resolving even if
		// it chose the same key again.
		region.LKey, region.RKey, region.Valid = fr.Key, fr.Key, true
		region.Gen = d.res.newMRGen()
		d.res.mrKeys.Ended(mr.Handle(fr.Key), mr.Variant(fr.Key))
	}
	return transport.StatusSuccess
}

// responder is the RC responder's fault hook, nil without faults.
func (env *qpEnv) responder() func(roce.Packet) rc.ResponderFault {
	if env.d.faults == nil {
		return nil
	}
	return env.responderFault
}

// sgeBytes is the total length of an SGE list (saturating).
func sgeBytes(sges []uverbs.SGE) uint32 {
	var n uint64
	for _, sge := range sges {
		n += uint64(sge.Length)
	}
	return uint32(min(n, 1<<32-1))
}

func be32(b [4]byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}
