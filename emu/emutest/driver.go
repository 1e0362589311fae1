// Package emutest is a fake vmw_pvrdma driver: it drives an emulated PVRDMA
// function through its PCI regions and a flat guest RAM exactly as the Linux
// driver does at probe (DSR, caps, activation, commands, the MAD layer's GSI
// QP), and offers the verbs a test needs to build user objects and queues.
package emutest

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu"
	"github.com/hcaemu/hcaemu/uverbs"
)

var le = binary.LittleEndian

// Function is the device side the driver talks to (emu.Device satisfies it).
type Function interface {
	ReadRegion(index int, off uint64, p []byte) error
	WriteRegion(index int, off uint64, p []byte) error
}

// IRQs records MSI-X vectors raised by the device.
type IRQs struct {
	Count [8]atomic.Int64
}

// Raise is the device's MSIX callback.
func (r *IRQs) Raise(v int) {
	if v >= 0 && v < len(r.Count) {
		r.Count[v].Add(1)
	}
}

// Driver is one fake guest driver instance.
type Driver struct {
	Dev  Function
	RAM  *dma.Flat
	IRQ  *IRQs
	next uint64 // page allocator

	DSR, CmdSlot, RespSlot uint64
	AsyncRing, CQRing      []uint64 // ring pages (0 = ring state)
	Caps                   []byte
	BAR2                   uint64
	asyncCons              uint32
	cqnCons                uint32
}

// New returns a driver with ramSize bytes of guest RAM at GPA 0 (page 0 is
// never handed out, so address 0 stays invalid).
func New(ramSize int) *Driver {
	return &Driver{RAM: dma.NewFlat(0, ramSize), IRQ: &IRQs{}, next: dma.PageSize, BAR2: 0xfe000000}
}

// NewWithRAM returns a driver whose guest RAM is ram (e.g. a shared memfd
// mapping the device reaches through vfio-user DMA windows).
func NewWithRAM(ram *dma.Flat) *Driver {
	return &Driver{RAM: ram, IRQ: &IRQs{}, next: ram.Base + dma.PageSize, BAR2: 0xfe000000}
}

// AllocPages returns n zeroed, contiguous guest pages.
func (d *Driver) AllocPages(n int) uint64 {
	a := d.next
	d.next += uint64(n) * dma.PageSize
	if d.next > d.RAM.Base+uint64(len(d.RAM.Mem)) {
		panic("emutest: guest RAM exhausted")
	}
	return a
}

// PageDir builds a two-level page directory for pages and returns its GPA.
func (d *Driver) PageDir(pages []uint64) uint64 {
	dir := d.AllocPages(1)
	for t := 0; t*512 < len(pages); t++ {
		tbl := d.AllocPages(1)
		d.Put64(dir+uint64(8*t), tbl)
		for e := 0; e < 512 && t*512+e < len(pages); e++ {
			d.Put64(tbl+uint64(8*e), pages[t*512+e])
		}
	}
	return dir
}

// Buffer allocates n pages and returns them and their page directory.
func (d *Driver) Buffer(n int) (pages []uint64, pdir uint64) {
	base := d.AllocPages(n)
	for i := 0; i < n; i++ {
		pages = append(pages, base+uint64(i)*dma.PageSize)
	}
	return pages, d.PageDir(pages)
}

// Put32 and Get32 are atomic, as the guest's ring index accesses are.
func (d *Driver) Put32(gpa uint64, v uint32) {
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&d.RAM.Mem[gpa : gpa+4][0])), v)
}
func (d *Driver) Put64(gpa uint64, v uint64) { le.PutUint64(d.RAM.Mem[gpa:], v) }
func (d *Driver) Get32(gpa uint64) uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&d.RAM.Mem[gpa : gpa+4][0])))
}
func (d *Driver) Get64(gpa uint64) uint64 { return le.Uint64(d.RAM.Mem[gpa:]) }

// ReadReg reads a BAR1 register.
func (d *Driver) ReadReg(off uint64) uint32 {
	var b [4]byte
	if err := d.Dev.ReadRegion(1, off, b[:]); err != nil {
		panic(err)
	}
	return le.Uint32(b[:])
}

// WriteReg writes a BAR1 register.
func (d *Driver) WriteReg(off uint64, v uint32) {
	var b [4]byte
	le.PutUint32(b[:], v)
	if err := d.Dev.WriteRegion(1, off, b[:]); err != nil {
		panic(err)
	}
}

// Doorbell writes v at offset off of UAR page page.
func (d *Driver) Doorbell(page uint32, off uint64, v uint32) {
	var b [4]byte
	le.PutUint32(b[:], v)
	if err := d.Dev.WriteRegion(2, uint64(page)*4096+off, b[:]); err != nil {
		panic(err)
	}
}

// EnablePCI sets memory decode and bus mastering, as pci_enable_device and
// pci_set_master do, and programs BAR2.
func (d *Driver) EnablePCI() {
	var b [4]byte
	le.PutUint32(b[:], uint32(d.BAR2))
	d.Dev.WriteRegion(7, 0x18, b[:])
	d.Dev.WriteRegion(7, 0x04, []byte{0x06, 0x00})
}

// LoadDSR builds the DSR as the driver does and writes DSRLOW/DSRHIGH.
// asyncPages and cqPages are the device rings' page counts (4 in Linux).
func (d *Driver) LoadDSR(asyncPages, cqPages int) {
	d.DSR = d.AllocPages(1)
	d.CmdSlot = d.AllocPages(1)
	d.RespSlot = d.AllocPages(1)
	var asyncDir, cqDir uint64
	d.AsyncRing, asyncDir = d.Buffer(asyncPages)
	d.CQRing, cqDir = d.Buffer(cqPages)
	d.Put32(d.DSR+0, emu.Version)
	d.Put32(d.DSR+8, 0x46)
	d.Put64(d.DSR+16, d.CmdSlot)
	d.Put64(d.DSR+24, d.RespSlot)
	d.Put32(d.DSR+32, uint32(asyncPages))
	d.Put64(d.DSR+40, asyncDir)
	d.Put32(d.DSR+48, uint32(cqPages))
	d.Put64(d.DSR+56, cqDir)
	d.Put64(d.DSR+64, d.BAR2>>12)
	d.WriteReg(emu.RegDSRLow, uint32(d.DSR))
	d.WriteReg(emu.RegDSRHigh, uint32(d.DSR>>32))
	d.Caps = d.RAM.Mem[d.DSR+72 : d.DSR+72+emu.CapsSize]
}

// Cap32 reads a 32-bit caps field at its offset in the caps block.
func (d *Driver) Cap32(off int) uint32 { return le.Uint32(d.Caps[off:]) }

// Probe runs the driver's probe up to activation and returns an error where
// the real driver would fail probe.
func (d *Driver) Probe() error {
	d.EnablePCI()
	if v := d.ReadReg(emu.RegVersion); v < 17 {
		return fmt.Errorf("device version %d", v)
	}
	d.LoadDSR(4, 4)
	if mode, gt := d.Caps[200], d.Caps[203]; mode != 0 || (gt != 1 && gt != 2) {
		return fmt.Errorf("driver needs RoCE v1 or v2 support (mode %d gid_types %#x)", mode, gt)
	}
	if u := d.Cap32(188); !uverbs.IsPow2(u) {
		return fmt.Errorf("failed to allocate UAR table (max_uar %d)", u)
	}
	d.WriteReg(emu.RegIMR, 0)
	d.WriteReg(emu.RegCtl, emu.CtlActivate)
	if e := d.ReadReg(emu.RegErr); e != 0 {
		return fmt.Errorf("failed to activate device: ERR %d", e)
	}
	return nil
}

// Cmd posts a command: body is written at offset 16 of the request (the
// header is filled in), REQUEST is written, ERR read. It returns ERR and
// the response.
func (d *Driver) Cmd(op uint32, body []byte) (errReg uint32, resp []byte) {
	var q [184]byte
	le.PutUint32(q[8:], op)
	copy(q[16:], body)
	copy(d.RAM.Mem[d.CmdSlot:], q[:])
	before := d.IRQ.Count[0].Load()
	d.WriteReg(emu.RegRequest, 0)
	errReg = d.ReadReg(emu.RegErr)
	resp = make([]byte, 176)
	copy(resp, d.RAM.Mem[d.RespSlot:])
	if errReg == 0 && d.IRQ.Count[0].Load() == before {
		panic("emutest: command completed without the response interrupt")
	}
	return errReg, resp
}

// MustCmd is Cmd that fails on ERR != 0 or a wrong ack, like the driver.
func (d *Driver) MustCmd(op uint32, body []byte) ([]byte, error) {
	e, r := d.Cmd(op, body)
	if e != 0 {
		return r, fmt.Errorf("command %d: ERR %d", op, e)
	}
	if ack := le.Uint32(r[8:]); ack != 0x80000000+op {
		return r, fmt.Errorf("command %d: ack %#x", op, ack)
	}
	return r, nil
}

// B builds a command body from little-endian fields laid at offsets
// relative to the request start (offsets >= 16).
type B []byte

// NewBody returns a zeroed body for a request of size bytes.
func NewBody(size int) B { return make(B, size-16) }

func (b B) U8(off int, v uint8) B   { b[off-16] = v; return b }
func (b B) U16(off int, v uint16) B { le.PutUint16(b[off-16:], v); return b }
func (b B) U32(off int, v uint32) B { le.PutUint32(b[off-16:], v); return b }
func (b B) U64(off int, v uint64) B { le.PutUint64(b[off-16:], v); return b }
func (b B) Bytes(off int, v []byte) B {
	copy(b[off-16:], v)
	return b
}

// AsyncEvents drains the async event ring as the driver's vector-1 handler
// does and returns (type, info) pairs.
func (d *Driver) AsyncEvents() [][2]uint32 {
	st := d.AsyncRing[0]
	n := uint32((len(d.AsyncRing) - 1) * 4096 / 8)
	r := uverbs.Ring{N: n}
	var out [][2]uint32
	for i := 0; i < 4096; i++ {
		prod := d.Get32(st + 8)
		if d.asyncCons == prod {
			break
		}
		slot := r.Slot(d.asyncCons)
		off := uint64(4096 + slot*8)
		gpa := d.AsyncRing[off/4096] + off%4096
		out = append(out, [2]uint32{d.Get32(gpa), d.Get32(gpa + 4)})
		d.asyncCons = r.Next(d.asyncCons)
		d.Put32(st+12, d.asyncCons)
	}
	return out
}
