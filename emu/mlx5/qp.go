package mlx5

import (
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/transport"
	"github.com/hcaemu/hcaemu/emu/transport/uc"
)

// qp is a queue pair (spec §6.7): the core's hca.QP (handle, QPN, PD),
// its service type and state, the QP context as CREATE_QP set it and
// every transition since merged into it (what QUERY_QP returns), and what
// its creation named and the data path of Stage 2 needs: the CQs, the SRQ
// and XRC domain, the UAR its SQ doorbells come through, the doorbell
// record and the pages of its buffer (RQ at 0, SQ after it).
type qp struct {
	hca.QP
	st    uint8
	state uint8
	ctx   [ifc.QPCSize]byte
	// What the QP names (0: nothing): counted in their refs.
	sndCQ, rcvCQ, srqn, xrcdn uint32
	uar                       uint32
	hasSQ                     bool
	userIndex                 uint32
	// fre: fast registration enabled (the kernel creates its QPs with
	// it): the QP's UMR WQEs are the kernel's REG_MR and LOCAL_INV
	// (frwr.go), a user QP's are memory-window binds (mw.go).
	fre              bool
	dbr              uint64
	pageShift        uint8
	pageOffset       uint64
	pas              []uint64
	rqBytes, sqBytes uint64
	// env is the transport's environment (datapath.go), from the first
	// transition out of RST.
	env *qpEnv
	// uc is a UC QP's transport (uc.go), bound with env.
	uc *uc.QP
	// mcgs counts the multicast groups the QP is attached to (ud.go).
	mcgs int
	// fault is the QP's deferred fault (faults.go).
	fault qpFault
}

// stNames names the service types the device takes.
var stNames = map[uint32]string{
	ifc.QPStRC: "RC", ifc.QPStUC: "UC", ifc.QPStUD: "UD", ifc.QPStXRC: "XRC",
	ifc.QPStQP0: "QP0", ifc.QPStQP1: "QP1", ifc.QPStRegUMR: "REG_UMR",
}

var stateNames = [ifc.NumQPStates]string{"RST", "INIT", "RTR", "RTS", "SQER", "SQD", "ERR", "SQ_DRAINING"}

// qpField names a create_qp_in.qpc field for findings.
func qpField(st, name string) string { return st + ".qpc." + name }

// createQP: CREATE_QP. The qpc: a service type the device implements (RC,
// UC, UD, XRC, and QP0/QP1 — ordinary hardware QPNs, the wire's 0 and 1
// being the device's business — and the kernel's REG_UMR QP), an existing
// PD, send CQ (unless no_sq) and receive CQ (unless a zero-length RQ),
// the RQ type (regular, SRQ, zero-length) with its SRQ, the XRC domain it
// names, the UAR of its SQ doorbells, SQ and RQ sizes within
// log_max_qp_sz and max_wqe_sz_rq, the doorbell record and the PAS
// covering RQ then SQ from page_offset. The state is RST and the QPN the
// core's (hca.QPNs: the handle in its low bits); user_index (cqe_version
// 1) is kept for the CQEs.
func (d *Device) createQP(in, out []byte) result {
	const op = ifc.OpCreateQP
	const st = "create_qp_in"
	o := &d.fn.obj
	qpc := ifc.QPInQPC.Bytes(in)
	get := func(f ifc.Field) uint32 { return f.Get(qpc) }
	q := &qp{st: uint8(get(ifc.QPCSt)), hasSQ: get(ifc.QPCNoSQ) == 0, uar: get(ifc.QPCUARPage),
		sndCQ: get(ifc.QPCCQNSnd), rcvCQ: get(ifc.QPCCQNRcv), xrcdn: get(ifc.QPCXRCD),
		userIndex: get(ifc.QPCUserIndex), dbr: ifc.QPCDBRAddr.Get64(qpc), fre: get(ifc.QPCFre) != 0}
	q.PD = get(ifc.QPCPD)
	rqType := get(ifc.QPCRQType)
	srqn := get(ifc.QPCSRQN)
	logRQ, logStride, logSQ := get(ifc.QPCLogRQSize), get(ifc.QPCLogRQStride), get(ifc.QPCLogSQSize)
	lps := get(ifc.QPCLogPageSize)
	maxQPSz := capMax(ifc.CmdHCACapLogMaxQPSz)
	if _, known := stNames[uint32(q.st)]; !known {
		return d.badField(op, "%s=%#x: RC, UC, UD, XRC, QP0, QP1 or REG_UMR", qpField(st, "st"), q.st)
	}
	switch {
	case ifc.CreateQPInInputQPN.Get(in) != 0:
		return d.badField(op, "%s.input_qpn=%#x: the device chooses QPNs", st, ifc.CreateQPInInputQPN.Get(in))
	case rqType != ifc.RQTypeRegular && rqType != ifc.RQTypeSRQ && rqType != ifc.RQTypeZeroLen:
		return d.badField(op, "%s=%d: regular (0), SRQ (1) or zero-length (3)", qpField(st, "rq_type"), rqType)
	case rqType == ifc.RQTypeRegular && logRQ > maxQPSz:
		return d.badField(op, "%s=%d > log_max_qp_sz=%d", qpField(st, "log_rq_size"), logRQ, maxQPSz)
	case rqType == ifc.RQTypeRegular && logStride+4 > maxLogRQWQE():
		return d.badField(op, "%s=%d: RQ WQEs of %d bytes > max_wqe_sz_rq=%d", qpField(st, "log_rq_stride"), logStride, 16<<logStride, capMax(ifc.CmdHCACapMaxWQESzRQ))
	case q.hasSQ && logSQ > maxQPSz:
		return d.badField(op, "%s=%d > log_max_qp_sz=%d", qpField(st, "log_sq_size"), logSQ, maxQPSz)
	case lps > maxLogPageSize:
		return d.badField(op, "%s=%d > %d", qpField(st, "log_page_size"), lps, maxLogPageSize)
	}
	// The objects it names.
	// The kernel's REG_UMR QP names no PD: mlx5_ib sets latency_sensitive
	// instead (create_kernel_qp, 6.12); its UMR WQEs name the mkeys.
	if q.st != ifc.QPStRegUMR || q.PD != 0 {
		if o.pds.Get(q.PD) == nil {
			return d.badRef(op, qpField(st, "pd"), q.PD, "PD")
		}
	}
	if (q.hasSQ || q.sndCQ != 0) && o.cqs.Get(q.sndCQ) == nil {
		return d.badRef(op, qpField(st, "cqn_snd"), q.sndCQ, "CQ")
	}
	if (rqType != ifc.RQTypeZeroLen || q.rcvCQ != 0) && o.cqs.Get(q.rcvCQ) == nil {
		return d.badRef(op, qpField(st, "cqn_rcv"), q.rcvCQ, "CQ")
	}
	// The driver points every QP's srqn_rmpn_xrqn at an SRQ (its device
	// resource s1 when the QP has its own RQ): whatever it names exists.
	if (rqType == ifc.RQTypeSRQ || srqn != 0) && o.srqs.Get(srqn) == nil {
		return d.badRef(op, qpField(st, "srqn_rmpn_xrqn"), srqn, "SRQ")
	}
	q.srqn = srqn // named, so counted (s1 too): the SRQ outlives the QP
	if q.xrcdn != 0 && o.xrcds.Get(q.xrcdn) == nil {
		return d.badRef(op, qpField(st, "xrcd"), q.xrcdn, "XRCD")
	}
	if q.hasSQ {
		if _, held := d.fn.uars[q.uar]; !held {
			return d.badRef(op, qpField(st, "uar_page"), q.uar, "UAR ALLOC_UAR handed out")
		}
	}
	// The buffer: RQ at 0, SQ after it (spec §6.7.1).
	if rqType == ifc.RQTypeRegular {
		q.rqBytes = uint64(16<<logStride) << logRQ
	}
	if q.hasSQ {
		q.sqBytes = uint64(ifc.SendWQEBB) << logSQ
	}
	q.pageShift = uint8(ifc.AdapterPageShift + lps)
	q.pageOffset = uint64(get(ifc.QPCPageOffset)) << (q.pageShift - 6)
	if q.rqBytes+q.sqBytes != 0 {
		if r := d.checkDBR(op, qpField(st, "dbr_addr"), q.dbr, 8, 8); r != ok {
			return r
		}
	}
	pas, r := d.readPAS(op, in, pasList{st: st, at: ifc.PASOffset, shift: q.pageShift, off: q.pageOffset,
		n: q.rqBytes + q.sqBytes, synd: SyndPAS, lenSynd: SyndPASLen})
	if r != ok {
		return r
	}
	q.pas = pas
	h, r := add(d, &o.qps, q, op)
	if r != ok {
		d.fn.pins.Unpin(len(pas))
		return r
	}
	q.Handle = h
	q.QPN = d.qpns.QPN(h, o.qpnBits)
	copy(q.ctx[:], qpc)
	ifc.QPCState.Set(q.ctx[:], ifc.QPStateRST)
	d.qpRefs(q, 1)
	ifc.ObjOut.Set(out, q.QPN)
	return ok
}

// qpRefs counts (by +1) or uncounts (by -1) what QP q names.
func (d *Device) qpRefs(q *qp, by int) {
	o := &d.fn.obj
	if p := o.pds.Get(q.PD); p != nil {
		p.refs += by
	}
	if c := o.cqs.Get(q.sndCQ); c != nil {
		c.refs += by
	}
	if c := o.cqs.Get(q.rcvCQ); c != nil {
		c.refs += by
	}
	if s := o.srqs.Get(q.srqn); s != nil {
		s.refs += by
	}
	if x := o.xrcds.Get(q.xrcdn); x != nil {
		x.refs += by
	}
}

// lookupQP finds the QP a command's qpn names: the handle in its low bits,
// then the whole QPN.
func (d *Device) lookupQP(op ifc.Opcode, field string, in []byte) (*qp, result) {
	qpn := ifc.ObjIn.Get(in)
	q := d.fn.obj.qps.Get(hca.Handle(qpn, d.fn.obj.qpnBits))
	if q == nil || q.QPN != qpn {
		return nil, d.unknown(op, field, qpn, "QP")
	}
	return q, ok
}

// destroyQP: DESTROY_QP (the driver moves the QP to RST first; from any
// state the QP goes).
func (d *Device) destroyQP(in, _ []byte) result {
	q, r := d.lookupQP(ifc.OpDestroyQP, "destroy_qp_in.qpn", in)
	if r != ok {
		return r
	}
	if q.RC != nil {
		q.RC.Reset()
	}
	d.core.StopTimer(&q.QP) // the RC timers, a receive queue's poll in ERR (datapath.go)
	d.detachAll(q)
	d.qpRefs(q, -1)
	d.fn.pins.Unpin(len(q.pas))
	d.retire(q)
	d.fn.obj.qps.Del(q.Handle)
	return ok
}

// queryQP: QUERY_QP: the merged context with the current state.
func (d *Device) queryQP(in, out []byte) result {
	q, r := d.lookupQP(ifc.OpQueryQP, "query_qp_in.qpn", in)
	if r != ok {
		return r
	}
	ctx := ifc.QueryQPOutQPC.Bytes(out)
	copy(ctx, q.ctx[:])
	ifc.QPCState.Set(ctx, uint32(q.state))
	return ok
}

// --- State transitions -------------------------------------------------------

// qpClass groups the service types by what their transitions carry.
type qpClass uint8

const (
	classRC qpClass = iota // RC and XRC
	classUC
	classUD // UD, QP0, QP1 and the REG_UMR QP
	numClasses
)

func classOf(st uint8) qpClass {
	switch st {
	case ifc.QPStRC, ifc.QPStXRC:
		return classRC
	case ifc.QPStUC:
		return classUC
	}
	return classUD
}

// transition is one modify command: the state it leaves (any, for 2RST)
// and the one it enters, and per class the fields it requires (merged
// always) and the optional ones (merged when their opt_param_mask bit is
// set, the bits allowed being the driver's opt_mask for the transition).
type transition struct {
	name     string // the input structure: rst2init_qp_in
	from     int    // -1: any
	to       uint8
	required [numClasses][]ifc.Field
	optional [numClasses]map[uint32][]ifc.Field
}

// The fields a transition carries, in groups (spec §6.7.2).
var (
	// pathFields is an address path as INIT2RTR sets it (mlx5_set_path):
	// all of it but the P_Key index (optional) and the ACK timeout (RTR2RTS).
	pathFields = []ifc.Field{ifc.ADSGRH, ifc.ADSMLID, ifc.ADSRLID, ifc.ADSSrcAddrIndex, ifc.ADSStatRate,
		ifc.ADSHopLimit, ifc.ADSTClass, ifc.ADSFlowLabel, ifc.ADSRGIDRIP, ifc.ADSDSCP, ifc.ADSUDPSport,
		ifc.ADSEthPrio, ifc.ADSSL, ifc.ADSVhcaPortNum, ifc.ADSRMAC4732, ifc.ADSRMAC310}
	priPath = paths(ifc.PriPath, pathFields)
	altPath = append(paths(ifc.AltPath, pathFields), ifc.AltPath(ifc.ADSPKeyIndex), ifc.AltPath(ifc.ADSAckTimeout))
	fRRE    = []ifc.Field{ifc.QPCRRE}
	fRWE    = []ifc.Field{ifc.QPCRWE}
	fRAE    = []ifc.Field{ifc.QPCRAE, ifc.QPCAtomicMode}
	fPKey   = []ifc.Field{ifc.PriPath(ifc.ADSPKeyIndex)}
	fQKey   = []ifc.Field{ifc.QPCQKey}
	fPM     = []ifc.Field{ifc.QPCPMState}
	fRNR    = []ifc.Field{ifc.QPCMinRNRNak}
	fPort   = []ifc.Field{ifc.PriPath(ifc.ADSVhcaPortNum)}
)

func paths(at func(ifc.Field) ifc.Field, fs []ifc.Field) []ifc.Field {
	out := make([]ifc.Field, len(fs))
	for i, f := range fs {
		out[i] = at(f)
	}
	return out
}

func join(groups ...[]ifc.Field) []ifc.Field {
	var out []ifc.Field
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

// ignoredOpt are opt_param_mask bits the device takes and ignores: the
// LAG port affinity (no LAG) and the counter set (no Q counters).
const ignoredOpt = ifc.OptLagTxAff | ifc.OptCounterSetID

// transitions are the modify commands (2ERR is qp2err; SQERR2RTS and
// SQD2RTS come with Stage 6).
var transitions = map[ifc.Opcode]*transition{
	ifc.OpRst2InitQP: {
		name: "rst2init_qp_in", from: ifc.QPStateRST, to: ifc.QPStateINIT,
		// P_Key index, port, counter set; the access flags (RC: all, UC:
		// remote write); UD's Q_Key. The port and the doorbell record
		// (resent when the QP has an RQ) are merged when non-zero: the
		// driver leaves the port 0 for QP0/QP1 (ib_mad gives none).
		required: [numClasses][]ifc.Field{
			classRC: join(fPKey, fRRE, fRWE, fRAE, []ifc.Field{ifc.QPCCounterSetID}),
			classUC: join(fPKey, fRWE, []ifc.Field{ifc.QPCCounterSetID}),
			classUD: join(fPKey, fQKey, []ifc.Field{ifc.QPCCounterSetID}),
		},
	},
	ifc.OpInit2RTRQP: {
		name: "init2rtr_qp_in", from: ifc.QPStateINIT, to: ifc.QPStateRTR,
		required: [numClasses][]ifc.Field{
			classRC: join(priPath, []ifc.Field{ifc.QPCMTU, ifc.QPCLogMsgMax, ifc.QPCRemoteQPN, ifc.QPCNextRcvPSN, ifc.QPCLogRRAMax, ifc.QPCMinRNRNak}),
			classUC: join(priPath, []ifc.Field{ifc.QPCMTU, ifc.QPCLogMsgMax, ifc.QPCRemoteQPN, ifc.QPCNextRcvPSN}),
			classUD: {ifc.QPCMTU, ifc.QPCLogMsgMax},
		},
		optional: [numClasses]map[uint32][]ifc.Field{
			classRC: {ifc.OptAltAddrPath: altPath, ifc.OptRRE: fRRE, ifc.OptRAE: fRAE, ifc.OptRWE: fRWE, ifc.OptPKeyIndex: fPKey},
			classUC: {ifc.OptAltAddrPath: altPath, ifc.OptRWE: fRWE, ifc.OptPKeyIndex: fPKey},
			classUD: {ifc.OptPKeyIndex: fPKey, ifc.OptQKey: fQKey},
		},
	},
	ifc.OpRTR2RTSQP: {
		name: "rtr2rts_qp_in", from: ifc.QPStateRTR, to: ifc.QPStateRTS,
		required: [numClasses][]ifc.Field{
			classRC: {ifc.QPCNextSendPSN, ifc.PriPath(ifc.ADSAckTimeout), ifc.QPCRetryCount, ifc.QPCRNRRetry, ifc.QPCLogSRAMax},
			classUC: {ifc.QPCNextSendPSN},
			classUD: {ifc.QPCNextSendPSN},
		},
		optional: [numClasses]map[uint32][]ifc.Field{
			classRC: {ifc.OptAltAddrPath: altPath, ifc.OptRRE: fRRE, ifc.OptRAE: fRAE, ifc.OptRWE: fRWE, ifc.OptPMState: fPM, ifc.OptRNRTimeout: fRNR},
			classUC: {ifc.OptAltAddrPath: altPath, ifc.OptRWE: fRWE, ifc.OptPMState: fPM},
			classUD: {ifc.OptQKey: fQKey},
		},
	},
	// INIT2INIT and RTS2RTS carry optional fields only (the driver's
	// opt_mask; spec §6.7.2). IPoIB needs RTS2RTS at Stage 4, not 6:
	// ipoib_mcast_attach sets its UD QP's Q_Key, in RTS, to the broadcast
	// group's once the join answers.
	ifc.OpInit2InitQP: {
		name: "init2init_qp_in", from: ifc.QPStateINIT, to: ifc.QPStateINIT,
		optional: [numClasses]map[uint32][]ifc.Field{
			classRC: {ifc.OptRRE: fRRE, ifc.OptRAE: fRAE, ifc.OptRWE: fRWE, ifc.OptPKeyIndex: fPKey, ifc.OptPriPort: fPort},
			classUC: {ifc.OptRWE: fRWE, ifc.OptPKeyIndex: fPKey, ifc.OptPriPort: fPort},
			classUD: {ifc.OptPKeyIndex: fPKey, ifc.OptQKey: fQKey, ifc.OptPriPort: fPort},
		},
	},
	ifc.OpRTS2RTSQP: {
		name: "rts2rts_qp_in", from: ifc.QPStateRTS, to: ifc.QPStateRTS,
		optional: [numClasses]map[uint32][]ifc.Field{
			classRC: {ifc.OptAltAddrPath: altPath, ifc.OptRRE: fRRE, ifc.OptRAE: fRAE, ifc.OptRWE: fRWE, ifc.OptPMState: fPM, ifc.OptRNRTimeout: fRNR},
			classUC: {ifc.OptAltAddrPath: altPath, ifc.OptRWE: fRWE, ifc.OptPMState: fPM},
			classUD: {ifc.OptQKey: fQKey},
		},
	},
	ifc.Op2RstQP: {name: "qp_2rst_in", from: -1, to: ifc.QPStateRST},
}

// Limits of the fields a transition sets (the port's: one port, 128
// P_Keys; IB MTUs 256..4096).
const (
	numPKeys = 128
	mtu4096  = 5
)

// modifyQP: RST2INIT_QP, INIT2INIT_QP, INIT2RTR_QP, RTR2RTS_QP, RTS2RTS_QP,
// 2RST_QP. The QP must be
// in the state the transition leaves (else BAD_QP_STATE); the optional
// bits must be ones the transition takes for the QP's class; the values
// it sets must be in range. Then the QP context takes the fields the
// transition requires and the optional ones selected (the driver builds
// the modify qpc from zeroes: every other field keeps its value, spec §12
// risk 3), and the state changes. 2RST also clears the queue counters.
func (d *Device) modifyQP(op ifc.Opcode, in []byte) result {
	t := transitions[op]
	q, r := d.lookupQP(op, t.name+".qpn", in)
	if r != ok {
		return r
	}
	if t.from >= 0 && int(q.state) != t.from {
		return d.refuse(ifc.StatBadQPStateErr, SyndQPState, hca.FindingQPState, op,
			"qp %#x in %s: %s leaves %s only", q.QPN, stateNames[q.state], op, stateNames[t.from])
	}
	if t.from < 0 {
		q.state = t.to
		d.qpTransition(q)
		for _, f := range []ifc.Field{ifc.QPCHWSQCounter, ifc.QPCSWSQCounter, ifc.QPCHWRQCounter, ifc.QPCSWRQCounter} {
			f.Set(q.ctx[:], 0)
		}
		return ok
	}
	qpc := ifc.QPInQPC.Bytes(in)
	class := classOf(q.st)
	mask := ifc.QPInOptParamMask.Get(in)
	var allowed uint32
	for bit := range t.optional[class] {
		allowed |= bit
	}
	if extra := mask &^ (allowed | ignoredOpt); extra != 0 {
		return d.refuse(ifc.StatBadParamErr, SyndOptParam, hca.FindingQPState, op,
			"%s.opt_param_mask=%#x: %s of a %s QP does not take %#x", t.name, mask, op, stNames[uint32(q.st)], extra)
	}
	if r := d.checkQPAttrs(op, t, q, qpc, mask); r != ok {
		return r
	}
	rstDBR := uint64(0)
	if op == ifc.OpRst2InitQP {
		if rstDBR = ifc.QPCDBRAddr.Get64(qpc); rstDBR != 0 {
			if r := d.checkDBR(op, t.name+".qpc.dbr_addr", rstDBR, 8, 8); r != ok {
				return r
			}
		}
	}
	merge := func(fs []ifc.Field) {
		for _, f := range fs {
			copyField(q.ctx[:], qpc, f)
		}
	}
	merge(t.required[class])
	for bit, fs := range t.optional[class] {
		if mask&bit != 0 {
			merge(fs)
		}
	}
	copyField(q.ctx[:], qpc, ifc.QPCLogAckReqFreq) // always written
	if op == ifc.OpRst2InitQP {
		if ifc.PriPath(ifc.ADSVhcaPortNum).Get(qpc) != 0 {
			merge(fPort)
		}
		if rstDBR != 0 {
			q.dbr = rstDBR
			ifc.QPCDBRAddr.Set64(q.ctx[:], rstDBR)
		}
	}
	q.state = t.to
	d.qpTransition(q)
	return ok
}

// checkQPAttrs checks the values a transition would set.
func (d *Device) checkQPAttrs(op ifc.Opcode, t *transition, q *qp, qpc []byte, mask uint32) result {
	class := classOf(q.st)
	field := func(name string) string { return t.name + ".qpc." + name }
	sets := func(f ifc.Field) bool {
		for _, g := range t.required[class] {
			if g == f {
				return true
			}
		}
		for bit, fs := range t.optional[class] {
			for _, g := range fs {
				if g == f && mask&bit != 0 {
					return true
				}
			}
		}
		return false
	}
	if sets(ifc.PriPath(ifc.ADSPKeyIndex)) {
		if v := ifc.PriPath(ifc.ADSPKeyIndex).Get(qpc); v >= numPKeys {
			return d.badAttr(op, "%s=%d >= %d P_Keys", field("primary_address_path.pkey_index"), v, numPKeys)
		}
	}
	port := ifc.PriPath(ifc.ADSVhcaPortNum).Get(qpc)
	if port > 1 || port == 0 && class != classUD && t.to == ifc.QPStateRTR {
		return d.badAttr(op, "%s=%d: port 1 only", field("primary_address_path.vhca_port_num"), port)
	}
	if sets(ifc.QPCMTU) {
		if v := ifc.QPCMTU.Get(qpc); v < 1 || v > mtu4096 {
			return d.badAttr(op, "%s=%d: IB MTU 256 (1) to 4096 (5)", field("mtu"), v)
		}
		if v, limit := ifc.QPCLogMsgMax.Get(qpc), capMax(ifc.CmdHCACapLogMaxMsg); v > limit {
			return d.badAttr(op, "%s=%d > log_max_msg=%d", field("log_msg_max"), v, limit)
		}
	}
	for _, c := range []struct {
		f     ifc.Field
		name  string
		limit uint32
	}{
		{ifc.QPCLogRRAMax, "log_rra_max", capMax(ifc.CmdHCACapLogMaxRaResQP)},
		{ifc.QPCLogSRAMax, "log_sra_max", capMax(ifc.CmdHCACapLogMaxRaReqQP)},
	} {
		if v := c.f.Get(qpc); sets(c.f) && v > c.limit {
			return d.badAttr(op, "%s=%d > %d", field(c.name), v, c.limit)
		}
	}
	return ok
}

// badAttr refuses a transition setting a value out of range.
func (d *Device) badAttr(op ifc.Opcode, format string, args ...any) result {
	return d.refuse(ifc.StatBadParamErr, SyndContext, hca.FindingQPState, op, format, args...)
}

// copyField copies field f from src to dst (contexts of one layout).
func copyField(dst, src []byte, f ifc.Field) {
	switch {
	case f.Width <= 32:
		f.Set(dst, f.Get(src))
	case f.Width == 64 && f.Off%64 == 0:
		f.Set64(dst, f.Get64(src))
	default:
		copy(f.Bytes(dst), f.Bytes(src))
	}
}

// The modify commands as the dispatcher runs them.
func (d *Device) rst2initQP(in, _ []byte) result  { return d.modifyQP(ifc.OpRst2InitQP, in) }
func (d *Device) init2rtrQP(in, _ []byte) result  { return d.modifyQP(ifc.OpInit2RTRQP, in) }
func (d *Device) rtr2rtsQP(in, _ []byte) result   { return d.modifyQP(ifc.OpRTR2RTSQP, in) }
func (d *Device) qp2rst(in, _ []byte) result      { return d.modifyQP(ifc.Op2RstQP, in) }
func (d *Device) init2initQP(in, _ []byte) result { return d.modifyQP(ifc.OpInit2InitQP, in) }
func (d *Device) rts2rtsQP(in, _ []byte) result   { return d.modifyQP(ifc.OpRTS2RTSQP, in) }

// QPState is the state of the QP with number qpn as the device keeps it
// (mlx5 numbering) and as the transport sees it; found is false when
// there is no such QP.
func (d *Device) QPState(qpn uint32) (mlx5 uint8, st transport.State, found bool) {
	d.core.Lock()
	defer d.core.Unlock()
	if d.fn.obj.qps.Limit() == 0 {
		return 0, 0, false
	}
	q := d.fn.obj.qps.Get(hca.Handle(qpn, d.fn.obj.qpnBits))
	if q == nil || q.QPN != qpn {
		return 0, 0, false
	}
	return q.state, transportState(q.state), true
}
