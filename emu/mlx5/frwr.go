package mlx5

import (
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/transport"
)

// The kernel's fast registration (FRWR) on its ULPs' QPs (spec §6.4,
// wr.c): mlx5_ib creates every kernel QP with fre = 1 and turns
// IB_WR_REG_MR and IB_WR_LOCAL_INV into UMR WQEs (opcode 0x25) on it,
// ctrl.imm naming the mkey (REG_MR: by its new key), which NVMe-oF,
// iSER, NFS/RDMA and SMC post between their data transfers. An mkey from
// ib_alloc_mr is free until a REG_MR loads it: IB_MR_TYPE_MEM_REG
// (access mode MTT: page addresses; nvme-rdma's) or IB_MR_TYPE_SG_GAPS
// (access mode KLM: byte ranges of other regions of the PD, for ULPs
// that ask for it: the device reports IBK_SG_GAPS_REG), with en_rinval
// so the peer's SEND_WITH_INV frees it. Both run in order as local operations of the
// transport, through the UMR engine (umrexec.go), and complete with a REQ
// CQE of opcode 0x25 (the kernel reports IB_WC_REG_MR or IB_WC_LOCAL_INV
// from its own bookkeeping); a WQE that fails its checks completes with
// LOC_PROT_ERR (LOC_QP_OP_ERR for a form the kernel never posts) and
// moves the QP to ERR.

// takeFastReg keeps the decoded UMR WQE of a QP with fre, taken at SQ
// counter start, for LocalOp: the segments and the inline translation
// are copied out of the WQE now, a translation by pointer is read when
// the WQE runs.
func (env *qpEnv) takeFastReg(wr *transport.SendWR, start uint16) {
	w := &env.sw
	req := umrReq{key: w.Ctrl.Imm, ctrl: w.UMRCtrl, mkey: w.Mkey, inline: append([]byte(nil), w.Translation...)}
	if len(w.Data) == 1 {
		req.ptr, req.hasPtr = w.Data[0], true
	}
	if env.fastRegs == nil {
		env.fastRegs = map[uint16]umrReq{}
	}
	env.fastRegs[start] = req // bounded by the SQ's slots
	wr.Opcode, wr.Status = transport.OpFastReg, transport.StatusSuccess
	wr.Segs, wr.Length = wr.Segs[:0], 0
}

// fastReg runs a kernel UMR WQE taken by takeFastReg (lock held).
func (env *qpEnv) fastReg(start uint16, req *umrReq) transport.Status {
	st, why := env.d.umrExec(req, umrQP{pd: env.q.PD})
	if why != "" {
		env.d.find(hca.FindingWQE, "completed with "+hca.WCStatusName(uint32(st)), "qp %#x UMR WQE %#x on mkey %#x: %s",
			env.q.QPN, start, req.key, why)
	}
	return st
}
