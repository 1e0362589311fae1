package roce

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

// MAC is an Ethernet address.
type MAC [6]byte

// Framing constants (spec §1.1–§1.5).
const (
	EtherTypeIPv4 = 0x0800
	EtherTypeIPv6 = 0x86DD
	EtherTypeVLAN = 0x8100

	UDPPort = 4791 // RoCEv2 UDP destination port

	EthernetHeaderSize = 14
	VLANTagSize        = 4
	IPv4HeaderSize     = 20
	IPv6HeaderSize     = 40
	UDPHeaderSize      = 8

	// MinFrameSize is the minimum Ethernet frame without FCS; Frame pads
	// shorter frames with zeros.
	MinFrameSize = 60

	// DefaultHopLimit is the usual IPv4 TTL / IPv6 hop limit (spec §9).
	DefaultHopLimit = 64

	ipProtoUDP = 17
	ipv4DF     = 0x4000
)

// Errors returned by Frame and Unframe.
var (
	ErrAddressFamily = errors.New("roce: source and destination IP are not both IPv4 or both IPv6")
	ErrNotIP         = errors.New("roce: EtherType is not IPv4 or IPv6")
	ErrIPHeader      = errors.New("roce: malformed IP header")
	ErrIPOptions     = errors.New("roce: IPv4 header has options (IHL != 5)")
	ErrIPChecksum    = errors.New("roce: bad IPv4 header checksum")
	ErrFragmented    = errors.New("roce: IP fragment")
	ErrNotUDP        = errors.New("roce: IP payload is not UDP")
	ErrNotRoCE       = errors.New("roce: UDP destination port is not 4791")
	ErrUDPLength     = errors.New("roce: UDP length inconsistent with the IP length")
	ErrUDPChecksum   = errors.New("roce: bad UDP checksum")
	ErrTooLong       = errors.New("roce: packet too long for one IP datagram")
)

// FrameFields describes the Ethernet, IP and UDP headers that Frame puts
// around a transport packet; Unframe returns them.
type FrameFields struct {
	Dst, Src MAC
	VLAN     bool   // carry an 802.1Q tag
	VLANTCI  uint16 // its PCP/DEI/VID

	// SrcIP and DstIP are both IPv4 or both IPv6. IPv4-mapped IPv6
	// addresses (RoCEv2 GIDs of IPv4 addresses, ::ffff:a.b.c.d) count as
	// IPv4; Unframe returns plain IPv4 addresses.
	SrcIP, DstIP netip.Addr

	TrafficClass uint8  // IPv4 TOS byte or IPv6 traffic class
	HopLimit     uint8  // IPv4 TTL or IPv6 hop limit, verbatim (usually DefaultHopLimit)
	IPID         uint16 // IPv4 identification (covered by the ICRC)
	NoDF         bool   // IPv4: clear DF; by default DF is set, like rxe
	FlowLabel    uint32 // IPv6 flow label, 20 bits

	SrcPort     uint16 // UDP source port, see UDPSourcePort; destination is UDPPort
	UDPChecksum bool   // compute the UDP checksum; otherwise send 0

	// KeepICRC makes Frame keep the ICRC bytes of ib instead of computing
	// them (for replay and fault injection). Unframe leaves it false.
	KeepICRC bool
}

func (f *FrameFields) is4() (bool, error) {
	s, d := f.SrcIP, f.DstIP
	s4 := s.Is4() || s.Is4In6()
	d4 := d.Is4() || d.Is4In6()
	switch {
	case s4 && d4:
		return true, nil
	case s.Is6() && d.Is6() && !s4 && !d4:
		return false, nil
	}
	return false, ErrAddressFamily
}

// FrameHeaderLen returns the size of the Ethernet, IP and UDP headers Frame
// writes before the transport packet.
func FrameHeaderLen(f *FrameFields) (int, error) {
	v4, err := f.is4()
	if err != nil {
		return 0, err
	}
	n := EthernetHeaderSize + UDPHeaderSize
	if f.VLAN {
		n += VLANTagSize
	}
	if v4 {
		n += IPv4HeaderSize
	} else {
		n += IPv6HeaderSize
	}
	return n, nil
}

// Frame writes an Ethernet II frame carrying the transport packet ib (BTH
// through ICRC) into out and returns out[:n]: Ethernet (+ optional 802.1Q),
// IPv4 with a correct header checksum or IPv6, UDP to port 4791, ib. The
// ICRC field of the copy is computed (unless f.KeepICRC), then the UDP
// checksum if requested. Frames shorter than MinFrameSize are zero-padded.
//
// To avoid copying, the caller may Build the transport packet directly at
// out[FrameHeaderLen(f):]; Frame then does not copy it. Otherwise ib must
// not overlap out. Frame does not allocate.
func Frame(out []byte, f *FrameFields, ib []byte) ([]byte, error) {
	v4, err := f.is4()
	if err != nil {
		return nil, err
	}
	if len(ib) < BTHSize+ICRCSize {
		return nil, ErrTooShort
	}
	udpLen := UDPHeaderSize + len(ib)
	ipLen := udpLen
	if v4 {
		ipLen += IPv4HeaderSize
	}
	if ipLen > 0xFFFF {
		return nil, ErrTooLong
	}
	off := EthernetHeaderSize
	if f.VLAN {
		off += VLANTagSize
	}
	ipOff := off
	if v4 {
		off += IPv4HeaderSize
	} else {
		off += IPv6HeaderSize
	}
	udpOff := off
	ibOff := off + UDPHeaderSize
	total := ibOff + len(ib)
	frameLen := max(total, MinFrameSize)
	if len(out) < frameLen {
		return nil, ErrShortBuffer
	}
	out = out[:frameLen]

	// Ethernet.
	copy(out[0:6], f.Dst[:])
	copy(out[6:12], f.Src[:])
	et := out[12:]
	if f.VLAN {
		binary.BigEndian.PutUint16(out[12:], EtherTypeVLAN)
		binary.BigEndian.PutUint16(out[14:], f.VLANTCI)
		et = out[16:]
	}
	ip := out[ipOff:udpOff]
	if v4 {
		binary.BigEndian.PutUint16(et, EtherTypeIPv4)
		ip[0] = 0x45
		ip[1] = f.TrafficClass
		binary.BigEndian.PutUint16(ip[2:], uint16(ipLen))
		binary.BigEndian.PutUint16(ip[4:], f.IPID)
		var frag uint16 = ipv4DF
		if f.NoDF {
			frag = 0
		}
		binary.BigEndian.PutUint16(ip[6:], frag)
		ip[8] = f.HopLimit
		ip[9] = ipProtoUDP
		ip[10], ip[11] = 0, 0
		s, d := f.SrcIP.Unmap().As4(), f.DstIP.Unmap().As4()
		copy(ip[12:16], s[:])
		copy(ip[16:20], d[:])
		binary.BigEndian.PutUint16(ip[10:], ^foldSum(sumBytes(0, ip)))
	} else {
		binary.BigEndian.PutUint16(et, EtherTypeIPv6)
		binary.BigEndian.PutUint32(ip, 6<<28|uint32(f.TrafficClass)<<20|f.FlowLabel&0xFFFFF)
		binary.BigEndian.PutUint16(ip[4:], uint16(udpLen))
		ip[6] = ipProtoUDP
		ip[7] = f.HopLimit
		s, d := f.SrcIP.As16(), f.DstIP.As16()
		copy(ip[8:24], s[:])
		copy(ip[24:40], d[:])
	}
	udp := out[udpOff:ibOff]
	binary.BigEndian.PutUint16(udp[0:], f.SrcPort)
	binary.BigEndian.PutUint16(udp[2:], UDPPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(udpLen))
	udp[6], udp[7] = 0, 0
	dst := out[ibOff:total]
	if &dst[0] != &ib[0] {
		copy(dst, ib)
	}
	clear(out[total:])
	if !f.KeepICRC {
		if err := PutICRC(ip, udp, dst); err != nil {
			return nil, err
		}
	}
	if f.UDPChecksum {
		binary.BigEndian.PutUint16(udp[6:], udpChecksum(ip, udp, dst))
	}
	return out, nil
}

// udpChecksum returns the UDP checksum to transmit (0 is sent as 0xFFFF).
// The checksum field in udp must be zero.
func udpChecksum(ip, udp, payload []byte) uint16 {
	c := ^foldSum(sumBytes(sumBytes(pseudoSum(ip, len(udp)+len(payload)), udp), payload))
	if c == 0 {
		c = 0xFFFF
	}
	return c
}

func pseudoSum(ip []byte, udpLen int) uint64 {
	var s uint64
	if len(ip) == IPv4HeaderSize {
		s = sumBytes(0, ip[12:20])
	} else {
		s = sumBytes(0, ip[8:40])
	}
	return s + ipProtoUDP + uint64(udpLen)
}

// sumBytes adds b, as big-endian 16-bit words, to a ones'-complement
// accumulator. b must start at an even offset of the checksummed data; an
// odd trailing byte is padded with zero.
func sumBytes(s uint64, b []byte) uint64 {
	for len(b) >= 8 {
		v := binary.BigEndian.Uint64(b)
		s += v >> 32
		s += v & 0xFFFFFFFF
		b = b[8:]
	}
	for len(b) >= 2 {
		s += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	return s
}

func foldSum(s uint64) uint16 {
	for s>>16 != 0 {
		s = s&0xFFFF + s>>16
	}
	return uint16(s)
}

// Unframed is a decoded RoCEv2 Ethernet frame. The slices alias the frame.
type Unframed struct {
	FrameFields
	IP  []byte // IPv4 (20 bytes) or IPv6 (40 bytes) header
	UDP []byte // UDP header
	IB  []byte // transport packet, BTH through ICRC, located via the UDP length
}

// VerifyICRC checks the ICRC of the transport packet.
func (u *Unframed) VerifyICRC() error { return VerifyICRC(u.IP, u.UDP, u.IB) }

// Unframe decodes an Ethernet II frame carrying RoCEv2 (optionally with one
// 802.1Q tag): it checks the EtherType, the IP header (IPv4: version 4,
// IHL 5, not a fragment, correct header checksum; IPv6: next header UDP),
// UDP destination port 4791, UDP length = IP payload length, and a non-zero
// UDP checksum (zero is accepted for IPv4 and IPv6, spec §1.5). Bytes after
// the IP datagram (Ethernet padding, FCS) are ignored. It neither parses the
// transport packet (see Parse) nor checks the ICRC (see VerifyICRC).
// Unframe never panics and does not allocate.
func Unframe(frame []byte) (Unframed, error) {
	var u Unframed
	if len(frame) < EthernetHeaderSize {
		return u, ErrTooShort
	}
	copy(u.Dst[:], frame[0:6])
	copy(u.Src[:], frame[6:12])
	et := binary.BigEndian.Uint16(frame[12:])
	off := EthernetHeaderSize
	if et == EtherTypeVLAN {
		if len(frame) < EthernetHeaderSize+VLANTagSize {
			return u, ErrTooShort
		}
		u.VLAN = true
		u.VLANTCI = binary.BigEndian.Uint16(frame[14:])
		et = binary.BigEndian.Uint16(frame[16:])
		off += VLANTagSize
	}
	rest := frame[off:]
	var payload []byte // IP payload
	switch et {
	case EtherTypeIPv4:
		if len(rest) < IPv4HeaderSize {
			return u, ErrTooShort
		}
		ip := rest[:IPv4HeaderSize:IPv4HeaderSize]
		if ip[0]>>4 != 4 {
			return u, ErrIPHeader
		}
		if ip[0]&0x0F != 5 {
			return u, ErrIPOptions
		}
		tl := int(binary.BigEndian.Uint16(ip[2:]))
		if tl < IPv4HeaderSize || tl > len(rest) {
			return u, ErrIPHeader
		}
		frag := binary.BigEndian.Uint16(ip[6:])
		if frag&0x8000 != 0 {
			return u, ErrIPHeader // reserved flag
		}
		if frag&0x3FFF != 0 {
			return u, ErrFragmented
		}
		if ip[9] != ipProtoUDP {
			return u, ErrNotUDP
		}
		if foldSum(sumBytes(0, ip)) != 0xFFFF {
			return u, ErrIPChecksum
		}
		u.TrafficClass = ip[1]
		u.IPID = binary.BigEndian.Uint16(ip[4:])
		u.NoDF = frag&ipv4DF == 0
		u.HopLimit = ip[8]
		u.SrcIP = netip.AddrFrom4([4]byte(ip[12:16]))
		u.DstIP = netip.AddrFrom4([4]byte(ip[16:20]))
		u.IP = ip
		payload = rest[IPv4HeaderSize:tl]
	case EtherTypeIPv6:
		if len(rest) < IPv6HeaderSize {
			return u, ErrTooShort
		}
		ip := rest[:IPv6HeaderSize:IPv6HeaderSize]
		w := binary.BigEndian.Uint32(ip)
		if w>>28 != 6 {
			return u, ErrIPHeader
		}
		if ip[6] != ipProtoUDP {
			return u, ErrNotUDP
		}
		pl := int(binary.BigEndian.Uint16(ip[4:]))
		if pl > len(rest)-IPv6HeaderSize {
			return u, ErrIPHeader
		}
		u.TrafficClass = uint8(w >> 20)
		u.FlowLabel = w & 0xFFFFF
		u.HopLimit = ip[7]
		u.SrcIP = netip.AddrFrom16([16]byte(ip[8:24]))
		u.DstIP = netip.AddrFrom16([16]byte(ip[24:40]))
		if u.SrcIP.Is4In6() || u.DstIP.Is4In6() {
			// Frame would send these as IPv4; refuse the ambiguity.
			return u, ErrAddressFamily
		}
		u.IP = ip
		payload = rest[IPv6HeaderSize : IPv6HeaderSize+pl]
	default:
		return u, ErrNotIP
	}
	if len(payload) < UDPHeaderSize {
		return u, ErrUDPLength
	}
	udp := payload[:UDPHeaderSize:UDPHeaderSize]
	if binary.BigEndian.Uint16(udp[2:]) != UDPPort {
		return u, ErrNotRoCE
	}
	ul := int(binary.BigEndian.Uint16(udp[4:]))
	if ul != len(payload) {
		return u, ErrUDPLength
	}
	if ul < UDPHeaderSize+BTHSize+ICRCSize {
		return u, ErrTooShort
	}
	ib := payload[UDPHeaderSize:ul:ul]
	if cs := binary.BigEndian.Uint16(udp[6:]); cs != 0 {
		if foldSum(sumBytes(sumBytes(pseudoSum(u.IP, ul), udp), ib)) != 0xFFFF {
			return u, ErrUDPChecksum
		}
		u.UDPChecksum = true
	}
	u.SrcPort = binary.BigEndian.Uint16(udp[0:])
	u.UDP = udp
	u.IB = ib
	return u, nil
}

// FlowLabel returns the flow label Linux derives from two QPNs when the AV
// has none (rdma_calc_flow_label, spec §1.5); symmetric in lqpn and rqpn.
func FlowLabel(lqpn, rqpn uint32) uint32 {
	v := uint64(lqpn) * uint64(rqpn)
	v ^= v >> 20
	v ^= v >> 40
	return uint32(v & 0xFFFFF)
}

// UDPSourcePort returns the UDP source port Linux (and rxe since the 5.17
// cycle) uses for an RC/UC QP (spec §1.5): if flowLabel is 0 it is derived
// from the QPNs, then folded into 0xC000–0xFFFF. QPNs 0x11 and 0x12 give
// 0xC132.
func UDPSourcePort(flowLabel, lqpn, rqpn uint32) uint16 {
	fl := flowLabel & 0xFFFFF
	if fl == 0 {
		fl = FlowLabel(lqpn, rqpn)
	}
	return uint16(0xC000 | (fl&0x3FFF ^ (fl&0xFC000)>>14))
}

// UDPSourcePortHash returns the per-QPN port older rxe versions (and rxe's
// UD path) use: 0xC000 + (hash_32(qpn, 14) & 0x3FFF) (spec §1.5). QPN 0x11
// gives 0xDF94, QPN 1 gives 0xD872.
func UDPSourcePortHash(qpn uint32) uint16 {
	return uint16(0xC000 + (qpn*0x61C88647)>>(32-14)&0x3FFF)
}
