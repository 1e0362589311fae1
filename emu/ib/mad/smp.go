package mad

import "encoding/binary"

// SMP attribute IDs (IBA 14.2.5).
const (
	AttrClassPortInfo   = 0x0001
	AttrNotice          = 0x0002
	AttrNodeDescription = 0x0010
	AttrNodeInfo        = 0x0011
	AttrSwitchInfo      = 0x0012
	AttrGUIDInfo        = 0x0014
	AttrPortInfo        = 0x0015
	AttrPKeyTable       = 0x0016
	AttrSLToVLTable     = 0x0017
	AttrVLArbitration   = 0x0018
	AttrSMInfo          = 0x0020
	// AttrMlxExtendedPortInfo is Mellanox's vendor ExtendedPortInfo, which
	// mlx5 queries and tolerates failing (shared/spec/mlx5.md §5.4.1).
	AttrMlxExtendedPortInfo = 0xFF90
)

// SMP layout (ib_smi.h struct ib_smp).
const (
	SMPDataOffset = 64
	SMPDataSize   = 64
	SMPPathSize   = 64
	// SMPDirection is the D bit of a directed-route SMP's Status: set in
	// the responses (IBA 14.2.2).
	SMPDirection = 0x8000
)

// SMP is a subnet management packet (IBA 14.2.1): LID routed (class 0x01)
// or directed route (class 0x81). In the directed-route layout the header's
// Status carries the D bit (SMPDirection) above a 15-bit status, and
// ClassSpecific is HopPtr ‖ HopCnt; DRSLID, DRDLID and the paths are
// meaningful only there (reserved in a LID-routed SMP, kept as is).
type SMP struct {
	Header
	MKey        uint64
	DRSLID      uint16
	DRDLID      uint16
	Resv        [28]byte
	Data        [SMPDataSize]byte
	InitialPath [SMPPathSize]byte
	ReturnPath  [SMPPathSize]byte
}

// Directed reports whether s is a directed-route SMP.
func (s *SMP) Directed() bool { return s.MgmtClass == ClassSubnDR }

// HopPtr and HopCnt are a directed-route SMP's hop pointer and count.
func (s *SMP) HopPtr() uint8 { return uint8(s.ClassSpecific >> 8) }
func (s *SMP) HopCnt() uint8 { return uint8(s.ClassSpecific) }

// DecodeSMP decodes a 256-byte SMP of either SM class. It does not check
// versions or methods: the SMA answers those with a status.
func DecodeSMP(b []byte) (SMP, error) {
	var s SMP
	if len(b) != Size {
		return s, ErrSize
	}
	s.Header, _ = DecodeHeader(b)
	if s.MgmtClass != ClassSubnLID && s.MgmtClass != ClassSubnDR {
		return SMP{}, ErrClass
	}
	be := binary.BigEndian
	s.MKey = be.Uint64(b[24:])
	s.DRSLID = be.Uint16(b[32:])
	s.DRDLID = be.Uint16(b[34:])
	copy(s.Resv[:], b[36:64])
	copy(s.Data[:], b[64:128])
	copy(s.InitialPath[:], b[128:192])
	copy(s.ReturnPath[:], b[192:256])
	return s, nil
}

// Encode writes s into b (at least 256 bytes).
func (s *SMP) Encode(b []byte) error {
	if len(b) < Size {
		return ErrShortBuffer
	}
	_ = s.Header.Encode(b)
	be := binary.BigEndian
	be.PutUint64(b[24:], s.MKey)
	be.PutUint16(b[32:], s.DRSLID)
	be.PutUint16(b[34:], s.DRDLID)
	copy(b[36:64], s.Resv[:])
	copy(b[64:128], s.Data[:])
	copy(b[128:192], s.InitialPath[:])
	copy(b[192:256], s.ReturnPath[:])
	return nil
}
