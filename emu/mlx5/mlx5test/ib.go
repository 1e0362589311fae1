package mlx5test

import (
	"fmt"
	"math/bits"

	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// The verbs commands as mlx5_ib sends them on Linux 6.12 (ib/main.c,
// ib/cmd.c, ib/mr.c, ib/cq.c, ib/srq_cmd.c, ib/qp.c, ib/qpc.c, core/mr.c,
// core/pd.c): the structure sizes of that kernel's mlx5_ifc.h (16-byte
// inputs and outputs, 0x110-byte create inputs before their page lists,
// a 0x110-byte query_qp_out, a 0x210-byte query_hca_vport_context_out),
// kernel buffers in fragmented 4 KiB pages, doorbell records from a
// doorbell page.

// Obj runs a command whose input names one object at byte 0x09 (the
// dealloc, destroy, 2RST and query commands) with 6.12's sizes, and
// returns its output.
func (d *Driver) Obj(op ifc.Opcode, h uint32, outLen uint32) ([]byte, error) {
	in := cmdIn(op, 0, ifc.Linux612CmdSize)
	ifc.ObjIn.Set(in, h)
	return d.Exec(in, outLen)
}

// alloc runs an alloc command (ALLOC_PD, ALLOC_XRCD) and returns the
// object's number.
func (d *Driver) alloc(op ifc.Opcode) (uint32, error) {
	return d.create(cmdIn(op, 0, ifc.Linux612CmdSize))
}

// AllocPD is mlx5_cmd_alloc_pd; DeallocPD mlx5_cmd_dealloc_pd.
func (d *Driver) AllocPD() (uint32, error) { return d.alloc(ifc.OpAllocPD) }
func (d *Driver) DeallocPD(pdn uint32) error {
	_, err := d.Obj(ifc.OpDeallocPD, pdn, ifc.Linux612CmdSize)
	return err
}

// AllocXRCD is mlx5_cmd_xrcd_alloc; DeallocXRCD mlx5_cmd_xrcd_dealloc.
func (d *Driver) AllocXRCD() (uint32, error) { return d.alloc(ifc.OpAllocXRCD) }
func (d *Driver) DeallocXRCD(x uint32) error {
	_, err := d.Obj(ifc.OpDeallocXRCD, x, ifc.Linux612CmdSize)
	return err
}

// Mkey is a memory key as the driver holds it: the key it formed from the
// index and its variant.
type Mkey struct{ Key uint32 }

// variant is assign_mkey_variant's rolling counter.
func (d *Driver) variant() uint8 {
	d.mkeyVariant++
	return d.mkeyVariant
}

// MkeyArgs are the mkc fields and MTT of a CREATE_MKEY.
type MkeyArgs struct {
	PD               uint32
	Mode             uint32 // ifc.MkcAccessMode*
	Access           uint32 // lw | rw << 1 | rr << 2 | a << 3 (mr's numbering)
	Free, Length64   bool
	Start, Len       uint64
	LogPageSize      uint32
	MTT              []uint64
	Octwords         uint32 // 0: ⌈len(MTT)/2⌉
	Variant          uint8
	ExplicitVariant  bool
	OmitActualOctets bool
}

// CreateMkeyIn builds create_mkey_in as mlx5_core_create_mkey sends it.
func (d *Driver) CreateMkeyIn(a MkeyArgs) []byte {
	octs := a.Octwords
	if octs == 0 {
		octs = uint32(len(a.MTT)+1) / 2
	}
	in := make([]byte, ifc.Linux612CreateMkeyInSize+16*int(octs))
	ifc.MboxInOpcode.Set(in, uint32(ifc.OpCreateMkey))
	mkc := ifc.CreateMkeyInMkc.Bytes(in)
	ifc.MkcFree.Set(mkc, b2u(a.Free))
	ifc.MkcAccessMode42.Set(mkc, a.Mode>>2)
	ifc.MkcAccessMode10.Set(mkc, a.Mode&3)
	ifc.MkcUMREn.Set(mkc, b2u(a.Mode != ifc.MkcAccessModePA))
	ifc.MkcLR.Set(mkc, 1)
	ifc.MkcLW.Set(mkc, a.Access&1)
	ifc.MkcRW.Set(mkc, a.Access>>1&1)
	ifc.MkcRR.Set(mkc, a.Access>>2&1)
	ifc.MkcA.Set(mkc, a.Access>>3&1)
	ifc.MkcQPN.Set(mkc, 0xffffff)
	v := a.Variant
	if !a.ExplicitVariant {
		v = d.variant()
	}
	ifc.MkcMkey70.Set(mkc, uint32(v))
	ifc.MkcLength64.Set(mkc, b2u(a.Length64))
	ifc.MkcPD.Set(mkc, a.PD)
	ifc.MkcStartAddr.Set64(mkc, a.Start)
	ifc.MkcLen.Set64(mkc, a.Len)
	ifc.MkcTranslationsOctwordSize.Set(mkc, octs)
	ifc.MkcLogPageSize.Set(mkc, a.LogPageSize)
	if !a.OmitActualOctets {
		ifc.CreateMkeyInTranslationsOctwordActualSize.Set(in, octs)
	}
	for i, p := range a.MTT {
		be.PutUint64(in[ifc.PASOffset+8*i:], p)
	}
	return in
}

// CreateMkey runs CREATE_MKEY and forms the key as the driver does:
// mkey_index << 8 | mkey_7_0.
func (d *Driver) CreateMkey(in []byte) (Mkey, error) {
	n, err := d.create(in)
	if err != nil {
		return Mkey{}, err
	}
	return Mkey{Key: n<<8 | ifc.MkcMkey70.Get(ifc.CreateMkeyInMkc.Bytes(in))}, nil
}

// DMAMkey is mlx5_ib_get_dma_mr: PA mode over all of memory, local write
// and read.
func (d *Driver) DMAMkey(pdn uint32) (Mkey, error) {
	return d.CreateMkey(d.CreateMkeyIn(MkeyArgs{PD: pdn, Mode: ifc.MkcAccessModePA, Access: 1, Length64: true}))
}

// DestroyMkey is mlx5_core_destroy_mkey: the index, key >> 8.
func (d *Driver) DestroyMkey(m Mkey) error {
	_, err := d.Obj(ifc.OpDestroyMkey, m.Key>>8, ifc.Linux612CmdSize)
	return err
}

// Buf is a kernel buffer in fragmented 4 KiB pages (mlx5_frag_buf) and
// its doorbell record.
type Buf struct {
	Pages []uint64
	DBR   uint64
}

// fragBuf allocates n bytes in 4 KiB pages with gaps between them, and an
// 8-byte doorbell record (mlx5_db_alloc hands out 64-byte slots).
func (d *Driver) fragBuf(n uint64) Buf {
	var b Buf
	for range (n + 4095) / 4096 {
		b.Pages = append(b.Pages, d.Alloc(4096, 4096))
		d.Alloc(64, 64)
	}
	b.DBR = d.Alloc(64, 64)
	return b
}

// putPAS writes a buffer's pages as pas[] at 0x110 of in (grown to hold
// them).
func putPAS(in []byte, pages []uint64) []byte {
	in = append(in, make([]byte, 8*len(pages))...)
	for i, p := range pages {
		be.PutUint64(in[ifc.PASOffset+8*i:], p)
	}
	return in
}

// CQ is a completion queue as the driver keeps it.
type CQ struct {
	CQN     uint32
	LogSize uint8
	// CQESize is 64 or 128 bytes (0: 64).
	CQESize int
	Buf
	// Hold, when set, runs ArmCQ's write of the doorbell record as the
	// device's lock holder would (WQ.Hold's reason: the race detector).
	Hold func(func())
}

// CreateCQIn builds create_cq_in for a kernel CQ of at least nent
// entries (create_cq_kernel: entries rounded up to a power of two with
// one spare, 64-byte CQEs) on EQ eqn, armed through UAR uar.
func (d *Driver) CreateCQIn(nent int, eqn uint8, uar uint32) ([]byte, *CQ) {
	return d.CreateCQInSize(nent, eqn, uar, uverbs.CQESize64)
}

// CreateCQInSize is CreateCQIn with CQEs of cqeSize bytes (64 or 128, a
// user CQ's mlx5dv cqe_size).
func (d *Driver) CreateCQInSize(nent int, eqn uint8, uar uint32, cqeSize int) ([]byte, *CQ) {
	logSize := uint8(bits.Len(uint(nent)))
	c := &CQ{LogSize: logSize, CQESize: cqeSize, Buf: d.fragBuf(uint64(cqeSize) << logSize)}
	in := make([]byte, ifc.Linux612CreateCQInSize)
	ifc.MboxInOpcode.Set(in, uint32(ifc.OpCreateCQ))
	cqc := ifc.CreateCQInCQC.Bytes(in)
	ifc.CQCLogCQSize.Set(cqc, uint32(logSize))
	if cqeSize == 128 {
		ifc.CQCCQESz.Set(cqc, ifc.CQESize128)
	}
	ifc.CQCUARPage.Set(cqc, uar)
	ifc.CQCCEQN.Set(cqc, uint32(eqn))
	ifc.CQCLogPageSz.Set(cqc, 0)
	ifc.CQCDBRAddr.Set64(cqc, c.DBR)
	return putPAS(in, c.Pages), c
}

// create runs a create command and returns the object's number.
func (d *Driver) create(in []byte) (uint32, error) {
	out, err := d.Exec(in, ifc.Linux612CmdSize)
	if err != nil {
		return 0, err
	}
	return ifc.ObjOut.Get(out), nil
}

// CreateCQ runs a CREATE_CQ built by CreateCQIn.
func (d *Driver) CreateCQ(in []byte, c *CQ) (*CQ, error) {
	n, err := d.create(in)
	if err != nil {
		return nil, err
	}
	c.CQN = n
	return c, nil
}

// KernelCQ is a kernel CQ on the completion EQ and the kernel's UAR.
func (d *Driver) KernelCQ(nent int) (*CQ, error) {
	in, c := d.CreateCQIn(nent, d.CompEQ.EQN, d.UAR)
	return d.CreateCQ(in, c)
}

// DestroyCQ is mlx5_core_destroy_cq.
func (d *Driver) DestroyCQ(c *CQ) error {
	_, err := d.Obj(ifc.OpDestroyCQ, c.CQN, ifc.Linux612CmdSize)
	return err
}

// SRQ is an RMP or XRC SRQ as the driver keeps it.
type SRQ struct {
	N   uint32
	XRC bool
	Buf
}

// CreateRMPIn builds create_rmp_in for a kernel basic SRQ (create_rmp_cmd)
// of 1<<logSize WQEs of 1<<logStride bytes in PD pdn.
func (d *Driver) CreateRMPIn(pdn uint32, logSize, logStride uint8) ([]byte, *SRQ) {
	s := &SRQ{Buf: d.fragBuf(uint64(1) << (logSize + logStride))}
	in := make([]byte, ifc.Linux612CreateRMPInSize)
	ifc.MboxInOpcode.Set(in, uint32(ifc.OpCreateRMP))
	rmpc := ifc.CreateRMPInCtx.Bytes(in)
	ifc.RMPCState.Set(rmpc, ifc.RMPStateRDY)
	wq := func(f ifc.Field, v uint32) { ifc.RMPWQ(f).Set(rmpc, v) }
	wq(ifc.WQType, ifc.WQTypeLinkedList)
	wq(ifc.WQPD, pdn)
	wq(ifc.WQLogStride, uint32(logStride))
	wq(ifc.WQLogSz, uint32(logSize))
	ifc.RMPWQ(ifc.WQDBRAddr).Set64(rmpc, s.DBR)
	return putPAS(in, s.Pages), s
}

// CreateXRCSRQIn builds create_xrc_srq_in (create_xrc_srq_cmd) for an XRC
// SRQ of 1<<logSize WQEs of 16<<logStride bytes in XRCD xrcd, completing
// to CQ cqn, in PD pdn.
func (d *Driver) CreateXRCSRQIn(pdn, xrcd, cqn uint32, logSize, logStride uint8, userIndex uint32) ([]byte, *SRQ) {
	s := &SRQ{XRC: true, Buf: d.fragBuf(uint64(16) << (logSize + logStride))}
	in := make([]byte, ifc.Linux612CreateXRCSRQInSize)
	ifc.MboxInOpcode.Set(in, uint32(ifc.OpCreateXRCSRQ))
	ctx := ifc.CreateXRCSRQInCtx.Bytes(in)
	ifc.XRCSRQCLogSize.Set(ctx, uint32(logSize))
	ifc.XRCSRQCLogRQStride.Set(ctx, uint32(logStride))
	ifc.XRCSRQCXRCD.Set(ctx, xrcd)
	ifc.XRCSRQCCQN.Set(ctx, cqn)
	ifc.XRCSRQCUserIndex.Set(ctx, userIndex)
	ifc.XRCSRQCPD.Set(ctx, pdn)
	ifc.XRCSRQCDBRAddrH.Set(ctx, uint32(s.DBR>>32))
	ifc.XRCSRQCDBRAddrL.Set(ctx, uint32(s.DBR))
	return putPAS(in, s.Pages), s
}

// CreateSRQ runs a CREATE_RMP or CREATE_XRC_SRQ built above.
func (d *Driver) CreateSRQ(in []byte, s *SRQ) (*SRQ, error) {
	n, err := d.create(in)
	if err != nil {
		return nil, err
	}
	s.N = n
	return s, nil
}

// DestroySRQ is destroy_rmp_cmd or destroy_xrc_srq_cmd.
func (d *Driver) DestroySRQ(s *SRQ) error {
	op := ifc.OpDestroyRMP
	if s.XRC {
		op = ifc.OpDestroyXRCSRQ
	}
	_, err := d.Obj(op, s.N, ifc.Linux612CmdSize)
	return err
}

// QP is a queue pair as the driver keeps it.
type QP struct {
	QPN uint32
	St  uint32
	Buf
}

// QPArgs are the qpc fields of a CREATE_QP.
type QPArgs struct {
	St                        uint32
	PD, SndCQ, RcvCQ          uint32
	RQType                    uint32
	SRQ, XRCD                 uint32
	LogRQ, LogRQStride, LogSQ uint32 // LogSQ in 64-byte WQEBBs
	NoSQ                      bool
	UAR                       uint32
	UserIndex                 uint32
	// Fre: "fast registration enabled", which mlx5_ib sets on every
	// kernel QP (_create_kernel_qp): its UMR WQEs are REG_MR and
	// LOCAL_INV, a user QP's are memory-window binds.
	Fre bool
}

// CreateQPIn builds create_qp_in as _create_kernel_qp does: one buffer,
// the RQ at 0 and the SQ after it, in fragmented 4 KiB pages, the
// doorbell record, user_index 0xffffff unless given.
func (d *Driver) CreateQPIn(a QPArgs) ([]byte, *QP) {
	var n uint64
	if a.RQType == ifc.RQTypeRegular {
		n += uint64(16<<a.LogRQStride) << a.LogRQ
	}
	if !a.NoSQ {
		n += uint64(ifc.SendWQEBB) << a.LogSQ
	}
	q := &QP{St: a.St}
	if n != 0 {
		q.Buf = d.fragBuf(n)
	}
	in := make([]byte, ifc.Linux612CreateQPInSize)
	ifc.MboxInOpcode.Set(in, uint32(ifc.OpCreateQP))
	qpc := ifc.QPInQPC.Bytes(in)
	set := func(f ifc.Field, v uint32) { f.Set(qpc, v) }
	set(ifc.QPCSt, a.St)
	set(ifc.QPCPMState, 3) // migrated
	set(ifc.QPCPD, a.PD)
	set(ifc.QPCCQNSnd, a.SndCQ)
	set(ifc.QPCCQNRcv, a.RcvCQ)
	set(ifc.QPCRQType, a.RQType)
	set(ifc.QPCSRQN, a.SRQ)
	set(ifc.QPCXRCD, a.XRCD)
	if a.RQType == ifc.RQTypeRegular {
		set(ifc.QPCLogRQSize, a.LogRQ)
		set(ifc.QPCLogRQStride, a.LogRQStride)
	}
	set(ifc.QPCNoSQ, b2u(a.NoSQ))
	set(ifc.QPCFre, b2u(a.Fre))
	if !a.NoSQ {
		set(ifc.QPCLogSQSize, a.LogSQ)
		set(ifc.QPCUARPage, a.UAR)
	}
	ui := a.UserIndex
	if ui == 0 {
		ui = 0xffffff
	}
	set(ifc.QPCUserIndex, ui)
	if n != 0 {
		ifc.QPCDBRAddr.Set64(qpc, q.DBR)
		in = putPAS(in, q.Pages)
	}
	return in, q
}

// CreateQP runs a CREATE_QP built by CreateQPIn.
func (d *Driver) CreateQP(in []byte, q *QP) (*QP, error) {
	n, err := d.create(in)
	if err != nil {
		return nil, err
	}
	q.QPN = n
	return q, nil
}

// ModifyQP runs a transition (RST2INIT_QP, INIT2RTR_QP, RTR2RTS_QP) with
// a qpc built from zeroes by set and opt_param_mask, as
// __mlx5_ib_modify_qp does (st, pm_state, pd, the CQs always written).
func (d *Driver) ModifyQP(op ifc.Opcode, q *QP, opt uint32, set func(qpc []byte)) error {
	in := cmdIn(op, 0, ifc.Linux612ModifyQPInSize)
	ifc.ObjIn.Set(in, q.QPN)
	ifc.QPInOptParamMask.Set(in, opt)
	qpc := ifc.QPInQPC.Bytes(in)
	ifc.QPCSt.Set(qpc, q.St)
	ifc.QPCPMState.Set(qpc, 3)
	if set != nil {
		set(qpc)
	}
	_, err := d.Exec(in, ifc.Linux612CmdSize)
	return err
}

// ToRST is 2RST_QP.
func (d *Driver) ToRST(q *QP) error {
	_, err := d.Obj(ifc.Op2RstQP, q.QPN, ifc.Linux612CmdSize)
	return err
}

// QueryQP is mlx5_core_qp_query: the qpc of query_qp_out.
func (d *Driver) QueryQP(q *QP) ([]byte, error) {
	out, err := d.Obj(ifc.OpQueryQP, q.QPN, ifc.Linux612QueryQPOutSize)
	if err != nil {
		return nil, err
	}
	return ifc.QueryQPOutQPC.Bytes(out), nil
}

// DestroyQP is mlx5_core_destroy_qp.
func (d *Driver) DestroyQP(q *QP) error {
	_, err := d.Obj(ifc.OpDestroyQP, q.QPN, ifc.Linux612CmdSize)
	return err
}

// QueryHCAVportContext is mlx5_query_hca_vport_context for the function's
// own vport on a one-port device (port_num not set): the context.
func (d *Driver) QueryHCAVportContext() ([]byte, error) {
	out, err := d.Exec(cmdIn(ifc.OpQueryHCAVportContext, 0, ifc.Linux612CmdSize), ifc.Linux612QueryHCAVportCtxOutSz)
	if err != nil {
		return nil, err
	}
	return ifc.QueryHCAVportContextOutCtx.Bytes(out), nil
}

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// IB is what mlx5_ib's probe and ib_core's clients set up in the device
// (spec §6.1): the XRC domains, the kernel's UMR PD and DMA key, the
// device resources the first QP creates (p0 with its DMA key, c0, s0,
// s1), and per port ib_mad's CQ, PD with its DMA key, QP0 and QP1 in RTS.
type IB struct {
	XRCD0, XRCD1   uint32
	UMRPD          uint32
	UMRKey         Mkey
	P0             uint32
	P0Key          Mkey
	C0             *CQ
	S0, S1         *SRQ
	MADCQ          *CQ
	MADPD          uint32
	MADKey         Mkey
	QP0, QP1       *QP
	PortGUID, Node uint64
	LID, SMLID     uint16
}

// compEQ is the completion EQ mlx5_comp_eqn_get creates on first use
// (MLX5_COMP_EQ_SIZE entries on vector 1).
func (d *Driver) compEQ() error {
	if d.CompEQ != nil {
		return nil
	}
	e, err := d.CreateEQ(1024, [4]uint64{}, 1)
	if err != nil {
		return fmt.Errorf("failed to create comp EQ: %w", err)
	}
	d.CompEQ = e
	return nil
}

// IBProbe runs what mlx5_ib's probe and ib_core's registration send with
// the device's caps, after Probe: ALLOC_XRCD twice, the vport context
// (get_port_immutable: grh_required must be 0), the UMR PD and its DMA
// key, then ib_mad's port setup: a CQ, a PD with its DMA key, the device
// resources the first CREATE_QP makes, and QP0 and QP1 taken to RTS.
func (d *Driver) IBProbe() (*IB, error) {
	if err := d.compEQ(); err != nil {
		return nil, err
	}
	ib := &IB{}
	var err error
	if ib.XRCD0, err = d.AllocXRCD(); err != nil {
		return nil, fmt.Errorf("alloc xrcd 0: %w", err)
	}
	if ib.XRCD1, err = d.AllocXRCD(); err != nil {
		return nil, fmt.Errorf("alloc xrcd 1: %w", err)
	}
	ctx, err := d.QueryHCAVportContext()
	if err != nil {
		return nil, fmt.Errorf("get_port_immutable: %w", err)
	}
	if ifc.HCAVportGRHRequired.Get(ctx) != 0 {
		return nil, fmt.Errorf("grh_required on an IB port")
	}
	ib.PortGUID, ib.Node = ifc.HCAVportPortGUID.Get64(ctx), ifc.HCAVportNodeGUID.Get64(ctx)
	ib.LID, ib.SMLID = uint16(ifc.HCAVportLID.Get(ctx)), uint16(ifc.HCAVportSMLID.Get(ctx))
	if ib.UMRPD, err = d.AllocPD(); err != nil {
		return nil, err
	}
	if ib.UMRKey, err = d.DMAMkey(ib.UMRPD); err != nil {
		return nil, err
	}
	// ib_mad: a CQ and a PD (with its DMA key) per port.
	if ib.MADCQ, err = d.KernelCQ(512); err != nil {
		return nil, fmt.Errorf("ib_mad CQ: %w", err)
	}
	if ib.MADPD, err = d.AllocPD(); err != nil {
		return nil, err
	}
	if ib.MADKey, err = d.DMAMkey(ib.MADPD); err != nil {
		return nil, err
	}
	// The device resources (mlx5_ib_dev_res_srq_init), on the first
	// CREATE_QP: p0 with its key, c0 of one entry, s0 (XRC) and s1.
	if ib.P0, err = d.AllocPD(); err != nil {
		return nil, err
	}
	if ib.P0Key, err = d.DMAMkey(ib.P0); err != nil {
		return nil, err
	}
	if ib.C0, err = d.KernelCQ(1); err != nil {
		return nil, fmt.Errorf("c0: %w", err)
	}
	in, s := d.CreateXRCSRQIn(ib.P0, ib.XRCD0, ib.C0.CQN, 0, 0, 0xffffff)
	if ib.S0, err = d.CreateSRQ(in, s); err != nil {
		return nil, fmt.Errorf("s0: %w", err)
	}
	in, s = d.CreateRMPIn(ib.P0, 0, 5)
	if ib.S1, err = d.CreateSRQ(in, s); err != nil {
		return nil, fmt.Errorf("s1: %w", err)
	}
	for _, st := range []uint32{ifc.QPStQP0, ifc.QPStQP1} {
		q, err := d.SpecialQP(ib, st)
		if err != nil {
			return nil, fmt.Errorf("create_qp st %#x: %w", st, err)
		}
		if st == ifc.QPStQP0 {
			ib.QP0 = q
		} else {
			ib.QP1 = q
		}
	}
	return ib, nil
}

// SpecialQP creates QP0 or QP1 as mlx5_ib does for ib_mad (a kernel UD
// QP of type st on ib_mad's CQ and PD) and takes it to RTS as
// ib_mad_change_qp_state_to_rts does: RESET→INIT with a P_Key index and
// Q_Key (no port), INIT→RTR, RTR→RTS with send PSN 0.
func (d *Driver) SpecialQP(ib *IB, st uint32) (*QP, error) {
	in, q := d.CreateQPIn(QPArgs{St: st, PD: ib.MADPD, SndCQ: ib.MADCQ.CQN, RcvCQ: ib.MADCQ.CQN,
		SRQ: ib.S1.N, XRCD: ib.XRCD1, LogRQ: 9, LogRQStride: 2, LogSQ: 9, UAR: d.UAR})
	q, err := d.CreateQP(in, q)
	if err != nil {
		return nil, err
	}
	qkey := uint32(0)
	if st == ifc.QPStQP1 {
		qkey = 0x80010000 // IB_QP1_QKEY
	}
	steps := []struct {
		op  ifc.Opcode
		set func(qpc []byte)
	}{
		{ifc.OpRst2InitQP, func(qpc []byte) {
			ifc.QPCQKey.Set(qpc, qkey)
			ifc.QPCDBRAddr.Set64(qpc, q.DBR)
		}},
		{ifc.OpInit2RTRQP, func(qpc []byte) {
			ifc.QPCMTU.Set(qpc, 1) // 256 for QP0/QP1
			ifc.QPCLogMsgMax.Set(qpc, 8)
		}},
		{ifc.OpRTR2RTSQP, func(qpc []byte) { ifc.QPCNextSendPSN.Set(qpc, 0) }},
	}
	for _, s := range steps {
		if err := d.ModifyQP(s.op, q, 0, s.set); err != nil {
			return nil, err
		}
	}
	return q, nil
}

// IBUnload undoes IBProbe as the driver does: each QP to RST then
// destroyed, the device resources (s1, s0, c0, p0's key and p0), ib_mad's
// objects, the UMR key and PD, the XRC domains.
func (d *Driver) IBUnload(ib *IB) error {
	for _, q := range []*QP{ib.QP1, ib.QP0} {
		if err := d.ToRST(q); err != nil {
			return err
		}
		if err := d.DestroyQP(q); err != nil {
			return err
		}
	}
	steps := []func() error{
		func() error { return d.DestroySRQ(ib.S1) },
		func() error { return d.DestroySRQ(ib.S0) },
		func() error { return d.DestroyCQ(ib.C0) },
		func() error { return d.DestroyMkey(ib.P0Key) },
		func() error { return d.DeallocPD(ib.P0) },
		func() error { return d.DestroyMkey(ib.MADKey) },
		func() error { return d.DeallocPD(ib.MADPD) },
		func() error { return d.DestroyCQ(ib.MADCQ) },
		func() error { return d.DestroyMkey(ib.UMRKey) },
		func() error { return d.DeallocPD(ib.UMRPD) },
		func() error { return d.DeallocXRCD(ib.XRCD1) },
		func() error { return d.DeallocXRCD(ib.XRCD0) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return err
		}
	}
	return nil
}

// ToERR is 2ERR_QP.
func (d *Driver) ToERR(q *QP) error {
	_, err := d.Obj(ifc.Op2ErrQP, q.QPN, ifc.Linux612CmdSize)
	return err
}

// AttachMCG is mlx5_cmd_attach_mcg: QP q joins the multicast group gid
// (ATTACH_TO_MCG; DETACH_FROM_MCG when detach).
func (d *Driver) AttachMCG(q *QP, gid [16]byte, detach bool) error {
	op := ifc.OpAttachToMCG
	if detach {
		op = ifc.OpDetachFromMCG
	}
	in := cmdIn(op, 0, ifc.Linux612MCGInSize)
	ifc.ObjIn.Set(in, q.QPN)
	copy(ifc.MCGInMulticastGID.Bytes(in), gid[:])
	_, err := d.Exec(in, ifc.Linux612CmdSize)
	return err
}
