package mlx5

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/ib"
	"github.com/hcaemu/hcaemu/emu/ib/subnet"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/mlx5/mlx5test"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// rcEnd is one end of an RC connection: a device with its fake driver,
// a PD with an mkey over 64 KiB of buffers allowing every access, a CQ for both
// queues and an RC QP (16 receive WQEs of 64 bytes, 64 WQEBBs).
type rcEnd struct {
	d    *Device
	drv  *mlx5test.Driver
	ib   *mlx5test.IB
	lid  uint16
	key  uint32
	pd   uint32
	cq   *mlx5test.CQ
	ci   uint32
	wq   *mlx5test.WQ
	data uint64 // 64 KiB of guest memory for the test's buffers
}

func newRCEnd(t *testing.T, name string, sub *subnet.Subnet, guid uint64) *rcEnd {
	t.Helper()
	d, drv, ib, _ := ibProbed(t, Config{Name: name, Subnet: sub, NodeGUID: guid})
	return addRCEnd(t, d, drv, ib)
}

// another is a second end on e's device.
func (e *rcEnd) another(t *testing.T) *rcEnd { return addRCEnd(t, e.d, e.drv, e.ib) }

func addRCEnd(t testing.TB, d *Device, drv *mlx5test.Driver, ib *mlx5test.IB) *rcEnd {
	t.Helper()
	return addEnd(t, d, drv, ib, ifc.QPStRC)
}

// addEnd is an end whose QP has service type st.
func addEnd(t testing.TB, d *Device, drv *mlx5test.Driver, ib *mlx5test.IB, st uint32) *rcEnd {
	t.Helper()
	return addEndWith(t, d, drv, ib, func(a *mlx5test.QPArgs) { a.St = st })
}

// addEndWith is an end whose QP's creation arguments (an RC QP's) tweak
// changes (nil: none).
func addEndWith(t testing.TB, d *Device, drv *mlx5test.Driver, ib *mlx5test.IB, tweak func(*mlx5test.QPArgs)) *rcEnd {
	t.Helper()
	return addEndSized(t, d, drv, ib, rcSize{data: 64 << 10, cqes: 64, logSQ: 6}, tweak)
}

// rcSize is an end's geometry: its buffers' bytes, CQEs and SQ WQEBBs.
type rcSize struct {
	data  uint64
	cqes  int
	logSQ uint32
	// cqeSize: the CQ's CQEs, 64 or 128 bytes (0: 64).
	cqeSize int
}

// addEndSized is addEndWith with the geometry sz.
func addEndSized(t testing.TB, d *Device, drv *mlx5test.Driver, ib *mlx5test.IB, sz rcSize, tweak func(*mlx5test.QPArgs)) *rcEnd {
	t.Helper()
	pd, err := drv.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	// The buffers' mkey: sz.data bytes by an MTT of 4 KiB pages, VA =
	// GPA, every access (a PA key is local only).
	data := drv.Alloc(sz.data, 4096)
	mtt := make([]uint64, sz.data>>12)
	for i := range mtt {
		mtt[i] = data + uint64(i)<<12
	}
	key, err := drv.CreateMkey(drv.CreateMkeyIn(mlx5test.MkeyArgs{PD: pd, Mode: ifc.MkcAccessModeMTT, Access: 0xf,
		Start: data, Len: sz.data, LogPageSize: 12, MTT: mtt}))
	if err != nil {
		t.Fatal(err)
	}
	cq, err := drv.CreateCQ(drv.CreateCQInSize(sz.cqes, drv.CompEQ.EQN, drv.UAR, max(sz.cqeSize, uverbs.CQESize64)))
	if err != nil {
		t.Fatal(err)
	}
	drv.InitCQ(cq)
	args := mlx5test.QPArgs{St: ifc.QPStRC, PD: pd, SndCQ: cq.CQN, RcvCQ: cq.CQN,
		SRQ: ib.S1.N, XRCD: ib.XRCD1, LogRQ: 4, LogRQStride: 2, LogSQ: sz.logSQ, UAR: drv.UAR, UserIndex: 0x77}
	if tweak != nil {
		tweak(&args)
	}
	in, q := drv.CreateQPIn(args)
	if q, err = drv.CreateQP(in, q); err != nil {
		t.Fatal(err)
	}
	rqStride := uint64(64)
	if args.RQType != ifc.RQTypeRegular {
		rqStride = 0
	}
	return &rcEnd{d: d, drv: drv, ib: ib, lid: ib.LID, key: key.Key, cq: cq, pd: pd,
		wq: &mlx5test.WQ{Q: q, UAR: drv.UAR, LogRQ: 4, RQStride: rqStride, LogSQ: uint8(args.LogSQ),
			Hold: func(fn func()) { d.core.Lock(); defer d.core.Unlock(); fn() }},
		data: data}
}

// connect walks e's QP to RTS towards (lid, qpn).
func (e *rcEnd) connect(t testing.TB, lid uint16, qpn uint32) {
	t.Helper()
	connectRC(t, e.drv, e.wq.Q, rcConn{lid: lid, qpn: qpn, sendPSN: 0x100, rcvPSN: 0x100, timeout: 14, retry: 7, rnrRetry: 7})
}

// poll waits for e's next CQE.
func (e *rcEnd) poll(t *testing.T) []byte {
	t.Helper()
	for range 2000 {
		if cqe, ok := e.pollOnce(); ok {
			return cqe
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("no CQE")
	return nil
}

// noCQE checks that e has no CQE to poll.
func (e *rcEnd) noCQE(t *testing.T) {
	t.Helper()
	if cqe, ok := e.pollOnce(); ok {
		t.Fatalf("unexpected CQE % x", cqe)
	}
}

// pollOnce polls e's CQ once after a Sync, under the device lock (the
// engine writes CQEs under it: the race detector sees the ordering the
// owner bit gives the provider).
func (e *rcEnd) pollOnce() ([]byte, bool) {
	e.d.Sync()
	e.d.core.Lock()
	defer e.d.core.Unlock()
	return e.drv.PollCQ(e.cq, &e.ci)
}

func (e *rcEnd) mem(off uint64, n int) []byte { return e.drv.Bytes(e.data+off, n) }

func (e *rcEnd) seg(off uint64, n uint32) uverbs.DataSeg {
	return uverbs.DataSeg{Addr: e.data + off, ByteCount: n, LKey: e.key}
}

const signaled = 0x08 // MLX5_WQE_CTRL_CQ_UPDATE

// checkReq checks a successful REQ CQE of WQE idx with opcode op.
func checkReq(t *testing.T, b []byte, qpn uint32, idx uint16, op uint8, n uint32) {
	t.Helper()
	if b[uverbs.OpOwnOffset]>>4 != uverbs.CQEReq {
		e := uverbs.DecodeErrCQE(b)
		t.Fatalf("REQ CQE: %+v", e)
	}
	c := uverbs.DecodeCQE(b)
	if c.QPN != qpn || c.WQECounter != idx || c.SOpcode != op || c.SRQNUIdx != 0x77 || (op == uverbs.OpcodeRDMARead && c.ByteCnt != n) {
		t.Fatalf("REQ CQE %+v, want qpn %#x wqe %d opcode %#x", c, qpn, idx, op)
	}
}

// rcPair is two devices on one subnet with a connected RC QP each.
func rcPair(t *testing.T) (*rcEnd, *rcEnd) {
	sub := subnet.New(subnet.Config{})
	a := newRCEnd(t, "hca0", sub, 0x0002c90300000100)
	b := newRCEnd(t, "hca1", sub, 0x0002c90300000200)
	a.connect(t, b.lid, b.wq.Q.QPN)
	b.connect(t, a.lid, a.wq.Q.QPN)
	return a, b
}

// TestRCNop: a NOP WQE (UCX's rc_mlx5 posts them) does nothing on the
// wire and completes in order after the WQEs before it: a signaled NOP
// behind an unsignaled WRITE completes once the WRITE is acknowledged,
// with the NOP's counter and opcode; the QP goes on working.
func TestRCNop(t *testing.T) {
	a, b := rcPair(t)
	copy(a.mem(0, 4096), bytes.Repeat([]byte{0x5A}, 4096))
	a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeRDMAWrite},
		Segs: uverbs.HasRAddr, RAddr: uverbs.RAddrSeg{RAddr: b.data + 8192, RKey: b.key}, Data: []uverbs.DataSeg{a.seg(0, 4096)}})
	idx := a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeNOP, FMCESE: signaled}})
	checkReq(t, a.poll(t), a.wq.Q.QPN, idx, uverbs.OpcodeNOP, 0)
	if !bytes.Equal(b.mem(8192, 4096), a.mem(0, 4096)) {
		t.Fatal("the NOP completed before the WRITE before it landed")
	}
	exchange(t, a, b)
}

// TestRCInlineThenData: a SEND whose first bytes are inline and the rest
// by data segments (UCX's rc_mlx5 active messages: the header inline),
// three packets long so that one packet holds the end of the inline bytes
// and the start of the segments' data: the receiver gets them in order,
// whether the subnet carries whole packets or batches.
func TestRCInlineThenData(t *testing.T) {
	passThrough := func(next subnet.Link) subnet.Link { return next }
	for name, sub := range map[string]*subnet.Subnet{"batches": subnet.New(subnet.Config{}), "whole packets": subnet.New(subnet.Config{}, passThrough)} {
		t.Run(name, func(t *testing.T) {
			a := newRCEnd(t, "hca0", sub, 0x0002c90300000100)
			b := newRCEnd(t, "hca1", sub, 0x0002c90300000200)
			a.connect(t, b.lid, b.wq.Q.QPN)
			b.connect(t, a.lid, a.wq.Q.QPN)
			hdr := []byte("ucx-am-header:40-bytes-of-it-inline-here")
			body := bytes.Repeat([]byte("0123456789abcdef"), 160) // 2560 bytes
			copy(a.mem(0, len(body)), body)
			b.drv.PostRecv(b.wq, b.seg(8192, 4096))
			idx := a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeSend, FMCESE: signaled},
				Segs: uverbs.HasInline, Inline: hdr, Data: []uverbs.DataSeg{a.seg(0, 1000), a.seg(1000, 1560)}})
			checkReq(t, a.poll(t), a.wq.Q.QPN, idx, uverbs.OpcodeSend, 0)
			want := append(append([]byte(nil), hdr...), body...)
			if c := uverbs.DecodeCQE(b.poll(t)); c.ByteCnt != uint32(len(want)) {
				t.Fatalf("receive CQE %+v, want %d bytes", c, len(want))
			}
			if got := b.mem(8192, len(want)); !bytes.Equal(got, want) {
				t.Fatal("the message is not the inline bytes then the segments' data")
			}
		})
	}
}

// TestRCCQE128: on CQs of 128-byte CQEs (mlx5dv's cqe_size 128), each
// CQE's 64-byte structure is the second half of its 128 bytes, where the
// provider looks (get_sw_cqe: cqe + 64); the first half is left alone.
func TestRCCQE128(t *testing.T) {
	sub := subnet.New(subnet.Config{})
	end := func(name string, guid uint64) *rcEnd {
		d, drv, ib, _ := ibProbed(t, Config{Name: name, Subnet: sub, NodeGUID: guid})
		// Four CQEs: the exchanges go round the ring, the owner bit flips.
		return addEndSized(t, d, drv, ib, rcSize{data: 64 << 10, cqes: 2, logSQ: 6, cqeSize: 128},
			func(a *mlx5test.QPArgs) { a.St = ifc.QPStRC })
	}
	a, b := end("hca0", 0x0002c90300000100), end("hca1", 0x0002c90300000200)
	a.connect(t, b.lid, b.wq.Q.QPN)
	b.connect(t, a.lid, a.wq.Q.QPN)
	for _, e := range []*rcEnd{a, b} { // a mark the device must not write over
		for i := range 1 << e.cq.LogSize {
			copy(e.drv.Bytes(e.cq.Buf.Pages[0]+uint64(i)*128, 64), bytes.Repeat([]byte{0xA5}, 64))
		}
	}
	exchange(t, a, b)
	exchange(t, b, a)
	for _, e := range []*rcEnd{a, b} {
		for i := range 1 << e.cq.LogSize {
			if half := e.drv.Bytes(e.cq.Buf.Pages[0]+uint64(i)*128, 64); !bytes.Equal(half, bytes.Repeat([]byte{0xA5}, 64)) {
				t.Fatalf("CQE %d's first 64 bytes written: % x", i, half)
			}
		}
	}
}

// exchange runs SEND/RECV, RDMA WRITE and RDMA READ from a to b with the
// data checked.
func exchange(t *testing.T, a, b *rcEnd) {
	t.Helper()
	// SEND of 3000 bytes (three 1024-byte packets) into a posted receive.
	msg := bytes.Repeat([]byte("hcaemu-mlx5!"), 250)
	copy(a.mem(0, len(msg)), msg)
	b.drv.PostRecv(b.wq, b.seg(8192, 4096))
	idx := a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeSend, FMCESE: signaled},
		Data: []uverbs.DataSeg{a.seg(0, uint32(len(msg)))}})
	checkReq(t, a.poll(t), a.wq.Q.QPN, idx, uverbs.OpcodeSend, 0)
	rc := b.poll(t)
	if c := uverbs.DecodeCQE(rc); rc[uverbs.OpOwnOffset]>>4 != uverbs.CQERespSend || c.ByteCnt != uint32(len(msg)) ||
		c.QPN != b.wq.Q.QPN || c.SRQNUIdx != 0x77 || c.SrcQPN != a.wq.Q.QPN || c.SLID != a.lid || c.WQECounter != 0 {
		t.Fatalf("receive CQE %+v op %#x", c, rc[uverbs.OpOwnOffset]>>4)
	}
	if got := b.mem(8192, len(msg)); !bytes.Equal(got, msg) {
		t.Fatal("SEND data differ")
	}

	// RDMA WRITE of 2000 bytes, unsignaled, then a signaled READ back.
	for i := range 2000 {
		a.mem(16384, 2000)[i] = byte(i * 7)
	}
	a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeRDMAWrite},
		Segs: uverbs.HasRAddr, RAddr: uverbs.RAddrSeg{RAddr: b.data + 20000, RKey: b.key},
		Data: []uverbs.DataSeg{a.seg(16384, 2000)}})
	idx = a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeRDMARead, FMCESE: signaled},
		Segs: uverbs.HasRAddr, RAddr: uverbs.RAddrSeg{RAddr: b.data + 20000, RKey: b.key},
		Data: []uverbs.DataSeg{a.seg(32768, 2000)}})
	checkReq(t, a.poll(t), a.wq.Q.QPN, idx, uverbs.OpcodeRDMARead, 2000)
	if !bytes.Equal(b.mem(20000, 2000), a.mem(16384, 2000)) {
		t.Fatal("RDMA WRITE data differ")
	}
	if !bytes.Equal(a.mem(32768, 2000), a.mem(16384, 2000)) {
		t.Fatal("RDMA READ data differ")
	}
	a.noCQE(t) // the unsignaled WRITE has none
	b.noCQE(t) // nor the passive side of WRITE and READ
}

// TestRCTwoDevices: an RC exchange between two devices on one IB subnet:
// SEND/RECV, RDMA WRITE and READ with the data checked, CQEs with the
// WQE counters, user index, source QPN and SLID as the provider reads
// them, both ways.
func TestRCTwoDevices(t *testing.T) {
	a, b := rcPair(t)
	exchange(t, a, b)
	exchange(t, b, a)
}

// TestRCLoopback: two QPs of one device connected through its own LID
// (the subnet delivers the port's packets back to it).
func TestRCLoopback(t *testing.T) {
	a := newRCEnd(t, "hca0", subnet.New(subnet.Config{}), 0x0002c90300000100)
	b := a.another(t)
	a.connect(t, a.lid, b.wq.Q.QPN)
	b.connect(t, a.lid, a.wq.Q.QPN)
	exchange(t, a, b)
	exchange(t, b, a)
}

// TestRCBadLKey: a SEND whose data segment names a key that is not the
// QP's (another 32-bit key of the same index: a wrong variant) completes
// with an error CQE (LOCAL_PROT_ERR, the WQE's counter and opcode, the
// user index); the QP goes to ERR with a QP event on the async EQ, and
// the WQE posted after it is flushed
// (WR_FLUSH_ERR) though unsignaled; no packet reaches the peer.
func TestRCBadLKey(t *testing.T) {
	a, b := rcPair(t)
	b.drv.PostRecv(b.wq, b.seg(0, 4096))
	bad := a.seg(0, 64)
	bad.LKey ^= 0x01 // the variant byte: same index, another key
	idx := a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeSend, FMCESE: signaled},
		Data: []uverbs.DataSeg{bad}})
	e := uverbs.DecodeErrCQE(a.poll(t))
	if e.Opcode != uverbs.CQEReqErr || e.Syndrome != uverbs.SyndromeLocalProtErr || e.WQECounter != idx ||
		e.SWQEOpcode != uverbs.OpcodeSend || e.QPN != a.wq.Q.QPN || e.SRQN != 0x77 {
		t.Fatalf("error CQE %+v", e)
	}
	if _, st, _ := a.d.QPState(a.wq.Q.QPN); st != transport.StateErr {
		t.Fatalf("QP state %v, want ERR", st)
	}
	// The affiliated error went to the async EQ as a QP event.
	var event []byte
	a.d.core.Lock()
	for e := a.drv.NextEQE(a.drv.AsyncEQ); e != nil; e = a.drv.NextEQE(a.drv.AsyncEQ) {
		if typ := e[ifc.EQEType]; typ == ifc.EventWQCatasError || typ == ifc.EventWQInvalReqError || typ == ifc.EventWQAccessError {
			event = append([]byte(nil), e...)
		}
	}
	a.d.core.Unlock()
	if event == nil || event[eqeQPType] != 0 || be32(event[eqeQPNumber:])&0xffffff != a.wq.Q.QPN {
		t.Fatalf("QP event EQE % x", event)
	}
	idx = a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeSend},
		Data: []uverbs.DataSeg{a.seg(0, 64)}})
	if e := uverbs.DecodeErrCQE(a.poll(t)); e.Syndrome != uverbs.SyndromeWRFlushErr || e.WQECounter != idx {
		t.Fatalf("flush CQE %+v", e)
	}
	b.noCQE(t)
}

// TestRCSplitDoorbell: a send doorbell written as two 32-bit halves (a
// 32-bit guest's mmio_write64_be) is latched and acted on once whole.
func TestRCSplitDoorbell(t *testing.T) {
	a, b := rcPair(t)
	a.wq.SplitDoorbell = true
	exchange(t, a, b)
	if n := a.d.Stats().SendDoorbells; n != 3 {
		t.Fatalf("%d send doorbells, want 3", n)
	}
}

// TestRCCopyOnce: the device copies a WQE out of the SQ once: a WQE the
// guest rewrites after PendingSends staged it is taken as it was.
func TestRCCopyOnce(t *testing.T) {
	a, _ := rcPair(t)
	q := a.d.qpByQPN(a.wq.Q.QPN)
	a.d.core.Lock()
	defer a.d.core.Unlock()
	// Write the WQE and the record without a doorbell: the test plays
	// the engine.
	w := uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeRDMAWrite, QPN: a.wq.Q.QPN, DS: 3},
		Segs: uverbs.HasRAddr, RAddr: uverbs.RAddrSeg{RAddr: 0x1000, RKey: 0x99}, Data: []uverbs.DataSeg{a.seg(0, 100)}}
	buf := make([]byte, 64)
	w.Encode(buf)
	off := a.wq.SQOffset(0)
	copy(a.drv.Bytes(a.wq.Q.Pages[off>>12]+off&4095, 64), buf)
	copy(a.drv.Bytes(a.wq.Q.DBR, 8), []byte{0, 0, 0, 0, 0, 0, 0, 1})
	if n, ok := q.env.PendingSends(); !ok || n != 1 {
		t.Fatalf("PendingSends %d %v", n, ok)
	}
	w.RAddr.RAddr, w.Data[0].ByteCount = 0xbad000, 4000
	w.Encode(buf)
	copy(a.drv.Bytes(a.wq.Q.Pages[off>>12]+off&4095, 64), buf)
	var wr transport.SendWR
	q.env.TakeSend(&wr)
	if wr.Opcode != transport.OpWrite || wr.RemoteAddr != 0x1000 || wr.RKey != 0x99 || wr.Length != 100 || wr.Status != transport.StatusSuccess {
		t.Fatalf("taken %+v", wr)
	}
	if n, _ := q.env.PendingSends(); n != 0 {
		t.Fatalf("%d pending after the take", n)
	}
}

// TestCQArm: an armed CQ posts one COMP EQE naming it to its EQ, with
// the EQ's vector, at its next CQE; arming while a CQE is unpolled posts
// at once; an unarmed CQ posts none.
func TestCQArm(t *testing.T) {
	a, b := rcPair(t)
	eq := b.drv.CompEQ
	b.drv.UpdateCI(eq, true)
	comp := func() int {
		t.Helper()
		b.d.Sync()
		b.d.core.Lock()
		defer b.d.core.Unlock()
		n := 0
		for e := b.drv.NextEQE(eq); e != nil; e = b.drv.NextEQE(eq) {
			if e[ifc.EQEType] != ifc.EventComp || be32(e[eqeCompCQN:])&0xffffff != b.cq.CQN {
				t.Fatalf("EQE % x", e)
			}
			n++
		}
		return n
	}
	sendSE := func(se bool) {
		t.Helper()
		b.drv.PostRecv(b.wq, b.seg(0, 64))
		flags := uint8(signaled)
		if se {
			flags |= 0x02 // MLX5_WQE_CTRL_SOLICITED
		}
		a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeSend, FMCESE: flags},
			Data: []uverbs.DataSeg{a.seg(0, 64)}})
		a.poll(t)
	}
	send := func() { t.Helper(); sendSE(false) }
	send()
	if n := comp(); n != 0 {
		t.Fatalf("unarmed CQ: %d EQEs", n)
	}
	// A CQE unpolled (the consumer index 0 the arm names): at once.
	b.drv.ArmCQ(b.cq, b.drv.UAR, b.ci, 0, false)
	if n := comp(); n != 1 {
		t.Fatalf("arm with a CQE pending: %d EQEs", n)
	}
	b.poll(t)
	b.drv.ArmCQ(b.cq, b.drv.UAR, b.ci, 1, false)
	if n := comp(); n != 0 {
		t.Fatalf("armed, no CQE: %d EQEs", n)
	}
	send()
	if n := comp(); n != 1 {
		t.Fatalf("armed, one CQE: %d EQEs", n)
	}
	send()
	if n := comp(); n != 0 {
		t.Fatalf("disarmed after the event: %d EQEs", n)
	}
	// Armed for a solicited CQE: an ordinary receive does not post, a
	// solicited one does (the receive CQE says solicited).
	for range 2 {
		b.poll(t)
	}
	b.drv.ArmCQ(b.cq, b.drv.UAR, b.ci, 2, true)
	send()
	if n := comp(); n != 0 {
		t.Fatalf("armed solicited, unsolicited CQE: %d EQEs", n)
	}
	sendSE(true)
	if n := comp(); n != 1 {
		t.Fatalf("armed solicited, solicited CQE: %d EQEs", n)
	}
	b.poll(t)
	if c := uverbs.DecodeCQE(b.poll(t)); !c.Solicited {
		t.Fatalf("solicited receive CQE %+v", c)
	}
}

// TestRCBlueFlame: a send rung by a BlueFlame copy — the WQE written to
// the BlueFlame register in 8-byte stores, or in one 64-byte write —
// kicks the QP once, with no finding for the WQE's other bytes.
func TestRCBlueFlame(t *testing.T) {
	a, b := rcPair(t)
	for _, whole := range []bool{false, true} {
		b.drv.PostRecv(b.wq, b.seg(0, 64))
		w := uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeSend, FMCESE: signaled, QPN: a.wq.Q.QPN,
			WQEIndex: a.wq.SQPI, DS: 2}, Data: []uverbs.DataSeg{a.seg(0, 64)}}
		buf := make([]byte, 64)
		w.Encode(buf)
		a.wq.Hold(func() {
			off := a.wq.SQOffset(a.wq.SQPI)
			copy(a.drv.Bytes(a.wq.Q.Pages[off>>12]+off&4095, 64), buf)
			a.wq.SQPI++
			copy(a.drv.Bytes(a.wq.Q.DBR+4, 4), []byte{0, 0, byte(a.wq.SQPI >> 8), byte(a.wq.SQPI)})
		})
		reg := uint64(a.wq.UAR)*4096 + 0xa00
		if whole {
			if err := a.d.WriteRegion(0, reg, buf); err != nil {
				t.Fatal(err)
			}
		} else {
			for i := 0; i < 64; i += 8 {
				if err := a.d.WriteRegion(0, reg+uint64(i), buf[i:i+8]); err != nil {
					t.Fatal(err)
				}
			}
		}
		checkReq(t, a.poll(t), a.wq.Q.QPN, w.Ctrl.WQEIndex, uverbs.OpcodeSend, 0)
		b.poll(t)
	}
	if f := a.d.Findings(); f != [hca.NumFindingKinds]uint64{} {
		t.Fatalf("findings: %v", f)
	}
}

// TestRCImmAtomicsRNR: SEND with immediate and RDMA WRITE with immediate
// (receive CQEs with their opcodes, the immediate and the byte count),
// FETCH_ADD and COMPARE_SWAP (the original value returned, the remote
// value changed), and a SEND posted before its receive (RNR NAK, retried
// until the receive comes).
func TestRCImmAtomicsRNR(t *testing.T) {
	a, b := rcPair(t)
	recv := func(op uint8, n, imm uint32) {
		t.Helper()
		rc := b.poll(t)
		c := uverbs.DecodeCQE(rc)
		if rc[uverbs.OpOwnOffset]>>4 != op || c.ByteCnt != n || c.ImmInvalPkey != imm {
			t.Fatalf("receive CQE op %#x %+v, want op %#x %d bytes imm %#x", rc[uverbs.OpOwnOffset]>>4, c, op, n, imm)
		}
	}
	b.drv.PostRecv(b.wq, b.seg(0, 4096))
	b.drv.PostRecv(b.wq, b.seg(4096, 4096))
	idx := a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeSendImm, FMCESE: signaled, Imm: 0x12345678},
		Data: []uverbs.DataSeg{a.seg(0, 100)}})
	checkReq(t, a.poll(t), a.wq.Q.QPN, idx, uverbs.OpcodeSendImm, 0)
	recv(uverbs.CQERespSendImm, 100, 0x12345678)
	idx = a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeRDMAWriteImm, FMCESE: signaled, Imm: 0xcafe},
		Segs: uverbs.HasRAddr, RAddr: uverbs.RAddrSeg{RAddr: b.data + 12288, RKey: b.key}, Data: []uverbs.DataSeg{a.seg(0, 1500)}})
	checkReq(t, a.poll(t), a.wq.Q.QPN, idx, uverbs.OpcodeRDMAWriteImm, 0)
	recv(uverbs.CQERespWRImm, 1500, 0xcafe)
	if !bytes.Equal(b.mem(12288, 1500), a.mem(0, 1500)) {
		t.Fatal("WRITE_IMM data differ")
	}

	// Atomics on b's 8 bytes at 40960 (0), results into a's at 40960.
	atomic := func(op uint8, seg uverbs.AtomicSeg) []byte {
		t.Helper()
		idx := a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: op, FMCESE: signaled},
			Segs: uverbs.HasRAddr | uverbs.HasAtomic, RAddr: uverbs.RAddrSeg{RAddr: b.data + 40960, RKey: b.key},
			Atomic: seg, Data: []uverbs.DataSeg{a.seg(40960, 8)}})
		checkReq(t, a.poll(t), a.wq.Q.QPN, idx, op, 8)
		return append([]byte(nil), a.mem(40960, 8)...)
	}
	if got := atomic(uverbs.OpcodeAtomicFA, uverbs.AtomicSeg{SwapAdd: 5}); !bytes.Equal(got, make([]byte, 8)) {
		t.Fatalf("FETCH_ADD returned % x", got)
	}
	five := append([]byte(nil), b.mem(40960, 8)...)
	if le.Uint64(five) != 5 && be.Uint64(five) != 5 {
		t.Fatalf("after FETCH_ADD: % x", five)
	}
	if got := atomic(uverbs.OpcodeAtomicCS, uverbs.AtomicSeg{Compare: 5, SwapAdd: 9}); le.Uint64(got) != 5 && be.Uint64(got) != 5 {
		t.Fatalf("COMPARE_SWAP returned % x", got)
	}
	if nine := b.mem(40960, 8); le.Uint64(nine) != 9 && be.Uint64(nine) != 9 {
		t.Fatalf("after COMPARE_SWAP: % x", nine)
	}
	b.noCQE(t)

	// RNR: the SEND comes before its receive.
	idx = a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeSend, FMCESE: signaled},
		Data: []uverbs.DataSeg{a.seg(0, 10)}})
	time.Sleep(5 * time.Millisecond)
	a.noCQE(t)
	b.drv.PostRecv(b.wq, b.seg(0, 64))
	checkReq(t, a.poll(t), a.wq.Q.QPN, idx, uverbs.OpcodeSend, 0)
	recv(uverbs.CQERespSend, 10, 0)
}

// TestRCForeignPackets: a packet for a connected QP from another port's
// LID than its remote one, or from that LID with another P_Key, is
// dropped and counted (the first as an address mismatch, as the core's
// isolation test wants it); the QP still works.
func TestRCForeignPackets(t *testing.T) {
	sub := subnet.New(subnet.Config{})
	a := newRCEnd(t, "hca0", sub, 0x0002c90300000100)
	b := newRCEnd(t, "hca1", sub, 0x0002c90300000200)
	a.connect(t, b.lid, b.wq.Q.QPN)
	b.connect(t, a.lid, a.wq.Q.QPN)
	rogue, err := sub.Attach("rogue", 0x0002c90300000301, func(pkt []byte) bool { fabric.Release(pkt); return true })
	if err != nil {
		t.Fatal(err)
	}
	b.drv.PostRecv(b.wq, b.seg(8192, 4096))
	for _, c := range []struct {
		from       *subnet.Port
		slid, pkey uint16
	}{{rogue, rogue.LID(), 0xffff}, {a.d.ibPort, a.lid, 0x8001}} {
		f := ib.PacketFields{LRH: ib.LRHFields{DLID: b.lid, SLID: c.slid}, Transport: roce.PacketFields{
			BTH: roce.BTHFields{Opcode: roce.RCSendOnly, PKey: c.pkey, DestQP: b.wq.Q.QPN, PSN: 0x100}, Payload: []byte("forged")}}
		pkt, err := ib.Build(fabric.NewFrame(), &f)
		if err != nil {
			t.Fatal(err)
		}
		c.from.Send(pkt)
	}
	b.noCQE(t)
	if n := b.d.Stats().RxDropped; n != 2 {
		t.Fatalf("%d packets dropped, want 2", n)
	}
	if st, _ := b.d.CoreStats(); st.Port.Address != 1 || st.Port.Malformed != 1 {
		t.Fatalf("%d address mismatches and %d malformed packets, want 1 and 1", st.Port.Address, st.Port.Malformed)
	}
	exchange(t, a, b) // (its SEND takes the receive posted above)
}

var le = binary.LittleEndian

// TestRCGarbage: a guest scribbling over its SQ, RQ, doorbell records and
// CQ record, ringing doorbells with any bytes, never panics the device
// (which would make it device-fatal) nor makes it write outside the
// queues: each round leaves the device alive.
func TestRCGarbage(t *testing.T) {
	a, b := rcPair(t)
	rng := rand.New(rand.NewPCG(25, 2))
	fill := func(p []byte) {
		for i := range p {
			p[i] = byte(rng.Uint32())
		}
	}
	for round := range 300 {
		e := []*rcEnd{a, b}[round%2]
		e.d.core.Lock()
		for _, pg := range e.wq.Q.Pages {
			if rng.IntN(2) == 0 {
				fill(e.drv.Bytes(pg, 4096))
				if rng.IntN(2) == 0 { // mostly well-formed control segments
					for o := 0; o < 4096; o += 64 {
						e.drv.Bytes(pg, 4096)[o+3] = []byte{uverbs.OpcodeSend, uverbs.OpcodeRDMAWrite, uverbs.OpcodeRDMARead, uverbs.OpcodeAtomicFA}[rng.IntN(4)]
						e.drv.Bytes(pg, 4096)[o+7] = byte(rng.IntN(5))
					}
				}
			}
		}
		if rng.IntN(40) == 0 {
			fill(e.drv.Bytes(e.wq.Q.DBR, 8))
		} else {
			e.wq.SQPI += uint16(rng.IntN(8))
			e.wq.RQPI += uint16(rng.IntN(4))
			copy(e.drv.Bytes(e.wq.Q.DBR, 8), []byte{0, 0, byte(e.wq.RQPI >> 8), byte(e.wq.RQPI), 0, 0, byte(e.wq.SQPI >> 8), byte(e.wq.SQPI)})
		}
		if rng.IntN(30) == 0 {
			fill(e.drv.Bytes(e.cq.DBR, 8))
		}
		e.d.core.Unlock()
		var db [8]byte
		fill(db[:])
		if rng.IntN(2) == 0 {
			db[4], db[5], db[6] = byte(e.wq.Q.QPN>>16), byte(e.wq.Q.QPN>>8), byte(e.wq.Q.QPN)
		}
		reg := uint64(e.wq.UAR)*4096 + []uint64{0x800, 0xa00, 0x20, 0x804, 0x808}[rng.IntN(5)]
		n := []int{8, 4, 64}[rng.IntN(3)]
		p := make([]byte, n)
		copy(p, db[:])
		if err := e.d.WriteRegion(0, reg, p); err != nil {
			t.Fatal(err)
		}
		e.d.Sync()
		e.d.core.Lock()
		fatal := e.d.seg.synd != 0
		for range 1 << e.cq.LogSize { // the consumer keeps up, mostly
			if _, ok := e.drv.PollCQ(e.cq, &e.ci); !ok {
				break
			}
		}
		if rng.IntN(2) == 0 { // and mends its CQ record, sometimes
			binary.BigEndian.PutUint32(e.drv.Bytes(e.cq.DBR, 4), e.ci&0xffffff)
		}
		e.d.core.Unlock()
		if fatal {
			t.Fatalf("round %d: the device died", round)
		}
	}
	if st := a.d.Stats(); st.SendDoorbells == 0 || st.CQEs == 0 {
		t.Fatalf("the garbage reached no queue: %+v", st)
	}
}

// TestRCInline: SEND and RDMA WRITE with their data inline in the WQE
// (IBV_SEND_INLINE, as ibv_rc_pingpong sends small messages): the data
// is the WQE's as taken; a long inline WRITE too; an inline READ is a malformed WQE (LOCAL_LENGTH_ERR,
// as every WQE uverbs.DecodeSendWQE refuses).
func TestRCInline(t *testing.T) {
	a, b := rcPair(t)
	msg := []byte("inline hello from the WQE itself!")
	b.drv.PostRecv(b.wq, b.seg(0, 4096))
	idx := a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeSend, FMCESE: signaled},
		Segs: uverbs.HasInline, Inline: msg})
	checkReq(t, a.poll(t), a.wq.Q.QPN, idx, uverbs.OpcodeSend, 0)
	rc := b.poll(t)
	if c := uverbs.DecodeCQE(rc); rc[uverbs.OpOwnOffset]>>4 != uverbs.CQERespSend || c.ByteCnt != uint32(len(msg)) {
		t.Fatalf("receive CQE %+v", c)
	}
	if !bytes.Equal(b.mem(0, len(msg)), msg) {
		t.Fatalf("inline SEND data %q", b.mem(0, len(msg)))
	}
	// An RDMA WRITE of 800 bytes inline: a WQE of 14 WQEBBs.
	big := bytes.Repeat([]byte{0x5a, 0xa5, 1, 2}, 200)
	idx = a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeRDMAWrite, FMCESE: signaled},
		Segs: uverbs.HasRAddr | uverbs.HasInline, RAddr: uverbs.RAddrSeg{RAddr: b.data + 8192, RKey: b.key}, Inline: big})
	checkReq(t, a.poll(t), a.wq.Q.QPN, idx, uverbs.OpcodeRDMAWrite, 0)
	if !bytes.Equal(b.mem(8192, len(big)), big) {
		t.Fatal("inline WRITE data differ")
	}
	idx = a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeRDMARead, FMCESE: signaled},
		Segs: uverbs.HasRAddr | uverbs.HasInline, RAddr: uverbs.RAddrSeg{RAddr: b.data + 8192, RKey: b.key}, Inline: msg})
	if e := uverbs.DecodeErrCQE(a.poll(t)); e.Syndrome != uverbs.SyndromeLocalLengthErr || e.WQECounter != idx {
		t.Fatalf("inline READ: %+v", e)
	}
}

// TestQP1SendsComplete: ib_mad's QP1 sends (UD WQEs with an address
// vector) complete with REQ CQEs on its CQ, as the driver's unload needs;
// these (zero MADs to the SA) go on the wire, where the SA drops them as
// not SubnAdm (TestGSIOnTheWire has the SA's answers).
func TestQP1SendsComplete(t *testing.T) {
	d, drv, ib, _ := ibProbed(t, Config{Name: "hca0", Subnet: subnet.New(subnet.Config{})})
	drv.InitCQ(ib.MADCQ)
	wq := &mlx5test.WQ{Q: ib.QP1, UAR: drv.UAR, LogRQ: 9, RQStride: 64, LogSQ: 9,
		Hold: func(fn func()) { d.core.Lock(); defer d.core.Unlock(); fn() }}
	mad := drv.Alloc(256, 4096)
	var ci uint32
	for i := range 3 {
		idx := drv.PostSend(wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeSend, FMCESE: signaled},
			Segs: uverbs.HasAV, AV: uverbs.AV{DQPDCT: 1, QKey: 0x80010000, RLID: 1},
			Data: []uverbs.DataSeg{{Addr: mad, ByteCount: 256, LKey: ib.MADKey.Key}}})
		var cqe []byte
		for range 1000 {
			d.Sync()
			d.core.Lock()
			c, ok := drv.PollCQ(ib.MADCQ, &ci)
			d.core.Unlock()
			if ok {
				cqe = c
				break
			}
			time.Sleep(time.Millisecond)
		}
		if cqe == nil {
			t.Fatalf("send %d: no CQE", i)
		}
		if cqe[uverbs.OpOwnOffset]>>4 != uverbs.CQEReq {
			t.Fatalf("send %d: %+v", i, uverbs.DecodeErrCQE(cqe))
		}
		if c := uverbs.DecodeCQE(cqe); c.QPN != ib.QP1.QPN || c.WQECounter != idx || c.SOpcode != uverbs.OpcodeSend || c.SRQNUIdx != 0xffffff {
			t.Fatalf("send %d: CQE %+v", i, c)
		}
	}
}

// TestRCLargeMessages: 32 KiB SENDs and RDMA WRITEs (32 packets at a 1024
// path MTU, as ibv_rc_pingpong -s 65536 sends 64), between two devices
// and in loopback, where the device's own receive queue fills while it
// sends (backpressure, retried).
func TestRCLargeMessages(t *testing.T) {
	a, b := rcPair(t)
	l := newRCEnd(t, "hca2", subnet.New(subnet.Config{}), 0x0002c90300000300)
	m := l.another(t)
	l.connect(t, l.lid, m.wq.Q.QPN)
	m.connect(t, l.lid, l.wq.Q.QPN)
	for _, p := range [][2]*rcEnd{{a, b}, {b, a}, {l, m}, {m, l}} {
		from, to := p[0], p[1]
		for i := range 32 << 10 {
			from.mem(0, 32<<10)[i] = byte(i*31 + int(from.lid))
		}
		to.drv.PostRecv(to.wq, to.seg(32<<10, 32<<10))
		from.drv.PostSend(from.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeSend, FMCESE: signaled},
			Data: []uverbs.DataSeg{from.seg(0, 32<<10)}})
		from.poll(t)
		if c := uverbs.DecodeCQE(to.poll(t)); c.ByteCnt != 32<<10 {
			t.Fatalf("received %d bytes", c.ByteCnt)
		}
		if !bytes.Equal(to.mem(32<<10, 32<<10), from.mem(0, 32<<10)) {
			t.Fatal("32 KiB SEND data differ")
		}
		clear(to.mem(32<<10, 32<<10))
		from.drv.PostSend(from.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeRDMAWrite, FMCESE: signaled},
			Segs: uverbs.HasRAddr, RAddr: uverbs.RAddrSeg{RAddr: to.data + 32<<10, RKey: to.key},
			Data: []uverbs.DataSeg{from.seg(0, 32<<10)}})
		from.poll(t)
		if !bytes.Equal(to.mem(32<<10, 32<<10), from.mem(0, 32<<10)) {
			t.Fatal("32 KiB WRITE data differ")
		}
	}
}

// TestRCLossRecovery: with the subnet losing every data packet the first
// time it goes (SEND and WRITE packets, READ responses), nothing arrives
// until the requester's ACK timer (the core's, through the env's
// ArmTimer and the engine's expiry) retransmits; every exchange still
// completes with the data right, and the timer expired.
func TestRCLossRecovery(t *testing.T) {
	var mu sync.Mutex
	seen := map[uint32]bool{} // PSNs dropped once
	drop := func(next subnet.Link) subnet.Link {
		return subnet.LinkFunc(func(from *subnet.Port, pkt []byte) bool {
			p, err := ib.Parse(pkt)
			if err == nil && len(p.Transport.Payload) > 0 {
				mu.Lock()
				lose := !seen[p.Transport.BTH.PSN()]
				seen[p.Transport.BTH.PSN()] = true
				mu.Unlock()
				if lose {
					fabric.Release(pkt)
					return true
				}
			}
			return next.Send(from, pkt)
		})
	}
	sub := subnet.New(subnet.Config{}, drop)
	a := newRCEnd(t, "hca0", sub, 0x0002c90300000100)
	b := newRCEnd(t, "hca1", sub, 0x0002c90300000200)
	a.connect(t, b.lid, b.wq.Q.QPN)
	b.connect(t, a.lid, a.wq.Q.QPN)
	exchange(t, a, b)
	exchange(t, b, a)
	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 {
		t.Fatal("no packet lost")
	}
	a.d.core.Lock()
	st := a.d.qpByQPN(a.wq.Q.QPN).StatsNow()
	a.d.core.Unlock()
	if st.Timeouts == 0 {
		t.Fatalf("no ACK timeout: %+v", st)
	}
}

// TestRCResetReconnect: a QP sending to a LID nobody has, its ACK timer
// running, goes to RST: the timer's late expiry does nothing, the queues
// start over, and the QP reconnected to its real peer exchanges data;
// a QP destroyed with a send in flight leaves the device alive.
func TestRCResetReconnect(t *testing.T) {
	sub := subnet.New(subnet.Config{})
	a := newRCEnd(t, "hca0", sub, 0x0002c90300000100)
	b := newRCEnd(t, "hca1", sub, 0x0002c90300000200)
	a.connect(t, 0x99, b.wq.Q.QPN)
	a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeSend, FMCESE: signaled},
		Data: []uverbs.DataSeg{a.seg(0, 64)}})
	a.d.Sync()
	if err := a.drv.ToRST(a.wq.Q); err != nil {
		t.Fatal(err)
	}
	a.wq.SQPI, a.wq.RQPI = 0, 0
	a.wq.Hold(func() { clear(a.drv.Bytes(a.wq.Q.DBR, 8)) })
	time.Sleep(100 * time.Millisecond) // past the ACK timeout the send armed
	a.noCQE(t)
	a.connect(t, b.lid, b.wq.Q.QPN)
	b.connect(t, a.lid, a.wq.Q.QPN)
	exchange(t, a, b)

	c := a.another(t)
	c.connect(t, 0x99, 0x1234)
	c.drv.PostSend(c.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeSend, FMCESE: signaled},
		Data: []uverbs.DataSeg{c.seg(0, 64)}})
	c.d.Sync()
	if err := c.drv.ToRST(c.wq.Q); err != nil {
		t.Fatal(err)
	}
	if err := c.drv.DestroyQP(c.wq.Q); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	a.d.Sync()
	a.d.core.Lock()
	fatal := a.d.seg.synd != 0
	a.d.core.Unlock()
	if fatal {
		t.Fatal("the device died")
	}
	exchange(t, b, a)
}

// TestRCHostilePeer: packets from the connected peer's LID with any
// opcode, PSN, headers and payload reach the QP's RC transport: the
// device stays alive, and b's buffers (writable remotely through b.key
// only, which a random key names with chance 2^-32) stay untouched.
func TestRCHostilePeer(t *testing.T) {
	a, b := rcPair(t)
	rng := rand.New(rand.NewPCG(7, 25))
	before := append([]byte(nil), b.mem(0, 64<<10)...)
	sent := 0
	for range 2000 {
		f := ib.PacketFields{LRH: ib.LRHFields{DLID: b.lid, SLID: a.lid}, Transport: roce.PacketFields{
			BTH: roce.BTHFields{Opcode: roce.Opcode(rng.IntN(0x18)), PKey: 0xffff, DestQP: b.wq.Q.QPN,
				PSN: 0x100 + uint32(rng.IntN(8)), AckReq: rng.IntN(2) == 0},
			RETH:      roce.RETHFields{VA: rng.Uint64(), RKey: rng.Uint32(), DMALength: uint32(rng.IntN(5000))},
			AETH:      roce.AETHFields{MSN: rng.Uint32() & 0xffffff},
			AtomicETH: roce.AtomicETHFields{VA: rng.Uint64(), RKey: rng.Uint32()},
			Payload:   make([]byte, rng.IntN(3)*256)}}
		pkt, err := ib.Build(fabric.NewFrame(), &f)
		if err != nil {
			continue
		}
		a.d.ibPort.Send(pkt)
		sent++
	}
	b.d.Sync()
	b.d.core.Lock()
	fatal := b.d.seg.synd != 0
	same := bytes.Equal(b.mem(0, 64<<10), before)
	got := b.d.qpByQPN(b.wq.Q.QPN).StatsNow().PacketsReceived
	b.d.core.Unlock()
	if fatal || sent < 500 || got < uint64(sent)/2 {
		t.Fatalf("device dead %v after %d packets, %d reached the QP", fatal, sent, got)
	}
	if !same {
		t.Fatal("a forged request with a random key wrote b's memory")
	}
}
