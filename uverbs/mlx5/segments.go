package mlx5

import "encoding/binary"

var be = binary.BigEndian

// Send queue geometry (mlx5dv.h, qp.h).
const (
	SendWQEBB       = 64 // MLX5_SEND_WQE_BB: the send queue's basic block
	SendWQEShift    = 6  // MLX5_SEND_WQE_SHIFT
	SendWQEDS       = 16 // MLX5_SEND_WQE_DS: one data segment unit ("octoword")
	SendWQEMaxWQEBB = 16 // MLX5_SEND_WQE_MAX_WQEBBS
	// MaxDS is the largest DS count the control segment can hold
	// (MLX5_WQE_CTRL_DS_MASK, 6 bits): 63 units, 1008 bytes, 16 WQEBBs.
	MaxDS = 0x3f
)

// Segment sizes.
const (
	CtrlSegSize         = 16 // struct mlx5_wqe_ctrl_seg
	DataSegSize         = 16 // struct mlx5_wqe_data_seg
	RAddrSegSize        = 16 // struct mlx5_wqe_raddr_seg
	AtomicSegSize       = 16 // struct mlx5_wqe_atomic_seg
	MaskedAtomicSegSize = 32 // struct mlx5_wqe_masked_atomic_seg
	XRCSegSize          = 16 // struct mlx5_wqe_xrc_seg
	AVSize              = 48 // struct mlx5_wqe_av (the datagram segment)
	UMRCtrlSegSize      = 48 // struct mlx5_wqe_umr_ctrl_seg
	MkeyContextSegSize  = 64 // struct mlx5_wqe_mkey_context_seg
	KLMSegSize          = 16 // struct mlx5_wqe_umr_klm_seg
	SRQNextSegSize      = 16 // struct mlx5_wqe_srq_next_seg
)

// WQEBBs is the number of basic blocks a WQE of ds units takes:
// DIV_ROUND_UP(ds*16, 64), what the provider adds to its SQ counter.
func WQEBBs(ds uint8) uint16 { return (uint16(ds) + 3) / 4 }

// Send opcodes (MLX5_OPCODE_*, mlx5dv.h), the control segment's opcode byte
// and the REQ CQE's sop_drop_qpn[31:24].
const (
	OpcodeNOP            = 0x00
	OpcodeSendInval      = 0x01
	OpcodeRDMAWrite      = 0x08
	OpcodeRDMAWriteImm   = 0x09
	OpcodeSend           = 0x0a
	OpcodeSendImm        = 0x0b
	OpcodeTSO            = 0x0e
	OpcodeRDMARead       = 0x10
	OpcodeAtomicCS       = 0x11
	OpcodeAtomicFA       = 0x12
	OpcodeAtomicMaskedCS = 0x14
	OpcodeAtomicMaskedFA = 0x15
	OpcodeFMR            = 0x19
	OpcodeLocalInval     = 0x1b
	OpcodeConfigCmd      = 0x1f
	OpcodeSetPSV         = 0x20
	OpcodeUMR            = 0x25
	OpcodeTagMatching    = 0x28
	OpcodeFlowTblAccess  = 0x2c
	OpcodeMMO            = 0x2f
)

// Control segment fields (qp.h MLX5_WQE_CTRL_*).
const (
	wqeCtrlDSMask          = 0x3f // MLX5_WQE_CTRL_DS_MASK
	wqeCtrlQPNShift        = 8    // MLX5_WQE_CTRL_QPN_SHIFT
	wqeCtrlWQEIndexShift   = 8    // MLX5_WQE_CTRL_WQE_INDEX_SHIFT
	wqeCtrlOpcodeMask      = 0xff // MLX5_WQE_CTRL_OPCODE_MASK
	wqeCtrlOpmodShift      = 24
	wqeCtrlQPNMask         = 0xffffff
	wqeCtrlWQEIndexMaskVal = 0xffff
)

// fm_ce_se bits (qp.h: MLX5_WQE_CTRL_*, MLX5_FENCE_MODE_*).
const (
	WQECtrlSolicited        = 1 << 1 // MLX5_WQE_CTRL_SOLICITED: SE
	WQECtrlCQUpdate         = 2 << 2 // MLX5_WQE_CTRL_CQ_UPDATE: a CQE on success
	WQECtrlCQUpdateAndEQE   = 3 << 2 // MLX5_WQE_CTRL_CQ_UPDATE_AND_EQE
	FenceModeNone           = 0 << 5
	FenceModeInitiatorSmall = 1 << 5
	FenceModeFence          = 2 << 5
	FenceModeStrongOrdering = 3 << 5
	FenceModeSmallAndFence  = 4 << 5 // MLX5_WQE_CTRL_FENCE, the provider's IBV_SEND_FENCE
	fenceModeMask           = 7 << 5
	ceMask                  = 3 << 2
)

// Data segment values (mlx5dv.h).
const (
	InlineSeg    = 0x80000000 // MLX5_INLINE_SEG: byte_count flag of an inline segment
	InvalidLKey  = 0x100      // MLX5_INVALID_LKEY: terminates a receive scatter list
	ExtendedUDAV = 0x80000000 // MLX5_EXTENDED_UD_AV: dqp_dct flag the provider always sets
	// AtomicSize is the local buffer of an atomic (MLX5_ATOMIC_SIZE).
	AtomicSize = 8
)

// CtrlSeg is the control segment that starts every send WQE
// (struct mlx5_wqe_ctrl_seg).
type CtrlSeg struct {
	Opmod              uint8  // opmod_idx_opcode[31:24]
	WQEIndex           uint16 // opmod_idx_opcode[23:8]: the SQ counter of this WQE's first WQEBB
	Opcode             uint8  // opmod_idx_opcode[7:0]
	QPN                uint32 // qpn_ds[31:8]
	DS                 uint8  // qpn_ds[5:0]: 16-byte units, this segment included
	Signature          uint8
	DCIStreamChannelID uint16
	FMCESE             uint8 // fence mode 7:5, CE 3:2, SE 1
	// Imm is the immediate data (SEND_IMM, RDMA_WRITE_IMM: the wire bytes
	// read as a big-endian integer), the key to invalidate (SEND_INVAL) or
	// the mkey a UMR WQE modifies.
	Imm uint32
}

// DecodeCtrlSeg decodes the 16-byte control segment at the start of b.
func DecodeCtrlSeg(b []byte) (CtrlSeg, bool) {
	if len(b) < CtrlSegSize {
		return CtrlSeg{}, false
	}
	w0, w1 := be.Uint32(b[0:]), be.Uint32(b[4:])
	return CtrlSeg{
		Opmod:              uint8(w0 >> wqeCtrlOpmodShift),
		WQEIndex:           uint16(w0 >> wqeCtrlWQEIndexShift),
		Opcode:             uint8(w0 & wqeCtrlOpcodeMask),
		QPN:                w1 >> wqeCtrlQPNShift,
		DS:                 uint8(w1 & wqeCtrlDSMask),
		Signature:          b[8],
		DCIStreamChannelID: be.Uint16(b[9:]),
		FMCESE:             b[11],
		Imm:                be.Uint32(b[12:]),
	}, true
}

// Encode writes the 16-byte control segment into b. QPN and DS are
// truncated to their fields.
func (c CtrlSeg) Encode(b []byte) {
	_ = b[CtrlSegSize-1]
	be.PutUint32(b[0:], uint32(c.Opmod)<<wqeCtrlOpmodShift|uint32(c.WQEIndex)<<wqeCtrlWQEIndexShift|uint32(c.Opcode))
	be.PutUint32(b[4:], (c.QPN&wqeCtrlQPNMask)<<wqeCtrlQPNShift|uint32(c.DS&wqeCtrlDSMask))
	b[8] = c.Signature
	be.PutUint16(b[9:], c.DCIStreamChannelID)
	b[11] = c.FMCESE
	be.PutUint32(b[12:], c.Imm)
}

// FenceMode is fm_ce_se[7:5] shifted in place (FenceMode* values).
func (c CtrlSeg) FenceMode() uint8 { return c.FMCESE & fenceModeMask }

// CE is the completion mode, fm_ce_se[3:2] in place (0, WQECtrlCQUpdate or
// WQECtrlCQUpdateAndEQE).
func (c CtrlSeg) CE() uint8 { return c.FMCESE & ceMask }

// Signaled reports a WQE that asks for a CQE on success (CE 2 or 3;
// unsignaled WQEs complete with a CQE only on error).
func (c CtrlSeg) Signaled() bool { return c.FMCESE&WQECtrlCQUpdate != 0 }

// Solicited reports the SE bit: the remote receive CQE gets its SE bit.
func (c CtrlSeg) Solicited() bool { return c.FMCESE&WQECtrlSolicited != 0 }

// WQEBBs is the number of basic blocks the WQE takes.
func (c CtrlSeg) WQEBBs() uint16 { return WQEBBs(c.DS) }

// DataSeg is a scatter/gather entry (struct mlx5_wqe_data_seg).
type DataSeg struct {
	ByteCount uint32
	LKey      uint32
	Addr      uint64
}

// DecodeDataSeg decodes the 16-byte data segment at the start of b (which
// holds at least DataSegSize bytes).
func DecodeDataSeg(b []byte) DataSeg {
	_ = b[DataSegSize-1]
	return DataSeg{ByteCount: be.Uint32(b[0:]), LKey: be.Uint32(b[4:]), Addr: be.Uint64(b[8:])}
}

// Encode writes the data segment into b.
func (d DataSeg) Encode(b []byte) {
	_ = b[DataSegSize-1]
	be.PutUint32(b[0:], d.ByteCount)
	be.PutUint32(b[4:], d.LKey)
	be.PutUint64(b[8:], d.Addr)
}

// RAddrSeg is the remote-address segment of RDMA and atomic WQEs
// (struct mlx5_wqe_raddr_seg).
type RAddrSeg struct {
	RAddr uint64
	RKey  uint32
}

// DecodeRAddrSeg decodes the 16-byte segment at the start of b.
func DecodeRAddrSeg(b []byte) RAddrSeg {
	_ = b[RAddrSegSize-1]
	return RAddrSeg{RAddr: be.Uint64(b[0:]), RKey: be.Uint32(b[8:])}
}

// Encode writes the segment (reserved bytes zero) into b.
func (r RAddrSeg) Encode(b []byte) {
	_ = b[RAddrSegSize-1]
	be.PutUint64(b[0:], r.RAddr)
	be.PutUint32(b[8:], r.RKey)
	be.PutUint32(b[12:], 0)
}

// AtomicSeg is the atomic segment (struct mlx5_wqe_atomic_seg): for
// ATOMIC_CS SwapAdd is the swap value and Compare the compare value, for
// ATOMIC_FA SwapAdd is the value to add. The masked atomics
// (struct mlx5_wqe_masked_atomic_seg) add the two masks.
type AtomicSeg struct {
	SwapAdd     uint64
	Compare     uint64
	SwapAddMask uint64 // masked atomics only
	CompareMask uint64 // masked atomics only
}

// DecodeAtomicSeg decodes a 16-byte atomic segment, or the 32-byte masked
// one when masked.
func DecodeAtomicSeg(b []byte, masked bool) AtomicSeg {
	_ = b[AtomicSegSize-1]
	a := AtomicSeg{SwapAdd: be.Uint64(b[0:]), Compare: be.Uint64(b[8:])}
	if masked {
		_ = b[MaskedAtomicSegSize-1]
		a.SwapAddMask, a.CompareMask = be.Uint64(b[16:]), be.Uint64(b[24:])
	}
	return a
}

// Encode writes the segment into b (32 bytes when masked, else 16).
func (a AtomicSeg) Encode(b []byte, masked bool) {
	be.PutUint64(b[0:], a.SwapAdd)
	be.PutUint64(b[8:], a.Compare)
	if masked {
		be.PutUint64(b[16:], a.SwapAddMask)
		be.PutUint64(b[24:], a.CompareMask)
	}
}

// AV is the address vector, the datagram segment of UD WQEs
// (struct mlx5_wqe_av, 48 bytes).
type AV struct {
	QKey       uint32 // key.qkey.qkey; bit 31 set: use the QP's Q_Key
	DQPDCT     uint32 // ExtendedUDAV | destination QPN (23:0)
	StatRateSL uint8  // static rate 7:4; IB: SL 3:0 (RoCE: priority 3:1)
	FLMLID     uint8  // force loopback 7; IB: source path bits 6:0
	RLID       uint16 // IB: destination LID; RoCE v2: UDP source port
	RMAC       [6]byte
	TClass     uint8
	HopLimit   uint8
	GRHGIDFL   uint32 // GRH present 30 (IB), source GID index 27:20, flow label 19:0
	RGID       [16]byte
}

// AV field bits.
const (
	AVGRH           = 1 << 30
	avFlowLabelMask = 0xfffff
	avQPNMask       = 0xffffff
)

// DecodeAV decodes the 48-byte address vector at the start of b.
func DecodeAV(b []byte) AV {
	_ = b[AVSize-1]
	var a AV
	a.QKey = be.Uint32(b[0:])
	a.DQPDCT = be.Uint32(b[8:])
	a.StatRateSL = b[12]
	a.FLMLID = b[13]
	a.RLID = be.Uint16(b[14:])
	copy(a.RMAC[:], b[20:26])
	a.TClass = b[26]
	a.HopLimit = b[27]
	a.GRHGIDFL = be.Uint32(b[28:])
	copy(a.RGID[:], b[32:48])
	return a
}

// Encode writes the 48-byte address vector (reserved bytes zero) into b.
func (a AV) Encode(b []byte) {
	_ = b[AVSize-1]
	clear(b[:AVSize])
	be.PutUint32(b[0:], a.QKey)
	be.PutUint32(b[8:], a.DQPDCT)
	b[12] = a.StatRateSL
	b[13] = a.FLMLID
	be.PutUint16(b[14:], a.RLID)
	copy(b[20:26], a.RMAC[:])
	b[26] = a.TClass
	b[27] = a.HopLimit
	be.PutUint32(b[28:], a.GRHGIDFL)
	copy(b[32:48], a.RGID[:])
}

// DQPN is the destination QP number.
func (a AV) DQPN() uint32 { return a.DQPDCT & avQPNMask }

// UseQPQKey reports a Q_Key with bit 31 set: the QP's own Q_Key is sent
// instead (IBA's rule for privileged Q_Keys, mlx5.md §7.5.4).
func (a AV) UseQPQKey() bool { return a.QKey&0x80000000 != 0 }

// StatRate is the static rate (stat_rate_sl[7:4], the provider's
// ah_attr_to_mlx5_rate encoding).
func (a AV) StatRate() uint8 { return a.StatRateSL >> 4 }

// SL is the service level on InfiniBand (stat_rate_sl[3:0]).
func (a AV) SL() uint8 { return a.StatRateSL & 0xf }

// SrcPathBits are the source LID path bits (fl_mlid[6:0]).
func (a AV) SrcPathBits() uint8 { return a.FLMLID & 0x7f }

// ForceLoopback is fl_mlid[7].
func (a AV) ForceLoopback() bool { return a.FLMLID&0x80 != 0 }

// GRH reports an InfiniBand AV whose packets carry a GRH.
func (a AV) GRH() bool { return a.GRHGIDFL&AVGRH != 0 }

// SGIDIndex is the source GID index (grh_gid_fl[27:20]).
func (a AV) SGIDIndex() uint8 { return uint8(a.GRHGIDFL >> 20) }

// FlowLabel is grh_gid_fl[19:0].
func (a AV) FlowLabel() uint32 { return a.GRHGIDFL & avFlowLabelMask }

// UMR control segment flags (mlx5dv.h MLX5_WQE_UMR_CTRL_FLAG_*; the
// kernel's MLX5_UMR_CHECK_FREE is the 2-bit free-check field at 6:5 set to
// 2).
const (
	UMRCtrlFlagInline            = 1 << 7
	UMRCtrlFlagCheckFree         = 1 << 5 // mlx5dv.h (device.h: MLX5_UMR_CHECK_NOT_FREE): fail unless the mkey is free
	UMRCheckFree                 = 2 << 5 // device.h MLX5_UMR_CHECK_FREE: fail if the mkey is free
	UMRCtrlFlagCheckQPN          = 1 << 3
	UMRCtrlFlagTranslationOffset = 1 << 4
	umrCheckFreeMask             = 3 << 5
)

// UMR mkey_mask bits (mlx5dv.h MLX5_WQE_UMR_CTRL_MKEY_MASK_*, device.h
// MLX5_MKEY_MASK_*).
const (
	MkeyMaskLen               = 1 << 0
	MkeyMaskPageSize          = 1 << 1
	MkeyMaskStartAddr         = 1 << 6
	MkeyMaskPD                = 1 << 7
	MkeyMaskEnRinval          = 1 << 8
	MkeyMaskMkey              = 1 << 13
	MkeyMaskQPN               = 1 << 14
	MkeyMaskAccessLocalRead   = 1 << 17
	MkeyMaskAccessLocalWrite  = 1 << 18
	MkeyMaskAccessRemoteRead  = 1 << 19
	MkeyMaskAccessRemoteWrite = 1 << 20
	MkeyMaskAccessAtomic      = 1 << 21
	MkeyMaskSmallFence        = 1 << 23
	MkeyMaskFree              = 1 << 29
)

// UMRCtrlSeg is the UMR control segment (struct mlx5_wqe_umr_ctrl_seg,
// 48 bytes).
type UMRCtrlSeg struct {
	Flags             uint8
	KLMOctowords      uint16 // 16-byte units of translation (inline after the mkey segment, or pointed to)
	TranslationOffset uint16 // xlt_offset: bits 15:0 of the offset, in 16-byte units, of the translation in the mkey's
	MkeyMask          uint64
	// TranslationOffsetHigh is xlt_offset_47_16 (the kernel's chunked
	// translation loads, mlx5r_umr_update_offset).
	TranslationOffsetHigh uint32
}

// Offset is the translation offset in 16-byte units (xlt_offset_47_16
// and xlt_offset), 0 unless UMRCtrlFlagTranslationOffset is set.
func (u UMRCtrlSeg) Offset() uint64 {
	if u.Flags&UMRCtrlFlagTranslationOffset == 0 {
		return 0
	}
	return uint64(u.TranslationOffsetHigh)<<16 | uint64(u.TranslationOffset)
}

// CheckFree is the 2-bit free-check mode (flags[6:5]) in place:
// UMRCtrlFlagCheckFree, UMRCheckFree or 0 (mlx5.md §7.5.7 reads the two
// callers' names this way; the PRM text is unverified).
func (u UMRCtrlSeg) CheckFree() uint8 { return u.Flags & umrCheckFreeMask }

// DecodeUMRCtrlSeg decodes the 48-byte segment at the start of b.
func DecodeUMRCtrlSeg(b []byte) UMRCtrlSeg {
	_ = b[UMRCtrlSegSize-1]
	return UMRCtrlSeg{Flags: b[0], KLMOctowords: be.Uint16(b[4:]), TranslationOffset: be.Uint16(b[6:]), MkeyMask: be.Uint64(b[8:]),
		TranslationOffsetHigh: be.Uint32(b[16:])}
}

// Encode writes the segment (reserved bytes zero) into b.
func (u UMRCtrlSeg) Encode(b []byte) {
	_ = b[UMRCtrlSegSize-1]
	clear(b[:UMRCtrlSegSize])
	b[0] = u.Flags
	be.PutUint16(b[4:], u.KLMOctowords)
	be.PutUint16(b[6:], u.TranslationOffset)
	be.PutUint64(b[8:], u.MkeyMask)
	be.PutUint32(b[16:], u.TranslationOffsetHigh)
}

// Mkey context segment values (mlx5dv.h MLX5_WQE_MKEY_CONTEXT_*).
const (
	MkeyContextFree                   = 1 << 6
	MkeyContextAccessFlagsAtomic      = 1 << 6
	MkeyContextAccessFlagsRemoteWrite = 1 << 5
	MkeyContextAccessFlagsRemoteRead  = 1 << 4
	MkeyContextAccessFlagsLocalWrite  = 1 << 3
	MkeyContextAccessFlagsLocalRead   = 1 << 2
)

// MkeyContextSeg is the mkey context segment of a UMR WQE
// (struct mlx5_wqe_mkey_context_seg, 64 bytes, in the mkc layout).
type MkeyContextSeg struct {
	Free                    uint8 // MkeyContextFree
	AccessFlags             uint8 // MkeyContextAccessFlags*
	SF                      uint8
	QPNMkey                 uint32 // qpn 31:8 (0xffffff: none), mkey variant 7:0
	FlagsPD                 uint32 // pd 23:0
	StartAddr               uint64
	Len                     uint64
	BSFOctwordSize          uint32
	TranslationsOctwordSize uint32
	LogPageSize             uint8
}

// DecodeMkeyContextSeg decodes the 64-byte segment at the start of b.
func DecodeMkeyContextSeg(b []byte) MkeyContextSeg {
	_ = b[MkeyContextSegSize-1]
	return MkeyContextSeg{
		Free: b[0], AccessFlags: b[2], SF: b[3],
		QPNMkey: be.Uint32(b[4:]), FlagsPD: be.Uint32(b[12:]),
		StartAddr: be.Uint64(b[16:]), Len: be.Uint64(b[24:]),
		BSFOctwordSize: be.Uint32(b[32:]), TranslationsOctwordSize: be.Uint32(b[52:]),
		LogPageSize: b[59],
	}
}

// Encode writes the segment (reserved bytes zero) into b.
func (m MkeyContextSeg) Encode(b []byte) {
	_ = b[MkeyContextSegSize-1]
	clear(b[:MkeyContextSegSize])
	b[0], b[2], b[3] = m.Free, m.AccessFlags, m.SF
	be.PutUint32(b[4:], m.QPNMkey)
	be.PutUint32(b[12:], m.FlagsPD)
	be.PutUint64(b[16:], m.StartAddr)
	be.PutUint64(b[24:], m.Len)
	be.PutUint32(b[32:], m.BSFOctwordSize)
	be.PutUint32(b[52:], m.TranslationsOctwordSize)
	b[59] = m.LogPageSize
}

// PD is the protection domain (flags_pd[23:0]).
func (m MkeyContextSeg) PD() uint32 { return m.FlagsPD & 0xffffff }

// QPN is the QP a type-2 window binds to (qpn_mkey[31:8]; 0xffffff none).
func (m MkeyContextSeg) QPN() uint32 { return m.QPNMkey >> 8 }

// AccessMode is the translation's access mode (flags[1:0], the mkc's
// access_mode_1_0: 1 MTT, 2 KLM), as the kernel's set_reg_mkey_seg sets it.
func (m MkeyContextSeg) AccessMode() uint8 { return m.AccessFlags & 3 }

// EnRinval is flags_pd[24] (the kernel's MLX5_MKEY_REMOTE_INVAL): remote
// invalidation allowed.
func (m MkeyContextSeg) EnRinval() bool { return m.FlagsPD&(1<<24) != 0 }

// Length64 is flags_pd[31] (the mkc's length64).
func (m MkeyContextSeg) Length64() bool { return m.FlagsPD&(1<<31) != 0 }

// MkeyVariant is the new key byte (qpn_mkey[7:0]).
func (m MkeyContextSeg) MkeyVariant() uint8 { return uint8(m.QPNMkey) }
