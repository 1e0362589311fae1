// Package verbstest is the verbs-level test driver every device model's
// fake driver implements (Host, QP), and the core-behaviour tests that run
// through it (RunCore): what every HCA must do whatever its model, written
// once. A model's test package implements Host over its fake driver and
// calls RunCore; a second model inherits every test by doing the same.
//
// The tests (RunCore's subtests): RC operations, recovery from loss, the
// remote operational error, stale R_Keys after a handle's reuse; the MR
// keys (mrkeys.go: key generations, deregistration mid-WRITE, mid-SEND, of
// a retransmission's source and a READ's destination, duplicate and
// replayed READs after reuse, fast-register key changes); isolation against
// a hostile peer (isolation.go); the direct path between HCAs of one
// process (direct.go); the hostile-peer fuzzer's seeds (peerfuzz.go).
// FuzzRCPeer is the fuzzer, called from a model's own FuzzRCPeer. The
// attack tests' oracle is WriteWatch (watch.go): a host made with
// HostOpts.Watch reaches guest memory through one, and Guarded and
// ClosingOracle (oracle.go) check it, the kept ranges and a fresh pair.
//
// Values are the verbs' and the core's (transport.Opcode, transport.Status,
// transport.WCOpcode, mr access bits, hca.Event, hca stats), never a
// model's: each model's Host converts, as its device does.
package verbstest

import (
	"testing"

	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/transport"
)

// Host is one emulated HCA on a Net (its switch or its subnet), with a guest running a
// verbs-level driver: one protection domain, one CQ for everything.
type Host interface {
	// Alloc is n bytes of fresh guest memory (zeroed), page-aligned and
	// contiguous; Mem, the guest's bytes at addr (read and written by the
	// test as the guest would). Addresses are guest-physical.
	Alloc(n int) (addr uint64)
	Mem(addr uint64, n int) []byte
	// Addr is the host's port's address as the wire sees it (Ethernet:
	// its MAC and the IPv4 address its RC connections use; InfiniBand:
	// its LID and GID); Caps, what its model offers beyond the core.
	Addr() Addr
	Caps() Caps
	// PD is the host's protection domain; NewPD makes another one.
	PD() uint32
	NewPD() uint32
	// RegMR registers [addr, addr+n) of the host's PD with access (mr's
	// bits) and returns its keys; addr is Alloc's and its I/O virtual
	// address.
	RegMR(addr uint64, n int, access uint32) (lkey, rkey uint32)
	// RegMRAt registers [addr, addr+n) of guest memory in pd at I/O
	// virtual address va (0: addr).
	RegMRAt(pd uint32, va, addr uint64, n int, access uint32) (lkey, rkey uint32)
	// AllocFRMR makes a fast-register region of the host's PD for up to
	// pages pages, with none yet (a FastReg work request maps it).
	AllocFRMR(pages int) (lkey, rkey uint32)
	// DeregMR deregisters the region of key lkey; an error is the device's
	// refusal.
	DeregMR(lkey uint32) error
	// CreateRCQP makes an RC QP of depth send and receive WRs on the
	// host's PD and CQ, in RESET.
	CreateRCQP(depth uint32) QP
	// Connect brings q to RTS towards QP pq of peer (a Host of the same
	// NewHost, or its Fresh, never a wrapper): path MTU 1024 to the
	// peer's Addr, q's first send PSN StartPSN(q.QPN()) and its expected PSN
	// StartPSN(pq.QPN()).
	Connect(q QP, peer Host, pq QP, opts RCOpts)
	// QPState is q's state as the device answers a query.
	QPState(q QP) transport.State
	// Raised reports whether the device raised async event ev for q.
	Raised(q QP, ev hca.Event) bool
	// Poll takes the next completion of the host's CQ, if any.
	Poll() (WC, bool)
	// Sync returns once the device has handled everything posted and
	// received before the call; Idle reports whether it has nothing
	// queued.
	Sync()
	Idle() bool
	// Stats are the device's counters and each live QP's by QPN.
	Stats() (hca.DeviceStats, map[uint32]hca.QPStats)
	// Alive is nil while the device still answers a command.
	Alive() error
	// Hold runs fn holding the device's lock, as a vCPU's register write
	// or a command does; HoldTaking runs fn holding the right to take the
	// device's queued batches, as its engine does while taking them.
	Hold(fn func())
	HoldTaking(fn func())
	// Helped is the number of batches for this device that the sending
	// HCA's engine took (this device's engine not woken).
	Helped() uint64
	// Reset resets the device (its function-level reset).
	Reset()
	// Fresh is another guest context on the same device and memory: a PD
	// and a CQ of its own (allowed in the WriteWatch, if any).
	Fresh() Host
	// Watch is the WriteWatch the device reaches guest memory through
	// (HostOpts.Watch), nil for none.
	Watch() *WriteWatch
}

// StartPSN is the first PSN of the send queue of QP qpn (Connect).
func StartPSN(qpn uint32) uint32 { return (0x100 + qpn) & 0xFFFFFF }

// QP is a queue pair of a Host.
type QP interface {
	QPN() uint32
	PostSend(wr SendWR)
	// PostSends posts wrs behind one doorbell.
	PostSends(wrs ...SendWR)
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
	// InvalidateKey: the key LOCAL_INV (or SEND_WITH_INV) invalidates.
	InvalidateKey uint32
	// FastReg: what a FAST_REG_MR maps.
	FastReg *FastReg
}

// FastReg maps a fast-register region: Length bytes at I/O virtual
// address IOVA over the 4 KiB guest pages Pages, under Key, with Access
// (mr's bits). The host builds its model's page list.
type FastReg struct {
	Key    uint32
	IOVA   uint64
	Pages  []uint64
	Length uint32
	Access uint32
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
	QPN     uint32 // the QP it completes work of
	// WithImm: the message carried immediate data, Imm.
	WithImm bool
	Imm     uint32
	// Entry is the completion as the model's device wrote it (e.g. its
	// CQE), compared whole by the tests that compare two runs.
	Entry any
}

// NewHost makes host k (1, 2, ...) of a test on net (on net.Switch or
// net.Subnet, as its link layer is); the host is gone when the test ends.
type NewHost func(t *testing.T, net *Net, k int, opts HostOpts) Host

// HostOpts are what a test needs of a host beyond the defaults.
type HostOpts struct {
	// Regions: the device's memory-region table has room for this many
	// regions of the test's (besides what the driver registers itself; 0:
	// the model's default), so that, at the limit, a deregistered region's
	// handle is the next region's.
	Regions int
	// RAM: bytes of guest memory (0: 64 MiB).
	RAM int
	// SequentialQPNs: each QPN is its QP's handle, and a device clock
	// counts rather than tells time (runs compare).
	SequentialQPNs bool
	// Watch: the device reaches guest memory through a WriteWatch (not
	// armed) that allows what the driver shares with it (rings, CQs, the
	// QPs' device-owned indices), and the driver registers no region of
	// its own (a DMA region would let a receive write anywhere).
	Watch bool
}

// All is every access right.
const All = mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic
