package mlx5

import (
	"bytes"
	"sync"
	"testing"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/ib"
	"github.com/hcaemu/hcaemu/emu/ib/subnet"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/mlx5/mlx5test"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// ucPair is two devices on sub with a connected UC QP each.
func ucPair(t *testing.T, sub *subnet.Subnet) (*rcEnd, *rcEnd) {
	t.Helper()
	uc := func(a *mlx5test.QPArgs) { a.St = ifc.QPStUC }
	d0, drv0, ib0, _ := ibProbed(t, Config{Name: "hca0", Subnet: sub, NodeGUID: 0x0002c90300000100})
	d1, drv1, ib1, _ := ibProbed(t, Config{Name: "hca1", Subnet: sub, NodeGUID: 0x0002c90300000200})
	a, b := addEndWith(t, d0, drv0, ib0, uc), addEndWith(t, d1, drv1, ib1, uc)
	a.connect(t, b.lid, b.wq.Q.QPN)
	b.connect(t, a.lid, a.wq.Q.QPN)
	return a, b
}

// checkRecv checks a successful receive CQE.
func checkRecv(t *testing.T, b []byte, op uint8, qpn, src uint32, slid uint16, counter uint16, uidx, n uint32) {
	t.Helper()
	c := uverbs.DecodeCQE(b)
	if got := b[uverbs.OpOwnOffset] >> 4; got != op || c.ByteCnt != n || c.QPN != qpn || c.SrcQPN != src ||
		c.SLID != slid || c.WQECounter != counter || c.SRQNUIdx != uidx {
		t.Fatalf("receive CQE %+v opcode %#x (%+v), want opcode %#x qpn %#x src %#x slid %d wqe %d uidx %#x bytes %d",
			c, got, uverbs.DecodeErrCQE(b), op, qpn, src, slid, counter, uidx, n)
	}
}

// ucExchange sends a 3000-byte SEND (three packets) and a WRITE with
// immediate from a to b.
func ucExchange(t *testing.T, a, b *rcEnd, counter uint16) {
	t.Helper()
	msg := bytes.Repeat([]byte("uc-mlx5!"), 375)
	copy(a.mem(0, len(msg)), msg)
	b.drv.PostRecv(b.wq, b.seg(8192, 4096))
	idx := a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeSend, FMCESE: signaled},
		Data: []uverbs.DataSeg{a.seg(0, uint32(len(msg)))}})
	checkReq(t, a.poll(t), a.wq.Q.QPN, idx, uverbs.OpcodeSend, 0)
	checkRecv(t, b.poll(t), uverbs.CQERespSend, b.wq.Q.QPN, a.wq.Q.QPN, a.lid, counter, 0x77, uint32(len(msg)))
	if !bytes.Equal(b.mem(8192, len(msg)), msg) {
		t.Fatal("UC SEND data differ")
	}
	for i := range 2000 {
		a.mem(16384, 2000)[i] = byte(i * 5)
	}
	b.drv.PostRecv(b.wq, b.seg(8192, 16))
	idx = a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeRDMAWriteImm, FMCESE: signaled, Imm: 0x11223344},
		Segs: uverbs.HasRAddr, RAddr: uverbs.RAddrSeg{RAddr: b.data + 20000, RKey: b.key},
		Data: []uverbs.DataSeg{a.seg(16384, 2000)}})
	checkReq(t, a.poll(t), a.wq.Q.QPN, idx, uverbs.OpcodeRDMAWriteImm, 0)
	c := b.poll(t)
	checkRecv(t, c, uverbs.CQERespWRImm, b.wq.Q.QPN, a.wq.Q.QPN, a.lid, counter+1, 0x77, 2000)
	if uverbs.DecodeCQE(c).ImmInvalPkey != 0x11223344 {
		t.Error("immediate data")
	}
	if !bytes.Equal(b.mem(20000, 2000), a.mem(16384, 2000)) {
		t.Fatal("UC WRITE data differ")
	}
}

// TestUCTwoDevices: UC SEND and WRITE with immediate between two
// devices on one subnet, both ways, and on one HCA in loopback.
func TestUCTwoDevices(t *testing.T) {
	a, b := ucPair(t, subnet.New(subnet.Config{}))
	ucExchange(t, a, b, 0)
	ucExchange(t, b, a, 0)
	ucExchange(t, a, b, 2)

	c := newRCEnd(t, "hca2", subnet.New(subnet.Config{}), 0x0002c90300000300)
	uc := func(a *mlx5test.QPArgs) { a.St = ifc.QPStUC }
	x, y := addEndWith(t, c.d, c.drv, c.ib, uc), addEndWith(t, c.d, c.drv, c.ib, uc)
	x.connect(t, c.lid, y.wq.Q.QPN)
	y.connect(t, c.lid, x.wq.Q.QPN)
	ucExchange(t, x, y, 0)
	ucExchange(t, y, x, 0)
}

// TestUCLoss: the subnet loses the second packet of the first UC
// message: the sender completes it anyway (UC has no ACKs), the receiver
// drops the rest of it and the next message lands in the same receive
// WQE (counter 0).
func TestUCLoss(t *testing.T) {
	var mu sync.Mutex
	n := 0
	drop := func(next subnet.Link) subnet.Link {
		return subnet.LinkFunc(func(from *subnet.Port, pkt []byte) bool {
			p, err := ib.Parse(pkt)
			if err == nil && p.Transport.Opcode().Transport() == roce.TransportUC {
				mu.Lock()
				n++
				lose := n == 2
				mu.Unlock()
				if lose {
					fabric.Release(pkt)
					return true
				}
			}
			return next.Send(from, pkt)
		})
	}
	a, b := ucPair(t, subnet.New(subnet.Config{}, drop))
	msg := bytes.Repeat([]byte{0xee}, 3000)
	copy(a.mem(0, len(msg)), msg)
	b.drv.PostRecv(b.wq, b.seg(8192, 4096))
	idx := a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeSend, FMCESE: signaled},
		Data: []uverbs.DataSeg{a.seg(0, uint32(len(msg)))}})
	checkReq(t, a.poll(t), a.wq.Q.QPN, idx, uverbs.OpcodeSend, 0)
	b.noCQE(t)
	copy(a.mem(4096, 100), bytes.Repeat([]byte{0x42}, 100))
	idx = a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeSend, FMCESE: signaled},
		Data: []uverbs.DataSeg{a.seg(4096, 100)}})
	checkReq(t, a.poll(t), a.wq.Q.QPN, idx, uverbs.OpcodeSend, 0)
	checkRecv(t, b.poll(t), uverbs.CQERespSend, b.wq.Q.QPN, a.wq.Q.QPN, a.lid, 0, 0x77, 100)
	if !bytes.Equal(b.mem(8192, 100), a.mem(4096, 100)) {
		t.Fatal("data of the second message differ")
	}
	b.noCQE(t)
}

// TestUCForeignPackets: a UC packet for a connected UC QP from a LID
// other than its remote one, with another P_Key, or with an RC opcode,
// does nothing; the QP still works.
func TestUCForeignPackets(t *testing.T) {
	sub := subnet.New(subnet.Config{})
	a, b := ucPair(t, sub)
	rogue := attachRogue(t, sub)
	b.drv.PostRecv(b.wq, b.seg(8192, 4096))
	for _, c := range []struct {
		from       *subnet.Port
		slid, pkey uint16
		op         roce.Opcode
	}{{rogue, rogue.LID(), 0xffff, roce.UCSendOnly}, {a.d.ibPort, a.lid, 0x8001, roce.UCSendOnly}, {a.d.ibPort, a.lid, 0xffff, roce.RCSendOnly}} {
		sendForged(t, c.from, ib.LRHFields{DLID: b.lid, SLID: c.slid},
			roce.PacketFields{BTH: roce.BTHFields{Opcode: c.op, PKey: c.pkey, DestQP: b.wq.Q.QPN, PSN: 0x100}})
	}
	b.noCQE(t)
	if n := b.d.Stats().RxDropped; n != 3 {
		t.Fatalf("%d packets dropped, want 3", n)
	}
	if got := b.mem(8192, 6); bytes.Equal(got, []byte("forged")) {
		t.Fatal("forged data placed")
	}
	ucExchange(t, a, b, 0)
}

// TestSRQShared: two RC QPs of one device take their receives from one
// RMP (rq_type SRQ): the messages of two senders land in the RMP's WQEs
// in the order they came, each CQE with the WQE's index as its counter,
// its QP's number and user index; a WQE freed back at the tail is used
// again once the head comes round to it.
func TestSRQShared(t *testing.T) {
	sub := subnet.New(subnet.Config{})
	a0 := newRCEnd(t, "hca0", sub, 0x0002c90300000100)
	a1 := a0.another(t)
	b0 := newRCEnd(t, "hca1", sub, 0x0002c90300000200)
	s, ring := newRMP(t, b0) // 4 WQEs of 64 bytes
	srqQP := func(a *mlx5test.QPArgs) { a.RQType, a.SRQ, a.UserIndex = ifc.RQTypeSRQ, s.N, 0x99 }
	b1 := addEndWith(t, b0.d, b0.drv, b0.ib, srqQP)
	b2 := addEndWith(t, b0.d, b0.drv, b0.ib, srqQP)
	a0.connect(t, b0.lid, b1.wq.Q.QPN)
	b1.connect(t, a0.lid, a0.wq.Q.QPN)
	a1.connect(t, b0.lid, b2.wq.Q.QPN)
	b2.connect(t, a1.lid, a1.wq.Q.QPN)

	var idx []uint16
	for i := range 3 {
		idx = append(idx, b0.drv.PostSRQRecv(ring, b0.seg(uint64(8192+i*1024), 1024)))
	}
	send := func(from *rcEnd, to *rcEnd, off uint64, n int, seed byte) {
		t.Helper()
		for i := range n {
			from.mem(off, n)[i] = seed + byte(i)
		}
		from.drv.PostSend(from.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeSend},
			Data: []uverbs.DataSeg{from.seg(off, uint32(n))}})
	}
	pollRecv := func(want *rcEnd, wqe uint16, n uint32) {
		t.Helper()
		c := want.poll(t)
		checkRecv(t, c, uverbs.CQERespSend, want.wq.Q.QPN, uverbs.DecodeCQE(c).SrcQPN, uverbs.DecodeCQE(c).SLID, wqe, 0x99, n)
	}
	send(a0, b1, 0, 100, 1)
	pollRecv(b1, idx[0], 100)
	send(a1, b2, 0, 200, 2)
	c := b2.poll(t)
	checkRecv(t, c, uverbs.CQERespSend, b2.wq.Q.QPN, a1.wq.Q.QPN, a1.lid, idx[1], 0x99, 200)
	send(a0, b1, 0, 300, 3)
	pollRecv(b1, idx[2], 300)
	for i, n := range []int{100, 200, 300} {
		if got := b0.mem(uint64(8192+i*1024), n); got[0] != byte(i+1) || got[n-1] != byte(i+1)+byte(n-1) {
			t.Fatalf("message %d misplaced", i)
		}
	}
	// WQE 0 back at the tail; the head (3) goes on to it.
	b0.drv.FreeSRQWQE(ring, idx[0])
	if i := b0.drv.PostSRQRecv(ring, b0.seg(16384, 1024)); i != 3 {
		t.Fatalf("posted at %d", i)
	}
	if i := b0.drv.PostSRQRecv(ring, b0.seg(20480, 1024)); i != idx[0] {
		t.Fatalf("posted at %d, want the freed %d", i, idx[0])
	}
	send(a0, b1, 0, 10, 4)
	pollRecv(b1, 3, 10)
	send(a0, b1, 0, 20, 5)
	pollRecv(b1, idx[0], 20)
	if b0.mem(20480, 1)[0] != 5 {
		t.Fatal("second use of WQE 0 misplaced")
	}
}

// xrcPair is an XRC initiator QP on one device and, on another, an XRC
// target QP in a fresh XRC domain with an XRC SRQ of that domain (16
// WQEs of 64 bytes, user index 0x55, completing to a CQ of its own),
// connected; the returned end polls the SRQ's CQ.
type xrcSetup struct {
	ini, tgt, srqEnd *rcEnd
	xrcd             uint32
	srq              *mlx5test.SRQ
	ring             *mlx5test.SRQRing
}

func newXRC(t *testing.T) *xrcSetup {
	t.Helper()
	sub := subnet.New(subnet.Config{})
	d0, drv0, ib0, _ := ibProbed(t, Config{Name: "hca0", Subnet: sub, NodeGUID: 0x0002c90300000100})
	d1, drv1, ib1, _ := ibProbed(t, Config{Name: "hca1", Subnet: sub, NodeGUID: 0x0002c90300000200})
	ini := addEndWith(t, d0, drv0, ib0, func(a *mlx5test.QPArgs) {
		a.St, a.RQType, a.SRQ, a.XRCD, a.RcvCQ = ifc.QPStXRC, ifc.RQTypeSRQ, ib0.S0.N, ib0.XRCD1, ib0.C0.CQN
	})
	xrcd, err := drv1.AllocXRCD()
	if err != nil {
		t.Fatal(err)
	}
	tgt := addEndWith(t, d1, drv1, ib1, func(a *mlx5test.QPArgs) {
		a.St, a.RQType, a.SRQ, a.XRCD, a.NoSQ, a.UAR = ifc.QPStXRC, ifc.RQTypeSRQ, ib1.S0.N, xrcd, true, 0
		a.PD, a.SndCQ, a.RcvCQ = ib1.P0, ib1.C0.CQN, ib1.C0.CQN
	})
	cq, err := drv1.KernelCQ(64)
	if err != nil {
		t.Fatal(err)
	}
	drv1.InitCQ(cq)
	in, s := drv1.CreateXRCSRQIn(tgt.pd, xrcd, cq.CQN, 4, 1, 0x55)
	if s, err = drv1.CreateSRQ(in, s); err != nil {
		t.Fatal(err)
	}
	ring := &mlx5test.SRQRing{S: s, LogSize: 4, Stride: 32, Hold: tgt.wq.Hold}
	drv1.InitSRQ(ring)
	ini.connect(t, tgt.lid, tgt.wq.Q.QPN)
	tgt.connect(t, ini.lid, ini.wq.Q.QPN)
	srqEnd := *tgt
	srqEnd.cq, srqEnd.ci = cq, 0
	return &xrcSetup{ini: ini, tgt: tgt, srqEnd: &srqEnd, xrcd: xrcd, srq: s, ring: ring}
}

// xrcSend posts an XRC SEND of n bytes to XRC SRQ srqn and checks its REQ
// CQE.
func (x *xrcSetup) xrcSend(t *testing.T, srqn uint32, n int, seed byte) {
	t.Helper()
	for i := range n {
		x.ini.mem(0, n)[i] = seed + byte(i)
	}
	idx := x.ini.drv.PostSend(x.ini.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeSend, FMCESE: signaled},
		Segs: uverbs.HasXRC, XRCSRQN: srqn, Data: []uverbs.DataSeg{x.ini.seg(0, uint32(n))}})
	checkReq(t, x.ini.poll(t), x.ini.wq.Q.QPN, idx, uverbs.OpcodeSend, 0)
}

// TestXRCSend: an XRC SEND from an initiator QP reaches the target QP
// through the XRC SRQ its WQE names: the data in the SRQ's WQE, the CQE
// on the SRQ's CQ with the SRQ's user index and the WQE index; the
// target QP's own CQ has nothing.
func TestXRCSend(t *testing.T) {
	x := newXRC(t)
	for i := range 3 {
		wqe := x.tgt.drv.PostSRQRecv(x.ring, x.tgt.seg(uint64(8192+i*4096), 4096))
		x.xrcSend(t, x.srq.N, 3000, byte(i))
		checkRecv(t, x.srqEnd.poll(t), uverbs.CQERespSend, x.tgt.wq.Q.QPN, x.ini.wq.Q.QPN, x.ini.lid, wqe, 0x55, 3000)
		if got := x.tgt.mem(uint64(8192+i*4096), 3000); got[0] != byte(i) || got[2999] != byte(i)+byte(2999%256) {
			t.Fatalf("XRC SEND %d data", i)
		}
	}
	x.tgt.noCQE(t)
}

// TestXRCForeignSRQ: an XRC request naming an XRC SRQ of another XRC
// domain (or an RMP, or no SRQ) does nothing: no data placed, no CQE,
// counted as dropped; an RC packet for the target and an XRC request for
// the initiator likewise; the target still works.
func TestXRCForeignSRQ(t *testing.T) {
	x := newXRC(t)
	drv := x.tgt.drv
	other, err := drv.AllocXRCD()
	if err != nil {
		t.Fatal(err)
	}
	in, s := drv.CreateXRCSRQIn(x.tgt.pd, other, x.srqEnd.cq.CQN, 4, 1, 0x66)
	if s, err = drv.CreateSRQ(in, s); err != nil {
		t.Fatal(err)
	}
	ring := &mlx5test.SRQRing{S: s, LogSize: 4, Stride: 32, Hold: x.tgt.wq.Hold}
	drv.InitSRQ(ring)
	drv.PostSRQRecv(ring, x.tgt.seg(8192, 4096))
	x.tgt.drv.PostSRQRecv(x.ring, x.tgt.seg(40960, 4096))
	forge := func(to *rcEnd, op roce.Opcode, srqn uint32) {
		from := x.ini
		if to == x.ini {
			from = x.tgt
		}
		sendForged(t, from.d.ibPort, ib.LRHFields{DLID: to.lid, SLID: from.lid}, roce.PacketFields{
			BTH: roce.BTHFields{Opcode: op, PKey: 0xffff, DestQP: to.wq.Q.QPN, PSN: 0x100, AckReq: true}, XRCETH: srqn})
	}
	before := x.tgt.d.Stats().RxDropped
	forge(x.tgt, roce.RCSendOnly.XRC(), s.N)           // another domain's XRC SRQ
	forge(x.tgt, roce.RCSendOnly.XRC(), x.tgt.ib.S1.N) // an RMP
	forge(x.tgt, roce.RCSendOnly.XRC(), 0xabcdef)      // nothing
	forge(x.tgt, roce.RCSendOnly, 0)                   // RC
	x.tgt.d.Sync()
	if n := x.tgt.d.Stats().RxDropped - before; n != 4 {
		t.Fatalf("%d packets dropped, want 4", n)
	}
	forge(x.ini, roce.RCSendOnly.XRC(), x.srq.N) // a request to the initiator
	x.ini.d.Sync()
	if n := x.ini.d.Stats().RxDropped; n != 1 {
		t.Fatalf("initiator dropped %d, want 1", n)
	}
	x.srqEnd.noCQE(t)
	x.tgt.noCQE(t)
	if bytes.Contains(x.tgt.mem(8192, 4096), []byte("forged")) || bytes.Contains(x.tgt.mem(40960, 4096), []byte("forged")) {
		t.Fatal("forged data placed")
	}
	x.xrcSend(t, x.srq.N, 100, 9)
	checkRecv(t, x.srqEnd.poll(t), uverbs.CQERespSend, x.tgt.wq.Q.QPN, x.ini.wq.Q.QPN, x.ini.lid, 0, 0x55, 100)
	if x.tgt.mem(40960, 1)[0] != 9 {
		t.Fatal("XRC SEND data")
	}
}

// sendForged sends a packet of LRH lrh and transport t with the payload
// "forged" through port from.
func sendForged(t *testing.T, from *subnet.Port, lrh ib.LRHFields, tr roce.PacketFields) {
	t.Helper()
	tr.Payload = []byte("forged")
	pkt, err := ib.Build(fabric.NewFrame(), &ib.PacketFields{LRH: lrh, Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	from.Send(pkt)
}

// attachRogue attaches a port to sub that sinks what it receives.
func attachRogue(t *testing.T, sub *subnet.Subnet) *subnet.Port {
	t.Helper()
	p, err := sub.Attach("rogue", 0x0002c90300000301, func(pkt []byte) bool { fabric.Release(pkt); return true })
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestUCErrors: a UC SEND whose data segment names a wrong key completes
// with LOCAL_PROT_ERR and moves the QP to ERR: the next send and a posted
// receive are flushed; an RDMA READ (no UC operation) is refused (as
// every WQE the decoder refuses, with LOCAL_LENGTH: TakeSend's mapping;
// the spec's §7.5.1 wants LOCAL_QP_OP_ERR for an opcode the service type
// has not); the peer gets nothing.
func TestUCErrors(t *testing.T) {
	a, b := ucPair(t, subnet.New(subnet.Config{}))
	bad := a.seg(0, 64)
	bad.LKey ^= 0x01
	idx := a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeSend, FMCESE: signaled},
		Data: []uverbs.DataSeg{bad}})
	if e := uverbs.DecodeErrCQE(a.poll(t)); e.Opcode != uverbs.CQEReqErr || e.Syndrome != uverbs.SyndromeLocalProtErr ||
		e.WQECounter != idx || e.QPN != a.wq.Q.QPN || e.SRQN != 0x77 {
		t.Fatalf("error CQE %+v", e)
	}
	if _, st, _ := a.d.QPState(a.wq.Q.QPN); st != transport.StateErr {
		t.Fatalf("QP state %v, want ERR", st)
	}
	a.drv.PostRecv(a.wq, a.seg(8192, 64))
	idx = a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeSend},
		Data: []uverbs.DataSeg{a.seg(0, 64)}})
	flushed := map[uint8]uint16{}
	for range 2 {
		e := uverbs.DecodeErrCQE(a.poll(t))
		if e.Syndrome != uverbs.SyndromeWRFlushErr {
			t.Fatalf("flush CQE %+v", e)
		}
		flushed[e.Opcode] = e.WQECounter
	}
	if w, ok := flushed[uverbs.CQEReqErr]; !ok || w != idx {
		t.Fatalf("send not flushed: %v", flushed)
	}
	if w, ok := flushed[uverbs.CQERespErr]; !ok || w != 0 {
		t.Fatalf("receive not flushed: %v", flushed)
	}
	b.noCQE(t)

	c, d := ucPair(t, subnet.New(subnet.Config{}))
	idx = c.drv.PostSend(c.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeRDMARead, FMCESE: signaled},
		Segs: uverbs.HasRAddr, RAddr: uverbs.RAddrSeg{RAddr: d.data, RKey: d.key}, Data: []uverbs.DataSeg{c.seg(0, 64)}})
	if e := uverbs.DecodeErrCQE(c.poll(t)); e.Opcode != uverbs.CQEReqErr || e.Syndrome != uverbs.SyndromeLocalLengthErr || e.WQECounter != idx {
		t.Fatalf("READ on UC: %+v", e)
	}
	d.noCQE(t)
}

// TestUCSharedSRQ: two UC QPs of one device receive through one RMP, their
// multi-packet messages interleaved on the wire: each message takes the
// RMP's head WQE at its first packet, so the second QP's message (one
// packet, in between) lands in the next WQE and neither overwrites the
// other.
func TestUCSharedSRQ(t *testing.T) {
	sub := subnet.New(subnet.Config{})
	a := newRCEnd(t, "hca0", sub, 0x0002c90300000100)
	b0 := newRCEnd(t, "hca1", sub, 0x0002c90300000200)
	s, ring := newRMP(t, b0) // 4 WQEs of 64 bytes
	ucSRQ := func(q *mlx5test.QPArgs) { q.St, q.RQType, q.SRQ = ifc.QPStUC, ifc.RQTypeSRQ, s.N }
	b1 := addEndWith(t, b0.d, b0.drv, b0.ib, ucSRQ)
	b2 := addEndWith(t, b0.d, b0.drv, b0.ib, ucSRQ)
	b1.connect(t, a.lid, 0x123)
	b2.connect(t, a.lid, 0x124)
	w0 := b0.drv.PostSRQRecv(ring, b0.seg(8192, 4096))
	w1 := b0.drv.PostSRQRecv(ring, b0.seg(16384, 4096))
	first := bytes.Repeat([]byte{0xa1}, 1024) // the PMTU connect sets
	for _, p := range []struct {
		to      *rcEnd
		op      roce.Opcode
		psn     uint32
		payload []byte
	}{{b1, roce.UCSendFirst, 0x100, first}, {b2, roce.UCSendOnly, 0x100, []byte("two")}, {b1, roce.UCSendLast, 0x101, []byte("one")}} {
		pkt, err := ib.Build(fabric.NewFrame(), &ib.PacketFields{LRH: ib.LRHFields{DLID: b0.lid, SLID: a.lid},
			Transport: roce.PacketFields{BTH: roce.BTHFields{Opcode: p.op, PKey: 0xffff, DestQP: p.to.wq.Q.QPN, PSN: p.psn}, Payload: p.payload}})
		if err != nil {
			t.Fatal(err)
		}
		a.d.ibPort.Send(pkt)
		b0.d.Sync()
	}
	checkRecv(t, b2.poll(t), uverbs.CQERespSend, b2.wq.Q.QPN, 0x124, a.lid, w1, 0x77, 3)
	checkRecv(t, b1.poll(t), uverbs.CQERespSend, b1.wq.Q.QPN, 0x123, a.lid, w0, 0x77, 1027)
	if !bytes.Equal(b0.mem(8192, 1027), append(first, "one"...)) || !bytes.Equal(b0.mem(16384, 3), []byte("two")) {
		t.Fatal("interleaved UC messages misplaced")
	}
}

// newRMP is an RMP of 4 WQEs of 64 bytes in e's PD, its list linked as
// the provider links it.
func newRMP(t testing.TB, e *rcEnd) (*mlx5test.SRQ, *mlx5test.SRQRing) {
	t.Helper()
	in, s := e.drv.CreateRMPIn(e.pd, 2, 6)
	s, err := e.drv.CreateSRQ(in, s)
	if err != nil {
		t.Fatal(err)
	}
	ring := &mlx5test.SRQRing{S: s, LogSize: 2, Stride: 64, Hold: e.wq.Hold}
	e.drv.InitSRQ(ring)
	return s, ring
}
