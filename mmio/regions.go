package mmio

// The regions of a PCI function as the host reaches them, numbered as VFIO
// (and vfio-user) number them: a device model dispatches region accesses on
// these names, never on bare numbers.
const (
	RegionBAR0 = iota
	RegionBAR1
	RegionBAR2
	RegionBAR3
	RegionBAR4
	RegionBAR5
	RegionROM
	RegionConfig
)

// IRQMSIX is the interrupt index of MSI-X, as VFIO numbers it (INTx 0, MSI 1).
const IRQMSIX = 2
