package mlx5

import (
	"bytes"
	"testing"

	"github.com/hcaemu/hcaemu/emu/ib/subnet"
	"github.com/hcaemu/hcaemu/emu/mlx5/mlx5test"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// The extended-verbs repertoire (docs/mlx5.md "Extended verbs"): every
// ibv_wr_* builder rdma-core's mlx5 provider lets a program use on this
// device (providers/mlx5/qp.c, mlx5_qp_fill_wr_pfns: the send_ops_flags
// it accepts per QP type), posted as the builder lays its WQE out, and
// its effect checked on the peer.

// wrOp is an ibv_wr_* builder.
type wrOp int

const (
	wrSend      wrOp = iota // ibv_wr_send
	wrSendImm               // ibv_wr_send_imm
	wrSendInv               // ibv_wr_send_inv
	wrWrite                 // ibv_wr_rdma_write
	wrWriteImm              // ibv_wr_rdma_write_imm
	wrRead                  // ibv_wr_rdma_read
	wrCmpSwp                // ibv_wr_atomic_cmp_swp
	wrFetchAdd              // ibv_wr_atomic_fetch_add
	wrBindMW                // ibv_wr_bind_mw
	wrLocalInv              // ibv_wr_local_inv
	wrRawMasked             // mlx5dv_wr_raw_wqe of a masked compare-swap
)

// wrOpcode is the provider's mlx5_ib_opcode[] for each builder.
var wrOpcode = map[wrOp]uint8{
	wrSend: uverbs.OpcodeSend, wrSendImm: uverbs.OpcodeSendImm, wrSendInv: uverbs.OpcodeSendInval,
	wrWrite: uverbs.OpcodeRDMAWrite, wrWriteImm: uverbs.OpcodeRDMAWriteImm, wrRead: uverbs.OpcodeRDMARead,
	wrCmpSwp: uverbs.OpcodeAtomicCS, wrFetchAdd: uverbs.OpcodeAtomicFA,
	wrBindMW: uverbs.OpcodeUMR, wrLocalInv: uverbs.OpcodeUMR, wrRawMasked: uverbs.OpcodeAtomicMaskedCS,
}

// wr is one builder call with its setters: what the program passes.
type wr struct {
	op               wrOp
	rkey             uint32
	raddr            uint64
	imm              uint32 // the immediate, or the key SEND_INV / LOCAL_INV name
	compare, swapAdd uint64
	sge              []uverbs.DataSeg // ibv_wr_set_sge_list
	inline           []byte           // ibv_wr_set_inline_data (instead)
	bind             mlx5test.Bind    // ibv_wr_bind_mw
}

// wqe is the WQE the provider's builder writes for w on a QP of service
// type st whose fm_cache is fm: _common_wqe_init_op's control segment
// (fm_ce_se: the cached fence, CQ_UPDATE), then _mlx5_send_wr_send,
// _mlx5_send_wr_rdma, _mlx5_send_wr_atomic (the XRC segment of
// ibv_wr_set_xrc_srqn after the control segment, the datagram segment of
// ibv_wr_set_ud_addr on UD), _build_umr_wqe (set_bind_wr as type 2
// always, no XRC segment; ctrl.imm the window's key), and the setters'
// data segments (zero-length ones skipped) or inline segment.
func (w wr) wqe(st uverbs.ST, fm uint8, srqn uint32, av uverbs.AV) uverbs.SendWQE {
	const cqUpdate = 0x08
	if w.op == wrBindMW || w.op == wrLocalInv {
		b := w.bind
		if w.op == wrLocalInv {
			b = mlx5test.Bind{MW: w.imm, Type2: true} // rkey 0, empty bind info
		}
		q := mlx5test.BindMWWQE(b, false)
		q.Ctrl.FMCESE = fm | cqUpdate // the fence is the next WQE's (fm_cache)
		return q
	}
	q := uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: wrOpcode[w.op], FMCESE: fm | cqUpdate}}
	switch st {
	case uverbs.STXRC:
		q.Segs, q.XRCSRQN = uverbs.HasXRC, srqn
	case uverbs.STUD:
		q.Segs, q.AV = uverbs.HasAV, av
	}
	switch w.op {
	case wrSendImm, wrWriteImm, wrSendInv:
		q.Ctrl.Imm = w.imm // imm_data as given (big-endian); htobe32(invalidate_rkey)
	}
	switch w.op {
	case wrWrite, wrWriteImm, wrRead:
		q.Segs |= uverbs.HasRAddr
		q.RAddr = uverbs.RAddrSeg{RAddr: w.raddr, RKey: w.rkey}
	case wrCmpSwp, wrFetchAdd:
		q.Segs |= uverbs.HasRAddr | uverbs.HasAtomic
		q.RAddr = uverbs.RAddrSeg{RAddr: w.raddr, RKey: w.rkey}
		q.Atomic = uverbs.AtomicSeg{SwapAdd: w.swapAdd, Compare: w.compare}
	case wrRawMasked:
		q.Segs |= uverbs.HasRAddr | uverbs.HasMaskedAtomic
		q.RAddr = uverbs.RAddrSeg{RAddr: w.raddr, RKey: w.rkey}
		q.Atomic = uverbs.AtomicSeg{SwapAdd: w.swapAdd, Compare: w.compare, SwapAddMask: ^uint64(0), CompareMask: ^uint64(0)}
	}
	if w.inline != nil {
		q.Segs |= uverbs.HasInline
		q.Inline = w.inline
		return q
	}
	for _, s := range w.sge {
		if s.ByteCount != 0 {
			q.Data = append(q.Data, s)
		}
	}
	return q
}

// wrEnds is a requester and its peer of one service type.
type wrEnds struct {
	st       uverbs.ST
	req      *rcEnd // posts the requests
	resp     *rcEnd // the requests land in its memory (XRC: the target QP)
	recv     *rcEnd // polls the receive CQEs (XRC: the XRC SRQ's CQ)
	postRecv func(off uint64, n uint32)
	srqn     uint32
	av       uverbs.AV
	grh      uint64 // the receive buffer's GRH area (UD: 40 bytes)
	fm       uint8  // the requester's fm_cache: SMALL_FENCE after a UMR
}

func newWREnds(t *testing.T, st uverbs.ST) *wrEnds {
	t.Helper()
	e := &wrEnds{st: st}
	switch st {
	case uverbs.STRC:
		e.req, e.resp = rcPair(t)
	case uverbs.STUC:
		e.req, e.resp = ucPair(t, subnet.New(subnet.Config{}))
	case uverbs.STUD:
		_, e.req, e.resp = udPair(t)
		e.av = uverbs.AV{QKey: testQKey, DQPDCT: e.resp.wq.Q.QPN, RLID: e.resp.lid}
		e.grh = 40
	case uverbs.STXRC:
		x := newXRC(t)
		e.req, e.resp, e.recv, e.srqn = x.ini, x.tgt, x.srqEnd, x.srq.N
		e.postRecv = func(off uint64, n uint32) { x.tgt.drv.PostSRQRecv(x.ring, x.tgt.seg(off, n)) }
	}
	if e.recv == nil {
		e.recv = e.resp
		e.postRecv = func(off uint64, n uint32) { e.resp.drv.PostRecv(e.resp.wq, e.resp.seg(off, n)) }
	}
	return e
}

// post posts w on the requester, signaled, and returns its index and CQE.
func (e *wrEnds) post(t *testing.T, w wr) (uint16, []byte) {
	t.Helper()
	q := w.wqe(e.st, e.fm, e.srqn, e.av)
	e.fm = 0
	if q.Ctrl.Opcode == uverbs.OpcodeUMR {
		e.fm = 0x20 // MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE
	}
	idx := e.req.drv.PostSend(e.req.wq, &q)
	return idx, e.req.poll(t)
}

// bindType2 binds a new type-2 window over [mwOff, +mwLen) of the
// requester's region with ibv_wr_bind_mw and returns its key.
func (e *wrEnds) bindType2(t *testing.T) (mw, key uint32) {
	t.Helper()
	mw = e.req.allocMW(t, true)
	args := e.req.bindArgs(mw, true)
	idx, cqe := e.post(t, wr{op: wrBindMW, bind: args})
	checkReq(t, cqe, e.req.wq.Q.QPN, idx, uverbs.OpcodeUMR, 0)
	return mw, mw&^0xff | uint32(args.NewKey)
}

// window is the state of the requester's window mw.
func (e *wrEnds) window(mw uint32) (valid bool, key, qpn uint32) {
	d := e.req.d
	d.core.Lock()
	defer d.core.Unlock()
	r := d.fn.obj.Region(mw >> 8)
	return r.Valid, r.LKey, r.Window.QPN
}

// peerWrite has the responder write n bytes at its offset 32 KiB to the
// requester's address va under rkey (RC and UC; the requester's QP is
// the responder's peer) and returns the CQE.
func (e *wrEnds) peerWrite(t *testing.T, rkey uint32, va uint64, n uint32) []byte {
	t.Helper()
	for i := range n {
		e.resp.mem(32768, int(n))[i] = byte(i*7 + 3)
	}
	return rdma(t, e.resp, false, rkey, va, n)
}

// checkRecvd checks the receive CQE of a message of want bytes that
// landed at off of the responder's buffers, with opcode op and the
// immediate or invalidated key imm.
func (e *wrEnds) checkRecvd(t *testing.T, op uint8, imm uint32, off uint64, want []byte) {
	t.Helper()
	b := e.recv.poll(t)
	c := uverbs.DecodeCQE(b)
	if got := b[uverbs.OpOwnOffset] >> 4; got != op || c.ByteCnt != uint32(e.grh)+uint32(len(want)) || c.ImmInvalPkey != imm {
		t.Fatalf("receive CQE %+v opcode %#x (%+v), want opcode %#x, %d bytes, imm %#x", c, got, uverbs.DecodeErrCQE(b), op, len(want), imm)
	}
	if got := e.resp.mem(off+e.grh, len(want)); !bytes.Equal(got, want) {
		t.Fatal("received data differ")
	}
}

// TestWRRepertoire: each builder the provider accepts on this device for
// RC, UC, XRC and UD QPs (MLX5_SUPPORTED_SEND_OPS_FLAGS_*; the atomics
// since the device reports IBV_ATOMIC_HCA), with data segments or inline
// data, does on the peer what the verb says; the ones the provider
// accepts but IBA gives the service no opcode for (SEND_WITH_INV on UC)
// fail locally, a SEND_WITH_INV of a key the responder cannot invalidate
// gets its NAK (REM_INV_REQ), ibv_wr_bind_mw of a type-1 window (the
// builder binds as type 2) and ibv_wr_local_inv of a memory region's key
// are MW_BIND_ERR, and a raw WQE of an opcode
// the device does not carry out (masked compare-swap) LOC_QP_OP_ERR.
func TestWRRepertoire(t *testing.T) {
	msg := bytes.Repeat([]byte("wr-api:"), 300) // 2100 bytes: 1 packet at MTU 4096 on UD, more on the others
	small := []byte("ibv_wr_set_inline_data: these bytes ride in the WQE")
	const imm = 0x1234abcd
	for _, tc := range []struct {
		name   string
		st     uverbs.ST
		op     wrOp
		inline bool
		synd   uint8 // the requester's error CQE syndrome (0: success)
	}{
		{"RC send", uverbs.STRC, wrSend, false, 0},
		{"RC send inline", uverbs.STRC, wrSend, true, 0},
		{"RC send_imm", uverbs.STRC, wrSendImm, false, 0},
		{"RC send_inv", uverbs.STRC, wrSendInv, false, 0},
		{"RC send_inv of a region's key", uverbs.STRC, wrSendInv, false, uverbs.SyndromeRemoteInvalReqErr},
		{"RC rdma_write", uverbs.STRC, wrWrite, false, 0},
		{"RC rdma_write inline", uverbs.STRC, wrWrite, true, 0},
		{"RC rdma_write_imm", uverbs.STRC, wrWriteImm, false, 0},
		{"RC rdma_read", uverbs.STRC, wrRead, false, 0},
		{"RC atomic_cmp_swp", uverbs.STRC, wrCmpSwp, false, 0},
		{"RC atomic_fetch_add", uverbs.STRC, wrFetchAdd, false, 0},
		{"RC bind_mw", uverbs.STRC, wrBindMW, false, 0},
		{"RC bind_mw of a type-1 window", uverbs.STRC, wrBindMW, false, uverbs.SyndromeMWBindErr},
		{"RC local_inv", uverbs.STRC, wrLocalInv, false, 0},
		{"RC local_inv of a region's key", uverbs.STRC, wrLocalInv, false, uverbs.SyndromeMWBindErr},
		{"RC raw_wqe masked compare-swap", uverbs.STRC, wrRawMasked, false, uverbs.SyndromeLocalQPOpErr},

		{"UC send", uverbs.STUC, wrSend, false, 0},
		{"UC send_imm inline", uverbs.STUC, wrSendImm, true, 0},
		{"UC send_inv", uverbs.STUC, wrSendInv, false, uverbs.SyndromeLocalQPOpErr},
		{"UC rdma_write", uverbs.STUC, wrWrite, false, 0},
		{"UC rdma_write_imm inline", uverbs.STUC, wrWriteImm, true, 0},
		{"UC bind_mw", uverbs.STUC, wrBindMW, false, 0},
		{"UC local_inv", uverbs.STUC, wrLocalInv, false, 0},

		{"XRC send", uverbs.STXRC, wrSend, false, 0},
		{"XRC send inline", uverbs.STXRC, wrSend, true, 0},
		{"XRC send_imm", uverbs.STXRC, wrSendImm, false, 0},
		{"XRC send_inv of a region's key", uverbs.STXRC, wrSendInv, false, uverbs.SyndromeRemoteInvalReqErr},
		{"XRC rdma_write inline", uverbs.STXRC, wrWrite, true, 0},
		{"XRC rdma_write_imm", uverbs.STXRC, wrWriteImm, false, 0},
		{"XRC rdma_read", uverbs.STXRC, wrRead, false, 0},
		{"XRC atomic_cmp_swp", uverbs.STXRC, wrCmpSwp, false, 0},
		{"XRC atomic_fetch_add", uverbs.STXRC, wrFetchAdd, false, 0},
		{"XRC bind_mw", uverbs.STXRC, wrBindMW, false, 0},
		{"XRC local_inv", uverbs.STXRC, wrLocalInv, false, 0},

		{"UD send", uverbs.STUD, wrSend, false, 0},
		{"UD send inline", uverbs.STUD, wrSend, true, 0},
		{"UD send_imm", uverbs.STUD, wrSendImm, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newWREnds(t, tc.st)
			a, b := e.req, e.resp
			payload := msg
			if tc.inline {
				payload = small
			}
			copy(a.mem(0, len(payload)), payload)
			w := wr{op: tc.op, sge: []uverbs.DataSeg{a.seg(0, uint32(len(payload))), a.seg(4096, 0)}}
			if tc.inline {
				w.sge, w.inline = nil, payload
			}
			if tc.op == wrSendImm || tc.op == wrWriteImm {
				w.imm = imm
			}
			switch tc.op {
			case wrWrite, wrWriteImm, wrRead:
				w.rkey, w.raddr = b.key, b.data+12288
			case wrCmpSwp, wrFetchAdd, wrRawMasked:
				w.rkey, w.raddr, w.sge = b.key, b.data+40960, []uverbs.DataSeg{a.seg(40960, 8)}
				le.PutUint64(b.mem(40960, 8), 40)
			}
			if tc.op == wrRead {
				for i := range len(msg) {
					b.mem(12288, len(msg))[i] = byte(i*11 + 5)
				}
				w.sge = []uverbs.DataSeg{a.seg(16384, uint32(len(msg)))}
			}
			var winKey uint32
			if tc.op == wrSendInv {
				w.imm = b.key // a region: not remotely invalidable
				if tc.synd == 0 {
					// A type-2 window the responder bound through its QP.
					peer := &wrEnds{st: tc.st, req: b}
					_, winKey = peer.bindType2(t)
					wantOK(t, rdma(t, a, false, winKey, b.data+mwOff, 64))
					w.imm = winKey
				}
			}
			var mw uint32
			switch tc.op {
			case wrBindMW:
				mw = a.allocMW(t, tc.synd == 0) // the failing case: a type-1 window
				w.bind = a.bindArgs(mw, true)   // ibv_wr_bind_mw binds as type 2 always
			case wrLocalInv:
				mw, w.imm = e.bindType2(t)
				if tc.synd != 0 {
					w.imm = a.key // a memory region: user QPs invalidate windows only
				}
			}
			switch tc.op {
			case wrSend, wrSendImm, wrSendInv, wrWriteImm:
				e.postRecv(8192, 4096)
			}

			idx, cqe := e.post(t, w)
			if tc.synd != 0 {
				if c := uverbs.DecodeErrCQE(cqe); cqe[uverbs.OpOwnOffset]>>4 == uverbs.CQEReq || c.Syndrome != tc.synd || c.WQECounter != idx {
					t.Fatalf("CQE %+v, want syndrome %#x", c, tc.synd)
				}
				if tc.synd == uverbs.SyndromeRemoteInvalReqErr {
					// The responder's receive fails; the region stays.
					if rc := e.recv.poll(t); rc[uverbs.OpOwnOffset]>>4 != uverbs.CQERespErr {
						t.Fatalf("responder CQE %+v, want an error", uverbs.DecodeCQE(rc))
					}
					b.d.core.Lock()
					valid := b.d.fn.obj.Region(b.key >> 8).Valid
					b.d.core.Unlock()
					if !valid {
						t.Fatal("SEND_WITH_INV invalidated a region")
					}
				}
				return
			}
			checkReq(t, cqe, a.wq.Q.QPN, idx, wrOpcode[tc.op], uint32(len(msg)))
			switch tc.op {
			case wrSend:
				e.checkRecvd(t, uverbs.CQERespSend, 0, 8192, payload)
			case wrSendImm:
				e.checkRecvd(t, uverbs.CQERespSendImm, imm, 8192, payload)
			case wrSendInv:
				e.checkRecvd(t, uverbs.CQERespSendInv, winKey, 8192, payload)
				wantSyndrome(t, rdma(t, a, false, winKey, b.data+mwOff, 64), uverbs.SyndromeRemoteAccessErr)
			case wrWrite, wrWriteImm:
				if tc.op == wrWriteImm {
					e.checkRecvd(t, uverbs.CQERespWRImm, imm, 12288, payload)
				}
				b.d.Sync() // UC: no ACK, the requester completes when it has sent
				if !bytes.Equal(b.mem(12288, len(payload)), payload) {
					t.Fatal("written data differ")
				}
				if tc.op == wrWrite {
					e.recv.noCQE(t)
				}
			case wrRead:
				if !bytes.Equal(a.mem(16384, len(msg)), b.mem(12288, len(msg))) {
					t.Fatal("read data differ")
				}
			case wrCmpSwp, wrFetchAdd:
				// Host endianness (atomic_req_8B_endianness_mode 1, which
				// mlx5_core sets since MAX offers it): little-endian here.
				w2 := w
				if tc.op == wrCmpSwp {
					w2.compare, w2.swapAdd = 40, 99
				} else {
					w2.swapAdd = 2
				}
				idx, cqe := e.post(t, w2)
				checkReq(t, cqe, a.wq.Q.QPN, idx, wrOpcode[tc.op], 8)
				want := uint64(99)
				if tc.op == wrFetchAdd {
					want = 42
				}
				if got := le.Uint64(a.mem(40960, 8)); got != 40 {
					t.Fatalf("returned %d, want 40", got)
				}
				if got := le.Uint64(b.mem(40960, 8)); got != want {
					t.Fatalf("remote value %d, want %d", got, want)
				}
			case wrBindMW, wrLocalInv:
				valid, key, qpn := e.window(mw)
				newKey := mw&^0xff | uint32(w.bind.NewKey)
				if tc.op == wrLocalInv {
					newKey = w.imm // a type-2 window keeps its key
				}
				if valid != (tc.op == wrBindMW) || key != newKey || (valid && qpn != a.wq.Q.QPN) {
					t.Fatalf("window valid %v key %#x qpn %#x, want key %#x", valid, key, qpn, newKey)
				}
				if tc.st == uverbs.STXRC {
					return // no QP reaches the initiator's device (see docs/mlx5.md)
				}
				cqe := e.peerWrite(t, newKey, a.data+mwOff+100, 512)
				a.d.Sync()
				landed := bytes.Equal(a.mem(mwOff+100, 512), b.mem(32768, 512))
				switch {
				case tc.op == wrBindMW && (!landed || cqe[uverbs.OpOwnOffset]>>4 != uverbs.CQEReq):
					t.Fatal("a WRITE through the bound window did not land")
				case tc.op == wrLocalInv && landed:
					t.Fatal("a WRITE through the invalidated window landed")
				case tc.op == wrLocalInv && tc.st == uverbs.STRC:
					wantSyndrome(t, cqe, uverbs.SyndromeRemoteAccessErr)
				}
			}
		})
	}
}

// TestWRFence: the WQE after an ibv_wr_bind_mw carries the provider's
// cached small fence (fm_cache = MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE):
// an RDMA READ behind a bind and a WRITE completes in order, with the
// data the WRITE left.
func TestWRFence(t *testing.T) {
	e := newWREnds(t, uverbs.STRC)
	a, b := e.req, e.resp
	mw := a.allocMW(t, true)
	copy(a.mem(0, 64), bytes.Repeat([]byte{0xee}, 64))
	q := wr{op: wrBindMW, bind: a.bindArgs(mw, true)}.wqe(e.st, 0, 0, e.av)
	q.Ctrl.FMCESE = 0 // unsignaled
	a.drv.PostSend(a.wq, &q)
	e.fm = 0x20
	idx, cqe := e.post(t, wr{op: wrWrite, rkey: b.key, raddr: b.data + 12288, sge: []uverbs.DataSeg{a.seg(0, 64)}})
	checkReq(t, cqe, a.wq.Q.QPN, idx, uverbs.OpcodeRDMAWrite, 0)
	idx, cqe = e.post(t, wr{op: wrRead, rkey: b.key, raddr: b.data + 12288, sge: []uverbs.DataSeg{a.seg(16384, 64)}})
	checkReq(t, cqe, a.wq.Q.QPN, idx, uverbs.OpcodeRDMARead, 64)
	if !bytes.Equal(a.mem(16384, 64), a.mem(0, 64)) {
		t.Fatal("READ after WRITE: data differ")
	}
	if valid, _, _ := e.window(mw); !valid {
		t.Fatal("the unsignaled bind did not run")
	}
}
