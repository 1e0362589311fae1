package mlx5test

import (
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// The kernel's UMR resources as mlx5_ib keeps them on Linux 6.12
// (ib/umr.c): a 128-entry CQ and a REG_UMR QP (no PD, no RQ, 128 WRs of
// up to 192 bytes: 512 WQEBBs) taken RST→INIT→RTR→RTS
// (mlx5r_umr_resource_init, mlx5r_umr_qp_rst2rts), the UMR WQEs of
// ibv_rereg_mr (mlx5r_umr_rereg_pd_access) and of the revoke
// (mlx5r_umr_revoke_mr), and the recovery after an error completion
// (mlx5r_umr_recover: the QP to RESET, then RST→RTS again).

// UMR is the kernel's UMR QP and its CQ, with the CQ's consumer index.
type UMR struct {
	CQ *CQ
	WQ *WQ
	CI uint32
}

// UMRResources is mlx5r_umr_resource_init: the CQ, the REG_UMR QP on the
// kernel's UAR, taken to RTS.
func (d *Driver) UMRResources() (*UMR, error) {
	cq, err := d.KernelCQ(128)
	if err != nil {
		return nil, err
	}
	d.InitCQ(cq)
	const logSQ = 9
	in, q := d.CreateQPIn(QPArgs{St: ifc.QPStRegUMR, SndCQ: cq.CQN, RcvCQ: cq.CQN,
		RQType: ifc.RQTypeZeroLen, LogSQ: logSQ, UAR: d.UAR})
	if q, err = d.CreateQP(in, q); err != nil {
		return nil, err
	}
	u := &UMR{CQ: cq, WQ: &WQ{Q: q, UAR: d.UAR, LogSQ: logSQ}}
	return u, d.UMRToRTS(u)
}

// UMRToRTS is mlx5r_umr_qp_rst2rts: INIT with P_Key index 0 and port 1,
// then RTR and RTS with the fields __mlx5_ib_modify_qp always writes
// (a 4096-byte MTU, log_msg_max 12).
func (d *Driver) UMRToRTS(u *UMR) error {
	if err := d.ModifyQP(ifc.OpRst2InitQP, u.WQ.Q, 0, func(qpc []byte) { ifc.PriPath(ifc.ADSVhcaPortNum).Set(qpc, 1) }); err != nil {
		return err
	}
	for _, op := range []ifc.Opcode{ifc.OpInit2RTRQP, ifc.OpRTR2RTSQP} {
		if err := d.ModifyQP(op, u.WQ.Q, 0, func(qpc []byte) {
			ifc.QPCMTU.Set(qpc, 5)
			ifc.QPCLogMsgMax.Set(qpc, 12)
		}); err != nil {
			return err
		}
	}
	return nil
}

// UMRRecover is mlx5r_umr_recover after its barrier WQE completed: the
// QP to RESET (the kernel zeroes its SQ counters and doorbell record
// then), and RST→RTS again.
func (d *Driver) UMRRecover(u *UMR) error {
	if err := d.ToRST(u.WQ.Q); err != nil {
		return err
	}
	u.WQ.SQPI = 0
	u.WQ.hold(func() { d.putRecord(u.WQ) })
	return d.UMRToRTS(u)
}

// UMRWQE is a kernel UMR WQE on mkey key (mlx5r_umr_post_send): fence
// "initiator small", CQ update always (the QP signals every WR), the
// key in the immediate, the UMR control and mkey segments, no
// translation (ds 8: two WQEBBs).
func UMRWQE(key uint32, ctrl uverbs.UMRCtrlSeg, mkey uverbs.MkeyContextSeg) uverbs.SendWQE {
	const fenceInitiatorSmall, cqUpdate = 1 << 5, 0x08
	return uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeUMR, FMCESE: fenceInitiatorSmall | cqUpdate, Imm: key},
		Segs: uverbs.HasUMR, UMRCtrl: ctrl, Mkey: mkey}
}

// ReregPDAccessWQE is mlx5r_umr_rereg_pd_access's WQE: the access flags
// (MkeyArgs numbering: lw | rw << 1 | rr << 2 | a << 3; lr always) and
// the PD of mkey key, "fail if free", with the key's own variant.
func ReregPDAccessWQE(key, pd, access uint32) uverbs.SendWQE {
	var flags uint8 = uverbs.MkeyContextAccessFlagsLocalRead
	for _, b := range []struct {
		bit  uint32
		flag uint8
	}{{1, uverbs.MkeyContextAccessFlagsLocalWrite}, {2, uverbs.MkeyContextAccessFlagsRemoteWrite},
		{4, uverbs.MkeyContextAccessFlagsRemoteRead}, {8, uverbs.MkeyContextAccessFlagsAtomic}} {
		if access&b.bit != 0 {
			flags |= b.flag
		}
	}
	return UMRWQE(key, uverbs.UMRCtrlSeg{Flags: uverbs.UMRCheckFree | uverbs.UMRCtrlFlagInline,
		MkeyMask: uverbs.MkeyMaskAccessLocalRead | uverbs.MkeyMaskAccessLocalWrite | uverbs.MkeyMaskAccessRemoteRead |
			uverbs.MkeyMaskAccessRemoteWrite | uverbs.MkeyMaskAccessAtomic | uverbs.MkeyMaskPD},
		uverbs.MkeyContextSeg{AccessFlags: flags, FlagsPD: pd, QPNMkey: 0xffffff00 | key&0xff})
}

// RevokeWQE is mlx5r_umr_revoke_mr's WQE: mkey key made free and moved
// to the UMR PD umrPD, no check.
func RevokeWQE(key, umrPD uint32) uverbs.SendWQE {
	return UMRWQE(key, uverbs.UMRCtrlSeg{Flags: uverbs.UMRCtrlFlagInline, MkeyMask: uverbs.MkeyMaskPD | uverbs.MkeyMaskFree},
		uverbs.MkeyContextSeg{Free: uverbs.MkeyContextFree, FlagsPD: umrPD, QPNMkey: 0xffffff00 | key&0xff})
}

// PostUMR posts w on the UMR QP and rings its doorbell; it returns the
// WQE's index.
func (d *Driver) PostUMR(u *UMR, w *uverbs.SendWQE) uint16 { return d.PostSend(u.WQ, w) }

// PollUMR polls the UMR CQ once.
func (d *Driver) PollUMR(u *UMR) ([]byte, bool) { return d.PollCQ(u.CQ, &u.CI) }

// Access bits of a fast registration's mkey segment (MLX5_PERM_*, byte
// 2 of struct mlx5_mkey_seg) and its access modes.
const (
	permUMREn = 1 << 7
	ModeMTT   = 1
	ModeKLM   = 2
)

// RegMRWQE is set_reg_wr's WQE for IB_WR_REG_MR on a kernel QP (fre):
// the MR's new key in the immediate, "fail if not free", the
// frwr_mkey_mask, the mkey segment (access as ReregPDAccessWQE numbers
// it, umr_en, the access mode, the new key byte, en_rinval, IOVA, length,
// page size for MTT) and the descriptor list: inline (list, padded to 64
// bytes) when ptr is nil, else the data segment ptr (the kernel's for
// lists over 64 bytes: the list's DMA address, its bytes rounded up to
// 64, the PD's local DMA L_Key).
func RegMRWQE(newKey uint32, mode uint8, access uint32, iova, length uint64, pageShift uint8, list []byte, ptr *uverbs.DataSeg) uverbs.SendWQE {
	w := ReregPDAccessWQE(newKey, 0, access)
	n := (len(list) + 63) / 64 * 64
	if ptr != nil {
		n = int(ptr.ByteCount)
	}
	w.UMRCtrl = uverbs.UMRCtrlSeg{Flags: uverbs.UMRCtrlFlagCheckFree, KLMOctowords: uint16(n / 16),
		MkeyMask: uverbs.MkeyMaskLen | uverbs.MkeyMaskPageSize | uverbs.MkeyMaskStartAddr | uverbs.MkeyMaskEnRinval |
			uverbs.MkeyMaskMkey | uverbs.MkeyMaskAccessLocalRead | uverbs.MkeyMaskAccessLocalWrite | uverbs.MkeyMaskAccessRemoteRead |
			uverbs.MkeyMaskAccessRemoteWrite | uverbs.MkeyMaskSmallFence | uverbs.MkeyMaskFree | uverbs.MkeyMaskAccessAtomic}
	w.Mkey.AccessFlags |= permUMREn | mode
	w.Mkey.FlagsPD = 1 << 24 // MLX5_MKEY_REMOTE_INVAL, no PD
	w.Mkey.StartAddr, w.Mkey.Len = iova, length
	if mode == ModeMTT {
		w.Mkey.LogPageSize = pageShift
	}
	if ptr != nil {
		w.Data = []uverbs.DataSeg{*ptr}
		return w
	}
	w.UMRCtrl.Flags |= uverbs.UMRCtrlFlagInline
	w.Translation = make([]byte, n)
	copy(w.Translation, list)
	return w
}

// KernelLocalInvWQE is set_linv_wr's WQE for IB_WR_LOCAL_INV on a kernel QP:
// the key in the immediate, mkey_mask FREE, the mkey segment free.
func KernelLocalInvWQE(key uint32) uverbs.SendWQE {
	return UMRWQE(key, uverbs.UMRCtrlSeg{Flags: uverbs.UMRCtrlFlagInline, MkeyMask: uverbs.MkeyMaskFree},
		uverbs.MkeyContextSeg{Free: uverbs.MkeyContextFree})
}

// XLTWQE is one of mlx5r_umr_update_mr_pas's WQEs on the REG_UMR QP for
// mkey key: entries (bytes) pointed to by ptr at octoword offset off
// (TRANSLATION_OFFSET when off is not 0), "fail if not free"; final
// also enables the mkey (KEY, FREE, LEN, PAGE_SIZE, START_ADDR, the
// access flags and PD) as the MR [iova, +length) of pd in pages of
// 1<<pageShift bytes.
func XLTWQE(key uint32, ptr uverbs.DataSeg, off uint64, final bool, pd, access uint32, iova, length uint64, pageShift uint8) uverbs.SendWQE {
	w := ReregPDAccessWQE(key, pd, access)
	w.UMRCtrl = uverbs.UMRCtrlSeg{Flags: uverbs.UMRCtrlFlagCheckFree, KLMOctowords: uint16(ptr.ByteCount / 16)}
	if off != 0 {
		w.UMRCtrl.Flags |= uverbs.UMRCtrlFlagTranslationOffset
		w.UMRCtrl.TranslationOffset, w.UMRCtrl.TranslationOffsetHigh = uint16(off), uint32(off>>16)
	}
	if final {
		w.UMRCtrl.MkeyMask = uverbs.MkeyMaskMkey | uverbs.MkeyMaskFree | uverbs.MkeyMaskAccessLocalRead | uverbs.MkeyMaskAccessLocalWrite |
			uverbs.MkeyMaskAccessRemoteRead | uverbs.MkeyMaskAccessRemoteWrite | uverbs.MkeyMaskAccessAtomic | uverbs.MkeyMaskPD |
			uverbs.MkeyMaskLen | uverbs.MkeyMaskPageSize | uverbs.MkeyMaskStartAddr
		w.Mkey.StartAddr, w.Mkey.Len, w.Mkey.LogPageSize = iova, length, pageShift
	}
	w.Data = []uverbs.DataSeg{ptr}
	return w
}
