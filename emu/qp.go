package emu

import (
	"encoding/binary"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/transport"
	"github.com/hcaemu/hcaemu/uverbs"
)

// QP types (pvrdma_qp_type).
const (
	QPTypeGSI = 1
	QPTypeRC  = 2
	QPTypeUC  = 3
	QPTypeUD  = 4
)

// QP states (pvrdma_qp_state).
const (
	StateReset = iota
	StateInit
	StateRTR
	StateRTS
	StateSQD
	StateSQE
	StateErr
	numStates
)

var stateNames = [numStates]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

// MODIFY_QP attribute mask bits (IB).
const (
	AttrState           = 1 << 0
	AttrCurState        = 1 << 1
	AttrEnSQDAsync      = 1 << 2
	AttrAccessFlags     = 1 << 3
	AttrPKeyIndex       = 1 << 4
	AttrPort            = 1 << 5
	AttrQKey            = 1 << 6
	AttrAV              = 1 << 7
	AttrPathMTU         = 1 << 8
	AttrTimeout         = 1 << 9
	AttrRetryCnt        = 1 << 10
	AttrRNRRetry        = 1 << 11
	AttrRQPSN           = 1 << 12
	AttrMaxQPRdAtomic   = 1 << 13
	AttrAltPath         = 1 << 14
	AttrMinRNRTimer     = 1 << 15
	AttrSQPSN           = 1 << 16
	AttrMaxDestRdAtomic = 1 << 17
	AttrPathMigState    = 1 << 18
	AttrCap             = 1 << 19
	AttrDestQPN         = 1 << 20
	attrAll             = 1<<21 - 1
)

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

// AH is a primary or alternate path (pvrdma_ah_attr).
type AH struct {
	DGID         [16]byte
	FlowLabel    uint32
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
	DLID         uint16
	VLAN         uint16
	SL           uint8
	SrcPathBits  uint8
	StaticRate   uint8
	Flags        uint8
	PortNum      uint8
	DMAC         [6]byte
}

func decodeAH(b []byte) AH {
	le := binary.LittleEndian
	var a AH
	copy(a.DGID[:], b[0:16])
	a.FlowLabel = le.Uint32(b[16:])
	a.SGIDIndex, a.HopLimit, a.TrafficClass = b[20], b[21], b[22]
	a.DLID, a.VLAN = le.Uint16(b[24:]), le.Uint16(b[26:])
	a.SL, a.SrcPathBits, a.StaticRate, a.Flags, a.PortNum = b[28], b[29], b[30], b[31], b[32]
	copy(a.DMAC[:], b[33:39])
	return a
}

func (a *AH) encode(b []byte) {
	le := binary.LittleEndian
	copy(b[0:16], a.DGID[:])
	le.PutUint32(b[16:], a.FlowLabel)
	b[20], b[21], b[22] = a.SGIDIndex, a.HopLimit, a.TrafficClass
	le.PutUint16(b[24:], a.DLID)
	le.PutUint16(b[26:], a.VLAN)
	b[28], b[29], b[30], b[31], b[32] = a.SL, a.SrcPathBits, a.StaticRate, a.Flags, a.PortNum
	copy(b[33:39], a.DMAC[:])
}

// QPAttr is pvrdma_qp_attr (160 bytes).
type QPAttr struct {
	State, CurState, PathMTU, PathMigState uint32
	QKey, RQPSN, SQPSN, DestQPN            uint32
	AccessFlags                            uint32
	PKeyIndex, AltPKeyIndex                uint16
	EnSQDAsyncNotify, SQDraining           uint8
	MaxRdAtomic, MaxDestRdAtomic           uint8
	MinRNRTimer, PortNum, Timeout          uint8
	RetryCnt, RNRRetry, AltPortNum         uint8
	AltTimeout                             uint8
	Cap                                    [5]uint32
	AH, AltAH                              AH
}

// QPAttrSize is the size of pvrdma_qp_attr.
const QPAttrSize = 160

// DecodeQPAttr decodes a 160-byte pvrdma_qp_attr.
func DecodeQPAttr(b []byte) QPAttr {
	le := binary.LittleEndian
	var a QPAttr
	a.State, a.CurState, a.PathMTU, a.PathMigState = le.Uint32(b[0:]), le.Uint32(b[4:]), le.Uint32(b[8:]), le.Uint32(b[12:])
	a.QKey, a.RQPSN, a.SQPSN, a.DestQPN = le.Uint32(b[16:]), le.Uint32(b[20:]), le.Uint32(b[24:]), le.Uint32(b[28:])
	a.AccessFlags = le.Uint32(b[32:])
	a.PKeyIndex, a.AltPKeyIndex = le.Uint16(b[36:]), le.Uint16(b[38:])
	a.EnSQDAsyncNotify, a.SQDraining, a.MaxRdAtomic, a.MaxDestRdAtomic = b[40], b[41], b[42], b[43]
	a.MinRNRTimer, a.PortNum, a.Timeout, a.RetryCnt, a.RNRRetry = b[44], b[45], b[46], b[47], b[48]
	a.AltPortNum, a.AltTimeout = b[49], b[50]
	for i := range a.Cap {
		a.Cap[i] = le.Uint32(b[56+4*i:])
	}
	a.AH = decodeAH(b[80:120])
	a.AltAH = decodeAH(b[120:160])
	return a
}

// Encode writes the 160-byte pvrdma_qp_attr.
func (a *QPAttr) Encode(b []byte) {
	le := binary.LittleEndian
	le.PutUint32(b[0:], a.State)
	le.PutUint32(b[4:], a.CurState)
	le.PutUint32(b[8:], a.PathMTU)
	le.PutUint32(b[12:], a.PathMigState)
	le.PutUint32(b[16:], a.QKey)
	le.PutUint32(b[20:], a.RQPSN)
	le.PutUint32(b[24:], a.SQPSN)
	le.PutUint32(b[28:], a.DestQPN)
	le.PutUint32(b[32:], a.AccessFlags)
	le.PutUint16(b[36:], a.PKeyIndex)
	le.PutUint16(b[38:], a.AltPKeyIndex)
	b[40], b[41], b[42], b[43] = a.EnSQDAsyncNotify, a.SQDraining, a.MaxRdAtomic, a.MaxDestRdAtomic
	b[44], b[45], b[46], b[47], b[48] = a.MinRNRTimer, a.PortNum, a.Timeout, a.RetryCnt, a.RNRRetry
	b[49], b[50] = a.AltPortNum, a.AltTimeout
	for i, v := range a.Cap {
		le.PutUint32(b[56+4*i:], v)
	}
	a.AH.encode(b[80:120])
	a.AltAH.encode(b[120:160])
}

// qp is a queue pair.
type qp struct {
	handle, qpn uint32
	typ         uint8
	ctx         uint32
	pd          uint32
	sendCQ      uint32
	recvCQ      uint32
	srq         uint32 // 0 = own RQ
	sigAll      bool
	pages       dma.Pages
	sq, rq      wq
	state       uint8
	attr        QPAttr
	// The transport (bound when the QP first leaves RESET): rc for RC QPs,
	// ud for UD and GSI QPs, and env, what they reach the device through.
	rc  *transport.RC
	ud  *transport.UD
	env *qpEnv
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

var qpTransitions = func() (t [numStates][numStates]*transition) {
	set := func(from, to int, rcReq, rcOpt, udReq, udOpt uint32) {
		t[from][to] = &transition{req: [2]uint32{rcReq, udReq}, opt: [2]uint32{rcOpt, udOpt}}
	}
	for s := 0; s < numStates; s++ {
		set(s, StateReset, 0, 0, 0, 0)
		set(s, StateErr, 0, 0, 0, 0)
	}
	set(StateReset, StateInit,
		AttrPKeyIndex|AttrPort|AttrAccessFlags, 0,
		AttrPKeyIndex|AttrPort|AttrQKey, 0)
	set(StateInit, StateInit,
		0, AttrPKeyIndex|AttrPort|AttrAccessFlags,
		0, AttrPKeyIndex|AttrPort|AttrQKey)
	set(StateInit, StateRTR,
		AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer,
		AttrAltPath|AttrAccessFlags|AttrPKeyIndex,
		0, AttrPKeyIndex|AttrQKey)
	set(StateRTR, StateRTS,
		AttrSQPSN|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxQPRdAtomic,
		AttrCurState|AttrAltPath|AttrAccessFlags|AttrMinRNRTimer|AttrPathMigState,
		AttrSQPSN, AttrCurState|AttrQKey)
	rtsOpt := uint32(AttrCurState | AttrAccessFlags | AttrAltPath | AttrPathMigState | AttrMinRNRTimer)
	set(StateRTS, StateRTS, 0, rtsOpt, 0, AttrCurState|AttrQKey)
	set(StateRTS, StateSQD, 0, AttrEnSQDAsync, 0, AttrEnSQDAsync)
	set(StateSQD, StateRTS, 0, rtsOpt, 0, AttrCurState|AttrQKey)
	set(StateSQD, StateSQD, 0,
		AttrAV|AttrPathMTU|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxQPRdAtomic|
			AttrMaxDestRdAtomic|AttrAltPath|AttrAccessFlags|AttrPKeyIndex|AttrMinRNRTimer|AttrPathMigState,
		0, AttrPKeyIndex|AttrQKey)
	set(StateSQE, StateRTS, ^uint32(0), 0, 0, AttrCurState|AttrQKey) // RC has no SQE state
	return t
}()

// checkModify validates a MODIFY_QP against the state table and the device
// limits. It returns the target state.
func (d *Device) checkModify(q *qp, mask uint32, a *QPAttr) (uint8, *cmdErr) {
	if mask&^attrAll != 0 {
		return 0, fail(errInval, "QP %d: unknown attribute bits %#x", q.handle, mask&^attrAll)
	}
	cur := q.state
	if mask&AttrCurState != 0 && a.CurState != uint32(cur) {
		if a.CurState >= numStates {
			return 0, fail(errInval, "QP %d: cur_qp_state %d", q.handle, a.CurState)
		}
		return 0, fail(errInval, "QP %d: cur_qp_state %s, but the QP is in %s", q.handle, stateNames[a.CurState], stateNames[cur])
	}
	next := cur
	if mask&AttrState != 0 {
		if a.State >= numStates {
			return 0, fail(errInval, "QP %d: qp_state %d", q.handle, a.State)
		}
		next = uint8(a.State)
	}
	t := qpTransitions[cur][next]
	if t == nil {
		return 0, fail(errInval, "QP %d: illegal transition %s -> %s", q.handle, stateNames[cur], stateNames[next])
	}
	class := udClass
	if q.typ == QPTypeRC || q.typ == QPTypeUC {
		class = rcClass
	}
	req, opt := t.req[class], t.opt[class]
	if q.typ == QPTypeGSI {
		req &^= AttrPort // the MAD layer's RESET->INIT has no PORT
		opt |= AttrPort
	}
	if req == ^uint32(0) {
		return 0, fail(errInval, "QP %d: illegal transition %s -> %s for this QP type", q.handle, stateNames[cur], stateNames[next])
	}
	if missing := req &^ mask; missing != 0 {
		return 0, fail(errInval, "QP %d: %s -> %s lacks required attributes %#x", q.handle, stateNames[cur], stateNames[next], missing)
	}
	if extra := mask &^ (req | opt | AttrState | AttrCap); extra != 0 {
		return 0, fail(errInval, "QP %d: %s -> %s does not take attributes %#x", q.handle, stateNames[cur], stateNames[next], extra)
	}
	if mask&AttrPKeyIndex != 0 && uint32(a.PKeyIndex) >= uint32(d.caps.MaxPKeys) {
		return 0, fail(errInval, "QP %d: pkey_index %d", q.handle, a.PKeyIndex)
	}
	if mask&AttrPort != 0 {
		if e := d.checkPort(a.PortNum); e != nil {
			return 0, e
		}
	}
	if mask&AttrPathMTU != 0 && (a.PathMTU < 1 || a.PathMTU > mtu4096) {
		return 0, fail(errInval, "QP %d: path_mtu %d", q.handle, a.PathMTU)
	}
	if mask&AttrDestQPN != 0 && a.DestQPN >= 1<<24 {
		return 0, fail(errInval, "QP %d: dest_qp_num %#x", q.handle, a.DestQPN)
	}
	if mask&AttrMinRNRTimer != 0 && a.MinRNRTimer > 31 {
		return 0, fail(errInval, "QP %d: min_rnr_timer %d", q.handle, a.MinRNRTimer)
	}
	if mask&AttrTimeout != 0 && a.Timeout > 31 {
		return 0, fail(errInval, "QP %d: timeout %d", q.handle, a.Timeout)
	}
	if mask&AttrRetryCnt != 0 && a.RetryCnt > 7 {
		return 0, fail(errInval, "QP %d: retry_cnt %d", q.handle, a.RetryCnt)
	}
	if mask&AttrRNRRetry != 0 && a.RNRRetry > 7 {
		return 0, fail(errInval, "QP %d: rnr_retry %d", q.handle, a.RNRRetry)
	}
	if mask&AttrAccessFlags != 0 && a.AccessFlags&^(accLocalWrite|accRemoteWrite|accRemoteRead|accRemoteAtomic|accMWBind) != 0 {
		return 0, fail(errInval, "QP %d: access flags %#x", q.handle, a.AccessFlags)
	}
	if mask&AttrAV != 0 {
		if uint32(a.AH.SGIDIndex) >= d.caps.GIDTblLen || !d.res.gids[a.AH.SGIDIndex].Valid {
			return 0, fail(errInval, "QP %d: sgid_index %d is not a bound GID", q.handle, a.AH.SGIDIndex)
		}
	}
	return next, nil
}

func (d *Device) cmdModifyQP(q *req, p *resp) *cmdErr {
	h, mask := q.u32(16), q.u32(20)
	x := d.res.qp.get(h)
	if x == nil {
		return fail(errInval, "no QP %d", h)
	}
	a := DecodeQPAttr(q[24 : 24+QPAttrSize])
	next, e := d.checkModify(x, mask, &a)
	if e != nil {
		return e
	}
	s := &x.attr
	if mask&AttrEnSQDAsync != 0 {
		s.EnSQDAsyncNotify = a.EnSQDAsyncNotify
	}
	if mask&AttrAccessFlags != 0 {
		s.AccessFlags = a.AccessFlags
	}
	if mask&AttrPKeyIndex != 0 {
		s.PKeyIndex = a.PKeyIndex
	}
	if mask&AttrPort != 0 {
		s.PortNum = a.PortNum
	}
	if mask&AttrQKey != 0 {
		s.QKey = a.QKey
	}
	if mask&AttrAV != 0 {
		s.AH = a.AH
	}
	if mask&AttrPathMTU != 0 {
		s.PathMTU = a.PathMTU
	}
	if mask&AttrTimeout != 0 {
		s.Timeout = a.Timeout
	}
	if mask&AttrRetryCnt != 0 {
		s.RetryCnt = a.RetryCnt
	}
	if mask&AttrRNRRetry != 0 {
		s.RNRRetry = a.RNRRetry
	}
	if mask&AttrRQPSN != 0 {
		s.RQPSN = a.RQPSN & 0xFFFFFF
	}
	if mask&AttrMaxQPRdAtomic != 0 {
		s.MaxRdAtomic = uint8(min(uint32(a.MaxRdAtomic), d.caps.MaxQPInitRdAtom))
	}
	if mask&AttrAltPath != 0 {
		s.AltAH, s.AltPortNum, s.AltTimeout, s.AltPKeyIndex = a.AltAH, a.AltPortNum, a.AltTimeout, a.AltPKeyIndex
	}
	if mask&AttrMinRNRTimer != 0 {
		s.MinRNRTimer = a.MinRNRTimer
	}
	if mask&AttrSQPSN != 0 {
		s.SQPSN = a.SQPSN & 0xFFFFFF
	}
	if mask&AttrMaxDestRdAtomic != 0 {
		s.MaxDestRdAtomic = uint8(min(uint32(a.MaxDestRdAtomic), d.caps.MaxQPRdAtom))
	}
	if mask&AttrPathMigState != 0 {
		s.PathMigState = a.PathMigState
	}
	if mask&AttrDestQPN != 0 {
		s.DestQPN = a.DestQPN
	}
	d.setState(x, next)
	return nil
}

// setState moves a QP to a new state with the state's side effects.
func (d *Device) setState(x *qp, next uint8) {
	prev := x.state
	x.state = next
	d.bindTransport(x)
	d.configureTransport(x)
	// The transport moves first: RESET clears it, ERR flushes the requests
	// it holds before the ring's.
	switch {
	case x.rc != nil:
		x.rc.SetState(transport.State(next))
	case x.ud != nil:
		x.ud.SetState(transport.State(next))
	}
	switch next {
	case StateReset:
		// The guest zeroes the ring indices after RESET; forget ours.
		x.sq.cons, x.rq.cons = 0, 0
	case StateErr:
		if prev != StateErr {
			d.flush(x)
		}
	case StateRTS:
		if prev != StateRTS {
			d.eng.kick(kickQP, x.handle, kickSend)
		}
	case StateSQD:
		if prev != StateSQD {
			d.checkDrained(x)
		}
	}
	if prev != next {
		d.log.Debug("QP state", "qp", x.handle, "from", stateNames[prev], "to", stateNames[next])
	}
}

// checkDrained posts SQ_DRAINED for a QP in SQD with nothing in flight,
// when the guest asked for it.
func (d *Device) checkDrained(x *qp) {
	if x.state == StateSQD && (x.rc == nil || x.rc.Outstanding() == 0) && x.attr.EnSQDAsyncNotify != 0 {
		x.attr.EnSQDAsyncNotify = 0
		d.event(EvSQDrained, x.handle)
	}
}

// qpError moves a QP to ERR because of an error it caused or met, with the
// async event the driver expects.
func (d *Device) qpError(x *qp, ev uint32) {
	if x.state == StateErr {
		return
	}
	d.event(ev, x.handle)
	d.setState(x, StateErr)
	if x.srq != 0 {
		d.event(EvQPLastWQEReached, x.handle)
	}
}

func (d *Device) cmdQueryQP(q *req, p *resp) *cmdErr {
	h := q.u32(16)
	x := d.res.qp.get(h)
	if x == nil {
		return fail(errInval, "no QP %d", h)
	}
	a := x.attr
	a.State, a.CurState = uint32(x.state), uint32(x.state)
	a.Cap = [5]uint32{x.sq.ring.N, x.rq.ring.N, x.sq.maxSGE, x.rq.maxSGE, 0}
	a.Encode(p[16 : 16+QPAttrSize])
	return nil
}

func (d *Device) cmdCreateQP(q *req, p *resp) *cmdErr {
	pdir := q.u64(16)
	pdh, scqh, rcqh, srqh := q.u32(24), q.u32(28), q.u32(32), q.u32(36)
	sWR, rWR, sSGE, rSGE, inline := q.u32(40), q.u32(44), q.u32(48), q.u32(52), q.u32(56)
	total, sendChunks := uint32(q.u16(68)), uint32(q.u16(70))
	sigAll, typ, isSRQ := q.u8(74) != 0, q.u8(75), q.u8(76) != 0

	x := d.res.pd.get(pdh)
	if x == nil {
		return fail(errInval, "no PD %d", pdh)
	}
	ctx := x.ctx
	scq, rcq := d.res.cq.get(scqh), d.res.cq.get(rcqh)
	if scq == nil || rcq == nil {
		return fail(errInval, "no CQ %d/%d", scqh, rcqh)
	}
	if scq.ctx != ctx || rcq.ctx != ctx {
		return fail(errInval, "CQs %d/%d belong to another context", scqh, rcqh)
	}
	var s *srq
	if isSRQ {
		if s = d.res.srq.get(srqh); s == nil || s.ctx != ctx {
			return fail(errInval, "no SRQ %d in this context", srqh)
		}
		rWR, rSGE = 0, 0
	}
	switch typ {
	case QPTypeRC, QPTypeUD:
	case QPTypeGSI:
		if ctx != 0 {
			return fail(errInval, "GSI QP from user space")
		}
		if d.res.qp.get(1) != nil {
			return fail(errBusy, "port 1 already has a GSI QP")
		}
	default:
		return fail(errNotSup, "QP type %d", typ)
	}
	if !uverbs.IsPow2(sWR) || sWR > d.caps.MaxQPWR {
		return fail(errInval, "max_send_wr %d not a power of two in 1..%d", sWR, d.caps.MaxQPWR)
	}
	if !isSRQ && (!uverbs.IsPow2(rWR) || rWR > d.caps.MaxQPWR) {
		return fail(errInval, "max_recv_wr %d not a power of two in 1..%d", rWR, d.caps.MaxQPWR)
	}
	if sSGE == 0 || sSGE > d.caps.MaxSGE || (!isSRQ && (rSGE == 0 || rSGE > d.caps.MaxSGE)) {
		return fail(errInval, "SGE counts %d/%d outside 1..%d", sSGE, rSGE, d.caps.MaxSGE)
	}
	if inline != 0 {
		return fail(errInval, "max_inline_data %d: inline data is not supported", inline)
	}
	sStride, rStride := uverbs.SQStride(sSGE), uverbs.RQStride(rSGE)
	sPages := (uint64(sWR)*uint64(sStride) + dma.PageSize - 1) / dma.PageSize
	rPages := uint64(0)
	if !isSRQ {
		rPages = (uint64(rWR)*uint64(rStride) + dma.PageSize - 1) / dma.PageSize
	}
	if uint64(sendChunks) < sPages || uint64(total) < 1+uint64(sendChunks)+rPages {
		return fail(errInval, "QP pages %d (send %d) too few for SQ %dx%d and RQ %dx%d", total, sendChunks, sWR, sStride, rWR, rStride)
	}
	pages, e := d.pinPages("QP", pdir, total)
	if e != nil {
		return e
	}
	n := &qp{
		typ: typ, ctx: ctx, pd: pdh, sendCQ: scqh, recvCQ: rcqh, sigAll: sigAll, pages: pages,
		sq: wq{ring: uverbs.Ring{N: sWR}, stride: sStride, maxSGE: sSGE, base: dma.PageSize,
			prodOff: uverbs.TxProdTail, consOff: uverbs.TxConsHead},
		rq: wq{ring: uverbs.Ring{N: rWR}, stride: rStride, maxSGE: rSGE, base: dma.PageSize * (1 + uint64(sendChunks)),
			prodOff: uverbs.RxProdTail, consOff: uverbs.RxConsHead},
	}
	if isSRQ {
		n.srq = srqh
	}
	var h uint32
	if typ == QPTypeGSI {
		h, e = 1, d.res.qp.put(1, n)
	} else {
		h, e = d.res.qp.add(n)
	}
	if e != nil {
		d.res.unpin(int(total))
		return e
	}
	n.handle, n.qpn = h, h
	x.refs++
	scq.refs++
	rcq.refs++
	if s != nil {
		s.refs++
	}
	p.put32(16, n.qpn)
	p.put32(20, n.handle)
	p.put32(24, sWR)
	p.put32(28, rWR)
	p.put32(32, sSGE)
	p.put32(36, rSGE)
	p.put32(40, 0)
	return nil
}

func (d *Device) cmdDestroyQP(q *req, p *resp) *cmdErr {
	h := q.u32(16)
	x := d.res.qp.get(h)
	if x == nil {
		return fail(errInval, "no QP %d", h)
	}
	d.destroyQP(h, x)
	p.put32(16, 0)
	return nil
}

// destroyQP discards the QP and its outstanding WQEs without completions.
func (d *Device) destroyQP(h uint32, x *qp) {
	d.resetTransport(x)
	d.res.unpin(len(x.pages))
	if o := d.res.pd.get(x.pd); o != nil {
		o.refs--
	}
	if c := d.res.cq.get(x.sendCQ); c != nil {
		c.refs--
	}
	if c := d.res.cq.get(x.recvCQ); c != nil {
		c.refs--
	}
	if s := d.res.srq.get(x.srq); x.srq != 0 && s != nil {
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

func (d *Device) cmdCreateSRQ(q *req, p *resp) *cmdErr {
	pdir, pdh, nchunks := q.u64(16), q.u32(24), q.u32(28)
	maxWR, maxSGE, limit, typ := q.u32(32), q.u32(36), q.u32(40), q.u8(48)
	x := d.res.pd.get(pdh)
	if x == nil {
		return fail(errInval, "no PD %d", pdh)
	}
	if typ != 0 {
		return fail(errInval, "SRQ type %d", typ)
	}
	if !uverbs.IsPow2(maxWR) || maxWR > d.caps.MaxSRQWR {
		return fail(errInval, "SRQ max_wr %d not a power of two in 1..%d", maxWR, d.caps.MaxSRQWR)
	}
	if maxSGE == 0 || maxSGE > d.caps.MaxSRQSGE {
		return fail(errInval, "SRQ max_sge %d outside 1..%d", maxSGE, d.caps.MaxSRQSGE)
	}
	if limit > maxWR {
		return fail(errInval, "SRQ limit %d > max_wr %d", limit, maxWR)
	}
	stride := uverbs.RQStride(maxSGE)
	need := 1 + (uint64(maxWR)*uint64(stride)+dma.PageSize-1)/dma.PageSize
	if uint64(nchunks) < need || nchunks > dma.MaxDirPages {
		return fail(errInval, "SRQ of %dx%d needs %d pages, got %d", maxWR, stride, need, nchunks)
	}
	pages, e := d.pinPages("SRQ", pdir, nchunks)
	if e != nil {
		return e
	}
	s := &srq{ctx: x.ctx, pd: pdh, pages: pages, limit: limit,
		q: wq{ring: uverbs.Ring{N: maxWR}, stride: stride, maxSGE: maxSGE, base: dma.PageSize,
			prodOff: uverbs.RxProdTail, consOff: uverbs.RxConsHead}}
	h, e := d.res.srq.add(s)
	if e != nil {
		d.res.unpin(int(nchunks))
		return e
	}
	s.handle = h
	x.refs++
	p.put32(16, h)
	return nil
}

const (
	srqAttrMaxWR = 1
	srqAttrLimit = 2
)

func (d *Device) cmdModifySRQ(q *req, p *resp) *cmdErr {
	h, mask := q.u32(16), q.u32(20)
	s := d.res.srq.get(h)
	if s == nil {
		return fail(errInval, "no SRQ %d", h)
	}
	if mask&^srqAttrLimit != 0 {
		return fail(errInval, "SRQ %d: only the limit can be modified (mask %#x)", h, mask)
	}
	if mask&srqAttrLimit != 0 {
		limit := q.u32(32)
		if limit > s.q.ring.N {
			return fail(errInval, "SRQ %d: limit %d > max_wr %d", h, limit, s.q.ring.N)
		}
		s.limit = limit
	}
	return nil
}

func (d *Device) cmdQuerySRQ(q *req, p *resp) *cmdErr {
	h := q.u32(16)
	s := d.res.srq.get(h)
	if s == nil {
		return fail(errInval, "no SRQ %d", h)
	}
	p.put32(16, s.q.ring.N)
	p.put32(20, s.q.maxSGE)
	p.put32(24, s.limit)
	return nil
}

func (d *Device) cmdDestroySRQ(q *req, p *resp) *cmdErr {
	h := q.u32(16)
	s := d.res.srq.get(h)
	if s == nil {
		return fail(errInval, "no SRQ %d", h)
	}
	if s.refs > 0 {
		return fail(errBusy, "SRQ %d still used by %d QPs", h, s.refs)
	}
	d.destroySRQ(h, s)
	return nil
}

func (d *Device) destroySRQ(h uint32, s *srq) {
	d.res.unpin(len(s.pages))
	if o := d.res.pd.get(s.pd); o != nil {
		o.refs--
	}
	d.res.srq.del(h)
}
