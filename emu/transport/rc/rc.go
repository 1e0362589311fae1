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
	"log/slog"

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
	// XRC: the QP is an XRC initiator or target (IBTA 9.2): its packets
	// go with the XRC opcodes, its requests with the XRCETH of their
	// SendWR.XRCSRQN, and it takes XRC packets only (Receive).
	XRC bool
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

// SetPD changes the protection domain the responder checks R_Keys in, and
// nothing else: an XRC target checks each request's RDMA and atomic
// access in the PD of the XRC SRQ its XRCETH names (IBTA 9.2: the target
// QP has no PD of its own), which the device sets before Receive.
func (qp *QP) SetPD(pd uint32) { qp.cfg.PD = pd }

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

// transmit sends a packet through the Env, with the XRC opcode of an XRC
// QP; transmitRun likewise sends a run.
func (qp *QP) transmit(path transport.Path, f roce.PacketFields, payload transport.Payload) error {
	if qp.cfg.XRC {
		f.BTH.Opcode = f.BTH.Opcode.XRC()
	}
	return qp.env.Transmit(path, f, payload)
}

func (qp *QP) transmitRun(path transport.Path, f roce.PacketFields, payload transport.Payload, n int) (int, error) {
	if qp.cfg.XRC {
		f.BTH.Opcode = f.BTH.Opcode.XRC()
	}
	return qp.env.TransmitRun(path, f, payload, n)
}
