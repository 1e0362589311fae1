// Package mlx5 models an NVIDIA ConnectX-4 host channel adapter (mlx5, PCI
// 15b3:1013, a physical function with an InfiniBand port) as the unmodified
// Linux mlx5_core and mlx5_ib drivers and rdma-core's mlx5 provider see it:
// the PCI function (config space with MSI-X and PCI Express capabilities;
// BAR0 with the initialization segment and the UAR pages; the MSI-X table
// and PBA in BAR2), the initialization segment's registers (firmware
// version, command interface revision, the command queue's address and
// doorbell, the initializing bit, the health buffer and health counter),
// and the command engine that takes commands off the command queue in guest
// memory: descriptors, mailbox chains, delivery status and ownership.
//
// Stage 1 of the spec's build plan
// (../shared/spec/mlx5.md §11): the commands that bring the function up
// and down as mlx5_core's probe and unload issue them (ENABLE_HCA, the
// ISSI, the page demands, the capabilities, INIT_HCA, QUERY_ADAPTER,
// ACCESS_REG, UARs, TEARDOWN_HCA, DISABLE_HCA) and the event queues: EQ
// contexts and their page lists, EQEs with their ownership bit, the EQ
// doorbells in the UAR pages, MSI-X, and the command interface's switch
// from polling to event mode (a CMD EQE per completed command once the
// command EQ exists). Then the verbs half of Stage 1, the objects mlx5_ib
// and its users create (verbs.go, cq.go, srq.go, qp.go): protection and
// XRC domains, memory keys, CQs, RMPs and XRC SRQs, QPs with their state
// transitions and QUERY_QP, and the HCA vport context. Stage 2's data
// path (datapath.go): UAR doorbells, WQEs copied once, RC QPs on the
// core's transport with their packets on the IB subnet, CQEs, completion
// and QP events. Stage 3: UC QPs on the core's UC transport (uc.go),
// receives through an RMP or an XRC SRQ (srqrecv.go), XRC initiator and
// target QPs (xrc.go), UD QPs and the GSI QP on the core's UD service
// (ud.go: datagrams by LID, with a GRH when global, QP1 as QPN 1, so the
// subnet's SA answers ib_sa and ib_cm's MADs cross). Stage 4: multicast
// groups (ATTACH_TO_MCG, DETACH_FROM_MCG), 2ERR, INIT2INIT and RTS2RTS.
// Every other opcode is BAD_OP. The
// layouts it exchanges with the driver are package emu/mlx5/ifc; this
// package decides what they mean. It runs on the HCA core (emu/hca: the device lock, the
// interrupts sent after unlock, the engine) as every model does.
//
// The device knows nothing of sockets: it sees guest memory as a
// dma.Memory, raises MSI-X vectors through a function, and is driven by
// region reads and writes, so tests run it with a byte slice for RAM and a
// fake driver.
package mlx5

import (
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/hcaemu/hcaemu/dma"
	doorbell "github.com/hcaemu/hcaemu/doorbell/mlx5"
	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/ib/mad"
	"github.com/hcaemu/hcaemu/emu/ib/subnet"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/ratelog"
	"github.com/hcaemu/hcaemu/mmio"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// PCI identity and layout (spec §1).
const (
	VendorMellanox  = 0x15B3
	DeviceConnectX4 = 0x1013 // a PF: VF IDs change the driver's paths
	// ClassInfiniBand is the class code of the IB personality (the driver
	// ignores it).
	ClassInfiniBand = 0x020700

	// BAR0Size holds the init segment (pages 0–2) and the UAR pages: UAR
	// index n is the 4 KiB page at n·4096.
	BAR0Size = 64 << 20
	// FirstUAR is the first UAR index ALLOC_UAR may hand out: pages 0–2 are
	// the init segment, page 1 is mapped read-only into every process.
	FirstUAR = 16
	// BAR2Size holds the MSI-X table at 0 and the PBA at PBAOff, apart from
	// the UAR pages.
	BAR2Size = 0x4000
	PBAOff   = 0x2000
	// DefaultVectors is the MSI-X table size: 1 control vector (command,
	// async and page EQs) and 16 completion vectors.
	DefaultVectors = 17
	// MaxVectors is the most vectors the MSI-X table in BAR2 holds below
	// the PBA.
	MaxVectors = PBAOff / 16
)

// The command queue the device offers in cmdq_addr_l_sz (spec §1.3): 32
// slots of 64 bytes, one 4 KiB page.
const (
	LogCmdqSize   = 5
	LogCmdqStride = 6
)

// Firmware identity reported in the init segment and the health buffer.
const (
	FWMajor = 16
	FWMinor = 35
	FWSub   = 1010
)

// Config configures one emulated ConnectX function.
type Config struct {
	// Name identifies the device in logs ("hca0").
	Name string
	// Mem is guest memory; MSIX raises an MSI-X vector (never blocks).
	Mem  dma.Memory
	MSIX func(vector int)
	// Vectors is the MSI-X table size (0: DefaultVectors; at most
	// MaxVectors).
	Vectors int
	// InitializingReads is how many reads of the initializing register
	// still see firmware initializing after power-on or a reset (the
	// driver's wait_fw_init polls it); 0: ready at once.
	InitializingReads int
	Log               *slog.Logger
	// Strict says what the device does when the driver breaks a rule
	// (strict.go); the zero value is hca.StrictWarn.
	Strict hca.StrictMode
	// OnFinding, when set, is told of the first finding in hca.StrictFail
	// mode. It runs under the device lock and must not block.
	OnFinding func(hca.Finding)
	// Subnet is the InfiniBand subnet the port attaches to (its SM assigns
	// the LID); nil: a port with LID 0 on no subnet.
	Subnet *subnet.Subnet
	// NodeGUID is the node's GUID (the port's is the next one); 0: a
	// default.
	NodeGUID uint64
	// SequentialQPNs makes every QPN its handle (recording and replaying)
	// instead of random high bits (hca.QPNs).
	SequentialQPNs bool
	// Faults, when set, is asked at the device's fault points (faults.go).
	Faults hca.FaultHook
	// Tap, when set, sits between the device and its IB port (recording
	// and replay, tap.go).
	Tap *PortTap
	// FrozenTimers: the QPs' timers are armed and stopped but never
	// expire (a replay, which runs at no wall-clock pace: tap.go).
	FrozenTimers bool
	// StepClock: the device clock counts reads and CQEs instead of
	// telling time (recording and replay: clock.go).
	StepClock bool
	// Mkeys, when positive, bounds the mkey table to this many entries
	// (below the 2^log_max_mkey the capabilities report), so that a
	// deregistered mkey's index comes back soon (tests of reused keys).
	Mkeys int
}

// Device is one emulated ConnectX function.
//
// Everything but the PCI config space (package mmio keeps its own command
// register for other goroutines) is under the core's device lock: the
// register file is small and a register read never waits behind a data
// path here yet.
type Device struct {
	// Set by New, read-only after.
	name    string
	log     *slog.Logger
	vectors int
	pci     *mmio.Config
	mem     dma.Memory
	initN   int

	// core is the device lock and the interrupts sent after unlock.
	core hca.Core

	// The InfiniBand port: attached to its subnet for the device's life
	// (set by New); rxDropped counts the packets the engine's full
	// receive queue refused (Stats.RxQueueFull).
	nodeGUID uint64
	ibPort   *subnet.Port
	ibSend   func(pkt []byte) bool // ibPort.Send, or through Config.Tap
	// wire carries RC packets to other HCAs of the subnet in batches,
	// without whole IB packets, when nothing watches the subnet (the
	// core's direct path: runs, lent payloads; ib.go).
	wire      hca.Wire
	rxDropped atomic.Uint64

	// Under the device lock.
	// port is the SMA's view of the port (MAD_IFC answers from it).
	port  mad.PortState
	seg   initSeg
	cmdq  cmdq
	fn    function // what the commands set up: ENABLE_HCA to DISABLE_HCA
	stats Stats
	// strict is strict mode's bookkeeping: counts are atomic, the latch
	// is under the lock and survives resets.
	strict hca.Strict
	// qpns makes the QPNs; mrKeys the mkeys' registration generations
	// (never reset: a key kept past a reset does not name a later
	// registration).
	qpns   hca.QPNs
	mrKeys hca.MRKeys
	// scratch is where the engine reads doorbell records and builds
	// CQEs and completion EQEs: a stack array handed to dma.Memory
	// escapes to the heap, one allocation per WQE, receive, CQE and
	// event otherwise.
	scratch struct {
		sqRec, rqRec, cqRec [doorbell.RecordSize]byte
		cqe                 [uverbs.CQESize64]byte
		eqe                 [ifc.EQESize]byte // a COMP EQE
	}
	mkeys int // Config.Mkeys
	// clock is the free-running device clock (clock.go).
	clock deviceClock
	// x is the fault injection and observation state (faults.go,
	// port.go, observe.go).
	x extras
}

// Stats counts what the command engine did.
type Stats struct {
	Commands   uint64 // descriptors taken (ownership bit set)
	Delivered  uint64 // answered with delivery status OK
	Refused    uint64 // answered with another delivery status
	Unanswered uint64 // a doorbell for a slot the device could not read or did not own
	UARWrites  uint64 // writes to UAR pages
	EQEs       uint64 // EQEs written
	CmdEQEs    uint64 // of which command completions (event mode)
	EQOverruns uint64 // EQEs dropped: their EQ was full
	// The data path.
	SendDoorbells uint64 // send doorbells that kicked a QP
	CQArms        uint64 // CQ arm doorbells taken
	CQEs          uint64 // CQEs written
	CQOverruns    uint64 // CQEs dropped: their CQ was full
	RxDropped     uint64 // IB packets the device took and dropped
	// RxAddress: of RxDropped, packets for a connected QP from another
	// LID than its remote one (or to another LID than the port's).
	RxAddress   uint64
	RxQueueFull uint64 // IB packets refused: the engine's receive queue was full (the sender retries)
	// QKeyViolations: datagrams a UD or GSI QP dropped for their Q_Key.
	QKeyViolations uint64
	// UMR WQEs carried out (umrexec.go): translation loads (the MR
	// cache's registrations), fast registrations of MTT and KLM mkeys on
	// kernel QPs, invalidations (FREE = 1, a ULP's LOCAL_INV or the
	// revoke), and those refused.
	UMRTranslations, FastRegMTT, FastRegKLM, UMRInvalidations, UMRRefused uint64
}

// New creates a device in its power-on state.
func New(cfg Config) *Device {
	// Much of what the device logs, the guest triggers: bound it per message.
	log := ratelog.Device(cfg.Log, cfg.Name)
	vectors := cfg.Vectors
	if vectors <= 0 {
		vectors = DefaultVectors
	}
	vectors = min(vectors, MaxVectors)
	d := &Device{
		name:    cfg.Name,
		log:     log,
		vectors: vectors,
		mem:     cfg.Mem,
		initN:   cfg.InitializingReads,
		strict:  hca.Strict{Mode: cfg.Strict, Report: cfg.OnFinding},
		qpns:    hca.NewQPNs(cfg.SequentialQPNs),
		mkeys:   cfg.Mkeys,
		pci: mmio.NewExpressConfig(mmio.Identity{
			Vendor: VendorMellanox, Device: DeviceConnectX4,
			SubVendor: VendorMellanox, SubDevice: DeviceConnectX4,
			Class: ClassInfiniBand,
		}, bars, &mmio.MSIX{Vectors: vectors, TableBAR: regionMSIX, PBABAR: regionMSIX, PBAOff: PBAOff},
			&mmio.PCIe{LinkSpeed: 3, LinkWidth: 16}), // 8 GT/s x16, a ConnectX-4's
	}
	d.x.fault.hook = cfg.Faults
	d.nodeGUID = cfg.NodeGUID
	if d.nodeGUID == 0 {
		d.nodeGUID = defaultNodeGUID
	}
	if cfg.FrozenTimers {
		d.core.FreezeTimers()
	}
	d.wire.Name = cfg.Name
	d.clock = newDeviceClock(cfg.StepClock)
	d.attach(cfg)
	d.powerOn()
	d.core.Start(coreModel{d}, log, vectors, cfg.MSIX)
	return d
}

// powerOn puts the registers and the command queue in their power-on
// state (lock held, or before Start).
func (d *Device) powerOn() {
	d.seg.powerOn(d.initN)
	d.cmdq = cmdq{}
	d.wire.RevokeLoans()
	d.fn = function{}
	d.port = d.newPortState()
	d.portUp() // a reset ends a port_down
	// Strict mode's latch survives resets: the device stays dead.
	if d.core.Fatal = d.strict.Latched(); d.core.Fatal {
		d.seg.synd = ifc.HealthSyndFWErr
	}
}

// The function's regions: BAR0 the init segment and the UAR pages, BAR2
// the MSI-X table and PBA (the client emulates the table).
const (
	regionInit   = mmio.RegionBAR0
	regionMSIX   = mmio.RegionBAR2
	regionConfig = mmio.RegionConfig
)

// bars are the function's BARs, both 64-bit (BAR1 and BAR3 are their
// upper halves).
var bars = [6]mmio.BAR{
	regionInit: {Size: BAR0Size, Is64: true, Prefetch: true},
	regionMSIX: {Size: BAR2Size, Is64: true},
}

// RegionSize implements vfio.Device: the BARs config space declares, and
// config space itself.
func (d *Device) RegionSize(index int) uint64 {
	switch {
	case index == regionConfig:
		return mmio.ConfigSize
	case index >= 0 && index < len(bars):
		return bars[index].Size
	}
	return 0
}

// IRQCount implements vfio.Device: MSI-X only (mlx5_core has no MSI or
// INTx fallback).
func (d *Device) IRQCount(index int) uint32 {
	if index == mmio.IRQMSIX {
		return uint32(d.vectors)
	}
	return 0
}

// ReadRegion implements vfio.Device.
func (d *Device) ReadRegion(index int, off uint64, p []byte) error {
	return d.access(index, off, p, false)
}

// WriteRegion implements vfio.Device.
func (d *Device) WriteRegion(index int, off uint64, p []byte) error {
	return d.access(index, off, p, true)
}

// access is a region read or write.
func (d *Device) access(index int, off uint64, p []byte, write bool) error {
	switch index {
	case regionConfig:
		if write {
			d.pci.Write(off, p)
		} else {
			d.pci.Read(off, p)
		}
	case regionMSIX:
		// The client emulates the MSI-X table: our copy takes no writes,
		// and a PBA read sees nothing pending (vectors without an eventfd
		// are dropped).
		if !write {
			clear(p)
		}
	case regionInit:
		d.core.Lock()
		if write {
			d.writeBAR0(off, p)
		} else {
			d.readBAR0(off, p)
		}
		d.core.Unlock()
	default:
		return fmt.Errorf("region %d absent", index)
	}
	return nil
}

// Reset implements vfio.Device (DEVICE_RESET): back to power-on state.
func (d *Device) Reset() {
	d.core.Lock()
	d.powerOn()
	d.core.Drop()
	d.core.Unlock()
	d.pci.Reset()
}

// Close implements vfio.Device: the client is gone. Later calls do
// nothing; no DMA happens after it returns.
func (d *Device) Close() {
	d.core.Lock()
	if d.core.Closed {
		d.core.Unlock()
		return
	}
	d.powerOn()
	d.core.Closed = true
	d.core.Unlock()
	d.core.Stop()
	if d.ibPort != nil {
		d.ibPort.Detach()
	}
}

// Stats returns the command engine's counters.
func (d *Device) Stats() Stats {
	d.core.Lock()
	defer d.core.Unlock()
	s := d.stats
	s.RxQueueFull = d.rxDropped.Load()
	return s
}

// readGuest and writeGuest reach guest memory as the function may: only
// while bus mastering is enabled, never after Close.
func (d *Device) readGuest(p []byte, gpa uint64) error {
	if err := d.busOK(gpa, len(p)); err != nil {
		return err
	}
	return d.mem.ReadAt(p, gpa)
}

func (d *Device) writeGuest(p []byte, gpa uint64) error {
	if err := d.busOK(gpa, len(p)); err != nil {
		return err
	}
	return d.mem.WriteAt(p, gpa)
}

func (d *Device) busOK(gpa uint64, n int) error {
	switch {
	case d.mem == nil:
		return dma.Fault(gpa, uint64(n), "no guest memory")
	case d.core.Closed:
		return dma.Fault(gpa, uint64(n), "device closed")
	case !d.pci.BusMaster():
		return dma.Fault(gpa, uint64(n), "bus mastering disabled")
	}
	return nil
}

// coreModel is the device as the core's engine sees it: kicked QPs
// (doorbells, their transports' timers and responses) and the IB packets
// the port delivered (datapath.go).
type coreModel struct{ d *Device }

func (m coreModel) Service(target hca.Target, h uint32, work hca.Work, gen uint64, expired bool) {
	if target == hca.TargetQP {
		m.d.serviceQP(h, work, gen, expired)
	}
}
func (m coreModel) ReceiveFrame(frame []byte) { m.d.receiveFrame(frame) }

// ReceiveBatch takes RC packets another HCA of the subnet sent without
// whole IB packets (ib.go), unless a fault holds the port down.
func (m coreModel) ReceiveBatch(b *fabric.Batch) {
	if m.d.portDown() {
		m.d.x.port.lost.Add(b.Count())
		return
	}
	m.d.wire.ReceiveBatch(b)
}

// BeforeUnlock sends the batch built under the lock before it is let go.
func (m coreModel) BeforeUnlock() { m.d.wire.FlushOut() }

// DeviceFatal is what firmware does when it dies: a syndrome in the health
// buffer, which the driver's health poll reports and recovers from.
func (m coreModel) DeviceFatal() { m.d.seg.synd = ifc.HealthSyndFWErr }
