package subnet

import (
	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/ib"
	"github.com/hcaemu/hcaemu/emu/ib/mad"
	"github.com/hcaemu/hcaemu/emu/roce"
)

// group is a multicast group: its record (everything but PortGID and
// JoinState) and its member ports with their join states.
type group struct {
	rec       mad.MCMemberRecord
	members   map[*Port]uint8
	permanent bool // the broadcast group: never deleted
}

// Group reports a multicast group's MLID and the LIDs of its member ports
// with their join states (for tests and inspection).
func (s *Subnet) Group(mgid ib.GID) (mlid uint16, members map[uint16]uint8, ok bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	g := s.groups[mgid]
	if g == nil {
		return 0, nil, false
	}
	members = make(map[uint16]uint8, len(g.members))
	for p, js := range g.members {
		members[p.lid] = js
	}
	return g.rec.MLID, members, true
}

// dropIfEmpty deletes a group made on demand that has no member left,
// freeing its MLID (s.mu held).
func (s *Subnet) dropIfEmpty(g *group) {
	if len(g.members) == 0 && !g.permanent {
		delete(s.groups, g.rec.MGID)
		delete(s.byMLID, g.rec.MLID)
	}
}

// request is what the SA knows of a request it answers.
type request struct {
	from *Port // the requesting port
	lrh  ib.LRHFields
	grh  *ib.GRHFields
	pkey uint16
	srcQ uint32
	m    mad.SAMAD
}

// saReceive is the SA agent's receiver: a packet addressed to the SM's
// LID. It answers a valid SA request and releases the packet.
func (s *Subnet) saReceive(pkt []byte) bool {
	defer fabric.Release(pkt)
	req, ok := s.saRequest(pkt)
	if !ok {
		s.SADropped.Add(1)
		return true
	}
	var resp mad.SAMAD
	s.answer(&req, &resp)
	s.SARequests.Add(1)
	s.saSend(&req, &resp)
	return true
}

// saRequest validates a packet for the SA: a well-formed UD SEND to QP1
// with the GSI Q_Key from an attached port, carrying one SubnAdm request
// MAD.
func (s *Subnet) saRequest(pkt []byte) (request, bool) {
	var r request
	p, err := ib.Parse(pkt)
	if err != nil {
		return r, false
	}
	t := &p.Transport
	if t.Opcode() != roce.UDSendOnly || t.BTH.DestQP() != 1 || t.DETH.QKey() != mad.GSIQKey ||
		len(t.Payload) != mad.Size {
		return r, false
	}
	m, err := mad.DecodeSA(t.Payload)
	if err != nil || m.BaseVersion != mad.BaseVersion || m.IsResponse() ||
		m.Method == mad.MethodTrap || m.Method == mad.MethodTrapRepress || m.Method == mad.MethodReport {
		return r, false
	}
	s.mu.RLock()
	from := s.byLID[p.LRH.SLID()]
	s.mu.RUnlock()
	if from == nil || from == s.sa {
		return r, false
	}
	r = request{from: from, lrh: p.LRH.Fields(), pkey: t.BTH.PKey(), srcQ: t.DETH.SrcQP(), m: m}
	if p.GRH != nil {
		g := p.GRH.Fields()
		r.grh = &g
	}
	return r, true
}

// answer fills resp, the answer to req.m: its header with the response
// method, a status, and the record.
func (s *Subnet) answer(req *request, resp *mad.SAMAD) {
	m := &req.m
	resp.Header = m.Header
	resp.Method = m.Method | mad.MethodResp
	if m.Method == mad.MethodSet {
		resp.Method = mad.MethodGetResp
	}
	resp.Status = mad.StatusOK
	resp.CompMask = m.CompMask
	if m.ClassVersion != mad.SAClassVersion {
		resp.Status = mad.StatusBadVersion
		resp.Data = m.Data
		return
	}
	var status uint16
	switch {
	case m.Method == mad.MethodGet && m.AttrID == mad.AttrClassPortInfo:
		status = s.classPortInfo(resp)
	case m.Method == mad.MethodGet && m.AttrID == mad.AttrSAPathRecord:
		status = s.pathRecord(req, resp)
	case m.Method == mad.MethodSet && m.AttrID == mad.AttrSAMCMemberRecord:
		status = s.join(req, resp)
	case m.Method == mad.MethodDelete && m.AttrID == mad.AttrSAMCMemberRecord:
		status = s.leave(req, resp)
	case m.Method != mad.MethodGet && m.Method != mad.MethodSet && m.Method != mad.MethodGetTable &&
		m.Method != mad.MethodDelete:
		status = mad.StatusMethodUnsupported
	default:
		status = mad.StatusAttrUnsupported
	}
	resp.Status = status
	if status != mad.StatusOK {
		resp.Data = m.Data // the request's record back, as opensm does
		resp.AttrOffset = 0
	}
}

// classPortInfo answers ClassPortInfo: the SA's class, no redirection, no
// traps, response time as the ports' subnet timeout.
func (s *Subnet) classPortInfo(resp *mad.SAMAD) uint16 {
	cpi := mad.ClassPortInfo{BaseVersion: mad.BaseVersion, ClassVersion: mad.SAClassVersion,
		RespTimeValue: s.cfg.PacketLifeTime & 31}
	_ = cpi.Encode(resp.Data[:])
	resp.AttrOffset = (mad.ClassPortInfoSize + 7) / 8
	return mad.StatusOK
}

// portByGIDOrLID finds the port a PathRecord names by GID (component
// gidBit) or LID (lidBit); ok false when the record names neither.
func (s *Subnet) portByGIDOrLID(mask, gidBit, lidBit uint64, gid ib.GID, lid uint16) (p *Port, named bool) {
	switch {
	case mask&gidBit != 0:
		p, _ = s.PortByGID(gid)
		return p, true
	case mask&lidBit != 0:
		s.mu.RLock()
		p = s.byLID[lid]
		s.mu.RUnlock()
		if p == s.sa {
			p = nil
		}
		return p, true
	}
	return nil, false
}

// selected reports whether value v satisfies a record's selector sel
// against want (IBA 15.2.5.16), comparing what ord says the values are
// (bytes of an MTU, Mb/s of a rate: 0 for no such value).
func selected(sel, want, v uint8, ord func(uint8) int) bool {
	w, x := ord(want), ord(v)
	switch sel {
	case mad.SelGreater:
		return x > w
	case mad.SelLess:
		return x < w
	case mad.SelExactly:
		return w != 0 && w == x
	}
	return true // largest available
}

// mtuOrd and rateOrd order MTUs and rates for selected and pick.
func mtuOrd(m uint8) int  { return mad.MTUBytes(m) }
func rateOrd(r uint8) int { return mad.RateMbps(r) }

// pathRecord answers PathRecord Get: the one path between two ports of
// the subnet, from the GID → LID table.
func (s *Subnet) pathRecord(req *request, resp *mad.SAMAD) uint16 {
	q, _ := mad.DecodePathRecord(req.m.Data[:])
	mask := req.m.CompMask
	dst, named := s.portByGIDOrLID(mask, mad.PRDGID, mad.PRDLID, q.DGID, q.DLID)
	if !named {
		return mad.SAStatusInsufficientComp
	}
	src, named := s.portByGIDOrLID(mask, mad.PRSGID, mad.PRSLID, q.SGID, q.SLID)
	if !named {
		src = req.from
	}
	if dst == nil || src == nil || dst.gone.Load() || src.gone.Load() {
		return mad.SAStatusNoRecords
	}
	c := &s.cfg
	if (mask&mad.PRPKey != 0 && q.PKey&0x7FFF != 0x7FFF) || (mask&mad.PRSL != 0 && q.SL != 0) ||
		(mask&mad.PRRawTraffic != 0 && q.RawTraffic) ||
		(mask&mad.PRMTUSelector != 0 && mask&mad.PRMTU != 0 && !selected(q.MTUSelector, q.MTU, c.MTU, mtuOrd)) ||
		(mask&mad.PRRateSelector != 0 && mask&mad.PRRate != 0 && !selected(q.RateSelector, q.Rate, c.Rate, rateOrd)) ||
		(mask&mad.PRPacketLifeSel != 0 && mask&mad.PRPacketLifeTime != 0 &&
			!selected(q.PacketLifeSel, q.PacketLifeTime, c.PacketLifeTime, plOrd)) {
		return mad.SAStatusNoRecords
	}
	r := mad.PathRecord{DGID: dst.GID(), SGID: src.GID(), DLID: dst.lid, SLID: src.lid,
		Reversible: true, PKey: 0xFFFF, MTUSelector: mad.SelExactly, MTU: c.MTU,
		RateSelector: mad.SelExactly, Rate: c.Rate, PacketLifeSel: mad.SelExactly, PacketLifeTime: c.PacketLifeTime}
	if mask&mad.PRServiceID == mad.PRServiceID {
		r.ServiceID = q.ServiceID
	}
	if mask&mad.PRFlowLabel != 0 {
		r.FlowLabel = q.FlowLabel
	}
	if mask&mad.PRTClass != 0 {
		r.TClass = q.TClass
	}
	_ = r.Encode(resp.Data[:])
	resp.AttrOffset = mad.PathRecordSize / 8
	return mad.StatusOK
}

// createComponents are the components a join must carry to make a group
// (IBA 15.2.5.17.2).
const createComponents = mad.MCQKey | mad.MCPKey | mad.MCSL | mad.MCFlowLabel | mad.MCTClass

// plOrd orders packet lifetimes (every 6-bit value is one, 0 included).
func plOrd(v uint8) int { return int(v) + 1 }

// pick chooses a value for a new group's MTU or rate among the values 1 to
// 63 that ord knows, at most the subnet's (have): the subnet's unless the
// join's selector asks for less; 0 when nothing satisfies it.
func pick(given bool, sel, want, have uint8, ord func(uint8) int) uint8 {
	if !given || sel == mad.SelLargest {
		return have
	}
	best := uint8(0)
	for v := uint8(1); v < 64; v++ {
		if x := ord(v); x != 0 && x <= ord(have) && selected(sel, want, v, ord) && (best == 0 || x > ord(best)) {
			best = v
		}
	}
	return best
}

// join answers MCMemberRecord Set: the requesting port joins a group,
// which is made when it does not exist and the join carries the create
// components.
func (s *Subnet) join(req *request, resp *mad.SAMAD) uint16 {
	q, _ := mad.DecodeMCMemberRecord(req.m.Data[:])
	mask := req.m.CompMask
	if mask&(mad.MCPortGID|mad.MCJoinState) != mad.MCPortGID|mad.MCJoinState {
		return mad.SAStatusInsufficientComp
	}
	if q.JoinState == 0 || q.ProxyJoin || ib.GID(q.PortGID) != req.from.GID() {
		return mad.SAStatusReqInvalid
	}
	if mask&mad.MCMGID == 0 {
		q.MGID = ib.GID{} // not a component: the SA assigns one
	}
	if q.MGID != (ib.GID{}) && !ib.GID(q.MGID).IsMulticast() {
		return mad.SAStatusReqInvalid
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.from.gone.Load() {
		return mad.SAStatusReqInvalid
	}
	g := s.groups[q.MGID] // nil for the zero MGID
	member := false
	if g != nil {
		_, member = g.members[req.from]
	}
	if !member && req.from.groups >= s.cfg.MaxPortGroups {
		return mad.SAStatusNoResources
	}
	if g != nil {
		r := &g.rec
		if (mask&mad.MCQKey != 0 && q.QKey != r.QKey) || (mask&mad.MCPKey != 0 && q.PKey != r.PKey) ||
			(mask&mad.MCMTUSelector != 0 && mask&mad.MCMTU != 0 && !selected(q.MTUSelector, q.MTU, r.MTU, mtuOrd)) ||
			(mask&mad.MCRateSelector != 0 && mask&mad.MCRate != 0 && !selected(q.RateSelector, q.Rate, r.Rate, rateOrd)) ||
			(mask&mad.MCSL != 0 && q.SL != r.SL) {
			return mad.SAStatusReqInvalid
		}
	} else {
		var status uint16
		if g, status = s.create(&q, mask); g == nil {
			return status
		}
	}
	if !member {
		req.from.groups++
	}
	g.members[req.from] |= q.JoinState
	rec := g.rec
	rec.PortGID, rec.JoinState = q.PortGID, g.members[req.from]
	_ = rec.Encode(resp.Data[:])
	resp.AttrOffset = (mad.MCMemberRecordSize + 7) / 8
	return mad.StatusOK
}

// create makes the group a join asks for (s.mu held); nil and the status
// when it cannot.
func (s *Subnet) create(q *mad.MCMemberRecord, mask uint64) (*group, uint16) {
	if mask&createComponents != createComponents {
		return nil, mad.SAStatusInsufficientComp
	}
	if q.PKey&0x7FFF != 0x7FFF {
		return nil, mad.SAStatusReqInvalid // the subnet has the default partition only
	}
	c := &s.cfg
	mtu := pick(mask&mad.MCMTUSelector != 0 && mask&mad.MCMTU != 0, q.MTUSelector, q.MTU, c.MTU, mtuOrd)
	rate := pick(mask&mad.MCRateSelector != 0 && mask&mad.MCRate != 0, q.RateSelector, q.Rate, c.Rate, rateOrd)
	if mtu == 0 || rate == 0 {
		return nil, mad.SAStatusReqInvalid
	}
	if len(s.groups) >= c.MaxGroups+1 { // +1: the broadcast group
		return nil, mad.SAStatusNoResources
	}
	mlid := uint16(0)
	for l := uint32(ib.LIDMulticast); l <= ib.LIDMulticastEnd; l++ {
		if s.byMLID[uint16(l)] == nil {
			mlid = uint16(l)
			break
		}
	}
	if mlid == 0 {
		return nil, mad.SAStatusNoResources
	}
	mgid := ib.GID(q.MGID)
	if mgid == (ib.GID{}) {
		// An MGID the SA assigns (IBA 15.2.5.17.2): ff12:a01b:<P_Key>::<MLID>,
		// in the range opensm uses for SA-assigned MGIDs.
		mgid = ib.GID{0xff, 0x12, 0xa0, 0x1b, byte(q.PKey >> 8), byte(q.PKey), 14: byte(mlid >> 8), 15: byte(mlid)}
		if s.groups[mgid] != nil {
			return nil, mad.SAStatusNoResources
		}
	}
	plt := c.PacketLifeTime
	if mask&mad.MCPacketLifeTime != 0 && q.PacketLifeTime != 0 {
		plt = q.PacketLifeTime
	}
	g := &group{rec: mad.MCMemberRecord{MGID: mgid, QKey: q.QKey, MLID: mlid, MTUSelector: mad.SelExactly,
		MTU: mtu, TClass: q.TClass, PKey: q.PKey, RateSelector: mad.SelExactly, Rate: rate,
		PacketLifeSel: mad.SelExactly, PacketLifeTime: plt, SL: q.SL, FlowLabel: q.FlowLabel,
		HopLimit: q.HopLimit, Scope: mgid[1] & 15}, members: map[*Port]uint8{}}
	s.groups[mgid] = g
	s.byMLID[mlid] = g
	return g, mad.StatusOK
}

// leave answers MCMemberRecord Delete: the requesting port leaves with
// the join states it names; a group made on demand goes with its last
// member.
func (s *Subnet) leave(req *request, resp *mad.SAMAD) uint16 {
	q, _ := mad.DecodeMCMemberRecord(req.m.Data[:])
	mask := req.m.CompMask
	if mask&(mad.MCMGID|mad.MCPortGID|mad.MCJoinState) != mad.MCMGID|mad.MCPortGID|mad.MCJoinState {
		return mad.SAStatusInsufficientComp
	}
	if q.JoinState == 0 || ib.GID(q.PortGID) != req.from.GID() {
		return mad.SAStatusReqInvalid
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups[q.MGID]
	if g == nil {
		return mad.SAStatusReqInvalid
	}
	js, ok := g.members[req.from]
	if !ok || js&q.JoinState == 0 {
		return mad.SAStatusReqInvalid
	}
	rec := g.rec
	rec.PortGID, rec.JoinState = q.PortGID, js&q.JoinState
	if js &^= q.JoinState; js == 0 {
		delete(g.members, req.from)
		req.from.groups--
		s.dropIfEmpty(g)
	} else {
		g.members[req.from] = js
	}
	_ = rec.Encode(resp.Data[:])
	resp.AttrOffset = (mad.MCMemberRecordSize + 7) / 8
	return mad.StatusOK
}

// saSend sends resp to the requester as a UD packet from the SM's LID and
// QP1, through the subnet's links (a capture records it).
func (s *Subnet) saSend(req *request, resp *mad.SAMAD) {
	var body [mad.Size]byte
	_ = resp.Encode(body[:])
	f := ib.PacketFields{
		LRH: ib.LRHFields{SL: req.lrh.SL, DLID: req.lrh.SLID, SLID: SMLID},
		Transport: roce.PacketFields{
			BTH:     roce.BTHFields{Opcode: roce.UDSendOnly, PKey: req.pkey, DestQP: req.srcQ, PSN: s.saPSN.Add(1) & roce.Mask24},
			DETH:    roce.DETHFields{QKey: mad.GSIQKey, SrcQP: 1},
			Payload: body[:],
		},
	}
	if req.grh != nil {
		f.GRH = &ib.GRHFields{TClass: req.grh.TClass, FlowLabel: req.grh.FlowLabel, HopLmt: req.grh.HopLmt,
			SGID: ib.MakeGID(s.cfg.GIDPrefix, s.cfg.SMGUID), DGID: req.grh.SGID}
	}
	out := fabric.NewFrame()
	pkt, err := ib.Build(out, &f)
	if err != nil { // cannot happen: every field is in range
		fabric.Release(out)
		s.Dropped.Add(1)
		return
	}
	if !s.link.Send(s.sa, pkt) {
		s.Dropped.Add(1) // the requester's queue is full (it released the packet): a datagram lost
	}
}
