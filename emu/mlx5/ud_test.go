package mlx5

import (
	"bytes"
	"errors"
	"testing"

	"github.com/hcaemu/hcaemu/emu/ib"
	"github.com/hcaemu/hcaemu/emu/ib/mad"
	"github.com/hcaemu/hcaemu/emu/ib/subnet"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/mlx5/mlx5test"
	"github.com/hcaemu/hcaemu/emu/roce"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

const testQKey = 0x11111111

// udReady walks e's UD (or GSI) QP to RTS with Q_Key qkey, as mlx5_ib
// does for a UD QP (MTU 4096; 256 for QP1).
func (e *rcEnd) udReady(t *testing.T, qkey uint32) {
	t.Helper()
	mtu := uint32(mtu4096)
	if e.wq.Q.St == ifc.QPStQP1 {
		mtu = 1
	}
	for _, s := range []struct {
		op  ifc.Opcode
		set func([]byte)
	}{
		{ifc.OpRst2InitQP, func(qpc []byte) {
			ifc.PriPath(ifc.ADSVhcaPortNum).Set(qpc, 1)
			ifc.QPCQKey.Set(qpc, qkey)
		}},
		{ifc.OpInit2RTRQP, func(qpc []byte) {
			ifc.QPCMTU.Set(qpc, mtu)
			ifc.QPCLogMsgMax.Set(qpc, 12)
		}},
		{ifc.OpRTR2RTSQP, func(qpc []byte) { ifc.QPCNextSendPSN.Set(qpc, 0x10) }},
	} {
		if err := e.drv.ModifyQP(s.op, e.wq.Q, 0, s.set); err != nil {
			t.Fatalf("%v: %v", s.op, err)
		}
	}
}

// udPair is two devices on one subnet, each with a UD QP in RTS.
func udPair(t *testing.T) (*subnet.Subnet, *rcEnd, *rcEnd) {
	sub := subnet.New(subnet.Config{})
	a := newUDEnd(t, "hca0", sub, 0x0002c90300000100, ifc.QPStUD)
	b := newUDEnd(t, "hca1", sub, 0x0002c90300000200, ifc.QPStUD)
	a.udReady(t, testQKey)
	b.udReady(t, testQKey)
	return sub, a, b
}

func newUDEnd(t *testing.T, name string, sub *subnet.Subnet, guid uint64, st uint32) *rcEnd {
	t.Helper()
	d, drv, ib, _ := ibProbed(t, Config{Name: name, Subnet: sub, NodeGUID: guid})
	return addEnd(t, d, drv, ib, st)
}

// sendUD posts a signaled UD SEND of n bytes at offset 0 of e's buffers
// to av and checks its REQ CQE.
func (e *rcEnd) sendUD(t *testing.T, av uverbs.AV, msg []byte) {
	t.Helper()
	copy(e.mem(0, len(msg)), msg)
	idx := e.drv.PostSend(e.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeSend, FMCESE: signaled},
		AV: av, Segs: uverbs.HasAV, Data: []uverbs.DataSeg{e.seg(0, uint32(len(msg)))}})
	checkReq(t, e.poll(t), e.wq.Q.QPN, idx, uverbs.OpcodeSend, 0)
}

// recvUD checks e's next CQE is the receive of msg from (slid, srcQPN),
// with the GRH flag grh, into the buffer at off (the payload after the
// 40-byte GRH area).
func (e *rcEnd) recvUD(t *testing.T, off uint64, msg []byte, slid uint16, srcQPN uint32, grh bool) uverbs.CQE {
	t.Helper()
	b := e.poll(t)
	c := uverbs.DecodeCQE(b)
	if b[uverbs.OpOwnOffset]>>4 != uverbs.CQERespSend || c.ByteCnt != uint32(40+len(msg)) || c.QPN != e.wq.Q.QPN ||
		c.SrcQPN != srcQPN || c.SLID != slid || (c.GRH != 0) != grh {
		t.Fatalf("UD receive CQE %+v op %#x: want %d bytes from lid %d qpn %#x grh %v", c, b[uverbs.OpOwnOffset]>>4, 40+len(msg), slid, srcQPN, grh)
	}
	if got := e.mem(off+40, len(msg)); !bytes.Equal(got, msg) {
		t.Fatalf("UD payload %q, want %q", got, msg)
	}
	return c
}

// TestUDUnicast: a UD SEND by LID, with and without a GRH, lands after
// the 40-byte GRH area of the receiver's buffer with the source LID, QPN
// and SL in its CQE; with a GRH the area holds it (the sender's GID as
// SGID) and the CQE says so. A wrong Q_Key, a datagram larger than the
// buffer, a GID index the port does not have: dropped or failed as IBA
// says, and the receive request stays for the next datagram.
func TestUDUnicast(t *testing.T) {
	sub, a, b := udPair(t)
	bGID := ib.MakeGID(sub.GIDPrefix(), b.d.ibPort.GUID())
	aGID := a.d.ibPort.GID()

	b.drv.PostRecv(b.wq, b.seg(4096, 1024))
	a.sendUD(t, uverbs.AV{QKey: testQKey, DQPDCT: b.wq.Q.QPN, RLID: b.lid, StatRateSL: 3}, []byte("no GRH"))
	c := b.recvUD(t, 4096, []byte("no GRH"), a.lid, a.wq.Q.QPN, false)
	if c.SL != 3 {
		t.Errorf("SL %d, want 3", c.SL)
	}

	b.drv.PostRecv(b.wq, b.seg(8192, 1024))
	a.sendUD(t, uverbs.AV{QKey: testQKey, DQPDCT: b.wq.Q.QPN, RLID: b.lid, GRHGIDFL: uverbs.AVGRH | 0x12345,
		HopLimit: 64, RGID: bGID}, []byte("with a GRH"))
	b.recvUD(t, 8192, []byte("with a GRH"), a.lid, a.wq.Q.QPN, true)
	grh := ib.GRH(b.mem(8192, ib.GRHSize))
	if grh.SGID() != aGID || grh.DGID() != bGID || grh.FlowLabel() != 0x12345 || grh.HopLmt() != 64 {
		t.Errorf("GRH area: SGID %x DGID %x flow %#x hops %d", grh.SGID(), grh.DGID(), grh.FlowLabel(), grh.HopLmt())
	}

	// The QP's own Q_Key (bit 31 of the AV's), then a wrong one.
	b.drv.PostRecv(b.wq, b.seg(12288, 64))
	a.sendUD(t, uverbs.AV{QKey: 0x80000000, DQPDCT: b.wq.Q.QPN, RLID: b.lid}, []byte("own qkey"))
	b.recvUD(t, 12288, []byte("own qkey"), a.lid, a.wq.Q.QPN, false)
	b.drv.PostRecv(b.wq, b.seg(12288, 64))
	a.sendUD(t, uverbs.AV{QKey: testQKey + 1, DQPDCT: b.wq.Q.QPN, RLID: b.lid}, []byte("wrong qkey"))
	b.noCQE(t)
	if v := b.d.Stats().QKeyViolations; v != 1 {
		t.Errorf("QKeyViolations %d, want 1", v)
	}
	// Larger than the 64-byte buffer with its GRH area: dropped.
	a.sendUD(t, uverbs.AV{QKey: testQKey, DQPDCT: b.wq.Q.QPN, RLID: b.lid}, bytes.Repeat([]byte("x"), 25))
	b.noCQE(t)
	// The request is still there.
	a.sendUD(t, uverbs.AV{QKey: testQKey, DQPDCT: b.wq.Q.QPN, RLID: b.lid}, []byte("fits"))
	b.recvUD(t, 12288, []byte("fits"), a.lid, a.wq.Q.QPN, false)

	// A GID index the port has not: the request fails, the QP goes to
	// ERR, and a later datagram finds no QP taking it.
	copy(a.mem(0, 4), "gidx")
	a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeSend, FMCESE: signaled},
		AV:   uverbs.AV{QKey: testQKey, DQPDCT: b.wq.Q.QPN, RLID: b.lid, GRHGIDFL: uverbs.AVGRH | 1<<20, RGID: bGID},
		Segs: uverbs.HasAV, Data: []uverbs.DataSeg{a.seg(0, 4)}})
	if e := a.poll(t); e[uverbs.OpOwnOffset]>>4 != uverbs.CQEReqErr {
		t.Fatalf("send with GID index 1: CQE %+v", uverbs.DecodeCQE(e))
	}
	if st, _, _ := a.d.QPState(a.wq.Q.QPN); st != ifc.QPStateERR {
		t.Fatalf("QP state %d after a failed UD send, want ERR", st)
	}
}

// TestUDIsolation: a datagram acts only on a UD QP of the port it is
// addressed to: not on an RC QP's number, not on a QP of another device
// with the same number, not with another partition's P_Key; and a sender
// cannot claim another port's LID (the subnet drops it).
func TestUDIsolation(t *testing.T) {
	sub, a, b := udPair(t)
	rcOnB := b.another(t)
	b.drv.PostRecv(b.wq, b.seg(4096, 1024))
	rcOnB.drv.PostRecv(rcOnB.wq, rcOnB.seg(4096, 1024))
	before := b.d.Stats().RxDropped

	// To the RC QP's number with a UD opcode.
	a.sendUD(t, uverbs.AV{QKey: testQKey, DQPDCT: rcOnB.wq.Q.QPN, RLID: b.lid}, []byte("to an RC QP"))
	rcOnB.noCQE(t)
	// Hand-made packets: another P_Key, a forged SLID, a DLID not b's.
	host, err := sub.Attach("attacker", 0x0002c903000000ff, func(p []byte) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	defer host.Detach()
	for _, c := range []struct {
		name string
		lrh  ib.LRHFields
		pkey uint16
	}{
		{"another partition", ib.LRHFields{DLID: b.lid, SLID: host.LID()}, 0x8001},
		{"a forged SLID", ib.LRHFields{DLID: b.lid, SLID: a.lid}, 0xffff},
	} {
		f := ib.PacketFields{LRH: c.lrh, Transport: roce.PacketFields{
			BTH:     roce.BTHFields{Opcode: roce.UDSendOnly, PKey: c.pkey, DestQP: b.wq.Q.QPN},
			DETH:    roce.DETHFields{QKey: testQKey, SrcQP: 0x99},
			Payload: []byte(c.name)}}
		pkt, err := ib.Build(make([]byte, 256), &f)
		if err != nil {
			t.Fatal(err)
		}
		host.Send(pkt)
		b.noCQE(t)
	}
	if got := b.d.Stats().RxDropped - before; got < 2 {
		t.Errorf("RxDropped grew by %d, want the RC-numbered and the other partition's", got)
	}
	// The receive request is intact for a good datagram.
	a.sendUD(t, uverbs.AV{QKey: testQKey, DQPDCT: b.wq.Q.QPN, RLID: b.lid}, []byte("good"))
	b.recvUD(t, 4096, []byte("good"), a.lid, a.wq.Q.QPN, false)
}

// TestGSIOnTheWire: the GSI QP (st QP1) sends with QPN 1 and the GSI
// Q_Key whatever its WQE says, and receives what is sent to QPN 1: a
// PathRecord query to the SA at the SM's LID comes back as ib_sa expects
// it (source QPN 1, the SM's LID, the P_Key in the CQE) with the path to
// the other port; and a MAD from the other device's QP1 arrives as from
// QPN 1.
func TestGSIOnTheWire(t *testing.T) {
	sub := subnet.New(subnet.Config{})
	a := newUDEnd(t, "hca0", sub, 0x0002c90300000100, ifc.QPStQP1)
	b := newUDEnd(t, "hca1", sub, 0x0002c90300000200, ifc.QPStQP1)
	a.udReady(t, mad.GSIQKey)
	b.udReady(t, mad.GSIQKey)

	q := mad.SAMAD{Header: mad.Header{BaseVersion: 1, MgmtClass: mad.ClassSubnAdm, ClassVersion: 2,
		Method: mad.MethodGet, TID: 0x4242, AttrID: mad.AttrSAPathRecord}, CompMask: mad.PRDGID | mad.PRSGID | mad.PRNumbPath}
	pr := mad.PathRecord{SGID: a.d.ibPort.GID(), DGID: b.d.ibPort.GID(), NumbPath: 1}
	if err := pr.Encode(q.Data[:]); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, mad.Size)
	if err := q.Encode(body); err != nil {
		t.Fatal(err)
	}
	a.drv.PostRecv(a.wq, a.seg(4096, 40+mad.Size))
	a.sendUD(t, uverbs.AV{QKey: 0x1234 /* the GSI QP sends 0x80010000 */, DQPDCT: 1, RLID: subnet.SMLID}, body)
	b0 := a.poll(t)
	c := uverbs.DecodeCQE(b0)
	if b0[uverbs.OpOwnOffset]>>4 != uverbs.CQERespSend || c.ByteCnt != 40+mad.Size || c.SrcQPN != 1 || c.SLID != subnet.SMLID ||
		c.ImmInvalPkey != 0xffff || c.GRH != 0 {
		t.Fatalf("SA answer CQE %+v", c)
	}
	resp, err := mad.DecodeSA(a.mem(4096+40, mad.Size))
	if err != nil || resp.TID != 0x4242 || !resp.IsResponse() || resp.Status != mad.StatusOK {
		t.Fatalf("SA answer %+v: %v", resp.Header, err)
	}
	got, err := mad.DecodePathRecord(resp.Data[:])
	if err != nil || got.DLID != b.lid || got.SLID != a.lid {
		t.Fatalf("PathRecord %+v: %v (want DLID %d SLID %d)", got, err, b.lid, a.lid)
	}

	// QP1 to QP1 between the devices (ib_cm's MADs go so).
	b.drv.PostRecv(b.wq, b.seg(4096, 40+mad.Size))
	a.sendUD(t, uverbs.AV{QKey: mad.GSIQKey, DQPDCT: 1, RLID: b.lid}, body)
	if c := b.recvUD(t, 4096, body, a.lid, 1, false); c.ImmInvalPkey != 0xffff {
		t.Errorf("GSI CQE P_Key %#x", c.ImmInvalPkey)
	}
}

// TestMulticast: ATTACH_TO_MCG puts UD QPs in a group; a datagram to the
// group's MLID with its MGID reaches every attached QP of every member
// port (its GRH in the buffer), none that is not attached, and none after
// DETACH_FROM_MCG or DESTROY_QP. The commands refuse what the firmware
// refuses.
func TestMulticast(t *testing.T) {
	sub, a, b := udPair(t)
	b2 := b.another(t)
	// b2 is an RC QP: make a UD one on b's device for the second member.
	bUD := addEnd(t, b.d, b.drv, b.ib, ifc.QPStUD)
	bUD.udReady(t, subnet.BroadcastQKey)
	b.udReady2(t, subnet.BroadcastQKey)
	mgid := subnet.BroadcastMGID
	mlid, _, _ := sub.Group(mgid)
	joinSA(t, b, mgid)

	if err := b.drv.AttachMCG(b.wq.Q, mgid, false); err != nil {
		t.Fatal(err)
	}
	if err := b.drv.AttachMCG(b.wq.Q, mgid, false); err != nil {
		t.Fatalf("attach twice: %v", err)
	}
	if err := bUD.drv.AttachMCG(bUD.wq.Q, mgid, false); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		q    *mlx5test.QP
		gid  [16]byte
		det  bool
	}{
		{"an RC QP", b2.wq.Q, mgid, false},
		{"a unicast GID", b.wq.Q, b.d.ibPort.GID(), false},
		{"detach of a QP not attached", b2.wq.Q, mgid, true},
	} {
		var ce *mlx5test.CmdError
		if err := b.drv.AttachMCG(c.q, c.gid, c.det); !errors.As(err, &ce) || ce.Status != ifc.StatBadParamErr {
			t.Errorf("%s: %v, want BAD_PARAM", c.name, err)
		}
	}

	b.drv.PostRecv(b.wq, b.seg(4096, 1024))
	bUD.drv.PostRecv(bUD.wq, bUD.seg(4096, 1024))
	b2.drv.PostRecv(b2.wq, b2.seg(4096, 1024))
	av := uverbs.AV{QKey: subnet.BroadcastQKey, DQPDCT: multicastQPN, RLID: mlid, GRHGIDFL: uverbs.AVGRH, RGID: mgid}
	a.sendUD(t, av, []byte("to the group"))
	b.recvUD(t, 4096, []byte("to the group"), a.lid, a.wq.Q.QPN, true)
	bUD.recvUD(t, 4096, []byte("to the group"), a.lid, a.wq.Q.QPN, true)
	b2.noCQE(t)
	if g := ib.GRH(b.mem(4096, ib.GRHSize)); g.DGID() != mgid {
		t.Errorf("GRH DGID %x", g.DGID())
	}

	// Detached, then destroyed: neither receives.
	if err := b.drv.AttachMCG(b.wq.Q, mgid, true); err != nil {
		t.Fatal(err)
	}
	if err := bUD.drv.ToRST(bUD.wq.Q); err != nil {
		t.Fatal(err)
	}
	if err := bUD.drv.DestroyQP(bUD.wq.Q); err != nil {
		t.Fatal(err)
	}
	b.drv.PostRecv(b.wq, b.seg(8192, 1024))
	a.sendUD(t, av, []byte("again"))
	b.noCQE(t)
	b.d.core.Lock()
	groups := len(b.d.fn.mcgs)
	b.d.core.Unlock()
	if groups != 0 {
		t.Errorf("%d groups left after the last QP left", groups)
	}
}

// udReady2 moves e's QP, already in RTS, to Q_Key qkey the way IPoIB's
// does not need: through RST again.
func (e *rcEnd) udReady2(t *testing.T, qkey uint32) {
	t.Helper()
	if err := e.drv.ToRST(e.wq.Q); err != nil {
		t.Fatal(err)
	}
	e.wq.SQPI, e.wq.RQPI = 0, 0
	e.udReady(t, qkey)
}

// joinSA makes e's port a member of group mgid through the SA (the
// subnet forwards multicast to member ports only), by a raw packet from
// the port as ib_sa's would be.
func joinSA(t *testing.T, e *rcEnd, mgid ib.GID) {
	t.Helper()
	q := mad.SAMAD{Header: mad.Header{BaseVersion: 1, MgmtClass: mad.ClassSubnAdm, ClassVersion: 2,
		Method: mad.MethodSet, TID: 0x77, AttrID: mad.AttrSAMCMemberRecord}, CompMask: mad.MCMGID | mad.MCPortGID | mad.MCJoinState}
	rec := mad.MCMemberRecord{MGID: mgid, PortGID: e.d.ibPort.GID(), JoinState: 1}
	if err := rec.Encode(q.Data[:]); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, mad.Size)
	if err := q.Encode(body); err != nil {
		t.Fatal(err)
	}
	f := ib.PacketFields{LRH: ib.LRHFields{DLID: subnet.SMLID, SLID: e.lid}, Transport: roce.PacketFields{
		BTH:     roce.BTHFields{Opcode: roce.UDSendOnly, PKey: 0xffff, DestQP: 1},
		DETH:    roce.DETHFields{QKey: mad.GSIQKey, SrcQP: 1},
		Payload: body}}
	pkt, err := ib.Build(make([]byte, 512), &f)
	if err != nil {
		t.Fatal(err)
	}
	e.d.ibPort.Send(pkt)
	e.d.Sync()
	if _, members, _ := e.d.ibPort.Subnet().Group(mgid); members[e.lid] == 0 {
		t.Fatalf("port %d did not join %x", e.lid, mgid)
	}
}

// TestQP2Err: 2ERR_QP from RTS moves the QP to ERR and flushes what is
// posted with WR_FLUSH_ERR; from RST it is allowed too.
func TestQP2Err(t *testing.T) {
	_, a, _ := udPair(t)
	a.drv.PostRecv(a.wq, a.seg(4096, 1024))
	if err := a.drv.ToERR(a.wq.Q); err != nil {
		t.Fatal(err)
	}
	e := a.poll(t)
	if e[uverbs.OpOwnOffset]>>4 != uverbs.CQERespErr || uverbs.DecodeErrCQE(e).Syndrome != uverbs.SyndromeWRFlushErr {
		t.Fatalf("flush CQE %+v", uverbs.DecodeErrCQE(e))
	}
	if st, _, _ := a.d.QPState(a.wq.Q.QPN); st != ifc.QPStateERR {
		t.Fatalf("state %d", st)
	}
	other := a.another(t)
	if err := other.drv.ToERR(other.wq.Q); err != nil {
		t.Fatalf("RST to ERR: %v", err)
	}
}

// TestRTS2RTSQKey: RTS2RTS with Q_KEY changes a UD QP's Q_Key in RTS (as
// ipoib_mcast_attach does once the broadcast group's join answers):
// datagrams with the new key land, with the old one not. The transition
// refuses bits the driver's opt_mask does not give a UD QP, and a QP not
// in RTS.
func TestRTS2RTSQKey(t *testing.T) {
	_, a, b := udPair(t)
	if err := b.drv.ModifyQP(ifc.OpRTS2RTSQP, b.wq.Q, ifc.OptQKey, func(qpc []byte) { ifc.QPCQKey.Set(qpc, 0xb1b) }); err != nil {
		t.Fatal(err)
	}
	b.drv.PostRecv(b.wq, b.seg(4096, 1024))
	a.sendUD(t, uverbs.AV{QKey: testQKey, DQPDCT: b.wq.Q.QPN, RLID: b.lid}, []byte("old key"))
	b.noCQE(t)
	a.sendUD(t, uverbs.AV{QKey: 0xb1b, DQPDCT: b.wq.Q.QPN, RLID: b.lid}, []byte("new key"))
	b.recvUD(t, 4096, []byte("new key"), a.lid, a.wq.Q.QPN, false)

	var ce *mlx5test.CmdError
	if err := b.drv.ModifyQP(ifc.OpRTS2RTSQP, b.wq.Q, ifc.OptRRE, nil); !errors.As(err, &ce) || ce.Status != ifc.StatBadParamErr {
		t.Errorf("RTS2RTS of a UD QP with RRE: %v, want BAD_PARAM", err)
	}
	other := b.another(t) // in RST
	if err := b.drv.ModifyQP(ifc.OpRTS2RTSQP, other.wq.Q, 0, nil); !errors.As(err, &ce) || ce.Status != ifc.StatBadQPStateErr {
		t.Errorf("RTS2RTS from RST: %v, want BAD_QP_STATE", err)
	}
	if err := b.drv.ModifyQP(ifc.OpRst2InitQP, other.wq.Q, 0, func(qpc []byte) { ifc.PriPath(ifc.ADSVhcaPortNum).Set(qpc, 1) }); err != nil {
		t.Fatal(err)
	}
	if err := b.drv.ModifyQP(ifc.OpInit2InitQP, other.wq.Q, ifc.OptRWE, func(qpc []byte) { ifc.QPCRWE.Set(qpc, 1) }); err != nil {
		t.Fatalf("INIT2INIT: %v", err)
	}
	if ctx, err := b.drv.QueryQP(other.wq.Q); err != nil || ifc.QPCRWE.Get(ctx) != 1 || ifc.QPCState.Get(ctx) != ifc.QPStateINIT {
		t.Fatalf("after INIT2INIT: rwe %d state %d: %v", ifc.QPCRWE.Get(ctx), ifc.QPCState.Get(ctx), err)
	}
}
