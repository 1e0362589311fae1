package mlx5

import (
	"fmt"

	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/transport"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// Kernel UMR (User-Mode Memory Registration) work requests (spec §6.4's
// rereg_user_mr, §7.5.7): mlx5_ib changes a live mkey without a command
// by posting a UMR WQE (opcode 0x25) on its REG_UMR QP (st 0xc, no PD):
// the control segment's immediate names the mkey (all 32 bits), a UMR
// control segment says which mkey context fields change (mkey_mask) and
// what to check first (the free-check mode in flags[6:5]), and an mkey
// context segment in the mkc layout holds the new values. Linux 6.12
// posts two: ibv_rereg_mr of the PD and/or access flags
// (mlx5r_umr_rereg_pd_access: LR|LW|RR|RW|A|PD, "fail if free") and the
// revoke that fences a registration before its pages go to a new one
// (mlx5r_umr_revoke_mr: FREE|PD, free = 1, the UMR PD).
//
// The device applies the PD, the access flags, the free bit and the key
// variant (mkey_mask PD, LR..A, FREE, KEY) to a umr_en mkey and completes
// the WQE with a REQ CQE of opcode 0x25; the kernel waits for it without
// a timeout. Translation changes (LEN, START_ADDR, PAGE_SIZE, an inline
// or pointed-to MTT/KLM list) are not carried out: with
// umr_modify_entity_size_disabled = 1 mlx5_ib's mkeys are not cacheable
// and 6.12 posts none on the UMR QP. Such a WQE, any other mkey_mask or
// flags bit, or a check that fails (no such mkey, another key variant,
// umr_en = 0, a PD that does not exist, the free check, enabling an
// mkey without a translation) completes with an error CQE and moves the
// QP to ERR (the kernel then recovers it: 2RST, RST2INIT, INIT2RTR,
// RTR2RTS). UMR WQEs on user QPs are carried out as memory-window
// binds and invalidations (mw.go).

// umrMkeyMask are the mkey_mask bits a kernel UMR may set.
const umrMkeyMask = uverbs.MkeyMaskAccessLocalRead | uverbs.MkeyMaskAccessLocalWrite |
	uverbs.MkeyMaskAccessRemoteRead | uverbs.MkeyMaskAccessRemoteWrite | uverbs.MkeyMaskAccessAtomic |
	uverbs.MkeyMaskPD | uverbs.MkeyMaskFree | uverbs.MkeyMaskMkey

// umrFlags are the UMR control flags a kernel UMR may set: INLINE (the
// translation, if any, follows the mkey segment; none here) and the
// free-check mode.
const umrFlags = uverbs.UMRCtrlFlagInline | uverbs.UMRCheckFree | uverbs.UMRCtrlFlagCheckFree

// umrAccessBits pairs the mkey_mask access bits with the mkey context's
// access_flags bits and the region's access flags (local read is always
// granted: the region has no flag for it).
var umrAccessBits = [...]struct {
	mask uint64
	ctx  uint8
	flag uint32
}{
	{uverbs.MkeyMaskAccessLocalWrite, uverbs.MkeyContextAccessFlagsLocalWrite, mr.LocalWrite},
	{uverbs.MkeyMaskAccessRemoteRead, uverbs.MkeyContextAccessFlagsRemoteRead, mr.RemoteRead},
	{uverbs.MkeyMaskAccessRemoteWrite, uverbs.MkeyContextAccessFlagsRemoteWrite, mr.RemoteWrite},
	{uverbs.MkeyMaskAccessAtomic, uverbs.MkeyContextAccessFlagsAtomic, mr.RemoteAtomic},
}

// sendUMR executes the posted WQEs of the REG_UMR QP in RTS, in order
// (the SQ's depth bounds them): each is copied once and decoded by
// TakeSend (a malformed one, or another opcode, completes as TakeSend
// says), then a UMR is validated and applied by kernelUMR. A WQE that
// fails completes with an error CQE and moves the QP to ERR; what is
// posted after it is flushed.
func (env *qpEnv) sendUMR() {
	q := env.q
	env.eachSend(true, func(wr *transport.SendWR) {
		// TakeSend decoded the UMR WQE (HasUMR) and, not being a transport
		// operation, gave it LOC_QP_OP_ERR: the device carries it out.
		if wr.Status == transport.StatusLocQPOpErr && env.sw.Ctrl.Opcode == uverbs.OpcodeUMR && env.sw.Segs&uverbs.HasUMR != 0 {
			var why string
			wr.Status, why = env.d.kernelUMR(&env.sw)
			if why != "" {
				env.d.find(hca.FindingWQE, "completed with "+hca.WCStatusName(uint32(wr.Status)), "qp %#x UMR WQE %#x on mkey %#x: %s",
					q.QPN, uint16(wr.ID), env.sw.Ctrl.Imm, why)
			}
		}
		env.Complete(transport.Completion{WRID: wr.ID, Status: wr.Status, Opcode: transport.WCFastReg, Signaled: wr.Signaled})
		if wr.Status != transport.StatusSuccess {
			env.Error(transport.EventQPRequestErr)
		}
	})
	if q.state == ifc.QPStateERR {
		env.flush()
	}
}

// kernelUMR validates a decoded UMR WQE of the REG_UMR QP and applies it
// (lock held). It returns the completion status and, for a failure, why.
// Nothing changes unless every check passes; a change revokes the pages
// lent from the device's regions first (the direct data path) and gives
// the region a new generation, so references taken under the old PD,
// access or key stop resolving.
func (d *Device) kernelUMR(w *uverbs.SendWQE) (transport.Status, string) {
	u, m, key := w.UMRCtrl, &w.Mkey, w.Ctrl.Imm
	switch {
	case u.Flags&^umrFlags != 0:
		return transport.StatusLocQPOpErr, fmt.Sprintf("umr_ctrl.flags=%#x: only INLINE and the free check", u.Flags)
	case u.CheckFree() == uverbs.UMRCheckFree|uverbs.UMRCtrlFlagCheckFree:
		return transport.StatusLocQPOpErr, fmt.Sprintf("umr_ctrl.flags=%#x: free-check mode 3", u.Flags)
	case u.KLMOctowords != 0 || u.TranslationOffset != 0 || len(w.Translation) != 0 || len(w.Data) != 0:
		return transport.StatusLocQPOpErr, fmt.Sprintf("umr_ctrl.xlt_octowords=%d xlt_offset=%d: translation updates are not implemented", u.KLMOctowords, u.TranslationOffset)
	case u.MkeyMask&^umrMkeyMask != 0:
		return transport.StatusLocQPOpErr, fmt.Sprintf("umr_ctrl.mkey_mask=%#x: %#x not implemented (PD, access, FREE, KEY only)", u.MkeyMask, u.MkeyMask&^umrMkeyMask)
	case u.MkeyMask&uverbs.MkeyMaskAccessLocalRead != 0 && m.AccessFlags&uverbs.MkeyContextAccessFlagsLocalRead == 0:
		return transport.StatusLocQPOpErr, "mkey_seg.lr=0: local read is always granted"
	}
	o := &d.fn.obj
	h := mr.Handle(key)
	region := o.Region(h)
	switch {
	case region == nil:
		return transport.StatusLocProtErr, "no such mkey"
	case region.LKey != key:
		return transport.StatusLocProtErr, fmt.Sprintf("the mkey of index %#x is %#x", h, region.LKey)
	case !o.umrEn[h]:
		return transport.StatusLocProtErr, "created with umr_en=0"
	case region.Window != nil:
		return transport.StatusLocProtErr, "a memory window (bound by UMR WQEs on user QPs, mw.go)"
	}
	free := !region.Valid
	switch u.CheckFree() {
	case uverbs.UMRCheckFree: // the kernel's MLX5_UMR_CHECK_FREE: fail if free
		if free {
			return transport.StatusLocProtErr, "the mkey is free (MLX5_UMR_CHECK_FREE: fail if free)"
		}
	case uverbs.UMRCtrlFlagCheckFree: // the kernel's MLX5_UMR_CHECK_NOT_FREE: fail unless free
		if !free {
			return transport.StatusLocProtErr, "the mkey is live (MLX5_UMR_CHECK_NOT_FREE: fail unless free)"
		}
	}
	pd, access, valid, next := region.PD, region.Access, region.Valid, region.LKey
	if u.MkeyMask&uverbs.MkeyMaskPD != 0 {
		if pd = m.PD(); o.pds.Get(pd) == nil {
			return transport.StatusLocProtErr, fmt.Sprintf("mkey_seg.pd=%#x: no such PD", pd)
		}
	}
	for _, b := range umrAccessBits {
		if u.MkeyMask&b.mask == 0 {
			continue
		}
		access &^= b.flag
		if m.AccessFlags&b.ctx != 0 {
			access |= b.flag
		}
	}
	if u.MkeyMask&uverbs.MkeyMaskFree != 0 {
		valid = m.Free&uverbs.MkeyContextFree == 0
		if valid && !region.DMA && region.Length == 0 {
			return transport.StatusLocProtErr, "mkey_seg.free=0 for an mkey without a translation"
		}
	}
	if u.MkeyMask&uverbs.MkeyMaskMkey != 0 {
		next = mr.Key(h, m.MkeyVariant())
	}
	if pd == region.PD && access == region.Access && valid == region.Valid && next == region.LKey {
		return transport.StatusSuccess, "" // nothing changes: references stay good
	}
	d.wire.RevokeLoans() // the region's pages may be lent to another HCA
	if pd != region.PD {
		if p := o.pds.Get(region.PD); p != nil {
			p.refs--
		}
		o.pds.Get(pd).refs++
	}
	region.PD, region.Access, region.Valid = pd, access, valid
	region.LKey, region.RKey = next, next
	region.Gen = d.mrKeys.NewGen()
	return transport.StatusSuccess, ""
}
