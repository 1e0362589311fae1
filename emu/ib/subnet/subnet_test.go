package subnet_test

import (
	"errors"
	"testing"

	"github.com/hcaemu/hcaemu/emu/ib"
	"github.com/hcaemu/hcaemu/emu/ib/mad"
	"github.com/hcaemu/hcaemu/emu/ib/subnet"
	"github.com/hcaemu/hcaemu/emu/roce"
)

const (
	guidA = 0x0002c90300000a01
	guidB = 0x0002c90300000b01
	guidC = 0x0002c90300000c01
)

// TestLIDs: the SM has LID 1, ports get the lowest free LID from 2, a LID
// is reused once its port detaches, and a GUID attaches once.
func TestLIDs(t *testing.T) {
	checkGoroutines(t)
	s := subnet.New(subnet.Config{})
	a, b, c := attach(t, s, "a", guidA), attach(t, s, "b", guidB), attach(t, s, "c", guidC)
	if a.LID() != 2 || b.LID() != 3 || c.LID() != 4 || s.SMLID() != 1 {
		t.Fatalf("LIDs %d %d %d SM %d", a.LID(), b.LID(), c.LID(), s.SMLID())
	}
	if ports := s.Ports(); len(ports) != 4 || ports[1] != "sm" || ports[3] != "b" {
		t.Fatalf("ports %v", ports)
	}
	if _, err := s.Attach("dup", guidA, a.rx); !errors.Is(err, subnet.ErrGUIDInUse) {
		t.Fatalf("second attach of a GUID: %v", err)
	}
	if _, err := s.Attach("sm", subnet.DefaultSMGUID, a.rx); !errors.Is(err, subnet.ErrGUIDInUse) {
		t.Fatalf("attach with the SM's GUID: %v", err)
	}
	if _, err := s.Attach("zero", 0, a.rx); err == nil {
		t.Fatal("GUID 0 attached")
	}
	b.Detach()
	b.Detach() // twice is fine
	d := attach(t, s, "d", guidB)
	if d.LID() != 3 {
		t.Fatalf("reused LID %d, want 3", d.LID())
	}
	if p, ok := s.PortByGID(ib.MakeGID(subnet.DefaultGIDPrefix, guidB)); !ok || p != d.Port {
		t.Fatal("PortByGID after reuse")
	}
	if a.GID() != ib.MakeGID(0xfe80000000000000, guidA) || s.GIDPrefix() != subnet.DefaultGIDPrefix {
		t.Fatalf("GID %x", a.GID())
	}
}

// TestUnicast: packets go by DLID, to the sender itself when the DLID is
// its own, and nowhere for a LID no port has.
func TestUnicast(t *testing.T) {
	s := subnet.New(subnet.Config{})
	a, b := attach(t, s, "a", guidA), attach(t, s, "b", guidB)
	send(t, a, ud(a, b.LID(), nil, 0x99, 0x1234, []byte("to b")))
	send(t, a, ud(a, a.LID(), nil, 0x99, 0x1234, []byte("loop")))
	if g := b.take(); len(g) != 1 {
		t.Fatalf("b got %d", len(g))
	}
	if g := a.take(); len(g) != 1 {
		t.Fatalf("loopback: a got %d", len(g))
	}
	send(t, a, ud(a, 77, nil, 0x99, 0x1234, nil))
	send(t, a, ud(a, ib.LIDPermissive, nil, 0x99, 0x1234, nil))
	send(t, a, ud(a, 0xC123, nil, 0x99, 0x1234, nil)) // a multicast LID of no group
	if s.Unroutable.Load() != 3 || len(a.take())+len(b.take()) != 0 {
		t.Fatalf("unroutable %d", s.Unroutable.Load())
	}
	b.Detach()
	send(t, a, ud(a, 3, nil, 0x99, 0x1234, nil))
	if s.Unroutable.Load() != 4 {
		t.Fatalf("to a detached port: unroutable %d", s.Unroutable.Load())
	}
	if s.Forwarded.Load() != 2 {
		t.Fatalf("forwarded %d", s.Forwarded.Load())
	}
	// Backpressure: a full receiver refuses, the sender is told.
	c := attach(t, s, "c", guidC)
	c.full = true
	if send(t, a, ud(a, c.LID(), nil, 0x99, 0x1234, nil)) || s.Paused.Load() != 1 {
		t.Fatalf("a refused packet: paused %d", s.Paused.Load())
	}
}

// TestIsolation: a port cannot send from another's LID or GID, nor to
// QP0, nor malformed packets; each is dropped before anyone sees it and
// counted.
func TestIsolation(t *testing.T) {
	s := subnet.New(subnet.Config{})
	a, b := attach(t, s, "a", guidA), attach(t, s, "b", guidB)
	spoofSLID := ud(a, b.LID(), nil, 0x99, 0x1234, nil)
	spoofSLID.LRH.SLID = b.LID()
	send(t, a, spoofSLID)
	spoofSM := ud(a, b.LID(), nil, 0x99, 0x1234, nil)
	spoofSM.LRH.SLID = subnet.SMLID
	send(t, a, spoofSM)
	bgid := b.GID()
	spoofGID := ud(a, b.LID(), &bgid, 0x99, 0x1234, nil)
	spoofGID.GRH.SGID = bgid
	send(t, a, spoofGID)
	if s.Spoofed.Load() != 3 {
		t.Fatalf("spoofed %d, want 3", s.Spoofed.Load())
	}
	smp := ud(a, b.LID(), nil, 0, 0, make([]byte, 256))
	send(t, a, smp)
	vl15 := ud(a, b.LID(), nil, 0x99, 0x1234, nil)
	vl15.LRH.VL = 15
	send(t, a, vl15)
	if s.Refused.Load() != 2 {
		t.Fatalf("QP0 and VL15: refused %d", s.Refused.Load())
	}
	for _, junk := range [][]byte{nil, make([]byte, 7), make([]byte, 30)} {
		a.Send(append(junk[:0:0], junk...))
	}
	if s.Malformed.Load() != 3 {
		t.Fatalf("malformed %d", s.Malformed.Load())
	}
	if g := b.take(); len(g) != 0 {
		t.Fatalf("b got %d spoofed packets", len(g))
	}
	// With its own GID in the GRH, the same packet goes through.
	own := ud(a, b.LID(), &bgid, 0x99, 0x1234, nil)
	send(t, a, own)
	if g := b.take(); len(g) != 1 {
		t.Fatal("a's own packet with a GRH was dropped")
	}
}

func pathReq(dgid, sgid ib.GID, mask uint64) []byte {
	return saReq(mad.MethodGet, mad.AttrSAPathRecord, mask, func(b []byte) {
		r := mad.PathRecord{DGID: dgid, SGID: sgid, NumbPath: 1, PKey: 0xFFFF, Reversible: true}
		_ = r.Encode(b)
	})
}

// TestPathRecord: the SA answers a path between two ports the way IPoIB
// and rdma_cm ask for it, and "no records" for a GID nobody has.
func TestPathRecord(t *testing.T) {
	s := subnet.New(subnet.Config{})
	a, b := attach(t, s, "a", guidA), attach(t, s, "b", guidB)
	const ipoib = mad.PRDGID | mad.PRSGID | mad.PRNumbPath | mad.PRTClass | mad.PRPKey
	m := askSA(t, a, pathReq(b.GID(), a.GID(), ipoib))
	if m.Method != mad.MethodGetResp || m.Status != 0 || m.AttrID != mad.AttrSAPathRecord || m.AttrOffset != 8 {
		t.Fatalf("PathRecord answer: method %#x status %#x attr %#x offset %d", m.Method, m.Status, m.AttrID, m.AttrOffset)
	}
	r, _ := mad.DecodePathRecord(m.Data[:])
	if r.DLID != b.LID() || r.SLID != a.LID() || r.DGID != b.GID() || r.SGID != a.GID() || r.SL != 0 ||
		r.PKey != 0xFFFF || !r.Reversible || r.MTU != mad.MTU4096 || r.MTUSelector != mad.SelExactly ||
		r.Rate != mad.Rate40Gbps || r.PacketLifeTime != subnet.DefaultPacketLifeTime || r.HopLimit != 0 {
		t.Fatalf("path %+v", r)
	}
	// From b to a, by rdma_cm's mask, and the source implied.
	m = askSA(t, b, pathReq(a.GID(), ib.GID{}, mad.PRDGID|mad.PRPKey|mad.PRNumbPath|mad.PRReversible|mad.PRTClass))
	r, _ = mad.DecodePathRecord(m.Data[:])
	if m.Status != 0 || r.DLID != a.LID() || r.SLID != b.LID() {
		t.Fatalf("b → a: status %#x %+v", m.Status, r)
	}
	for _, c := range []struct {
		name string
		body []byte
		want uint16
	}{
		{"unknown DGID", pathReq(ib.MakeGID(subnet.DefaultGIDPrefix, 0x1234), a.GID(), ipoib), mad.SAStatusNoRecords},
		{"other prefix", pathReq(ib.MakeGID(0xfec0000000000000, guidB), a.GID(), ipoib), mad.SAStatusNoRecords},
		{"the SM's GID", pathReq(ib.MakeGID(subnet.DefaultGIDPrefix, subnet.DefaultSMGUID), a.GID(), ipoib), mad.SAStatusNoRecords},
		{"no destination", pathReq(b.GID(), a.GID(), mad.PRSGID), mad.SAStatusInsufficientComp},
		{"other partition", saReq(mad.MethodGet, mad.AttrSAPathRecord, ipoib, func(d []byte) {
			r := mad.PathRecord{DGID: b.GID(), SGID: a.GID(), PKey: 0x8001}
			_ = r.Encode(d)
		}), mad.SAStatusNoRecords},
		{"MTU greater than 4096", saReq(mad.MethodGet, mad.AttrSAPathRecord, mad.PRDGID|mad.PRMTUSelector|mad.PRMTU, func(d []byte) {
			r := mad.PathRecord{DGID: b.GID(), MTUSelector: mad.SelGreater, MTU: mad.MTU4096}
			_ = r.Encode(d)
		}), mad.SAStatusNoRecords},
		{"GetTable", saReq(mad.MethodGetTable, mad.AttrSAPathRecord, ipoib, nil), mad.StatusAttrUnsupported},
		{"NodeRecord", saReq(mad.MethodGet, mad.AttrSANodeRecord, 0, nil), mad.StatusAttrUnsupported},
		{"method 0x04", saReq(0x04, mad.AttrSAPathRecord, 0, nil), mad.StatusMethodUnsupported},
		{"class version 1", func() []byte { b := pathReq(b.GID(), a.GID(), ipoib); b[2] = 1; return b }(), mad.StatusBadVersion},
	} {
		if m := askSA(t, a, c.body); m.Status != c.want {
			t.Errorf("%s: status %#x, want %#x", c.name, m.Status, c.want)
		}
	}
	m = askSA(t, a, saReq(mad.MethodGet, mad.AttrClassPortInfo, 0, nil))
	cpi, _ := mad.DecodeClassPortInfo(m.Data[:])
	if m.Status != 0 || cpi.BaseVersion != 1 || cpi.ClassVersion != 2 || cpi.RespTimeValue != subnet.DefaultPacketLifeTime {
		t.Fatalf("ClassPortInfo %#x %+v", m.Status, cpi)
	}
	// What is not an SA request gets no answer.
	before := s.SADropped.Load()
	send(t, a, ud(a, subnet.SMLID, nil, 1, 0x1234, make([]byte, 256)))                           // wrong Q_Key
	send(t, a, ud(a, subnet.SMLID, nil, 1, mad.GSIQKey, make([]byte, 255)))                      // not a MAD
	send(t, a, ud(a, subnet.SMLID, nil, 2, mad.GSIQKey, pathReq(b.GID(), a.GID(), ipoib)))       // not QP1
	send(t, a, ud(a, subnet.SMLID, nil, 1, mad.GSIQKey, saReq(mad.MethodGetResp, 0x35, 0, nil))) // a response
	send(t, a, ud(a, subnet.SMLID, nil, 1, mad.GSIQKey, func() []byte { b := saReq(1, 0x35, 0, nil); b[1] = mad.ClassCM; return b }()))
	if got := s.SADropped.Load() - before; got != 5 || len(a.take()) != 0 {
		t.Fatalf("SA dropped %d, want 5", got)
	}
}

func mcReq(method uint8, mask uint64, r mad.MCMemberRecord) []byte {
	return saReq(method, mad.AttrSAMCMemberRecord, mask, func(b []byte) { _ = r.Encode(b) })
}

const (
	ipoibBroadcastJoin = mad.MCMGID | mad.MCPortGID | mad.MCPKey | mad.MCJoinState
	createJoin         = mad.MCMGID | mad.MCPortGID | mad.MCJoinState | mad.MCQKey | mad.MCMTUSelector | mad.MCMTU |
		mad.MCTClass | mad.MCPKey | mad.MCRateSelector | mad.MCRate | mad.MCSL | mad.MCFlowLabel | mad.MCHopLimit
)

// TestMulticast: joins to the pre-made IPoIB broadcast group and to a
// group made on demand, replication to the receiving members only (the
// sender among them), leaves, and the group going with its last member.
func TestMulticast(t *testing.T) {
	checkGoroutines(t)
	s := subnet.New(subnet.Config{})
	a, b, c := attach(t, s, "a", guidA), attach(t, s, "b", guidB), attach(t, s, "c", guidC)
	join := func(h *host, mask uint64, r mad.MCMemberRecord) mad.SAMAD {
		r.PortGID = h.GID()
		return askSA(t, h, mcReq(mad.MethodSet, mask, r))
	}
	for _, h := range []*host{a, b} {
		m := join(h, ipoibBroadcastJoin, mad.MCMemberRecord{MGID: subnet.BroadcastMGID, PKey: 0xFFFF, JoinState: mad.JoinFullMember})
		r, _ := mad.DecodeMCMemberRecord(m.Data[:])
		if m.Method != mad.MethodGetResp || m.Status != 0 || r.MLID != 0xC000 || r.QKey != 0x0B1B || r.MTU != mad.MTU2048 ||
			r.Rate != mad.Rate10Gbps || r.PKey != 0xFFFF || r.SL != 0 || r.Scope != 2 || r.JoinState != mad.JoinFullMember ||
			r.PortGID != h.GID() || ib.GID(r.MGID) != subnet.BroadcastMGID {
			t.Fatalf("broadcast join: status %#x %+v", m.Status, r)
		}
	}
	bc := subnet.BroadcastMGID
	send(t, a, ud(a, 0xC000, &bc, 0xFFFFFF, 0x0B1B, []byte("arp who-has")))
	if len(a.take()) != 1 || len(b.take()) != 1 || len(c.take()) != 0 {
		t.Fatal("broadcast replication: want a (the sender, a member) and b, not c")
	}

	// A group that does not exist: refused without the create components,
	// made with them.
	mgid := ib.GID{0xff, 0x12, 0x60, 0x1b, 0xff, 0xff, 15: 0x01}
	m := join(a, ipoibBroadcastJoin, mad.MCMemberRecord{MGID: mgid, PKey: 0xFFFF, JoinState: mad.JoinFullMember})
	if m.Status != mad.SAStatusInsufficientComp {
		t.Fatalf("join of a missing group without create components: %#x", m.Status)
	}
	create := mad.MCMemberRecord{MGID: mgid, QKey: 0x0B1B, MTUSelector: mad.SelExactly, MTU: mad.MTU2048,
		PKey: 0xFFFF, RateSelector: mad.SelExactly, Rate: mad.Rate10Gbps, JoinState: mad.JoinFullMember}
	m = join(a, createJoin, create)
	r, _ := mad.DecodeMCMemberRecord(m.Data[:])
	if m.Status != 0 || r.MLID != 0xC001 || r.QKey != 0x0B1B || r.MTU != mad.MTU2048 || ib.GID(r.MGID) != mgid {
		t.Fatalf("create: status %#x %+v", m.Status, r)
	}
	if m := join(b, createJoin, create); m.Status != 0 {
		t.Fatalf("b's join: %#x", m.Status)
	}
	so := create
	so.JoinState = mad.JoinSendOnlyFullMember
	if m := join(c, createJoin, so); m.Status != 0 {
		t.Fatalf("c's send-only join: %#x", m.Status)
	}
	wrongQKey := create
	wrongQKey.QKey = 0x1234
	if m := join(c, createJoin, wrongQKey); m.Status != mad.SAStatusReqInvalid {
		t.Fatalf("join with another Q_Key: %#x", m.Status)
	}
	if mlid, members, ok := s.Group(mgid); !ok || mlid != 0xC001 || len(members) != 3 || members[c.LID()] != mad.JoinSendOnlyFullMember {
		t.Fatalf("group: %v %v %v", mlid, members, ok)
	}
	send(t, c, ud(c, 0xC001, &mgid, 0xFFFFFF, 0x0B1B, []byte("to the group")))
	if len(a.take()) != 1 || len(b.take()) != 1 || len(c.take()) != 0 {
		t.Fatal("replication: want a and b, not the send-only member c")
	}

	// Joins speak for the requester only.
	other := create
	other.PortGID = b.GID()
	if m := askSA(t, c, mcReq(mad.MethodSet, createJoin, other)); m.Status != mad.SAStatusReqInvalid {
		t.Fatalf("c joining for b: %#x", m.Status)
	}

	// Leaves.
	leave := func(h *host, g ib.GID, js uint8) mad.SAMAD {
		r := mad.MCMemberRecord{MGID: g, PortGID: h.GID(), JoinState: js}
		return askSA(t, h, mcReq(mad.MethodDelete, mad.MCMGID|mad.MCPortGID|mad.MCJoinState, r))
	}
	if m := leave(a, mgid, mad.JoinFullMember); m.Method != mad.MethodDeleteResp || m.Status != 0 {
		t.Fatalf("a's leave: method %#x status %#x", m.Method, m.Status)
	}
	if m := leave(a, mgid, mad.JoinFullMember); m.Status != mad.SAStatusReqInvalid {
		t.Fatalf("a's second leave: %#x", m.Status)
	}
	send(t, b, ud(b, 0xC001, &mgid, 0xFFFFFF, 0x0B1B, nil))
	if len(a.take()) != 0 || len(b.take()) != 1 {
		t.Fatal("after a's leave: want b only")
	}
	leave(b, mgid, mad.JoinFullMember)
	c.Detach() // the last member goes by detaching
	if _, _, ok := s.Group(mgid); ok {
		t.Fatal("the group outlived its members")
	}
	if _, members, ok := s.Group(subnet.BroadcastMGID); !ok || len(members) != 2 {
		t.Fatal("the broadcast group must stay")
	}
	// The MLID is free again; a group with an MGID the SA assigns.
	assign := create
	assign.MGID = ib.GID{}
	m = join(a, createJoin&^mad.MCMGID, assign)
	r, _ = mad.DecodeMCMemberRecord(m.Data[:])
	if m.Status != 0 || r.MLID != 0xC001 || !ib.GID(r.MGID).IsMulticast() {
		t.Fatalf("SA-assigned MGID: %#x %+v", m.Status, r)
	}
}

// TestGroupLimit: groups made on demand are bounded.
func TestGroupLimit(t *testing.T) {
	s := subnet.New(subnet.Config{MaxGroups: 2})
	a := attach(t, s, "a", guidA)
	for i := range 3 {
		r := mad.MCMemberRecord{MGID: ib.GID{0xff, 0x12, 15: byte(i + 1)}, PortGID: a.GID(), QKey: 1, PKey: 0xFFFF,
			JoinState: mad.JoinFullMember}
		m := askSA(t, a, mcReq(mad.MethodSet, createJoin, r))
		if want := map[bool]uint16{true: 0, false: mad.SAStatusNoResources}[i < 2]; m.Status != want {
			t.Fatalf("group %d: %#x, want %#x", i, m.Status, want)
		}
	}
}

// TestUDLoopbackOpcodes: every transport opcode the IB wire carries goes
// through the subnet unchanged.
func TestUDLoopbackOpcodes(t *testing.T) {
	s := subnet.New(subnet.Config{})
	a, b := attach(t, s, "a", guidA), attach(t, s, "b", guidB)
	f := ib.PacketFields{LRH: ib.LRHFields{DLID: b.LID(), SLID: a.LID()}, Transport: roce.PacketFields{
		BTH: roce.BTHFields{Opcode: roce.RCSendOnly, PKey: 0xFFFF, DestQP: 0x12, PSN: 5}, Payload: []byte("rc")}}
	send(t, a, f)
	g := b.take()
	if len(g) != 1 {
		t.Fatal("RC packet lost")
	}
	p, err := ib.Parse(g[0])
	if err != nil || string(p.Transport.Payload) != "rc" || p.Transport.BTH.PSN() != 5 {
		t.Fatalf("RC packet: %v", err)
	}
}

// TestSAAnswerRefused: an answer the requester's full queue refuses is a
// datagram lost, counted.
func TestSAAnswerRefused(t *testing.T) {
	s := subnet.New(subnet.Config{})
	a := attach(t, s, "a", guidA)
	a.full = true
	send(t, a, ud(a, subnet.SMLID, nil, 1, mad.GSIQKey, saReq(mad.MethodGet, mad.AttrClassPortInfo, 0, nil)))
	if s.SARequests.Load() != 1 || s.Dropped.Load() != 1 || s.Paused.Load() != 1 {
		t.Fatalf("answered %d dropped %d paused %d", s.SARequests.Load(), s.Dropped.Load(), s.Paused.Load())
	}
}

// TestPortGroupLimit: one port is a member of a bounded number of groups;
// leaving one makes room again.
func TestPortGroupLimit(t *testing.T) {
	s := subnet.New(subnet.Config{MaxPortGroups: 2})
	a, b := attach(t, s, "a", guidA), attach(t, s, "b", guidB)
	join := func(h *host, i byte) uint16 {
		r := mad.MCMemberRecord{MGID: ib.GID{0xff, 0x12, 15: i}, PortGID: h.GID(), QKey: 1, PKey: 0xFFFF,
			JoinState: mad.JoinFullMember}
		return askSA(t, h, mcReq(mad.MethodSet, createJoin, r)).Status
	}
	if join(a, 1) != 0 || join(a, 2) != 0 || join(a, 1) != 0 {
		t.Fatal("a's first two groups (and a second join of one)")
	}
	if st := join(a, 3); st != mad.SAStatusNoResources {
		t.Fatalf("a's third group: %#x", st)
	}
	if join(b, 3) != 0 {
		t.Fatal("b is not bounded by a's groups")
	}
	r := mad.MCMemberRecord{MGID: ib.GID{0xff, 0x12, 15: 1}, PortGID: a.GID(), JoinState: mad.JoinFullMember}
	if m := askSA(t, a, mcReq(mad.MethodDelete, mad.MCMGID|mad.MCPortGID|mad.MCJoinState, r)); m.Status != 0 {
		t.Fatalf("leave: %#x", m.Status)
	}
	if st := join(a, 3); st != 0 {
		t.Fatalf("after a leave: %#x", st)
	}
}
