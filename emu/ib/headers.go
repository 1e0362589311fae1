package ib

import (
	"encoding/binary"
	"errors"
)

// Sizes of the IB link and network headers and the variant CRC.
const (
	LRHSize  = 8
	GRHSize  = 40
	VCRCSize = 2
)

// LNH is the LRH's Link Next Header: what follows the LRH.
type LNH uint8

// The LNH values (IBA 7.7.5). Only the IBA transport ones are carried by
// this emulator; raw packets are refused.
const (
	LNHRaw       LNH = 0 // raw packet (no IBA transport)
	LNHRawIPv6   LNH = 1 // raw IPv6 (non-IBA)
	LNHIBALocal  LNH = 2 // IBA transport, BTH follows the LRH
	LNHIBAGlobal LNH = 3 // IBA transport, GRH then BTH follow the LRH
)

// LIDs with a meaning of their own (IBA 4.1.3, 7.11.1).
const (
	LIDReserved     = 0x0000 // no port has it
	LIDUnicastLast  = 0xBFFF // last unicast LID
	LIDMulticast    = 0xC000 // first multicast LID
	LIDMulticastEnd = 0xFFFE // last multicast LID
	LIDPermissive   = 0xFFFF // the permissive LID (directed-route SMPs)
)

// IsMulticastLID reports whether lid is a multicast LID (0xC000–0xFFFE).
func IsMulticastLID(lid uint16) bool { return lid >= LIDMulticast && lid <= LIDMulticastEnd }

// IsUnicastLID reports whether lid is a unicast LID (0x0001–0xBFFF).
func IsUnicastLID(lid uint16) bool { return lid != LIDReserved && lid <= LIDUnicastLast }

// NxtHdrIBA is the GRH's next header value for an IBA transport header.
const NxtHdrIBA = 0x1B

// MaxPktLen is the largest PktLen (11 bits, in 4-byte words).
const MaxPktLen = 0x7FF

// Errors of the header codecs, Build and Parse.
var (
	ErrTooShort    = errors.New("ib: packet too short")
	ErrBadLVer     = errors.New("ib: LRH LVer is not 0")
	ErrBadLNH      = errors.New("ib: LRH LNH is not an IBA transport")
	ErrBadPktLen   = errors.New("ib: LRH PktLen does not match the packet")
	ErrBadIPVer    = errors.New("ib: GRH IPVer is not 6")
	ErrBadNxtHdr   = errors.New("ib: GRH next header is not the IBA transport")
	ErrBadPayLen   = errors.New("ib: GRH PayLen does not match the packet")
	ErrBadICRC     = errors.New("ib: ICRC mismatch")
	ErrBadVCRC     = errors.New("ib: VCRC mismatch")
	ErrFieldRange  = errors.New("ib: field value out of range")
	ErrShortBuffer = errors.New("ib: output buffer too small")
	ErrTooLong     = errors.New("ib: packet longer than PktLen can say")
)

// ---------------------------------------------------------------- LRH

// LRH is a view of the 8-byte Local Route Header (IBA 7.7). Accessors do
// not check the length; Parse and Build do.
type LRH []byte

// LRHFields holds the LRH fields. Reserved bits are written as 0.
type LRHFields struct {
	VL     uint8  // virtual lane, 4 bits (15 is VL15, SMPs only)
	LVer   uint8  // link version, 4 bits, must be 0
	SL     uint8  // service level, 4 bits
	LNH    LNH    // 2 bits
	DLID   uint16 // destination LID
	PktLen uint16 // 11 bits: 4-byte words from the LRH through the ICRC
	SLID   uint16 // source LID
}

func (l LRH) VL() uint8      { return l[0] >> 4 }
func (l LRH) LVer() uint8    { return l[0] & 0x0F }
func (l LRH) SL() uint8      { return l[1] >> 4 }
func (l LRH) LNH() LNH       { return LNH(l[1] & 3) }
func (l LRH) DLID() uint16   { return binary.BigEndian.Uint16(l[2:]) }
func (l LRH) PktLen() uint16 { return binary.BigEndian.Uint16(l[4:]) & MaxPktLen }
func (l LRH) SLID() uint16   { return binary.BigEndian.Uint16(l[6:]) }

// Reserved returns the reserved bits (byte 1 bits 3–2, byte 4 bits 7–3).
func (l LRH) Reserved() (b1, b4 uint8) { return l[1] & 0x0C, l[4] & 0xF8 }

func (l LRH) SetDLID(v uint16) { binary.BigEndian.PutUint16(l[2:], v) }
func (l LRH) SetSLID(v uint16) { binary.BigEndian.PutUint16(l[6:], v) }

// Encode writes f into l; values wider than their field are truncated.
func (l LRH) Encode(f *LRHFields) {
	l[0] = f.VL<<4 | f.LVer&0x0F
	l[1] = f.SL<<4 | byte(f.LNH)&3
	binary.BigEndian.PutUint16(l[2:], f.DLID)
	binary.BigEndian.PutUint16(l[4:], f.PktLen&MaxPktLen)
	binary.BigEndian.PutUint16(l[6:], f.SLID)
}

// Fields decodes l.
func (l LRH) Fields() LRHFields {
	return LRHFields{VL: l.VL(), LVer: l.LVer(), SL: l.SL(), LNH: l.LNH(), DLID: l.DLID(),
		PktLen: l.PktLen(), SLID: l.SLID()}
}

// ---------------------------------------------------------------- GRH

// GID is a 128-bit global identifier: subnet prefix ‖ interface ID (the
// port GUID for GID index 0).
type GID [16]byte

// MakeGID returns the GID prefix ‖ guid.
func MakeGID(prefix, guid uint64) GID {
	var g GID
	binary.BigEndian.PutUint64(g[:8], prefix)
	binary.BigEndian.PutUint64(g[8:], guid)
	return g
}

// Prefix returns the subnet prefix (the high 64 bits).
func (g GID) Prefix() uint64 { return binary.BigEndian.Uint64(g[:8]) }

// GUID returns the interface ID (the low 64 bits).
func (g GID) GUID() uint64 { return binary.BigEndian.Uint64(g[8:]) }

// IsMulticast reports whether g is a multicast GID (first byte 0xFF).
func (g GID) IsMulticast() bool { return g[0] == 0xFF }

// GRH is a view of the 40-byte Global Route Header (IBA 8.3), laid out as
// an IPv6 header.
type GRH []byte

// GRHFields holds the GRH fields; IPVer is always 6 on Encode.
type GRHFields struct {
	TClass    uint8
	FlowLabel uint32 // 20 bits
	PayLen    uint16 // bytes from the BTH through the ICRC
	NxtHdr    uint8  // NxtHdrIBA
	HopLmt    uint8
	SGID      GID
	DGID      GID
}

func (g GRH) IPVer() uint8      { return g[0] >> 4 }
func (g GRH) TClass() uint8     { return g[0]<<4 | g[1]>>4 }
func (g GRH) FlowLabel() uint32 { return binary.BigEndian.Uint32(g) & 0xFFFFF }
func (g GRH) PayLen() uint16    { return binary.BigEndian.Uint16(g[4:]) }
func (g GRH) NxtHdr() uint8     { return g[6] }
func (g GRH) HopLmt() uint8     { return g[7] }
func (g GRH) SGID() GID         { return GID(g[8:24]) }
func (g GRH) DGID() GID         { return GID(g[24:40]) }

// Encode writes f into g with IPVer 6; values wider than their field are
// truncated.
func (g GRH) Encode(f *GRHFields) {
	binary.BigEndian.PutUint32(g, 6<<28|uint32(f.TClass)<<20|f.FlowLabel&0xFFFFF)
	binary.BigEndian.PutUint16(g[4:], f.PayLen)
	g[6] = f.NxtHdr
	g[7] = f.HopLmt
	copy(g[8:24], f.SGID[:])
	copy(g[24:40], f.DGID[:])
}

// Fields decodes g.
func (g GRH) Fields() GRHFields {
	return GRHFields{TClass: g.TClass(), FlowLabel: g.FlowLabel(), PayLen: g.PayLen(), NxtHdr: g.NxtHdr(),
		HopLmt: g.HopLmt(), SGID: g.SGID(), DGID: g.DGID()}
}
