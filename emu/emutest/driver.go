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
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

var le = binary.LittleEndian

// Function is the device side the driver talks to (pvrdma.Device satisfies it).
type Function interface {
	ReadRegion(index int, off uint64, p []byte) error
	WriteRegion(index int, off uint64, p []byte) error
}

// InterruptWaiter is implemented by a Function whose interrupts arrive
// asynchronously (eventfds written by the vfio-user server): WaitInterrupt
// returns once vector has been raised again and counted in the driver's IRQs,
// or after a bound that only turns a lost interrupt into a failure.
type InterruptWaiter interface {
	WaitInterrupt(vector int)
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
	BAR2                   uint64
	asyncCons              uint32
	cqnCons                uint32
	cmdKey                 uint64 // response key of the last command
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
	dsr := abi.DSR{
		DriverVersion:  abi.VersionQPHandle,
		GOSInfo:        0x46, // 64-bit Linux, version 1
		CmdSlotDMA:     d.CmdSlot,
		RespSlotDMA:    d.RespSlot,
		AsyncRingPages: abi.RingPageInfo{NumPages: uint32(asyncPages), PdirDMA: asyncDir},
		CQRingPages:    abi.RingPageInfo{NumPages: uint32(cqPages), PdirDMA: cqDir},
		UARPFN:         d.BAR2 >> 12,
	}
	dsr.EncodeDriver(d.RAM.Mem[d.DSR : d.DSR+abi.DSRCapsOffset])
	d.WriteReg(abi.RegDSRLow, uint32(d.DSR))
	d.WriteReg(abi.RegDSRHigh, uint32(d.DSR>>32))
}

// Caps reads the capability block from the DSR, as the driver does each
// time it needs a capability.
func (d *Driver) Caps() abi.DeviceCaps {
	var c abi.DeviceCaps
	c.Decode(d.RAM.Mem[d.DSR+abi.DSRCapsOffset : d.DSR+abi.DSRSize])
	return c
}

// Probe runs the driver's probe up to activation and returns an error where
// the real driver would fail probe.
func (d *Driver) Probe() error {
	d.EnablePCI()
	if v := d.ReadReg(abi.RegVersion); v < abi.VersionRoCEv1 {
		return fmt.Errorf("device version %d", v)
	}
	d.LoadDSR(4, 4)
	caps := d.Caps()
	if mode, gt := caps.Mode, caps.GIDTypes; mode != abi.DeviceModeRoCE || (gt != abi.GIDTypeFlagRoCEv1 && gt != abi.GIDTypeFlagRoCEv2) {
		return fmt.Errorf("driver needs RoCE v1 or v2 support (mode %d gid_types %#x)", mode, gt)
	}
	if u := caps.MaxUAR; !uverbs.IsPow2(u) {
		return fmt.Errorf("failed to allocate UAR table (max_uar %d)", u)
	}
	d.WriteReg(abi.RegIMR, 0)
	d.WriteReg(abi.RegCtl, abi.CtlActivate)
	if e := d.ReadReg(abi.RegErr); e != 0 {
		return fmt.Errorf("failed to activate device: ERR %d", e)
	}
	return nil
}

// CmdRaw posts the bytes of a command slot as they are (at most
// abi.CmdReqSize; the rest of the slot is zeroed), writes REQUEST and
// reads ERR. It returns ERR and the response slot.
func (d *Driver) CmdRaw(slot []byte) (errReg uint32, rsp [abi.CmdRespSize]byte) {
	var q [abi.CmdReqSize]byte
	copy(q[:], slot)
	copy(d.RAM.Mem[d.CmdSlot:], q[:])
	before := d.IRQ.Count[abi.IntrVectorResponse].Load()
	d.WriteReg(abi.RegRequest, 0)
	errReg = d.ReadReg(abi.RegErr)
	copy(rsp[:], d.RAM.Mem[d.RespSlot:])
	if errReg == 0 && d.IRQ.Count[abi.IntrVectorResponse].Load() == before {
		// vmw_pvrdma waits for the command-completion interrupt
		// (pvrdma_cmd_recv): through eventfds it arrives a moment after
		// the REQUEST write's reply.
		if w, ok := d.Dev.(InterruptWaiter); ok {
			w.WaitInterrupt(abi.IntrVectorResponse)
		}
		if d.IRQ.Count[abi.IntrVectorResponse].Load() == before {
			panic("emutest: command completed without the response interrupt")
		}
	}
	return errReg, rsp
}

// CmdAs posts req under opcode op (a test can send one command's body
// under another opcode, or an opcode the ABI lacks), with a fresh response
// key. It returns ERR and the response header, and decodes the response
// slot into rsp when rsp is not nil.
func (d *Driver) CmdAs(op abi.Opcode, req abi.Request, rsp abi.Response) (errReg uint32, hdr abi.CmdRespHdr) {
	var slot [abi.CmdReqSize]byte
	req.Encode(slot[:])
	d.cmdKey++
	reqHdr := abi.CmdHdr{Response: d.cmdKey, Cmd: op}
	reqHdr.Encode(slot[:])
	errReg, out := d.CmdRaw(slot[:])
	hdr.Decode(out[:])
	if rsp != nil {
		rsp.Decode(out[:])
	}
	return errReg, hdr
}

// Cmd posts req under its own opcode; see CmdAs.
func (d *Driver) Cmd(req abi.Request, rsp abi.Response) (errReg uint32, hdr abi.CmdRespHdr) {
	return d.CmdAs(req.Opcode(), req, rsp)
}

// MustCmd is Cmd that fails as the driver does: on ERR != 0, a wrong ack,
// a response key that is not the request's, or an err byte.
func (d *Driver) MustCmd(req abi.Request, rsp abi.Response) error {
	op := req.Opcode()
	e, hdr := d.Cmd(req, rsp)
	switch {
	case e != 0:
		return fmt.Errorf("command %v: ERR %d", op, e)
	case hdr.Ack != op.Ack():
		return fmt.Errorf("command %v: ack %#x", op, hdr.Ack)
	case hdr.Response != d.cmdKey:
		return fmt.Errorf("command %v: response key %#x, sent %#x", op, hdr.Response, d.cmdKey)
	case hdr.Err != 0:
		return fmt.Errorf("command %v: hdr.err %d", op, hdr.Err)
	}
	return nil
}

// AsyncEvents drains the async event ring as the driver's vector-1 handler
// does and returns (type, info) pairs.
func (d *Driver) AsyncEvents() [][2]uint32 {
	st := d.AsyncRing[0]
	n := uint32((len(d.AsyncRing) - 1) * 4096 / abi.EQESize)
	r := uverbs.Ring{N: n}
	var out [][2]uint32
	for i := 0; i < 4096; i++ {
		prod := d.Get32(st + uverbs.RxProdTail)
		if d.asyncCons == prod {
			break
		}
		slot := r.Slot(d.asyncCons)
		off := uint64(4096 + slot*abi.EQESize)
		gpa := d.AsyncRing[off/4096] + off%4096
		var eqe abi.EQE
		eqe.Decode(d.RAM.Mem[gpa : gpa+abi.EQESize])
		out = append(out, [2]uint32{eqe.Type, eqe.Info})
		d.asyncCons = r.Next(d.asyncCons)
		d.Put32(st+uverbs.RxConsHead, d.asyncCons)
	}
	return out
}
