package mlx5

import (
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
// context segment in the mkc layout holds the new values, then the
// translation the WQE loads. Linux 6.12 posts three kinds: the MR
// cache's registrations (mlx5r_umr_update_mr_pas: MTT entries through a
// pointer, in chunks at xlt_offset, the last also setting LEN,
// PAGE_SIZE, START_ADDR, the access flags, PD, KEY and FREE = 0 under
// "fail unless free"), ibv_rereg_mr of the PD and/or access flags
// (mlx5r_umr_rereg_pd_access: LR|LW|RR|RW|A|PD, "fail if free") and the
// revoke that fences a registration before its mkey goes back to the
// cache (mlx5r_umr_revoke_mr: FREE|PD, free = 1, the UMR PD).
//
// The UMR engine (umrexec.go) validates and applies them and completes
// each with a REQ CQE of opcode 0x25; the kernel waits for it without a
// timeout. A WQE it refuses (another mkey_mask or flags bit, no such
// mkey, another key variant, umr_en = 0, a PD that does not exist, the
// free check, a translation beyond the mkey's, enabling an mkey without
// a page for every page of its range) completes with an error CQE and
// moves the QP to ERR (the kernel then recovers it: 2RST, RST2INIT,
// INIT2RTR, RTR2RTS). UMR WQEs on a kernel ULP's QP are fast
// registrations (frwr.go), on a user QP memory-window binds and
// invalidations (mw.go).

// umrMkeyMask are the mkey_mask bits a kernel UMR may set.
const umrMkeyMask = uverbs.MkeyMaskLen | uverbs.MkeyMaskPageSize | uverbs.MkeyMaskStartAddr | uverbs.MkeyMaskAccessLocalRead | uverbs.MkeyMaskAccessLocalWrite |
	uverbs.MkeyMaskAccessRemoteRead | uverbs.MkeyMaskAccessRemoteWrite | uverbs.MkeyMaskAccessAtomic |
	uverbs.MkeyMaskPD | uverbs.MkeyMaskFree | uverbs.MkeyMaskMkey

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
// (lock held): umrExec with the WQE's translation as decoded (inline, or
// the data segment that points at it).
func (d *Device) kernelUMR(w *uverbs.SendWQE) (transport.Status, string) {
	req := umrReq{key: w.Ctrl.Imm, ctrl: w.UMRCtrl, mkey: w.Mkey, inline: w.Translation}
	if len(w.Data) == 1 {
		req.ptr, req.hasPtr = w.Data[0], true
	}
	return d.umrExec(&req, umrQP{regUMR: true})
}
