package mad

import (
	"bytes"
	"encoding/binary"
)

// Sizes of the SMP attributes.
const (
	NodeInfoSize        = 40
	NodeDescriptionSize = 64
	PortInfoSize        = 64
	GUIDInfoSize        = 64
	PKeyTableSize       = 64
	GUIDsPerBlock       = 8
	PKeysPerBlock       = 32
)

// NodeType values.
const (
	NodeTypeCA     = 1
	NodeTypeSwitch = 2
	NodeTypeRouter = 3
)

// NodeInfo is the NodeInfo attribute (IBA 14.2.5.3), 40 bytes.
type NodeInfo struct {
	BaseVersion     uint8  // @0
	ClassVersion    uint8  // @1
	NodeType        uint8  // @2
	NumPorts        uint8  // @3
	SystemImageGUID uint64 // @4
	NodeGUID        uint64 // @12
	PortGUID        uint64 // @20
	PartitionCap    uint16 // @28: P_Key table length
	DeviceID        uint16 // @30
	Revision        uint32 // @32
	LocalPortNum    uint8  // @36
	VendorID        uint32 // @37, 24 bits
}

// DecodeNodeInfo decodes the first 40 bytes of b.
func DecodeNodeInfo(b []byte) (NodeInfo, error) {
	if len(b) < NodeInfoSize {
		return NodeInfo{}, ErrShortBuffer
	}
	be := binary.BigEndian
	return NodeInfo{BaseVersion: b[0], ClassVersion: b[1], NodeType: b[2], NumPorts: b[3],
		SystemImageGUID: be.Uint64(b[4:]), NodeGUID: be.Uint64(b[12:]), PortGUID: be.Uint64(b[20:]),
		PartitionCap: be.Uint16(b[28:]), DeviceID: be.Uint16(b[30:]), Revision: be.Uint32(b[32:]),
		LocalPortNum: b[36], VendorID: be.Uint32(b[36:]) & 0xFFFFFF}, nil
}

// Encode writes n into the first 40 bytes of b.
func (n *NodeInfo) Encode(b []byte) error {
	if len(b) < NodeInfoSize {
		return ErrShortBuffer
	}
	if n.VendorID > 0xFFFFFF {
		return ErrFieldRange
	}
	be := binary.BigEndian
	b[0], b[1], b[2], b[3] = n.BaseVersion, n.ClassVersion, n.NodeType, n.NumPorts
	be.PutUint64(b[4:], n.SystemImageGUID)
	be.PutUint64(b[12:], n.NodeGUID)
	be.PutUint64(b[20:], n.PortGUID)
	be.PutUint16(b[28:], n.PartitionCap)
	be.PutUint16(b[30:], n.DeviceID)
	be.PutUint32(b[32:], n.Revision)
	be.PutUint32(b[36:], uint32(n.LocalPortNum)<<24|n.VendorID)
	return nil
}

// NodeDescription is the NodeDescription attribute (IBA 14.2.5.2): 64
// bytes of text, NUL-padded.
type NodeDescription [NodeDescriptionSize]byte

// MakeNodeDescription returns s as a node description, cut at 64 bytes.
func MakeNodeDescription(s string) NodeDescription {
	var d NodeDescription
	copy(d[:], s)
	return d
}

// String returns the text up to the first NUL.
func (d NodeDescription) String() string {
	if i := bytes.IndexByte(d[:], 0); i >= 0 {
		return string(d[:i])
	}
	return string(d[:])
}

// DecodeNodeDescription decodes the first 64 bytes of b.
func DecodeNodeDescription(b []byte) (NodeDescription, error) {
	if len(b) < NodeDescriptionSize {
		return NodeDescription{}, ErrShortBuffer
	}
	return NodeDescription(b[:NodeDescriptionSize]), nil
}

// Encode writes d into the first 64 bytes of b.
func (d *NodeDescription) Encode(b []byte) error {
	if len(b) < NodeDescriptionSize {
		return ErrShortBuffer
	}
	copy(b, d[:])
	return nil
}

// Port states and physical states (PortInfo).
const (
	PortStateDown   = 1
	PortStateInit   = 2
	PortStateArmed  = 3
	PortStateActive = 4
	PhysStateLinkUp = 5
)

// MTU enumeration (IBA 7.7.2; PortInfo, PathRecord, MCMemberRecord).
const (
	MTU256  = 1
	MTU512  = 2
	MTU1024 = 3
	MTU2048 = 4
	MTU4096 = 5
)

// MTUBytes returns the size of MTU enum m, 0 if m is not one.
func MTUBytes(m uint8) int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// PortInfo CapabilityMask bits (IBA 14.2.5.6; Linux enum ib_port_cap_flags).
const (
	CapIsSM                        = 1 << 1
	CapIsNoticeSupported           = 1 << 2
	CapIsTrapSupported             = 1 << 3
	CapIsAutomaticMigration        = 1 << 5
	CapIsSLMappingSupported        = 1 << 6
	CapIsSystemImageGUIDSupported  = 1 << 11
	CapIsPKeySwitchExtPortTrap     = 1 << 12
	CapIsExtendedSpeedsSupported   = 1 << 14
	CapIsCapabilityMask2Supported  = 1 << 15
	CapIsCommManagementSupported   = 1 << 16
	CapIsSNMPTunnelingSupported    = 1 << 17
	CapIsReinitSupported           = 1 << 18
	CapIsDeviceManagementSupported = 1 << 19
	CapIsVendorClassSupported      = 1 << 20
	CapIsDRNoticeSupported         = 1 << 21
	CapIsCapabilityMaskNotice      = 1 << 22
	CapIsBootManagementSupported   = 1 << 23
	CapIsClientReregSupported      = 1 << 25
)

// PortInfo is the PortInfo attribute (IBA 14.2.5.6), 64 bytes; every
// non-reserved field, with its byte offset.
type PortInfo struct {
	MKey                  uint64 // @0
	GIDPrefix             uint64 // @8
	LID                   uint16 // @16
	MasterSMLID           uint16 // @18
	CapabilityMask        uint32 // @20
	DiagCode              uint16 // @24
	MKeyLeasePeriod       uint16 // @26
	LocalPortNum          uint8  // @28
	LinkWidthEnabled      uint8  // @29
	LinkWidthSupported    uint8  // @30
	LinkWidthActive       uint8  // @31
	LinkSpeedSupported    uint8  // @32 bits 7–4
	PortState             uint8  // @32 bits 3–0
	PortPhysicalState     uint8  // @33 bits 7–4
	LinkDownDefaultState  uint8  // @33 bits 3–0
	MKeyProtectBits       uint8  // @34 bits 7–6
	LMC                   uint8  // @34 bits 2–0
	LinkSpeedActive       uint8  // @35 bits 7–4
	LinkSpeedEnabled      uint8  // @35 bits 3–0
	NeighborMTU           uint8  // @36 bits 7–4
	MasterSMSL            uint8  // @36 bits 3–0
	VLCap                 uint8  // @37 bits 7–4
	InitType              uint8  // @37 bits 3–0
	VLHighLimit           uint8  // @38
	VLArbitrationHighCap  uint8  // @39
	VLArbitrationLowCap   uint8  // @40
	InitTypeReply         uint8  // @41 bits 7–4
	MTUCap                uint8  // @41 bits 3–0
	VLStallCount          uint8  // @42 bits 7–5
	HOQLife               uint8  // @42 bits 4–0
	OperationalVLs        uint8  // @43 bits 7–4
	Enforcement           uint8  // @43 bits 3–0: PartitionEnforcementInbound/Outbound, FilterRawInbound/Outbound
	MKeyViolations        uint16 // @44
	PKeyViolations        uint16 // @46
	QKeyViolations        uint16 // @48
	GUIDCap               uint8  // @50
	ClientReregister      bool   // @51 bit 7
	MulticastPKeyTrapSupp uint8  // @51 bits 6–5
	SubnetTimeOut         uint8  // @51 bits 4–0
	RespTimeValue         uint8  // @52 bits 4–0
	LocalPhyErrors        uint8  // @53 bits 7–4
	OverrunErrors         uint8  // @53 bits 3–0
	MaxCreditHint         uint16 // @54
	LinkRoundTripLatency  uint32 // @57, 24 bits
	CapabilityMask2       uint16 // @60
	LinkSpeedExtActive    uint8  // @62 bits 7–4
	LinkSpeedExtSupported uint8  // @62 bits 3–0
	LinkSpeedExtEnabled   uint8  // @63 bits 4–0
}

// DecodePortInfo decodes the first 64 bytes of b.
func DecodePortInfo(b []byte) (PortInfo, error) {
	if len(b) < PortInfoSize {
		return PortInfo{}, ErrShortBuffer
	}
	be := binary.BigEndian
	return PortInfo{
		MKey: be.Uint64(b[0:]), GIDPrefix: be.Uint64(b[8:]), LID: be.Uint16(b[16:]),
		MasterSMLID: be.Uint16(b[18:]), CapabilityMask: be.Uint32(b[20:]), DiagCode: be.Uint16(b[24:]),
		MKeyLeasePeriod: be.Uint16(b[26:]), LocalPortNum: b[28], LinkWidthEnabled: b[29],
		LinkWidthSupported: b[30], LinkWidthActive: b[31],
		LinkSpeedSupported: b[32] >> 4, PortState: b[32] & 15,
		PortPhysicalState: b[33] >> 4, LinkDownDefaultState: b[33] & 15,
		MKeyProtectBits: b[34] >> 6, LMC: b[34] & 7,
		LinkSpeedActive: b[35] >> 4, LinkSpeedEnabled: b[35] & 15,
		NeighborMTU: b[36] >> 4, MasterSMSL: b[36] & 15,
		VLCap: b[37] >> 4, InitType: b[37] & 15,
		VLHighLimit: b[38], VLArbitrationHighCap: b[39], VLArbitrationLowCap: b[40],
		InitTypeReply: b[41] >> 4, MTUCap: b[41] & 15,
		VLStallCount: b[42] >> 5, HOQLife: b[42] & 31,
		OperationalVLs: b[43] >> 4, Enforcement: b[43] & 15,
		MKeyViolations: be.Uint16(b[44:]), PKeyViolations: be.Uint16(b[46:]), QKeyViolations: be.Uint16(b[48:]),
		GUIDCap: b[50], ClientReregister: b[51]&0x80 != 0, MulticastPKeyTrapSupp: b[51] >> 5 & 3,
		SubnetTimeOut: b[51] & 31, RespTimeValue: b[52] & 31,
		LocalPhyErrors: b[53] >> 4, OverrunErrors: b[53] & 15, MaxCreditHint: be.Uint16(b[54:]),
		LinkRoundTripLatency: be.Uint32(b[56:]) & 0xFFFFFF, CapabilityMask2: be.Uint16(b[60:]),
		LinkSpeedExtActive: b[62] >> 4, LinkSpeedExtSupported: b[62] & 15, LinkSpeedExtEnabled: b[63] & 31,
	}, nil
}

// Encode writes p into the first 64 bytes of b; reserved bits are zero.
// A value wider than its field is ErrFieldRange.
func (p *PortInfo) Encode(b []byte) error {
	if len(b) < PortInfoSize {
		return ErrShortBuffer
	}
	for _, f := range [...]struct{ v, max uint8 }{
		{p.LinkSpeedSupported, 15}, {p.PortState, 15}, {p.PortPhysicalState, 15},
		{p.LinkDownDefaultState, 15}, {p.MKeyProtectBits, 3}, {p.LMC, 7}, {p.LinkSpeedActive, 15},
		{p.LinkSpeedEnabled, 15}, {p.NeighborMTU, 15}, {p.MasterSMSL, 15}, {p.VLCap, 15},
		{p.InitType, 15}, {p.InitTypeReply, 15}, {p.MTUCap, 15}, {p.VLStallCount, 7}, {p.HOQLife, 31},
		{p.OperationalVLs, 15}, {p.Enforcement, 15}, {p.MulticastPKeyTrapSupp, 3}, {p.SubnetTimeOut, 31},
		{p.RespTimeValue, 31}, {p.LocalPhyErrors, 15}, {p.OverrunErrors, 15}, {p.LinkSpeedExtActive, 15},
		{p.LinkSpeedExtSupported, 15}, {p.LinkSpeedExtEnabled, 31},
	} {
		if f.v > f.max {
			return ErrFieldRange
		}
	}
	if p.LinkRoundTripLatency > 0xFFFFFF {
		return ErrFieldRange
	}
	be := binary.BigEndian
	be.PutUint64(b[0:], p.MKey)
	be.PutUint64(b[8:], p.GIDPrefix)
	be.PutUint16(b[16:], p.LID)
	be.PutUint16(b[18:], p.MasterSMLID)
	be.PutUint32(b[20:], p.CapabilityMask)
	be.PutUint16(b[24:], p.DiagCode)
	be.PutUint16(b[26:], p.MKeyLeasePeriod)
	b[28], b[29], b[30], b[31] = p.LocalPortNum, p.LinkWidthEnabled, p.LinkWidthSupported, p.LinkWidthActive
	b[32] = p.LinkSpeedSupported<<4 | p.PortState
	b[33] = p.PortPhysicalState<<4 | p.LinkDownDefaultState
	b[34] = p.MKeyProtectBits<<6 | p.LMC
	b[35] = p.LinkSpeedActive<<4 | p.LinkSpeedEnabled
	b[36] = p.NeighborMTU<<4 | p.MasterSMSL
	b[37] = p.VLCap<<4 | p.InitType
	b[38], b[39], b[40] = p.VLHighLimit, p.VLArbitrationHighCap, p.VLArbitrationLowCap
	b[41] = p.InitTypeReply<<4 | p.MTUCap
	b[42] = p.VLStallCount<<5 | p.HOQLife
	b[43] = p.OperationalVLs<<4 | p.Enforcement
	be.PutUint16(b[44:], p.MKeyViolations)
	be.PutUint16(b[46:], p.PKeyViolations)
	be.PutUint16(b[48:], p.QKeyViolations)
	b[50] = p.GUIDCap
	b[51] = p.MulticastPKeyTrapSupp<<5 | p.SubnetTimeOut
	if p.ClientReregister {
		b[51] |= 0x80
	}
	b[52] = p.RespTimeValue
	b[53] = p.LocalPhyErrors<<4 | p.OverrunErrors
	be.PutUint16(b[54:], p.MaxCreditHint)
	be.PutUint32(b[56:], p.LinkRoundTripLatency) // byte 56 reserved: zero
	be.PutUint16(b[60:], p.CapabilityMask2)
	b[62] = p.LinkSpeedExtActive<<4 | p.LinkSpeedExtSupported
	b[63] = p.LinkSpeedExtEnabled
	return nil
}

// GUIDInfo is one GUIDInfo block (IBA 14.2.5.5): eight GUIDs, block n
// holding GUID indexes 8n … 8n+7 (attribute modifier n).
type GUIDInfo [GUIDsPerBlock]uint64

// DecodeGUIDInfo decodes the first 64 bytes of b.
func DecodeGUIDInfo(b []byte) (GUIDInfo, error) {
	var g GUIDInfo
	if len(b) < GUIDInfoSize {
		return g, ErrShortBuffer
	}
	for i := range g {
		g[i] = binary.BigEndian.Uint64(b[8*i:])
	}
	return g, nil
}

// Encode writes g into the first 64 bytes of b.
func (g *GUIDInfo) Encode(b []byte) error {
	if len(b) < GUIDInfoSize {
		return ErrShortBuffer
	}
	for i, v := range g {
		binary.BigEndian.PutUint64(b[8*i:], v)
	}
	return nil
}

// PKeyTable is one P_KeyTable block (IBA 14.2.5.7): 32 P_Keys, block n
// holding indexes 32n … 32n+31 (attribute modifier n).
type PKeyTable [PKeysPerBlock]uint16

// DecodePKeyTable decodes the first 64 bytes of b.
func DecodePKeyTable(b []byte) (PKeyTable, error) {
	var t PKeyTable
	if len(b) < PKeyTableSize {
		return t, ErrShortBuffer
	}
	for i := range t {
		t[i] = binary.BigEndian.Uint16(b[2*i:])
	}
	return t, nil
}

// Encode writes t into the first 64 bytes of b.
func (t *PKeyTable) Encode(b []byte) error {
	if len(b) < PKeyTableSize {
		return ErrShortBuffer
	}
	for i, v := range t {
		binary.BigEndian.PutUint16(b[2*i:], v)
	}
	return nil
}
