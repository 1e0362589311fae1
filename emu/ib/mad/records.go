package mad

import "encoding/binary"

// Sizes of the SA attributes.
const (
	ClassPortInfoSize  = 72
	PathRecordSize     = 64
	MCMemberRecordSize = 52
)

// GID is a 128-bit global identifier as records carry it.
type GID = [16]byte

// ClassPortInfo is the ClassPortInfo attribute of any GSI class (IBA
// 13.4.8.1; Linux struct ib_class_port_info), 72 bytes.
type ClassPortInfo struct {
	BaseVersion     uint8  // @0
	ClassVersion    uint8  // @1
	CapabilityMask  uint16 // @2
	CapabilityMask2 uint32 // @4 bits 31–5 (27 bits)
	RespTimeValue   uint8  // @4 bits 4–0
	RedirectGID     GID    // @8
	RedirectTC      uint8  // @24 bits 31–24
	RedirectSL      uint8  // @24 bits 23–20
	RedirectFL      uint32 // @24 bits 19–0
	RedirectLID     uint16 // @28
	RedirectPKey    uint16 // @30
	RedirectQP      uint32 // @32, 24 bits (high byte reserved)
	RedirectQKey    uint32 // @36
	TrapGID         GID    // @40
	TrapTC          uint8  // @56 bits 31–24
	TrapSL          uint8  // @56 bits 23–20
	TrapFL          uint32 // @56 bits 19–0
	TrapLID         uint16 // @60
	TrapPKey        uint16 // @62
	TrapHL          uint8  // @64 bits 31–24
	TrapQP          uint32 // @64 bits 23–0
	TrapQKey        uint32 // @68
}

func tcSLFL(tc, sl uint8, fl uint32) uint32 { return uint32(tc)<<24 | uint32(sl)<<20 | fl }

// DecodeClassPortInfo decodes the first 72 bytes of b.
func DecodeClassPortInfo(b []byte) (ClassPortInfo, error) {
	if len(b) < ClassPortInfoSize {
		return ClassPortInfo{}, ErrShortBuffer
	}
	be := binary.BigEndian
	w4, r, t, hq := be.Uint32(b[4:]), be.Uint32(b[24:]), be.Uint32(b[56:]), be.Uint32(b[64:])
	return ClassPortInfo{
		BaseVersion: b[0], ClassVersion: b[1], CapabilityMask: be.Uint16(b[2:]),
		CapabilityMask2: w4 >> 5, RespTimeValue: uint8(w4 & 31), RedirectGID: GID(b[8:24]),
		RedirectTC: uint8(r >> 24), RedirectSL: uint8(r >> 20 & 15), RedirectFL: r & 0xFFFFF,
		RedirectLID: be.Uint16(b[28:]), RedirectPKey: be.Uint16(b[30:]),
		RedirectQP: be.Uint32(b[32:]) & 0xFFFFFF, RedirectQKey: be.Uint32(b[36:]),
		TrapGID: GID(b[40:56]), TrapTC: uint8(t >> 24), TrapSL: uint8(t >> 20 & 15), TrapFL: t & 0xFFFFF,
		TrapLID: be.Uint16(b[60:]), TrapPKey: be.Uint16(b[62:]),
		TrapHL: uint8(hq >> 24), TrapQP: hq & 0xFFFFFF, TrapQKey: be.Uint32(b[68:]),
	}, nil
}

// Encode writes c into the first 72 bytes of b.
func (c *ClassPortInfo) Encode(b []byte) error {
	if len(b) < ClassPortInfoSize {
		return ErrShortBuffer
	}
	if c.CapabilityMask2 >= 1<<27 || c.RespTimeValue > 31 || c.RedirectSL > 15 || c.TrapSL > 15 ||
		c.RedirectFL > 0xFFFFF || c.TrapFL > 0xFFFFF || c.RedirectQP > 0xFFFFFF || c.TrapQP > 0xFFFFFF {
		return ErrFieldRange
	}
	be := binary.BigEndian
	b[0], b[1] = c.BaseVersion, c.ClassVersion
	be.PutUint16(b[2:], c.CapabilityMask)
	be.PutUint32(b[4:], c.CapabilityMask2<<5|uint32(c.RespTimeValue))
	copy(b[8:24], c.RedirectGID[:])
	be.PutUint32(b[24:], tcSLFL(c.RedirectTC, c.RedirectSL, c.RedirectFL))
	be.PutUint16(b[28:], c.RedirectLID)
	be.PutUint16(b[30:], c.RedirectPKey)
	be.PutUint32(b[32:], c.RedirectQP)
	be.PutUint32(b[36:], c.RedirectQKey)
	copy(b[40:56], c.TrapGID[:])
	be.PutUint32(b[56:], tcSLFL(c.TrapTC, c.TrapSL, c.TrapFL))
	be.PutUint16(b[60:], c.TrapLID)
	be.PutUint16(b[62:], c.TrapPKey)
	be.PutUint32(b[64:], uint32(c.TrapHL)<<24|c.TrapQP)
	be.PutUint32(b[68:], c.TrapQKey)
	return nil
}

// Selectors of the MTU, rate and packet lifetime fields of PathRecord and
// MCMemberRecord (IBA 15.2.5.16).
const (
	SelGreater = 0 // greater than the value
	SelLess    = 1 // less than the value
	SelExactly = 2 // exactly the value
	SelLargest = 3 // the largest available
)

// Rate enumeration (IBA 9.7.5.1; Linux enum ib_rate), the ones used here.
const (
	Rate2_5Gbps = 2
	Rate10Gbps  = 3
	Rate30Gbps  = 4
	Rate5Gbps   = 5
	Rate20Gbps  = 6
	Rate40Gbps  = 7
	Rate60Gbps  = 8
	Rate80Gbps  = 9
	Rate120Gbps = 10
)

// RateMbps returns the speed of rate enum r in Mb/s, 0 for a value that is
// not one of the rates above (IBA 1.2's 2–10; the enumeration is not in
// the order of the speeds).
func RateMbps(r uint8) int {
	switch r {
	case Rate2_5Gbps:
		return 2500
	case Rate10Gbps:
		return 10000
	case Rate30Gbps:
		return 30000
	case Rate5Gbps:
		return 5000
	case Rate20Gbps:
		return 20000
	case Rate40Gbps:
		return 40000
	case Rate60Gbps:
		return 60000
	case Rate80Gbps:
		return 80000
	case Rate120Gbps:
		return 120000
	}
	return 0
}

// PathRecord component mask bits (IBA 15.2.5.16; ib_sa.h IB_SA_PATH_REC_*).
const (
	PRServiceID      = 3 << 0
	PRDGID           = 1 << 2
	PRSGID           = 1 << 3
	PRDLID           = 1 << 4
	PRSLID           = 1 << 5
	PRRawTraffic     = 1 << 6
	PRFlowLabel      = 1 << 8
	PRHopLimit       = 1 << 9
	PRTClass         = 1 << 10
	PRReversible     = 1 << 11
	PRNumbPath       = 1 << 12
	PRPKey           = 1 << 13
	PRQoSClass       = 1 << 14
	PRSL             = 1 << 15
	PRMTUSelector    = 1 << 16
	PRMTU            = 1 << 17
	PRRateSelector   = 1 << 18
	PRRate           = 1 << 19
	PRPacketLifeSel  = 1 << 20
	PRPacketLifeTime = 1 << 21
	PRPreference     = 1 << 22
)

// PathRecord is the PathRecord attribute (IBA 15.2.5.16; the layout of
// sa_query.c's path_rec_table), 64 bytes.
type PathRecord struct {
	ServiceID      uint64 // @0
	DGID           GID    // @8
	SGID           GID    // @24
	DLID           uint16 // @40
	SLID           uint16 // @42
	RawTraffic     bool   // @44 bit 31
	FlowLabel      uint32 // @44 bits 27–8
	HopLimit       uint8  // @44 bits 7–0
	TClass         uint8  // @48
	Reversible     bool   // @49 bit 7
	NumbPath       uint8  // @49 bits 6–0
	PKey           uint16 // @50
	QoSClass       uint16 // @52 bits 15–4
	SL             uint8  // @52 bits 3–0
	MTUSelector    uint8  // @54 bits 7–6
	MTU            uint8  // @54 bits 5–0
	RateSelector   uint8  // @55 bits 7–6
	Rate           uint8  // @55 bits 5–0
	PacketLifeSel  uint8  // @56 bits 7–6
	PacketLifeTime uint8  // @56 bits 5–0
	Preference     uint8  // @57
}

// DecodePathRecord decodes the first 64 bytes of b.
func DecodePathRecord(b []byte) (PathRecord, error) {
	if len(b) < PathRecordSize {
		return PathRecord{}, ErrShortBuffer
	}
	be := binary.BigEndian
	w11, q := be.Uint32(b[44:]), be.Uint16(b[52:])
	return PathRecord{
		ServiceID: be.Uint64(b[0:]), DGID: GID(b[8:24]), SGID: GID(b[24:40]),
		DLID: be.Uint16(b[40:]), SLID: be.Uint16(b[42:]),
		RawTraffic: w11>>31 != 0, FlowLabel: w11 >> 8 & 0xFFFFF, HopLimit: uint8(w11),
		TClass: b[48], Reversible: b[49]&0x80 != 0, NumbPath: b[49] & 0x7F, PKey: be.Uint16(b[50:]),
		QoSClass: q >> 4, SL: uint8(q & 15),
		MTUSelector: b[54] >> 6, MTU: b[54] & 63, RateSelector: b[55] >> 6, Rate: b[55] & 63,
		PacketLifeSel: b[56] >> 6, PacketLifeTime: b[56] & 63, Preference: b[57],
	}, nil
}

// Encode writes r into the first 64 bytes of b; reserved bits are zero.
func (r *PathRecord) Encode(b []byte) error {
	if len(b) < PathRecordSize {
		return ErrShortBuffer
	}
	if r.FlowLabel > 0xFFFFF || r.NumbPath > 0x7F || r.QoSClass > 0xFFF || r.SL > 15 ||
		r.MTUSelector > 3 || r.MTU > 63 || r.RateSelector > 3 || r.Rate > 63 ||
		r.PacketLifeSel > 3 || r.PacketLifeTime > 63 {
		return ErrFieldRange
	}
	be := binary.BigEndian
	be.PutUint64(b[0:], r.ServiceID)
	copy(b[8:24], r.DGID[:])
	copy(b[24:40], r.SGID[:])
	be.PutUint16(b[40:], r.DLID)
	be.PutUint16(b[42:], r.SLID)
	w11 := r.FlowLabel<<8 | uint32(r.HopLimit)
	if r.RawTraffic {
		w11 |= 1 << 31
	}
	be.PutUint32(b[44:], w11)
	b[48] = r.TClass
	b[49] = r.NumbPath
	if r.Reversible {
		b[49] |= 0x80
	}
	be.PutUint16(b[50:], r.PKey)
	be.PutUint16(b[52:], r.QoSClass<<4|uint16(r.SL))
	b[54] = r.MTUSelector<<6 | r.MTU
	b[55] = r.RateSelector<<6 | r.Rate
	b[56] = r.PacketLifeSel<<6 | r.PacketLifeTime
	b[57] = r.Preference
	clear(b[58:64])
	return nil
}

// MCMemberRecord component mask bits (IBA 15.2.5.17; ib_sa.h
// IB_SA_MCMEMBER_REC_*).
const (
	MCMGID           = 1 << 0
	MCPortGID        = 1 << 1
	MCQKey           = 1 << 2
	MCMLID           = 1 << 3
	MCMTUSelector    = 1 << 4
	MCMTU            = 1 << 5
	MCTClass         = 1 << 6
	MCPKey           = 1 << 7
	MCRateSelector   = 1 << 8
	MCRate           = 1 << 9
	MCPacketLifeSel  = 1 << 10
	MCPacketLifeTime = 1 << 11
	MCSL             = 1 << 12
	MCFlowLabel      = 1 << 13
	MCHopLimit       = 1 << 14
	MCScope          = 1 << 15
	MCJoinState      = 1 << 16
	MCProxyJoin      = 1 << 17
)

// JoinState bits of an MCMemberRecord (IBA 15.2.5.17).
const (
	JoinFullMember         = 1 << 0
	JoinNonMember          = 1 << 1
	JoinSendOnlyNonMember  = 1 << 2
	JoinSendOnlyFullMember = 1 << 3
)

// MCMemberRecord is the MCMemberRecord attribute (IBA 15.2.5.17; the
// layout of sa_query.c's mcmember_rec_table), 52 bytes.
type MCMemberRecord struct {
	MGID           GID    // @0
	PortGID        GID    // @16
	QKey           uint32 // @32
	MLID           uint16 // @36
	MTUSelector    uint8  // @38 bits 7–6
	MTU            uint8  // @38 bits 5–0
	TClass         uint8  // @39
	PKey           uint16 // @40
	RateSelector   uint8  // @42 bits 7–6
	Rate           uint8  // @42 bits 5–0
	PacketLifeSel  uint8  // @43 bits 7–6
	PacketLifeTime uint8  // @43 bits 5–0
	SL             uint8  // @44 bits 31–28
	FlowLabel      uint32 // @44 bits 27–8
	HopLimit       uint8  // @44 bits 7–0
	Scope          uint8  // @48 bits 7–4
	JoinState      uint8  // @48 bits 3–0
	ProxyJoin      bool   // @49 bit 7
}

// DecodeMCMemberRecord decodes the first 52 bytes of b.
func DecodeMCMemberRecord(b []byte) (MCMemberRecord, error) {
	if len(b) < MCMemberRecordSize {
		return MCMemberRecord{}, ErrShortBuffer
	}
	be := binary.BigEndian
	w := be.Uint32(b[44:])
	return MCMemberRecord{
		MGID: GID(b[0:16]), PortGID: GID(b[16:32]), QKey: be.Uint32(b[32:]), MLID: be.Uint16(b[36:]),
		MTUSelector: b[38] >> 6, MTU: b[38] & 63, TClass: b[39], PKey: be.Uint16(b[40:]),
		RateSelector: b[42] >> 6, Rate: b[42] & 63, PacketLifeSel: b[43] >> 6, PacketLifeTime: b[43] & 63,
		SL: uint8(w >> 28), FlowLabel: w >> 8 & 0xFFFFF, HopLimit: uint8(w),
		Scope: b[48] >> 4, JoinState: b[48] & 15, ProxyJoin: b[49]&0x80 != 0,
	}, nil
}

// Encode writes r into the first 52 bytes of b; reserved bits are zero.
func (r *MCMemberRecord) Encode(b []byte) error {
	if len(b) < MCMemberRecordSize {
		return ErrShortBuffer
	}
	if r.MTUSelector > 3 || r.MTU > 63 || r.RateSelector > 3 || r.Rate > 63 || r.PacketLifeSel > 3 ||
		r.PacketLifeTime > 63 || r.SL > 15 || r.FlowLabel > 0xFFFFF || r.Scope > 15 || r.JoinState > 15 {
		return ErrFieldRange
	}
	be := binary.BigEndian
	copy(b[0:16], r.MGID[:])
	copy(b[16:32], r.PortGID[:])
	be.PutUint32(b[32:], r.QKey)
	be.PutUint16(b[36:], r.MLID)
	b[38] = r.MTUSelector<<6 | r.MTU
	b[39] = r.TClass
	be.PutUint16(b[40:], r.PKey)
	b[42] = r.RateSelector<<6 | r.Rate
	b[43] = r.PacketLifeSel<<6 | r.PacketLifeTime
	be.PutUint32(b[44:], uint32(r.SL)<<28|r.FlowLabel<<8|uint32(r.HopLimit))
	b[48] = r.Scope<<4 | r.JoinState
	b[49] = 0
	if r.ProxyJoin {
		b[49] = 0x80
	}
	b[50], b[51] = 0, 0
	return nil
}
