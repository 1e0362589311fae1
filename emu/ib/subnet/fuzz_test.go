package subnet_test

import (
	"encoding/binary"
	"testing"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/ib"
	"github.com/hcaemu/hcaemu/emu/ib/mad"
	"github.com/hcaemu/hcaemu/emu/ib/subnet"
)

// saStatuses are the statuses an SA answer may carry.
var saStatuses = map[uint16]bool{0: true, mad.StatusBadVersion: true, mad.StatusMethodUnsupported: true,
	mad.StatusAttrUnsupported: true, mad.SAStatusNoResources: true, mad.SAStatusReqInvalid: true,
	mad.SAStatusNoRecords: true, mad.SAStatusInsufficientComp: true}

// FuzzSA sends arbitrary MADs to the SA from a port (as a valid UD packet
// to QP1, with or without a GRH). Oracle: the SA either drops the MAD
// (counted, no answer) or answers exactly once with a well-formed response
// to the requester: addressed from LID 1 / QP1 with the GSI Q_Key, the
// request's TID, attribute and modifier, the response method, a defined
// status; a successful PathRecord names the ports its GIDs are, a
// successful join a group that has the requester; and the subnet keeps its
// invariants (the broadcast group, members are attached ports).
func FuzzSA(f *testing.F) {
	a0, b0 := ib.MakeGID(subnet.DefaultGIDPrefix, guidA), ib.MakeGID(subnet.DefaultGIDPrefix, guidB)
	f.Add(pathReq(b0, a0, mad.PRDGID|mad.PRSGID|mad.PRPKey), false)
	f.Add(saReq(mad.MethodGet, mad.AttrClassPortInfo, 0, nil), true)
	f.Add(mcReq(mad.MethodSet, ipoibBroadcastJoin, mad.MCMemberRecord{MGID: subnet.BroadcastMGID, PortGID: a0,
		PKey: 0xFFFF, JoinState: 1}), false)
	f.Add(mcReq(mad.MethodSet, createJoin, mad.MCMemberRecord{MGID: ib.GID{0xff, 0x12, 15: 9}, PortGID: a0,
		QKey: 7, PKey: 0xFFFF, JoinState: 1}), false)
	f.Add(mcReq(mad.MethodDelete, mad.MCMGID|mad.MCPortGID|mad.MCJoinState, mad.MCMemberRecord{
		MGID: subnet.BroadcastMGID, PortGID: a0, JoinState: 1}), false)
	f.Fuzz(func(t *testing.T, body []byte, grh bool) {
		s := subnet.New(subnet.Config{MaxGroups: 4})
		a, b := attach(t, s, "a", guidA), attach(t, s, "b", guidB)
		// One join first, so that leaves and joins meet a member.
		askSA(t, b, mcReq(mad.MethodSet, ipoibBroadcastJoin, mad.MCMemberRecord{MGID: subnet.BroadcastMGID,
			PortGID: b.GID(), PKey: 0xFFFF, JoinState: 1}))
		req := make([]byte, mad.Size)
		copy(req, body)
		var dgid *ib.GID
		if grh {
			g := ib.MakeGID(subnet.DefaultGIDPrefix, subnet.DefaultSMGUID)
			dgid = &g
		}
		answered, dropped := s.SARequests.Load(), s.SADropped.Load()
		send(t, a, ud(a, subnet.SMLID, dgid, 1, mad.GSIQKey, req))
		got := a.take()
		if s.SADropped.Load() != dropped {
			if len(got) != 0 || s.SARequests.Load() != answered {
				t.Fatal("a dropped request was answered")
			}
			return
		}
		if s.SARequests.Load() != answered+1 || len(got) != 1 {
			t.Fatalf("%d answers, SA count %d→%d", len(got), answered, s.SARequests.Load())
		}
		p, err := ib.Parse(got[0])
		if err != nil {
			t.Fatalf("answer does not parse: %v", err)
		}
		tr := &p.Transport
		if p.LRH.SLID() != subnet.SMLID || p.LRH.DLID() != a.LID() || tr.BTH.DestQP() != 0x48 ||
			tr.DETH.SrcQP() != 1 || tr.DETH.QKey() != mad.GSIQKey || (p.GRH != nil) != grh ||
			(grh && p.GRH.DGID() != a.GID()) {
			t.Fatal("answer addressing")
		}
		q, _ := mad.DecodeSA(req)
		m, err := mad.DecodeSA(tr.Payload)
		if err != nil {
			t.Fatal(err)
		}
		wantMethod := q.Method | mad.MethodResp
		if q.Method == mad.MethodSet {
			wantMethod = mad.MethodGetResp
		}
		if m.Method != wantMethod || m.TID != q.TID || m.AttrID != q.AttrID || m.AttrMod != q.AttrMod ||
			m.BaseVersion != 1 || m.ClassVersion != q.ClassVersion || !saStatuses[m.Status] {
			t.Fatalf("answer header %+v to %+v", m.Header, q.Header)
		}
		if m.Status == 0 {
			switch m.AttrID {
			case mad.AttrClassPortInfo:
			case mad.AttrSAPathRecord:
				r, _ := mad.DecodePathRecord(m.Data[:])
				d, ok1 := s.PortByGID(r.DGID)
				sp, ok2 := s.PortByGID(r.SGID)
				if !ok1 || !ok2 || d.LID() != r.DLID || sp.LID() != r.SLID {
					t.Fatalf("path %+v", r)
				}
			case mad.AttrSAMCMemberRecord:
				r, _ := mad.DecodeMCMemberRecord(m.Data[:])
				mlid, members, ok := s.Group(r.MGID)
				if q.Method == mad.MethodSet && (!ok || mlid != r.MLID || members[a.LID()] == 0) {
					t.Fatalf("joined group %+v: %v %v", r, members, ok)
				}
				if !ib.IsMulticastLID(r.MLID) || ib.GID(r.PortGID) != a.GID() {
					t.Fatalf("record %+v", r)
				}
			default:
				t.Fatalf("attribute %#x answered", m.AttrID)
			}
		}
		if _, members, ok := s.Group(subnet.BroadcastMGID); !ok || members[b.LID()] != 1 {
			t.Fatal("the broadcast group lost b or itself")
		}
	})
}

// FuzzSubnet sends arbitrary bytes from a port, as they are and with the
// LRH made to pass the port's checks (its SLID, the right PktLen, fresh
// CRCs). Oracle: nothing panics; every packet is accounted for by some
// counter; and whatever a port receives passes ib.ParseLink with a source
// LID that is the sender's or the SM's.
func FuzzSubnet(f *testing.F) {
	f.Add([]byte{}, false)
	f.Add(make([]byte, 64), true)
	f.Add([]byte{0, 2, 0xc0, 0, 0, 0, 0, 2, 0x64, 0, 0xff, 0xff, 0, 0xff, 0xff, 0xff, 0, 0, 0, 1}, true)
	f.Fuzz(func(t *testing.T, b []byte, fix bool) {
		if len(b) > fabric.FrameSize {
			return
		}
		s := subnet.New(subnet.Config{})
		a, c := attach(t, s, "a", guidA), attach(t, s, "c", guidC)
		bc := subnet.BroadcastMGID
		askSA(t, c, mcReq(mad.MethodSet, ipoibBroadcastJoin, mad.MCMemberRecord{MGID: bc, PortGID: c.GID(),
			PKey: 0xFFFF, JoinState: 1}))
		pkt := fabric.NewFrame()[:len(b)]
		copy(pkt, b)
		if fix && len(pkt) >= 8 {
			binary.BigEndian.PutUint16(pkt[6:], a.LID())
			pkt[0] &= 0xF0
			if len(pkt) >= 10 && (len(pkt)-2)%4 == 0 {
				binary.BigEndian.PutUint16(pkt[4:], uint16((len(pkt)-2)/4))
			}
			_ = ib.PutICRC(pkt)
			_ = ib.PutVCRC(pkt)
		}
		total := func() uint64 {
			return s.Forwarded.Load() + s.Paused.Load() + s.Dropped.Load() + s.Malformed.Load() + s.Spoofed.Load() +
				s.Refused.Load() + s.Unroutable.Load() + s.SARequests.Load() + s.SADropped.Load()
		}
		before := total()
		a.Send(pkt)
		if total() == before {
			t.Fatal("a packet went unaccounted for")
		}
		for _, h := range []*host{a, c} {
			for _, g := range h.take() {
				lrh, _, err := ib.ParseLink(g)
				if err != nil || (lrh.SLID() != a.LID() && lrh.SLID() != subnet.SMLID) {
					t.Fatalf("%s received %x (%v)", h.Name(), g, err)
				}
			}
		}
	})
}
