package subnet

import (
	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/ib"
)

// Direct delivery, as on emu/fabric's Switch: between two HCA ports of the
// subnet, with nothing watching it (no capture, no fault rule, no recorder
// on either port), an RC packet need not become a whole IB packet. The
// sending HCA writes only its transport part (BTH through the ICRC field,
// no CRC computed) into a fabric.Batch and hands the receiving port up to
// fabric.BatchPackets at once; no LRH is built or parsed and no ICRC or
// VCRC computed or checked, since no packet exists on a link to carry
// them. What the LRH would have said the subnet vouches for: a batch goes
// only to the port whose LID the sender named, and carries the sender's
// own LID (Batch.SLID), which the sender cannot choose. Where a whole
// packet is needed (a capture, a fault rule, a tapped port, multicast,
// the SA) the sender gets no batch and builds packets as before.

// SetDirect registers the port's taker of batches: other ports may then
// send to it without whole packets, and it to them. A port without one
// sends and takes whole packets only.
func (p *Port) SetDirect(r fabric.DirectReceiver) { p.direct.Store(&r) }

// AllowDirect lets the subnet's ports send to each other in batches
// whenever quiet reports true: the caller knows the decorators and quiet
// says when none would see or change a packet (no capture, no fault
// rule). A subnet made with no decorators allows it always.
func (s *Subnet) AllowDirect(quiet func() bool) { s.quiet.Store(&quiet) }

// directOK reports whether whole packets between ports may be skipped now.
func (s *Subnet) directOK() bool {
	if q := s.quiet.Load(); q != nil {
		return (*q)()
	}
	return !s.decorated
}

// Open starts a batch for the port with LID dlid (itself included:
// loopback). ok=false: whole packets are needed (the subnet does not allow
// batches now, dlid is multicast, the SA's or no port's, or either port
// takes no batches). A nil batch with ok: the receiver's queue is full
// (back off, as for a refused packet).
func (p *Port) Open(dlid uint16) (b *fabric.Batch, ok bool) {
	s := p.s
	if p.gone.Load() || p.direct.Load() == nil || ib.IsMulticastLID(dlid) || !s.directOK() {
		return nil, false
	}
	s.mu.RLock()
	to := s.byLID[dlid]
	s.mu.RUnlock()
	if to == nil || to == s.sa || to.gone.Load() {
		return nil, false
	}
	r := to.direct.Load()
	if r == nil {
		return nil, false
	}
	if !(*r).Reserve() {
		s.Paused.Add(1)
		return nil, true
	}
	return fabric.NewBatch(*r, p.lid), true
}

// Flush hands a batch Open started to its receiver, and returns that
// receiver. An empty batch still uses its reservation: the receiver
// releases it.
func (p *Port) Flush(b *fabric.Batch) fabric.DirectReceiver {
	n := b.Count()
	p.s.Forwarded.Add(n)
	p.s.Direct.Add(n)
	p.s.DirectRuns.Add(b.InRuns())
	p.s.DirectLent.Add(b.Lent())
	r := b.Taker()
	r.Deliver(b)
	return r
}
