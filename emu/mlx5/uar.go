package mlx5

import (
	"encoding/binary"

	"github.com/hcaemu/hcaemu/emu/hca"

	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
)

// UAR pages (spec §1.2, §3.4): UAR index n is the 4 KiB page at BAR0 +
// n·4096. ALLOC_UAR hands out indexes from FirstUAR on, lowest free
// first; the kernel rings its EQ doorbells (and, from Stage 2, its CQ and
// SQ doorbells) through the page.

// NumUARs is how many UAR indexes the device hands out: every BAR0 page
// from FirstUAR on.
const NumUARs = BAR0Size/4096 - FirstUAR

// allocUAR: ALLOC_UAR.
func (d *Device) allocUAR(_, out []byte) result {
	for i := uint32(FirstUAR); i < FirstUAR+NumUARs; i++ {
		if _, used := d.fn.uars[i]; !used {
			d.fn.uars[i] = struct{}{}
			ifc.AllocUAROutUAR.Set(out, i)
			return ok
		}
	}
	return d.refuse(ifc.StatNoResErr, SyndNoUAR, hca.FindingCommand, ifc.OpAllocUAR, "ALLOC_UAR beyond the %d UARs of BAR0", NumUARs)
}

// deallocUAR: DEALLOC_UAR of a UAR this function holds and no EQ rings
// through. CQs and QPs may still name it: when a process dies, its
// mappings go before its objects (exit_mmap runs before the uverbs file is
// released), and the last unmapping of a UAR page mlx5_ib allocated on
// demand (a dynamic bfreg page, an MLX5_IB_OBJECT_UAR) frees the UAR while
// the process's QPs and CQs that ring through it are destroyed only
// afterwards. Firmware takes it (the kernel would warn on every crash
// otherwise); the device forgets the page, and the objects' later
// destruction is as for any.
func (d *Device) deallocUAR(in, _ []byte) result {
	const op = ifc.OpDeallocUAR
	uar := ifc.DeallocUARInUAR.Get(in)
	if _, held := d.fn.uars[uar]; !held {
		return d.refuse(ifc.StatBadResErr, SyndUARUnknown, hca.FindingHandle, op, "dealloc_uar_in.uar=%d: not a UAR ALLOC_UAR handed out", uar)
	}
	for n := range 1 << LogMaxEQ {
		if e := d.fn.eqs[uint8(n)]; e != nil && e.uar == uar {
			return d.refuse(ifc.StatResBusy, SyndUARBusy, hca.FindingHandle, op, "dealloc_uar_in.uar=%d: EQ %d still rings through it", uar, e.eqn)
		}
	}
	delete(d.fn.uars, uar)
	delete(d.fn.latches, uar)
	return ok
}

// writeUAR is a write to a UAR page (lock held): off is BAR0's offset,
// past the init segment. The EQ doorbells are 32-bit writes (eq_update_ci);
// the CQ arm and send doorbells go through the page's latch (datapath.go).
func (d *Device) writeUAR(off uint64, p []byte) {
	d.stats.UARWrites++
	uar := uint32(off >> 12)
	reg := off & 0xfff
	if _, held := d.fn.uars[uar]; !held {
		if d.fn.swReset {
			// The firmware reset the driver asked for took the UARs: its
			// recovery may still ring one (a CQ's arm) before it probes
			// the function again. Ignored without a finding.
			return
		}
		d.find(hca.FindingDoorbell, "ignored", "write of %d bytes at offset %#x of UAR page %d, which ALLOC_UAR did not hand out", len(p), reg, uar)
		return
	}
	switch {
	case len(p) == 4 && reg == ifc.UAREQDoorbellArm:
		d.eqDoorbell(uar, binary.BigEndian.Uint32(p), true)
	case len(p) == 4 && reg == ifc.UAREQDoorbellNoArm:
		d.eqDoorbell(uar, binary.BigEndian.Uint32(p), false)
	default:
		d.uarDoorbell(uar, reg, p)
	}
}
