// Package rc models the IBTA Reliable Connected transport service of a
// queue pair (rocev2.md §3, §4): a go-back-N requester with cumulative
// ACKs, a retransmission timer and RNR back-off, and a responder with an
// expected PSN, MSN, responder resources for READ and atomic replays, and
// the IBTA validation pipeline.
//
// A QP holds the RC state of one queue pair and reaches its device through
// a transport.Env; the work requests, completions and paths it exchanges
// are those of package transport.
package rc

import (
	"encoding/binary"
	"errors"
	"log/slog"
	"net/netip"
	"time"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
)

const (
	rcWindow       = 512 // most PSNs outstanding per QP
	rcAckEvery     = 64  // AckReq inside long messages
	rcResources    = 16  // responder READ/atomic resources per QP
	rcInfiniteRNR  = 7
	maxRDMAMessage = 1 << 31

	respBatch = 64 // READ response packets per engine turn

	// maxQueuedResponses bounds a QP's response queue: the READ and atomic
	// resources it can replay, plus room for the ACKs between them.
	maxQueuedResponses = 4 * rcResources
)

// Config is the part of a QP's attributes the RC transport uses; the
// device fills it from its own attribute format on every modification.
type Config struct {
	PD              uint32 // protection domain of the QP's memory regions
	DestQPN         uint32
	PMTU            int // path MTU in bytes
	SQPSN, RQPSN    uint32
	SQDepth         uint32 // most send requests the requester holds
	RetryCnt        uint8
	RNRRetry        uint8
	Timeout         uint8  // local ACK timeout, IB encoding (4.096 µs · 2^n)
	MinRNRTimer     uint8  // IB encoding
	MaxRdAtomic     uint8  // READ/atomic requests in flight
	MaxDestRdAtomic uint8  // responder resources
	Access          uint32 // remote access flags (mr.RemoteWrite ...)
	// Responder, when set, is asked before the responder executes each
	// in-order request packet (fault injection); its answer may replace
	// the packet's fate with a NAK or an RNR NAK, or keep its ACK back.
	// It gets the packet by value: a pointer handed to a function value
	// escapes, which would put every received packet on the heap.
	Responder func(pkt roce.Packet) ResponderFault
}

// ResponderFaultKind is what an injected fault makes the responder do.
type ResponderFaultKind uint8

// The responder's fault actions.
const (
	FaultNone ResponderFaultKind = iota
	// FaultNAK: answer with a NAK of code NAK instead of executing. A PSN
	// sequence error NAK asks for the packet again (go-back-N); the others
	// are class-C errors: the responder QP goes to ERR with the event its
	// own error of that kind raises (invalid request: QP_REQ_ERR, remote
	// access: QP_ACCESS_ERR, remote operational: QP_FATAL), and the
	// requester completes with REM_INV_REQ_ERR, REM_ACCESS_ERR or
	// REM_OP_ERR.
	FaultNAK
	// FaultRNRNAK: answer with an RNR NAK of timer RNRTimer instead of
	// executing, as when no receive WQE is posted.
	FaultRNRNAK
	// FaultSuppressACK: execute the packet but send no ACK for it (a
	// later ACK, cumulative, still covers it).
	FaultSuppressACK
)

// ResponderFault is the answer of Config.Responder.
type ResponderFault struct {
	Kind     ResponderFaultKind
	NAK      roce.NAKCode
	RNRTimer uint8
}

// request is a send request the requester has taken from the send queue:
// its private copy and where it stands on the wire.
type request struct {
	wr           transport.SendWR
	length       uint32
	first        uint32 // first PSN
	npsn         uint32 // PSNs it uses: packets, or READ response packets
	next         uint32 // next packet to (re)send; READ/atomic: 0 or 1 (request sent)
	resp         uint32 // READ: response packets placed
	gap          uint32 // READ: 1 + the response index last re-requested after a gap
	done         bool
	status       transport.Status // a local error found when it was taken
	local        bool             // LOCAL_INV / FAST_REG_MR: no packets
	readOrAtomic bool             // READ or atomic
}

func (req *request) last() uint32 { return roce.PSNAdd(req.first, int(req.npsn)-1) }

// packets is the number of request packets of the request.
func (req *request) packets() uint32 {
	if req.readOrAtomic {
		return 1
	}
	return req.npsn
}

// respItem is a response the responder owes: a READ response stream (sent
// in bounded batches, so a large READ cannot overflow the requester's
// queue), an atomic acknowledge, or an ACK/NAK.
type respItem struct {
	kind uint8 // respRead, respAtomic, respAck
	res  resource
	next uint32
	psn  uint32
	syn  roce.Syndrome
	msn  uint32 // an ACK's: the MSN when it was owed
}

const (
	respRead = iota
	respAtomic
	respAck
)

// resource is a responder resource: a READ or atomic that can be replayed.
type resource struct {
	valid  bool
	atomic bool
	first  uint32
	last   uint32
	va     uint64
	rkey   uint32
	ref    mr.Ref // READ: the registration the request was checked against
	length uint32
	orig   uint64
}

// count is the number of response packets of a READ resource.
func (res *resource) count() uint32 { return uint32(roce.PSNDiff(res.last, res.first)) + 1 }

// QP is the RC transport state of one queue pair: requester and responder.
type QP struct {
	env   transport.Env
	mem   mr.Space
	log   *slog.Logger
	cfg   Config
	state transport.State

	// Requester.
	reqs       []*request
	reqStore   []*request // the array reqs lives in (compactReqs)
	spare      []*request // completed requests, reset for take to reuse (at most SQDepth)
	nextPSN    uint32     // PSN of the next new request
	unacked    uint32     // oldest unacknowledged PSN
	sentEnd    uint32     // one past the newest PSN sent (a READ's last response PSN)
	retries    uint8
	rnrRetries uint8
	rnrWait    bool
	timerArmed bool
	sinceAck   int

	// Responder.
	ePSN    uint32
	msn     uint32
	nakSent bool
	// suppressAck: an injected fault keeps back the ACKs of the packet
	// being executed.
	suppressAck bool
	inSend      bool
	inWrite     bool
	recv        *transport.RecvWR // the receive request of the SEND in progress (&recvHeld)
	recvHeld    transport.RecvWR
	recvOff     uint64
	writeRef    mr.Ref // the region of the WRITE in progress
	writeVA     uint64
	writeRem    uint64
	writeLen    uint32 // DMA length of the WRITE in progress
	res         [rcResources]resource
	resNext     int
	// out holds responses waiting behind a READ response stream, in PSN
	// order.
	out      []respItem
	outStore []respItem // the storage out starts in when it starts empty (no allocation per response)
	// hold: responses wait in out until ReleaseResponses (HoldResponses).
	hold bool
	// lastWord is the class-C NAK the QP still owes its peer after it went
	// to ERR (owesNAK): the receiver's queue was full when it was first sent.
	// In ERR it is the only response the QP sends (FlushResponses).
	lastWord respItem
	owesNAK  bool

	stats Stats
}

// Stats are the transport's counts of what it met; RESET keeps them.
type Stats struct {
	Timeouts      uint64 // retransmission timeouts that resent (or failed) requests
	Duplicates    uint64 // duplicate requests received (answered again, not executed)
	OutOfSequence uint64 // requests ahead of the expected PSN, dropped
}

// Stats returns the transport's counts.
func (qp *QP) Stats() Stats { return qp.stats }

// New makes the RC transport of a QP in RESET.
func New(env transport.Env, mem mr.Space, log *slog.Logger) *QP {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &QP{env: env, mem: mem, log: log}
}

// Configure takes the QP's current attributes.
func (qp *QP) Configure(cfg Config) { qp.cfg = cfg }

// State is the QP state the transport was last told.
func (qp *QP) State() transport.State { return qp.state }

// Outstanding is the number of send requests the requester holds.
func (qp *QP) Outstanding() int { return len(qp.reqs) }

// Snapshot is the connection's progress, for inspection: the requester's
// and the responder's PSNs and counters.
type Snapshot struct {
	// Requester.
	NextPSN        uint32 // PSN of the next new request
	UnackedPSN     uint32 // oldest unacknowledged PSN
	Outstanding    int    // send requests held (sent or not, not completed)
	RetriesLeft    uint8  // retransmissions left before RETRY_EXC_ERR (back to retry_cnt at each progress)
	RNRRetriesLeft uint8  // RNR NAKs left before RNR_RETRY_EXC_ERR (7: infinite)
	RNRWait        bool   // waiting out an RNR NAK's timer
	TimerArmed     bool   // the retransmission timer runs
	// Responder.
	ExpectedPSN uint32
	MSN         uint32
	NAKSent     bool // a sequence NAK is out, duplicates are dropped until the retry
}

// Snapshot returns the connection's progress.
func (qp *QP) Snapshot() Snapshot {
	return Snapshot{NextPSN: qp.nextPSN, UnackedPSN: qp.unacked, Outstanding: len(qp.reqs),
		RetriesLeft: qp.retries, RNRRetriesLeft: qp.rnrRetries, RNRWait: qp.rnrWait, TimerArmed: qp.timerArmed,
		ExpectedPSN: qp.ePSN, MSN: qp.msn, NAKSent: qp.nakSent}
}

// SetState moves the transport with its QP: RTR latches the expected PSN,
// RTS the send PSN and retry counters, RESET forgets everything, ERR
// flushes the requests it holds.
func (qp *QP) SetState(next transport.State) {
	prev := qp.state
	qp.state = next
	if next == transport.StateRTR && prev != transport.StateRTR {
		qp.ePSN = qp.cfg.RQPSN
	}
	if next == transport.StateRTS && prev == transport.StateRTR {
		qp.nextPSN = qp.cfg.SQPSN
		qp.unacked = qp.cfg.SQPSN
		qp.sentEnd = qp.cfg.SQPSN
		qp.retries = qp.cfg.RetryCnt
		qp.rnrRetries = qp.cfg.RNRRetry
	}
	switch next {
	case transport.StateReset:
		qp.Reset()
	case transport.StateErr:
		if prev != transport.StateErr {
			qp.flush()
		}
	}
}

// Reset clears the transport state and cancels its timer (QP to RESET, or
// destroyed).
func (qp *QP) Reset() {
	qp.env.StopTimer()
	*qp = QP{env: qp.env, mem: qp.mem, log: qp.log, cfg: qp.cfg, state: qp.state, stats: qp.stats}
}

// ---- requester ---------------------------------------------------------------

// take moves posted requests from the send queue into the requester (at
// most one queue's worth in flight) and assigns their PSNs.
func (qp *QP) take() {
	n, ok := qp.env.PendingSends()
	if !ok {
		return
	}
	for ; n > 0 && uint32(len(qp.reqs)) < qp.cfg.SQDepth; n-- {
		var req *request
		if last := len(qp.spare) - 1; last >= 0 {
			req, qp.spare = qp.spare[last], qp.spare[:last]
		} else {
			req = new(request) // only when no finished one is spare
		}
		// (A spare request is kept zero but for its Segs storage, as
		// TakeSend wants it.)
		if !qp.env.TakeSend(&req.wr) {
			*req = request{wr: transport.SendWR{Segs: req.wr.Segs[:0]}}
			qp.spare = append(qp.spare, req)
			return
		}
		req.status, req.length = req.wr.Status, req.wr.Length
		if req.status == transport.StatusSuccess {
			qp.prepare(req)
		}
		if len(qp.reqs) == cap(qp.reqs) {
			qp.compactReqs()
		}
		qp.reqs = append(qp.reqs, req)
	}
}

// prepare checks a request's opcode and assigns its PSNs.
func (qp *QP) prepare(req *request) {
	pmtu := uint32(qp.cfg.PMTU)
	switch req.wr.Opcode {
	case transport.OpSend, transport.OpSendImm, transport.OpSendInv, transport.OpWrite, transport.OpWriteImm:
		req.npsn = max(1, (req.length+pmtu-1)/pmtu)
	case transport.OpRead:
		req.npsn = max(1, (req.length+pmtu-1)/pmtu)
		req.readOrAtomic = true
	case transport.OpCompSwap, transport.OpFetchAdd:
		if req.length < 8 {
			req.status = transport.StatusLocLenErr
		}
		req.length = 8
		req.npsn = 1
		req.readOrAtomic = true
	case transport.OpLocalInv, transport.OpFastReg:
		req.local = true
	default:
		req.status = transport.StatusLocQPOpErr
	}
	if req.status != transport.StatusSuccess || req.local {
		req.npsn = 0
		return
	}
	req.first = qp.nextPSN
	qp.nextPSN = roce.PSNAdd(qp.nextPSN, int(req.npsn))
}

// Pump takes new requests, sends what the window allows, and completes
// what is done, in order (a send doorbell, or the timer).
func (qp *QP) Pump() {
	if !transport.Sends(qp.state) {
		return
	}
	if qp.state == transport.StateRTS {
		qp.take()
	}
	qp.complete()
	if qp.state == transport.StateErr || qp.rnrWait {
		return
	}
	path, ok := qp.env.Path()
	if !ok {
		return
	}
	readsOut := 0
	maxReads := max(1, int(qp.cfg.MaxRdAtomic))
	runs := true // the wire may carry runs; false once it said no
	for _, req := range qp.reqs {
		if req.done || req.local || req.npsn == 0 {
			if req.status != transport.StatusSuccess || req.local {
				break // waits for the requests before it
			}
			continue
		}
		if req.readOrAtomic {
			if req.next == 0 && readsOut >= maxReads {
				break
			}
			readsOut++
		}
		if req.wr.Fence && req.next == 0 && readsOut > 0 && !req.readOrAtomic {
			break
		}
		for req.next < req.packets() {
			psn := roce.PSNAdd(req.first, int(req.next))
			if roce.PSNDiff(psn, qp.unacked) >= rcWindow && roce.PSNDiff(psn, qp.unacked) > 0 {
				return
			}
			if n := qp.runLength(req, psn); runs && n > 1 {
				taken, err := qp.sendRun(path, req, n)
				if err != nil {
					if errors.Is(err, transport.ErrPeerBusy) {
						qp.env.Kick(transport.WorkSend, true)
						return
					}
					qp.failRequest(req, transport.StatusLocProtErr)
					return
				}
				if taken > 0 {
					req.next += uint32(taken)
					qp.sent(req)
					qp.armTimer(false)
					continue
				}
				runs = false
			}
			if err := qp.sendPacket(path, req); err != nil {
				if errors.Is(err, transport.ErrPeerBusy) {
					qp.env.Kick(transport.WorkSend, true)
					return
				}
				qp.failRequest(req, transport.StatusLocProtErr)
				return
			}
			req.next++
			qp.sent(req)
			qp.armTimer(false)
		}
	}
}

var sendOps = [4][2]roce.Opcode{ // [first, middle, last, only][plain, imm]
	{roce.RCSendFirst, roce.RCSendFirst},
	{roce.RCSendMiddle, roce.RCSendMiddle},
	{roce.RCSendLast, roce.RCSendLastWithImmediate},
	{roce.RCSendOnly, roce.RCSendOnlyWithImmediate},
}

var writeOps = [4][2]roce.Opcode{
	{roce.RCRDMAWriteFirst, roce.RCRDMAWriteFirst},
	{roce.RCRDMAWriteMiddle, roce.RCRDMAWriteMiddle},
	{roce.RCRDMAWriteLast, roce.RCRDMAWriteLastWithImmediate},
	{roce.RCRDMAWriteOnly, roce.RCRDMAWriteOnlyWithImmediate},
}

// position is where packet i of n sits in its message: 0 first, 1 middle,
// 2 last, 3 only.
func position(i, n uint32) int {
	switch {
	case n == 1:
		return 3
	case i == 0:
		return 0
	case i == n-1:
		return 2
	}
	return 1
}

// fields starts the fields of a packet to the QP's peer.
func (qp *QP) fields(op roce.Opcode, psn uint32) roce.PacketFields {
	f := roce.PacketFields{}
	f.BTH.Opcode = op
	f.BTH.PKey = roce.DefaultPKey
	f.BTH.DestQP = qp.cfg.DestQPN
	f.BTH.PSN = psn
	return f
}

// sendPacket sends packet req.next of request req.
func (qp *QP) sendPacket(path transport.Path, req *request) error {
	wr := &req.wr
	pmtu := uint32(qp.cfg.PMTU)
	i := req.next
	f := qp.fields(0, roce.PSNAdd(req.first, int(i)))
	var n, off uint32
	pos := position(i, req.npsn)
	last := pos >= 2
	switch wr.Opcode {
	case transport.OpSend, transport.OpSendImm, transport.OpSendInv:
		off = i * pmtu
		n = min(pmtu, req.length-off)
		imm := 0
		if wr.Opcode == transport.OpSendImm {
			imm = 1
		}
		f.BTH.Opcode = sendOps[pos][imm]
		if last {
			if wr.Opcode == transport.OpSendImm {
				f.ImmDt = wr.Imm
			}
			if wr.Opcode == transport.OpSendInv {
				f.BTH.Opcode = roce.RCSendLastWithInvalidate
				if pos == 3 {
					f.BTH.Opcode = roce.RCSendOnlyWithInvalidate
				}
				f.IETH = wr.InvalidateKey
			}
			f.BTH.SE = wr.Solicited
		}
	case transport.OpWrite, transport.OpWriteImm:
		off = i * pmtu
		n = min(pmtu, req.length-off)
		imm := 0
		if wr.Opcode == transport.OpWriteImm {
			imm = 1
		}
		f.BTH.Opcode = writeOps[pos][imm]
		if i == 0 {
			f.RETH = roce.RETHFields{VA: wr.RemoteAddr, RKey: wr.RKey, DMALength: req.length}
		}
		if last && imm == 1 {
			f.ImmDt = wr.Imm
			f.BTH.SE = wr.Solicited
		}
	case transport.OpRead:
		done := min(req.resp*pmtu, req.length) // bytes already placed (a re-request)
		f.BTH.Opcode = roce.RCRDMAReadRequest
		f.BTH.PSN = roce.PSNAdd(req.first, int(req.resp))
		f.RETH = roce.RETHFields{VA: wr.RemoteAddr + uint64(done), RKey: wr.RKey, DMALength: req.length - done}
		last = true
	case transport.OpCompSwap, transport.OpFetchAdd:
		f.BTH.Opcode = roce.RCCompareSwap
		f.AtomicETH = roce.AtomicETHFields{VA: wr.RemoteAddr, RKey: wr.RKey, SwapAdd: wr.Swap, Compare: wr.CompareAdd}
		if wr.Opcode == transport.OpFetchAdd {
			f.BTH.Opcode = roce.RCFetchAdd
			f.AtomicETH.SwapAdd, f.AtomicETH.Compare = wr.CompareAdd, 0
		}
		last = true
	}
	qp.sinceAck++
	if last || qp.sinceAck >= rcAckEvery {
		f.BTH.AckReq = true
		qp.sinceAck = 0
	}
	payload := transport.Payload{Len: int(n)}
	if n > 0 {
		payload.Segs, payload.Off = wr.Segs, uint64(off)
	}
	return qp.env.Transmit(path, f, payload)
}

// runLength is how many packets from req.next on (PSN psn) could go as one
// run (Env.TransmitRun): the full-PMTU MIDDLE packets of a SEND or WRITE
// that follow, as many as the window lets out.
func (qp *QP) runLength(req *request, psn uint32) uint32 {
	switch req.wr.Opcode {
	case transport.OpSend, transport.OpSendImm, transport.OpSendInv, transport.OpWrite, transport.OpWriteImm:
	default:
		return 0
	}
	if req.next == 0 || req.next+1 >= req.npsn {
		return 0 // the first and the last packet go alone
	}
	n := req.npsn - 1 - req.next
	if room := rcWindow - int(roce.PSNDiff(psn, qp.unacked)); room < int(n) {
		n = uint32(max(room, 0))
	}
	return n
}

// sendRun offers packets req.next .. req.next+n-1, all full-PMTU MIDDLE
// packets, to the wire as one run; it returns how many were taken (0: the
// wire takes no runs now).
func (qp *QP) sendRun(path transport.Path, req *request, n uint32) (int, error) {
	wr := &req.wr
	pmtu := uint32(qp.cfg.PMTU)
	f := qp.fields(sendOps[1][0], roce.PSNAdd(req.first, int(req.next)))
	if wr.Opcode == transport.OpWrite || wr.Opcode == transport.OpWriteImm {
		f.BTH.Opcode = writeOps[1][0]
	}
	ackReq := qp.sinceAck+int(n) >= rcAckEvery
	f.BTH.AckReq = ackReq
	payload := transport.Payload{Len: int(n * pmtu), Segs: wr.Segs, Off: uint64(req.next * pmtu)}
	taken, err := qp.env.TransmitRun(path, f, payload, int(n))
	if err != nil || taken <= 0 {
		return 0, err
	}
	taken = min(taken, int(n))
	if ackReq {
		qp.sinceAck = 0
	} else {
		qp.sinceAck += taken
	}
	return taken, nil
}

// sent records that the packet before req.next went out: the PSNs up to
// it (a READ's whole response range) may now be acknowledged.
func (qp *QP) sent(req *request) {
	end := roce.PSNAdd(req.first, int(req.next))
	if req.readOrAtomic {
		end = roce.PSNAdd(req.last(), 1)
	}
	if roce.PSNDiff(end, qp.sentEnd) > 0 {
		qp.sentEnd = end
	}
}

// beyondSent reports whether psn is newer than every PSN sent: no genuine
// response can carry it (rocev2.md §3.5: a response that fits no
// outstanding request is dropped).
func (qp *QP) beyondSent(psn uint32) bool { return roce.PSNDiff(psn, qp.sentEnd) >= 0 }

// nakable reports whether a NAK's PSN names a request packet still
// awaiting its acknowledgement: sent, and not older than the oldest
// unacknowledged PSN, or inside the oldest unfinished request (a READ or
// atomic an ACK went past is re-requested at its own PSN).
func (qp *QP) nakable(psn uint32) bool {
	if qp.beyondSent(psn) {
		return false
	}
	if roce.PSNDiff(psn, qp.unacked) >= 0 {
		return true
	}
	for _, req := range qp.reqs {
		if req.done || req.npsn == 0 {
			continue
		}
		return roce.PSNInRange(psn, req.first, req.last())
	}
	return false
}

// armTimer starts the retransmission timer if it is not running (or
// restarts it when progress was made).
func (qp *QP) armTimer(restart bool) {
	timeout := roce.LocalACKTimeout(qp.cfg.Timeout)
	if timeout == 0 {
		return
	}
	if qp.timerArmed && !restart {
		return
	}
	qp.startTimer(timeout)
}

func (qp *QP) startTimer(d time.Duration) {
	qp.env.ArmTimer(d)
	qp.timerArmed = true
}

func (qp *QP) stopTimer() {
	qp.env.StopTimer()
	qp.timerArmed = false
}

// Timeout handles an expired timer: the end of an RNR wait, or a
// retransmission timeout.
func (qp *QP) Timeout() {
	if !qp.timerArmed {
		return
	}
	qp.timerArmed = false
	if !transport.Sends(qp.state) {
		return
	}
	if qp.rnrWait {
		qp.rnrWait = false
		qp.rewind(qp.unacked)
		qp.Pump()
		return
	}
	if !qp.outstanding() {
		return
	}
	qp.stats.Timeouts++
	if qp.retries == 0 {
		qp.failHead(transport.StatusRetryExc)
		return
	}
	qp.retries--
	qp.log.Debug("RC retransmission timeout", "psn", qp.unacked, "retries_left", qp.retries)
	qp.rewind(qp.unacked)
	qp.Pump()
}

// outstanding reports whether packets await acknowledgement.
func (qp *QP) outstanding() bool {
	for _, req := range qp.reqs {
		if !req.done && req.npsn > 0 && req.next > 0 {
			return true
		}
	}
	return false
}

// rewind goes back to PSN from: every unfinished request at or after it is
// resent from there (READ and atomic requests whole).
func (qp *QP) rewind(from uint32) {
	for _, req := range qp.reqs {
		if req.done || req.npsn == 0 {
			continue
		}
		if req.readOrAtomic {
			// Re-request: an atomic whole (the responder replays its saved
			// result), a READ from its first missing response on, so a
			// lossy link cannot keep a long READ from ever finishing.
			req.next = 0
			if req.wr.Opcode != transport.OpRead {
				req.resp = 0
			}
			continue
		}
		if roce.PSNDiff(from, req.first) <= 0 {
			req.next = 0
		} else if roce.PSNDiff(from, req.last()) <= 0 {
			req.next = uint32(roce.PSNDiff(from, req.first))
		}
	}
	qp.sinceAck = 0
}

// acked handles a cumulative acknowledgement of every PSN up to psn.
func (qp *QP) acked(psn uint32, progress bool) {
	for _, req := range qp.reqs {
		if req.done || req.npsn == 0 {
			continue
		}
		if roce.PSNDiff(req.last(), psn) > 0 {
			break
		}
		if req.readOrAtomic {
			// Acknowledged past a READ/atomic whose response never came:
			// it was lost; retry it.
			if req.next > 0 {
				qp.rewind(req.first)
			}
			break
		}
		req.done = true
	}
	if roce.PSNDiff(psn, qp.unacked) >= 0 {
		qp.unacked = roce.PSNAdd(psn, 1)
		progress = true
	}
	if progress {
		qp.retries = qp.cfg.RetryCnt
		qp.rnrRetries = qp.cfg.RNRRetry
	}
}

// complete posts completions for finished requests at the head, in order.
func (qp *QP) complete() {
	qp.completeReqs()
	// What take and completeReqs did, the guest sees now: before the
	// packets Pump sends next, not once they are all sent.
	qp.env.Publish()
}

// completeReqs completes the finished requests at the head of the queue.
func (qp *QP) completeReqs() {
	for len(qp.reqs) > 0 && qp.state != transport.StateErr {
		req := qp.reqs[0]
		switch {
		case req.status != transport.StatusSuccess:
			qp.failRequest(req, req.status)
			return
		case req.local:
			if status := qp.env.LocalOp(&req.wr); status != transport.StatusSuccess {
				qp.failRequest(req, status)
				return
			}
			req.done = true
		case !req.done:
			if !qp.outstanding() && !qp.rnrWait {
				// (An RNR wait keeps its timer: only its end resends.)
				qp.stopTimer()
			}
			return
		}
		qp.reqs = qp.reqs[1:]
		qp.completeSend(&req.wr, transport.StatusSuccess, req.length)
		// Nothing refers to a completed request any more: take reuses it,
		// and the storage of its segment list.
		if uint32(len(qp.spare)) < qp.cfg.SQDepth {
			*req = request{wr: transport.SendWR{Segs: req.wr.Segs[:0]}}
			qp.spare = append(qp.spare, req)
		}
	}
	if len(qp.reqs) == 0 {
		qp.stopTimer()
		qp.rnrWait = false
		qp.env.Drained()
	}
}

// compactReqs moves the requests in flight to the front of their storage,
// which completed requests leave from the front: a steady stream reuses
// one array instead of appending into a new one whenever the old runs out.
func (qp *QP) compactReqs() {
	if cap(qp.reqStore) < 2*len(qp.reqs) {
		qp.reqStore = make([]*request, 0, max(2*len(qp.reqs), 16))
	}
	n := copy(qp.reqStore[:len(qp.reqs)], qp.reqs)
	clear(qp.reqStore[n:cap(qp.reqStore)])
	qp.reqs = qp.reqStore[:n]
}

// completeSend posts the send completion of wr.
func (qp *QP) completeSend(wr *transport.SendWR, status transport.Status, byteLen uint32) {
	qp.env.Complete(transport.Completion{WRID: wr.ID, Status: status, Opcode: wr.Opcode.Completion(),
		ByteLen: byteLen, Signaled: wr.Signaled})
}

// completeRecv posts a receive completion.
func (qp *QP) completeRecv(c transport.Completion) {
	c.Recv = true
	qp.env.Complete(c)
}

// failRequest completes the failed request req and moves the QP to ERR:
// the finished requests before it complete first, everything after it is
// flushed.
func (qp *QP) failRequest(req *request, status transport.Status) {
	for len(qp.reqs) > 0 && qp.reqs[0] != req && qp.reqs[0].done {
		head := qp.reqs[0]
		qp.reqs = qp.reqs[1:]
		qp.completeSend(&head.wr, transport.StatusSuccess, head.length)
	}
	for i, held := range qp.reqs {
		if held == req {
			qp.reqs = qp.reqs[i+1:]
			break
		}
	}
	qp.completeSend(&req.wr, status, 0)
	ev := transport.EventQPRequestErr
	if status == transport.StatusLocProtErr || status == transport.StatusRemAccess {
		ev = transport.EventQPAccessError
	}
	qp.env.Error(ev)
}

// failHead fails the oldest request not done with status (retry and RNR
// retry exhaustion).
func (qp *QP) failHead(status transport.Status) {
	for _, req := range qp.reqs {
		if !req.done {
			qp.failRequest(req, status)
			return
		}
	}
}

// failAt fails the request whose PSN range holds psn (class-C NAKs,
// rocev2.md §3.5: "complete the WQE at that PSN"). The NAK acknowledged the
// requests before it (acked marked them done); a READ or atomic before it
// whose response never came cannot complete any more: it is flushed, as the
// QP goes to ERR. The caller checked that psn is outstanding (nakable);
// should no request hold it, the oldest unfinished one fails.
func (qp *QP) failAt(psn uint32, status transport.Status) {
	var target *request
	for _, req := range qp.reqs {
		if req.done || req.npsn == 0 {
			continue
		}
		if target == nil {
			target = req // fallback: the oldest unfinished
		}
		if roce.PSNInRange(psn, req.first, req.last()) {
			target = req
			break
		}
	}
	if target == nil {
		return
	}
	for len(qp.reqs) > 0 && qp.reqs[0] != target {
		head := qp.reqs[0]
		if !head.done && !head.local && head.status == transport.StatusSuccess && head.npsn > 0 {
			qp.reqs = qp.reqs[1:]
			qp.completeSend(&head.wr, transport.StatusWRFlushErr, 0)
			continue
		}
		if !head.done {
			break
		}
		qp.reqs = qp.reqs[1:]
		qp.completeSend(&head.wr, transport.StatusSuccess, head.length)
	}
	qp.failRequest(target, status)
}

// flush completes every request the requester holds, and the receive
// request of a SEND in progress, with WR_FLUSH_ERR.
func (qp *QP) flush() {
	reqs := qp.reqs
	qp.reqs = nil
	qp.stopTimer()
	for _, req := range reqs {
		qp.completeSend(&req.wr, transport.StatusWRFlushErr, 0)
	}
	if recv := qp.recv; recv != nil {
		qp.recv = nil
		qp.completeRecv(transport.Completion{WRID: recv.ID, Opcode: transport.WCRecv, Status: transport.StatusWRFlushErr})
	}
}

// response handles ACK, NAK, READ response and atomic acknowledge packets.
func (qp *QP) response(pkt *roce.Packet) {
	if !transport.Sends(qp.state) {
		return
	}
	op := pkt.Opcode()
	psn := pkt.BTH.PSN()
	var syn roce.Syndrome
	if pkt.AETH != nil {
		syn = pkt.AETH.Syndrome()
	}
	if qp.beyondSent(psn) {
		// Acknowledges (or NAKs, or answers) a PSN never sent: forged or
		// from another connection. It must not complete anything.
		qp.log.Debug("RC response beyond the PSNs sent dropped", "psn", psn, "sent_end", qp.sentEnd)
		return
	}
	if (syn.IsRNRNAK() || syn.IsNAK()) && op == roce.RCAcknowledge && !qp.nakable(psn) {
		qp.log.Debug("RC NAK outside the outstanding window dropped", "psn", psn, "unacked", qp.unacked)
		return
	}
	switch op {
	case roce.RCAcknowledge:
		switch {
		case syn.IsACK():
			qp.acked(psn, false)
		case syn.IsRNRNAK():
			qp.acked(roce.PSNAdd(psn, -1), false)
			if qp.rnrRetries == 0 {
				qp.failHead(transport.StatusRNRRetryExc)
				return
			}
			if qp.rnrRetries != rcInfiniteRNR {
				qp.rnrRetries--
			}
			qp.unacked = psn
			qp.rnrWait = true
			qp.startTimer(roce.RNRTimer(syn.Code()))
			return
		case syn.IsNAK():
			qp.acked(roce.PSNAdd(psn, -1), false)
			switch roce.NAKCode(syn.Code()) {
			case roce.NAKPSNSequenceError:
				if qp.rnrWait {
					// The responder still expects the RNR-NAKed PSN and
					// NAKs what followed it: the wait's end resends from
					// there anyway. Acting now would resend into the RNR
					// condition and spend a retry on it.
					return
				}
				if qp.retries == 0 {
					qp.failHead(transport.StatusRetryExc)
					return
				}
				qp.retries--
				qp.unacked = psn
				qp.rewind(psn)
			case roce.NAKInvalidRequest, roce.NAKInvalidRDRequest:
				qp.failAt(psn, transport.StatusRemInvReq)
				return
			case roce.NAKRemoteAccessError:
				qp.failAt(psn, transport.StatusRemAccess)
				return
			default:
				qp.failAt(psn, transport.StatusRemOpErr)
				return
			}
		}
	case roce.RCRDMAReadResponseFirst, roce.RCRDMAReadResponseMiddle, roce.RCRDMAReadResponseLast, roce.RCRDMAReadResponseOnly:
		qp.readResponse(pkt)
	case roce.RCAtomicAcknowledge:
		for _, req := range qp.reqs {
			if req.done || req.npsn == 0 {
				continue
			}
			if !req.readOrAtomic || req.wr.Opcode == transport.OpRead || req.first != psn || req.next == 0 {
				break
			}
			var orig [8]byte
			binary.LittleEndian.PutUint64(orig[:], pkt.AtomicAckETH.OrigData())
			if err := qp.mem.Copy(req.wr.Segs, 0, orig[:], true); err != nil {
				qp.failRequest(req, transport.StatusLocProtErr)
				return
			}
			qp.acked(roce.PSNAdd(psn, -1), true)
			req.done = true
			qp.acked(psn, true)
			break
		}
	default:
		return
	}
	qp.afterProgress()
}

// afterProgress completes, re-arms the timer and sends more.
func (qp *QP) afterProgress() {
	qp.complete()
	if qp.state == transport.StateErr {
		return
	}
	if qp.outstanding() && !qp.rnrWait {
		qp.armTimer(true)
	}
	qp.Pump()
}

// readResponse places one READ response packet.
func (qp *QP) readResponse(pkt *roce.Packet) {
	psn := pkt.BTH.PSN()
	var req *request
	for _, held := range qp.reqs {
		if held.done || held.npsn == 0 {
			continue
		}
		if held.wr.Opcode == transport.OpRead && held.next > 0 && roce.PSNInRange(psn, held.first, held.last()) {
			req = held
		}
		break
	}
	if req == nil {
		return
	}
	if want := roce.PSNAdd(req.first, int(req.resp)); psn != want {
		// A response past a gap: the ones before it were lost. Ask again
		// from the first missing one at once (once per gap), as rxe does,
		// instead of waiting for the timer.
		if roce.PSNDiff(psn, want) > 0 && req.gap != req.resp+1 {
			req.gap = req.resp + 1
			qp.rewind(want)
		}
		return
	}
	op := pkt.Opcode()
	wantFirst := req.resp == 0
	isFirst := op == roce.RCRDMAReadResponseFirst || op == roce.RCRDMAReadResponseOnly
	isLast := op == roce.RCRDMAReadResponseLast || op == roce.RCRDMAReadResponseOnly
	pmtu := uint32(qp.cfg.PMTU)
	off := req.resp * pmtu
	want := min(pmtu, req.length-min(off, req.length))
	if wantFirst != isFirst || isLast != (req.resp+1 == req.npsn) || uint32(len(pkt.Payload)) != want {
		qp.failRequest(req, transport.StatusBadRespErr)
		return
	}
	if want > 0 {
		if err := qp.mem.Copy(req.wr.Segs, uint64(off), pkt.Payload, true); err != nil {
			qp.failRequest(req, transport.StatusLocProtErr)
			return
		}
	}
	req.resp++
	// The response implicitly acknowledges everything before the READ.
	qp.acked(roce.PSNAdd(req.first, -1), true)
	qp.retries = qp.cfg.RetryCnt
	if isLast {
		req.done = true
		qp.acked(req.last(), true)
	}
}

// ---- responder ---------------------------------------------------------------

// ReceiveFrom handles an RC packet that arrived in an IP datagram from src
// to dst (plain IPv4 or IPv6 addresses, as roce.Unframe returns them). A
// connected QP takes packets from its peer only, as rxe's check_addr: the
// packet is dropped, and ReceiveFrom returns false (the device counts it),
// unless src is the destination of the QP's path and dst the source, the
// addresses the QP's own packets carry. The path is resolved again for
// every packet, so a GID unbound since the connection was made stops it.
// A QP that does not receive (RESET, INIT, ERR) drops every packet, as
// Receive does.
func (qp *QP) ReceiveFrom(pkt *roce.Packet, src, dst netip.Addr) bool {
	return qp.ReceiveRunFrom(pkt, 1, src, dst, nil, nil)
}

// ReceiveRunFrom handles a run from src to dst (roce.ParseRun): n
// consecutive full-PMTU MIDDLE packets of one message, pkt's PSN the
// first's and its payload all of theirs. It does what n calls of
// ReceiveFrom with those packets would do: an in-order run that passes
// every check is executed at once (one validation, one copy into guest
// memory, one ACK); any other (out of sequence, duplicate, a fault that
// answers packets one by one, a length or memory failure) is taken apart
// and its packets handled one at a time. n == 1 is ReceiveFrom.
//
// from, when not nil, is where the run's payload lies (another HCA's
// memory, lent: roce.ParseRunLent), pkt.Payload being empty: an executed
// run copies it straight into guest memory; one taken apart is first read
// into scratch (at least from.Len() bytes). A payload that cannot be read
// any more is a run lost on the wire: dropped.
func (qp *QP) ReceiveRunFrom(pkt *roce.Packet, n int, src, dst netip.Addr, from mr.Source, scratch []byte) bool {
	if !transport.Receives(qp.state) {
		return true
	}
	path, ok := qp.env.Path()
	if !ok || src != path.Dst || dst != path.Src {
		qp.log.Debug("RC packet from outside the connection dropped", "src", src, "dst", dst,
			"path_src", path.Src, "path_dst", path.Dst)
		return false
	}
	if n <= 1 {
		qp.Receive(pkt)
		return true
	}
	if qp.executeRun(pkt, n, from) {
		return true
	}
	if from != nil {
		size := from.Len()
		if size > len(scratch) || from.ReadAt(scratch[:size], 0) != nil {
			qp.log.Debug("RC run dropped: its payload is gone", "psn", pkt.BTH.PSN())
			return true
		}
		pkt.Payload = scratch[:size:size]
	}
	var bth [roce.BTHSize]byte
	for i := range n {
		one := roce.RunPacket(pkt, i, n, bth[:])
		qp.Receive(&one)
	}
	return true
}

// executeRun executes an in-order run of n MIDDLE packets at once when
// every check the packets would meet one at a time passes for all of them,
// and reports whether it did. On false nothing of the QP's state has
// changed; guest memory may hold part of the run's payload, at the place
// the packets, handled one at a time, write it again.
func (qp *QP) executeRun(pkt *roce.Packet, n int, from mr.Source) bool {
	op := pkt.Opcode()
	psn := pkt.BTH.PSN()
	payload := pkt.Payload
	size := len(payload)
	if from != nil {
		size = from.Len()
	}
	if qp.cfg.Responder != nil || roce.PSNDiff(psn, qp.ePSN) != 0 || size != n*qp.cfg.PMTU {
		return false
	}
	switch op {
	case roce.RCSendMiddle:
		cur := qp.recv
		if !qp.inSend || qp.inWrite || cur == nil || qp.recvOff+uint64(size) > uint64(cur.Cap) {
			return false
		}
		var err error
		if from != nil {
			err = qp.mem.CopyFrom(cur.Segs, qp.recvOff, from)
		} else {
			err = qp.mem.Copy(cur.Segs, qp.recvOff, payload, true)
		}
		if err != nil {
			return false
		}
		qp.recvOff += uint64(size)
	case roce.RCRDMAWriteMiddle:
		if !qp.inWrite || qp.inSend || uint64(size) > qp.writeRem {
			return false
		}
		var err error
		if from != nil {
			err = qp.mem.WriteFrom(qp.writeRef, qp.writeVA, from)
		} else {
			err = qp.mem.Write(qp.writeRef, qp.writeVA, payload)
		}
		if err != nil {
			return false
		}
		qp.writeVA += uint64(size)
		qp.writeRem -= uint64(size)
	default:
		return false
	}
	qp.nakSent = false
	last := roce.PSNAdd(psn, n-1)
	qp.ePSN = roce.PSNAdd(last, 1)
	if pkt.BTH.AckReq() {
		qp.sendAck(last, roce.SyndromeACKNoCredit)
	}
	return true
}

// Receive handles an RC packet for this QP (a request for the responder,
// or a response for the requester) whose addresses the caller has checked
// (ReceiveFrom does; tests of the state machine call Receive directly).
func (qp *QP) Receive(pkt *roce.Packet) {
	op := pkt.Opcode()
	info, _ := op.Info()
	if info.Response {
		qp.response(pkt)
		return
	}
	if !transport.Receives(qp.state) {
		return
	}
	psn := pkt.BTH.PSN()
	diff := roce.PSNDiff(psn, qp.ePSN)
	switch {
	case diff > 0:
		qp.stats.OutOfSequence++
		if !qp.nakSent {
			qp.nakSent = true
			qp.sendAck(qp.ePSN, roce.NAKSyndrome(roce.NAKPSNSequenceError))
		}
		return
	case diff < 0:
		qp.stats.Duplicates++
		qp.duplicate(pkt)
		return
	}
	qp.nakSent = false
	if qp.cfg.Responder != nil && qp.injected(pkt) {
		return
	}
	qp.execute(pkt)
}

// injected asks Config.Responder about an in-order request and carries
// out its answer; true: the packet is answered and not executed.
func (qp *QP) injected(pkt *roce.Packet) bool {
	psn := pkt.BTH.PSN()
	f := qp.cfg.Responder(*pkt)
	switch f.Kind {
	case FaultNAK:
		switch f.NAK {
		case roce.NAKPSNSequenceError:
			qp.nakSent = true
			qp.sendAck(psn, roce.NAKSyndrome(roce.NAKPSNSequenceError))
		case roce.NAKRemoteAccessError:
			qp.nak(psn, f.NAK, transport.EventQPAccessError)
		case roce.NAKRemoteOperationalErr:
			qp.nak(psn, f.NAK, transport.EventQPFatal)
		default:
			qp.nak(psn, f.NAK, transport.EventQPRequestErr)
		}
		return true
	case FaultRNRNAK:
		qp.sendAck(psn, roce.RNRNAKSyndrome(f.RNRTimer))
		return true
	case FaultSuppressACK:
		qp.suppressAck = true
		qp.execute(pkt)
		qp.suppressAck = false
		return true
	}
	return false
}

// sendAck sends an ACK or NAK with the current MSN, after any responses
// still queued.
func (qp *QP) sendAck(psn uint32, syn roce.Syndrome) {
	if qp.suppressAck && syn.IsACK() {
		return // an injected fault keeps this ACK back
	}
	qp.respond(respItem{kind: respAck, psn: psn, syn: syn, msn: qp.msn})
}

// respond sends a response now, or queues it behind the ones waiting.
//
// The queue is bounded, whatever the peer sends while a long READ stream is
// queued: an ACK or NAK replaces a plain ACK queued at the tail behind
// another response (ACKs are cumulative: the later one acknowledges what
// the earlier did; a NAK acknowledges the PSNs before its own), and beyond
// maxQueuedResponses a response is dropped (the requester's retry asks
// again). A queued NAK is never replaced.
func (qp *QP) respond(item respItem) {
	out := qp.out
	switch {
	case !qp.hold && len(out) > 1 && item.kind == respAck && out[len(out)-1].kind == respAck && out[len(out)-1].syn.IsACK():
		out[len(out)-1] = item
		return
	case qp.hold && len(out) > 0 && coalesces(&out[len(out)-1], &item):
		out[len(out)-1] = item
		return
	case len(out) >= maxQueuedResponses:
		return
	}
	if len(out) == 0 {
		out = qp.outStore[:0] // the queue's storage, kept from its last use
	}
	qp.out = append(out, item)
	if len(qp.out) == 1 {
		qp.outStore = qp.out[:0]
		if !qp.hold {
			qp.FlushResponses()
		}
	}
}

// coalesces reports whether a held ACK may stand for the one queued
// before it: both plain ACKs (no NAK, no RNR NAK), the later for a PSN at or
// past the earlier's. ACKs are cumulative: the later one acknowledges what
// the earlier did.
func coalesces(queued, item *respItem) bool {
	return queued.kind == respAck && item.kind == respAck && queued.syn.IsACK() && item.syn.IsACK() &&
		roce.PSNDiff(item.psn, queued.psn) >= 0
}

// HoldResponses keeps the responses the QP owes queued until
// ReleaseResponses, and lets a plain ACK replace a queued plain ACK for an
// earlier PSN: a batch of request packets taken at once is acknowledged
// once, as hardware coalesces ACKs, instead of once per packet. A NAK
// sends what is held first, and itself at once.
func (qp *QP) HoldResponses() { qp.hold = true }

// Holding reports whether responses are held (HoldResponses; a class-C NAK
// ends the hold early).
func (qp *QP) Holding() bool { return qp.hold }

// ReleaseResponses ends HoldResponses and sends what is queued.
func (qp *QP) ReleaseResponses() {
	qp.hold = false
	if len(qp.out) > 0 {
		qp.FlushResponses()
	}
}

// FlushResponses sends queued responses in order: at most respBatch READ
// response packets per call; the device is kicked to go on (later, when the
// requester's queue is full).
//
// In ERR it sends only the class-C NAK the QP still owes (nak), if any.
func (qp *QP) FlushResponses() {
	if qp.state == transport.StateErr {
		qp.flushLastWord()
		return
	}
	budget := respBatch
	for len(qp.out) > 0 {
		item := &qp.out[0]
		var err error
		switch item.kind {
		case respAck:
			err = qp.sendAckNow(item.psn, item.syn, item.msn)
		case respAtomic:
			err = qp.atomicAck(&item.res)
		case respRead:
			for err == nil && item.next < item.res.count() && budget > 0 {
				if err = qp.readPacket(&item.res, item.next); err == nil {
					item.next++
					budget--
				}
			}
			if errors.Is(err, mr.ErrStale) {
				// The region went while its responses were being sent:
				// the rest of the READ is refused, never read.
				qp.out = nil
				qp.nak(roce.PSNAdd(item.res.first, int(item.next)), roce.NAKRemoteAccessError, transport.EventQPAccessError)
				return
			}
			if err == nil && item.next < item.res.count() {
				qp.env.Kick(transport.WorkRespond, false)
				return
			}
		}
		if errors.Is(err, transport.ErrPeerBusy) {
			qp.env.Kick(transport.WorkRespond, true)
			return
		}
		qp.out = qp.out[1:]
	}
	qp.out = nil
}

// sendAckNow sends an ACK or NAK with MSN msn.
func (qp *QP) sendAckNow(psn uint32, syn roce.Syndrome, msn uint32) error {
	path, ok := qp.env.Path()
	if !ok {
		return nil
	}
	f := qp.fields(roce.RCAcknowledge, psn)
	f.AETH = roce.AETHFields{Syndrome: syn, MSN: msn}
	return qp.env.Transmit(path, f, transport.Payload{})
}

// nak sends a class-C NAK (at once: the QP stops here) and moves the QP to
// ERR. The segment is lossless: where the NAK cannot go now (responses
// still queued before it, or the receiver's queue full) it is owed, and
// FlushResponses sends it once the peer takes it, so the requester ends
// with the remote error and not with a retry count exceeded.
func (qp *QP) nak(psn uint32, code roce.NAKCode, ev transport.Event) {
	if qp.hold {
		qp.ReleaseResponses() // the ACKs held before it go first
	}
	item := respItem{kind: respAck, psn: psn, syn: roce.NAKSyndrome(code), msn: qp.msn}
	if len(qp.out) > 0 || errors.Is(qp.sendAckNow(psn, item.syn, item.msn), transport.ErrPeerBusy) {
		qp.lastWord, qp.owesNAK = item, true
		qp.env.Kick(transport.WorkRespond, true)
	}
	qp.env.Error(ev)
}

// flushLastWord sends the NAK a QP in ERR still owes (nak).
func (qp *QP) flushLastWord() {
	qp.out = nil // a QP in ERR answers nothing else
	if !qp.owesNAK {
		return
	}
	w := &qp.lastWord
	if errors.Is(qp.sendAckNow(w.psn, w.syn, w.msn), transport.ErrPeerBusy) {
		qp.env.Kick(transport.WorkRespond, true)
		return
	}
	qp.owesNAK = false
}

func isSendOp(op roce.Opcode) bool {
	return op <= roce.RCSendOnlyWithImmediate || op == roce.RCSendLastWithInvalidate || op == roce.RCSendOnlyWithInvalidate
}

func isWriteOp(op roce.Opcode) bool {
	return op >= roce.RCRDMAWriteFirst && op <= roce.RCRDMAWriteOnlyWithImmediate
}

// execute runs the validation pipeline (rocev2.md §4.2) and executes an
// in-order request packet.
func (qp *QP) execute(pkt *roce.Packet) {
	op := pkt.Opcode()
	info, _ := op.Info()
	psn := pkt.BTH.PSN()
	first := info.Pos == roce.PosFirst || info.Pos == roce.PosOnly
	last := info.Pos == roce.PosLast || info.Pos == roce.PosOnly
	// 1. Opcode sequence.
	switch {
	case isSendOp(op):
		if qp.inWrite || (qp.inSend && first) || (!qp.inSend && !first) {
			qp.nak(psn, roce.NAKInvalidRequest, transport.EventQPRequestErr)
			return
		}
	case isWriteOp(op):
		if qp.inSend || (qp.inWrite && first) || (!qp.inWrite && !first) {
			qp.nak(psn, roce.NAKInvalidRequest, transport.EventQPRequestErr)
			return
		}
	default:
		if qp.inSend || qp.inWrite {
			qp.nak(psn, roce.NAKInvalidRequest, transport.EventQPRequestErr)
			return
		}
	}
	// 2, 3. QP access flags and responder resources.
	access := qp.cfg.Access
	switch {
	case op == roce.RCRDMAReadRequest:
		if access&mr.RemoteRead == 0 || qp.cfg.MaxDestRdAtomic == 0 {
			qp.nak(psn, roce.NAKInvalidRequest, transport.EventQPRequestErr)
			return
		}
	case op == roce.RCCompareSwap || op == roce.RCFetchAdd:
		if access&mr.RemoteAtomic == 0 || qp.cfg.MaxDestRdAtomic == 0 {
			qp.nak(psn, roce.NAKInvalidRequest, transport.EventQPRequestErr)
			return
		}
	case isWriteOp(op) && first:
		if access&mr.RemoteWrite == 0 {
			qp.nak(psn, roce.NAKInvalidRequest, transport.EventQPRequestErr)
			return
		}
	}
	// 4. A receive request for RQ-consuming packets.
	needRQ := (isSendOp(op) && first) || (last && (op == roce.RCRDMAWriteLastWithImmediate || op == roce.RCRDMAWriteOnlyWithImmediate))
	var recv transport.RecvWR
	if needRQ {
		var status transport.Status
		var ok bool
		recv, status, ok = qp.env.PeekRecv()
		if !ok {
			qp.sendAck(psn, roce.RNRNAKSyndrome(qp.cfg.MinRNRTimer))
			return
		}
		if status != transport.StatusSuccess {
			qp.env.PopRecv()
			qp.completeRecv(transport.Completion{WRID: recv.ID, Opcode: transport.WCRecv, Status: transport.StatusLocQPOpErr})
			qp.nak(psn, roce.NAKRemoteOperationalErr, transport.EventQPFatal)
			return
		}
	}
	// 5. Lengths.
	pmtu := qp.cfg.PMTU
	if roce.CheckPayloadLen(op, len(pkt.Payload), pmtu) != nil {
		qp.nak(psn, roce.NAKInvalidRequest, transport.EventQPRequestErr)
		return
	}
	payload := pkt.Payload
	switch {
	case isSendOp(op):
		if first {
			qp.env.PopRecv()
			qp.recvHeld = recv
			qp.recv, qp.recvOff, qp.inSend = &qp.recvHeld, 0, true
		}
		cur := qp.recv
		if qp.recvOff+uint64(len(payload)) > uint64(cur.Cap) {
			// 9. Larger than the receive buffers.
			qp.recv, qp.inSend = nil, false
			qp.completeRecv(transport.Completion{WRID: cur.ID, Opcode: transport.WCRecv, Status: transport.StatusLocLenErr})
			qp.nak(psn, roce.NAKInvalidRequest, transport.EventQPRequestErr)
			return
		}
		if err := qp.mem.Copy(cur.Segs, qp.recvOff, payload, true); err != nil {
			qp.recv, qp.inSend = nil, false
			qp.completeRecv(transport.Completion{WRID: cur.ID, Opcode: transport.WCRecv, Status: transport.StatusLocProtErr})
			qp.nak(psn, roce.NAKRemoteOperationalErr, transport.EventQPAccessError)
			return
		}
		qp.recvOff += uint64(len(payload))
		if last {
			qp.recv, qp.inSend = nil, false
			c := transport.Completion{WRID: cur.ID, Opcode: transport.WCRecv, ByteLen: uint32(qp.recvOff)}
			if pkt.ImmDt != nil {
				copy(c.Imm[:], pkt.ImmDt)
				c.HasImm = true
			}
			if pkt.IETH != nil {
				key := pkt.IETH.RKey()
				if !qp.mem.Invalidate(qp.cfg.PD, key) {
					c.Status = transport.StatusRemInvReq
					qp.completeRecv(c)
					qp.env.Error(transport.EventQPRequestErr)
					return
				}
				binary.LittleEndian.PutUint32(c.Imm[:], key)
				c.Invalidated = true
			}
			qp.msn = roce.PSNAdd(qp.msn, 1)
			c.Solicited = pkt.BTH.SE()
			qp.completeRecv(c)
		}
	case isWriteOp(op):
		if first {
			reth := pkt.RETH
			va, key, n := reth.VA(), reth.RKey(), uint64(reth.DMALength())
			if n > maxRDMAMessage {
				qp.nak(psn, roce.NAKInvalidRequest, transport.EventQPRequestErr)
				return
			}
			var ref mr.Ref
			if n > 0 {
				var ok bool
				if ref, ok = qp.mem.Remote(qp.cfg.PD, key, va, n, mr.RemoteWrite); !ok {
					qp.nak(psn, roce.NAKRemoteAccessError, transport.EventQPAccessError)
					return
				}
			}
			qp.writeRef, qp.writeVA, qp.writeRem, qp.inWrite = ref, va, n, true
			qp.writeLen = uint32(n)
		}
		// 7. Payload against the RETH length.
		n := uint64(len(payload))
		if n > qp.writeRem || (!last && n != uint64(pmtu)) || (last && n != qp.writeRem) {
			qp.inWrite = false
			qp.nak(psn, roce.NAKInvalidRequest, transport.EventQPRequestErr)
			return
		}
		if n > 0 {
			if err := qp.mem.Write(qp.writeRef, qp.writeVA, payload); err != nil {
				qp.inWrite = false
				if errors.Is(err, mr.ErrStale) {
					// The region went (or was invalidated, or registered
					// again) since the first packet: the R_Key is no
					// longer valid, as if the request had named it now.
					qp.nak(psn, roce.NAKRemoteAccessError, transport.EventQPAccessError)
					return
				}
				qp.nak(psn, roce.NAKRemoteOperationalErr, transport.EventQPFatal)
				return
			}
		}
		qp.writeVA += n
		qp.writeRem -= n
		if last {
			qp.inWrite = false
			qp.msn = roce.PSNAdd(qp.msn, 1)
			if needRQ {
				qp.env.PopRecv()
				c := transport.Completion{WRID: recv.ID, Opcode: transport.WCRecvWriteImm, ByteLen: qp.writeLen, HasImm: true,
					Solicited: pkt.BTH.SE()}
				copy(c.Imm[:], pkt.ImmDt)
				qp.completeRecv(c)
			}
		}
	case op == roce.RCRDMAReadRequest:
		reth := pkt.RETH
		va, key, n := reth.VA(), reth.RKey(), reth.DMALength()
		if uint64(n) > maxRDMAMessage {
			qp.nak(psn, roce.NAKInvalidRequest, transport.EventQPRequestErr)
			return
		}
		var ref mr.Ref
		if n > 0 {
			var ok bool
			if ref, ok = qp.mem.Remote(qp.cfg.PD, key, va, uint64(n), mr.RemoteRead); !ok {
				qp.nak(psn, roce.NAKRemoteAccessError, transport.EventQPAccessError)
				return
			}
		}
		count := max(1, (n+uint32(pmtu)-1)/uint32(pmtu))
		res := qp.newResource()
		*res = resource{valid: true, first: psn, last: roce.PSNAdd(psn, int(count)-1), va: va, rkey: key, ref: ref, length: n}
		qp.msn = roce.PSNAdd(qp.msn, 1)
		qp.ePSN = roce.PSNAdd(psn, int(count))
		qp.readRespond(res, psn)
		return
	case op == roce.RCCompareSwap || op == roce.RCFetchAdd:
		atomicETH := pkt.AtomicETH
		va, key := atomicETH.VA(), atomicETH.RKey()
		if va%8 != 0 {
			qp.nak(psn, roce.NAKInvalidRequest, transport.EventQPRequestErr)
			return
		}
		ref, ok := qp.mem.Remote(qp.cfg.PD, key, va, 8, mr.RemoteAtomic)
		if !ok {
			qp.nak(psn, roce.NAKRemoteAccessError, transport.EventQPAccessError)
			return
		}
		orig, err := qp.mem.Atomic(ref, va, op == roce.RCCompareSwap, atomicETH.Compare(), atomicETH.SwapAdd())
		if err != nil {
			qp.nak(psn, roce.NAKRemoteOperationalErr, transport.EventQPFatal)
			return
		}
		res := qp.newResource()
		*res = resource{valid: true, atomic: true, first: psn, last: psn, va: va, rkey: key, length: 8, orig: orig}
		qp.msn = roce.PSNAdd(qp.msn, 1)
		qp.ePSN = roce.PSNAdd(psn, 1)
		qp.respond(respItem{kind: respAtomic, res: *res})
		return
	default:
		qp.nak(psn, roce.NAKInvalidRequest, transport.EventQPRequestErr)
		return
	}
	qp.ePSN = roce.PSNAdd(psn, 1)
	if pkt.BTH.AckReq() {
		qp.sendAck(psn, roce.SyndromeACKNoCredit)
	}
}

// newResource recycles the oldest responder resource.
func (qp *QP) newResource() *resource {
	res := &qp.res[qp.resNext]
	qp.resNext = (qp.resNext + 1) % rcResources
	return res
}

// readRespond queues the READ responses of resource res from PSN from on
// (a duplicate READ restarts a stream still queued).
func (qp *QP) readRespond(res *resource, from uint32) {
	next := uint32(roce.PSNDiff(from, res.first))
	for i := range qp.out {
		if item := &qp.out[i]; item.kind == respRead && item.res.first == res.first {
			item.next = min(item.next, next)
			return
		}
	}
	qp.respond(respItem{kind: respRead, res: *res, next: next})
}

// readPacket sends READ response packet i of resource res.
func (qp *QP) readPacket(res *resource, i uint32) error {
	path, ok := qp.env.Path()
	if !ok {
		return nil
	}
	pmtu := uint32(qp.cfg.PMTU)
	f := qp.fields(0, roce.PSNAdd(res.first, int(i)))
	switch position(i, res.count()) {
	case 0:
		f.BTH.Opcode = roce.RCRDMAReadResponseFirst
	case 1:
		f.BTH.Opcode = roce.RCRDMAReadResponseMiddle
	case 2:
		f.BTH.Opcode = roce.RCRDMAReadResponseLast
	default:
		f.BTH.Opcode = roce.RCRDMAReadResponseOnly
	}
	if f.BTH.Opcode != roce.RCRDMAReadResponseMiddle {
		f.AETH = roce.AETHFields{Syndrome: roce.SyndromeACKNoCredit, MSN: qp.msn}
	}
	off := i * pmtu
	n := min(pmtu, res.length-min(off, res.length))
	payload := transport.Payload{Len: int(n)}
	if n > 0 {
		// Re-validated now: the registration the READ was checked against
		// must still hold; if it went, the caller NAKs.
		payload.Ref, payload.VA = res.ref, res.va+uint64(off)
		if !qp.mem.Valid(payload.Ref, payload.VA, uint64(n)) {
			return mr.ErrStale
		}
	}
	err := qp.env.Transmit(path, f, payload)
	if err != nil && !errors.Is(err, transport.ErrPeerBusy) {
		qp.log.Debug("READ response failed", "err", err)
		return nil
	}
	return err
}

// atomicAck sends the atomic acknowledge of resource res.
func (qp *QP) atomicAck(res *resource) error {
	path, ok := qp.env.Path()
	if !ok {
		return nil
	}
	f := qp.fields(roce.RCAtomicAcknowledge, res.first)
	f.AETH = roce.AETHFields{Syndrome: roce.SyndromeACKNoCredit, MSN: qp.msn}
	f.AtomicAckETH = res.orig
	return qp.env.Transmit(path, f, transport.Payload{})
}

// duplicate answers a duplicate request (rocev2.md §4.6).
func (qp *QP) duplicate(pkt *roce.Packet) {
	op := pkt.Opcode()
	psn := pkt.BTH.PSN()
	switch {
	case op == roce.RCRDMAReadRequest:
		reth := pkt.RETH
		for i := range qp.res {
			res := &qp.res[i]
			if res.valid && !res.atomic && roce.PSNInRange(psn, res.first, res.last) && res.rkey == reth.RKey() {
				end, ok := dma.End(reth.VA(), uint64(reth.DMALength()))
				if !ok || reth.VA() < res.va || end > res.va+uint64(res.length) {
					return
				}
				if res.length > 0 && !qp.mem.Valid(res.ref, res.va, uint64(res.length)) {
					// Its region went since the READ executed: the replay
					// is refused (a NAK, never data), as a new READ would be.
					qp.nak(psn, roce.NAKRemoteAccessError, transport.EventQPAccessError)
					return
				}
				qp.readRespond(res, psn)
				return
			}
		}
	case op == roce.RCCompareSwap || op == roce.RCFetchAdd:
		for i := range qp.res {
			res := &qp.res[i]
			if res.valid && res.atomic && res.first == psn {
				qp.respond(respItem{kind: respAtomic, res: *res})
				return
			}
		}
	default:
		qp.sendAck(roce.PSNAdd(qp.ePSN, -1), roce.SyndromeACKNoCredit)
	}
}
