// Package mmio models what a PCI function exposes to the CPU: its type-0
// configuration header with a capability list (MSI-X), and helpers to decode
// the aligned register accesses that reach a BAR.
//
// Config space here is the device's own copy. QEMU's vfio-user client keeps
// a copy too and emulates BAR registers, the capability pointers and the
// MSI-X capability itself after realize; it forwards every write to us first.
// So every write is accepted, bytes the hardware would not let software
// change are kept, and the command register (memory decode, bus mastering)
// is honoured.
package mmio

import (
	"encoding/binary"
	"sync/atomic"
)

// Standard config header offsets.
const (
	CfgVendorID   = 0x00
	CfgDeviceID   = 0x02
	CfgCommand    = 0x04
	CfgStatus     = 0x06
	CfgRevision   = 0x08
	CfgClass      = 0x09
	CfgHeaderType = 0x0E
	CfgBAR0       = 0x10
	CfgSubVendor  = 0x2C
	CfgSubDevice  = 0x2E
	CfgROM        = 0x30
	CfgCapPtr     = 0x34
	CfgIntLine    = 0x3C
	CfgIntPin     = 0x3D
	ConfigSize    = 256
)

// Command register bits.
const (
	CmdIO          = 1 << 0
	CmdMemory      = 1 << 1
	CmdBusMaster   = 1 << 2
	CmdSERR        = 1 << 8
	CmdINTxDisable = 1 << 10
)

const statusCapList = 1 << 4

// BAR describes one base address register.
type BAR struct {
	Size     uint64 // power of two; 0 = absent
	Is64     bool
	Prefetch bool
}

// MSIX places an MSI-X table and PBA.
type MSIX struct {
	Vectors  int // table size
	TableBAR int
	TableOff uint32
	PBABAR   int
	PBAOff   uint32
}

// Identity is the function's IDs.
type Identity struct {
	Vendor, Device       uint16
	SubVendor, SubDevice uint16
	Revision             uint8
	Class                uint32 // 24-bit class code
}

// Config is a function's 256-byte configuration space.
type Config struct {
	b       [ConfigSize]byte
	wmask   [ConfigSize]byte // bits software may change
	command atomic.Uint32    // mirror of the command register for other goroutines
	msixCap int              // offset of the MSI-X capability, 0 if none
	reset   [ConfigSize]byte
}

// MSIXCapOffset is where NewConfig places the MSI-X capability.
const MSIXCapOffset = 0x40

// PCIe describes the PCI Express capability of an endpoint: the link it
// reports (drivers print it, e.g. mlx5_core's pcie_print_link_status).
type PCIe struct {
	// LinkSpeed is the link speed code of LNKCAP and LNKSTA (1 = 2.5 GT/s,
	// 2 = 5, 3 = 8, 4 = 16, 5 = 32 GT/s); LinkWidth is the lane count.
	LinkSpeed, LinkWidth uint8
}

// PCIe capability layout (version 2, 60 bytes) and what NewExpressConfig
// sets in it.
const (
	PCIeCapOffset = 0x50 // after the MSI-X capability
	PCIeCapSize   = 0x3C
	PCIeFlags     = 0x02 // capability version 3:0, device/port type 7:4 (0 = endpoint)
	PCIeDevCap    = 0x04
	PCIeDevCtl    = 0x08
	PCIeLinkCap   = 0x0C
	PCIeLinkCtl   = 0x10
	PCIeLinkSta   = 0x12
	PCIeDevCtl2   = 0x28
	PCIeLinkCap2  = 0x2C
	PCIeLinkCtl2  = 0x30
)

// NewConfig builds config space for a conventional PCI endpoint with the
// given BARs (index 0..5) and an optional MSI-X capability. Interrupt Pin is
// 0: the function has no INTx.
func NewConfig(id Identity, bars [6]BAR, msix *MSIX) *Config {
	return NewExpressConfig(id, bars, msix, nil)
}

// NewExpressConfig is NewConfig with, when pcie is not nil, a PCI Express
// endpoint capability (version 2, no FLR, no extended capabilities) after
// the MSI-X one, at PCIeCapOffset.
func NewExpressConfig(id Identity, bars [6]BAR, msix *MSIX, pcie *PCIe) *Config {
	c := &Config{}
	le := binary.LittleEndian
	le.PutUint16(c.b[CfgVendorID:], id.Vendor)
	le.PutUint16(c.b[CfgDeviceID:], id.Device)
	c.b[CfgRevision] = id.Revision
	c.b[CfgClass] = byte(id.Class)
	c.b[CfgClass+1] = byte(id.Class >> 8)
	c.b[CfgClass+2] = byte(id.Class >> 16)
	le.PutUint16(c.b[CfgSubVendor:], id.SubVendor)
	le.PutUint16(c.b[CfgSubDevice:], id.SubDevice)
	le.PutUint16(c.wmask[CfgCommand:], CmdIO|CmdMemory|CmdBusMaster|CmdSERR|CmdINTxDisable)
	c.wmask[CfgIntLine] = 0xFF
	for i := 0; i < 6; i++ {
		bar := bars[i]
		if bar.Size == 0 {
			continue
		}
		off := CfgBAR0 + 4*i
		var typ uint32
		if bar.Is64 {
			typ |= 0x4
		}
		if bar.Prefetch {
			typ |= 0x8
		}
		le.PutUint32(c.b[off:], typ)
		mask := ^uint32(bar.Size-1) &^ 0xF
		le.PutUint32(c.wmask[off:], mask)
		if bar.Is64 && i < 5 {
			le.PutUint32(c.wmask[off+4:], uint32(^(bar.Size-1)>>32))
			i++
		}
	}
	if msix != nil && msix.Vectors > 0 {
		p := MSIXCapOffset
		le.PutUint16(c.b[CfgStatus:], statusCapList)
		c.b[CfgCapPtr] = byte(p)
		c.b[p] = 0x11 // MSI-X capability ID
		c.b[p+1] = 0  // end of list
		le.PutUint16(c.b[p+2:], uint16(msix.Vectors-1))
		le.PutUint32(c.b[p+4:], msix.TableOff|uint32(msix.TableBAR))
		le.PutUint32(c.b[p+8:], msix.PBAOff|uint32(msix.PBABAR))
		le.PutUint16(c.wmask[p+2:], 0xC000) // enable, function mask
		c.msixCap = p
	}
	if pcie != nil {
		c.addPCIe(*pcie)
	}
	c.reset = c.b
	return c
}

// addPCIe links a PCI Express capability in at PCIeCapOffset, last in
// the list.
func (c *Config) addPCIe(x PCIe) {
	le := binary.LittleEndian
	p := PCIeCapOffset
	link := uint32(x.LinkWidth&0x3F)<<4 | uint32(x.LinkSpeed&0xF)
	le.PutUint16(c.b[CfgStatus:], statusCapList)
	if c.msixCap != 0 {
		c.b[c.msixCap+1] = byte(p)
	} else {
		c.b[CfgCapPtr] = byte(p)
	}
	c.b[p] = 0x10                                             // PCI Express capability ID
	c.b[p+1] = 0                                              // end of list
	le.PutUint16(c.b[p+PCIeFlags:], 2)                        // version 2, endpoint
	le.PutUint32(c.b[p+PCIeDevCap:], 1<<15|1)                 // role-based error reporting, 256-byte max payload
	le.PutUint16(c.wmask[p+PCIeDevCtl:], 0x7FFF)              // device control, no FLR
	le.PutUint32(c.b[p+PCIeLinkCap:], link)                   // max speed and width
	le.PutUint16(c.wmask[p+PCIeLinkCtl:], 0x0FFF)             // link control
	le.PutUint16(c.b[p+PCIeLinkSta:], uint16(link))           // trained at the maximum
	le.PutUint16(c.wmask[p+PCIeDevCtl2:], 0xFFFF)             // device control 2
	le.PutUint32(c.b[p+PCIeLinkCap2:], (1<<x.LinkSpeed-1)<<1) // supported speeds vector
	le.PutUint16(c.wmask[p+PCIeLinkCtl2:], 0xFFFF)            // link control 2
}

// Read copies config bytes at off into p. Bytes beyond the header read 0.
func (c *Config) Read(off uint64, p []byte) {
	for i := range p {
		o := off + uint64(i)
		if o < ConfigSize {
			p[i] = c.b[o]
		} else {
			p[i] = 0
		}
	}
}

// Write applies a write of p at off through the write masks. Writes to
// read-only bytes are accepted and ignored, as the client expects.
func (c *Config) Write(off uint64, p []byte) {
	for i, v := range p {
		o := off + uint64(i)
		if o >= ConfigSize {
			continue
		}
		m := c.wmask[o]
		c.b[o] = c.b[o]&^m | v&m
	}
	c.command.Store(uint32(binary.LittleEndian.Uint16(c.b[CfgCommand:])))
}

// Reset returns config space to its power-on contents.
func (c *Config) Reset() {
	c.b = c.reset
	c.command.Store(0)
}

// Command is the current command register; safe from any goroutine.
func (c *Config) Command() uint16 { return uint16(c.command.Load()) }

// BusMaster reports whether the function may do DMA.
func (c *Config) BusMaster() bool { return c.Command()&CmdBusMaster != 0 }

// MSIXEnabled reports the MSI-X enable bit as last written.
func (c *Config) MSIXEnabled() bool {
	return c.msixCap != 0 && c.b[c.msixCap+3]&0x80 != 0
}

// Reg32 decodes a register access: it returns the register offset and, for
// writes, the value, when the access is one aligned 32-bit word. Other widths
// and alignments return ok=false; the caller ignores them.
func Reg32(off uint64, p []byte) (reg uint64, value uint32, ok bool) {
	if len(p) != 4 || off&3 != 0 {
		return 0, 0, false
	}
	return off, binary.LittleEndian.Uint32(p), true
}

// Put32 fills a read of len(p) bytes at off from a 32-bit register value v
// (for reads of any width inside the register).
func Put32(p []byte, off uint64, v uint32) {
	var w [4]byte
	binary.LittleEndian.PutUint32(w[:], v)
	for i := range p {
		p[i] = w[(off+uint64(i))&3]
	}
}
