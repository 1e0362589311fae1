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

// NewConfig builds config space for a conventional PCI endpoint with the
// given BARs (index 0..5) and an optional MSI-X capability. Interrupt Pin is
// 0: the function has no INTx.
func NewConfig(id Identity, bars [6]BAR, msix *MSIX) *Config {
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
	c.reset = c.b
	return c
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
