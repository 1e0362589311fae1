package mlx5

import (
	"sync/atomic"
	"time"

	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/ib/mad"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
)

// The port's state as a fault plan changes it (port_down, gid_change):
// the port goes DOWN with a PORT_CHANGE EQE of sub-type DOWN on the async
// EQ (spec §5.4.2: mlx5_ib's handle_port_change reports
// IB_EVENT_PORT_ERR, ib_core re-reads PortInfo), the SMA's PortInfo and
// QUERY_HCA_VPORT_CONTEXT say DOWN and Disabled meanwhile (ibv_devinfo:
// PORT_DOWN), every packet the port would send or receive is lost, and
// after the action's duration a PORT_CHANGE of sub-type ACTIVE brings it
// back (IB_EVENT_PORT_ACTIVE).

// PORT_CHANGE sub-types (enum mlx5_port_sub_type) and the physical state
// of a port held down (PortInfo's Disabled).
const (
	portChangeDown    = 1
	portChangeActive  = 4
	portChangeGUID    = 8
	physStateDisabled = 3
)

// portFault is the port's fault state. down is read without the lock by
// the subnet's delivery (ib.go); the rest is under the lock.
type portFault struct {
	down atomic.Bool
	hold hca.PortHold
	// lost counts the packets lost to the port held down (both ways).
	lost atomic.Uint64
}

// portDownFor takes the port down now and up again after dur; a flap
// while down extends it.
func (d *Device) portDownFor(dur time.Duration) {
	p := &d.x.port
	if !p.down.Load() {
		p.down.Store(true)
		d.port.PortState, d.port.PortPhysicalState = mad.PortStateDown, physStateDisabled
		d.portChange(portChangeDown)
		d.log.Info("port down: fault injected", "for", dur)
	}
	p.hold.Hold(&d.core, dur, d.core.Unlock, func() {
		if !p.down.Load() {
			return
		}
		d.portUp()
		d.portChange(portChangeActive)
		d.log.Info("port up: fault injected flap over")
	})
}

// portUp ends a port_down (lock held): the SMA reports ACTIVE again.
func (d *Device) portUp() {
	p := &d.x.port
	p.down.Store(false)
	p.hold.Release()
	d.port.PortState, d.port.PortPhysicalState = mad.PortStateActive, mad.PhysStateLinkUp
}

// portDown reports whether a fault holds the port down.
func (d *Device) portDown() bool { return d.x.port.down.Load() }

// PortDown reports whether a fault holds the port down (tests).
func (d *Device) PortDown() bool { return d.portDown() }

// portChange posts a PORT_CHANGE EQE of sub-type sub for port 1.
func (d *Device) portChange(sub uint8) {
	var eqe [ifc.EQESize]byte
	eqe[ifc.EQEType] = ifc.EventPortChange
	eqe[ifc.EQESubType] = sub
	eqe[eqePortChangePort] = 1 << 4
	d.postAsync(&eqe)
}

// vportStates are the port and physical states the vport context reports:
// the SMA's.
func (d *Device) vportStates() (state, phys uint32) {
	return uint32(d.port.PortState), uint32(d.port.PortPhysicalState)
}
