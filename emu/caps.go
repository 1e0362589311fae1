package emu

import "encoding/binary"

// Caps is the device capability block (pvrdma_device_caps) the device writes
// into the DSR when the driver loads it. The same values bound every resource
// the guest can create.
type Caps struct {
	FWVer                 uint64
	NodeGUID              [8]byte
	SysImageGUID          [8]byte
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
	Mode                  uint8
	AtomicOps             uint8
	BMMEFlags             uint8
	GIDTypes              uint8
	MaxFastRegPageListLen uint32
}

// CapsSize is the size of the capability block in the DSR.
const CapsSize = 208

// DefaultCaps are the capabilities of the emulated HCA (pvrdma.md §5.3,
// recommended column). NodeGUID is filled from the port's MAC.
func DefaultCaps() Caps {
	return Caps{
		FWVer:           1 << 32, // "1.0.000"
		MaxMRSize:       1 << 30, // one page directory: 262144 pages
		PageSizeCap:     4096,
		VendorID:        0x15AD,
		VendorPartID:    0x0820,
		HWVer:           1,
		MaxQP:           1024,
		MaxQPWR:         4096,
		MaxSGE:          16,
		MaxSGERd:        16,
		MaxCQ:           2048,
		MaxCQE:          16384,
		MaxMR:           4096,
		MaxPD:           1024,
		MaxQPRdAtom:     16,
		MaxResRdAtom:    1024 * 16,
		MaxQPInitRdAtom: 16,
		MaxAH:           4096,
		MaxSRQ:          1024,
		MaxSRQWR:        4096,
		MaxSRQSGE:       16,
		MaxUAR:          512,
		GIDTblLen:       16,
		MaxPKeys:        1,
		LocalCAAckDelay: 15,
		PhysPortCnt:     1,
		Mode:            0, // RoCE
		GIDTypes:        0x2,
		// Atomics (CMP_SWP, FETCH_ADD) and the memory management extensions
		// (LOCAL_INV, SEND_WITH_INV, FAST_REG_MR).
		AtomicOps:             0x3,
		BMMEFlags:             0x7,
		MaxFastRegPageListLen: maxFRMRPages,
	}
}

// Encode writes the 208-byte capability block.
func (c *Caps) Encode(b []byte) {
	le := binary.LittleEndian
	clear(b[:CapsSize])
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

// EUI64 derives a node GUID from a MAC as QEMU did: insert FF:FE in the
// middle and flip the universal/local bit.
func EUI64(mac [6]byte) [8]byte {
	return [8]byte{mac[0] ^ 2, mac[1], mac[2], 0xFF, 0xFE, mac[3], mac[4], mac[5]}
}
