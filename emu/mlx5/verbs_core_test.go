package mlx5

import (
	"encoding/binary"
	"math/bits"
	"testing"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/hca"
	ibpkg "github.com/hcaemu/hcaemu/emu/ib"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/mlx5/mlx5test"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/transport"
	"github.com/hcaemu/hcaemu/emu/verbstest"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// TestCore runs the core-behaviour tests every device model passes
// (package verbstest) against the mlx5 model, through its fake driver, on
// an InfiniBand subnet, every one of them: its QPs are created as the
// kernel creates its own (fre), so fast registration and LOCAL_INV are
// UMR WQEs (frwr.go).
func TestCore(t *testing.T) {
	verbstest.CheckGoroutines(t)
	verbstest.RunCore(t, newVerbsHost)
}

// ibProbeMkeys is the number of mkeys mlx5_ib's probe and ib_mad leave
// (the UMR PD's, p0's and the MAD PD's DMA keys).
const ibProbeMkeys = 3

// newVerbsHost is the mlx5 fake driver as verbstest's NewHost: a
// ConnectX-4 on net's subnet after mlx5_core's and mlx5_ib's probe, a PD
// and a CQ; the test's memory (Alloc) is a pool of its own, apart from
// everything the driver allocates.
func newVerbsHost(t *testing.T, net *verbstest.Net, k int, opts verbstest.HostOpts) verbstest.Host {
	t.Helper()
	ram := opts.RAM
	if ram == 0 {
		ram = 64 << 20
	}
	ram = (ram + 4095) &^ 4095
	const driverRAM = 16 << 20 // the driver's own structures (verbsRAM)
	mem := dma.NewFlat(ramBase, driverRAM+ram)
	cfg := Config{Name: "hca" + string(rune('0'+k)), Subnet: net.Subnet, NodeGUID: 0x0002c90300000000 | uint64(k)<<8,
		SequentialQPNs: opts.SequentialQPNs, StepClock: opts.SequentialQPNs, Mem: mem, Log: quiet, Strict: hca.StrictWarn}
	if opts.Regions != 0 {
		cfg.Mkeys = ibProbeMkeys + opts.Regions
	}
	var watch *verbstest.WriteWatch
	if opts.Watch {
		watch = verbstest.NewWriteWatch(mem)
		cfg.Mem = watch
	}
	d := New(cfg)
	t.Cleanup(d.Close)
	drv := mlx5test.New(d, mem)
	ib := probeIB(t, drv)
	d.core.Lock()
	mkeys := d.fn.obj.mkeys.Len()
	d.core.Unlock()
	if mkeys != ibProbeMkeys {
		t.Fatalf("%d mkeys after the probe, want %d", mkeys, ibProbeMkeys)
	}
	pool := drv.Alloc(uint64(ram), 4096)
	if watch != nil {
		// The device may write everything the driver allocates (command
		// queue and mailboxes, EQs, CQs, firmware pages), nothing of the
		// test's pool but what a test allows.
		watch.Allow("driver", ramBase, pool-ramBase)
		watch.Allow("driver", pool+uint64(ram), driverRAM-(pool-ramBase))
	}
	h := &verbsHost{t: t, d: d, drv: drv, lid: ib.LID, gid: ibpkg.MakeGID(net.Subnet.GIDPrefix(), ib.PortGUID), watch: watch,
		verbsState: &verbsState{pool: pool, poolEnd: pool + uint64(ram), qps: map[uint32]*verbsQP{}}}
	h.pd = h.NewPD()
	h.cq = h.newCQ()
	return h
}

// verbsHost is the mlx5 fake driver as a verbstest.Host.
type verbsHost struct {
	*verbsState // shared with the host's Fresh contexts
	t           *testing.T
	d           *Device
	drv         *mlx5test.Driver
	lid         uint16
	gid         ibpkg.GID
	watch       *verbstest.WriteWatch
	pd          uint32
	cq          *mlx5test.CQ
	ci          uint32
}

// verbsState is what the driver knows of the objects it made.
type verbsState struct {
	pool, poolEnd uint64 // Alloc's memory
	next          uint64
	qps           map[uint32]*verbsQP // by QPN
	events        [][2]uint32         // QP events read from the async EQ: type, QPN
}

// verbsQP is an RC QP and the work request IDs of its posted WQEs.
type verbsQP struct {
	h      *verbsHost
	wq     *mlx5test.WQ
	sq, rq map[uint16]uint64 // WR IDs by WQE counter (masked)
	// umrOps: what each posted UMR WQE was (REG_MR or LOCAL_INV), by
	// WQE counter (masked).
	umrOps map[uint16]transport.WCOpcode
	sqMask uint16
	rqMask uint16
}

func (h *verbsHost) Alloc(n int) uint64 {
	gpa := h.pool + h.next
	size := (uint64(n) + 4095) &^ 4095
	if gpa+size > h.poolEnd {
		h.t.Fatalf("Alloc(%d): the test's memory is exhausted", n)
	}
	h.next += size
	clear(h.drv.Bytes(gpa, int(size)))
	return gpa
}

func (h *verbsHost) Mem(addr uint64, n int) []byte { return h.drv.Bytes(addr, n) }
func (h *verbsHost) Addr() verbstest.Addr          { return verbstest.Addr{LID: h.lid, GID: h.gid} }
func (h *verbsHost) PD() uint32                    { return h.pd }

// Caps: InfiniBand, no direct path, no fast registration (UMR WQEs:
// issue 26).
func (h *verbsHost) Caps() verbstest.Caps {
	return verbstest.Caps{LinkLayer: verbstest.InfiniBand, Direct: true, FastReg: true}
}

func (h *verbsHost) NewPD() uint32 {
	pd, err := h.drv.AllocPD()
	if err != nil {
		h.t.Fatal(err)
	}
	return pd
}

func (h *verbsHost) newCQ() *mlx5test.CQ {
	cq, err := h.drv.KernelCQ(1024)
	if err != nil {
		h.t.Fatal(err)
	}
	h.hold(func() { h.drv.InitCQ(cq) })
	return cq
}

func (h *verbsHost) hold(fn func()) { h.d.core.Lock(); defer h.d.core.Unlock(); fn() }

func (h *verbsHost) RegMRAt(pd uint32, va, addr uint64, n int, access uint32) (lkey, rkey uint32) {
	h.t.Helper()
	if va == 0 {
		va = addr
	}
	first := addr &^ 4095
	var mtt []uint64
	for p := first; p < addr+uint64(n); p += 4096 {
		mtt = append(mtt, p)
	}
	if len(mtt)%2 == 1 {
		mtt = append(mtt, 0)
	}
	key, err := h.drv.CreateMkey(h.drv.CreateMkeyIn(mlx5test.MkeyArgs{PD: pd, Mode: ifc.MkcAccessModeMTT,
		Access: access & 0xf, Start: va, Len: uint64(n), LogPageSize: 12, MTT: mtt}))
	if err != nil {
		h.t.Fatalf("CREATE_MKEY: %v", err)
	}
	return key.Key, key.Key
}

func (h *verbsHost) RegMR(addr uint64, n int, access uint32) (lkey, rkey uint32) {
	h.t.Helper()
	return h.RegMRAt(h.pd, 0, addr, n, access)
}

// AllocFRMR is mlx5_ib_alloc_mr(IB_MR_TYPE_MEM_REG): a free MTT mkey with
// room for pages translations, which a UMR WQE would give it.
func (h *verbsHost) AllocFRMR(pages int) (lkey, rkey uint32) {
	h.t.Helper()
	key, err := h.drv.CreateMkey(h.drv.CreateMkeyIn(mlx5test.MkeyArgs{PD: h.pd, Mode: ifc.MkcAccessModeMTT, Free: true,
		LogPageSize: 12, Octwords: uint32(pages+3) &^ 3, OmitActualOctets: true})) // ndescs = ALIGN(max_num_sg, 4)
	if err != nil {
		h.t.Fatalf("CREATE_MKEY (free): %v", err)
	}
	return key.Key, key.Key
}

func (h *verbsHost) DeregMR(lkey uint32) error {
	return h.drv.DestroyMkey(mlx5test.Mkey{Key: lkey})
}

// log2 is ⌈log₂ n⌉.
func log2(n uint32) uint32 { return uint32(bits.Len32(max(n, 1) - 1)) }

func (h *verbsHost) CreateRCQP(depth uint32) verbstest.QP {
	h.t.Helper()
	logRQ := log2(depth)
	logSQ := log2(depth) + 2 // a WQE of up to four WQEBBs (a fast registration's three)
	args := mlx5test.QPArgs{St: ifc.QPStRC, PD: h.pd, SndCQ: h.cq.CQN, RcvCQ: h.cq.CQN,
		LogRQ: logRQ, LogRQStride: 2, LogSQ: logSQ, UAR: h.drv.UAR, Fre: true}
	in, q := h.drv.CreateQPIn(args)
	q, err := h.drv.CreateQP(in, q)
	if err != nil {
		h.t.Fatalf("CREATE_QP: %v", err)
	}
	qp := &verbsQP{h: h, sq: map[uint16]uint64{}, rq: map[uint16]uint64{}, umrOps: map[uint16]transport.WCOpcode{},
		sqMask: uint16(1)<<logSQ - 1, rqMask: uint16(1)<<logRQ - 1,
		wq: &mlx5test.WQ{Q: q, UAR: h.drv.UAR, LogRQ: uint8(logRQ), RQStride: 64, LogSQ: uint8(logSQ), Hold: h.hold}}
	h.qps[q.QPN] = qp
	return qp
}

func (h *verbsHost) Connect(q verbstest.QP, peer verbstest.Host, pq verbstest.QP, o verbstest.RCOpts) {
	h.t.Helper()
	connectRC(h.t, h.drv, q.(*verbsQP).wq.Q, rcConn{lid: peer.(*verbsHost).lid, qpn: pq.QPN(),
		sendPSN: verbstest.StartPSN(q.QPN()), rcvPSN: verbstest.StartPSN(pq.QPN()),
		timeout: o.Timeout, retry: o.RetryCnt, rnrRetry: o.RNRRetry})
}

// rcConn is what connectRC sets of an RC connection.
type rcConn struct {
	lid                      uint16
	qpn, sendPSN, rcvPSN     uint32
	timeout, retry, rnrRetry uint8
}

// connectRC walks RC QP q to RTS towards c.lid, QP c.qpn (path MTU 1024,
// remote read, write and atomics, four outstanding READs and atomics
// each way), as mlx5_ib's modify_qp sends the transitions.
func connectRC(t testing.TB, drv *mlx5test.Driver, q *mlx5test.QP, c rcConn) {
	t.Helper()
	steps := []struct {
		op  ifc.Opcode
		set func([]byte)
	}{
		{ifc.OpRst2InitQP, func(qpc []byte) {
			ifc.PriPath(ifc.ADSVhcaPortNum).Set(qpc, 1)
			ifc.QPCRRE.Set(qpc, 1)
			ifc.QPCRWE.Set(qpc, 1)
			ifc.QPCRAE.Set(qpc, 1)
		}},
		{ifc.OpInit2RTRQP, func(qpc []byte) {
			ifc.PriPath(ifc.ADSRLID).Set(qpc, uint32(c.lid))
			ifc.PriPath(ifc.ADSVhcaPortNum).Set(qpc, 1)
			ifc.QPCMTU.Set(qpc, 3) // 1024
			ifc.QPCLogMsgMax.Set(qpc, 30)
			ifc.QPCRemoteQPN.Set(qpc, c.qpn)
			ifc.QPCNextRcvPSN.Set(qpc, c.rcvPSN)
			ifc.QPCLogRRAMax.Set(qpc, 2)
			ifc.QPCMinRNRNak.Set(qpc, 1)
		}},
		{ifc.OpRTR2RTSQP, func(qpc []byte) {
			ifc.QPCNextSendPSN.Set(qpc, c.sendPSN)
			ifc.PriPath(ifc.ADSAckTimeout).Set(qpc, uint32(c.timeout))
			ifc.QPCRetryCount.Set(qpc, uint32(c.retry))
			ifc.QPCRNRRetry.Set(qpc, uint32(c.rnrRetry))
			ifc.QPCLogSRAMax.Set(qpc, 2)
		}},
	}
	for _, s := range steps {
		if err := drv.ModifyQP(s.op, q, 0, s.set); err != nil {
			t.Fatalf("%v: %v", s.op, err)
		}
	}
}

func (h *verbsHost) QPState(q verbstest.QP) transport.State {
	_, st, ok := h.d.QPState(q.QPN())
	if !ok {
		h.t.Fatalf("QP %#x: no such QP", q.QPN())
	}
	return st
}

// Raised reads the async EQ (as mlx5_eq_async_int does) and reports
// whether a QP event of ev's type for q came.
func (h *verbsHost) Raised(q verbstest.QP, ev hca.Event) bool {
	h.hold(func() {
		for e := h.drv.NextEQE(h.drv.AsyncEQ); e != nil; e = h.drv.NextEQE(h.drv.AsyncEQ) {
			if e[eqeQPType] == 0 {
				h.events = append(h.events, [2]uint32{uint32(e[ifc.EQEType]), binary.BigEndian.Uint32(e[eqeQPNumber:]) & 0xffffff})
			}
		}
	})
	h.drv.UpdateCI(h.drv.AsyncEQ, true) // a register write: the device takes its lock
	want, ok := qpEvents[qpErrorEvents[ev]]
	if !ok {
		h.t.Fatalf("event %v: no mlx5 QP event", ev)
	}
	for _, e := range h.events {
		if e == [2]uint32{uint32(want), q.QPN()} {
			return true
		}
	}
	return false
}

func (h *verbsHost) Sync()                                            { h.d.Sync() }
func (h *verbsHost) Idle() bool                                       { return h.d.core.Idle() }
func (h *verbsHost) Stats() (hca.DeviceStats, map[uint32]hca.QPStats) { return h.d.CoreStats() }
func (h *verbsHost) Hold(fn func())                                   { h.hold(fn) }
func (h *verbsHost) HoldTaking(fn func())                             { h.d.core.HoldTaking(fn) }
func (h *verbsHost) Helped() uint64                                   { return h.d.core.Helped() }
func (h *verbsHost) Reset()                                           { h.d.Reset() }
func (h *verbsHost) Watch() *verbstest.WriteWatch                     { return h.watch }

func (h *verbsHost) Alive() error {
	_, err := h.drv.QueryHCAVportContext()
	return err
}

func (h *verbsHost) Fresh() verbstest.Host {
	f := *h
	f.pd = h.NewPD()
	f.cq = h.newCQ()
	f.ci = 0
	return &f
}

// The CQE values (mlx5dv.h) back in the core's terms.
var (
	wcStatuses = func() map[uint8]transport.Status {
		m := map[uint8]transport.Status{}
		for st, synd := range syndromes {
			m[synd] = st
		}
		return m
	}()
	reqOpcodes = map[uint8]transport.WCOpcode{
		uverbs.OpcodeSend: transport.WCSend, uverbs.OpcodeSendImm: transport.WCSend, uverbs.OpcodeSendInval: transport.WCSend,
		uverbs.OpcodeRDMAWrite: transport.WCWrite, uverbs.OpcodeRDMAWriteImm: transport.WCWrite,
		uverbs.OpcodeRDMARead: transport.WCRead, uverbs.OpcodeAtomicCS: transport.WCCompSwap,
		uverbs.OpcodeAtomicFA: transport.WCFetchAdd,
	}
	wqeOpcodes = func() map[transport.Opcode]uint8 {
		m := map[transport.Opcode]uint8{}
		for op, t := range sendOpcodes {
			m[t] = op
		}
		return m
	}()
)

// Poll polls the host's CQ as mlx5_poll_one does: a CQE names its QP and
// WQE counter, whose WR ID the driver kept.
func (h *verbsHost) Poll() (verbstest.WC, bool) {
	h.d.Sync()
	var cqe []byte
	var ok bool
	h.hold(func() { cqe, ok = h.drv.PollCQ(h.cq, &h.ci) })
	if !ok {
		return verbstest.WC{}, false
	}
	op := cqe[uverbs.OpOwnOffset] >> 4
	if op == uverbs.CQEReqErr || op == uverbs.CQERespErr {
		e := uverbs.DecodeErrCQE(cqe)
		st, known := wcStatuses[e.Syndrome]
		if !known {
			h.t.Fatalf("error CQE syndrome %#x is no status the device should write", e.Syndrome)
		}
		wc := verbstest.WC{Status: st, QPN: e.QPN, Recv: op == uverbs.CQERespErr, Entry: e}
		wc.ID = h.wrid(e.QPN, wc.Recv, e.WQECounter)
		return wc, true
	}
	c := uverbs.DecodeCQE(cqe)
	wc := verbstest.WC{Status: transport.StatusSuccess, QPN: c.QPN, ByteLen: c.ByteCnt, Entry: c}
	switch op {
	case uverbs.CQEReq:
		wc.Opcode = reqOpcodes[c.SOpcode]
		if c.SOpcode == uverbs.OpcodeUMR {
			// The kernel's own bookkeeping (wr_data): REG_MR or LOCAL_INV.
			wc.Opcode = h.qps[c.QPN].umrOps[c.WQECounter&h.qps[c.QPN].sqMask]
		}
	case uverbs.CQERespSend, uverbs.CQERespSendInv:
		wc.Recv, wc.Opcode = true, transport.WCRecv
	case uverbs.CQERespSendImm:
		wc.Recv, wc.Opcode, wc.WithImm, wc.Imm = true, transport.WCRecv, true, c.ImmInvalPkey
	case uverbs.CQERespWRImm:
		wc.Recv, wc.Opcode, wc.WithImm, wc.Imm = true, transport.WCRecvWriteImm, true, c.ImmInvalPkey
	default:
		h.t.Fatalf("CQE opcode %d is no completion an RC QP should get", op)
	}
	wc.ID = h.wrid(c.QPN, wc.Recv, c.WQECounter)
	if op == uverbs.CQEReq {
		// handle_good_req: byte_len is the CQE's for a READ, 8 for an
		// atomic, nothing for the rest.
		switch c.SOpcode {
		case uverbs.OpcodeRDMARead:
		case uverbs.OpcodeAtomicCS, uverbs.OpcodeAtomicFA:
			wc.ByteLen = 8
		default:
			wc.ByteLen = 0
		}
	}
	return wc, true
}

// wrid is the WR ID of the WQE a CQE of QP qpn names.
func (h *verbsHost) wrid(qpn uint32, recv bool, counter uint16) uint64 {
	q := h.qps[qpn]
	if q == nil {
		h.t.Fatalf("CQE of QP %#x, which the driver did not make", qpn)
	}
	if recv {
		return q.rq[counter&q.rqMask]
	}
	return q.sq[counter&q.sqMask]
}

func (q *verbsQP) QPN() uint32 { return q.wq.Q.QPN }

func dataSegs(in []mr.SGE) []uverbs.DataSeg {
	out := make([]uverbs.DataSeg, len(in))
	for i, s := range in {
		out[i] = uverbs.DataSeg{Addr: s.Addr, ByteCount: s.Length, LKey: s.LKey}
	}
	return out
}

// PostSend writes wr as an mlx5 send WQE (signaled) and rings the doorbell.
func (q *verbsQP) PostSend(wr verbstest.SendWR) {
	if w, ok := q.umrWQE(wr); ok {
		idx := q.wq.SQPI
		q.sq[idx&q.sqMask] = wr.ID
		q.umrOps[idx&q.sqMask] = transport.WCFastReg
		if wr.Opcode == transport.OpLocalInv {
			q.umrOps[idx&q.sqMask] = transport.WCLocalInv
		}
		q.h.drv.PostSend(q.wq, &w)
		return
	}
	op, ok := wqeOpcodes[wr.Opcode]
	if !ok {
		q.h.t.Fatalf("send opcode %v: the model carries out no such WQE", wr.Opcode)
	}
	w := &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: op, FMCESE: uverbs.WQECtrlCQUpdate}, Data: dataSegs(wr.SGEs)}
	switch wr.Opcode {
	case transport.OpWrite, transport.OpWriteImm, transport.OpRead:
		w.Segs |= uverbs.HasRAddr
		w.RAddr = uverbs.RAddrSeg{RAddr: wr.RemoteAddr, RKey: wr.RKey}
	case transport.OpCompSwap, transport.OpFetchAdd:
		w.Segs |= uverbs.HasRAddr | uverbs.HasAtomic
		w.RAddr = uverbs.RAddrSeg{RAddr: wr.RemoteAddr, RKey: wr.RKey}
		w.Atomic = uverbs.AtomicSeg{SwapAdd: wr.CompareAdd}
		if wr.Opcode == transport.OpCompSwap {
			w.Atomic = uverbs.AtomicSeg{SwapAdd: wr.Swap, Compare: wr.CompareAdd}
		}
	case transport.OpSendInv:
		w.Ctrl.Imm = wr.InvalidateKey
	}
	if wr.Opcode == transport.OpSendImm || wr.Opcode == transport.OpWriteImm {
		w.Ctrl.Imm = wr.Imm
	}
	idx := q.wq.SQPI
	q.sq[idx&q.sqMask] = wr.ID
	q.h.drv.PostSend(q.wq, w)
}

// umrWQE is the kernel's UMR WQE for a fast registration (set_reg_wr: an
// MTT list of 4 KiB pages, inline up to 8 entries, else through a DMA key
// of the QP's PD) or a LOCAL_INV (set_linv_wr); false for other WRs.
func (q *verbsQP) umrWQE(wr verbstest.SendWR) (uverbs.SendWQE, bool) {
	switch wr.Opcode {
	case transport.OpLocalInv:
		return mlx5test.KernelLocalInvWQE(wr.InvalidateKey), true
	case transport.OpFastReg:
	default:
		return uverbs.SendWQE{}, false
	}
	fr := wr.FastReg
	list := make([]byte, 8*len(fr.Pages))
	for i, p := range fr.Pages {
		binary.BigEndian.PutUint64(list[8*i:], p|3)
	}
	if len(list) <= 64 {
		return mlx5test.RegMRWQE(fr.Key, mlx5test.ModeMTT, fr.Access, fr.IOVA, uint64(fr.Length), 12, list, nil), true
	}
	h := q.h
	dmaKey, err := h.drv.DMAMkey(h.pd)
	if err != nil {
		h.t.Fatalf("the PD's DMA key: %v", err)
	}
	n := (len(list) + 63) &^ 63
	at := h.Alloc(n)
	copy(h.Mem(at, n), list)
	ptr := uverbs.DataSeg{Addr: at, ByteCount: uint32(n), LKey: dmaKey.Key}
	return mlx5test.RegMRWQE(fr.Key, mlx5test.ModeMTT, fr.Access, fr.IOVA, uint64(fr.Length), 12, nil, &ptr), true
}

// PostSends posts wrs (a doorbell each: the fake driver rings one per
// WQE).
func (q *verbsQP) PostSends(wrs ...verbstest.SendWR) {
	for _, wr := range wrs {
		q.PostSend(wr)
	}
}

func (q *verbsQP) PostRecv(wr verbstest.RecvWR) {
	q.rq[q.wq.RQPI&q.rqMask] = wr.ID
	q.h.drv.PostRecv(q.wq, dataSegs(wr.SGEs)...)
}

// TestMkeyLimit: Config.Mkeys bounds the mkey table: past it CREATE_MKEY
// fails, and the index a DESTROY_MKEY frees is the next one handed out,
// under another key.
func TestMkeyLimit(t *testing.T) {
	_, drv, _, _ := ibProbed(t, Config{Mkeys: ibProbeMkeys + 1})
	pd, err := drv.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	buf := drv.Alloc(4096, 4096)
	in := func() []byte {
		return drv.CreateMkeyIn(mlx5test.MkeyArgs{PD: pd, Mode: ifc.MkcAccessModeMTT, Access: 1, Start: buf, Len: 4096,
			LogPageSize: 12, MTT: []uint64{buf, 0}})
	}
	k1, err := drv.CreateMkey(in())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := drv.CreateMkey(in()); err == nil {
		t.Fatal("CREATE_MKEY past Config.Mkeys succeeded")
	}
	if err := drv.DestroyMkey(k1); err != nil {
		t.Fatal(err)
	}
	k2, err := drv.CreateMkey(in())
	if err != nil {
		t.Fatal(err)
	}
	if mr.Handle(k2.Key) != mr.Handle(k1.Key) || k2.Key == k1.Key {
		t.Fatalf("keys %#x then %#x: want the same index under another key", k1.Key, k2.Key)
	}
}
