package pvrdma

import (
	"fmt"

	"github.com/hcaemu/hcaemu/dma"
	pagedir "github.com/hcaemu/hcaemu/dma/pvrdma"
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

var stateNames = [abi.NumQPStates]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

// qpTypeName names a QP type (pvrdma_qp_type).
func qpTypeName(typ uint8) string {
	switch typ {
	case abi.QPTypeSMI:
		return "SMI"
	case abi.QPTypeGSI:
		return "GSI"
	case abi.QPTypeRC:
		return "RC"
	case abi.QPTypeUC:
		return "UC"
	case abi.QPTypeUD:
		return "UD"
	}
	return fmt.Sprintf("type-%d", typ)
}

// wq is one work queue (SQ, RQ or SRQ) in a guest ring.
type wq struct {
	ring    uverbs.Ring
	stride  uint32
	maxSGE  uint32
	base    uint64 // byte offset of slot 0 in the object's pages
	prodOff uint64 // ring-state offsets in page 0
	consOff uint64
	cons    uint32 // device-owned consumer index (authoritative)
}

// qp is a queue pair.
type qp struct {
	hca.QP  // handle, QPN, PD, transport object, counters: the core's
	typ     uint8
	ctx     uint32
	sendCQ  uint32
	recvCQ  uint32
	srq     uint32 // 0 = own RQ
	sigAll  bool
	sqDirty bool // sq.cons is ahead of the cons_head the guest sees: in Device.dirtySQs
	pages   dma.Pages
	sq, rq  wq
	state   uint8
	attr    abi.QPAttr
	// env is what the QP's transport (QP.RC or QP.UD, bound when the QP
	// first leaves RESET) reaches the device through.
	env *qpEnv
	// Injected faults the engine carries out at its next turn for the QP:
	// an async event with ERR, or ERR alone (after an error completion).
	faultEvent    hca.Event
	faultHasEvent bool
	faultErr      bool
}

// transition is one legal edge of the IB QP state table with the attributes
// it requires and allows, per QP type class (RC, or UD/GSI).
type transition struct {
	req, opt [2]uint32 // [0] RC, [1] UD and GSI
}

const (
	rcClass = 0
	udClass = 1
)

var qpTransitions = func() (t [abi.NumQPStates][abi.NumQPStates]*transition) {
	set := func(from, to int, rcReq, rcOpt, udReq, udOpt uint32) {
		t[from][to] = &transition{req: [2]uint32{rcReq, udReq}, opt: [2]uint32{rcOpt, udOpt}}
	}
	for s := 0; s < abi.NumQPStates; s++ {
		set(s, abi.QPStateReset, 0, 0, 0, 0)
		set(s, abi.QPStateErr, 0, 0, 0, 0)
	}
	set(abi.QPStateReset, abi.QPStateInit,
		abi.AttrPKeyIndex|abi.AttrPort|abi.AttrAccessFlags, 0,
		abi.AttrPKeyIndex|abi.AttrPort|abi.AttrQKey, 0)
	set(abi.QPStateInit, abi.QPStateInit,
		0, abi.AttrPKeyIndex|abi.AttrPort|abi.AttrAccessFlags,
		0, abi.AttrPKeyIndex|abi.AttrPort|abi.AttrQKey)
	set(abi.QPStateInit, abi.QPStateRTR,
		abi.AttrAV|abi.AttrPathMTU|abi.AttrDestQPN|abi.AttrRQPSN|abi.AttrMaxDestRdAtomic|abi.AttrMinRNRTimer,
		abi.AttrAltPath|abi.AttrAccessFlags|abi.AttrPKeyIndex,
		0, abi.AttrPKeyIndex|abi.AttrQKey)
	set(abi.QPStateRTR, abi.QPStateRTS,
		abi.AttrSQPSN|abi.AttrTimeout|abi.AttrRetryCnt|abi.AttrRNRRetry|abi.AttrMaxQPRdAtomic,
		abi.AttrCurState|abi.AttrAltPath|abi.AttrAccessFlags|abi.AttrMinRNRTimer|abi.AttrPathMigState,
		abi.AttrSQPSN, abi.AttrCurState|abi.AttrQKey)
	rtsOpt := uint32(abi.AttrCurState | abi.AttrAccessFlags | abi.AttrAltPath | abi.AttrPathMigState | abi.AttrMinRNRTimer)
	set(abi.QPStateRTS, abi.QPStateRTS, 0, rtsOpt, 0, abi.AttrCurState|abi.AttrQKey)
	set(abi.QPStateRTS, abi.QPStateSQD, 0, abi.AttrEnSQDAsync, 0, abi.AttrEnSQDAsync)
	set(abi.QPStateSQD, abi.QPStateRTS, 0, rtsOpt, 0, abi.AttrCurState|abi.AttrQKey)
	set(abi.QPStateSQD, abi.QPStateSQD, 0,
		abi.AttrAV|abi.AttrPathMTU|abi.AttrTimeout|abi.AttrRetryCnt|abi.AttrRNRRetry|abi.AttrMaxQPRdAtomic|
			abi.AttrMaxDestRdAtomic|abi.AttrAltPath|abi.AttrAccessFlags|abi.AttrPKeyIndex|abi.AttrMinRNRTimer|abi.AttrPathMigState,
		0, abi.AttrPKeyIndex|abi.AttrQKey)
	set(abi.QPStateSQE, abi.QPStateRTS, ^uint32(0), 0, 0, abi.AttrCurState|abi.AttrQKey) // RC has no SQE state
	return t
}()

// checkModify validates a MODIFY_QP against the state table and the device
// limits. It returns the target state.
func (d *Device) checkModify(qp *qp, mask uint32, a *abi.QPAttr) (uint8, *cmdErr) {
	if mask&^abi.AttrMaskAll != 0 {
		return 0, fail(errInval, "qp %d pvrdma_cmd_modify_qp.attr_mask=%#x: unknown bits %#x", qp.Handle, mask, mask&^abi.AttrMaskAll).as(hca.FindingQPState)
	}
	cur := qp.state
	if mask&abi.AttrCurState != 0 && a.CurState != uint32(cur) {
		if a.CurState >= abi.NumQPStates {
			return 0, fail(errInval, "qp %d pvrdma_cmd_modify_qp.attrs.cur_qp_state=%d: not a QP state", qp.Handle, a.CurState).as(hca.FindingQPState)
		}
		return 0, fail(errInval, "qp %d pvrdma_cmd_modify_qp.attrs.cur_qp_state=%s, but the QP is in %s", qp.Handle, stateNames[a.CurState], stateNames[cur]).as(hca.FindingQPState)
	}
	next := cur
	if mask&abi.AttrState != 0 {
		if a.State >= abi.NumQPStates {
			return 0, fail(errInval, "qp %d pvrdma_cmd_modify_qp.attrs.qp_state=%d: not a QP state", qp.Handle, a.State).as(hca.FindingQPState)
		}
		next = uint8(a.State)
	}
	t := qpTransitions[cur][next]
	if t == nil {
		return 0, fail(errInval, "qp %d pvrdma_cmd_modify_qp.attrs.qp_state=%s: illegal transition %s -> %s", qp.Handle, stateNames[next], stateNames[cur], stateNames[next]).as(hca.FindingQPState)
	}
	class := udClass
	if qp.typ == abi.QPTypeRC || qp.typ == abi.QPTypeUC {
		class = rcClass
	}
	req, opt := t.req[class], t.opt[class]
	if qp.typ == abi.QPTypeGSI {
		req &^= abi.AttrPort // the MAD layer's RESET->INIT has no PORT
		opt |= abi.AttrPort
	}
	if req == ^uint32(0) {
		return 0, fail(errInval, "qp %d pvrdma_cmd_modify_qp.attrs.qp_state=%s: illegal transition %s -> %s for a %s QP", qp.Handle, stateNames[next], stateNames[cur], stateNames[next], qpTypeName(qp.typ)).as(hca.FindingQPState)
	}
	if missing := req &^ mask; missing != 0 {
		return 0, fail(errInval, "qp %d pvrdma_cmd_modify_qp.attr_mask=%#x: %s -> %s lacks required attributes %#x", qp.Handle, mask, stateNames[cur], stateNames[next], missing).as(hca.FindingQPState)
	}
	if extra := mask &^ (req | opt | abi.AttrState | abi.AttrCap); extra != 0 {
		return 0, fail(errInval, "qp %d pvrdma_cmd_modify_qp.attr_mask=%#x: %s -> %s does not take attributes %#x", qp.Handle, mask, stateNames[cur], stateNames[next], extra).as(hca.FindingQPState)
	}
	if mask&abi.AttrPKeyIndex != 0 && uint32(a.PKeyIndex) >= uint32(d.caps.MaxPKeys) {
		return 0, fail(errInval, "qp %d pvrdma_cmd_modify_qp.attrs.pkey_index=%d >= %d P_Keys", qp.Handle, a.PKeyIndex, d.caps.MaxPKeys)
	}
	if mask&abi.AttrPort != 0 {
		if e := d.checkPort(a.PortNum); e != nil {
			return 0, e
		}
	}
	if mask&abi.AttrPathMTU != 0 && (a.PathMTU < 1 || a.PathMTU > abi.MTU4096) {
		return 0, fail(errInval, "qp %d pvrdma_cmd_modify_qp.attrs.path_mtu=%d: not 1..%d", qp.Handle, a.PathMTU, abi.MTU4096)
	}
	if mask&abi.AttrDestQPN != 0 && a.DestQPN >= 1<<24 {
		return 0, fail(errInval, "qp %d pvrdma_cmd_modify_qp.attrs.dest_qp_num=%#x: wider than 24 bits", qp.Handle, a.DestQPN)
	}
	if mask&abi.AttrMinRNRTimer != 0 && a.MinRNRTimer > 31 {
		return 0, fail(errInval, "qp %d pvrdma_cmd_modify_qp.attrs.min_rnr_timer=%d > 31", qp.Handle, a.MinRNRTimer)
	}
	if mask&abi.AttrTimeout != 0 && a.Timeout > 31 {
		return 0, fail(errInval, "qp %d pvrdma_cmd_modify_qp.attrs.timeout=%d > 31", qp.Handle, a.Timeout)
	}
	if mask&abi.AttrRetryCnt != 0 && a.RetryCnt > 7 {
		return 0, fail(errInval, "qp %d pvrdma_cmd_modify_qp.attrs.retry_cnt=%d > 7", qp.Handle, a.RetryCnt)
	}
	if mask&abi.AttrRNRRetry != 0 && a.RNRRetry > 7 {
		return 0, fail(errInval, "qp %d pvrdma_cmd_modify_qp.attrs.rnr_retry=%d > 7", qp.Handle, a.RNRRetry)
	}
	if mask&abi.AttrAccessFlags != 0 && a.AccessFlags&^(mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead|mr.RemoteAtomic|mr.MWBind) != 0 {
		return 0, fail(errInval, "qp %d pvrdma_cmd_modify_qp.attrs.qp_access_flags=%#x: unknown bits", qp.Handle, a.AccessFlags)
	}
	if mask&abi.AttrAV != 0 {
		if uint32(a.AH.SGIDIndex) >= d.caps.GIDTblLen || !d.res.gids[a.AH.SGIDIndex].Valid {
			return 0, fail(errInval, "qp %d pvrdma_cmd_modify_qp.attrs.ah_attr.grh.sgid_index=%d: not a bound GID", qp.Handle, a.AH.SGIDIndex)
		}
	}
	return next, nil
}

func (d *Device) cmdModifyQP(req *abi.CmdModifyQP) (abi.Response, *cmdErr) {
	h, mask := req.QPHandle, req.AttrMask
	qp := d.res.qp.get(h)
	if qp == nil {
		return nil, fail(errInval, "qp_handle=%d: no such QP", h).as(hca.FindingHandle)
	}
	a := &req.Attrs
	next, e := d.checkModify(qp, mask, a)
	if e != nil {
		return nil, e
	}
	s := &qp.attr
	if mask&abi.AttrEnSQDAsync != 0 {
		s.EnSQDAsyncNotify = a.EnSQDAsyncNotify
	}
	if mask&abi.AttrAccessFlags != 0 {
		s.AccessFlags = a.AccessFlags
	}
	if mask&abi.AttrPKeyIndex != 0 {
		s.PKeyIndex = a.PKeyIndex
	}
	if mask&abi.AttrPort != 0 {
		s.PortNum = a.PortNum
	}
	if mask&abi.AttrQKey != 0 {
		s.QKey = a.QKey
	}
	if mask&abi.AttrAV != 0 {
		s.AH = a.AH
	}
	if mask&abi.AttrPathMTU != 0 {
		s.PathMTU = a.PathMTU
	}
	if mask&abi.AttrTimeout != 0 {
		s.Timeout = a.Timeout
	}
	if mask&abi.AttrRetryCnt != 0 {
		s.RetryCnt = a.RetryCnt
	}
	if mask&abi.AttrRNRRetry != 0 {
		s.RNRRetry = a.RNRRetry
	}
	if mask&abi.AttrRQPSN != 0 {
		s.RQPSN = a.RQPSN & 0xFFFFFF
	}
	if mask&abi.AttrMaxQPRdAtomic != 0 {
		s.MaxRdAtomic = uint8(min(uint32(a.MaxRdAtomic), d.caps.MaxQPInitRdAtom))
	}
	if mask&abi.AttrAltPath != 0 {
		s.AltAH, s.AltPortNum, s.AltTimeout, s.AltPKeyIndex = a.AltAH, a.AltPortNum, a.AltTimeout, a.AltPKeyIndex
	}
	if mask&abi.AttrMinRNRTimer != 0 {
		s.MinRNRTimer = a.MinRNRTimer
	}
	if mask&abi.AttrSQPSN != 0 {
		s.SQPSN = a.SQPSN & 0xFFFFFF
	}
	if mask&abi.AttrMaxDestRdAtomic != 0 {
		s.MaxDestRdAtomic = uint8(min(uint32(a.MaxDestRdAtomic), d.caps.MaxQPRdAtom))
	}
	if mask&abi.AttrPathMigState != 0 {
		s.PathMigState = a.PathMigState
	}
	if mask&abi.AttrDestQPN != 0 {
		s.DestQPN = a.DestQPN
	}
	d.setState(qp, next)
	return nil, nil
}

// setState moves a QP to a new state with the state's side effects.
func (d *Device) setState(qp *qp, next uint8) {
	prev := qp.state
	qp.state = next
	d.bindTransport(qp)
	d.configureTransport(qp)
	// The transport moves first: RESET clears it, ERR flushes the requests
	// it holds before the ring's.
	switch {
	case qp.RC != nil:
		qp.RC.SetState(transportState(next))
	case qp.UD != nil:
		qp.UD.SetState(transportState(next))
	}
	switch next {
	case abi.QPStateReset:
		// The guest zeroes the ring indices after RESET; forget ours.
		qp.sq.cons, qp.rq.cons = 0, 0
	case abi.QPStateErr:
		if prev != abi.QPStateErr {
			d.flush(qp)
		}
	case abi.QPStateRTS:
		if prev != abi.QPStateRTS {
			d.core.Kick(hca.TargetQP, qp.Handle, hca.WorkSend)
		}
	case abi.QPStateSQD:
		if prev != abi.QPStateSQD {
			d.checkDrained(qp)
		}
	}
	if prev != next && d.wire.Tracer != nil {
		d.traceState(qp, prev, next)
	}
	if prev != next {
		d.log.Debug("QP state", "qp", qp.Handle, "from", stateNames[prev], "to", stateNames[next])
	}
}

// checkDrained posts SQ_DRAINED for a QP in SQD with nothing in flight,
// when the guest asked for it.
func (d *Device) checkDrained(qp *qp) {
	if qp.state == abi.QPStateSQD && (qp.RC == nil || qp.RC.Outstanding() == 0) && qp.attr.EnSQDAsyncNotify != 0 {
		qp.attr.EnSQDAsyncNotify = 0
		d.event(hca.EventSQDrained, qp.Handle)
	}
}

// qpError moves a QP to ERR because of an error it caused or met, with the
// async event the driver expects.
func (d *Device) qpError(qp *qp, ev hca.Event) {
	if qp.state == abi.QPStateErr {
		return
	}
	d.event(ev, qp.Handle)
	d.setState(qp, abi.QPStateErr)
	if qp.srq != 0 {
		d.event(hca.EventQPLastWQEReached, qp.Handle)
	}
}

func (d *Device) cmdQueryQP(req *abi.CmdQueryQP) (abi.Response, *cmdErr) {
	h := req.QPHandle
	qp := d.res.qp.get(h)
	if qp == nil {
		return nil, fail(errInval, "qp_handle=%d: no such QP", h).as(hca.FindingHandle)
	}
	rsp := &abi.CmdQueryQPResp{Attrs: qp.attr}
	a := &rsp.Attrs
	a.State, a.CurState = uint32(qp.state), uint32(qp.state)
	a.Cap = abi.QPCap{MaxSendWR: qp.sq.ring.N, MaxRecvWR: qp.rq.ring.N, MaxSendSGE: qp.sq.maxSGE, MaxRecvSGE: qp.rq.maxSGE}
	return rsp, nil
}

func (d *Device) cmdCreateQP(req *abi.CmdCreateQP) (abi.Response, *cmdErr) {
	pdir := req.PdirDMA
	pdh, scqh, rcqh, srqh := req.PDHandle, req.SendCQHandle, req.RecvCQHandle, req.SRQHandle
	sWR, rWR, sSGE, rSGE, inline := req.MaxSendWR, req.MaxRecvWR, req.MaxSendSGE, req.MaxRecvSGE, req.MaxInlineData
	total, sendChunks := uint32(req.TotalChunks), uint32(req.SendChunks)
	sigAll, typ, isSRQ := req.SQSigAll != 0, req.QPType, req.IsSRQ != 0

	pd := d.res.pd.get(pdh)
	if pd == nil {
		return nil, fail(errInval, "pvrdma_cmd_create_qp.pd_handle=%d: no such PD", pdh).as(hca.FindingHandle)
	}
	ctx := pd.ctx
	scq, rcq := d.res.cq.get(scqh), d.res.cq.get(rcqh)
	if scq == nil || rcq == nil {
		return nil, fail(errInval, "pvrdma_cmd_create_qp.send_cq_handle=%d, recv_cq_handle=%d: no such CQ", scqh, rcqh).as(hca.FindingHandle)
	}
	if scq.ctx != ctx || rcq.ctx != ctx {
		return nil, fail(errInval, "pvrdma_cmd_create_qp.send_cq_handle=%d, recv_cq_handle=%d: a CQ of another context than PD %d", scqh, rcqh, pdh).as(hca.FindingHandle)
	}
	var s *srq
	if isSRQ {
		if s = d.res.srq.get(srqh); s == nil || s.ctx != ctx {
			return nil, fail(errInval, "pvrdma_cmd_create_qp.srq_handle=%d: no such SRQ in the PD's context", srqh).as(hca.FindingHandle)
		}
		rWR, rSGE = 0, 0
	}
	switch typ {
	case abi.QPTypeRC, abi.QPTypeUD:
	case abi.QPTypeGSI:
		if ctx != 0 {
			return nil, fail(errInval, "pvrdma_cmd_create_qp.qp_type=GSI from a user context")
		}
		if d.res.qp.get(1) != nil {
			return nil, fail(errBusy, "pvrdma_cmd_create_qp.qp_type=GSI: port 1 already has a GSI QP")
		}
	default:
		return nil, fail(errNotSup, "pvrdma_cmd_create_qp.qp_type=%d: not RC, UD or GSI", typ)
	}
	if !uverbs.IsPow2(sWR) || sWR > d.caps.MaxQPWR {
		return nil, fail(errInval, "pvrdma_cmd_create_qp.max_send_wr=%d: not a power of two in 1..%d", sWR, d.caps.MaxQPWR)
	}
	if !isSRQ && (!uverbs.IsPow2(rWR) || rWR > d.caps.MaxQPWR) {
		return nil, fail(errInval, "pvrdma_cmd_create_qp.max_recv_wr=%d: not a power of two in 1..%d", rWR, d.caps.MaxQPWR)
	}
	if sSGE == 0 || sSGE > d.caps.MaxSGE || (!isSRQ && (rSGE == 0 || rSGE > d.caps.MaxSGE)) {
		return nil, fail(errInval, "pvrdma_cmd_create_qp.max_send_sge=%d, max_recv_sge=%d: not 1..%d", sSGE, rSGE, d.caps.MaxSGE)
	}
	if inline != 0 {
		return nil, fail(errInval, "pvrdma_cmd_create_qp.max_inline_data=%d: inline data is not supported (0)", inline)
	}
	sStride, rStride := uverbs.SQStride(sSGE), uverbs.RQStride(rSGE)
	sPages := (uint64(sWR)*uint64(sStride) + dma.PageSize - 1) / dma.PageSize
	rPages := uint64(0)
	if !isSRQ {
		rPages = (uint64(rWR)*uint64(rStride) + dma.PageSize - 1) / dma.PageSize
	}
	if uint64(sendChunks) < sPages || uint64(total) < 1+uint64(sendChunks)+rPages {
		return nil, fail(errInval, "pvrdma_cmd_create_qp.total_chunks=%d, send_chunks=%d: too few pages for SQ %dx%d B and RQ %dx%d B", total, sendChunks, sWR, sStride, rWR, rStride).as(hca.FindingPageDir)
	}
	pages, e := d.pinPages("QP", pdir, total)
	if e != nil {
		return nil, e
	}
	qp := &qp{
		QP: hca.QP{PD: pdh}, typ: typ, ctx: ctx, sendCQ: scqh, recvCQ: rcqh, sigAll: sigAll, pages: pages,
		sq: wq{ring: uverbs.Ring{N: sWR}, stride: sStride, maxSGE: sSGE, base: dma.PageSize,
			prodOff: uverbs.TxProdTail, consOff: uverbs.TxConsHead},
		rq: wq{ring: uverbs.Ring{N: rWR}, stride: rStride, maxSGE: rSGE, base: dma.PageSize * (1 + uint64(sendChunks)),
			prodOff: uverbs.RxProdTail, consOff: uverbs.RxConsHead},
	}
	if isSRQ {
		qp.srq = srqh
	}
	var h uint32
	if typ == abi.QPTypeGSI {
		h, e = 1, d.res.qp.put(1, qp)
	} else {
		h, e = d.res.qp.add(qp)
	}
	if e != nil {
		d.res.unpin(int(total))
		return nil, e
	}
	qp.Handle, qp.QPN = h, d.newQPN(h)
	pd.refs++
	scq.refs++
	rcq.refs++
	if s != nil {
		s.refs++
	}
	return &abi.CmdCreateQPResp{QPN: qp.QPN, QPHandle: qp.Handle,
		MaxSendWR: sWR, MaxRecvWR: rWR, MaxSendSGE: sSGE, MaxRecvSGE: rSGE}, nil
}

func (d *Device) cmdDestroyQP(req *abi.CmdDestroyQP) (abi.Response, *cmdErr) {
	h := req.QPHandle
	qp := d.res.qp.get(h)
	if qp == nil {
		return nil, fail(errInval, "qp_handle=%d: no such QP", h).as(hca.FindingHandle)
	}
	d.destroyQP(h, qp)
	return &abi.CmdDestroyQPResp{}, nil
}

// destroyQP discards the QP and its outstanding WQEs without completions.
func (d *Device) destroyQP(h uint32, qp *qp) {
	d.retire(qp)
	d.resetTransport(qp)
	d.res.unpin(len(qp.pages))
	if o := d.res.pd.get(qp.PD); o != nil {
		o.refs--
	}
	if c := d.res.cq.get(qp.sendCQ); c != nil {
		c.refs--
	}
	if c := d.res.cq.get(qp.recvCQ); c != nil {
		c.refs--
	}
	if s := d.res.srq.get(qp.srq); qp.srq != 0 && s != nil {
		s.refs--
	}
	d.res.qp.del(h)
}

// --- SRQ -------------------------------------------------------------------------

// srq is a shared receive queue.
type srq struct {
	handle uint32
	ctx    uint32
	pd     uint32
	pages  dma.Pages
	q      wq
	limit  uint32 // armed SRQ limit, 0 = disarmed
	refs   int
}

func (d *Device) cmdCreateSRQ(req *abi.CmdCreateSRQ) (abi.Response, *cmdErr) {
	pdir, pdh, nchunks := req.PdirDMA, req.PDHandle, req.NChunks
	maxWR, maxSGE, limit, typ := req.Attrs.MaxWR, req.Attrs.MaxSGE, req.Attrs.SRQLimit, req.SRQType
	pd := d.res.pd.get(pdh)
	if pd == nil {
		return nil, fail(errInval, "pd_handle=%d: no such PD", pdh).as(hca.FindingHandle)
	}
	if typ != abi.SRQTypeBasic {
		return nil, fail(errInval, "pvrdma_cmd_create_srq.srq_type=%d: not BASIC", typ)
	}
	if !uverbs.IsPow2(maxWR) || maxWR > d.caps.MaxSRQWR {
		return nil, fail(errInval, "pvrdma_cmd_create_srq.attrs.max_wr=%d: not a power of two in 1..%d", maxWR, d.caps.MaxSRQWR)
	}
	if maxSGE == 0 || maxSGE > d.caps.MaxSRQSGE {
		return nil, fail(errInval, "pvrdma_cmd_create_srq.attrs.max_sge=%d: not 1..%d", maxSGE, d.caps.MaxSRQSGE)
	}
	if limit > maxWR {
		return nil, fail(errInval, "pvrdma_cmd_create_srq.attrs.srq_limit=%d > max_wr=%d", limit, maxWR)
	}
	stride := uverbs.RQStride(maxSGE)
	need := 1 + (uint64(maxWR)*uint64(stride)+dma.PageSize-1)/dma.PageSize
	if uint64(nchunks) < need || nchunks > pagedir.MaxDirPages {
		return nil, fail(errInval, "pvrdma_cmd_create_srq.nchunks=%d: an SRQ of %dx%d B needs %d pages (at most %d)", nchunks, maxWR, stride, need, pagedir.MaxDirPages).as(hca.FindingPageDir)
	}
	pages, e := d.pinPages("SRQ", pdir, nchunks)
	if e != nil {
		return nil, e
	}
	s := &srq{ctx: pd.ctx, pd: pdh, pages: pages, limit: limit,
		q: wq{ring: uverbs.Ring{N: maxWR}, stride: stride, maxSGE: maxSGE, base: dma.PageSize,
			prodOff: uverbs.RxProdTail, consOff: uverbs.RxConsHead}}
	h, e := d.res.srq.add(s)
	if e != nil {
		d.res.unpin(int(nchunks))
		return nil, e
	}
	s.handle = h
	pd.refs++
	return &abi.CmdCreateSRQResp{SRQN: h}, nil
}

func (d *Device) cmdModifySRQ(req *abi.CmdModifySRQ) (abi.Response, *cmdErr) {
	h, mask := req.SRQHandle, req.AttrMask
	s := d.res.srq.get(h)
	if s == nil {
		return nil, fail(errInval, "srq_handle=%d: no such SRQ", h).as(hca.FindingHandle)
	}
	if mask&^abi.SRQAttrLimit != 0 {
		return nil, fail(errInval, "srq %d pvrdma_cmd_modify_srq.attr_mask=%#x: only SRQ_LIMIT can be modified", h, mask)
	}
	if mask&abi.SRQAttrLimit != 0 {
		limit := req.Attrs.SRQLimit
		if limit > s.q.ring.N {
			return nil, fail(errInval, "srq %d pvrdma_cmd_modify_srq.attrs.srq_limit=%d > max_wr=%d", h, limit, s.q.ring.N)
		}
		s.limit = limit
	}
	return nil, nil
}

func (d *Device) cmdQuerySRQ(req *abi.CmdQuerySRQ) (abi.Response, *cmdErr) {
	h := req.SRQHandle
	s := d.res.srq.get(h)
	if s == nil {
		return nil, fail(errInval, "srq_handle=%d: no such SRQ", h).as(hca.FindingHandle)
	}
	return &abi.CmdQuerySRQResp{Attrs: abi.SRQAttr{MaxWR: s.q.ring.N, MaxSGE: s.q.maxSGE, SRQLimit: s.limit}}, nil
}

func (d *Device) cmdDestroySRQ(req *abi.CmdDestroySRQ) (abi.Response, *cmdErr) {
	h := req.SRQHandle
	s := d.res.srq.get(h)
	if s == nil {
		return nil, fail(errInval, "srq_handle=%d: no such SRQ", h).as(hca.FindingHandle)
	}
	if s.refs > 0 {
		return nil, fail(errBusy, "srq_handle=%d: still used by %d QPs", h, s.refs)
	}
	d.destroySRQ(h, s)
	return nil, nil
}

func (d *Device) destroySRQ(h uint32, s *srq) {
	d.res.unpin(len(s.pages))
	if o := d.res.pd.get(s.pd); o != nil {
		o.refs--
	}
	d.res.srq.del(h)
}
