// Package pvrdma models the VMware paravirtual RDMA host channel adapter
// (PVRDMA, PCI 15ad:0820) as the unmodified Linux vmw_pvrdma driver and the
// rdma-core provider see it: the PCI function (config space, BAR0 MSI-X, BAR1
// register file, BAR2 UAR doorbell pages), the device shared region (DSR)
// with its capability block, command channel and device rings, the resource
// tables (contexts, PDs, MRs, CQs, QPs, SRQs, the GID table) and the QP state
// machine. The layouts it exchanges with the driver (registers, DSR, caps,
// command requests and responses) are the structs of package emu/pvrdma/abi;
// this package decides what they mean. It runs on the HCA core (package
// emu/hca: the engine, the device lock, the wire, the model-neutral QP) as
// its model, and its QPs' RC and UD services are packages emu/transport/rc
// and ud.
//
// The device knows nothing of sockets: it sees guest memory as a dma.Memory,
// raises MSI-X vectors through a function, and is driven by region reads and
// writes, so tests can run it with a byte slice for RAM and a fake driver.
package pvrdma

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	"github.com/hcaemu/hcaemu/emu/ratelog"
	"github.com/hcaemu/hcaemu/mmio"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// PCI identity and layout.
const (
	VendorVMware = 0x15AD
	DevicePVRDMA = 0x0820

	BAR0Size = 0x4000 // MSI-X table @0, PBA @0x2000
	BAR1Size = 0x1000 // register file
	PBAOff   = 0x2000
	Vectors  = 3 // MSI-X: response, async, CQ notification
)

// Config configures one emulated HCA.
type Config struct {
	// Name identifies the device in logs ("hca0").
	Name string
	// Mem is guest memory; MSIX raises an MSI-X vector (never blocks).
	Mem  dma.Memory
	MSIX func(vector int)
	// MAC is the MAC of the paired vmxnet3 (function 0): node GUID and RoCE
	// source MAC.
	MAC [6]byte
	// Caps overrides DefaultCaps when non-nil (tests).
	Caps *abi.DeviceCaps
	// MaxQP, when not zero, is the number of QPs the device holds and
	// advertises (max_qp) instead of the capabilities' (hcaemu --max-qp).
	MaxQP uint32
	// MTU is the Ethernet MTU of the segment the port is on (the paired
	// vmxnet3's): the port's active MTU is the largest IB MTU whose
	// packets fit in it (ActiveMTU). Zero means 1500.
	MTU int
	// Attach connects the HCA's port to a fabric; nil leaves it on an
	// empty wire.
	Attach Attach
	Log    *slog.Logger
	// SequentialQPNs makes every QPN its QP's handle instead of carrying
	// random high bits (qpn.go): for recording and replaying a session,
	// whose QPNs must come out the same each time.
	SequentialQPNs bool
	// Faults, when set, is asked at the device's fault points (package
	// emu/fault); nil: the device never misbehaves on purpose.
	Faults hca.FaultHook
	// Strict says what the device does when the driver breaks a rule
	// (strict.go); the zero value is StrictWarn.
	Strict hca.StrictMode
	// OnFinding, when set, is told of the first finding in StrictFail
	// mode. It runs under the device lock and must not block.
	OnFinding func(hca.Finding)
}

// Device is one emulated PVRDMA function.
//
// Its fields are grouped by what guards them: set once by New; the
// register file, atomics; and the core (hca.Core: the device lock, the
// engine with locks of its own, the interrupts sent after unlock) with
// everything its device lock guards. Lock order: the engine's taking lock,
// then the device lock, then the engine's queue locks (hca/engine.go); no
// eventfd is written under the device lock.
type Device struct {
	// Set by New, read-only after.
	name string
	log  *slog.Logger
	caps abi.DeviceCaps
	// activeMTU is the port's active IB MTU (an enum pvrdma_mtu value).
	activeMTU uint32
	mac       [6]byte // configured: node GUID, MACL/MACH
	msix      func(int)
	pci       *mmio.Config
	mem       *busMem // a pointer: a struct in a dma.Memory would be boxed, an allocation per access
	faults    hca.FaultHook

	// The register file a vCPU reads. Reads never take mu: a register read
	// must not wait behind the engine's batch of frames or a long send queue.
	// Writes come from the connection's reader in order (and raise from
	// the engine), so atomics are enough.
	dsrLow, dsrHigh atomic.Uint32
	errShadow       atomic.Uint32 // ERR as the driver reads it: errReg once the write that set it is done
	icr, imr        atomic.Uint32
	macl, mach      atomic.Uint32

	// The core: the device lock (held while a command, a doorbell or a
	// unit of the engine's work runs; it guards every field below, and the
	// core's Fatal and Closed), the engine, the interrupts raised under
	// the lock.
	core hca.Core

	errReg uint32 // ERR as the command in progress sets it; published to errShadow
	// State from the DSR, nil until loaded.
	dsr    *dsrState
	active bool
	res    resources
	qpns   hca.QPNs
	// gidGen counts the GID table's changes: a QP's cached path (qpEnv.Path)
	// is good while it has not moved.
	gidGen uint64
	// cqeBuf is where post encodes a CQE before writing it to the ring.
	cqeBuf [uverbs.CQESize]byte
	// wire is the port as the core runs it (hca.Wire): its fabric
	// attachment (set by New), batches, loans, counters, source MAC and
	// fault-held state.
	wire hca.Wire
	// The CQs and send queues whose ring index the guest has not been
	// shown yet (publishRings, at the latest in unlock).
	dirtyCQs []*cq
	dirtySQs []*qp
	// stats are the device's counters (stats.go).
	stats    deviceCounters
	strict   hca.Strict   // strict mode: counts are atomic, the latch is under mu
	portHold hca.PortHold // brings the port back up after a port_down
}

// New creates a device in its power-on state.
func New(cfg Config) *Device {
	caps := DefaultCaps()
	if cfg.Caps != nil {
		caps = *cfg.Caps
	}
	if cfg.MaxQP != 0 {
		caps.MaxQP = cfg.MaxQP
	}
	if cfg.MAC != ([6]byte{}) {
		caps.NodeGUID = EUI64(cfg.MAC)
		caps.SysImageGUID = caps.NodeGUID
	}
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	// Much of what the device logs, the guest triggers: bound it per message.
	log = slog.New(ratelog.New(log.Handler(), ratelog.Options{}))
	if cfg.Name != "" {
		log = log.With("dev", cfg.Name)
	}
	msix := cfg.MSIX
	if msix == nil {
		msix = func(int) {}
	}
	d := &Device{
		name:      cfg.Name,
		log:       log,
		caps:      caps,
		activeMTU: ActiveMTU(cfg.MTU),
		mac:       cfg.MAC,
		msix:      msix,
		faults:    cfg.Faults,
		strict:    hca.Strict{Mode: cfg.Strict, Report: cfg.OnFinding},
		pci: mmio.NewConfig(mmio.Identity{
			Vendor: VendorVMware, Device: DevicePVRDMA,
			SubVendor: VendorVMware, SubDevice: DevicePVRDMA,
			Revision: 1, Class: 0x028000,
		}, [6]mmio.BAR{
			{Size: BAR0Size},
			{Size: BAR1Size},
			{Size: uint64(caps.MaxUAR) * 4096},
		}, &mmio.MSIX{Vectors: Vectors, TableBAR: regionMSIX, TableOff: 0, PBABAR: regionMSIX, PBAOff: PBAOff}),
	}
	d.mem = &busMem{m: cfg.Mem, pci: d.pci}
	d.qpns = hca.NewQPNs(cfg.SequentialQPNs)
	d.powerOn()
	d.core.Start(coreModel{d}, log, Vectors, msix)
	d.wire.Name = cfg.Name
	d.wire.Attach(&d.core, coreModel{d}, log, cfg.Attach, d.mem, cfg.Mem)
	return d
}

func (d *Device) powerOn() {
	d.dsrLow.Store(0)
	d.dsrHigh.Store(0)
	d.errReg = 0xFFFF // non-zero until a successful ACTIVATE
	d.errShadow.Store(d.errReg)
	d.icr.Store(0)
	d.imr.Store(0)
	d.macl.Store(binary.LittleEndian.Uint32(d.mac[0:4]))
	d.mach.Store(uint32(binary.LittleEndian.Uint16(d.mac[4:6])))
	d.dsr = nil
	d.active = false
	d.core.Fatal = d.strict.Latched() // strict mode's latch survives resets
	d.wire.Down = false
	d.portHold.Release()
	d.wire.MAC = d.mac
	d.wire.QKeyViolations = 0
	d.res.init(&d.caps)
}

// busMem is guest memory as the function may reach it: only while bus
// mastering is enabled.
type busMem struct {
	m   dma.Memory
	pci *mmio.Config
}

func (b *busMem) ok(gpa, n uint64) error {
	if b.m == nil {
		return dma.Fault(gpa, n, "no guest memory")
	}
	if !b.pci.BusMaster() {
		return dma.Fault(gpa, n, "bus mastering disabled")
	}
	return nil
}

func (b *busMem) ReadAt(p []byte, gpa uint64) error {
	if err := b.ok(gpa, uint64(len(p))); err != nil {
		return err
	}
	return b.m.ReadAt(p, gpa)
}

func (b *busMem) WriteAt(p []byte, gpa uint64) error {
	if err := b.ok(gpa, uint64(len(p))); err != nil {
		return err
	}
	return b.m.WriteAt(p, gpa)
}

func (b *busMem) Access(gpa, n uint64, write bool, fn func([]byte)) error {
	if err := b.ok(gpa, n); err != nil {
		return err
	}
	return b.m.Access(gpa, n, write, fn)
}

func (b *busMem) Load32(gpa uint64) (uint32, error) {
	if err := b.ok(gpa, 4); err != nil {
		return 0, err
	}
	return dma.LoadUint32(b.m, gpa)
}

func (b *busMem) Store32(gpa uint64, v uint32) error {
	if err := b.ok(gpa, 4); err != nil {
		return err
	}
	return dma.StoreUint32(b.m, gpa, v)
}

// The function's regions: BAR0 holds the MSI-X table and PBA (the client
// emulates the table), BAR1 the register file, BAR2 the UAR doorbell pages.
const (
	regionMSIX   = mmio.RegionBAR0
	regionRegs   = mmio.RegionBAR1
	regionUAR    = mmio.RegionBAR2
	regionConfig = mmio.RegionConfig
)

// RegionSize implements vfio.Device.
func (d *Device) RegionSize(index int) uint64 {
	switch index {
	case regionMSIX:
		return BAR0Size
	case regionRegs:
		return BAR1Size
	case regionUAR:
		return uint64(d.caps.MaxUAR) * 4096
	case regionConfig:
		return mmio.ConfigSize
	}
	return 0
}

// IRQCount implements vfio.Device: MSI-X only.
func (d *Device) IRQCount(index int) uint32 {
	if index == mmio.IRQMSIX {
		return Vectors
	}
	return 0
}

// ReadRegion implements vfio.Device.
func (d *Device) ReadRegion(index int, off uint64, p []byte) error {
	switch index {
	case regionConfig:
		d.pci.Read(off, p)
	case regionMSIX:
		// The client emulates the MSI-X table; only PBA reads arrive. Nothing
		// is ever pending here: vectors without an eventfd are dropped.
		clear(p)
	case regionRegs:
		clear(p)
		reg := off &^ 3
		if off+uint64(len(p)) > reg+4 {
			return nil // straddles registers: reads 0
		}
		mmio.Put32(p, off, d.readReg(reg))
	case regionUAR:
		// UAR pages are write-only doorbells.
		clear(p)
	default:
		return fmt.Errorf("region %d absent", index)
	}
	return nil
}

// WriteRegion implements vfio.Device.
func (d *Device) WriteRegion(index int, off uint64, p []byte) error {
	switch index {
	case regionConfig:
		d.pci.Write(off, p)
	case regionMSIX:
		// MSI-X table writes are the client's; ignore.
	case regionRegs:
		reg, v, ok := mmio.Reg32(off, p)
		if !ok {
			d.reportf(hca.FindingRegister, "ignored", "BAR1 register %#x written %d bytes wide: registers are 32-bit", off, len(p))
			return nil
		}
		d.writeReg(reg, v)
	case regionUAR:
		if len(p) != 4 {
			d.reportf(hca.FindingRegister, "ignored", "UAR doorbell at %#x written %d bytes wide: doorbells are 32-bit", off, len(p))
			return nil
		}
		d.doorbell(off, binary.LittleEndian.Uint32(p))
	default:
		return fmt.Errorf("region %d absent", index)
	}
	return nil
}

// Reset implements vfio.Device (DEVICE_RESET): back to power-on state.
func (d *Device) Reset() {
	d.core.Lock()
	d.resetLocked("device reset")
	d.unlock()
	d.pci.Reset()
}

// Close implements vfio.Device: the client is gone; free everything. Later
// calls do nothing.
func (d *Device) Close() {
	d.core.Lock()
	if d.core.Closed {
		d.unlock()
		return
	}
	d.resetLocked("disconnect")
	d.core.Closed = true
	d.unlock()
	d.wire.Detach()
	d.core.Stop()
}

// resetLocked drops every object and the DSR. After it returns no DMA
// happens until a new DSR is loaded.
func (d *Device) resetLocked(why string) {
	d.revokeLoans()
	if d.dsr != nil || d.res.count() > 0 {
		d.log.Info("reset: all objects freed", "why", why, "objects", d.res.count())
	}
	for _, h := range d.res.qp.handles() {
		qp := d.res.qp.get(h)
		d.retire(qp)
		d.resetTransport(qp)
	}
	d.powerOn()
	d.core.Drop()
	d.announce()
}

// readReg reads a BAR1 register without the device lock.
func (d *Device) readReg(reg uint64) uint32 {
	switch reg {
	case abi.RegVersion:
		return abi.VersionQPHandle
	case abi.RegDSRLow:
		return d.dsrLow.Load()
	case abi.RegDSRHigh:
		return d.dsrHigh.Load()
	case abi.RegErr:
		return d.errShadow.Load()
	case abi.RegICR:
		return d.icr.Swap(0)
	case abi.RegIMR:
		return d.imr.Load()
	case abi.RegMACL:
		return d.macl.Load()
	case abi.RegMACH:
		return d.mach.Load()
	}
	return 0
}

// writeReg writes a BAR1 register. Registers with side effects (DSRHIGH,
// CTL, REQUEST) run under the device lock; ERR is published when the write is
// done, so the driver's read right after it sees the command's status.
func (d *Device) writeReg(reg uint64, v uint32) {
	switch reg {
	case abi.RegDSRLow:
		d.dsrLow.Store(v)
		return
	case abi.RegIMR:
		d.imr.Store(v)
		return
	case abi.RegMACL:
		d.macl.Store(v)
		return
	case abi.RegMACH:
		d.mach.Store(v)
		return
	}
	d.core.Lock()
	defer d.unlock()
	defer func() { d.errShadow.Store(d.errReg) }()
	switch reg {
	case abi.RegDSRHigh:
		d.dsrHigh.Store(v)
		d.loadDSR(uint64(v)<<32 | uint64(d.dsrLow.Load()))
	case abi.RegCtl:
		d.ctl(v)
	case abi.RegRequest:
		if v != 0 {
			return
		}
		d.request()
	default:
		d.log.Debug("ignored write to read-only or reserved register", "reg", reg, "value", v)
	}
}

func (d *Device) ctl(v uint32) {
	switch v {
	case abi.CtlActivate:
		if d.dsr == nil {
			d.find(hca.FindingRegister, "ERR=22 EINVAL", "CTL=ACTIVATE before DSRHIGH loaded a DSR")
			d.errReg = errInval
			return
		}
		d.active = true
		d.errReg = 0
		d.log.Info("activated")
	case abi.CtlUnquiesce:
		if !d.active {
			d.find(hca.FindingRegister, "ERR=22 EINVAL", "CTL=UNQUIESCE before CTL=ACTIVATE")
			d.errReg = errInval
			return
		}
		d.errReg = 0
	case abi.CtlReset:
		d.resetLocked("CTL=RESET")
		d.errReg = 0
	default:
		d.find(hca.FindingRegister, "ERR=22 EINVAL", "CTL=%#x: not ACTIVATE, UNQUIESCE or RESET", v)
		d.errReg = errInval
	}
}

// raise sets an interrupt cause and, unless masked, queues its vector for
// unlock to send (raise runs under the device lock).
func (d *Device) raise(cause int) {
	d.icr.Or(1 << cause)
	if d.imr.Load()&(1<<cause) == 0 {
		d.core.Raise(cause)
	}
}

// unlock releases the device lock (hca.Core.Unlock: the ring indexes and
// the batch out first, the interrupts raised under it after).
func (d *Device) unlock() { d.core.Unlock() }
