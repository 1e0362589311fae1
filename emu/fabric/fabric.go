// Package fabric models the network the emulated HCAs and the guests' NICs
// are attached to:
//
//   - Switch, the RoCE fabric joining emulated HCAs in one process: each HCA's
//     port forwards RoCEv2 frames (Ethernet / IPv4 or IPv6 / UDP 4791 /
//     InfiniBand transport) to the port that owns the destination IP address,
//     which is the destination GID. A frame for an address nobody owns is
//     dropped, as on a real segment; a receiver whose queue is full refuses a
//     frame and the sender backs off (lossless, like PFC). Ports are
//     untrusted: an address belongs to one port at a time (SetAddrs refuses
//     an address another port owns), and a port's frame enters the fabric
//     only when its IP source is one of the sending port's addresses.
//   - Segment, the guests' L2 Ethernet segment: a learning switch QEMU's
//     vmxnet3 NICs join over unix datagram sockets.
//   - Links and decorators: a port's frames pass through a chain of Link
//     decorators before the switch forwards them. Capture (package
//     capture, with its pcap writer) is one; fault injection plugs in at
//     the same place.
//   - The frame buffer pool (NewFrame, Release, Clone): buffer ownership is
//     part of the fabric's API, so a decorator never needs the device model.
//
// The package knows nothing of the device model (package emu) nor of the
// transport's header formats (package roce): it looks at a frame's Ethernet
// and IP destination only.
package fabric

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
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
type Link interface {
	Send(from *Port, frame []byte) bool
}

// LinkFunc adapts a function to Link.
type LinkFunc func(from *Port, frame []byte) bool

// Send calls f.
func (f LinkFunc) Send(from *Port, frame []byte) bool { return f(from, frame) }

// Decorator wraps a link (capture, fault injection): it returns a Link that
// does its work on each frame and then calls next.Send, following the
// ownership rules of Link.
type Decorator func(next Link) Link

// Switch is an in-process Ethernet switch for RoCEv2 frames.
type Switch struct {
	mu    sync.RWMutex
	ports map[*Port]struct{}
	byIP  map[netip.Addr]*Port
	link  Link

	Forwarded atomic.Uint64
	Dropped   atomic.Uint64
	// Spoofed counts frames a port sent from an IP source address it does
	// not own (or without an IP header): dropped as they entered the
	// fabric, before any decorator saw them.
	Spoofed atomic.Uint64
}

// NewSwitch returns a switch whose ports' frames pass through the
// decorators (outermost first) before being forwarded.
func NewSwitch(decorators ...Decorator) *Switch {
	s := &Switch{ports: map[*Port]struct{}{}, byIP: map[netip.Addr]*Port{}}
	var l Link = LinkFunc(s.forward)
	for i := len(decorators) - 1; i >= 0; i-- {
		l = decorators[i](l)
	}
	s.link = l
	return s
}

// Port is one HCA's attachment to the switch.
type Port struct {
	sw    *Switch
	name  string
	rx    Receiver
	mac   [6]byte
	addrs []netip.Addr // guarded by sw.mu
	// owned is a copy of addrs the send path reads without the switch's
	// lock (replaced, never changed in place).
	owned atomic.Pointer[[]netip.Addr]
	gone  atomic.Bool
}

// Attach connects a port called name with MAC mac whose frames are delivered
// to rx.
func (s *Switch) Attach(name string, mac [6]byte, rx Receiver) *Port {
	p := &Port{sw: s, name: name, rx: rx, mac: mac}
	s.mu.Lock()
	s.ports[p] = struct{}{}
	s.mu.Unlock()
	return p
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

// SetAddrs replaces the IP addresses (GIDs) the port owns, all or nothing:
// when another port owns one of them it returns an *AddrInUseError and the
// port keeps the addresses it had. IPv4-mapped IPv6 addresses count as the
// IPv4 address they map. A detached port owns nothing.
func (p *Port) SetAddrs(addrs []netip.Addr) error {
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
// A frame whose IP source the port does not own is dropped here (counted
// in Spoofed) before the switch's decorators: capture and fault injection
// see only frames that entered the fabric, and what a fault rule does to a
// frame afterwards (rewriting a header) is the fabric's doing, not a port's.
func (p *Port) Send(frame []byte) bool {
	if p.gone.Load() {
		Release(frame)
		return true
	}
	if src, ok := SrcIP(frame); !ok || !p.Owns(src) {
		p.sw.Spoofed.Add(1)
		Release(frame)
		return true
	}
	return p.sw.link.Send(p, frame)
}

// Detach disconnects the port; frames for its addresses are dropped, and
// the addresses are free for another port to own.
func (p *Port) Detach() {
	p.gone.Store(true)
	_ = p.SetAddrs(nil) // owning nothing never fails
	p.sw.mu.Lock()
	delete(p.sw.ports, p)
	p.sw.mu.Unlock()
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

// forward delivers a frame to the port owning its destination address; a
// frame for nobody is dropped (released).
func (s *Switch) forward(from *Port, frame []byte) bool {
	dst, ok := DstIP(frame)
	if !ok {
		s.Dropped.Add(1)
		Release(frame)
		return true
	}
	s.mu.RLock()
	to := s.byIP[dst.Unmap()]
	s.mu.RUnlock()
	if to == nil || to.gone.Load() {
		s.Dropped.Add(1)
		Release(frame)
		return true
	}
	if !to.rx(frame) {
		s.Dropped.Add(1)
		return false
	}
	s.Forwarded.Add(1)
	return true
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
