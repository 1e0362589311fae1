// Package vfio serves a PCI function over the vfio-user protocol, the way
// QEMU's vfio-user-pci client speaks it. It knows nothing of what the function
// does: it hands region reads and writes, resets and disconnects to a Device,
// translates DMA_MAP windows into a dma.Memory, and turns MSI-X vectors into
// eventfd writes.
package vfio

import "github.com/hcaemu/hcaemu/dma"

// PCI region indexes as vfio numbers them.
const (
	RegionBAR0   = 0
	RegionBAR1   = 1
	RegionBAR2   = 2
	RegionROM    = 6
	RegionConfig = 7
	NumRegions   = 9
)

// IRQ indexes as vfio numbers them.
const (
	IRQINTx = 0
	IRQMSI  = 1
	IRQMSIX = 2
	IRQErr  = 3
	IRQReq  = 4
	NumIRQs = 5
)

// Device is one PCI function behind a vfio-user connection.
//
// The server calls these methods from one goroutine per connection, strictly
// in message order, so a read sees every earlier write. ReadRegion and
// WriteRegion get offsets already checked against RegionSize, and p is only
// valid during the call. An error from them becomes an error reply (its
// errno if it wraps a unix.Errno, else EIO); for a posted write it is only
// logged, so return nil for writes that are merely ignored. A panic is
// recovered, logged and answered with EIO; the connection goes on.
type Device interface {
	// RegionSize is the size of region index (0 = absent). BAR sizes are
	// powers of two.
	RegionSize(index int) uint64
	// IRQCount is the number of vectors of IRQ index (MSI-X: table size).
	// It is asked once, after VERSION. The server caps it (INTx, ERR and
	// REQ at 1, MSI at 32, MSI-X at 2048); ERR 0 makes GET_IRQ_INFO for
	// ERR fail with EINVAL, which QEMU accepts silently.
	IRQCount(index int) uint32
	ReadRegion(index int, off uint64, p []byte) error
	WriteRegion(index int, off uint64, p []byte) error
	// Reset returns the function to its power-on state (DEVICE_RESET). DMA
	// windows and interrupt eventfds stay: those have messages of their own.
	Reset()
	// Close is called once when the connection ends. The device must free
	// everything and stop touching Host.Mem before it returns.
	Close()
}

// Host is what the server gives a device: guest memory through the client's
// DMA windows, and its interrupt vectors.
type Host struct {
	Mem dma.Memory
	// MSIX raises MSI-X vector v. It may be called from any goroutine, never
	// blocks, and drops the interrupt when v has no eventfd (or after the
	// connection has ended).
	MSIX func(v int)
}

// NewDevice makes the device for a new connection.
type NewDevice func(h Host) (Device, error)
