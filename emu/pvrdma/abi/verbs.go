package abi

// Port states (enum pvrdma_port_state).
const (
	PortStateNop         = 0
	PortStateDown        = 1
	PortStateInit        = 2
	PortStateArmed       = 3
	PortStateActive      = 4
	PortStateActiveDefer = 5
)

// Physical port states (ib_port_phys_state, in PortAttr.PhysState).
const (
	PhysStateDisabled = 3
	PhysStateLinkUp   = 5
)

// Port widths and speeds (enum pvrdma_port_width, enum pvrdma_port_speed).
const (
	Width1X  = 1
	Width4X  = 2
	Width8X  = 4
	Width12X = 8

	SpeedSDR   = 1
	SpeedDDR   = 2
	SpeedQDR   = 4
	SpeedFDR10 = 8
	SpeedFDR   = 16
	SpeedEDR   = 32
)

// MTUs (enum pvrdma_mtu).
const (
	MTU256  = 1
	MTU512  = 2
	MTU1024 = 3
	MTU2048 = 4
	MTU4096 = 5
)

// QP types (enum pvrdma_qp_type; the driver creates GSI, RC, UD).
const (
	QPTypeSMI = 0
	QPTypeGSI = 1
	QPTypeRC  = 2
	QPTypeUC  = 3
	QPTypeUD  = 4
)

// QP states (enum pvrdma_qp_state).
const (
	QPStateReset = 0
	QPStateInit  = 1
	QPStateRTR   = 2
	QPStateRTS   = 3
	QPStateSQD   = 4
	QPStateSQE   = 5
	QPStateErr   = 6
	NumQPStates  = 7
)

// Path migration states (enum pvrdma_mig_state).
const (
	MigMigrated = 0
	MigRearm    = 1
	MigArmed    = 2
)

// MODIFY_QP attribute mask bits (enum pvrdma_qp_attr_mask).
const (
	AttrState           = 1 << 0
	AttrCurState        = 1 << 1
	AttrEnSQDAsync      = 1 << 2
	AttrAccessFlags     = 1 << 3
	AttrPKeyIndex       = 1 << 4
	AttrPort            = 1 << 5
	AttrQKey            = 1 << 6
	AttrAV              = 1 << 7
	AttrPathMTU         = 1 << 8
	AttrTimeout         = 1 << 9
	AttrRetryCnt        = 1 << 10
	AttrRNRRetry        = 1 << 11
	AttrRQPSN           = 1 << 12
	AttrMaxQPRdAtomic   = 1 << 13
	AttrAltPath         = 1 << 14
	AttrMinRNRTimer     = 1 << 15
	AttrSQPSN           = 1 << 16
	AttrMaxDestRdAtomic = 1 << 17
	AttrPathMigState    = 1 << 18
	AttrCap             = 1 << 19
	AttrDestQPN         = 1 << 20
	AttrMaskAll         = 1<<21 - 1
)

// Access flags (enum pvrdma_access_flags).
const (
	AccessLocalWrite   = 1 << 0
	AccessRemoteWrite  = 1 << 1
	AccessRemoteRead   = 1 << 2
	AccessRemoteAtomic = 1 << 3
	AccessMWBind       = 1 << 4
	AccessZeroBased    = 1 << 5
	AccessOnDemand     = 1 << 6
)

// SRQ attribute mask bits of MODIFY_SRQ (ib_srq_attr_mask).
const (
	SRQAttrMaxWR = 1 << 0
	SRQAttrLimit = 1 << 1
)

// SRQ types (CREATE_SRQ srq_type; the driver creates only basic SRQs).
const SRQTypeBasic = 0

// AHFlagGRH marks an address vector with a global route (enum pvrdma_ah_flags).
const AHFlagGRH = 1

// PortAttr is pvrdma_port_attr, the body of the QUERY_PORT response.
type PortAttr struct {
	State         uint32 // PortState*
	MaxMTU        uint32 // MTU*
	ActiveMTU     uint32 // MTU*
	GIDTblLen     uint32
	PortCapFlags  uint32
	MaxMsgSz      uint32
	BadPKeyCntr   uint32
	QKeyViolCntr  uint32
	PKeyTblLen    uint16
	LID           uint16
	SMLID         uint16
	LMC           uint8
	MaxVLNum      uint8
	SMSL          uint8
	SubnetTimeout uint8
	InitTypeReply uint8
	ActiveWidth   uint8 // Width*
	ActiveSpeed   uint8 // Speed*
	PhysState     uint8 // PhysState*
}

// PortAttrSize is the size of pvrdma_port_attr.
const PortAttrSize = 48

// Encode writes the attributes into b[:PortAttrSize].
func (a *PortAttr) Encode(b []byte) {
	clear(b[:PortAttrSize])
	le.PutUint32(b[0:], a.State)
	le.PutUint32(b[4:], a.MaxMTU)
	le.PutUint32(b[8:], a.ActiveMTU)
	le.PutUint32(b[12:], a.GIDTblLen)
	le.PutUint32(b[16:], a.PortCapFlags)
	le.PutUint32(b[20:], a.MaxMsgSz)
	le.PutUint32(b[24:], a.BadPKeyCntr)
	le.PutUint32(b[28:], a.QKeyViolCntr)
	le.PutUint16(b[32:], a.PKeyTblLen)
	le.PutUint16(b[34:], a.LID)
	le.PutUint16(b[36:], a.SMLID)
	b[38], b[39], b[40], b[41] = a.LMC, a.MaxVLNum, a.SMSL, a.SubnetTimeout
	b[42], b[43], b[44], b[45] = a.InitTypeReply, a.ActiveWidth, a.ActiveSpeed, a.PhysState
}

// Decode reads the attributes from b[:PortAttrSize].
func (a *PortAttr) Decode(b []byte) {
	_ = b[PortAttrSize-1]
	a.State, a.MaxMTU, a.ActiveMTU = le.Uint32(b[0:]), le.Uint32(b[4:]), le.Uint32(b[8:])
	a.GIDTblLen, a.PortCapFlags, a.MaxMsgSz = le.Uint32(b[12:]), le.Uint32(b[16:]), le.Uint32(b[20:])
	a.BadPKeyCntr, a.QKeyViolCntr = le.Uint32(b[24:]), le.Uint32(b[28:])
	a.PKeyTblLen, a.LID, a.SMLID = le.Uint16(b[32:]), le.Uint16(b[34:]), le.Uint16(b[36:])
	a.LMC, a.MaxVLNum, a.SMSL, a.SubnetTimeout = b[38], b[39], b[40], b[41]
	a.InitTypeReply, a.ActiveWidth, a.ActiveSpeed, a.PhysState = b[42], b[43], b[44], b[45]
}

// GlobalRoute is pvrdma_global_route, the GRH part of an address vector.
type GlobalRoute struct {
	DGID         [16]byte
	FlowLabel    uint32
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
}

// GlobalRouteSize is the size of pvrdma_global_route.
const GlobalRouteSize = 24

// Encode writes the route into b[:GlobalRouteSize].
func (g *GlobalRoute) Encode(b []byte) {
	copy(b[0:16], g.DGID[:])
	le.PutUint32(b[16:], g.FlowLabel)
	b[20], b[21], b[22], b[23] = g.SGIDIndex, g.HopLimit, g.TrafficClass, 0
}

// Decode reads the route from b[:GlobalRouteSize].
func (g *GlobalRoute) Decode(b []byte) {
	_ = b[GlobalRouteSize-1]
	copy(g.DGID[:], b[0:16])
	g.FlowLabel = le.Uint32(b[16:])
	g.SGIDIndex, g.HopLimit, g.TrafficClass = b[20], b[21], b[22]
}

// AHAttr is pvrdma_ah_attr, an address vector (the QP's primary or
// alternate path). The global route is embedded, so its fields read as
// a.DGID, a.SGIDIndex...
type AHAttr struct {
	GlobalRoute
	DLID        uint16
	VLANID      uint16
	SL          uint8
	SrcPathBits uint8
	StaticRate  uint8
	AHFlags     uint8 // AHFlagGRH
	PortNum     uint8
	DMAC        [6]byte
}

// AHAttrSize is the size of pvrdma_ah_attr.
const AHAttrSize = 40

// Encode writes the address vector into b[:AHAttrSize].
func (a *AHAttr) Encode(b []byte) {
	a.GlobalRoute.Encode(b[0:])
	le.PutUint16(b[24:], a.DLID)
	le.PutUint16(b[26:], a.VLANID)
	b[28], b[29], b[30], b[31], b[32] = a.SL, a.SrcPathBits, a.StaticRate, a.AHFlags, a.PortNum
	copy(b[33:39], a.DMAC[:])
	b[39] = 0
}

// Decode reads the address vector from b[:AHAttrSize].
func (a *AHAttr) Decode(b []byte) {
	_ = b[AHAttrSize-1]
	a.GlobalRoute.Decode(b[0:])
	a.DLID, a.VLANID = le.Uint16(b[24:]), le.Uint16(b[26:])
	a.SL, a.SrcPathBits, a.StaticRate, a.AHFlags, a.PortNum = b[28], b[29], b[30], b[31], b[32]
	copy(a.DMAC[:], b[33:39])
}

// QPCap is pvrdma_qp_cap, the queue sizes of a QP.
type QPCap struct {
	MaxSendWR     uint32
	MaxRecvWR     uint32
	MaxSendSGE    uint32
	MaxRecvSGE    uint32
	MaxInlineData uint32
}

// QPCapSize is the size of pvrdma_qp_cap.
const QPCapSize = 24

// Encode writes the capacities into b[:QPCapSize].
func (c *QPCap) Encode(b []byte) {
	le.PutUint32(b[0:], c.MaxSendWR)
	le.PutUint32(b[4:], c.MaxRecvWR)
	le.PutUint32(b[8:], c.MaxSendSGE)
	le.PutUint32(b[12:], c.MaxRecvSGE)
	le.PutUint32(b[16:], c.MaxInlineData)
	le.PutUint32(b[20:], 0)
}

// Decode reads the capacities from b[:QPCapSize].
func (c *QPCap) Decode(b []byte) {
	_ = b[QPCapSize-1]
	c.MaxSendWR, c.MaxRecvWR = le.Uint32(b[0:]), le.Uint32(b[4:])
	c.MaxSendSGE, c.MaxRecvSGE = le.Uint32(b[8:]), le.Uint32(b[12:])
	c.MaxInlineData = le.Uint32(b[16:])
}

// QPAttr is pvrdma_qp_attr, the attributes of MODIFY_QP and QUERY_QP.
type QPAttr struct {
	State, CurState, PathMTU, PathMigState uint32 // QPState*, QPState*, MTU*, Mig*
	QKey, RQPSN, SQPSN, DestQPN            uint32
	AccessFlags                            uint32 // Access*
	PKeyIndex, AltPKeyIndex                uint16
	EnSQDAsyncNotify, SQDraining           uint8
	MaxRdAtomic, MaxDestRdAtomic           uint8
	MinRNRTimer, PortNum, Timeout          uint8
	RetryCnt, RNRRetry, AltPortNum         uint8
	AltTimeout                             uint8
	Cap                                    QPCap
	AH, AltAH                              AHAttr // ah_attr, alt_ah_attr
}

// QPAttrSize is the size of pvrdma_qp_attr.
const QPAttrSize = 160

// Encode writes the attributes into b[:QPAttrSize].
func (a *QPAttr) Encode(b []byte) {
	le.PutUint32(b[0:], a.State)
	le.PutUint32(b[4:], a.CurState)
	le.PutUint32(b[8:], a.PathMTU)
	le.PutUint32(b[12:], a.PathMigState)
	le.PutUint32(b[16:], a.QKey)
	le.PutUint32(b[20:], a.RQPSN)
	le.PutUint32(b[24:], a.SQPSN)
	le.PutUint32(b[28:], a.DestQPN)
	le.PutUint32(b[32:], a.AccessFlags)
	le.PutUint16(b[36:], a.PKeyIndex)
	le.PutUint16(b[38:], a.AltPKeyIndex)
	b[40], b[41], b[42], b[43] = a.EnSQDAsyncNotify, a.SQDraining, a.MaxRdAtomic, a.MaxDestRdAtomic
	b[44], b[45], b[46], b[47], b[48] = a.MinRNRTimer, a.PortNum, a.Timeout, a.RetryCnt, a.RNRRetry
	b[49], b[50] = a.AltPortNum, a.AltTimeout
	clear(b[51:56])
	a.Cap.Encode(b[56:])
	a.AH.Encode(b[80:])
	a.AltAH.Encode(b[120:])
}

// Decode reads the attributes from b[:QPAttrSize].
func (a *QPAttr) Decode(b []byte) {
	_ = b[QPAttrSize-1]
	a.State, a.CurState, a.PathMTU, a.PathMigState = le.Uint32(b[0:]), le.Uint32(b[4:]), le.Uint32(b[8:]), le.Uint32(b[12:])
	a.QKey, a.RQPSN, a.SQPSN, a.DestQPN = le.Uint32(b[16:]), le.Uint32(b[20:]), le.Uint32(b[24:]), le.Uint32(b[28:])
	a.AccessFlags = le.Uint32(b[32:])
	a.PKeyIndex, a.AltPKeyIndex = le.Uint16(b[36:]), le.Uint16(b[38:])
	a.EnSQDAsyncNotify, a.SQDraining, a.MaxRdAtomic, a.MaxDestRdAtomic = b[40], b[41], b[42], b[43]
	a.MinRNRTimer, a.PortNum, a.Timeout, a.RetryCnt, a.RNRRetry = b[44], b[45], b[46], b[47], b[48]
	a.AltPortNum, a.AltTimeout = b[49], b[50]
	a.Cap.Decode(b[56:])
	a.AH.Decode(b[80:])
	a.AltAH.Decode(b[120:])
}

// SRQAttr is pvrdma_srq_attr.
type SRQAttr struct {
	MaxWR    uint32
	MaxSGE   uint32
	SRQLimit uint32
}

// SRQAttrSize is the size of pvrdma_srq_attr.
const SRQAttrSize = 16

// Encode writes the attributes into b[:SRQAttrSize].
func (a *SRQAttr) Encode(b []byte) {
	le.PutUint32(b[0:], a.MaxWR)
	le.PutUint32(b[4:], a.MaxSGE)
	le.PutUint32(b[8:], a.SRQLimit)
	le.PutUint32(b[12:], 0)
}

// Decode reads the attributes from b[:SRQAttrSize].
func (a *SRQAttr) Decode(b []byte) {
	_ = b[SRQAttrSize-1]
	a.MaxWR, a.MaxSGE, a.SRQLimit = le.Uint32(b[0:]), le.Uint32(b[4:]), le.Uint32(b[8:])
}
