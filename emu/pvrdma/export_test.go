package pvrdma

import (
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/transport"
)

// EQEType is the pvrdma_eqe_type of the core's event ev.
func EQEType(ev hca.Event) uint32 { return eqeType(ev) }

// TransportState is the core's state of pvrdma_qp_state s.
func TransportState(s uint8) transport.State { return transportState(s) }

// WithLock runs fn while holding the device lock, as the engine does while it
// works through a batch of frames (tests of what must not wait for it).
func (d *Device) WithLock(fn func()) {
	d.core.Lock()
	defer d.unlock()
	fn()
}

// EngineWork runs fn as the engine runs a unit of its work.
func (d *Device) EngineWork(fn func()) bool { return d.core.Work(nil, fn) }

// HelpedBatches is the number of batches from other HCAs that the sending
// HCA's engine took for this device (its own engine not woken).
func (d *Device) HelpedBatches() uint64 { return d.core.Helped() }

// HoldTaking runs fn while holding the right to take the device's queued
// batches, as its engine or a helper does while it takes them.
func (d *Device) HoldTaking(fn func()) { d.core.HoldTaking(fn) }

// Receive hands the device a frame as its fabric port does (false: the
// receive queue was full and the frame was dropped).
func (d *Device) Receive(frame []byte) bool { return d.core.Receive(frame) }

// RxQueue is how many frames the device's receive queue holds.
const RxQueue = hca.RxQueue

// AddrMismatches is the device's count of RC packets dropped for coming
// from outside their QP's connection (Stats().Port.Address).
func (d *Device) AddrMismatches() uint64 {
	st, _ := d.Stats()
	return st.Port.Address
}
