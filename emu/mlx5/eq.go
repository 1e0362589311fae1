package mlx5

import (
	"encoding/binary"

	"github.com/hcaemu/hcaemu/emu/hca"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
)

// eq is an event queue (spec §3.4): a ring of 64-byte EQEs in guest
// memory, split over the pages of its PAS, the UAR page whose doorbells
// update its consumer index and arm it, and the MSI-X vector it raises.
type eq struct {
	eqn     uint8
	logSize uint8
	// pageShift is log2 of the PAS pages' size (12 + eqc.log_page_size);
	// pas are their addresses, checked at creation to be aligned and
	// inside guest memory as far as the ring reaches.
	pageShift uint8
	pas       []uint64
	uar       uint32
	intr      int
	mask      [4]uint64
	// oi: overrun ignore (eqc.oi): EQEs are written even over unconsumed
	// ones.
	oi bool
	// pi counts the EQEs written; ci is the consumer index the driver last
	// wrote to a doorbell (24 bits); armed: the next EQE raises intr.
	pi, ci uint32
	armed  bool
	// refs counts the CQs whose c_eqn names the EQ.
	refs int
}

func (e *eq) size() uint32 { return 1 << e.logSize }

// unconsumed is how many EQEs the driver has not consumed, by the
// 24-bit consumer index it last wrote.
func (e *eq) unconsumed() uint32 { return (e.pi - e.ci) & ifc.EQDoorbellCIMask }

// maxLogPageSize bounds eqc.log_page_size: PAS pages up to 1 GiB.
const maxLogPageSize = 18

// createEQ: CREATE_EQ (spec §3.4). Validates the EQ context (size,
// interrupt, UAR, page geometry), the PAS (one aligned page of guest
// memory per page of the ring) and the event bitmask (one command EQ at
// a time), then takes the lowest free EQ number. The ring starts unarmed:
// the driver arms it with a doorbell right after (mlx5_eq_enable).
func (d *Device) createEQ(in, out []byte) result {
	const op = ifc.OpCreateEQ
	eqc := ifc.CreateEQInEQContextEntry.Bytes(in)
	logSize := ifc.EQCLogEQSize.Get(eqc)
	lps := ifc.EQCLogPageSize.Get(eqc)
	uar := ifc.EQCUARPage.Get(eqc)
	intr := ifc.EQCIntr.Get(eqc)
	switch {
	case logSize > LogMaxEQSz:
		return d.refuse(ifc.StatBadParamErr, SyndEQSize, hca.FindingCommand, op, "create_eq_in.eq_context_entry.log_eq_size=%d > log_max_eq_sz=%d", logSize, LogMaxEQSz)
	case ifc.EQCEC.Get(eqc) != 0:
		return d.refuse(ifc.StatBadParamErr, SyndEQContext, hca.FindingCommand, op, "create_eq_in.eq_context_entry.ec=1: no embedded CPU")
	case intr >= uint32(d.vectors):
		return d.refuse(ifc.StatBadParamErr, SyndEQIntr, hca.FindingCommand, op, "create_eq_in.eq_context_entry.intr=%d >= %d MSI-X vectors", intr, d.vectors)
	case lps > maxLogPageSize:
		return d.refuse(ifc.StatBadParamErr, SyndEQPageSize, hca.FindingPageDir, op, "create_eq_in.eq_context_entry.log_page_size=%d > %d", lps, maxLogPageSize)
	case ifc.EQCPageOffset.Get(eqc) != 0:
		return d.refuse(ifc.StatBadParamErr, SyndEQPageSize, hca.FindingPageDir, op, "create_eq_in.eq_context_entry.page_offset=%d: must be 0", ifc.EQCPageOffset.Get(eqc))
	}
	if _, held := d.fn.uars[uar]; !held {
		return d.refuse(ifc.StatBadParamErr, SyndEQUAR, hca.FindingHandle, op, "create_eq_in.eq_context_entry.uar_page=%d: not a UAR ALLOC_UAR handed out", uar)
	}
	var mask [4]uint64
	for i := range mask {
		mask[i] = ifc.CreateEQInEventBitmask(i).Get64(in)
	}
	cmd := mask[0]&(1<<ifc.EventCmd) != 0
	if cmd && d.fn.cmdEQ != nil {
		return d.refuse(ifc.StatBadParamErr, SyndEQCmd, hca.FindingCommand, op, "create_eq_in.event_bitmask[0] bit 0x0a (CMD): EQ %d already takes command completions", d.fn.cmdEQ.eqn)
	}
	// The ring: 64 B << log_eq_size (at most 2 MiB) over pages of 4 KiB <<
	// log_page_size: at most 512 PAS entries, every one needed.
	pas, r := d.readPAS(op, in, pasList{st: "create_eq_in", at: ifc.CreateEQInPAS,
		shift: uint8(ifc.AdapterPageShift + lps), n: uint64(ifc.EQESize) << logSize,
		synd: SyndEQPAS, lenSynd: SyndEQPASLen})
	if r != ok {
		return r
	}
	eqn, free := d.freeEQN()
	if !free {
		d.fn.pins.Unpin(len(pas))
		return d.refuse(ifc.StatLimErr, SyndEQNoEQN, hca.FindingCommand, op, "CREATE_EQ beyond 1<<log_max_eq=%d EQs", 1<<LogMaxEQ)
	}
	e := &eq{eqn: eqn, logSize: uint8(logSize), pageShift: uint8(ifc.AdapterPageShift + lps), pas: pas,
		uar: uar, intr: int(intr), mask: mask, oi: ifc.EQCOI.Get(eqc) != 0}
	d.fn.eqs[eqn] = e
	if cmd {
		d.fn.cmdEQ = e
	}
	ifc.CreateEQOutEQNumber.Set(out, uint32(eqn))
	return ok
}

// guestRange checks that [gpa, gpa+n) is guest memory the function may
// reach now, without reading it.
func (d *Device) guestRange(gpa, n uint64) error {
	if _, okEnd := dma.End(gpa, n); !okEnd {
		return dma.Fault(gpa, n, "wraps the address space")
	}
	if err := d.busOK(gpa, int(min(n, 1<<30))); err != nil {
		return err
	}
	return d.mem.Access(gpa, n, false, func([]byte) {})
}

// freeEQN is the lowest EQ number not in use.
func (d *Device) freeEQN() (uint8, bool) {
	for n := range 1 << LogMaxEQ {
		if _, used := d.fn.eqs[uint8(n)]; !used {
			return uint8(n), true
		}
	}
	return 0, false
}

// destroyEQ: DESTROY_EQ. Destroying the command EQ ends event mode: the
// driver is back to polling (destroy_async_eqs), and nothing is posted
// for this command itself.
func (d *Device) destroyEQ(in, _ []byte) result {
	eqn := uint8(ifc.DestroyEQInEQNumber.Get(in))
	e, exists := d.fn.eqs[eqn]
	if !exists {
		return d.refuse(ifc.StatBadResErr, SyndEQUnknown, hca.FindingHandle, ifc.OpDestroyEQ, "destroy_eq_in.eq_number=%d: no such EQ", eqn)
	}
	if e.refs > 0 {
		return d.refuse(ifc.StatResBusy, SyndBusy, hca.FindingHandle, ifc.OpDestroyEQ, "destroy_eq_in.eq_number=%d: %d CQs still complete to it", eqn, e.refs)
	}
	d.fn.pins.Unpin(len(e.pas))
	delete(d.fn.eqs, eqn)
	if d.fn.cmdEQ == e {
		d.fn.cmdEQ = nil
	}
	return ok
}

// postEQE writes one EQE (its 63 bytes, then the owner byte: the driver
// reads an EQE once its owner bit flips) at the EQ's producer index, and
// raises the EQ's vector if it is armed (the EQ is then disarmed until
// the driver arms it again). An EQ whose unconsumed EQEs fill it takes
// no more (spec §3.4: never write more than size unconsumed EQEs) unless
// created with oi; the EQE is dropped and counted. It reports whether the
// EQE was written.
func (d *Device) postEQE(e *eq, eqe *[ifc.EQESize]byte) bool {
	size := e.size()
	if !e.oi && e.unconsumed() >= size {
		d.stats.EQOverruns++
		d.find(hca.FindingCQOverrun, "the EQE is dropped", "eq %d overrun: %d unconsumed EQEs of %d (consumer index %#x); EQE type %#x",
			e.eqn, e.unconsumed(), size, e.ci, eqe[ifc.EQEType])
		return false
	}
	off := uint64(e.pi&(size-1)) << ifc.LogEQEStride
	gpa := e.pas[off>>e.pageShift] + off&(1<<e.pageShift-1) // off < ring size: inside pas
	eqe[ifc.EQEOwner] = byte(e.pi>>e.logSize) & 1
	if err := d.writeGuest(eqe[:ifc.EQEOwner], gpa); err != nil {
		d.log.Warn("EQE unwritable: dropped", "eqn", e.eqn, "err", err)
		return false
	}
	if err := d.writeGuest(eqe[ifc.EQEOwner:], gpa+ifc.EQEOwner); err != nil {
		d.log.Warn("EQE owner byte unwritable: dropped", "eqn", e.eqn, "err", err)
		return false
	}
	e.pi++
	d.stats.EQEs++
	d.traceEQE(eqe)
	if e.armed {
		e.armed = false
		d.core.Raise(e.intr)
	}
	return true
}

// postCmdEQE posts the command completion EQE of the slots in vector
// (data.cmd.vector, one bit per slot) to the command EQ.
func (d *Device) postCmdEQE(e *eq, vector uint32) {
	var eqe [ifc.EQESize]byte
	eqe[ifc.EQEType] = ifc.EventCmd
	binary.BigEndian.PutUint32(eqe[ifc.EQEData:], vector)
	if d.postEQE(e, &eqe) {
		d.stats.CmdEQEs++
	}
}

// eqDoorbell is a write to an EQ doorbell of UAR page uar (spec §3.4:
// eqn<<24 | consumer index): it updates the EQ's consumer index and, on
// the arming doorbell, arms it, or raises its vector at once if EQEs are
// still unconsumed. A doorbell for an EQ that does not exist, through
// another UAR than the EQ's, or with a consumer index beyond the producer
// is ignored.
func (d *Device) eqDoorbell(uar uint32, v uint32, arm bool) {
	eqn := uint8(v >> ifc.EQDoorbellEQNShift)
	ci := v & ifc.EQDoorbellCIMask
	e, exists := d.fn.eqs[eqn]
	switch {
	case !exists:
		d.find(hca.FindingDoorbell, "ignored", "UAR %d EQ doorbell %#x: no EQ %d", uar, v, eqn)
		return
	case e.uar != uar:
		d.find(hca.FindingDoorbell, "ignored", "UAR %d EQ doorbell for EQ %d, created with eq_context_entry.uar_page=%d", uar, eqn, e.uar)
		return
	}
	if n := (e.pi - ci) & ifc.EQDoorbellCIMask; n > e.size() {
		d.find(hca.FindingRingIndex, "ignored", "EQ %d doorbell consumer index %#x: %d EQEs behind, beyond the producer %#x or the ring of %d", eqn, ci, n, e.pi&ifc.EQDoorbellCIMask, e.size())
		return
	}
	e.ci = ci
	if !arm {
		return
	}
	if e.unconsumed() > 0 {
		e.armed = false
		d.core.Raise(e.intr)
		return
	}
	e.armed = true
}
