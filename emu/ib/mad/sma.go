package mad

import "errors"

// ErrNoResponse is AnswerSMP's refusal of a MAD that gets no answer: a
// response, a Trap or a TrapRepress (IBA 13.4.5). The MAD_IFC handler
// returns the command with no MAD response (the driver drops the MAD).
var ErrNoResponse = errors.New("mad: the SMP needs no response")

// SettableCapabilityMask are the PortInfo CapabilityMask bits a port's own
// software may change (ib_modify_port's set_port_cap_mask: CM, SNMP
// tunnelling, device management, vendor class, boot management): by a Set
// PortInfo through the SMA, or by the device model (mlx5's PCAP register)
// through SetCapabilityMask. The other bits are the device's.
const SettableCapabilityMask = CapIsCommManagementSupported | CapIsSNMPTunnelingSupported |
	CapIsDeviceManagementSupported | CapIsVendorClassSupported | CapIsBootManagementSupported

// PortState is what one HCA port's Subnet Management Agent reports: the
// node's identity and the port's configuration as the subnet manager left
// it (LID, SM LID, GID prefix, P_Keys; package ib/subnet assigns them).
// A device model keeps one per port, fills it when the port attaches, and
// calls AnswerSMP from its MAD_IFC handler. It is not safe for concurrent
// use: the device calls it under its own lock.
type PortState struct {
	NodeType        uint8 // NodeTypeCA
	NumPorts        uint8
	PortNum         uint8 // this port's number (1-based)
	SystemImageGUID uint64
	NodeGUID        uint64
	PortGUID        uint64
	VendorID        uint32 // 24 bits (0x0002c9 for Mellanox)
	DeviceID        uint16
	Revision        uint32
	NodeDescription NodeDescription

	GIDPrefix uint64
	// GUIDs is the port's GUID table, index 0 being the port GUID; its
	// length is GUIDCap (at most 255).
	GUIDs []uint64
	// PKeys is the P_Key table; PartitionCap is its advertised length
	// (entries past len(PKeys) read as 0, the invalid P_Key).
	PKeys        []uint16
	PartitionCap uint16

	LID, MasterSMLID   uint16
	MasterSMSL         uint8
	LMC                uint8
	CapabilityMask     uint32
	PortState          uint8 // PortStateActive
	PortPhysicalState  uint8 // PhysStateLinkUp
	LinkWidthEnabled   uint8
	LinkWidthSupported uint8
	LinkWidthActive    uint8 // 1 = 1X, 2 = 4X, 4 = 8X, 8 = 12X
	LinkSpeedSupported uint8
	LinkSpeedEnabled   uint8
	LinkSpeedActive    uint8 // 1 = SDR, 2 = DDR, 4 = QDR
	NeighborMTU        uint8 // MTU enum
	MTUCap             uint8 // MTU enum
	VLCap              uint8
	SubnetTimeOut      uint8
	PKeyViolations     uint16
	QKeyViolations     uint16
}

// NewPortState returns the state of port 1 of a one-port CA with the
// values shared/spec/mlx5.md §5.4.1 recommends: ACTIVE and LinkUp, 4X QDR,
// MTU 4096, one VL, the GID prefix fe80::/64, the port GUID as GUID 0, the
// default P_Key 0xffff at index 0 of a 128-entry table, subnet timeout 18,
// IsSystemImageGUIDSupported. The caller sets the vendor, device, LIDs.
func NewPortState(nodeGUID, portGUID uint64, desc string) PortState {
	return PortState{
		NodeType: NodeTypeCA, NumPorts: 1, PortNum: 1, SystemImageGUID: nodeGUID, NodeGUID: nodeGUID,
		PortGUID: portGUID, NodeDescription: MakeNodeDescription(desc),
		GIDPrefix: 0xFE80000000000000, GUIDs: []uint64{portGUID}, PKeys: []uint16{0xFFFF}, PartitionCap: 128,
		CapabilityMask: CapIsSystemImageGUIDSupported, PortState: PortStateActive,
		PortPhysicalState: PhysStateLinkUp, LinkWidthEnabled: 2, LinkWidthSupported: 3, LinkWidthActive: 2,
		LinkSpeedSupported: 7, LinkSpeedEnabled: 7, LinkSpeedActive: 4, NeighborMTU: MTU4096, MTUCap: MTU4096,
		VLCap: 1, SubnetTimeOut: 18,
	}
}

// NodeInfo returns the NodeInfo the SMA answers.
func (st *PortState) NodeInfo() NodeInfo {
	return NodeInfo{BaseVersion: BaseVersion, ClassVersion: SMPVersion, NodeType: st.NodeType,
		NumPorts: st.NumPorts, SystemImageGUID: st.SystemImageGUID, NodeGUID: st.NodeGUID,
		PortGUID: st.PortGUID, PartitionCap: st.PartitionCap, DeviceID: st.DeviceID, Revision: st.Revision,
		LocalPortNum: st.PortNum, VendorID: st.VendorID & 0xFFFFFF}
}

// PortInfo returns the PortInfo the SMA answers (fields wider than their
// PortInfo field are cut to it).
func (st *PortState) PortInfo() PortInfo {
	return PortInfo{GIDPrefix: st.GIDPrefix, LID: st.LID, MasterSMLID: st.MasterSMLID,
		CapabilityMask: st.CapabilityMask, LocalPortNum: st.PortNum,
		LinkWidthEnabled: st.LinkWidthEnabled, LinkWidthSupported: st.LinkWidthSupported,
		LinkWidthActive: st.LinkWidthActive, LinkSpeedSupported: st.LinkSpeedSupported & 15,
		PortState: st.PortState & 15, PortPhysicalState: st.PortPhysicalState & 15, LMC: st.LMC & 7,
		LinkSpeedActive: st.LinkSpeedActive & 15, LinkSpeedEnabled: st.LinkSpeedEnabled & 15,
		NeighborMTU: st.NeighborMTU & 15, MasterSMSL: st.MasterSMSL & 15, VLCap: st.VLCap & 15,
		MTUCap: st.MTUCap & 15, OperationalVLs: st.VLCap & 15, PKeyViolations: st.PKeyViolations,
		QKeyViolations: st.QKeyViolations, GUIDCap: uint8(min(len(st.GUIDs), 255)),
		SubnetTimeOut: st.SubnetTimeOut & 31}
}

// SetCapabilityMask changes the settable bits of the CapabilityMask
// (SettableCapabilityMask) to those of mask, and keeps the others.
func (st *PortState) SetCapabilityMask(mask uint32) {
	st.CapabilityMask = st.CapabilityMask&^SettableCapabilityMask | mask&SettableCapabilityMask
}

// AnswerSMP is the port's Subnet Management Agent: req is a 256-byte SMP
// (as MAD_IFC carries it), and the 256-byte response is written to resp
// (which may be req itself). The response is the request's header and
// body with method GetResp (0x81, the answer to a Set too) and a status:
//
//   - 0 with the attribute in data[] for Get of NodeInfo, NodeDescription,
//     PortInfo (attribute modifier 0 or this port), GUIDInfo and
//     P_KeyTable (modifier = block), and for Set of PortInfo, which
//     changes only the settable CapabilityMask bits (the rest of a port's
//     configuration is the subnet's: a guest cannot move its LID);
//   - StatusBadVersion for a base or class version other than 1;
//   - StatusMethodUnsupported for a method other than Get and Set;
//   - StatusAttrUnsupported (0x000c) for any other attribute, Mellanox's
//     ExtendedPortInfo (0xff90) among them, and for Set of another one;
//   - StatusInvalidField for a modifier naming another port or a block
//     past the table.
//
// A directed-route SMP's response has the D bit set (IBA 14.2.2; mlx5_ib
// ORs it in as well). A MAD that gets no answer is refused: ErrSize (not
// 256 bytes, or resp shorter), ErrClass (not an SM class), ErrNoResponse
// (a response, Trap or TrapRepress); resp is then untouched. AnswerSMP
// never panics.
func (st *PortState) AnswerSMP(req, resp []byte) error {
	if len(resp) < Size {
		return ErrShortBuffer
	}
	s, err := DecodeSMP(req)
	if err != nil {
		return err
	}
	if s.IsResponse() || s.Method == MethodTrap || s.Method == MethodTrapRepress {
		return ErrNoResponse
	}
	status := uint16(StatusOK)
	var data [SMPDataSize]byte
	switch {
	case s.BaseVersion != BaseVersion || s.ClassVersion != SMPVersion:
		status = StatusBadVersion
	case s.Method == MethodGet:
		status = st.get(&s, data[:])
	case s.Method == MethodSet:
		status = st.set(&s, data[:])
	default:
		status = StatusMethodUnsupported
	}
	if status == StatusOK {
		s.Data = data
	}
	s.Method = MethodGetResp
	s.Status = status
	if s.Directed() {
		s.Status |= SMPDirection
	}
	return s.Encode(resp)
}

// get answers a Get into data; it returns the MAD status.
func (st *PortState) get(s *SMP, data []byte) uint16 {
	switch s.AttrID {
	case AttrNodeInfo:
		ni := st.NodeInfo()
		_ = ni.Encode(data)
	case AttrNodeDescription:
		_ = st.NodeDescription.Encode(data)
	case AttrPortInfo:
		if s.AttrMod != 0 && s.AttrMod != uint32(st.PortNum) {
			return StatusInvalidField
		}
		pi := st.PortInfo()
		_ = pi.Encode(data)
	case AttrGUIDInfo:
		n := min(len(st.GUIDs), 255)
		if s.AttrMod >= uint32(n+GUIDsPerBlock-1)/GUIDsPerBlock {
			return StatusInvalidField
		}
		var g GUIDInfo
		copy(g[:], st.GUIDs[s.AttrMod*GUIDsPerBlock:min(uint32(n), (s.AttrMod+1)*GUIDsPerBlock)])
		_ = g.Encode(data)
	case AttrPKeyTable:
		block := s.AttrMod & 0xFFFF // the high half names a switch port; a CA's is 0
		if s.AttrMod>>16 != 0 || block >= (uint32(st.PartitionCap)+PKeysPerBlock-1)/PKeysPerBlock {
			return StatusInvalidField
		}
		var t PKeyTable
		if lo := block * PKeysPerBlock; lo < uint32(len(st.PKeys)) {
			copy(t[:], st.PKeys[lo:min(uint32(len(st.PKeys)), lo+PKeysPerBlock, uint32(st.PartitionCap))])
		}
		_ = t.Encode(data)
	default:
		return StatusAttrUnsupported
	}
	return StatusOK
}

// set answers a Set into data; it returns the MAD status.
func (st *PortState) set(s *SMP, data []byte) uint16 {
	if s.AttrID != AttrPortInfo {
		return StatusAttrUnsupported
	}
	if s.AttrMod != 0 && s.AttrMod != uint32(st.PortNum) {
		return StatusInvalidField
	}
	req, _ := DecodePortInfo(s.Data[:])
	st.SetCapabilityMask(req.CapabilityMask)
	pi := st.PortInfo()
	_ = pi.Encode(data)
	return StatusOK
}
