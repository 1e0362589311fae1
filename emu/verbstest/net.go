package verbstest

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/ib"
	"github.com/hcaemu/hcaemu/emu/ib/subnet"
	"github.com/hcaemu/hcaemu/emu/roce"
)

// The wire of a test's hosts, whatever their link layer: a Net holds an
// Ethernet switch (RoCE) and an InfiniBand subnet, and each host attaches
// its port to the one of its link layer (Caps.LinkLayer). The tests' hooks
// (loss, gates, taps) see the packets of both alike; an attacker injects
// the packets of its victims' link layer.

// LinkLayer is the link layer of a host's port.
type LinkLayer int

const (
	// Ethernet: RoCE v2 frames on Net.Switch; a host's Addr is its MAC
	// and the IPv4 address its RC connections use.
	Ethernet LinkLayer = iota
	// InfiniBand: native IB packets (LRH, BTH, ...) on Net.Subnet; a
	// host's Addr is its port's LID and GID.
	InfiniBand
)

func (l LinkLayer) String() string {
	if l == InfiniBand {
		return "InfiniBand"
	}
	return "Ethernet"
}

// Caps is what a Host's model offers beyond what every model must: the
// tests that need a capability a host does not declare are skipped, and
// say which.
type Caps struct {
	LinkLayer LinkLayer
	// Direct: the direct path between HCAs of one process (emu/fabric's
	// Switch hands packets without frames between devices that offer it).
	Direct bool
	// FastReg: fast-register (FAST_REG_MR) and LOCAL_INV work requests.
	FastReg bool
}

// Addr is the address of a host's port as the wire sees it: MAC and IP
// on Ethernet, LID and GID on InfiniBand (the other pair zero).
type Addr struct {
	MAC [6]byte
	IP  netip.Addr
	LID uint16
	GID ib.GID
}

func (a Addr) String() string {
	if a.LID != 0 {
		return fmt.Sprintf("LID %d", a.LID)
	}
	return a.IP.String()
}

// wireKey names a sending port in the hooks: its MAC on Ethernet, its LID
// on InfiniBand.
type wireKey struct {
	mac [6]byte
	lid uint16
}

func keyOf(h Host) wireKey {
	a := h.Addr()
	return wireKey{mac: a.MAC, lid: a.LID}
}

// packet is a packet on a Net as a hook sees it.
type packet struct {
	from wireKey
	name string // the sending port's name
	ib   bool   // an IB packet (else an Ethernet frame)
	buf  []byte
	// send passes a packet on from the same port (the hook gives buf up to
	// it, or releases it, or keeps it to pass on later).
	send func(buf []byte) bool
}

// clone is p with a copy of its buffer.
func (p packet) clone() packet {
	p.buf = fabric.Clone(p.buf)
	return p
}

// transport parses p down to its transport packet (BTH onwards).
func (p packet) transport() (roce.Packet, error) {
	if p.ib {
		pkt, err := ib.Parse(p.buf)
		return pkt.Transport, err
	}
	u, err := roce.Unframe(p.buf)
	if err != nil {
		return roce.Packet{}, err
	}
	return roce.Parse(u.IB)
}

// hook sees every packet a port of the Net sends, before it is forwarded;
// it owns p.buf (Link's contract) and returns what p.send returns, or
// true when it kept or dropped the packet.
type hook func(p packet) bool

// Net is the wire a test's hosts attach to (NewHost): a host attaches to
// Switch for RoCE, to Subnet for InfiniBand.
type Net struct {
	Switch *fabric.Switch
	Subnet *subnet.Subnet
}

// NewNet is a Net whose packets pass through hooks (outermost first) on
// either wire.
func NewNet(hooks ...hook) *Net {
	var eth []fabric.Decorator
	var ibd []subnet.Decorator
	for _, h := range hooks {
		eth = append(eth, func(next fabric.Link) fabric.Link {
			return fabric.LinkFunc(func(from *fabric.Port, frame []byte) bool {
				return h(packet{from: wireKey{mac: from.MAC()}, name: from.Name(), buf: frame,
					send: func(b []byte) bool { return next.Send(from, b) }})
			})
		})
		ibd = append(ibd, func(next subnet.Link) subnet.Link {
			return subnet.LinkFunc(func(from *subnet.Port, pkt []byte) bool {
				return h(packet{from: wireKey{lid: from.LID()}, name: from.Name(), ib: true, buf: pkt,
					send: func(b []byte) bool { return next.Send(from, b) }})
			})
		})
	}
	return &Net{Switch: fabric.NewSwitch(eth...), Subnet: subnet.New(subnet.Config{}, ibd...)}
}

// spoofed is the number of packets the wire of link layer l dropped for
// a source address their port does not own.
func (n *Net) spoofed(l LinkLayer) uint64 {
	if l == InfiniBand {
		return n.Subnet.Spoofed.Load()
	}
	return n.Switch.Spoofed.Load()
}

// attacker is a third port on a Net, of its victims' link layer, that
// sends what it likes and drops what it receives.
type attacker struct {
	ll   LinkLayer
	eth  *fabric.Port
	port *subnet.Port
	// own is its address; other another address of its own (Ethernet: a
	// link-local IPv6 one; InfiniBand: its GID, which makes the packet
	// global).
	own, other Addr
}

const attackerName = "evil"

// attach puts an attacker on n's wire of link layer l.
func (n *Net) attach(t *testing.T, l LinkLayer) *attacker {
	t.Helper()
	drop := func(b []byte) bool { fabric.Release(b); return true }
	a := &attacker{ll: l}
	if l == InfiniBand {
		p, err := n.Subnet.Attach(attackerName, 0x020000FFFE00EE01, drop)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Detach)
		a.port = p
		a.own = Addr{LID: p.LID()}
		a.other = Addr{LID: p.LID(), GID: p.GID()}
		return a
	}
	mac := [6]byte{0x00, 0x50, 0x56, 0, 0, 3}
	a.eth = n.Switch.Attach(attackerName, mac, drop)
	t.Cleanup(a.eth.Detach)
	a.own = Addr{MAC: mac, IP: netip.MustParseAddr("10.0.0.3")}
	a.other = Addr{MAC: mac, IP: netip.MustParseAddr("fe80::250:56ff:fe00:3")}
	if err := a.eth.SetAddrs([]netip.Addr{a.own.IP, a.other.IP}); err != nil {
		t.Fatal(err)
	}
	return a
}

// otherAddr is another address of victim h's port than the one its
// connections use, in the form a.other has (Ethernet: the link-local
// IPv6 address of its MAC; InfiniBand: its GID).
func otherAddr(h Host) Addr {
	a := h.Addr()
	if a.LID != 0 {
		return Addr{LID: a.LID, GID: a.GID}
	}
	m := a.MAC
	return Addr{MAC: m, IP: netip.AddrFrom16([16]byte{0xfe, 0x80, 8: m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]})}
}

// send sends the transport packet f from src to dst (addresses of its
// link layer: an IB packet is global when both have a GID); it reports
// whether it could build the packet.
func (a *attacker) send(src, dst Addr, f *roce.PacketFields) bool {
	if a.ll == InfiniBand {
		pf := ib.PacketFields{LRH: ib.LRHFields{DLID: dst.LID, SLID: src.LID}, Transport: *f}
		if src.GID != (ib.GID{}) && dst.GID != (ib.GID{}) {
			pf.GRH = &ib.GRHFields{SGID: src.GID, DGID: dst.GID, HopLmt: 64}
		}
		pkt, err := ib.Build(fabric.NewFrame(), &pf)
		if err != nil {
			return false
		}
		a.port.Send(pkt)
		return true
	}
	ibt, err := roce.Build(make([]byte, 8192), f)
	if err != nil {
		return false
	}
	ff := roce.FrameFields{Dst: dst.MAC, Src: a.eth.MAC(), SrcIP: src.IP, DstIP: dst.IP, HopLimit: 64,
		SrcPort: roce.UDPSourcePortHash(f.BTH.DestQP)}
	frame, err := roce.Frame(fabric.NewFrame(), &ff, ibt)
	if err != nil {
		return false
	}
	a.eth.Send(frame)
	return true
}

// need skips t unless the hosts newHost makes have the capability has
// checks for (named what): it asks a host of its own.
func need(t *testing.T, newHost NewHost, what string, has func(Caps) bool) {
	t.Helper()
	if c := newHost(t, NewNet(), 1, HostOpts{RAM: 1 << 20}).Caps(); !has(c) {
		t.Skipf("the model does not declare capability %s (Caps %+v)", what, c)
	}
}
