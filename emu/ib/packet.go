package ib

import (
	"encoding/binary"

	"github.com/hcaemu/hcaemu/emu/roce"
)

// PacketFields describes a native IB packet for Build: the link and
// network headers, and the transport packet exactly as the transports
// describe it for RoCE.
type PacketFields struct {
	// LRH: Build derives LNH (from GRH) and PktLen (from the size); LVer
	// must be 0.
	LRH LRHFields
	// GRH, nil for a local packet. Build derives PayLen and sets NxtHdr to
	// NxtHdrIBA.
	GRH       *GRHFields
	Transport roce.PacketFields
}

// Packet is a parsed IB packet: views into the buffer given to Parse.
type Packet struct {
	LRH       LRH
	GRH       GRH         // nil for a local packet
	Transport roce.Packet // BTH through the ICRC field
	ICRC      []byte      // the 4 ICRC bytes (little-endian CRC value)
	VCRC      []byte      // the 2 VCRC bytes (little-endian CRC value)
}

// Fields returns the fields of a parsed packet (Payload aliases it):
// Build(out, &f) reproduces the parsed bytes, CRCs included, except
// reserved bits.
func (p *Packet) Fields() PacketFields {
	f := PacketFields{LRH: p.LRH.Fields(), Transport: p.Transport.Fields()}
	if p.GRH != nil {
		g := p.GRH.Fields()
		f.GRH = &g
	}
	return f
}

// HeaderLen returns the size of the link and network headers: the LRH,
// and the GRH when global is set.
func HeaderLen(global bool) int {
	if global {
		return LRHSize + GRHSize
	}
	return LRHSize
}

// PacketLen returns the size of a whole IB packet (LRH through VCRC) of
// opcode o carrying n payload bytes, with a GRH when global is set.
func PacketLen(o roce.Opcode, n int, global bool) (int, error) {
	t, err := roce.PacketLen(o, n)
	if err != nil {
		return 0, err
	}
	return HeaderLen(global) + t + VCRCSize, nil
}

// Build lays out the packet described by f into out: LRH, GRH when f.GRH
// is set, the transport packet (roce.Build: BTH, extended headers,
// payload, pad), ICRC and VCRC, both computed; it returns out[:n]. It
// validates what Parse validates: LVer 0, 4-bit VL and SL, a 20-bit flow
// label, a packet PktLen can describe (at most 8188 bytes before the VCRC),
// and everything roce.Build checks. f.Transport.Payload may not overlap
// out. Build does not allocate.
func Build(out []byte, f *PacketFields) ([]byte, error) {
	l := &f.LRH
	if l.LVer != 0 {
		return nil, ErrBadLVer
	}
	if l.VL > 15 || l.SL > 15 || (f.GRH != nil && f.GRH.FlowLabel > 0xFFFFF) {
		return nil, ErrFieldRange
	}
	h := HeaderLen(f.GRH != nil)
	if len(out) < h+roce.BTHSize+roce.ICRCSize+VCRCSize {
		return nil, ErrShortBuffer
	}
	t, err := roce.Build(out[h:len(out)-VCRCSize], &f.Transport)
	if err != nil {
		return nil, err
	}
	words := (h + len(t)) / 4
	if words > MaxPktLen {
		return nil, ErrTooLong
	}
	n := h + len(t) + VCRCSize
	out = out[:n]
	lf := *l
	lf.LNH, lf.PktLen = LNHIBALocal, uint16(words)
	if f.GRH != nil {
		lf.LNH = LNHIBAGlobal
		g := *f.GRH
		g.PayLen, g.NxtHdr = uint16(len(t)), NxtHdrIBA
		GRH(out[LRHSize:h]).Encode(&g)
	}
	LRH(out[:LRHSize]).Encode(&lf)
	if err := PutICRC(out); err != nil {
		return nil, err
	}
	if err := PutVCRC(out); err != nil {
		return nil, err
	}
	return out, nil
}

// ParseLink checks what a switch checks of a packet (b is LRH through
// VCRC, nothing else): LVer 0, an IBA transport LNH, PktLen equal to the
// bytes before the VCRC, and for a global packet a GRH of version 6 with
// the IBA next header and a PayLen equal to the bytes from the BTH through
// the ICRC. It checks neither CRC nor the transport headers; the views
// alias b (grh nil for a local packet). It never panics.
func ParseLink(b []byte) (lrh LRH, grh GRH, err error) {
	if len(b) < LRHSize+roce.BTHSize+roce.ICRCSize+VCRCSize {
		return nil, nil, ErrTooShort
	}
	lrh = LRH(b[:LRHSize:LRHSize])
	if lrh.LVer() != 0 {
		return nil, nil, ErrBadLVer
	}
	lnh := lrh.LNH()
	if lnh != LNHIBALocal && lnh != LNHIBAGlobal {
		return nil, nil, ErrBadLNH
	}
	if (len(b)-VCRCSize)%4 != 0 || int(lrh.PktLen())*4 != len(b)-VCRCSize {
		return nil, nil, ErrBadPktLen
	}
	if lnh == LNHIBAGlobal {
		if len(b) < LRHSize+GRHSize+roce.BTHSize+roce.ICRCSize+VCRCSize {
			return nil, nil, ErrTooShort
		}
		grh = GRH(b[LRHSize : LRHSize+GRHSize : LRHSize+GRHSize])
		if grh.IPVer() != 6 {
			return nil, nil, ErrBadIPVer
		}
		if grh.NxtHdr() != NxtHdrIBA {
			return nil, nil, ErrBadNxtHdr
		}
		if int(grh.PayLen()) != len(b)-LRHSize-GRHSize-VCRCSize {
			return nil, nil, ErrBadPayLen
		}
	}
	return lrh, grh, nil
}

// Parse decodes a whole IB packet, b being LRH through VCRC and nothing
// else: ParseLink's checks, then the VCRC, the ICRC, and the transport
// packet with roce.Parse (known opcode, TVer 0, pad, payload rule). A
// corrupted packet fails with ErrBadVCRC or ErrBadICRC, which a receiver
// counts apart from malformed ones. The returned views alias b. Parse never
// panics and does not allocate.
func Parse(b []byte) (Packet, error) {
	var p Packet
	lrh, grh, err := ParseLink(b)
	if err != nil {
		return p, err
	}
	if c, _ := VCRC(b); binary.LittleEndian.Uint16(b[len(b)-VCRCSize:]) != c {
		return p, ErrBadVCRC
	}
	icrcAt := len(b) - VCRCSize - roce.ICRCSize
	if c, _ := ICRC(b); binary.LittleEndian.Uint32(b[icrcAt:]) != c {
		return p, ErrBadICRC
	}
	h := HeaderLen(grh != nil)
	t, err := roce.Parse(b[h : len(b)-VCRCSize : len(b)-VCRCSize])
	if err != nil {
		return p, err
	}
	p.LRH, p.GRH, p.Transport = lrh, grh, t
	p.ICRC = b[icrcAt : icrcAt+roce.ICRCSize : icrcAt+roce.ICRCSize]
	p.VCRC = b[len(b)-VCRCSize:]
	return p, nil
}
