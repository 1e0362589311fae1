// Package emu models the VMware paravirtual RDMA host channel adapter
// (PVRDMA, PCI 15ad:0820) as the unmodified Linux vmw_pvrdma driver and the
// rdma-core provider see it: the PCI function (config space, BAR0 MSI-X, BAR1
// register file, BAR2 UAR doorbell pages), the device shared region (DSR)
// with its capability block, command channel and device rings, the resource
// tables (contexts, PDs, MRs, CQs, QPs, SRQs, the GID table) and the QP state
// machine.
//
// The device knows nothing of sockets: it sees guest memory as a dma.Memory,
// raises MSI-X vectors through a function, and is driven by region reads and
// writes, so tests can run it with a byte slice for RAM and a fake driver.
package emu

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/mmio"
)

// PCI identity and layout.
const (
	VendorVMware = 0x15AD
	DevicePVRDMA = 0x0820

	BAR0Size = 0x4000 // MSI-X table @0, PBA @0x2000
	BAR1Size = 0x1000 // register file
	PBAOff   = 0x2000
	Vectors  = 3 // MSI-X: response, async, CQ notification

	// Version is the device interface version reported in VERSION
	// (QPHANDLE: CREATE_QP v2 response, 64-bit PFNs).
	Version = 20
)

// Interrupt causes = MSI-X vectors.
const (
	IntrResponse = 0
	IntrAsync    = 1
	IntrCQ       = 2
)

// Register offsets in BAR1.
const (
	RegVersion = 0x00
	RegDSRLow  = 0x04
	RegDSRHigh = 0x08
	RegCtl     = 0x0C
	RegRequest = 0x10
	RegErr     = 0x14
	RegICR     = 0x18
	RegIMR     = 0x1C
	RegMACL    = 0x20
	RegMACH    = 0x24
)

// CTL values.
const (
	CtlActivate  = 0
	CtlUnquiesce = 1
	CtlReset     = 2
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
	Caps *Caps
	// Attach connects the HCA's port to a fabric; nil leaves it on an
	// empty wire.
	Attach Attach
	Log    *slog.Logger
}

// Device is one emulated PVRDMA function.
type Device struct {
	name string
	log  *slog.Logger
	caps Caps
	mac  [6]byte // configured: node GUID, MACL/MACH
	msix func(int)
	pci  *mmio.Config
	mem  busMem
	port Port

	eng engine

	mu sync.Mutex // guards everything below; held while a command or doorbell runs
	// Register file.
	dsrLow, dsrHigh uint32
	errReg          uint32
	icr, imr        uint32
	macl, mach      uint32
	// State from the DSR, nil until loaded.
	dsr     *dsrState
	active  bool
	wireMAC [6]byte // source MAC of RoCE frames: the vmxnet3's, learnt from the default GID
	res     resources
	closed  bool
}

// New creates a device in its power-on state.
func New(cfg Config) *Device {
	caps := DefaultCaps()
	if cfg.Caps != nil {
		caps = *cfg.Caps
	}
	if cfg.MAC != ([6]byte{}) {
		caps.NodeGUID = EUI64(cfg.MAC)
		caps.SysImageGUID = caps.NodeGUID
	}
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	if cfg.Name != "" {
		log = log.With("dev", cfg.Name)
	}
	msix := cfg.MSIX
	if msix == nil {
		msix = func(int) {}
	}
	d := &Device{
		name: cfg.Name,
		log:  log,
		caps: caps,
		mac:  cfg.MAC,
		msix: msix,
		pci: mmio.NewConfig(mmio.Identity{
			Vendor: VendorVMware, Device: DevicePVRDMA,
			SubVendor: VendorVMware, SubDevice: DevicePVRDMA,
			Revision: 1, Class: 0x028000,
		}, [6]mmio.BAR{
			{Size: BAR0Size},
			{Size: BAR1Size},
			{Size: uint64(caps.MaxUAR) * 4096},
		}, &mmio.MSIX{Vectors: Vectors, TableBAR: 0, TableOff: 0, PBABAR: 0, PBAOff: PBAOff}),
	}
	d.mem = busMem{m: cfg.Mem, pci: d.pci}
	d.powerOn()
	d.eng.start(d)
	if cfg.Attach != nil {
		d.port = cfg.Attach(d.receive)
	}
	return d
}

func (d *Device) powerOn() {
	d.dsrLow, d.dsrHigh = 0, 0
	d.errReg = 0xFFFF // non-zero until a successful ACTIVATE
	d.icr, d.imr = 0, 0
	d.macl = binary.LittleEndian.Uint32(d.mac[0:4])
	d.mach = uint32(binary.LittleEndian.Uint16(d.mac[4:6]))
	d.dsr = nil
	d.active = false
	d.wireMAC = d.mac
	d.res.init(&d.caps)
}

// busMem is guest memory as the function may reach it: only while bus
// mastering is enabled.
type busMem struct {
	m   dma.Memory
	pci *mmio.Config
}

func (b busMem) ok(gpa, n uint64) error {
	if b.m == nil {
		return dma.Fault(gpa, n, "no guest memory")
	}
	if !b.pci.BusMaster() {
		return dma.Fault(gpa, n, "bus mastering disabled")
	}
	return nil
}

func (b busMem) ReadAt(p []byte, gpa uint64) error {
	if err := b.ok(gpa, uint64(len(p))); err != nil {
		return err
	}
	return b.m.ReadAt(p, gpa)
}

func (b busMem) WriteAt(p []byte, gpa uint64) error {
	if err := b.ok(gpa, uint64(len(p))); err != nil {
		return err
	}
	return b.m.WriteAt(p, gpa)
}

func (b busMem) Access(gpa, n uint64, write bool, fn func([]byte)) error {
	if err := b.ok(gpa, n); err != nil {
		return err
	}
	return b.m.Access(gpa, n, write, fn)
}

// RegionSize implements vfio.Device.
func (d *Device) RegionSize(index int) uint64 {
	switch index {
	case 0:
		return BAR0Size
	case 1:
		return BAR1Size
	case 2:
		return uint64(d.caps.MaxUAR) * 4096
	case 7:
		return mmio.ConfigSize
	}
	return 0
}

// IRQCount implements vfio.Device: MSI-X only.
func (d *Device) IRQCount(index int) uint32 {
	if index == 2 {
		return Vectors
	}
	return 0
}

// ReadRegion implements vfio.Device.
func (d *Device) ReadRegion(index int, off uint64, p []byte) error {
	switch index {
	case 7:
		d.pci.Read(off, p)
	case 0:
		// The client emulates the MSI-X table; only PBA reads arrive. Nothing
		// is ever pending here: vectors without an eventfd are dropped.
		clear(p)
	case 1:
		clear(p)
		reg := off &^ 3
		if off+uint64(len(p)) > reg+4 {
			return nil // straddles registers: reads 0
		}
		mmio.Put32(p, off, d.readReg(reg))
	case 2:
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
	case 7:
		d.pci.Write(off, p)
	case 0:
		// MSI-X table writes are the client's; ignore.
	case 1:
		reg, v, ok := mmio.Reg32(off, p)
		if !ok {
			d.log.Warn("ignored register write of unsupported width", "off", off, "len", len(p))
			return nil
		}
		d.writeReg(reg, v)
	case 2:
		if len(p) != 4 {
			d.log.Warn("ignored UAR write of unsupported width", "off", off, "len", len(p))
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
	d.mu.Lock()
	d.resetLocked("device reset")
	d.mu.Unlock()
	d.pci.Reset()
}

// Close implements vfio.Device: the client is gone; free everything.
func (d *Device) Close() {
	d.mu.Lock()
	d.resetLocked("disconnect")
	d.closed = true
	d.mu.Unlock()
	if d.port != nil {
		d.port.Detach()
	}
	d.eng.stop()
}

// resetLocked drops every object and the DSR. After it returns no DMA
// happens until a new DSR is loaded.
func (d *Device) resetLocked(why string) {
	if d.dsr != nil || d.res.count() > 0 {
		d.log.Info("reset: all objects freed", "why", why, "objects", d.res.count())
	}
	for _, h := range d.res.qp.handles() {
		d.resetTransport(d.res.qp.get(h))
	}
	d.powerOn()
	d.eng.drop()
	d.announce()
}

func (d *Device) readReg(reg uint64) uint32 {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch reg {
	case RegVersion:
		return Version
	case RegDSRLow:
		return d.dsrLow
	case RegDSRHigh:
		return d.dsrHigh
	case RegErr:
		return d.errReg
	case RegICR:
		v := d.icr
		d.icr = 0
		return v
	case RegIMR:
		return d.imr
	case RegMACL:
		return d.macl
	case RegMACH:
		return d.mach
	}
	return 0
}

func (d *Device) writeReg(reg uint64, v uint32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch reg {
	case RegDSRLow:
		d.dsrLow = v
	case RegDSRHigh:
		d.dsrHigh = v
		d.loadDSR(uint64(d.dsrHigh)<<32 | uint64(d.dsrLow))
	case RegCtl:
		d.ctl(v)
	case RegRequest:
		if v != 0 {
			return
		}
		d.request()
	case RegIMR:
		d.imr = v
	case RegMACL:
		d.macl = v
	case RegMACH:
		d.mach = v
	default:
		d.log.Debug("ignored write to read-only or reserved register", "reg", reg, "value", v)
	}
}

func (d *Device) ctl(v uint32) {
	switch v {
	case CtlActivate:
		if d.dsr == nil {
			d.log.Warn("CTL=ACTIVATE without a loaded DSR")
			d.errReg = errInval
			return
		}
		d.active = true
		d.errReg = 0
		d.log.Info("activated")
	case CtlUnquiesce:
		if !d.active {
			d.errReg = errInval
			return
		}
		d.errReg = 0
	case CtlReset:
		d.resetLocked("CTL=RESET")
		d.errReg = 0
	default:
		d.log.Warn("unknown CTL value", "value", v)
		d.errReg = errInval
	}
}

// raise sets an interrupt cause and, unless masked, sends its vector.
func (d *Device) raise(cause int) {
	d.icr |= 1 << cause
	if d.imr&(1<<cause) == 0 {
		d.msix(cause)
	}
}
