package mlx5

// CQE sizes and offsets.
const (
	CQESize64  = 64  // struct mlx5_cqe64
	CQESize128 = 128 // cqc.cqe_sz 1: the 64-byte structure is the second half
	// OpOwnOffset is op_own's offset in the 64-byte structure: the byte the
	// device writes last, after every other byte of the CQE.
	OpOwnOffset = 63
	// OpOwnInit is what software initialises every op_own to (opcode
	// invalid, owner 0).
	OpOwnInit = CQEInvalid << 4
)

// CQE opcodes, op_own[7:4] (MLX5_CQE_*, mlx5dv.h and cq.h).
const (
	CQEReq         = 0
	CQERespWRImm   = 1
	CQERespSend    = 2
	CQERespSendImm = 3
	CQERespSendInv = 4
	CQEResizeCQ    = 5
	CQENoPacket    = 6
	CQESigErr      = 12
	CQEReqErr      = 13
	CQERespErr     = 14
	CQEInvalid     = 15
)

// op_own bits.
const (
	CQEOwnerMask       = 1 // MLX5_CQE_OWNER_MASK
	CQESolicited       = 1 << 1
	CQEInlineScatter32 = 0x4 // MLX5_INLINE_SCATTER_32 (format 1; never written here)
	CQEInlineScatter64 = 0x8 // MLX5_INLINE_SCATTER_64 (format 2; never written here)
	cqeFormatMask      = 3 << 2
)

// CQE error syndromes (MLX5_CQE_SYNDROME_*, mlx5dv.h and cq.h).
const (
	SyndromeLocalLengthErr       = 0x01
	SyndromeLocalQPOpErr         = 0x02
	SyndromeLocalProtErr         = 0x04
	SyndromeWRFlushErr           = 0x05
	SyndromeMWBindErr            = 0x06
	SyndromeBadRespErr           = 0x10
	SyndromeLocalAccessErr       = 0x11
	SyndromeRemoteInvalReqErr    = 0x12
	SyndromeRemoteAccessErr      = 0x13
	SyndromeRemoteOpErr          = 0x14
	SyndromeTransportRetryExcErr = 0x15
	SyndromeRNRRetryExcErr       = 0x16
	SyndromeRemoteAbortedErr     = 0x22
)

// flags_rqpn fields.
const (
	flagsRQPNMask = 0xffffff
	// CQEGRH is the value of flags_rqpn[29:28] the device writes for a
	// received packet with a GRH (any non-zero value is IBV_WC_GRH to the
	// provider and the kernel).
	CQEGRH = 1
)

// CQE is a success completion: the 64-byte structure struct mlx5_cqe64,
// with every field the provider's cq.c and the kernel's ib/cq.c read.
type CQE struct {
	WQEID  uint16 // striding RQ only
	MLPath uint8  // destination LID path bits 6:0
	SLID   uint16
	// flags_rqpn: the source QPN 23:0, SL 27:24, GRH 29:28 (IB).
	SrcQPN      uint32
	SL          uint8
	GRH         uint8
	HdsIPExt    uint8
	L4L3HdrType uint8
	VLANInfo    uint16
	// SRQNUIdx is srqn_uidx (low 24 bits): with cqe_version 1 the user
	// index of the QP (or XRC SRQ) the completion belongs to
	// (mlx5.md §7.8); with cqe_version 0 the SRQ number.
	SRQNUIdx uint32
	// ImmInvalPkey is the immediate data (the wire bytes as a big-endian
	// integer), the invalidated rkey, or a QP1 receive's P_Key.
	ImmInvalPkey uint32
	App          uint8
	AppOp        uint8
	AppInfo      uint16
	ByteCnt      uint32
	Timestamp    uint64
	// SOpcode is sop_drop_qpn[31:24]: a REQ CQE's WQE opcode (Opcode*),
	// from which the provider derives ibv_wc opcode and byte_len.
	SOpcode    uint8
	QPN        uint32 // sop_drop_qpn[23:0]: the hardware QPN
	WQECounter uint16
	Signature  uint8
	// op_own.
	Opcode    uint8 // CQE* opcode, op_own[7:4]
	Format    uint8 // op_own[3:2] in place: 0 (CQEInlineScatter* never)
	Solicited bool  // op_own[1]: a receive of a solicited message
	Owner     uint8 // op_own[0]
}

// Encode writes the 64-byte structure into b (at least CQESize64 bytes).
// A device writes b[:OpOwnOffset] to the CQ before b[OpOwnOffset].
func (c *CQE) Encode(b []byte) {
	_ = b[CQESize64-1]
	clear(b[:CQESize64])
	be.PutUint16(b[2:], c.WQEID)
	b[17] = c.MLPath
	be.PutUint16(b[22:], c.SLID)
	be.PutUint32(b[24:], uint32(c.GRH&3)<<28|uint32(c.SL&0xf)<<24|c.SrcQPN&flagsRQPNMask)
	b[28] = c.HdsIPExt
	b[29] = c.L4L3HdrType
	be.PutUint16(b[30:], c.VLANInfo)
	be.PutUint32(b[32:], c.SRQNUIdx)
	be.PutUint32(b[36:], c.ImmInvalPkey)
	b[40], b[41] = c.App, c.AppOp
	be.PutUint16(b[42:], c.AppInfo)
	be.PutUint32(b[44:], c.ByteCnt)
	be.PutUint64(b[48:], c.Timestamp)
	be.PutUint32(b[56:], uint32(c.SOpcode)<<24|c.QPN&flagsRQPNMask)
	be.PutUint16(b[60:], c.WQECounter)
	b[62] = c.Signature
	b[63] = opOwn(c.Opcode, c.Format, c.Solicited, c.Owner)
}

// DecodeCQE is the inverse of Encode (for fake drivers and tests). b holds
// at least CQESize64 bytes.
func DecodeCQE(b []byte) CQE {
	_ = b[CQESize64-1]
	f := be.Uint32(b[24:])
	s := be.Uint32(b[56:])
	return CQE{
		WQEID: be.Uint16(b[2:]), MLPath: b[17], SLID: be.Uint16(b[22:]),
		SrcQPN: f & flagsRQPNMask, SL: uint8(f>>24) & 0xf, GRH: uint8(f>>28) & 3,
		HdsIPExt: b[28], L4L3HdrType: b[29], VLANInfo: be.Uint16(b[30:]),
		SRQNUIdx: be.Uint32(b[32:]), ImmInvalPkey: be.Uint32(b[36:]),
		App: b[40], AppOp: b[41], AppInfo: be.Uint16(b[42:]),
		ByteCnt: be.Uint32(b[44:]), Timestamp: be.Uint64(b[48:]),
		SOpcode: uint8(s >> 24), QPN: s & flagsRQPNMask,
		WQECounter: be.Uint16(b[60:]), Signature: b[62],
		Opcode: b[63] >> 4, Format: b[63] & cqeFormatMask, Solicited: b[63]&CQESolicited != 0, Owner: b[63] & CQEOwnerMask,
	}
}

func opOwn(opcode, format uint8, se bool, owner uint8) byte {
	b := opcode<<4 | format&cqeFormatMask | owner&CQEOwnerMask
	if se {
		b |= CQESolicited
	}
	return b
}

// ErrCQE is an error completion (struct mlx5_err_cqe), opcode CQEReqErr or
// CQERespErr.
type ErrCQE struct {
	// SRQN is srqn (bytes 32-35), the same field as a success CQE's
	// srqn_uidx: the user index with cqe_version 1.
	SRQN uint32
	// HWErrSynd and HWSyndType are bytes 52 and 53[7:4]
	// (mlx5_ifc.h cqe_error_syndrome: hw_error_syndrome, hw_syndrome_type,
	// ending at vendor_error_syndrome and syndrome); neither the 6.12
	// kernel nor the provider reads them (both declare them reserved).
	HWErrSynd     uint8
	HWSyndType    uint8
	VendorErrSynd uint8 // ibv_wc.vendor_err
	Syndrome      uint8 // Syndrome*: the provider's ibv_wc_status (WCStatus)
	SWQEOpcode    uint8 // s_wqe_opcode_qpn[31:24]: the failed WQE's opcode (REQ_ERR)
	QPN           uint32
	WQECounter    uint16
	Signature     uint8
	Opcode        uint8 // CQEReqErr or CQERespErr
	Owner         uint8
}

// Encode writes the 64-byte error CQE into b (see CQE.Encode).
func (e *ErrCQE) Encode(b []byte) {
	_ = b[CQESize64-1]
	clear(b[:CQESize64])
	be.PutUint32(b[32:], e.SRQN)
	b[52] = e.HWErrSynd
	b[53] = e.HWSyndType << 4
	b[54] = e.VendorErrSynd
	b[55] = e.Syndrome
	be.PutUint32(b[56:], uint32(e.SWQEOpcode)<<24|e.QPN&flagsRQPNMask)
	be.PutUint16(b[60:], e.WQECounter)
	b[62] = e.Signature
	b[63] = opOwn(e.Opcode, 0, false, e.Owner)
}

// DecodeErrCQE is the inverse of Encode.
func DecodeErrCQE(b []byte) ErrCQE {
	_ = b[CQESize64-1]
	s := be.Uint32(b[56:])
	return ErrCQE{
		SRQN: be.Uint32(b[32:]), HWErrSynd: b[52], HWSyndType: b[53] >> 4,
		VendorErrSynd: b[54], Syndrome: b[55],
		SWQEOpcode: uint8(s >> 24), QPN: s & flagsRQPNMask,
		WQECounter: be.Uint16(b[60:]), Signature: b[62],
		Opcode: b[63] >> 4, Owner: b[63] & CQEOwnerMask,
	}
}

// CQ is the geometry of a completion queue: 1<<LogSize entries
// (cqc.log_cq_size) of CQESize bytes (CQESize64 or CQESize128, from
// cqc.cqe_sz: CQESizeOf). Its producer counter is the device's, monotonic;
// the consumer index software publishes is 24 bits.
type CQ struct {
	LogSize uint8
	CQESize int
}

// CQESizeOf is the CQE size cqc.cqe_sz names (0: 64 bytes, 1: 128).
func CQESizeOf(cqeSz uint8) (int, bool) {
	switch cqeSz {
	case 0:
		return CQESize64, true
	case 1:
		return CQESize128, true
	}
	return 0, false
}

// Size is the CQ buffer's size in bytes.
func (q CQ) Size() uint64 { return uint64(q.CQESize) << q.LogSize }

// Offset is the byte offset in the buffer of the 64-byte structure of CQE
// counter n: slot n mod size, in its second half for 128-byte CQEs.
func (q CQ) Offset(n uint32) uint64 {
	return uint64(n)&(1<<q.LogSize-1)*uint64(q.CQESize) + uint64(q.CQESize-CQESize64)
}

// Owner is the owner bit of CQE counter n: (n >> log_cq_size) & 1.
func (q CQ) Owner(n uint32) uint8 { return uint8(n>>q.LogSize) & 1 }

// SoftwareOwns is the provider's get_sw_cqe test of op_own as read at CQE
// counter n: software may consume it (opcode not invalid, owner bit of
// this pass).
func (q CQ) SoftwareOwns(op byte, n uint32) bool {
	return op>>4 != CQEInvalid && op&CQEOwnerMask == q.Owner(n)
}

// Valid reports a CQE size of 64 or 128 bytes and a log size the 24-bit
// consumer index can address (at most 1<<24 entries).
func (q CQ) Valid() bool {
	return q.LogSize <= 24 && (q.CQESize == CQESize64 || q.CQESize == CQESize128)
}
