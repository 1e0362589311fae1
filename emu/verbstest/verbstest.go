// Package verbstest is the verbs-level test driver every device model's
// fake driver implements (Host, QP), and the core-behaviour tests that run
// through it (RunCore): what every HCA must do whatever its model, written
// once. A model's test package implements Host over its fake driver and
// calls RunCore; a second model inherits every test by doing the same.
//
// Values are the verbs' and the core's (transport.Opcode, transport.Status,
// transport.WCOpcode, mr access bits), never a model's: each model's Host
// converts, as its device does.
package verbstest

import (
	"testing"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/transport"
)

// Host is one emulated HCA on a switch, with a guest running a
// verbs-level driver: one protection domain, one CQ for everything.
type Host interface {
	// Alloc is n bytes of fresh guest memory (zeroed); Mem, the guest's
	// bytes at addr (read and written by the test as the guest would).
	Alloc(n int) (addr uint64)
	Mem(addr uint64, n int) []byte
	// RegMR registers [addr, addr+n) of the host's PD with access (mr's
	// bits) and returns its keys.
	RegMR(addr uint64, n int, access uint32) (lkey, rkey uint32)
	// RegMRForeignPD registers [addr, addr+n) in another PD of the host.
	RegMRForeignPD(addr uint64, n int, access uint32) (lkey uint32)
	// DeregMR deregisters the region of key lkey.
	DeregMR(lkey uint32)
	// CreateRCQP makes an RC QP of depth send and receive WRs on the
	// host's PD and CQ, in RESET.
	CreateRCQP(depth uint32) QP
	// Connect brings q to RTS towards peer's QP pq.
	Connect(q QP, peer Host, pq QP, opts RCOpts)
	// Poll takes the next completion of the host's CQ, if any.
	Poll() (WC, bool)
	// Sync returns once the device has handled everything posted and
	// received before the call.
	Sync()
}

// QP is a queue pair of a Host.
type QP interface {
	QPN() uint32
	PostSend(wr SendWR)
	PostRecv(wr RecvWR)
}

// RCOpts are the attributes of an RC connection a test chooses.
type RCOpts struct {
	Timeout, RetryCnt, RNRRetry uint8 // IB encodings
}

// DefaultRC is a connection with infinite RNR retries, 7 retries and a
// timeout of 1 s (a loaded machine may stall a responder: only a lost
// completion should time out).
func DefaultRC() RCOpts { return RCOpts{Timeout: 18, RetryCnt: 7, RNRRetry: 7} }

// SendWR is a send work request (always signaled).
type SendWR struct {
	ID         uint64
	Opcode     transport.Opcode
	SGEs       []mr.SGE
	RemoteAddr uint64
	RKey       uint32
	Imm        uint32
	// Atomics: CompareAdd is the compare (CMP_SWAP) or add (FETCH_ADD)
	// operand, Swap the swap operand.
	CompareAdd, Swap uint64
}

// RecvWR is a receive work request.
type RecvWR struct {
	ID   uint64
	SGEs []mr.SGE
}

// WC is a completion.
type WC struct {
	ID      uint64
	Status  transport.Status
	Opcode  transport.WCOpcode
	ByteLen uint32
	Recv    bool
}

// NewHost makes host k (1, 2, ...) of a test on switch sw; the host is
// gone when the test ends.
type NewHost func(t *testing.T, sw *fabric.Switch, k int, opts HostOpts) Host

// HostOpts are what a test needs of a host beyond the defaults.
type HostOpts struct {
	// OneRegion: the device's memory-region table has room for one region
	// of the test's (besides what the driver registers itself), so a
	// deregistered region's handle is the next region's.
	OneRegion bool
}

// All is every access right.
const All = mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic
