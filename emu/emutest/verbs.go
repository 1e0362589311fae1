package emutest

import (
	"fmt"

	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// CQ is a completion queue as the driver keeps it.
type CQ struct {
	d      *Driver
	Handle uint32
	N      uint32
	Pages  []uint64
	cons   uint32
	UAR    uint32
}

// CreateCQ creates a CQ of n entries (a power of two) for context ctx.
func (d *Driver) CreateCQ(ctx, n uint32) (*CQ, error) {
	npages := 1 + (int(n)*64+4095)/4096
	pages, dir := d.Buffer(npages)
	var rsp abi.CmdCreateCQResp
	err := d.MustCmd(&abi.CmdCreateCQ{PdirDMA: dir, CtxHandle: ctx, CQE: n, NChunks: uint32(npages)}, &rsp)
	if err != nil {
		return nil, err
	}
	return &CQ{d: d, Handle: rsp.CQHandle, N: rsp.CQE, Pages: pages}, nil
}

// Poll returns the next CQE, if any, and consumes it.
func (c *CQ) Poll() (uverbs.CQE, bool) {
	prod := c.d.Get32(c.Pages[0] + uverbs.RxProdTail)
	if prod == c.cons {
		return uverbs.CQE{}, false
	}
	r := uverbs.Ring{N: c.N}
	off := 4096 + uint64(r.Slot(c.cons))*64
	gpa := c.Pages[off/4096] + off%4096
	e := uverbs.DecodeCQE(c.d.RAM.Mem[gpa : gpa+64])
	c.cons = r.Next(c.cons)
	c.d.Put32(c.Pages[0]+uverbs.RxConsHead, c.cons)
	return e, true
}

// Arm rings the CQ doorbell with ARM (or ARM_SOL).
func (c *CQ) Arm(solicited bool) {
	v := c.Handle | 1<<30
	if solicited {
		v = c.Handle | 1<<29
	}
	c.d.Doorbell(c.UAR, 4, v)
}

// QPSpec describes a CREATE_QP.
type QPSpec struct {
	Ctx, PD          uint32
	SendCQ, RecvCQ   *CQ
	SRQ              uint32 // 0 = own RQ
	Type             uint8
	SendWR, RecvWR   uint32
	SendSGE, RecvSGE uint32
	SigAll           bool
	UAR              uint32
}

// QP is a queue pair as the driver keeps it.
type QP struct {
	d              *Driver
	Spec           QPSpec
	Handle, QPN    uint32
	Pages          []uint64
	sqStride       uint32
	rqStride       uint32
	sendChunks     int
	sqProd, rqProd uint32
}

// CreateQP creates a QP laid out as the kernel driver lays it out.
func (d *Driver) CreateQP(s QPSpec) (*QP, error) {
	q := &QP{d: d, Spec: s, sqStride: uverbs.SQStride(s.SendSGE), rqStride: uverbs.RQStride(s.RecvSGE)}
	q.sendChunks = (int(s.SendWR*q.sqStride) + 4095) / 4096
	rqChunks := 0
	if s.SRQ == 0 {
		rqChunks = (int(s.RecvWR*q.rqStride) + 4095) / 4096
	}
	total := 1 + q.sendChunks + rqChunks
	var dir uint64
	q.Pages, dir = d.Buffer(total)
	var isSRQ uint8
	if s.SRQ != 0 {
		isSRQ = 1
	}
	sig := uint8(0)
	if s.SigAll {
		sig = 1
	}
	req := abi.CmdCreateQP{PdirDMA: dir, PDHandle: s.PD, SendCQHandle: s.SendCQ.Handle, RecvCQHandle: s.RecvCQ.Handle,
		SRQHandle: s.SRQ, MaxSendWR: s.SendWR, MaxRecvWR: s.RecvWR, MaxSendSGE: s.SendSGE, MaxRecvSGE: s.RecvSGE,
		AccessFlags: abi.AccessLocalWrite, TotalChunks: uint16(total), SendChunks: uint16(q.sendChunks),
		SQSigAll: sig, QPType: s.Type, IsSRQ: isSRQ}
	var rsp abi.CmdCreateQPResp
	if err := d.MustCmd(&req, &rsp); err != nil {
		return nil, err
	}
	q.QPN, q.Handle = rsp.QPN, rsp.QPHandle
	return q, nil
}

// Modify sends MODIFY_QP and reports failure as the driver sees it.
func (q *QP) Modify(mask uint32, a abi.QPAttr) error {
	if err := q.d.MustCmd(&abi.CmdModifyQP{QPHandle: q.Handle, AttrMask: mask, Attrs: a}, nil); err != nil {
		return err
	}
	if a.State == abi.QPStateReset && mask&abi.AttrState != 0 {
		q.sqProd, q.rqProd = 0, 0
		for _, off := range []uint64{uverbs.TxProdTail, uverbs.TxConsHead, uverbs.RxProdTail, uverbs.RxConsHead} {
			q.d.Put32(q.Pages[0]+off, 0)
		}
	}
	return nil
}

// Query sends QUERY_QP and returns the QP's attributes.
func (q *QP) Query() (abi.QPAttr, error) {
	var rsp abi.CmdQueryQPResp
	err := q.d.MustCmd(&abi.CmdQueryQP{QPHandle: q.Handle}, &rsp)
	return rsp.Attrs, err
}

func (q *QP) slot(base int, stride uint32, idx, n uint32) uint64 {
	off := uint64(base)*4096 + uint64((idx&(n-1))*stride)
	return q.Pages[off/4096] + off%4096
}

// PostRecv writes a receive WQE and rings the RQ doorbell.
func (q *QP) PostRecv(w uverbs.RecvWQE) {
	if w.NumSGE == 0 {
		w.NumSGE = uint32(len(w.SGE))
	}
	gpa := q.slot(1+q.sendChunks, q.rqStride, q.rqProd, q.Spec.RecvWR)
	w.Encode(q.d.RAM.Mem[gpa : gpa+uint64(q.rqStride)])
	q.rqProd = uverbs.Ring{N: q.Spec.RecvWR}.Next(q.rqProd)
	q.d.Put32(q.Pages[0]+uverbs.RxProdTail, q.rqProd)
	q.d.Doorbell(q.Spec.UAR, 0, q.Handle|1<<31)
}

// PostSend writes a send WQE and rings the SQ doorbell.
func (q *QP) PostSend(w uverbs.SendWQE) {
	q.WriteSend(w)
	q.RingSend()
}

// SQConsHead and RQConsHead read the device-owned consumer indices.
func (q *QP) SQConsHead() uint32 { return q.d.Get32(q.Pages[0] + uverbs.TxConsHead) }
func (q *QP) RQConsHead() uint32 { return q.d.Get32(q.Pages[0] + uverbs.RxConsHead) }

// SetSQProd lets a test write a raw SQ producer index and ring the doorbell.
func (q *QP) SetSQProd(v uint32) {
	q.d.Put32(q.Pages[0]+uverbs.TxProdTail, v)
	q.d.Doorbell(q.Spec.UAR, 0, q.Handle|1<<30)
}

// KernelGSI does what the IB core's MAD layer does for port 1 at probe:
// PD + DMA MR, a 1024-entry CQ, the GSI QP (128 send WRs x 2 SGEs, 512
// receive WRs x 1 SGE, signal all), RESET->INIT->RTR->RTS, arm the CQ and
// post 512 receives of 296 bytes.
func (d *Driver) KernelGSI() (pd uint32, lkey uint32, cq *CQ, qp *QP, err error) {
	if pd, err = d.CreatePD(0); err != nil {
		return
	}
	var mr abi.CmdCreateMRResp
	err = d.MustCmd(&abi.CmdCreateMR{PDHandle: pd, AccessFlags: abi.AccessLocalWrite, Flags: abi.MRFlagDMA}, &mr)
	if err != nil {
		return
	}
	lkey = mr.LKey
	if cq, err = d.CreateCQ(0, 1024); err != nil {
		return
	}
	qp, err = d.CreateQP(QPSpec{PD: pd, SendCQ: cq, RecvCQ: cq, Type: abi.QPTypeGSI,
		SendWR: 128, RecvWR: 512, SendSGE: 2, RecvSGE: 1, SigAll: true})
	if err != nil {
		return
	}
	if qp.QPN != 1 {
		err = fmt.Errorf("GSI QP has QPN %d", qp.QPN)
		return
	}
	steps := []struct {
		mask uint32
		a    abi.QPAttr
	}{
		{abi.AttrState | abi.AttrPKeyIndex | abi.AttrQKey, abi.QPAttr{State: abi.QPStateInit, QKey: 0x80010000}},
		{abi.AttrState, abi.QPAttr{State: abi.QPStateRTR}},
		{abi.AttrState | abi.AttrSQPSN, abi.QPAttr{State: abi.QPStateRTS}},
	}
	for _, s := range steps {
		if err = qp.Modify(s.mask, s.a); err != nil {
			return
		}
	}
	cq.Arm(false)
	bufs := d.AllocPages(512*296/4096 + 1)
	for i := 0; i < 512; i++ {
		qp.PostRecv(uverbs.RecvWQE{WRID: uint64(i), SGE: []uverbs.SGE{{Addr: bufs + uint64(i)*296, Length: 296, LKey: lkey}}})
	}
	return
}

// SRQ is a shared receive queue as the provider keeps it.
type SRQ struct {
	d      *Driver
	Handle uint32
	N      uint32
	Pages  []uint64
	stride uint32
	prod   uint32
	UAR    uint32
}

// CreateSRQ creates an SRQ of n WQEs with maxSGE SGEs on PD pd.
func (d *Driver) CreateSRQ(pd, n, maxSGE, limit uint32) (*SRQ, error) {
	stride := uverbs.RQStride(maxSGE)
	npages := 1 + (int(n*stride)+4095)/4096
	pages, dir := d.Buffer(npages)
	var rsp abi.CmdCreateSRQResp
	err := d.MustCmd(&abi.CmdCreateSRQ{PdirDMA: dir, PDHandle: pd, NChunks: uint32(npages),
		Attrs: abi.SRQAttr{MaxWR: n, MaxSGE: maxSGE, SRQLimit: limit}}, &rsp)
	if err != nil {
		return nil, err
	}
	return &SRQ{d: d, Handle: rsp.SRQN, N: n, Pages: pages, stride: stride}, nil
}

// PostRecv writes a receive WQE into the SRQ and rings its doorbell.
func (s *SRQ) PostRecv(w uverbs.RecvWQE) {
	if w.NumSGE == 0 {
		w.NumSGE = uint32(len(w.SGE))
	}
	off := 4096 + uint64((s.prod&(s.N-1))*s.stride)
	gpa := s.Pages[off/4096] + off%4096
	w.Encode(s.d.RAM.Mem[gpa : gpa+uint64(s.stride)])
	s.prod = uverbs.Ring{N: s.N}.Next(s.prod)
	s.d.Put32(s.Pages[0]+uverbs.RxProdTail, s.prod)
	s.d.Doorbell(s.UAR, 8, s.Handle|1<<30)
}

// CQNotifications drains the CQ notification ring and returns CQ handles.
func (d *Driver) CQNotifications() []uint32 {
	st := d.CQRing[0]
	r := uverbs.Ring{N: uint32((len(d.CQRing) - 1) * 4096 / abi.CQNESize)}
	var out []uint32
	for i := 0; i < 4096; i++ {
		prod := d.Get32(st + uverbs.RxProdTail)
		if d.cqnCons == prod {
			break
		}
		off := uint64(4096 + r.Slot(d.cqnCons)*abi.CQNESize)
		gpa := d.CQRing[off/4096] + off%4096
		var cqne abi.CQNE
		cqne.Decode(d.RAM.Mem[gpa : gpa+abi.CQNESize])
		out = append(out, cqne.Info)
		d.cqnCons = r.Next(d.cqnCons)
		d.Put32(st+uverbs.RxConsHead, d.cqnCons)
	}
	return out
}

// CreatePD creates a PD for context ctx (0: a kernel PD).
func (d *Driver) CreatePD(ctx uint32) (uint32, error) {
	var rsp abi.CmdCreatePDResp
	err := d.MustCmd(&abi.CmdCreatePD{CtxHandle: ctx}, &rsp)
	return rsp.PDHandle, err
}

// CreateUC creates a user context on UAR page page of BAR2.
func (d *Driver) CreateUC(page uint32) (uint32, error) {
	var rsp abi.CmdCreateUCResp
	err := d.MustCmd(&abi.CmdCreateUC{PFN64: d.BAR2>>12 + uint64(page)}, &rsp)
	return rsp.CtxHandle, err
}

// CreateMR sends CREATE_MR and returns the response.
func (d *Driver) CreateMR(req abi.CmdCreateMR) (abi.CmdCreateMRResp, error) {
	var rsp abi.CmdCreateMRResp
	err := d.MustCmd(&req, &rsp)
	return rsp, err
}

// BindGID installs a RoCE v2 GID at index idx of the GID table.
func (d *Driver) BindGID(idx uint32, gid [16]byte) error {
	return d.MustCmd(&abi.CmdCreateBind{Index: idx, NewGID: gid, GIDType: abi.GIDTypeFlagRoCEv2}, nil)
}

// QueryPort sends QUERY_PORT for port.
func (d *Driver) QueryPort(port uint8) (abi.PortAttr, error) {
	var rsp abi.CmdQueryPortResp
	err := d.MustCmd(&abi.CmdQueryPort{PortNum: port}, &rsp)
	return rsp.Attrs, err
}

// CreateRCQP makes what an RC QP needs and the QP: a PD, a 16-entry CQ for
// both its queues, and the QP with wr entries in each queue (one SGE each).
func (d *Driver) CreateRCQP(wr uint32) (pd uint32, cq *CQ, qp *QP, err error) {
	if pd, err = d.CreatePD(0); err != nil {
		return 0, nil, nil, err
	}
	if cq, err = d.CreateCQ(0, 16); err != nil {
		return 0, nil, nil, err
	}
	qp, err = d.CreateQP(QPSpec{PD: pd, SendCQ: cq, RecvCQ: cq, Type: abi.QPTypeRC, SendWR: wr, RecvWR: wr, SendSGE: 1, RecvSGE: 1})
	return pd, cq, qp, err
}
