package mlx5

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"time"

	doorbell "github.com/hcaemu/hcaemu/doorbell/mlx5"
	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/ib"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
	"github.com/hcaemu/hcaemu/emu/transport/rc"
	"github.com/hcaemu/hcaemu/emu/transport/ud"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// The data path of Stage 2 (spec §7): send doorbells through the UAR
// pages (latched per page: a 64-bit doorbell may come as two 32-bit
// writes) kick the QP through the core's engine; the engine's Service
// lets the QP's RC transport take the WQEs, which the device copies once
// out of the QP's buffer up to the producer its doorbell record names;
// completions become CQEs in the CQ's buffer (error CQEs, and flushes
// in ERR), an armed CQ posts a COMP EQE, a QP's affiliated error its QP
// event. Inline payloads are kept from the WQE's copy. RC packets go LRH/BTH over the IB subnet through the device's
// port (no RoCE wire): the IB path (remote LID, SL) is the model's, kept
// in the QP's env from its context's primary address path, and
// transport.Path stays the core's RoCE path, empty here.

// eqeCompCQN is the CQN's offset in a COMP EQE (struct mlx5_eqe_comp:
// six reserved words then the CQN, in the EQE's data); a QP event's
// (struct mlx5_eqe_qp_srq: five reserved words, the queue type, 0 for a
// QP, and the QPN) has the QPN at the same place.
const (
	eqeCompCQN  = ifc.EQEData + 24
	eqeQPType   = ifc.EQEData + 20
	eqeQPNumber = ifc.EQEData + 24
)

// qpEvents are the EQE types of a QP's affiliated errors (the events
// mlx5_ib's mlx5_ib_qp_event turns back into these).
var qpEvents = map[transport.Event]uint8{
	transport.EventQPFatal:       ifc.EventWQCatasError,
	transport.EventQPRequestErr:  ifc.EventWQInvalReqError,
	transport.EventQPAccessError: ifc.EventWQAccessError,
}

// qpEvent posts QP q's affiliated error event to the EQ that asked for
// events of its type (the lowest numbered), if any.
func (d *Device) qpEvent(q *qp, ev transport.Event) {
	typ, known := qpEvents[ev]
	if !known {
		typ = ifc.EventWQCatasError
	}
	d.asyncEvent(typ, eqeTypeQP, q.QPN) // srqlimit.go
}

// bfHalf is the size of each half of a BlueFlame register
// ((1<<log_bf_reg_size)/2, the drivers' buf_size): a send doorbell is the
// first 8 bytes of a half. Computed once, not on every doorbell.
var bfHalf = uint64(1) << capMax(ifc.CmdHCACapLogBFRegSize) / 2

// uarDoorbell is a write to a UAR page register other than the EQ
// doorbells: the page's latch pairs 32-bit halves; a whole send doorbell
// kicks its QP (the WQEs are read by the engine, not here), a whole CQ
// arm doorbell arms its CQ.
//
// The send doorbell registers are the first 8 bytes of each half of the
// BlueFlame registers (1<<log_bf_reg_size bytes each; the kernel and the
// provider ring the two halves in turn, bf->offset ^= buf_size, spec
// §7.4): a BlueFlame copy (the whole WQE written to the half, the
// provider's mlx5_bf_copy, in 8-byte stores or one long write) rings with
// its first 8 bytes, the control segment's, which are the doorbell; the
// rest is the WQE the buffer holds too, ignored.
func (d *Device) uarDoorbell(uar uint32, reg uint64, p []byte) {
	if reg >= doorbell.SendDoorbellStart && reg < doorbell.SendDoorbellEnd {
		if (reg-doorbell.SendDoorbellStart)%bfHalf >= 8 {
			return
		}
		if len(p) > 8 && reg%8 == 0 {
			p = p[:8]
		}
	}
	if d.fn.latches == nil {
		d.fn.latches = map[uint32]*doorbell.Latch{}
	}
	l := d.fn.latches[uar] // uar is held: the map is bounded by NumUARs
	if l == nil {
		l = &doorbell.Latch{}
		d.fn.latches[uar] = l
	}
	db, whole := l.Write(reg, p)
	if !whole {
		return
	}
	switch db.Kind {
	case doorbell.KindSend:
		s := db.Send()
		q := d.qpByQPN(s.QPN)
		if q == nil || !q.hasSQ || q.uar != uar {
			d.find(hca.FindingDoorbell, "ignored", "UAR %d send doorbell for qpn %#x: no QP with an SQ on this UAR", uar, s.QPN)
			return
		}
		d.stats.SendDoorbells++
		d.core.Kick(hca.TargetQP, q.Handle, hca.WorkSend)
	case doorbell.KindCQArm:
		d.armCQ(uar, db.CQArm())
	}
}

// qpByQPN is the QP whose number is qpn, nil for none.
func (d *Device) qpByQPN(qpn uint32) *qp {
	o := &d.fn.obj
	if o.qps.Limit() == 0 {
		return nil
	}
	q := o.qps.Get(hca.Handle(qpn, o.qpnBits))
	if q == nil || q.QPN != qpn {
		return nil
	}
	return q
}

// armCQ is a CQ arm doorbell: the next CQE (solicited: the next
// solicited or error CQE) posts a COMP EQE; if CQEs past the consumer
// index the doorbell names are already written, the event goes at once.
func (d *Device) armCQ(uar uint32, a doorbell.CQArm) {
	o := &d.fn.obj
	if o.cqs.Limit() == 0 {
		return
	}
	c := o.cqs.Get(a.CQN)
	if c == nil || c.uar != uar {
		d.find(hca.FindingDoorbell, "ignored", "UAR %d CQ arm doorbell for cqn %#x: no CQ on this UAR", uar, a.CQN)
		return
	}
	d.stats.CQArms++
	if (c.pi-a.CI)&0xffffff != 0 {
		c.armed = false
		d.compEvent(c)
		return
	}
	c.armed, c.armSol = true, a.Solicited()
}

// compEvent posts a COMP EQE for CQ c to its EQ.
func (d *Device) compEvent(c *cq) {
	e := d.fn.eqs[c.eqn]
	if e == nil {
		return
	}
	eqe := &d.scratch.eqe
	*eqe = [ifc.EQESize]byte{}
	eqe[ifc.EQEType] = ifc.EventComp
	binary.BigEndian.PutUint32(eqe[eqeCompCQN:], c.cqn&0xffffff)
	d.postEQE(e, eqe)
}

// bufAddr is the guest address of byte off of a queue buffer (pages of
// 1<<shift bytes from byte pageOffset of the first), and how many bytes
// follow it in its page; false beyond the pages.
func bufAddr(pas []uint64, shift uint8, pageOffset, off uint64) (uint64, uint64, bool) {
	at := pageOffset + off
	i := at >> shift
	if at < off || i >= uint64(len(pas)) {
		return 0, 0, false
	}
	in := at & (1<<shift - 1)
	return pas[i] + in, 1<<shift - in, true
}

// readBuf copies len(p) bytes at byte off of a queue buffer; writeBuf
// writes p there.
func (d *Device) readBuf(pas []uint64, shift uint8, pageOffset, off uint64, p []byte) error {
	return d.bufIO(pas, shift, pageOffset, off, p, d.readGuest)
}

func (d *Device) writeBuf(pas []uint64, shift uint8, pageOffset, off uint64, p []byte) error {
	return d.bufIO(pas, shift, pageOffset, off, p, d.writeGuest)
}

// bufIO does io on p at byte off of a queue buffer, page by page.
func (d *Device) bufIO(pas []uint64, shift uint8, pageOffset, off uint64, p []byte, io func([]byte, uint64) error) error {
	for len(p) > 0 {
		gpa, n, ok := bufAddr(pas, shift, pageOffset, off)
		if !ok {
			return errBuffer
		}
		n = min(n, uint64(len(p)))
		if err := io(p[:n], gpa); err != nil {
			return err
		}
		p, off = p[n:], off+n
	}
	return nil
}

var errBuffer = errors.New("beyond the queue buffer")

// --- Binding the RC transport -----------------------------------------------

// qpEnv is an mlx5 QP's transport.Env.
type qpEnv struct {
	d   *Device
	q   *qp
	mem mr.Space
	st  uverbs.ST // what the SQ's WQEs carry
	// The IB path: the remote LID and SL of the primary address path.
	dlid uint16
	sl   uint8
	// A datagram being received: its LRH's source LID and SL (its CQE's).
	rxSLID uint16
	rxSL   uint8
	// The SQ: its WQEBBs copied once into sq (the ring's image) from
	// sqCons up to sqStaged; sqCons is the counter of the next WQE.
	sq               []byte
	sqCons, sqStaged uint16
	wqe              []byte
	sw               uverbs.SendWQE
	sges             []mr.SGE
	// The RQ: the WQE at rqCons, copied once when peeked.
	rqCons   uint16
	rqPeeked bool
	// inline are the payloads of the inline WQEs taken, by SQ counter.
	inline    map[uint16]inlineData
	inlineGen uint32
	// binds are the user UMR WQEs taken (memory windows, mw.go), by SQ
	// counter.
	binds map[uint16]mwBind
	// rqPoll is the interval of the receive queue's polling in ERR
	// (pollRQ).
	rqPoll time.Duration
	// fastRegs are the kernel's UMR WQEs taken on a QP with fre (frwr.go),
	// by SQ counter.
	fastRegs map[uint16]umrReq
	rwqe     []byte
	rw       uverbs.RecvWQE
	recv     transport.RecvWR
	recvSt   transport.Status
	recvSegs []mr.Seg
	payload  []byte
	srqEnv   // receives from an SRQ (srqrecv.go)
}

// newEnv is the env of QP q, made when it first leaves RST.
func (d *Device) newEnv(q *qp) *qpEnv {
	mem := d.space()
	mem.QPN = q.QPN // type-2 memory windows (mw.go)
	return &qpEnv{d: d, q: q, mem: mem, sq: make([]byte, q.sqBytes), st: uverbs.ST(q.st)}
}

// setPath takes the IB path from the QP context's primary address path.
func (env *qpEnv) setPath() {
	ctx := env.q.ctx[:]
	env.dlid = uint16(ifc.PriPath(ifc.ADSRLID).Get(ctx))
	env.sl = uint8(ifc.PriPath(ifc.ADSSL).Get(ctx) & 0xf)
}

// reset forgets the queue counters (the QP back in RST; nothing for a QP
// that has no env yet).
func (env *qpEnv) reset() {
	if env == nil {
		return
	}
	env.sqCons, env.sqStaged, env.rqCons, env.rqPeeked = 0, 0, 0, false
	clear(env.inline)
	clear(env.binds)
	clear(env.fastRegs)
}

// space is the memory the device's transports reach.
func (d *Device) space() mr.Space {
	return mr.Space{Mem: d.mem, Regions: &d.fn.obj, Changed: d.wire.RevokeLoans, Filler: d.wire.Filler()}
}

// qpTransition gives an RC QP its transport when it leaves RST and hands
// it the merged context at every transition; 2RST forgets its state.
func (d *Device) qpTransition(q *qp) {
	d.traceState(q)
	if q.state == ifc.QPStateRST && q.env != nil {
		d.core.StopTimer(&q.QP) // a receive queue's poll in ERR (pollRQ)
	}
	if q.st == ifc.QPStUC {
		d.ucTransition(q) // uc.go
		return
	}
	if q.st != ifc.QPStRC && q.st != ifc.QPStXRC && q.st != ifc.QPStQP0 && q.st != ifc.QPStRegUMR && !isDatagram(q.st) {
		return
	}
	if q.state == ifc.QPStateRST {
		if q.RC != nil {
			q.RC.Reset()
			q.RC.SetState(transport.StateReset)
		}
		if q.UD != nil {
			q.UD.SetState(transport.StateReset)
		}
		q.env.reset()
		return
	}
	if q.env == nil {
		q.env = d.newEnv(q)
		switch {
		case q.st == ifc.QPStRC || q.st == ifc.QPStXRC:
			q.RC = rc.New(q.env, q.env.mem, d.log.With("qpn", q.QPN))
		case isDatagram(q.st):
			q.UD = ud.New(q.env, q.env.mem, d.log.With("qpn", q.QPN))
		}
	}
	if q.UD != nil {
		d.configureUD(q)
		return
	}
	if q.RC == nil {
		return // QP0: sendSink; the REG_UMR QP: sendUMR (umr.go)
	}
	ctx := q.ctx[:]
	var access uint32
	if ifc.QPCRRE.Get(ctx) != 0 {
		access |= mr.RemoteRead
	}
	if ifc.QPCRWE.Get(ctx) != 0 {
		access |= mr.RemoteWrite
	}
	if ifc.QPCRAE.Get(ctx) != 0 {
		access |= mr.RemoteAtomic
	}
	q.env.setPath()
	q.RC.Configure(rc.Config{
		PD: q.PD, DestQPN: ifc.QPCRemoteQPN.Get(ctx), PMTU: transport.PMTU(ifc.QPCMTU.Get(ctx)),
		SQPSN: ifc.QPCNextSendPSN.Get(ctx), RQPSN: ifc.QPCNextRcvPSN.Get(ctx),
		SQDepth:  uint32(q.sqBytes / uverbs.SendWQEBB),
		RetryCnt: uint8(ifc.QPCRetryCount.Get(ctx)), RNRRetry: uint8(ifc.QPCRNRRetry.Get(ctx)),
		Timeout: uint8(ifc.PriPath(ifc.ADSAckTimeout).Get(ctx)), MinRNRTimer: uint8(ifc.QPCMinRNRNak.Get(ctx)),
		MaxRdAtomic: logCount(ifc.QPCLogSRAMax.Get(ctx)), MaxDestRdAtomic: logCount(ifc.QPCLogRRAMax.Get(ctx)),
		Access:    access,
		Responder: q.env.responder(),
		XRC:       q.st == ifc.QPStXRC, // xrc.go
	})
	q.RC.SetState(transportState(q.state))
}

// logCount is 1<<v bounded to a uint8.
func logCount(v uint32) uint8 { return uint8(min(uint32(1)<<min(v, 7), 255)) }

// serviceQP does what a kicked QP asked for.
func (d *Device) serviceQP(h uint32, work hca.Work, gen uint64, expired bool) {
	o := &d.fn.obj
	if o.qps.Limit() == 0 {
		return
	}
	q := o.qps.Get(h)
	if q == nil || q.env == nil || q.state == ifc.QPStateRST {
		return
	}
	d.faultPending(q)
	if q.state == ifc.QPStateERR && expired {
		d.core.TimerExpired(&q.QP, gen) // the receive queue's poll (pollRQ)
	}
	if q.uc != nil {
		d.serviceUC(q, work) // uc.go
		return
	}
	if q.RC == nil {
		switch {
		case q.state == ifc.QPStateERR:
			q.env.flush()
		case work&hca.WorkSend == 0 || q.state != ifc.QPStateRTS:
		case q.UD != nil:
			q.env.sendUD()
		case q.st == ifc.QPStRegUMR:
			q.env.sendUMR() // umr.go
		default:
			q.env.sendSink()
		}
		return
	}
	if expired && d.core.TimerExpired(&q.QP, gen) {
		q.RC.Timeout()
	}
	if q.state == ifc.QPStateERR {
		if work&hca.WorkResp != 0 {
			q.RC.FlushResponses()
		}
		q.env.flush()
		return
	}
	if work&hca.WorkResp != 0 {
		q.RC.FlushResponses()
	}
	if work&(hca.WorkSend|hca.WorkTimer) != 0 {
		q.RC.Pump()
	}
}

// sendSink completes the send WQEs of QP0 without sending them: the
// subnet carries no SMPs (its SM assigns LIDs without MADs). The WQEs are
// taken and validated as any (an error CQE for a bad one).
func (env *qpEnv) sendSink() {
	env.eachSend(false, func(wr *transport.SendWR) {
		env.Complete(transport.Completion{WRID: wr.ID, Status: wr.Status, Opcode: transport.WCSend,
			ByteLen: wr.Length, Signaled: wr.Signaled})
	})
}

// eachSend takes the send WQEs posted so far (PendingSends: bounded by the
// SQ's depth), each copied once and decoded by TakeSend, and hands each to
// fn; rtsOnly: it stops once the QP left RTS (fn moved it to ERR).
func (env *qpEnv) eachSend(rtsOnly bool, fn func(wr *transport.SendWR)) {
	n, ok := env.PendingSends()
	var wr transport.SendWR
	for i := uint32(0); ok && i < n && (!rtsOnly || env.q.state == ifc.QPStateRTS); i++ {
		wr = transport.SendWR{Segs: wr.Segs[:0]}
		env.TakeSend(&wr)
		fn(&wr)
	}
}

// receiveFrame is an IB packet the port delivered (lock held): with the
// default P_Key, a datagram goes to its UD or GSI QPs (receiveDatagram),
// and any other to the RC QP its BTH names if it came from that QP's
// remote LID to this port's LID.
func (d *Device) receiveFrame(frame []byte) {
	defer fabric.Release(frame)
	d.portIn(len(frame))
	pkt, err := ib.Parse(frame)
	if err != nil || d.ibPort == nil || pkt.Transport.BTH.PKey()&0x7fff != 0x7fff {
		d.stats.RxDropped++
		return
	}
	if op := pkt.Transport.BTH.Opcode(); op == roce.UDSendOnly || op == roce.UDSendOnlyWithImmediate {
		if !d.receiveDatagram(&pkt) {
			d.stats.RxDropped++
		}
		return
	}
	q := d.qpByQPN(pkt.Transport.BTH.DestQP())
	if q != nil && q.uc != nil && q.env != nil {
		d.receiveUC(q, &pkt) // uc.go
		return
	}
	switch {
	case q == nil || q.RC == nil || q.env == nil:
		d.stats.RxDropped++
		return
	case pkt.LRH.DLID() != d.ibPort.LID(), pkt.LRH.SLID() != q.env.dlid:
		d.stats.RxDropped++
		d.stats.RxAddress++
		return
	}
	if q.st == ifc.QPStXRC && !d.xrcAccept(q, &pkt.Transport) { // xrc.go
		d.stats.RxDropped++
		return
	}
	q.CountRx(&pkt.Transport, 1, len(pkt.Transport.Payload))
	d.received(q, &pkt.Transport)
	q.RC.Receive(&pkt.Transport)
}

// --- transport.Env ------------------------------------------------------------

// qpFatal moves a QP whose queue the device could not read to ERR.
func (env *qpEnv) qpFatal(format string, args ...any) {
	env.d.find(hca.FindingRingIndex, "QP to ERR", format, args...)
	env.Error(transport.EventQPFatal)
}

// stage copies the SQ's WQEBBs the doorbell record's send counter adds,
// once each.
func (env *qpEnv) stage() bool {
	d, q := env.d, env.q
	rec := &d.scratch.sqRec
	if err := d.readGuest(rec[:], q.dbr); err != nil {
		env.qpFatal("qp %#x doorbell record: %v", q.QPN, err)
		return false
	}
	pi := doorbell.DecodeQPRecord(rec[:]).Send
	n := uint64(len(env.sq) / uverbs.SendWQEBB)
	if uint64(pi-env.sqCons) > n {
		env.qpFatal("qp %#x send counter %#x: %d WQEBBs past the consumer %#x, SQ of %d", q.QPN, pi, pi-env.sqCons, env.sqCons, n)
		return false
	}
	if pi-env.sqCons < env.sqStaged-env.sqCons {
		return true // the counter went back: nothing new
	}
	for ; env.sqStaged != pi; env.sqStaged++ {
		off := uint64(env.sqStaged) & (n - 1) * uverbs.SendWQEBB
		if err := d.readBuf(q.pas, q.pageShift, q.pageOffset, q.rqBytes+off, env.sq[off:off+uverbs.SendWQEBB]); err != nil {
			env.qpFatal("qp %#x SQ WQEBB %#x: %v", q.QPN, env.sqStaged, err)
			return false
		}
	}
	return true
}

func (env *qpEnv) PendingSends() (uint32, bool) {
	if len(env.sq) == 0 || !env.stage() {
		return 0, len(env.sq) == 0
	}
	n := uint16(len(env.sq) / uverbs.SendWQEBB)
	var count uint32
	for c := env.sqCons; c != env.sqStaged; {
		off := uint64(c&(n-1)) * uverbs.SendWQEBB
		ctrl, _ := uverbs.DecodeCtrlSeg(env.sq[off:])
		bbs := max(ctrl.WQEBBs(), 1) // a bad ds fails in TakeSend
		if bbs > env.sqStaged-c {
			break // not all posted yet
		}
		c += bbs
		count++
	}
	return count, true
}

func (env *qpEnv) TakeSend(wr *transport.SendWR) bool {
	if len(env.sq) == 0 {
		wr.Status = transport.StatusLocQPOpErr // no SQ (PendingSends says none)
		return true
	}
	n := uint16(len(env.sq) / uverbs.SendWQEBB)
	start := env.sqCons
	off := uint64(start&(n-1)) * uverbs.SendWQEBB
	ctrl, _ := uverbs.DecodeCtrlSeg(env.sq[off:])
	bbs := min(max(ctrl.WQEBBs(), 1), env.sqStaged-start)
	env.wqe = env.wqe[:0]
	for i := uint16(0); i < bbs; i++ {
		o := uint64((start+i)&(n-1)) * uverbs.SendWQEBB
		env.wqe = append(env.wqe, env.sq[o:o+uverbs.SendWQEBB]...)
	}
	env.sqCons = start + bbs
	err := env.sw.Decode(env.wqe, env.st, len(env.wqe)/16)
	w := &env.sw
	wr.ID = uint64(w.Ctrl.Opcode)<<16 | uint64(start)
	wr.Opcode = sendOpcode(w.Ctrl.Opcode)
	wr.Signaled, wr.Solicited, wr.Fence = w.Ctrl.Signaled(), w.Ctrl.Solicited(), w.Ctrl.FenceMode() != 0
	if err == nil && w.Ctrl.Opcode == uverbs.OpcodeUMR && env.st != uverbs.STRegUMR {
		if env.q.fre {
			env.takeFastReg(wr, start) // the kernel's REG_MR or LOCAL_INV (frwr.go)
		} else {
			env.takeBind(wr, start) // a memory-window bind or invalidation (mw.go)
		}
		return true
	}
	switch {
	case err != nil:
		env.d.find(hca.FindingWQE, "completed with LOC_LEN_ERR", "qp %#x SQ WQE %#x: %v", env.q.QPN, start, err)
		wr.Opcode, wr.Status = transport.OpSend, transport.StatusLocLenErr
		return true
	case wr.Opcode == transport.OpUnsupported:
		wr.Opcode, wr.Status = transport.OpSend, transport.StatusLocQPOpErr
		return true
	}
	if w.Segs&uverbs.HasAV != 0 {
		env.takeAV(wr, &w.AV)
	}
	switch wr.Opcode {
	case transport.OpSendImm, transport.OpWriteImm:
		wr.Imm = w.Ctrl.Imm
	case transport.OpSendInv:
		wr.InvalidateKey = w.Ctrl.Imm
	}
	wr.XRCSRQN = w.XRCSRQN // XRC initiators (the WQE's XRC segment)
	switch wr.Opcode {
	case transport.OpWrite, transport.OpWriteImm, transport.OpRead:
		wr.RemoteAddr, wr.RKey = w.RAddr.RAddr, w.RAddr.RKey
	case transport.OpCompSwap, transport.OpFetchAdd:
		wr.RemoteAddr, wr.RKey = w.RAddr.RAddr, w.RAddr.RKey
		wr.CompareAdd, wr.Swap = w.Atomic.SwapAdd, 0
		if wr.Opcode == transport.OpCompSwap {
			wr.CompareAdd, wr.Swap = w.Atomic.Compare, w.Atomic.SwapAdd
		}
	}
	if w.Segs&uverbs.HasInline != 0 {
		wr.Segs, wr.Length, wr.Status = env.takeInline(wr, start, w.Inline)
		if len(w.Data) == 0 || wr.Status != transport.StatusSuccess {
			return true
		}
		// Data segments after the inline bytes (UCX's active messages):
		// the message is the inline bytes, then theirs.
		inl, n := wr.Segs[0], wr.Length
		wr.Segs, wr.Length, wr.Status = env.segs(w.Data, wr.Opcode.WritesLocal(), wr.Segs[:0])
		if wr.Status == transport.StatusSuccess && uint64(wr.Length)+uint64(n) > math.MaxUint32 {
			wr.Status = transport.StatusLocLenErr
		}
		wr.Segs = slices.Insert(wr.Segs, 0, inl)
		wr.Length += n
		if wr.Status == transport.StatusSuccess && env.d.faultDMA(env.q, wr, w.Data) {
			wr.Status = transport.StatusLocProtErr
		}
		return true
	}
	wr.Segs, wr.Length, wr.Status = env.segs(w.Data, wr.Opcode.WritesLocal(), wr.Segs[:0])
	if wr.Status == transport.StatusSuccess && env.d.faultDMA(env.q, wr, w.Data) {
		wr.Status = transport.StatusLocProtErr
	}
	return true
}

// inlineHandle is the region handle of an inline payload's segment (no
// mkey has it): its Addr is the WQE's SQ counter, its Key the take's
// generation, and the bytes are the env's, copied out of the WQE.
const inlineHandle = ^uint32(0)

// inlineData is the payload of an inline WQE taken at an SQ counter.
type inlineData struct {
	gen  uint32
	data []byte
}

// takeInline keeps the inline payload of the WQE taken at SQ counter
// start (SEND and RDMA WRITE, with or without immediate, only) for its
// packets and retransmissions, until its completion.
func (env *qpEnv) takeInline(wr *transport.SendWR, start uint16, data []byte) ([]mr.Seg, uint32, transport.Status) {
	switch wr.Opcode {
	case transport.OpSend, transport.OpSendImm, transport.OpSendInv, transport.OpWrite, transport.OpWriteImm:
	default:
		return nil, 0, transport.StatusLocQPOpErr
	}
	if env.inline == nil {
		env.inline = map[uint16]inlineData{}
	}
	env.inlineGen++
	env.inline[start] = inlineData{gen: env.inlineGen, data: append([]byte(nil), data...)} // bounded by the SQ's slots
	seg := mr.Seg{Ref: mr.Ref{Handle: inlineHandle, Key: env.inlineGen}, Addr: uint64(start), Len: uint64(len(data))}
	return append(wr.Segs[:0], seg), uint32(len(data)), transport.StatusSuccess
}

// gather copies a packet's payload: an inline WQE's from what takeInline
// kept (then, for one with data segments after its inline bytes, the rest
// from guest memory), any other from guest memory.
func (env *qpEnv) gather(p *transport.Payload, dst []byte) error {
	if !isInline(p) {
		return p.Gather(env.mem, dst)
	}
	data, err := env.inlineBytes(p, len(dst))
	if err != nil {
		return err
	}
	k := copy(dst, data)
	if k == len(dst) {
		return nil
	}
	// Past the inline bytes: the data segments', from where the packet's
	// offset is past them.
	in := env.inline[uint16(p.Segs[0].Addr)] // inlineBytes checked it
	off := max(p.Off, uint64(len(in.data))) - uint64(len(in.data))
	return env.mem.Copy(p.Segs[1:], off, dst[k:], false)
}

// isInline reports whether a packet's payload starts with an inline
// WQE's bytes (and may go on with data segments).
func isInline(p *transport.Payload) bool {
	return len(p.Segs) >= 1 && p.Segs[0].Ref.Handle == inlineHandle
}

// inlineBytes is what a packet of n payload bytes carries of an inline
// WQE's bytes, as takeInline kept them: all n, or, for a WQE with data
// segments after them, what is left of them from the packet's offset.
func (env *qpEnv) inlineBytes(p *transport.Payload, n int) ([]byte, error) {
	seg := p.Segs[0]
	in, ok := env.inline[uint16(seg.Addr)]
	if !ok || in.gen != seg.Ref.Key {
		return nil, errInline
	}
	if p.Off >= uint64(len(in.data)) {
		if len(p.Segs) > 1 {
			return nil, nil // past them: the data segments only
		}
		if p.Off > uint64(len(in.data)) || n > 0 {
			return nil, errInline
		}
		return nil, nil
	}
	end := p.Off + uint64(n)
	if end > uint64(len(in.data)) {
		if len(p.Segs) == 1 {
			return nil, errInline
		}
		end = uint64(len(in.data))
	}
	return in.data[p.Off:end], nil
}

var errInline = errors.New("inline payload gone (its SQ slot reused)")

// segs validates data segments against the QP's PD (write: the device
// writes into them): every key is checked as the whole 32-bit mkey.
func (env *qpEnv) segs(data []uverbs.DataSeg, write bool, dst []mr.Seg) ([]mr.Seg, uint32, transport.Status) {
	env.sges = env.sges[:0]
	for _, s := range data {
		env.sges = append(env.sges, mr.SGE{Addr: s.Addr, Length: s.ByteCount, LKey: s.LKey})
	}
	segs, n, err := env.mem.SegsInto(dst, env.q.PD, env.sges, write)
	if st := transport.SegsStatus(err); st != transport.StatusSuccess {
		return nil, 0, st
	}
	return segs, n, transport.StatusSuccess
}

func (env *qpEnv) PeekRecv() (transport.RecvWR, transport.Status, bool) {
	d, q := env.d, env.q
	if env.usesSRQ() {
		return env.peekSRQ() // srqrecv.go
	}
	if env.rqPeeked {
		return env.recv, env.recvSt, true
	}
	if q.rqBytes == 0 {
		return transport.RecvWR{}, 0, false
	}
	rec := &d.scratch.rqRec
	if err := d.readGuest(rec[:], q.dbr); err != nil {
		return transport.RecvWR{}, 0, false
	}
	pi := doorbell.DecodeQPRecord(rec[:]).Recv
	stride := uint64(16) << ifc.QPCLogRQStride.Get(q.ctx[:])
	n := q.rqBytes / stride
	if pi == env.rqCons || uint64(pi-env.rqCons) > n {
		return transport.RecvWR{}, 0, false
	}
	if uint64(cap(env.rwqe)) < stride {
		env.rwqe = make([]byte, stride)
	}
	b := env.rwqe[:stride]
	off := uint64(env.rqCons) & (n - 1) * stride
	env.recv, env.recvSt = transport.RecvWR{ID: uint64(env.rqCons)}, transport.StatusSuccess
	if err := d.readBuf(q.pas, q.pageShift, q.pageOffset, off, b); err != nil {
		env.recvSt = transport.StatusLocProtErr
	} else if err := env.rw.Decode(b, false); err != nil {
		env.recvSt = transport.StatusLocLenErr
	} else {
		env.recvSegs, env.recv.Cap, env.recvSt = env.segs(env.rw.Data, true, env.recvSegs[:0])
		env.recv.Segs = env.recvSegs
	}
	env.rqPeeked = true
	return env.recv, env.recvSt, true
}

func (env *qpEnv) PopRecv() {
	if env.usesSRQ() {
		env.popSRQ() // srqrecv.go
		return
	}
	env.rqCons++
	env.rqPeeked = false
}

func (env *qpEnv) Complete(c transport.Completion) {
	d, q := env.d, env.q
	if !c.Recv {
		delete(env.inline, uint16(c.WRID)) // an inline WQE's payload
		delete(env.binds, uint16(c.WRID))  // a flushed user UMR's (mw.go)
		delete(env.fastRegs, uint16(c.WRID))
		if !c.Signaled && c.Status == transport.StatusSuccess {
			return
		}
	}
	if !d.faultCompletion(q, &c) {
		return
	}
	cqn, uidx := q.sndCQ, q.userIndex
	if c.Recv {
		cqn, uidx = env.recvCompletion() // srqrecv.go
	}
	cq := d.fn.obj.cqs.Get(cqn)
	if cq == nil {
		return
	}
	b := &d.scratch.cqe
	*b = [uverbs.CQESize64]byte{}
	geo := uverbs.CQ{LogSize: cq.logSize, CQESize: int(cq.cqeSize)}
	owner := geo.Owner(cq.pi)
	counter := uint16(c.WRID)
	if c.Status != transport.StatusSuccess {
		e := uverbs.ErrCQE{SRQN: uidx & 0xffffff, Syndrome: syndromeOf(c.Status), VendorErrSynd: uint8(c.Status),
			QPN: q.QPN, WQECounter: counter, Opcode: uverbs.CQEReqErr, Owner: owner}
		if c.Recv {
			e.Opcode = uverbs.CQERespErr
		} else {
			e.SWQEOpcode = uint8(c.WRID >> 16)
		}
		e.Encode(b[:])
	} else {
		cqe := uverbs.CQE{SRQNUIdx: uidx & 0xffffff, ByteCnt: c.ByteLen, QPN: q.QPN,
			WQECounter: counter, Opcode: uverbs.CQEReq, Owner: owner, Timestamp: d.clock.cqeTime()}
		if c.Recv {
			cqe.Opcode = uverbs.RespOpcode(c.Opcode == transport.WCRecvWriteImm, c.HasImm, c.Invalidated)
			// RC: the connected QP (flags_rqpn, as ibv_wc.src_qp).
			cqe.SrcQPN, cqe.Solicited, cqe.SLID = ifc.QPCRemoteQPN.Get(q.ctx[:])&0xffffff, c.Solicited, env.dlid
			if c.HasImm {
				cqe.ImmInvalPkey = binary.BigEndian.Uint32(c.Imm[:])
			} else if c.Invalidated {
				cqe.ImmInvalPkey = binary.LittleEndian.Uint32(c.Imm[:])
			}
			if q.UD != nil {
				env.udCQE(&cqe, &c)
			}
		} else {
			cqe.SOpcode = uint8(c.WRID >> 16)
		}
		cqe.Encode(b[:])
	}
	d.writeCQE(cq, b, c.Solicited || c.Status != transport.StatusSuccess)
	d.traceCQE(q, &c)
}

// writeCQE writes a CQE at the CQ's producer (the 64-byte structure last
// in a 128-byte CQE, its op_own byte last) and posts the completion event
// the CQ's arming asks for. A full CQ (by the consumer index of its
// doorbell record) drops the CQE.
func (d *Device) writeCQE(c *cq, b *[uverbs.CQESize64]byte, solicited bool) {
	rec := &d.scratch.cqRec
	if err := d.readGuest(rec[:], c.dbr); err != nil {
		return
	}
	ci := doorbell.DecodeCQRecord(rec[:]).CI
	if (c.pi-ci)&0xffffff >= uint32(1)<<c.logSize {
		d.stats.CQOverruns++
		d.find(hca.FindingCQOverrun, "the CQE is dropped", "cq %#x overrun: producer %#x, consumer %#x", c.cqn, c.pi, ci)
		return
	}
	geo := uverbs.CQ{LogSize: c.logSize, CQESize: int(c.cqeSize)}
	off := geo.Offset(c.pi) // the 64-byte structure, last in a 128-byte CQE
	if d.writeBuf(c.pas, c.pageShift, c.pageOffset, off, b[:uverbs.OpOwnOffset]) != nil ||
		d.writeBuf(c.pas, c.pageShift, c.pageOffset, off+uverbs.OpOwnOffset, b[uverbs.OpOwnOffset:]) != nil {
		return
	}
	c.pi++
	d.stats.CQEs++
	if c.armed && (!c.armSol || solicited) {
		c.armed = false
		d.compEvent(c)
	}
}

// Error moves the QP to ERR with its affiliated event (an EQE to the
// async EQ); the engine then flushes its queues.
func (env *qpEnv) Error(ev transport.Event) {
	q := env.q
	if q.state == ifc.QPStateERR {
		return // flushing already (a queue unreadable while flushing)
	}
	q.state = ifc.QPStateERR
	if q.RC != nil {
		q.RC.SetState(transport.StateErr)
	}
	if q.uc != nil {
		q.uc.SetState(transport.StateErr)
	}
	if q.UD != nil {
		q.UD.SetState(transport.StateErr)
	}
	env.d.traceState(q)
	env.d.qpEvent(q, ev)
	env.Kick(transport.WorkSend, false)
}

// flushBatch bounds the WQEs one service of a QP in ERR flushes: the
// queues are bounded, and a flooding guest waits for the next kick.
const flushBatch = 1 << 16

// flush completes every WQE posted to a QP in ERR with WR_FLUSH_ERR
// (error CQEs, signaled or not, as the hardware does).
func (env *qpEnv) flush() {
	q := env.q
	env.eachSend(false, func(wr *transport.SendWR) { // at most the SQ's depth, below flushBatch
		env.Complete(transport.Completion{WRID: wr.ID, Status: transport.StatusWRFlushErr, Signaled: true})
	})
	flushed := false
	for i := 0; q.rqBytes != 0 && i < flushBatch; i++ {
		rwr, _, posted := env.PeekRecv()
		if !posted {
			break
		}
		env.PopRecv()
		env.Complete(transport.Completion{WRID: rwr.ID, Status: transport.StatusWRFlushErr, Recv: true})
		flushed = true
	}
	env.pollRQ(flushed)
}

// Receive queue polling in ERR. A receive posted to a QP in ERR is
// flushed like those posted before (mlx5_ib_drain_rq, which the kernel's
// ULPs run at teardown, moves the QP to ERR, posts one receive and waits
// for its flush CQE without a timeout), but the driver rings no doorbell
// for receives: it only moves the doorbell record. So while a QP with a
// receive queue is in ERR the device reads its doorbell record on the
// QP's timer, every rqPollMin at first, backing off to rqPollMax while
// nothing new is posted. A device made with a step clock (recording and
// replay, whose device is driven by its inputs alone: tap.go) reads
// them at an input instead, every read of the health counter (the
// driver's health poll reads it every 2 s), so a recording replays the
// same reads.
const (
	rqPollMin = time.Millisecond
	// rqPollMax bounds what QPs left in ERR cost: a guest that leaves
	// its 65,536 QPs there makes the device read 65,536 doorbell records
	// a second, not a million.
	rqPollMax = time.Second
)

// pollRQsStepped kicks every QP in ERR with a receive queue (lock held;
// a step-clock device's health counter read): its Service reads the
// doorbell record and flushes what is new. Bounded by the QP table.
func (d *Device) pollRQsStepped() {
	o := &d.fn.obj
	if !d.clock.step || o.qps.Limit() == 0 {
		return
	}
	for _, h := range o.qps.Handles() {
		if q := o.qps.Get(h); q.state == ifc.QPStateERR && q.rqBytes != 0 && q.env != nil {
			d.core.Kick(hca.TargetQP, q.Handle, hca.WorkSend)
		}
	}
}

// pollRQ arms the QP's timer for the next read of its receive doorbell
// record (lock held; the QP is in ERR): soon after a flush, later after
// a read that found nothing.
func (env *qpEnv) pollRQ(flushed bool) {
	q := env.q
	if q.rqBytes == 0 || q.state != ifc.QPStateERR || env.d.clock.step {
		return
	}
	if flushed || env.rqPoll == 0 {
		env.rqPoll = rqPollMin
	} else {
		env.rqPoll = min(2*env.rqPoll, rqPollMax)
	}
	env.d.core.ArmTimer(&q.QP, env.rqPoll)
}

func (env *qpEnv) Drained() {}
func (env *qpEnv) Publish() {}

// Path is a connected QP's IB path: the remote LID and SL of its primary
// address path (no GRH: the subnet is one); a QP without a remote LID
// sends nothing.
func (env *qpEnv) Path() (transport.Path, bool) {
	return transport.Path{DLID: env.dlid, SL: env.sl}, env.dlid != 0
}

// Transmit builds an IB packet (LRH, a GRH when the path is global, BTH...,
// ICRC, VCRC) and sends it through the device's port.
func (env *qpEnv) Transmit(path transport.Path, f roce.PacketFields, payload transport.Payload) error {
	d := env.d
	if d.ibPort == nil {
		return nil // no subnet: the packet is lost
	}
	if d.portDown() {
		d.x.port.lost.Add(1)
		return nil // a port held down by a fault: lost
	}
	if sent, err := env.transmitDirect(&path, &f, &payload); sent {
		return err
	}
	frame := fabric.NewFrame()
	f.Payload = nil
	if payload.Len > 0 {
		// Gathered where the packet carries it, so that ib.Build does
		// not copy it again (roce.Build leaves a payload at its final
		// offset in place).
		f.Payload = env.payloadAt(frame, f.BTH.Opcode, payload.Len, path.Global)
		if err := env.gather(&payload, f.Payload); err != nil {
			fabric.Release(frame)
			return err
		}
	}
	pf := ib.PacketFields{LRH: ib.LRHFields{SL: path.SL, DLID: path.DLID, SLID: d.ibPort.LID()}, Transport: f}
	var grh ib.GRHFields
	if path.Global {
		grh = ib.GRHFields{TClass: path.TClass, FlowLabel: path.FlowLabel, HopLmt: path.HopLimit,
			SGID: d.ibPort.GID(), DGID: path.Dst.As16()}
		pf.GRH = &grh
	}
	pkt, err := ib.Build(frame, &pf)
	if err != nil {
		fabric.Release(frame)
		return err
	}
	if !d.ibSend(pkt) {
		return transport.ErrPeerBusy
	}
	again := env.q.CountTx(&f, payload.Len)
	d.sent(env.q, &f, payload.Len, len(pkt), again)
	return nil
}

// payloadAt is where a packet of opcode o built into frame carries its n
// payload bytes (after the LRH, the GRH when global, the BTH and o's
// extended headers), or env's own buffer when that is not in frame.
func (env *qpEnv) payloadAt(frame []byte, o roce.Opcode, n int, global bool) []byte {
	if t, err := roce.PacketLen(o, 0); err == nil {
		if off := ib.HeaderLen(global) + t - roce.ICRCSize; off+n <= len(frame) {
			return frame[off : off+n]
		}
	}
	if cap(env.payload) < n {
		env.payload = make([]byte, n)
	}
	return env.payload[:n]
}

// TransmitRun sends a run when the subnet carries batches (ib.go); a
// device tracing its packets takes none: they go one at a time.
func (env *qpEnv) TransmitRun(path transport.Path, f roce.PacketFields, payload transport.Payload, n int) (int, error) {
	d := env.d
	if !d.directOK(&path) || n < 1 || isInline(&payload) {
		return 0, nil
	}
	taken, err := d.wire.TransmitRun(&path, &f, &payload, n, env.mem)
	if err == nil && taken > 0 {
		env.q.CountTxRun(&f, payload.Len/n*taken, taken)
	}
	return taken, err
}

func (env *qpEnv) ArmTimer(dur time.Duration) { env.d.core.ArmTimer(&env.q.QP, dur) }
func (env *qpEnv) StopTimer()                 { env.d.core.StopTimer(&env.q.QP) }

func (env *qpEnv) Kick(work transport.Work, later bool) { env.d.core.KickQP(env.q.Handle, work, later) }

// Sync waits until every doorbell written and every packet received
// before the call has been processed (tests and fake drivers use it
// instead of sleeping).
func (d *Device) Sync() { d.core.Sync() }
