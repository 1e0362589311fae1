// Package transport is the ground the IBTA transport services of a queue
// pair share: the work-request and completion values (SendWR, RecvWR,
// Completion, their opcodes and statuses), the QP states and asynchronous
// error events, the path a QP's packets take, and the Env a transport
// object reaches its device through. The services themselves are its
// subpackages: rc, the Reliable Connected requester and responder
// (rocev2.md §3, §4), uc, the Unreliable Connected service, and ud, the
// Unreliable Datagram service and the GSI QP. It belongs to no device model: a device takes work requests from its
// own rings, turns them into SendWR and RecvWR values, hands received
// packets to the QP's rc.QP or ud.QP, and turns the Completion values it
// gets back into its own completion format.
//
// A transport object holds the per-QP transport state and reaches
// everything else through an Env: the send and receive queues, completions,
// asynchronous errors, a timer, and the wire. Memory is reached through
// memory-region references (package mr), re-validated on every use.
// Tests drive it packet-in, packet-out with the fake Env of package
// transporttest and a hand-driven timer.
package transport

import (
	"errors"
	"net/netip"
	"time"

	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/roce"
)

// State is a QP state (the IBTA numbering).
type State uint8

// QP states.
const (
	StateReset State = iota
	StateInit
	StateRTR
	StateRTS
	StateSQD
	StateSQE
	StateErr
)

// Opcode is a send work request opcode.
type Opcode uint8

// Send work request opcodes.
const (
	OpUnsupported Opcode = iota
	OpSend
	OpSendImm
	OpSendInv
	OpWrite
	OpWriteImm
	OpRead
	OpCompSwap
	OpFetchAdd
	OpLocalInv
	OpFastReg
	// OpNop does nothing but complete, in order with the requests around
	// it (mlx5's NOP WQE: UCX's rc_mlx5 and ud_mlx5 post them).
	OpNop
)

// WCOpcode is the opcode of a completion.
type WCOpcode uint8

// Completion opcodes.
const (
	WCSend WCOpcode = iota
	WCWrite
	WCRead
	WCCompSwap
	WCFetchAdd
	WCLocalInv
	WCFastReg
	WCRecv
	WCRecvWriteImm
)

// Status is a completion status (the IBTA / verbs numbering).
type Status uint32

// Completion statuses.
const (
	StatusSuccess     Status = 0
	StatusLocLenErr   Status = 1
	StatusLocQPOpErr  Status = 2
	StatusLocProtErr  Status = 4
	StatusWRFlushErr  Status = 5
	StatusBadRespErr  Status = 7
	StatusRemInvReq   Status = 9
	StatusRemAccess   Status = 10
	StatusRemOpErr    Status = 11
	StatusRetryExc    Status = 12
	StatusRNRRetryExc Status = 13
)

// Event is an asynchronous QP error: the QP goes to ERR with it.
type Event uint8

// QP error events.
const (
	EventQPFatal       Event = iota + 1 // local work queue catastrophic error
	EventQPRequestErr                   // invalid request local work queue error
	EventQPAccessError                  // local access violation work queue error
)

// FastReg is the fast-register part of a FAST_REG_MR work request.
type FastReg struct {
	IOVA        uint64
	PageListDir uint64
	PageShift   uint32
	PageListLen uint32
	Length      uint32
	Access      uint32
	Key         uint32
}

// AddressHandle is the destination of a UD work request.
type AddressHandle struct {
	GIDIndex     uint8
	DGID         [16]byte
	DMAC         [6]byte
	HopLimit     uint8
	TrafficClass uint8
	FlowLabel    uint32
	// The InfiniBand link layer (an IB port's datagrams): the destination
	// LID and SL of the LRH, and whether a GRH follows it (Global; RoCE
	// packets always carry their IP header).
	DLID   uint16
	SL     uint8
	Global bool
}

// SendWR is a send work request as the transport sees it: copied out of the
// guest once and validated by the device (its SGEs are memory-region
// references).
type SendWR struct {
	ID        uint64
	Opcode    Opcode
	Signaled  bool
	Solicited bool
	Fence     bool
	Segs      []mr.Seg
	Length    uint32 // bytes the SGEs describe (8 for atomics)
	// Status is a local error the device found when it took the request
	// (StatusSuccess otherwise): the request fails without packets.
	Status Status

	RemoteAddr    uint64 // RDMA and atomics
	RKey          uint32
	Imm           uint32 // immediate data (host order of the wire bytes)
	InvalidateKey uint32 // SEND_WITH_INV, LOCAL_INV
	CompareAdd    uint64 // compare (CMP_SWP) or add (FETCH_ADD) operand
	Swap          uint64
	FastReg       FastReg

	DestQPN uint32 // UD
	QKey    uint32
	AH      AddressHandle

	XRCSRQN uint32 // XRC: the remote XRC SRQ (the packets' XRCETH)
}

// RecvWR is a receive work request: where an incoming message goes.
type RecvWR struct {
	ID   uint64
	Segs []mr.Seg
	Cap  uint32 // bytes the SGEs describe
}

// Completion is a work completion.
type Completion struct {
	WRID    uint64
	Status  Status
	Opcode  WCOpcode
	ByteLen uint32
	// Signaled: a send request that asked for a completion (successful
	// unsignaled ones may be dropped by the device).
	Signaled bool
	Recv     bool // a receive completion (else a send one)
	// Solicited: the message asked for a solicited event.
	Solicited      bool
	Imm            [4]byte // immediate data (wire bytes) when HasImm
	HasImm         bool
	Invalidated    bool // Imm holds the invalidated R_Key (little endian)
	SrcQP          uint32
	GRH            bool  // UD: a GRH (the received IP header) precedes the data
	NetworkHdrType uint8 // UD: 1 IPv4, 2 IPv6
}

// Path is where a QP's packets go.
type Path struct {
	Src, Dst  netip.Addr
	DMAC      [6]byte
	HopLimit  uint8
	TClass    uint8
	FlowLabel uint32
	SrcPort   uint16
	// The InfiniBand link layer: the LRH's destination LID and SL, and
	// Global when a GRH follows it (its SGID and DGID are Src and Dst,
	// 16-byte addresses). RoCE paths leave them zero.
	DLID   uint16
	SL     uint8
	Global bool
}

// ErrPeerBusy reports a frame the receiver's full queue refused: send it
// again a little later.
var ErrPeerBusy = errors.New("receiver busy")

// Payload is where a packet's payload comes from: Len bytes from byte Off
// of a list of local segments, or (Segs nil) from address VA of the region
// Ref names (READ responses).
type Payload struct {
	Len  int
	Segs []mr.Seg
	Off  uint64
	Ref  mr.Ref
	VA   uint64
	// Bytes, when not nil, is the payload itself, kept by the device
	// rather than in guest memory (a WQE's inline data), Len bytes.
	Bytes []byte
}

// Gather copies the payload out of guest memory (or Bytes) into dst
// (len(dst) == Len).
func (p *Payload) Gather(mem mr.Space, dst []byte) error {
	if p.Bytes != nil {
		if len(p.Bytes) != len(dst) {
			return errors.New("payload: inline bytes of another length")
		}
		copy(dst, p.Bytes)
		return nil
	}
	if p.Segs != nil {
		return mem.Copy(p.Segs, p.Off, dst, false)
	}
	return mem.Read(p.Ref, p.VA, dst)
}

// Work is what a QP asks the device to come back for.
type Work uint8

// Kinds of work.
const (
	WorkSend    Work = 1 << iota // the requester has packets to (re)send
	WorkRespond                  // the responder has queued responses to send
)

// Env is what a transport object needs from its device. Its methods are
// called on the device's engine, for one QP.
type Env interface {
	// PendingSends is the number of send requests posted and not yet
	// taken; ok=false: the send queue is unreadable and the device has
	// moved the QP to ERR.
	PendingSends() (n uint32, ok bool)
	// TakeSend takes the next send request off the send queue into *wr;
	// ok=false as for PendingSends. *wr comes zero but for Segs, an empty
	// slice whose storage (a finished request's, or nil) the request's
	// segments may use: a request is filled where it stays, not copied.
	TakeSend(wr *SendWR) (ok bool)
	// PeekRecv returns the next receive request without consuming it;
	// ok=false: none posted. A request that fails validation comes back
	// with status != StatusSuccess. Its Segs may live in the Env's own
	// storage until the next PeekRecv: the responder holds one at a time.
	PeekRecv() (wr RecvWR, status Status, ok bool)
	// PopRecv consumes the request PeekRecv returned.
	PopRecv()
	// Complete posts a completion.
	Complete(c Completion)
	// LocalOp executes a LOCAL_INV or FAST_REG_MR request.
	LocalOp(wr *SendWR) Status
	// Error raises ev and moves the QP to ERR (the device calls SetState).
	Error(ev Event)
	// Drained reports that the requester holds no send request.
	Drained()
	// Publish shows the consumer what TakeSend and Complete changed so far
	// (a ring index the device stores once per batch, not per entry). The
	// device publishes anyway before it lets its lock go; a transport calls
	// Publish where waiting for that would delay a completion.
	Publish()
	// Path resolves where the QP's packets go; false: nowhere (no packet
	// is sent).
	Path() (Path, bool)
	// PathTo resolves the path to a UD destination.
	PathTo(ah *AddressHandle) (Path, bool)
	// Transmit builds a packet with the payload gathered from guest memory
	// and sends it. ErrPeerBusy: try again later.
	Transmit(path Path, f roce.PacketFields, payload Payload) error
	// TransmitRun sends up to n consecutive full-PMTU MIDDLE packets of one
	// message as one run (roce.BuildRun): f is the first packet's, payload
	// all n payloads (n × PMTU bytes), and the packets are exactly those
	// Transmit would have sent one at a time, but for AckReq, which the run
	// carries once. Only a wire that needs no frames carries runs (two HCAs
	// of one process, nothing watching the wire). It returns how many
	// packets it took (fewer than n when that is what fits); 0 with a nil
	// error: runs cannot go now, send the packets one at a time.
	// ErrPeerBusy: nothing sent, try again later.
	TransmitRun(path Path, f roce.PacketFields, payload Payload, n int) (int, error)
	// ArmTimer (re)starts the QP's timer; when it expires the device calls
	// Timeout. StopTimer cancels it.
	ArmTimer(d time.Duration)
	StopTimer()
	// Kick asks the device to call Service with work soon (later: after a
	// short back-off, the receiver being busy).
	Kick(work Work, later bool)
}

// PMTU maps the IB MTU enum to bytes (1024 for anything unknown).
func PMTU(enum uint32) int {
	if enum < 1 || enum > 5 {
		return 1024
	}
	return 128 << enum
}

// Receives reports whether a QP in state s receives (RTR, RTS, SQD).
func Receives(s State) bool { return s == StateRTR || s == StateRTS || s == StateSQD }

// Sends reports whether a QP in state s has a running requester.
func Sends(s State) bool { return s == StateRTS || s == StateSQD }

// Completion is the completion opcode of a send request.
func (op Opcode) Completion() WCOpcode {
	switch op {
	case OpWrite, OpWriteImm:
		return WCWrite
	case OpRead:
		return WCRead
	case OpCompSwap:
		return WCCompSwap
	case OpFetchAdd:
		return WCFetchAdd
	case OpLocalInv:
		return WCLocalInv
	case OpFastReg:
		return WCFastReg
	}
	return WCSend
}

// WritesLocal reports whether the opcode's SGEs receive data (READ and
// atomics need LOCAL_WRITE on them).
func (op Opcode) WritesLocal() bool {
	return op == OpRead || op == OpCompSwap || op == OpFetchAdd
}

// HasSGEs reports whether the opcode's SGEs describe data.
func (op Opcode) HasSGEs() bool {
	switch op {
	case OpSend, OpSendImm, OpSendInv, OpWrite, OpWriteImm, OpRead, OpCompSwap, OpFetchAdd:
		return true
	}
	return false
}

// SegsStatus is the completion status of a local SGE list's validation
// (mr.Space.Segs's error): LOC_LEN_ERR for a length error, LOC_PROT_ERR
// for any other, success for none.
func SegsStatus(err error) Status {
	switch {
	case err == nil:
		return StatusSuccess
	case errors.Is(err, mr.ErrLength):
		return StatusLocLenErr
	}
	return StatusLocProtErr
}

// Position is where packet i of a message of n packets sits: 0 first, 1
// middle, 2 last, 3 only (the index of SendOpcodes and WriteOpcodes).
func Position(i, n uint32) int {
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

// SendOpcodes and WriteOpcodes are the RC opcodes of the packets of a SEND
// and an RDMA WRITE message, by Position and by immediate data on the last
// packet ([plain, imm]); a UC message's are their roce.Opcode.UC.
var (
	SendOpcodes = [4][2]roce.Opcode{
		{roce.RCSendFirst, roce.RCSendFirst},
		{roce.RCSendMiddle, roce.RCSendMiddle},
		{roce.RCSendLast, roce.RCSendLastWithImmediate},
		{roce.RCSendOnly, roce.RCSendOnlyWithImmediate},
	}
	WriteOpcodes = [4][2]roce.Opcode{
		{roce.RCRDMAWriteFirst, roce.RCRDMAWriteFirst},
		{roce.RCRDMAWriteMiddle, roce.RCRDMAWriteMiddle},
		{roce.RCRDMAWriteLast, roce.RCRDMAWriteLastWithImmediate},
		{roce.RCRDMAWriteOnly, roce.RCRDMAWriteOnlyWithImmediate},
	}
)
