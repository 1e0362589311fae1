package abi

import "encoding/binary"

var le = binary.LittleEndian

// DeviceCaps is the capability block (pvrdma_device_caps) the device writes
// into the DSR. The extended-verbs and unused fields of the C struct
// (atomic_arg_sizes, ex_comp_mask, device_cap_flags2, max_fa_bit_boundary,
// log_max_atomic_inline_arg, max_ee_rd_atom, max_ee_init_rd_atom, max_ee,
// max_rdd, max_mw, max_raw_*_qp, max_mcast_*, max_fmr, max_map_per_fmr)
// are never read by the driver and encode as zero.
type DeviceCaps struct {
	FWVer                 uint64
	NodeGUID              [8]byte // big-endian bytes (__be64)
	SysImageGUID          [8]byte // big-endian bytes (__be64)
	MaxMRSize             uint64
	PageSizeCap           uint64
	VendorID              uint32
	VendorPartID          uint32
	HWVer                 uint32
	MaxQP                 uint32
	MaxQPWR               uint32
	DeviceCapFlags        uint32
	MaxSGE                uint32
	MaxSGERd              uint32
	MaxCQ                 uint32
	MaxCQE                uint32
	MaxMR                 uint32
	MaxPD                 uint32
	MaxQPRdAtom           uint32
	MaxResRdAtom          uint32
	MaxQPInitRdAtom       uint32
	MaxAH                 uint32
	MaxSRQ                uint32
	MaxSRQWR              uint32
	MaxSRQSGE             uint32
	MaxUAR                uint32
	GIDTblLen             uint32
	MaxPKeys              uint16
	LocalCAAckDelay       uint8
	PhysPortCnt           uint8
	Mode                  uint8 // a DeviceMode* value
	AtomicOps             uint8 // AtomicOp* bits
	BMMEFlags             uint8 // BMMEFlag* bits
	GIDTypes              uint8 // GIDTypeFlag* bits
	MaxFastRegPageListLen uint32
}

// DeviceCapsSize is the size of pvrdma_device_caps.
const DeviceCapsSize = 208

// Encode writes the capability block into b[:DeviceCapsSize], zeroing the
// fields DeviceCaps does not carry.
func (c *DeviceCaps) Encode(b []byte) {
	clear(b[:DeviceCapsSize])
	le.PutUint64(b[0:], c.FWVer)
	copy(b[8:16], c.NodeGUID[:])
	copy(b[16:24], c.SysImageGUID[:])
	le.PutUint64(b[24:], c.MaxMRSize)
	le.PutUint64(b[32:], c.PageSizeCap)
	le.PutUint32(b[64:], c.VendorID)
	le.PutUint32(b[68:], c.VendorPartID)
	le.PutUint32(b[72:], c.HWVer)
	le.PutUint32(b[76:], c.MaxQP)
	le.PutUint32(b[80:], c.MaxQPWR)
	le.PutUint32(b[84:], c.DeviceCapFlags)
	le.PutUint32(b[88:], c.MaxSGE)
	le.PutUint32(b[92:], c.MaxSGERd)
	le.PutUint32(b[96:], c.MaxCQ)
	le.PutUint32(b[100:], c.MaxCQE)
	le.PutUint32(b[104:], c.MaxMR)
	le.PutUint32(b[108:], c.MaxPD)
	le.PutUint32(b[112:], c.MaxQPRdAtom)
	le.PutUint32(b[120:], c.MaxResRdAtom)
	le.PutUint32(b[124:], c.MaxQPInitRdAtom)
	le.PutUint32(b[164:], c.MaxAH)
	le.PutUint32(b[176:], c.MaxSRQ)
	le.PutUint32(b[180:], c.MaxSRQWR)
	le.PutUint32(b[184:], c.MaxSRQSGE)
	le.PutUint32(b[188:], c.MaxUAR)
	le.PutUint32(b[192:], c.GIDTblLen)
	le.PutUint16(b[196:], c.MaxPKeys)
	b[198] = c.LocalCAAckDelay
	b[199] = c.PhysPortCnt
	b[200] = c.Mode
	b[201] = c.AtomicOps
	b[202] = c.BMMEFlags
	b[203] = c.GIDTypes
	le.PutUint32(b[204:], c.MaxFastRegPageListLen)
}

// Decode reads the capability block from b[:DeviceCapsSize].
func (c *DeviceCaps) Decode(b []byte) {
	_ = b[DeviceCapsSize-1]
	c.FWVer = le.Uint64(b[0:])
	copy(c.NodeGUID[:], b[8:16])
	copy(c.SysImageGUID[:], b[16:24])
	c.MaxMRSize = le.Uint64(b[24:])
	c.PageSizeCap = le.Uint64(b[32:])
	c.VendorID = le.Uint32(b[64:])
	c.VendorPartID = le.Uint32(b[68:])
	c.HWVer = le.Uint32(b[72:])
	c.MaxQP = le.Uint32(b[76:])
	c.MaxQPWR = le.Uint32(b[80:])
	c.DeviceCapFlags = le.Uint32(b[84:])
	c.MaxSGE = le.Uint32(b[88:])
	c.MaxSGERd = le.Uint32(b[92:])
	c.MaxCQ = le.Uint32(b[96:])
	c.MaxCQE = le.Uint32(b[100:])
	c.MaxMR = le.Uint32(b[104:])
	c.MaxPD = le.Uint32(b[108:])
	c.MaxQPRdAtom = le.Uint32(b[112:])
	c.MaxResRdAtom = le.Uint32(b[120:])
	c.MaxQPInitRdAtom = le.Uint32(b[124:])
	c.MaxAH = le.Uint32(b[164:])
	c.MaxSRQ = le.Uint32(b[176:])
	c.MaxSRQWR = le.Uint32(b[180:])
	c.MaxSRQSGE = le.Uint32(b[184:])
	c.MaxUAR = le.Uint32(b[188:])
	c.GIDTblLen = le.Uint32(b[192:])
	c.MaxPKeys = le.Uint16(b[196:])
	c.LocalCAAckDelay = b[198]
	c.PhysPortCnt = b[199]
	c.Mode = b[200]
	c.AtomicOps = b[201]
	c.BMMEFlags = b[202]
	c.GIDTypes = b[203]
	c.MaxFastRegPageListLen = le.Uint32(b[204:])
}

// RingPageInfo locates one of the device-produced rings (pvrdma_ring_page_info).
type RingPageInfo struct {
	NumPages uint32 // including the ring-state page
	PdirDMA  uint64 // page directory address
}

// RingPageInfoSize is the size of pvrdma_ring_page_info.
const RingPageInfoSize = 16

func (r *RingPageInfo) encode(b []byte) {
	le.PutUint32(b[0:], r.NumPages)
	le.PutUint32(b[4:], 0)
	le.PutUint64(b[8:], r.PdirDMA)
}

func (r *RingPageInfo) decode(b []byte) {
	r.NumPages, r.PdirDMA = le.Uint32(b[0:]), le.Uint64(b[8:])
}

// DSR is the device shared region (pvrdma_device_shared_region, packed): the
// driver writes everything before Caps, then DSRHIGH; the device latches
// that part once and writes Caps.
type DSR struct {
	DriverVersion  uint32
	GOSInfo        uint32 // pvrdma_gos_info bit fields: bits 1:0 gos_bits, 5:2 gos_type, 21:6 gos_ver, 31:22 misc
	CmdSlotDMA     uint64
	RespSlotDMA    uint64
	AsyncRingPages RingPageInfo
	CQRingPages    RingPageInfo
	UARPFN         uint64 // uar_pfn64 (VersionPPN64 and later); a 32-bit uar_pfn before
	Caps           DeviceCaps
}

// DSR layout.
const (
	DSRCapsOffset = 72 // the driver's part ends here; caps follow
	DSRSize       = DSRCapsOffset + DeviceCapsSize
)

// Encode writes the whole DSR into b[:DSRSize].
func (d *DSR) Encode(b []byte) {
	d.EncodeDriver(b)
	d.Caps.Encode(b[DSRCapsOffset:])
}

// EncodeDriver writes the driver's part of the DSR into b[:DSRCapsOffset].
func (d *DSR) EncodeDriver(b []byte) {
	clear(b[:DSRCapsOffset])
	le.PutUint32(b[0:], d.DriverVersion)
	le.PutUint32(b[8:], d.GOSInfo)
	le.PutUint64(b[16:], d.CmdSlotDMA)
	le.PutUint64(b[24:], d.RespSlotDMA)
	d.AsyncRingPages.encode(b[32:])
	d.CQRingPages.encode(b[48:])
	le.PutUint64(b[64:], d.UARPFN)
}

// Decode reads the whole DSR from b[:DSRSize].
func (d *DSR) Decode(b []byte) {
	d.DecodeDriver(b)
	d.Caps.Decode(b[DSRCapsOffset:])
}

// DecodeDriver reads the driver's part of the DSR from b[:DSRCapsOffset],
// leaving Caps alone.
func (d *DSR) DecodeDriver(b []byte) {
	_ = b[DSRCapsOffset-1]
	d.DriverVersion = le.Uint32(b[0:])
	d.GOSInfo = le.Uint32(b[8:])
	d.CmdSlotDMA = le.Uint64(b[16:])
	d.RespSlotDMA = le.Uint64(b[24:])
	d.AsyncRingPages.decode(b[32:])
	d.CQRingPages.decode(b[48:])
	d.UARPFN = le.Uint64(b[64:])
}
