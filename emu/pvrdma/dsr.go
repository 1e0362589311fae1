package pvrdma

import (
	"fmt"
	"math/bits"

	"github.com/hcaemu/hcaemu/dma"
	pagedir "github.com/hcaemu/hcaemu/dma/pvrdma"
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// maxRingPages bounds the device rings (CVE-2021-3607 / CVE-2023-1544).
const maxRingPages = 512

// dsrState is what the device latched from the DSR when it was loaded.
type dsrState struct {
	addr     uint64
	cmdSlot  uint64
	respSlot uint64
	uarPFN   uint64
	async    devRing
	cqNotify devRing
}

// loadDSR is the DSRHIGH trigger: read the driver's part of the DSR once,
// validate it, map the device rings and write the capabilities. On any
// failure nothing is written, so the driver reads zero caps and fails probe.
func (d *Device) loadDSR(addr uint64) {
	if d.dsr != nil || d.res.count() > 0 {
		d.resetLocked("DSR reloaded")
	}
	st, err := d.parseDSR(addr)
	if err != nil {
		d.find(hca.FindingPageDir, "DSR ignored: the driver reads zero caps", "DSRLOW/DSRHIGH=%#x: %v", addr, err)
		return
	}
	var caps [abi.DeviceCapsSize]byte
	d.caps.Encode(caps[:])
	if err := d.mem.WriteAt(caps[:], addr+abi.DSRCapsOffset); err != nil {
		d.log.Warn("DSR rejected: caps not writable", "addr", fmt.Sprintf("%#x", addr), "err", err)
		return
	}
	d.dsr = st
	d.log.Info("DSR loaded", "addr", fmt.Sprintf("%#x", addr), "uar_pfn", fmt.Sprintf("%#x", st.uarPFN))
}

func (d *Device) parseDSR(addr uint64) (*dsrState, error) {
	if addr == 0 || addr%dma.PageSize != 0 {
		return nil, fmt.Errorf("DSR address not page aligned")
	}
	// Only the driver's part is read, once; the device owns the caps.
	var b [abi.DSRCapsOffset]byte
	if err := d.mem.ReadAt(b[:], addr); err != nil {
		return nil, err
	}
	var dsr abi.DSR
	dsr.DecodeDriver(b[:])
	st := &dsrState{
		addr:     addr,
		cmdSlot:  dsr.CmdSlotDMA,
		respSlot: dsr.RespSlotDMA,
		uarPFN:   dsr.UARPFN,
	}
	if dsr.DriverVersion == 0 {
		d.log.Warn("DSR driver_version is 0: guest RAM may not be shared with hcaemu (memory-backend share=on?)")
	}
	for _, s := range []struct {
		name string
		gpa  uint64
	}{{"command slot", st.cmdSlot}, {"response slot", st.respSlot}} {
		if s.gpa == 0 || s.gpa%dma.PageSize != 0 {
			return nil, fmt.Errorf("%s %#x not a page address", s.name, s.gpa)
		}
		if err := d.mem.Access(s.gpa, dma.PageSize, true, func([]byte) {}); err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
	}
	var err error
	if st.async, err = d.mapDevRing("async ring", dsr.AsyncRingPages.NumPages, dsr.AsyncRingPages.PdirDMA, abi.EQESize); err != nil {
		return nil, err
	}
	if st.cqNotify, err = d.mapDevRing("CQ notification ring", dsr.CQRingPages.NumPages, dsr.CQRingPages.PdirDMA, abi.CQNESize); err != nil {
		return nil, err
	}
	return st, nil
}

// devRing is one of the two rings the device produces into: the async event
// ring and the CQ notification ring. The driver sizes them
// N = (pages-1)*4096/elem, not a power of two, and uses the usual index
// masks anyway; the device follows the same arithmetic, and never lets more
// entries be outstanding than there are distinct slots on the index cycle.
type devRing struct {
	pages  dma.Pages
	elem   uint32
	ring   uverbs.Ring
	cycle  uint32 // length of the index cycle under the 2N-1 mask
	period uint32 // distinct consecutive slots: most entries outstanding
	prod   uint32 // device-owned producer index (authoritative)
	broken bool   // guest corrupted the consumer index: ignored until reset
}

func (d *Device) mapDevRing(name string, npages uint32, pdir uint64, elem uint32) (devRing, error) {
	if npages < 2 || npages > maxRingPages {
		return devRing{}, fmt.Errorf("%s: num_pages %d outside 2..%d", name, npages, maxRingPages)
	}
	pages, err := pagedir.Read(d.mem, pdir, npages, maxRingPages)
	if err != nil {
		return devRing{}, fmt.Errorf("%s: %w", name, err)
	}
	n := (npages - 1) * dma.PageSize / elem
	mask := 2*n - 1
	r := devRing{pages: pages, elem: elem, ring: uverbs.Ring{N: n}}
	r.cycle = 1 << bits.TrailingZeros32(^mask)
	r.period = min(1<<bits.TrailingZeros32(^(n-1)), r.cycle)
	return r, nil
}

// push appends one entry. It returns false when the entry was dropped (ring
// full or broken); the caller counts it.
func (d *Device) push(r *devRing, entry []byte) bool {
	if r.broken || r.pages == nil {
		return false
	}
	consAddr, _ := r.pages.Addr(uverbs.RxConsHead)
	prodAddr, _ := r.pages.Addr(uverbs.RxProdTail)
	cons, err := dma.LoadUint32(d.mem, consAddr)
	if err != nil || cons >= r.cycle {
		d.find(hca.FindingRingIndex, "the ring is ignored until reset", "device ring pvrdma_ring.cons_head=%d: %v (cycle %d)", cons, errOrRange(err), r.cycle)
		r.broken = true
		return false
	}
	if (r.prod-cons)&(r.cycle-1) >= r.period {
		return false
	}
	off := dma.PageSize + uint64(r.ring.Slot(r.prod))*uint64(r.elem)
	if err := r.pages.WriteAt(d.mem, entry, off); err != nil {
		return false
	}
	r.prod = r.ring.Next(r.prod)
	if err := dma.StoreUint32(d.mem, prodAddr, r.prod); err != nil {
		r.broken = true
		return false
	}
	return true
}

// event posts async event ev (its PVRDMA EQE type: eqeType) and raises
// vector 1.
func (d *Device) event(ev hca.Event, info uint32) {
	if d.dsr == nil {
		return
	}
	if d.wire.Tracer != nil {
		d.traceAsync(ev, info)
	}
	var e [abi.EQESize]byte
	eqe := abi.EQE{Type: eqeType(ev), Info: info}
	eqe.Encode(e[:])
	if !d.push(&d.dsr.async, e[:]) {
		d.stats.eventsLost++
		return
	}
	d.raise(abi.IntrVectorAsync)
}

// notifyCQ posts a CQ notification and raises vector 2.
func (d *Device) notifyCQ(handle uint32) bool {
	if d.dsr == nil {
		return false
	}
	var e [abi.CQNESize]byte
	cqne := abi.CQNE{Info: handle}
	cqne.Encode(e[:])
	if !d.push(&d.dsr.cqNotify, e[:]) {
		d.stats.cqNotifyLost++
		return false
	}
	d.raise(abi.IntrVectorCQ)
	return true
}
