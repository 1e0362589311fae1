// Package subnet models an InfiniBand subnet: the switch fabric the IB
// ports of the emulated HCAs attach to, with the subnet manager and subnet
// administrator embedded in it (shared/spec/mlx5.md §5.5), as
// emu/fabric's Switch models the Ethernet segment for RoCE.
//
//   - The SM role needs no MADs: a port attaches with its port GUID and
//     is given a unique LID (the SM is at LID 1, ports from 2 on); it
//     detaches and the LID is free again. The device model reports the
//     LID, the SM's LID and the GID prefix through its own SMA
//     (package ib/mad, PortState.AnswerSMP).
//   - Forwarding: packets (native IB, LRH through VCRC, package ib) go by
//     DLID to the port that has it, back to the sender itself when the
//     DLID is its own (loopback), and to every receiving member port of a
//     multicast group when the DLID is the group's MLID (≥ 0xC000).
//   - The SA agent sits at the SM's LID, QP1: it answers SubnAdm MADs
//     (class 0x03, version 2, Q_Key 0x80010000) with IB UD packets the
//     requesting port receives like any other: ClassPortInfo Get,
//     PathRecord Get (from the subnet's GID → LID table), MCMemberRecord
//     Set (join) and Delete (leave). The IPoIB broadcast group of the
//     default partition exists from the start; other groups are made on
//     demand by a join that carries the create components.
//   - Isolation: ports are untrusted. A packet enters the subnet only
//     with its port's LID as SLID and, with a GRH, the port's GID as
//     SGID; never to QP0 nor on VL15 (only the SM sends SMPs, and it sends
//     none); a join or leave speaks only for the requester's own port GID,
//     and a port is a member of a bounded number of groups. What is
//     dropped is counted.
//   - Links and decorators as in emu/fabric: a port's packets pass through
//     a chain of Decorators before the subnet forwards them, so a capture
//     (Capture, pcap link type 252) and a fault injector
//     sit there; the SA's answers pass through them too.
//   - Direct delivery (direct.go): between two HCA ports, with nothing
//     watching the subnet, RC packets go in batches without LRH, CRCs or
//     forwarding, as on emu/fabric's Switch.
//
// Packet buffers are emu/fabric's (fabric.NewFrame, Release, Clone): a
// receiver owns what it is given and releases it. The subnet runs no
// goroutine of its own: a packet is forwarded, and the SA answers it, on
// the sender's goroutine. It knows no device model.
package subnet

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/fabric/capture"
	"github.com/hcaemu/hcaemu/emu/ib"
	"github.com/hcaemu/hcaemu/emu/ib/mad"
	"github.com/hcaemu/hcaemu/emu/roce"
)

// Receiver takes a packet delivered to a port: a buffer from
// fabric.NewFrame (or a longer one of its own) holding LRH through VCRC.
// It must not block and owns the packet afterwards (fabric.Release). It
// returns false when its queue is full and it dropped (and released) the
// packet: the sender may back off and send again.
type Receiver func(pkt []byte) bool

// Link is where a port's packets go: the subnet's forwarding, wrapped by
// decorators. Its contract is emu/fabric's Link's: Send takes ownership
// of pkt and passes it on, keeps it to pass on later, or releases it; it
// returns false only when the receiving port refused it (backpressure).
type Link interface {
	Send(from *Port, pkt []byte) bool
}

// LinkFunc adapts a function to Link.
type LinkFunc func(from *Port, pkt []byte) bool

// Send calls f.
func (f LinkFunc) Send(from *Port, pkt []byte) bool { return f(from, pkt) }

// Decorator wraps a link (capture, fault injection).
type Decorator func(next Link) Link

// Defaults of Config.
const (
	DefaultGIDPrefix = 0xFE80000000000000
	DefaultSMGUID    = 0x020000FFFE000001
	// SMLID is the LID of the embedded SM and SA.
	SMLID = 1
	// FirstPortLID is the first LID given to a port.
	FirstPortLID = 2
	// DefaultMaxGroups bounds the multicast groups made on demand.
	DefaultMaxGroups = 1024
	// DefaultMaxGroupsPerPort bounds the groups one port is a member of,
	// so that one port cannot take every group the subnet may have.
	DefaultMaxGroupsPerPort = 128
	// DefaultPacketLifeTime is the packet lifetime of paths and groups
	// (4.096 µs × 2^18 ≈ 1 s, opensm's default subnet timeout).
	DefaultPacketLifeTime = 18
)

// IPoIB's broadcast group of the default partition, which the SA makes at
// the start (ipoib joins it without create components): its MGID
// ff12:401b:ffff::ffff:ffff, Q_Key and MTU (shared/spec/mlx5.md §5.5).
var BroadcastMGID = ib.GID{0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}

const (
	BroadcastQKey = 0x00000B1B
	BroadcastMTU  = mad.MTU2048
	BroadcastRate = mad.Rate10Gbps
	BroadcastMLID = ib.LIDMulticast
)

// Config is a subnet's configuration; the zero value is the defaults.
type Config struct {
	GIDPrefix      uint64 // 0: fe80::/64
	SMGUID         uint64 // the SM's port GUID; 0: DefaultSMGUID
	MTU            uint8  // path MTU (mad.MTU*); 0: 4096
	Rate           uint8  // path rate (mad.Rate*, 2–10); 0 or another: 40 Gb/s (4X QDR)
	PacketLifeTime uint8  // 0: DefaultPacketLifeTime
	MaxGroups      int    // groups made on demand; 0: DefaultMaxGroups
	MaxPortGroups  int    // groups one port may be a member of; 0: DefaultMaxGroupsPerPort
}

// Subnet is an InfiniBand subnet with its embedded SM and SA.
type Subnet struct {
	cfg  Config
	link Link
	sa   *Port // the SM/SA's own port, LID 1

	mu     sync.RWMutex
	byLID  map[uint16]*Port
	byGUID map[uint64]*Port
	groups map[ib.GID]*group
	byMLID map[uint16]*group

	saPSN atomic.Uint32

	// Forwarded counts packets delivered to a port (each copy of a
	// multicast packet once).
	Forwarded atomic.Uint64
	// Paused counts offers a full receiver refused (the sender offers the
	// packet again); not drops.
	Paused atomic.Uint64
	// Dropped counts packets lost on the way: a multicast copy a full
	// receiver refused, a multicast packet for a group with no receiving
	// member, an SA answer its requester refused.
	Dropped atomic.Uint64
	// Malformed counts packets that entered no further than their port:
	// a bad LRH or GRH (ib.ParseLink), or too long for the fabric.
	Malformed atomic.Uint64
	// Spoofed counts packets dropped at their port for their source: an
	// SLID not the port's LID, a GRH SGID not the port's GID.
	Spoofed atomic.Uint64
	// Refused counts packets dropped at their port for what they are:
	// SMPs (to QP0, or on VL15, the SM's lane).
	Refused atomic.Uint64
	// Unroutable counts packets for a LID no port has, or a multicast LID
	// of no group.
	Unroutable atomic.Uint64
	// SARequests counts MADs the SA answered; SADropped what reached the
	// SA's LID and got no answer (not a valid SA request).
	SARequests atomic.Uint64
	SADropped  atomic.Uint64
	// Direct counts the packets among Forwarded that went in batches,
	// without whole packets (direct.go).
	Direct atomic.Uint64
	// DirectRuns counts the packets among Direct that went inside runs,
	// DirectLent those among DirectRuns whose payload was lent.
	DirectRuns atomic.Uint64
	DirectLent atomic.Uint64

	decorated bool                        // made with decorators: batches only when quiet says
	quiet     atomic.Pointer[func() bool] // AllowDirect's
}

// Port is one HCA port's attachment to the subnet.
type Port struct {
	s    *Subnet
	name string
	guid uint64
	lid  uint16
	rx   Receiver
	gone atomic.Bool
	// direct takes batches (SetDirect); nil: whole packets only.
	direct atomic.Pointer[fabric.DirectReceiver]

	groups int // groups the port is a member of (guarded by the subnet's mu)
}

// New returns a subnet whose ports' packets pass through the decorators
// (outermost first) before being forwarded.
func New(cfg Config, decorators ...Decorator) *Subnet {
	if cfg.GIDPrefix == 0 {
		cfg.GIDPrefix = DefaultGIDPrefix
	}
	if cfg.SMGUID == 0 {
		cfg.SMGUID = DefaultSMGUID
	}
	if mad.MTUBytes(cfg.MTU) == 0 {
		cfg.MTU = mad.MTU4096
	}
	if mad.RateMbps(cfg.Rate) == 0 {
		cfg.Rate = mad.Rate40Gbps
	}
	if cfg.PacketLifeTime == 0 || cfg.PacketLifeTime > 63 {
		cfg.PacketLifeTime = DefaultPacketLifeTime
	}
	if cfg.MaxGroups <= 0 {
		cfg.MaxGroups = DefaultMaxGroups
	}
	if cfg.MaxPortGroups <= 0 {
		cfg.MaxPortGroups = DefaultMaxGroupsPerPort
	}
	s := &Subnet{cfg: cfg, byLID: map[uint16]*Port{}, byGUID: map[uint64]*Port{},
		groups: map[ib.GID]*group{}, byMLID: map[uint16]*group{}, decorated: len(decorators) > 0}
	var l Link = LinkFunc(s.forward)
	for i := len(decorators) - 1; i >= 0; i-- {
		l = decorators[i](l)
	}
	s.link = l
	s.sa = &Port{s: s, name: "sm", guid: cfg.SMGUID, lid: SMLID}
	s.sa.rx = s.saReceive
	s.byLID[SMLID] = s.sa
	s.byGUID[cfg.SMGUID] = s.sa
	bc := &group{rec: mad.MCMemberRecord{MGID: BroadcastMGID, QKey: BroadcastQKey, MLID: BroadcastMLID,
		MTUSelector: mad.SelExactly, MTU: BroadcastMTU, PKey: 0xFFFF, RateSelector: mad.SelExactly,
		Rate: BroadcastRate, PacketLifeSel: mad.SelExactly, PacketLifeTime: cfg.PacketLifeTime,
		Scope: BroadcastMGID[1] & 15}, members: map[*Port]uint8{}, permanent: true}
	s.groups[bc.rec.MGID] = bc
	s.byMLID[bc.rec.MLID] = bc
	return s
}

// GIDPrefix is the subnet prefix of every port's GID 0.
func (s *Subnet) GIDPrefix() uint64 { return s.cfg.GIDPrefix }

// SMLID is the LID of the subnet manager (and the SA): a port's
// PortInfo.MasterSMLID.
func (s *Subnet) SMLID() uint16 { return SMLID }

// ErrGUIDInUse is Attach's answer for a port GUID already attached.
var ErrGUIDInUse = errors.New("subnet: port GUID already attached")

// ErrFull is Attach's answer when every unicast LID is taken.
var ErrFull = errors.New("subnet: no free LID")

// Attach connects a port called name with port GUID guid, whose packets
// are delivered to rx, and gives it the lowest free LID (from 2). A GUID
// is attached once at a time (ErrGUIDInUse), and 0 is no GUID.
func (s *Subnet) Attach(name string, guid uint64, rx Receiver) (*Port, error) {
	if guid == 0 || rx == nil {
		return nil, errors.New("subnet: a port needs a GUID and a receiver")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if o := s.byGUID[guid]; o != nil {
		return nil, fmt.Errorf("%w: %#x is port %s's", ErrGUIDInUse, guid, o.name)
	}
	lid := uint16(0)
	for l := uint32(FirstPortLID); l <= ib.LIDUnicastLast; l++ {
		if s.byLID[uint16(l)] == nil {
			lid = uint16(l)
			break
		}
	}
	if lid == 0 {
		return nil, ErrFull
	}
	p := &Port{s: s, name: name, guid: guid, lid: lid, rx: rx}
	s.byLID[lid] = p
	s.byGUID[guid] = p
	return p, nil
}

// Name, GUID and LID of the port.
func (p *Port) Name() string { return p.name }
func (p *Port) GUID() uint64 { return p.guid }
func (p *Port) LID() uint16  { return p.lid }

// GID is the port's GID 0: the subnet prefix ‖ its port GUID.
func (p *Port) GID() ib.GID { return ib.MakeGID(p.s.cfg.GIDPrefix, p.guid) }

// Subnet is the subnet the port is attached to.
func (p *Port) Subnet() *Subnet { return p.s }

// Detach disconnects the port: its LID and GUID are free again, it leaves
// every multicast group, and packets for it are dropped.
func (p *Port) Detach() {
	if p == p.s.sa || p.gone.Swap(true) {
		return
	}
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byLID[p.lid] == p {
		delete(s.byLID, p.lid)
	}
	if s.byGUID[p.guid] == p {
		delete(s.byGUID, p.guid)
	}
	for _, g := range s.groups {
		if _, ok := g.members[p]; ok {
			delete(g.members, p)
			p.groups--
			s.dropIfEmpty(g)
		}
	}
}

// Send puts a packet (LRH through VCRC, in a buffer from fabric.NewFrame)
// on the subnet; the caller gives it up. It returns false when the
// receiving port's queue was full (backpressure). A packet the port may
// not send is dropped here, before the decorators, and counted.
func (p *Port) Send(pkt []byte) bool {
	if p.gone.Load() {
		fabric.Release(pkt)
		return true
	}
	if !p.admit(pkt) {
		fabric.Release(pkt)
		return true
	}
	return p.s.link.Send(p, pkt)
}

// admit checks a packet against what its port may send, and counts a
// refusal.
func (p *Port) admit(pkt []byte) bool {
	s := p.s
	lrh, grh, err := ib.ParseLink(pkt)
	if err != nil {
		s.Malformed.Add(1)
		return false
	}
	if lrh.SLID() != p.lid || (grh != nil && grh.SGID() != p.GID()) {
		s.Spoofed.Add(1)
		return false
	}
	bth := roce.BTH(pkt[ib.HeaderLen(grh != nil):])
	if bth.DestQP() == 0 || lrh.VL() == 15 {
		s.Refused.Add(1)
		return false
	}
	return true
}

// forward delivers a packet by its DLID: to the SA, a port, or the
// receiving members of a multicast group.
func (s *Subnet) forward(from *Port, pkt []byte) bool {
	lrh, _, err := ib.ParseLink(pkt) // a decorator may have changed it
	if err != nil {
		s.Malformed.Add(1)
		fabric.Release(pkt)
		return true
	}
	dlid := lrh.DLID()
	if ib.IsMulticastLID(dlid) {
		return s.multicast(dlid, pkt)
	}
	s.mu.RLock()
	to := s.byLID[dlid]
	s.mu.RUnlock()
	if to == nil || to.gone.Load() {
		s.Unroutable.Add(1)
		fabric.Release(pkt)
		return true
	}
	if !to.rx(pkt) {
		s.Paused.Add(1)
		return false
	}
	s.Forwarded.Add(1)
	return true
}

// multicast replicates pkt to every member port of the group with MLID
// mlid that receives (full or non-member; not send-only), best effort.
func (s *Subnet) multicast(mlid uint16, pkt []byte) bool {
	s.mu.RLock()
	g := s.byMLID[mlid]
	var outs []*Port
	if g != nil {
		outs = make([]*Port, 0, len(g.members))
		for m, js := range g.members {
			if js&(mad.JoinFullMember|mad.JoinNonMember) != 0 && !m.gone.Load() {
				outs = append(outs, m)
			}
		}
	}
	s.mu.RUnlock()
	if g == nil || len(outs) == 0 {
		if g == nil {
			s.Unroutable.Add(1)
		} else {
			s.Dropped.Add(1) // a group with no receiving member
		}
		fabric.Release(pkt)
		return true
	}
	for i, to := range outs {
		c := pkt
		if i < len(outs)-1 {
			c = clonePacket(pkt)
		}
		if to.rx(c) {
			s.Forwarded.Add(1)
		} else {
			s.Dropped.Add(1)
		}
	}
	return true
}

// clonePacket is a copy of pkt for one more receiver: from the pool, or
// of its own when longer than a pool buffer.
func clonePacket(pkt []byte) []byte {
	if len(pkt) <= fabric.FrameSize {
		return fabric.Clone(pkt)
	}
	return append([]byte(nil), pkt...)
}

// Ports returns the LIDs of the attached ports, the SM's included (for
// tests and inspection).
func (s *Subnet) Ports() map[uint16]string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	m := make(map[uint16]string, len(s.byLID))
	for l, p := range s.byLID {
		m[l] = p.name
	}
	return m
}

// Owner returns the name of the attached port that has LID lid (the
// SM's port is "sm"), as emu/fabric's Switch.Owner does for an IP
// address: a fault injector names the device a packet is sent to. A
// multicast LID has no owner.
func (s *Subnet) Owner(lid uint16) (string, bool) {
	s.mu.RLock()
	p := s.byLID[lid]
	s.mu.RUnlock()
	if p == nil || p.gone.Load() {
		return "", false
	}
	return p.name, true
}

// PortByGID returns the attached port whose GID 0 is gid.
func (s *Subnet) PortByGID(gid ib.GID) (*Port, bool) {
	if gid.Prefix() != s.cfg.GIDPrefix {
		return nil, false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	p := s.byGUID[gid.GUID()]
	if p == nil || p == s.sa {
		return nil, false
	}
	return p, true
}

// Capture is a decorator that records every packet its link takes (the
// SA's answers included, not what a port's checks dropped) with w, which
// must be made with capture.PcapOptions{Dissector: "infiniband"}: pcap
// link type 252, which tshark decodes as LRH, GRH, BTH, DETH and MADs
// (shared/spec/mlx5.md §5.9).
func Capture(w *capture.PcapWriter) Decorator {
	return func(next Link) Link { return capture.Wrap[*Port](w, next) }
}
