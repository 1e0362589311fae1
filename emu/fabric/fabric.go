// Package fabric models the network the emulated HCAs and the guests' NICs
// are attached to:
//
//   - Switch, the one lossless Ethernet segment of the HCAs' ports and the
//     guests' NICs: RoCEv2 frames (Ethernet / IPv4 or IPv6 / UDP 4791 /
//     InfiniBand transport) go to the HCA port that owns the destination IP
//     address, which is the destination GID; every other frame goes to a
//     station's NIC by MAC (learnt, flooded when unknown). A receiver whose
//     queue is full refuses a frame and the sender backs off (lossless,
//     like PFC). Ports are untrusted: an address belongs to one port at a
//     time (SetAddrs refuses an address another port owns), a port's frame
//     enters the fabric only when its IP source is one of the sending
//     port's addresses, and no NIC may speak for another station's HCA.
//   - StreamNIC, a QEMU NIC on the segment (its -netdev stream socket), and
//     Uplink, a trunk to other networks (a TAP device or AF_PACKET).
//   - Links and decorators: a port's frames pass through a chain of Link
//     decorators before the switch forwards them. Capture (package
//     capture, with its pcap writer) is one; fault injection plugs in at
//     the same place.
//   - Direct delivery (Batch): between two HCA ports with nothing watching
//     the wire, RC packets go in batches without frames (no Ethernet, IP,
//     UDP headers, no ICRC), one hand-off per batch; a capture, a fault rule,
//     a recorder, a NIC or an uplink gets frames as before.
//   - The frame buffer pool (NewFrame, Release, Clone): buffer ownership is
//     part of the fabric's API, so a decorator never needs the device model.
//
// The package knows nothing of the device models (emu/pvrdma, emu/hca) nor of the
// transport's header formats (package roce): of a frame it reads the
// Ethernet header, the IP addresses, the UDP destination port (to tell
// RoCEv2) and ARP's sender fields.
package fabric

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Receiver takes a frame delivered to a port. It must not block and owns the
// frame afterwards (it calls Release when done). It returns false when its
// queue is full and it dropped (and released) the frame: the sender may back
// off and send again.
type Receiver func(frame []byte) bool

// Link is where a port's frames go. It is the interface packet-level fault
// injection implements, as a Decorator around the next link.
//
// Send takes ownership of frame (a buffer from NewFrame) and must do exactly
// one of these with it: pass it on to the next link, keep it and pass it on
// later (delay, reorder), or Release it (drop). A link that duplicates a
// frame passes on Clone(frame) as well. It may change the frame's bytes in
// place (corruption) before passing it on, and must not touch it after
// passing it on. Send must not block for long: it runs on the sender's
// goroutine. It returns false only when the receiving port refused the frame
// because its queue is full (backpressure: the sender backs off and sends
// again later); a frame lost on the way counts as sent.
//
// A refused frame did not cross the wire: the sender offers it again (a
// new Send of a new buffer), so a link that records what crossed (capture)
// records a frame only when the link it wraps took it.
type Link interface {
	Send(from *Port, frame []byte) bool
}

// LossNoter is a Link told of the frames a sender gave up on: offered
// while their receiver was paused, and dropped once the pause lasted the
// pause limit (StreamNIC's watchdog, on a frame from its guest). The
// switch tells every link of its decorator chain that is a LossNoter, once
// per frame, after the last refused offer. Lost must not keep frame, nor
// block: it runs on the sender's goroutine.
type LossNoter interface {
	Lost(from *Port, frame []byte)
}

// LinkFunc adapts a function to Link.
type LinkFunc func(from *Port, frame []byte) bool

// Send calls f.
func (f LinkFunc) Send(from *Port, frame []byte) bool { return f(from, frame) }

// Decorator wraps a link (capture, fault injection): it returns a Link that
// does its work on each frame and then calls next.Send, following the
// ownership rules of Link.
type Decorator func(next Link) Link

// Switch is the Ethernet segment the emulated HCAs and the guests' NICs
// share: a learning switch in this process.
//
// Ports belong to stations: a station is one machine's attachment, the
// guest's NIC (AttachNIC) and the HCA paired with it (Attach), under one MAC.
// An HCA takes the frames for its addresses that are RoCEv2 (UDP 4791),
// or every IP frame for them when its station has no NIC (hcaemu serve),
// looked up by address whatever their MAC says, the way a converged NIC
// steers RoCE to its RDMA engine. Every other frame goes to a station's
// NIC by destination MAC (the station's own MAC, or one learnt from the
// source MACs of its frames); unknown and broadcast destinations flood to
// every other station. No NIC may speak for another station's HCA address
// (RoCEv2 from it, ARP for it): a guest that poisons the others' neighbour
// caches gets no RDMA traffic that is not its own.
//
// Lossless: a receiver whose queue is full refuses a frame and the sender
// backs off and sends again (Send returns false), the way PFC pauses a link;
// nothing is dropped for lack of room except when flooding.
type Switch struct {
	mu       sync.RWMutex
	ports    map[*Port]struct{}
	byIP     map[netip.Addr]*Port
	stations map[[6]byte]*station // by the MAC they were attached with
	uplinks  []*station           // trunks to other networks: no MAC of their own
	link     Link

	camMu sync.Mutex
	cam   map[[6]byte]camEntry // learnt MAC -> station, at most camSize
	now   func() time.Time     // the clock entries age by (tests replace it)

	Forwarded atomic.Uint64
	// Dropped counts frames lost on the segment: for nobody, or given up
	// on at the pause limit (see Paused).
	Dropped atomic.Uint64
	// Paused counts the offers a full receiver refused (backpressure: the
	// sender offers the frame again); not drops.
	Paused atomic.Uint64
	// Flooded counts frames sent to every station (broadcast, multicast,
	// unknown unicast).
	Flooded atomic.Uint64
	// Spoofed counts frames dropped as they entered the fabric, before any
	// decorator saw them: an HCA's frame from an IP source address it does
	// not own (or without an IP header); a NIC's RoCEv2 frame from an
	// address another station's HCA owns, or ARP speaking for one; any
	// frame from a MAC that is another station's NIC's.
	Spoofed atomic.Uint64
	// CAMFull counts source MACs not learnt because the table was full.
	CAMFull atomic.Uint64
	// Direct counts the packets among Forwarded that went from HCA to HCA
	// without frames (see Batch).
	Direct atomic.Uint64
	// DirectRuns counts the packets among Direct that went inside runs:
	// several MIDDLE packets of one message carried as one (Packet.Run).
	DirectRuns atomic.Uint64
	// DirectLent counts the packets among DirectRuns whose payload the
	// sender lent (Lender): copied once, from its memory to the receiver's.
	DirectLent atomic.Uint64

	decorated bool                        // made with decorators: direct only when quiet says
	quiet     atomic.Pointer[func() bool] // AllowDirect's

	noters []LossNoter                 // the decorator chain's links told of frames given up on
	log    atomic.Pointer[slog.Logger] // SetLogger's; nil: no log
}

// The MAC table is bounded the way a switch's CAM is: a guest sending from
// ever new source MACs cannot grow it without limit. Entries age out after
// camAge (the usual 300 s); when the table is full of live entries, new
// MACs are not learnt and frames to them flood, as on real switches.
const (
	camSize = 1024
	camAge  = 300 * time.Second
)

// camEntry is one learnt MAC: its station and when it was last seen.
type camEntry struct {
	st   *station
	seen time.Time
}

// station is one machine on the segment: its NIC and its HCAs (guarded by
// the switch's mu); or an uplink, whose port is its nic.
type station struct {
	mac    [6]byte
	nic    *Port
	hcas   []*Port
	uplink bool
}

// NewSwitch returns a switch whose ports' frames pass through the
// decorators (outermost first) before being forwarded.
func NewSwitch(decorators ...Decorator) *Switch {
	s := &Switch{ports: map[*Port]struct{}{}, byIP: map[netip.Addr]*Port{}, stations: map[[6]byte]*station{},
		cam: map[[6]byte]camEntry{}, now: time.Now}
	var l Link = LinkFunc(s.forward)
	for i := len(decorators) - 1; i >= 0; i-- {
		l = decorators[i](l)
		if n, ok := l.(LossNoter); ok {
			s.noters = append(s.noters, n)
		}
	}
	s.link = l
	s.decorated = len(decorators) > 0
	return s
}

// Port is one HCA's or one NIC's attachment to the switch.
type Port struct {
	sw    *Switch
	name  string
	rx    Receiver
	mac   [6]byte
	st    *station
	nic   bool
	addrs []netip.Addr // guarded by sw.mu
	// owned is a copy of addrs the send path reads without the switch's
	// lock (replaced, never changed in place).
	owned atomic.Pointer[[]netip.Addr]
	gone  atomic.Bool
	// direct takes batches sent without frames (SetDirect); nil: frames only.
	direct atomic.Pointer[DirectReceiver]
}

// Attach connects an HCA's port called name, paired with the NIC whose MAC
// is mac, whose frames are delivered to rx.
func (s *Switch) Attach(name string, mac [6]byte, rx Receiver) *Port {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := &Port{sw: s, name: name, rx: rx, mac: mac, st: s.station(mac)}
	p.st.hcas = append(p.st.hcas, p)
	s.ports[p] = struct{}{}
	return p
}

// AttachNIC connects a guest's NIC called name with MAC mac, whose frames
// are delivered to rx. The MAC is the station's from then on: no other
// station's frames may come from it. A MAC has one NIC at a time.
func (s *Switch) AttachNIC(name string, mac [6]byte, rx Receiver) (*Port, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.station(mac)
	if st.nic != nil {
		return nil, fmt.Errorf("fabric: MAC %s belongs to NIC %s", net.HardwareAddr(mac[:]), st.nic.name)
	}
	p := &Port{sw: s, name: name, rx: rx, mac: mac, st: st, nic: true}
	st.nic = p
	s.ports[p] = struct{}{}
	return p, nil
}

// AttachUplink connects a trunk to another network (a TAP device, a host
// interface) called name, whose frames are delivered to rx. Its MACs are
// learnt from its frames; it may not send from a MAC of this segment's
// NICs, nor RoCEv2 from an address of this segment's HCAs.
func (s *Switch) AttachUplink(name string, rx Receiver) *Port {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &station{uplink: true}
	p := &Port{sw: s, name: name, rx: rx, st: st, nic: true}
	st.nic = p
	s.uplinks = append(s.uplinks, st)
	s.ports[p] = struct{}{}
	return p
}

// station returns the station of mac, made if new (s.mu held).
func (s *Switch) station(mac [6]byte) *station {
	st := s.stations[mac]
	if st == nil {
		st = &station{mac: mac}
		s.stations[mac] = st
	}
	return st
}

// Name and MAC of the port.
func (p *Port) Name() string { return p.name }
func (p *Port) MAC() [6]byte { return p.mac }

// Switch is the switch the port is attached to: a decorator asks it which
// port owns a frame's destination (Owner), e.g. to match frames by the
// device receiving them.
func (p *Port) Switch() *Switch { return p.sw }

// AddrInUseError is SetAddrs' answer for an address another port owns.
type AddrInUseError struct {
	Addr  netip.Addr
	Owner string // the owning port's name
}

func (e *AddrInUseError) Error() string {
	return "fabric: address " + e.Addr.String() + " belongs to port " + e.Owner
}

// errNICAddrs: a NIC's addresses are its guest's business, not the switch's.
var errNICAddrs = errors.New("fabric: a NIC port owns no addresses")

// SetAddrs replaces the IP addresses (GIDs) an HCA's port owns, all or
// nothing: when another port owns one of them it returns an *AddrInUseError
// and the port keeps the addresses it had. IPv4-mapped IPv6 addresses count
// as the IPv4 address they map. A detached port owns nothing.
func (p *Port) SetAddrs(addrs []netip.Addr) error {
	if p.nic {
		return errNICAddrs
	}
	s := p.sw
	s.mu.Lock()
	defer s.mu.Unlock()
	next := make([]netip.Addr, 0, len(addrs))
	if !p.gone.Load() {
		for _, a := range addrs {
			a = a.Unmap()
			if o, taken := s.byIP[a]; taken && o != p {
				return &AddrInUseError{Addr: a, Owner: o.name}
			}
			if !slices.Contains(next, a) {
				next = append(next, a)
			}
		}
	}
	for _, a := range p.addrs {
		if s.byIP[a] == p {
			delete(s.byIP, a)
		}
	}
	for _, a := range next {
		s.byIP[a] = p
	}
	p.addrs = next
	p.owned.Store(&next)
	return nil
}

// Owns reports whether the port owns address a (IPv4-mapped counts as
// IPv4).
func (p *Port) Owns(a netip.Addr) bool {
	owned := p.owned.Load()
	return owned != nil && slices.Contains(*owned, a.Unmap())
}

// Send puts a frame (a buffer from NewFrame) on the wire. The caller gives
// up the frame. It returns false when the receiving port's queue was full
// (backpressure).
//
// A frame the port may not send (see Switch.Spoofed) is dropped here
// before the switch's decorators: capture and fault injection see only
// frames that entered the fabric, and what a fault rule does to a frame
// afterwards (rewriting a header) is the fabric's doing, not a port's.
func (p *Port) Send(frame []byte) bool {
	if p.gone.Load() {
		Release(frame)
		return true
	}
	if !p.admit(frame) {
		p.sw.Spoofed.Add(1)
		Release(frame)
		return true
	}
	return p.sw.link.Send(p, frame)
}

// admit checks a frame's source against what the port may send from, and
// learns its source MAC.
func (p *Port) admit(frame []byte) bool {
	if len(frame) < 14 {
		return false
	}
	s := p.sw
	if !p.nic {
		if src, ok := SrcIP(frame); !ok || !p.Owns(src) {
			return false
		}
	} else if src, ok := claimedIP(frame); ok {
		s.mu.RLock()
		o := s.byIP[src.Unmap()]
		s.mu.RUnlock()
		if o != nil && o.st != p.st {
			return false
		}
	}
	return s.learn([6]byte(frame[6:12]), p.st)
}

// claimedIP is the address a NIC's frame speaks for, where another
// station's HCA owning it makes the frame a lie: the source of RoCEv2, the
// sender of ARP (a poisoned neighbour cache would send a guest's traffic,
// and its kernel's RDMA address resolution, to the liar).
func claimedIP(frame []byte) (netip.Addr, bool) {
	if IsRoCE(frame) {
		return SrcIP(frame)
	}
	// ARP for IPv4 over Ethernet: the sender's protocol address.
	if len(frame) >= 14+28 && binary.BigEndian.Uint16(frame[12:]) == 0x0806 &&
		binary.BigEndian.Uint16(frame[16:]) == 0x0800 && frame[19] == 4 {
		return netip.AddrFrom4([4]byte(frame[28:32])), true
	}
	return netip.Addr{}, false
}

// learn records that mac was seen at station st, within the table's bound:
// a full table first drops aged entries, then stops learning. A MAC of
// another station's NIC is not learnt: false, the frame is spoofed.
func (s *Switch) learn(mac [6]byte, st *station) bool {
	if mac[0]&1 != 0 || mac == ([6]byte{}) {
		return true // group addresses and the zero MAC are no station's; not learnt
	}
	s.mu.RLock()
	own := s.stations[mac]
	pinned := own != nil && own.nic != nil
	s.mu.RUnlock()
	if own == st {
		return true
	}
	if pinned {
		return false
	}
	now := s.now()
	s.camMu.Lock()
	defer s.camMu.Unlock()
	if e, ok := s.cam[mac]; !ok && len(s.cam) >= camSize {
		for m, e := range s.cam {
			if now.Sub(e.seen) >= camAge {
				delete(s.cam, m)
			}
		}
		if len(s.cam) >= camSize {
			s.CAMFull.Add(1)
			return true
		}
	} else if ok && e.st == st && now.Sub(e.seen) < time.Second {
		return true // fresh enough: no write
	}
	s.cam[mac] = camEntry{st: st, seen: now}
	return true
}

// Detach disconnects the port; frames for its addresses are dropped, and
// the addresses are free for another port to own.
func (p *Port) Detach() {
	if p.gone.Swap(true) {
		return
	}
	if !p.nic {
		_ = p.SetAddrs(nil) // owning nothing never fails
	}
	s := p.sw
	s.mu.Lock()
	delete(s.ports, p)
	st := p.st
	if p.nic {
		st.nic = nil
	} else {
		st.hcas = slices.DeleteFunc(st.hcas, func(h *Port) bool { return h == p })
	}
	empty := st.nic == nil && len(st.hcas) == 0
	if empty && st.uplink {
		s.uplinks = slices.DeleteFunc(s.uplinks, func(u *station) bool { return u == st })
	} else if empty && s.stations[st.mac] == st {
		delete(s.stations, st.mac)
	}
	s.mu.Unlock()
	if empty {
		s.camMu.Lock()
		for m, e := range s.cam {
			if e.st == st {
				delete(s.cam, m)
			}
		}
		s.camMu.Unlock()
	}
}

// DstIP returns the destination IP address of an Ethernet frame carrying
// IPv4 or IPv6.
func DstIP(frame []byte) (netip.Addr, bool) { return ipAddr(frame, 16, 24) }

// SrcIP returns the source IP address of an Ethernet frame carrying IPv4 or
// IPv6.
func SrcIP(frame []byte) (netip.Addr, bool) { return ipAddr(frame, 12, 8) }

// ipAddr reads the address at offset off4 of an IPv4 header or off6 of an
// IPv6 header.
func ipAddr(frame []byte, off4, off6 int) (netip.Addr, bool) {
	if len(frame) < 14 {
		return netip.Addr{}, false
	}
	switch binary.BigEndian.Uint16(frame[12:]) {
	case 0x0800:
		if len(frame) < 14+20 {
			return netip.Addr{}, false
		}
		return netip.AddrFrom4([4]byte(frame[14+off4 : 14+off4+4])), true
	case 0x86DD:
		if len(frame) < 14+40 {
			return netip.Addr{}, false
		}
		return netip.AddrFrom16([16]byte(frame[14+off6 : 14+off6+16])), true
	}
	return netip.Addr{}, false
}

// RoCEPort is RoCEv2's UDP destination port.
const RoCEPort = 4791

// IsRoCE reports whether an Ethernet frame is a RoCEv2 packet: IPv4 (no
// fragment offset) or IPv6 carrying UDP to port 4791.
func IsRoCE(frame []byte) bool {
	if len(frame) < 14 {
		return false
	}
	var udp int
	switch binary.BigEndian.Uint16(frame[12:]) {
	case 0x0800:
		if len(frame) < 14+20 || frame[14+9] != 17 || binary.BigEndian.Uint16(frame[14+6:])&0x1fff != 0 {
			return false
		}
		udp = 14 + int(frame[14]&0x0f)*4
	case 0x86DD:
		if len(frame) < 14+40 || frame[14+6] != 17 {
			return false
		}
		udp = 14 + 40
	default:
		return false
	}
	return len(frame) >= udp+8 && binary.BigEndian.Uint16(frame[udp+2:]) == RoCEPort
}

// hcaFor is the HCA that takes frame, nil for none: the one owning its
// destination address when the frame is RoCEv2, or any IP frame when that
// HCA's station has no NIC (hcaemu serve). It goes there whatever its MAC
// says: the address is the HCA's for sure (SetAddrs), a MAC only as sure
// as the sender's neighbour cache.
func (s *Switch) hcaFor(frame []byte) *Port {
	dst, ok := DstIP(frame)
	if !ok {
		return nil
	}
	s.mu.RLock()
	h := s.byIP[dst.Unmap()]
	hasNIC := h != nil && h.st.nic != nil
	s.mu.RUnlock()
	if h == nil || h.gone.Load() || (hasNIC && !IsRoCE(frame)) {
		return nil
	}
	return h
}

// nicOf is the NIC (or uplink) port of station st, unless that is where
// the frame comes from (s.mu held for reading).
func nicOf(st *station, from *Port) *Port {
	if st.nic != nil && st.nic != from && !st.nic.gone.Load() {
		return st.nic
	}
	return nil
}

// lookup returns the station a unicast MAC is at, nil if unknown.
func (s *Switch) lookup(mac [6]byte) *station {
	s.mu.RLock()
	st := s.stations[mac]
	s.mu.RUnlock()
	if st != nil {
		return st
	}
	s.camMu.Lock()
	defer s.camMu.Unlock()
	e, ok := s.cam[mac]
	if !ok || s.now().Sub(e.seen) >= camAge {
		return nil
	}
	return e.st
}

// forward delivers a frame to the HCA owning its destination, else to the
// station its destination MAC is at, else floods it to every other
// station; a frame nobody takes is dropped (released).
func (s *Switch) forward(from *Port, frame []byte) bool {
	if h := s.hcaFor(frame); h != nil {
		return s.deliver(h, frame)
	}
	dst := [6]byte(frame[0:6])
	if dst[0]&1 == 0 && dst != ([6]byte{}) {
		if st := s.lookup(dst); st != nil {
			s.mu.RLock()
			to := nicOf(st, from)
			s.mu.RUnlock()
			return s.deliver(to, frame)
		}
	}
	// Flooded: to every other station's NIC and the uplinks, best effort.
	s.Flooded.Add(1)
	s.mu.RLock()
	outs := make([]*Port, 0, len(s.stations)+len(s.uplinks))
	add := func(st *station) {
		if to := nicOf(st, from); to != nil && st != from.st {
			outs = append(outs, to)
		}
	}
	for _, st := range s.stations {
		add(st)
	}
	for _, st := range s.uplinks {
		add(st)
	}
	s.mu.RUnlock()
	if len(outs) == 0 {
		s.Dropped.Add(1)
		Release(frame)
	}
	for i, to := range outs {
		f := frame
		if i < len(outs)-1 {
			f = copyFrame(frame)
		}
		s.deliver(to, f)
	}
	return true
}

// copyFrame is a copy of frame for one more receiver: from the pool, or of
// its own when longer than a pool buffer (a guest's jumbo frame).
func copyFrame(frame []byte) []byte {
	if len(frame) <= FrameSize {
		return Clone(frame)
	}
	return append([]byte(nil), frame...)
}

// deliver hands a frame to port to (nil: nobody; dropped).
func (s *Switch) deliver(to *Port, frame []byte) bool {
	if to == nil {
		s.Dropped.Add(1)
		Release(frame)
		return true
	}
	if !to.rx(frame) {
		s.Paused.Add(1)
		return false
	}
	s.Forwarded.Add(1)
	return true
}

// SetLogger gives the switch a log for what it drops that a guest would
// miss: frames given up on at the pause limit (nil: none).
func (s *Switch) SetLogger(l *slog.Logger) { s.log.Store(l) }

// lost is a frame from port from that its sender gave up on after its
// receiver refused it for limit: counted in Dropped, logged, and told to
// the decorator chain's LossNoters (a capture records it there, once).
// The frame stays the caller's.
func (s *Switch) lost(from *Port, frame []byte, limit time.Duration) {
	s.Dropped.Add(1)
	for _, n := range s.noters {
		n.Lost(from, frame)
	}
	if l := s.log.Load(); l != nil {
		args := []any{"from", from.name, "dst_mac", net.HardwareAddr(frame[0:6]).String()}
		if dst, ok := DstIP(frame); ok {
			args = append(args, "dst_ip", dst.String())
		}
		l.Warn("segment: frame dropped: its receiver stayed paused for the pause limit",
			append(args, "bytes", len(frame), "limit", limit)...)
	}
}

// Owner reports which port owns an address (for logs and tests).
func (s *Switch) Owner(a netip.Addr) (string, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p := s.byIP[a.Unmap()]
	if p == nil {
		return "", false
	}
	return p.name, true
}
