package mlx5

import (
	"github.com/hcaemu/hcaemu/emu/ib/subnet"
)

// PortTap sits between the device and its InfiniBand port, for recording
// and replay (vfio/record; tests/replay_mlx5_test.go): a recorder wraps
// both directions to write each packet down, a replay keeps the device's
// packets off the subnet and hands it the recorded ones.
//
// Replay and time: a replayed device runs at no wall-clock pace (the
// replay waits until the device is idle after each recorded input, and a
// loaded machine may stall it anywhere), so it is made with
// Config.FrozenTimers: the RC transport arms and stops its retransmission
// and RNR timers as always, but they never expire. A recording in which a
// timer expired (a packet sent again) is one of a slow machine, not of the
// device, and is made again. The rest of the device is driven by its
// inputs alone: commands run inside the doorbell write that rings them
// (polling and event mode alike: the CMD EQE and its interrupt are raised
// before the write returns), the health counter advances per read, and
// QPNs are their handles (Config.SequentialQPNs).
type PortTap struct {
	// Send wraps the port's Send: every packet the device sends goes
	// through what it returns (which may call send, or keep the packet
	// off the subnet).
	Send func(send func(pkt []byte) bool) func(pkt []byte) bool
	// Receiver wraps the receiver the port is attached with.
	Receiver func(rx subnet.Receiver) subnet.Receiver
}

// IBPort is the device's port on its subnet (nil when it has none): its
// LID and GUID, for a recording's header.
func (d *Device) IBPort() *subnet.Port { return d.ibPort }

// Idle reports whether the device has no queued packets or doorbells (a
// replay loops on Sync and Idle until the device is quiet).
func (d *Device) Idle() bool { return d.core.Idle() }
