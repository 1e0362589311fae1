package abi

// Device interface versions (PVRDMA_*_VERSION) reported in RegVersion and
// written by the driver as DSR.DriverVersion.
const (
	VersionRoCEv1   = 17 // PVRDMA_ROCEV1_VERSION
	VersionRoCEv2   = 18 // PVRDMA_ROCEV2_VERSION: max_sge_rd, RoCE v2 GIDs
	VersionPPN64    = 19 // PVRDMA_PPN64_VERSION: 64-bit UAR PFNs (DSR, CREATE_UC)
	VersionQPHandle = 20 // PVRDMA_QPHANDLE_VERSION: CREATE_QP response v2 with a QP handle
)

// Register offsets in BAR1 (PVRDMA_REG_*).
const (
	RegVersion = 0x00 // R: device interface version
	RegDSRLow  = 0x04 // W: DSR guest-physical address, low half
	RegDSRHigh = 0x08 // W: DSR guest-physical address, high half: loads the DSR
	RegCtl     = 0x0C // W: a DeviceCtl value
	RegRequest = 0x10 // W: run the command in the command slot
	RegErr     = 0x14 // R: errno of the last command (or activation)
	RegICR     = 0x18 // R: interrupt cause
	RegIMR     = 0x1C // R/W: interrupt mask
	RegMACL    = 0x20 // R/W: MAC address, low four bytes
	RegMACH    = 0x24 // R/W: MAC address, high two bytes
)

// Values written to RegCtl (enum pvrdma_device_ctl).
const (
	CtlActivate  = 0
	CtlUnquiesce = 1
	CtlReset     = 2
)

// MSI-X vectors (enum pvrdma_intr_vector).
const (
	IntrVectorResponse = 0
	IntrVectorAsync    = 1
	IntrVectorCQ       = 2
	MaxInterrupts      = 3 // PVRDMA_MAX_INTERRUPTS
)

// Device modes (enum pvrdma_device_mode); the driver accepts only RoCE.
const (
	DeviceModeRoCE  = 0
	DeviceModeIWARP = 1
	DeviceModeIB    = 2
)

// DeviceCaps.AtomicOps bits (PVRDMA_ATOMIC_OP_*).
const (
	AtomicOpCompSwap     = 1 << 0
	AtomicOpFetchAdd     = 1 << 1
	AtomicOpMaskCompSwap = 1 << 2
	AtomicOpMaskFetchAdd = 1 << 3
)

// DeviceCaps.BMMEFlags bits (PVRDMA_BMME_FLAG_*); all three make the driver
// report the memory management extensions.
const (
	BMMEFlagLocalInv  = 1 << 0
	BMMEFlagRemoteInv = 1 << 1
	BMMEFlagFastRegWR = 1 << 2
)

// GID type flags (PVRDMA_GID_TYPE_FLAG_*): DeviceCaps.GIDTypes and the
// gid_type of CREATE_BIND.
const (
	GIDTypeFlagRoCEv1 = 1 << 0
	GIDTypeFlagRoCEv2 = 1 << 1
)

// CREATE_MR flags (PVRDMA_MR_FLAG_*).
const (
	MRFlagDMA  = 1 << 0 // the kernel's DMA MR (local DMA lkey)
	MRFlagFRMR = 1 << 1 // a fast-register MR
)

// Page directory limits.
const (
	PageDirMaxPages = 1 * 512 * 512 // PVRDMA_PAGE_DIR_MAX_PAGES: one directory of 512 tables
	MaxFastRegPages = 128           // PVRDMA_MAX_FAST_REG_PAGES
)

// Async event types (enum pvrdma_eqe_type), the type of an async ring entry.
const (
	EventCQErr            = 0
	EventQPFatal          = 1
	EventQPReqErr         = 2
	EventQPAccessErr      = 3
	EventCommEst          = 4
	EventSQDrained        = 5
	EventPathMig          = 6
	EventPathMigErr       = 7
	EventDeviceFatal      = 8
	EventPortActive       = 9
	EventPortErr          = 10
	EventLIDChange        = 11
	EventPKeyChange       = 12
	EventSMChange         = 13
	EventSRQErr           = 14
	EventSRQLimitReached  = 15
	EventQPLastWQEReached = 16
	EventClientReregister = 17
	EventGIDChange        = 18
)

// EQE is one async ring entry (pvrdma_eqe).
type EQE struct {
	Type uint32 // an Event* value
	Info uint32 // the object's handle, or the port number
}

// EQESize is the size of pvrdma_eqe.
const EQESize = 8

// Encode writes the entry into b[:EQESize].
func (e *EQE) Encode(b []byte) {
	le.PutUint32(b[0:], e.Type)
	le.PutUint32(b[4:], e.Info)
}

// Decode reads the entry from b[:EQESize].
func (e *EQE) Decode(b []byte) {
	e.Type, e.Info = le.Uint32(b[0:]), le.Uint32(b[4:])
}

// CQNE is one CQ notification ring entry (pvrdma_cqne).
type CQNE struct {
	Info uint32 // CQ handle
}

// CQNESize is the size of pvrdma_cqne.
const CQNESize = 4

// Encode writes the entry into b[:CQNESize].
func (e *CQNE) Encode(b []byte) { le.PutUint32(b[0:], e.Info) }

// Decode reads the entry from b[:CQNESize].
func (e *CQNE) Decode(b []byte) { e.Info = le.Uint32(b[0:]) }
