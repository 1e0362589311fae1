package mad

import "encoding/binary"

// SA attribute IDs (IBA 15.2.5).
const (
	AttrSANodeRecord     = 0x0011
	AttrSAPortInfoRecord = 0x0012
	AttrSAPathRecord     = 0x0035
	AttrSAMCMemberRecord = 0x0038
)

// SA MAD layout (ib_sa.h struct ib_sa_mad).
const (
	SADataOffset = 56
	SADataSize   = 200
)

// GSIQKey is the Q_Key of QP1 (general services), which every SA MAD is
// sent with.
const GSIQKey = 0x80010000

// RMPPHeader is the 12-byte RMPP header every SA MAD carries (IBA 13.6.2).
// Single-MAD transfers, the only ones this emulator makes, leave it zero
// (RMPPFlags' Active bit clear).
type RMPPHeader struct {
	Version   uint8
	Type      uint8
	RTimeFlag uint8 // RRespTime (5 bits) ‖ flags (3 bits: Active, First, Last)
	Status    uint8
	Data1     uint32 // segment number
	Data2     uint32 // payload length / new window last
}

// SAMAD is a subnet administration MAD (IBA 15.2.1): the common header,
// RMPP header, SM_Key, AttributeOffset, ComponentMask, and 200 bytes of
// data (the record).
type SAMAD struct {
	Header
	RMPP       RMPPHeader
	SMKey      uint64
	AttrOffset uint16 // in 8-byte words: record spacing in a GetTableResp
	Resv       uint16
	CompMask   uint64
	Data       [SADataSize]byte
}

// DecodeSA decodes a 256-byte SubnAdm MAD. It does not check versions or
// methods: the SA answers those with a status.
func DecodeSA(b []byte) (SAMAD, error) {
	var m SAMAD
	if len(b) != Size {
		return m, ErrSize
	}
	m.Header, _ = DecodeHeader(b)
	if m.MgmtClass != ClassSubnAdm {
		return SAMAD{}, ErrClass
	}
	be := binary.BigEndian
	m.RMPP = RMPPHeader{Version: b[24], Type: b[25], RTimeFlag: b[26], Status: b[27],
		Data1: be.Uint32(b[28:]), Data2: be.Uint32(b[32:])}
	m.SMKey = be.Uint64(b[36:])
	m.AttrOffset = be.Uint16(b[44:])
	m.Resv = be.Uint16(b[46:])
	m.CompMask = be.Uint64(b[48:])
	copy(m.Data[:], b[56:])
	return m, nil
}

// Encode writes m into b (at least 256 bytes).
func (m *SAMAD) Encode(b []byte) error {
	if len(b) < Size {
		return ErrShortBuffer
	}
	_ = m.Header.Encode(b)
	be := binary.BigEndian
	b[24], b[25], b[26], b[27] = m.RMPP.Version, m.RMPP.Type, m.RMPP.RTimeFlag, m.RMPP.Status
	be.PutUint32(b[28:], m.RMPP.Data1)
	be.PutUint32(b[32:], m.RMPP.Data2)
	be.PutUint64(b[36:], m.SMKey)
	be.PutUint16(b[44:], m.AttrOffset)
	be.PutUint16(b[46:], m.Resv)
	be.PutUint64(b[48:], m.CompMask)
	copy(b[56:256], m.Data[:])
	return nil
}
