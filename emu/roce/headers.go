package roce

import "encoding/binary"

// Every view type below is a []byte that starts with the header. Accessors
// do not check the length: callers (Parse, Build) make sure the slice holds
// at least the header's Size bytes, and an accessor on a shorter slice
// panics like any out-of-range slice access.

func get24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

func put24(b []byte, v uint32) {
	b[0] = byte(v >> 16)
	b[1] = byte(v >> 8)
	b[2] = byte(v)
}

func setBit(b *byte, mask byte, v bool) {
	if v {
		*b |= mask
	} else {
		*b &^= mask
	}
}

// Mask24 is the mask of a 24-bit field (QPN, PSN, MSN).
const Mask24 = 0xFFFFFF

// DefaultPKey is the default (full-member) partition key; rxe always sends it.
const DefaultPKey = 0xFFFF

// ---------------------------------------------------------------- BTH

// BTH is a view of the 12-byte Base Transport Header (spec §1.6).
type BTH []byte

// BTHFields holds the BTH fields for Encode. Reserved bits are written as 0.
type BTHFields struct {
	Opcode   Opcode
	SE       bool   // solicited event
	MigReq   bool   // M bit
	PadCount uint8  // 0..3
	TVer     uint8  // 0..15, must be 0
	PKey     uint16 // partition key
	FECN     bool
	BECN     bool
	DestQP   uint32 // 24 bits
	AckReq   bool   // A bit
	PSN      uint32 // 24 bits
}

func (b BTH) Opcode() Opcode     { return Opcode(b[0]) }
func (b BTH) SE() bool           { return b[1]&0x80 != 0 }
func (b BTH) MigReq() bool       { return b[1]&0x40 != 0 }
func (b BTH) PadCount() uint8    { return b[1] >> 4 & 3 }
func (b BTH) TVer() uint8        { return b[1] & 0x0F }
func (b BTH) PKey() uint16       { return binary.BigEndian.Uint16(b[2:]) }
func (b BTH) FECN() bool         { return b[4]&0x80 != 0 }
func (b BTH) BECN() bool         { return b[4]&0x40 != 0 }
func (b BTH) DestQP() uint32     { return get24(b[5:]) }
func (b BTH) AckReq() bool       { return b[8]&0x80 != 0 }
func (b BTH) PSN() uint32        { return get24(b[9:]) }
func (b BTH) Reserved4() uint8   { return b[4] & 0x3F } // the 6 reserved bits of byte 4
func (b BTH) Reserved8() uint8   { return b[8] & 0x7F } // the 7 reserved bits of byte 8
func (b BTH) SetOpcode(o Opcode) { b[0] = byte(o) }
func (b BTH) SetSE(v bool)       { setBit(&b[1], 0x80, v) }
func (b BTH) SetMigReq(v bool)   { setBit(&b[1], 0x40, v) }
func (b BTH) SetPadCount(n uint8) {
	b[1] = b[1]&^0x30 | (n&3)<<4
}
func (b BTH) SetTVer(v uint8)      { b[1] = b[1]&^0x0F | v&0x0F }
func (b BTH) SetPKey(v uint16)     { binary.BigEndian.PutUint16(b[2:], v) }
func (b BTH) SetFECN(v bool)       { setBit(&b[4], 0x80, v) }
func (b BTH) SetBECN(v bool)       { setBit(&b[4], 0x40, v) }
func (b BTH) SetDestQP(qpn uint32) { put24(b[5:], qpn) }
func (b BTH) SetAckReq(v bool)     { setBit(&b[8], 0x80, v) }
func (b BTH) SetPSN(psn uint32)    { put24(b[9:], psn) }

// Encode writes all fields of f into b; values wider than their field are
// truncated.
func (b BTH) Encode(f *BTHFields) {
	b[0] = byte(f.Opcode)
	var x byte
	if f.SE {
		x |= 0x80
	}
	if f.MigReq {
		x |= 0x40
	}
	b[1] = x | (f.PadCount&3)<<4 | f.TVer&0x0F
	binary.BigEndian.PutUint16(b[2:], f.PKey)
	x = 0
	if f.FECN {
		x |= 0x80
	}
	if f.BECN {
		x |= 0x40
	}
	b[4] = x
	put24(b[5:], f.DestQP)
	x = 0
	if f.AckReq {
		x |= 0x80
	}
	b[8] = x
	put24(b[9:], f.PSN)
}

// Fields decodes b.
func (b BTH) Fields() BTHFields {
	return BTHFields{
		Opcode: b.Opcode(), SE: b.SE(), MigReq: b.MigReq(), PadCount: b.PadCount(),
		TVer: b.TVer(), PKey: b.PKey(), FECN: b.FECN(), BECN: b.BECN(),
		DestQP: b.DestQP(), AckReq: b.AckReq(), PSN: b.PSN(),
	}
}

// ---------------------------------------------------------------- DETH

// DETH is a view of the 8-byte Datagram Extended Transport Header.
type DETH []byte

// DETHFields holds the DETH fields.
type DETHFields struct {
	QKey  uint32
	SrcQP uint32 // 24 bits
}

func (d DETH) QKey() uint32        { return binary.BigEndian.Uint32(d) }
func (d DETH) SrcQP() uint32       { return get24(d[5:]) }
func (d DETH) SetQKey(v uint32)    { binary.BigEndian.PutUint32(d, v) }
func (d DETH) SetSrcQP(qpn uint32) { put24(d[5:], qpn) }

// Encode writes f into d; the reserved byte is written as 0.
func (d DETH) Encode(f *DETHFields) {
	binary.BigEndian.PutUint32(d, f.QKey)
	d[4] = 0
	put24(d[5:], f.SrcQP)
}

// Fields decodes d.
func (d DETH) Fields() DETHFields { return DETHFields{QKey: d.QKey(), SrcQP: d.SrcQP()} }

// GSIQKey is the well-known Q_Key of QP1 (spec §5.3.1).
const GSIQKey = 0x80010000

// ---------------------------------------------------------------- RETH

// RETH is a view of the 16-byte RDMA Extended Transport Header.
type RETH []byte

// RETHFields holds the RETH fields.
type RETHFields struct {
	VA        uint64
	RKey      uint32
	DMALength uint32 // length of the whole RDMA operation
}

func (r RETH) VA() uint64            { return binary.BigEndian.Uint64(r) }
func (r RETH) RKey() uint32          { return binary.BigEndian.Uint32(r[8:]) }
func (r RETH) DMALength() uint32     { return binary.BigEndian.Uint32(r[12:]) }
func (r RETH) SetVA(v uint64)        { binary.BigEndian.PutUint64(r, v) }
func (r RETH) SetRKey(v uint32)      { binary.BigEndian.PutUint32(r[8:], v) }
func (r RETH) SetDMALength(v uint32) { binary.BigEndian.PutUint32(r[12:], v) }

// Encode writes f into r.
func (r RETH) Encode(f *RETHFields) {
	r.SetVA(f.VA)
	r.SetRKey(f.RKey)
	r.SetDMALength(f.DMALength)
}

// Fields decodes r.
func (r RETH) Fields() RETHFields {
	return RETHFields{VA: r.VA(), RKey: r.RKey(), DMALength: r.DMALength()}
}

// ---------------------------------------------------------------- FETH

// FETH is a view of the 4-byte Flush Extended Transport Header used by the
// optional FLUSH opcode. The spec gives no field layout, so the header is
// exposed as one 32-bit word. (In rxe, bits 3–0 are the placement type and
// bits 5–4 the selectivity level.)
type FETH []byte

func (f FETH) Value() uint32     { return binary.BigEndian.Uint32(f) }
func (f FETH) SetValue(v uint32) { binary.BigEndian.PutUint32(f, v) }

// ---------------------------------------------------------------- AtomicETH

// AtomicETH is a view of the 28-byte Atomic Extended Transport Header.
type AtomicETH []byte

// AtomicETHFields holds the AtomicETH fields.
type AtomicETHFields struct {
	VA      uint64 // 8-byte aligned
	RKey    uint32
	SwapAdd uint64 // swap data (CMP_SWP) or add data (FETCH_ADD)
	Compare uint64 // compare data (CMP_SWP), 0 for FETCH_ADD
}

func (a AtomicETH) VA() uint64          { return binary.BigEndian.Uint64(a) }
func (a AtomicETH) RKey() uint32        { return binary.BigEndian.Uint32(a[8:]) }
func (a AtomicETH) SwapAdd() uint64     { return binary.BigEndian.Uint64(a[12:]) }
func (a AtomicETH) Compare() uint64     { return binary.BigEndian.Uint64(a[20:]) }
func (a AtomicETH) SetVA(v uint64)      { binary.BigEndian.PutUint64(a, v) }
func (a AtomicETH) SetRKey(v uint32)    { binary.BigEndian.PutUint32(a[8:], v) }
func (a AtomicETH) SetSwapAdd(v uint64) { binary.BigEndian.PutUint64(a[12:], v) }
func (a AtomicETH) SetCompare(v uint64) { binary.BigEndian.PutUint64(a[20:], v) }

// Encode writes f into a.
func (a AtomicETH) Encode(f *AtomicETHFields) {
	a.SetVA(f.VA)
	a.SetRKey(f.RKey)
	a.SetSwapAdd(f.SwapAdd)
	a.SetCompare(f.Compare)
}

// Fields decodes a.
func (a AtomicETH) Fields() AtomicETHFields {
	return AtomicETHFields{VA: a.VA(), RKey: a.RKey(), SwapAdd: a.SwapAdd(), Compare: a.Compare()}
}

// ---------------------------------------------------------------- AETH

// AETH is a view of the 4-byte ACK Extended Transport Header.
type AETH []byte

// AETHFields holds the AETH fields.
type AETHFields struct {
	Syndrome Syndrome
	MSN      uint32 // 24 bits
}

func (a AETH) Syndrome() Syndrome     { return Syndrome(a[0]) }
func (a AETH) MSN() uint32            { return get24(a[1:]) }
func (a AETH) SetSyndrome(s Syndrome) { a[0] = byte(s) }
func (a AETH) SetMSN(msn uint32)      { put24(a[1:], msn) }

// Encode writes f into a.
func (a AETH) Encode(f *AETHFields) {
	a[0] = byte(f.Syndrome)
	put24(a[1:], f.MSN)
}

// Fields decodes a.
func (a AETH) Fields() AETHFields { return AETHFields{Syndrome: a.Syndrome(), MSN: a.MSN()} }

// ---------------------------------------------------------------- AtomicAckETH

// AtomicAckETH is a view of the 8-byte Atomic ACK Extended Transport Header.
type AtomicAckETH []byte

// OrigData returns the original remote data (big-endian on the wire).
func (a AtomicAckETH) OrigData() uint64     { return binary.BigEndian.Uint64(a) }
func (a AtomicAckETH) SetOrigData(v uint64) { binary.BigEndian.PutUint64(a, v) }

// Encode writes the original remote data into a.
func (a AtomicAckETH) Encode(orig uint64) { a.SetOrigData(orig) }

// ---------------------------------------------------------------- ImmDt

// ImmDt is a view of the 4-byte immediate data header. The value is opaque;
// Value reads it big-endian (network order), which is what verbs report.
type ImmDt []byte

func (i ImmDt) Value() uint32     { return binary.BigEndian.Uint32(i) }
func (i ImmDt) SetValue(v uint32) { binary.BigEndian.PutUint32(i, v) }

// Encode writes v into i.
func (i ImmDt) Encode(v uint32) { i.SetValue(v) }

// ---------------------------------------------------------------- IETH

// IETH is a view of the 4-byte Invalidate Extended Transport Header.
type IETH []byte

// XRCETH is the XRC extended transport header (IBTA 9.2, 4 bytes): 8
// reserved bits and the 24-bit number of the XRC SRQ the request is for.
type XRCETH []byte

// SRQ returns the XRC SRQ number; SetSRQ writes it (reserved bits zero).
func (x XRCETH) SRQ() uint32     { return binary.BigEndian.Uint32(x) & Mask24 }
func (x XRCETH) SetSRQ(v uint32) { binary.BigEndian.PutUint32(x, v&Mask24) }

// RKey returns the R_Key to invalidate.
func (i IETH) RKey() uint32     { return binary.BigEndian.Uint32(i) }
func (i IETH) SetRKey(v uint32) { binary.BigEndian.PutUint32(i, v) }

// Encode writes rkey into i.
func (i IETH) Encode(rkey uint32) { i.SetRKey(rkey) }
