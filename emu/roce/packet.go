package roce

import (
	"encoding/binary"
	"errors"
)

// Errors returned by Parse, Build, CheckPayloadLen and friends.
var (
	ErrTooShort      = errors.New("roce: packet too short")
	ErrUnknownOpcode = errors.New("roce: unknown opcode")
	ErrBadTVer       = errors.New("roce: BTH TVer is not 0")
	ErrBadLength     = errors.New("roce: transport length is not a multiple of 4")
	ErrBadPad        = errors.New("roce: pad count exceeds the bytes after the headers")
	ErrPadNotZero    = errors.New("roce: pad bytes are not zero")
	ErrPayloadLength = errors.New("roce: payload length not allowed for the opcode")
	ErrBadPMTU       = errors.New("roce: invalid path MTU")
	ErrFieldRange    = errors.New("roce: field value out of range")
	ErrShortBuffer   = errors.New("roce: output buffer too small")
)

// Packet is a parsed IB transport packet: views into the buffer given to
// Parse. A view is nil when its header is absent.
type Packet struct {
	BTH          BTH
	DETH         DETH
	XRCETH       XRCETH
	FETH         FETH
	RETH         RETH
	AtomicETH    AtomicETH
	AETH         AETH
	AtomicAckETH AtomicAckETH
	ImmDt        ImmDt
	IETH         IETH
	CNPPad       []byte // the 16 reserved bytes of a CNP
	Payload      []byte // payload without pad; empty, not nil, when absent
	Pad          []byte // 0..3 zero bytes
	ICRC         []byte // the 4 ICRC bytes (little-endian CRC value)

	// HeaderLen is the size of the BTH and the extended headers, i.e. the
	// offset of Payload in the parsed buffer.
	HeaderLen int
}

// Opcode returns the packet's opcode.
func (p *Packet) Opcode() Opcode { return p.BTH.Opcode() }

// Headers returns the set of extended headers present.
func (p *Packet) Headers() ExtHeaders { return opcodeTable[p.BTH.Opcode()].Headers }

// ICRCValue returns the CRC value carried in the ICRC field.
func (p *Packet) ICRCValue() uint32 { return binary.LittleEndian.Uint32(p.ICRC) }

// Parse decodes the IB transport part of a RoCEv2 packet: b holds the BTH,
// the extended headers, payload, pad and the 4-byte ICRC, and nothing else
// (its length is the UDP length − 8). Parse checks what can be checked
// without QP state: total length, TVer = 0, a known opcode (spec §2),
// pad count and zero pad bytes, and the payload length rule of the opcode
// with an unknown PMTU (see CheckPayloadLen). It does not check the ICRC
// (that needs the IP and UDP headers, see VerifyICRC), the P_Key, the
// QPN or reserved bits, which receivers ignore (spec §1.6).
//
// The returned views alias b. Parse never panics and does not allocate.
func Parse(b []byte) (Packet, error) { return parse(b, 1, 0) }

// ParseRun parses a run: n consecutive full-PMTU MIDDLE packets of one
// message carried as one packet (see BuildRun). It checks what Parse checks,
// except that the payload must be n times a valid PMTU and the opcode one
// whose payload is always a full PMTU (a MIDDLE). The returned packet's
// BTH is the first packet's; its Payload is all n payloads end to end.
// n == 1 is Parse.
func ParseRun(b []byte, n int) (Packet, error) { return parse(b, n, 0) }

// ParseRunLent parses a run whose payload, payloadLen bytes, is not in b
// (BuildRunLent): b is the run's headers, pad and ICRC field. It checks what
// ParseRun checks; the returned packet's Payload is empty.
func ParseRunLent(b []byte, n, payloadLen int) (Packet, error) {
	if payloadLen <= 0 {
		return Packet{}, ErrPayloadLength
	}
	return parse(b, n, payloadLen)
}

// checkRun checks payload length n of a run of count packets of opcode o.
func checkRun(o Opcode, n, count int) error {
	if count == 1 {
		return CheckPayloadLen(o, n, 0)
	}
	info := &opcodeTable[o]
	if count < 1 || info.Payload != PayloadFull || info.Pos != PosMiddle || n%count != 0 || !IsValidPMTU(n/count) {
		return ErrPayloadLength
	}
	return nil
}

func parse(b []byte, count, absent int) (Packet, error) {
	var p Packet
	if len(b) < BTHSize+ICRCSize {
		return p, ErrTooShort
	}
	if absent < 0 || absent%4 != 0 || absent > 1<<31 {
		return p, ErrPayloadLength
	}
	bth := BTH(b[:BTHSize])
	info := &opcodeTable[bth.Opcode()]
	if info.Op == OpInvalid {
		return p, ErrUnknownOpcode
	}
	if bth.TVer() != 0 {
		return p, ErrBadTVer
	}
	if len(b)%4 != 0 {
		return p, ErrBadLength
	}
	hlen := BTHSize + info.Headers.Len()
	if len(b) < hlen+ICRCSize {
		return p, ErrTooShort
	}
	rest := len(b) - hlen - ICRCSize // payload + pad
	pad := int(bth.PadCount())
	if pad > rest {
		return p, ErrBadPad
	}
	n := rest - pad
	if absent > 0 && (n != 0 || pad != 0) {
		return p, ErrPayloadLength // a lent payload is all absent
	}
	if err := checkRun(bth.Opcode(), n+absent, count); err != nil {
		return p, err
	}
	for _, c := range b[hlen+n : hlen+rest] {
		if c != 0 {
			return p, ErrPadNotZero
		}
	}
	p.BTH = bth
	off := BTHSize
	take := func(has ExtHeaders, size int) []byte {
		if info.Headers&has == 0 {
			return nil
		}
		v := b[off : off+size : off+size]
		off += size
		return v
	}
	p.DETH = take(HasDETH, DETHSize)
	p.XRCETH = take(HasXRCETH, XRCETHSize)
	p.FETH = take(HasFETH, FETHSize)
	p.RETH = take(HasRETH, RETHSize)
	p.AtomicETH = take(HasAtomicETH, AtomicETHSize)
	p.AETH = take(HasAETH, AETHSize)
	p.AtomicAckETH = take(HasAtomicAckETH, AtomicAckETHSize)
	p.ImmDt = take(HasImmDt, ImmDtSize)
	p.IETH = take(HasIETH, IETHSize)
	p.CNPPad = take(HasCNPPad, CNPPadSize)
	p.HeaderLen = hlen
	p.Payload = b[hlen : hlen+n : hlen+n]
	p.Pad = b[hlen+n : hlen+rest : hlen+rest]
	p.ICRC = b[len(b)-ICRCSize:]
	return p, nil
}

// PacketFields describes a packet for Build. Only the extended headers the
// opcode carries (spec §2) are used; the others are ignored.
type PacketFields struct {
	BTH          BTHFields // PadCount is ignored: Build derives it from Payload
	DETH         DETHFields
	XRCETH       uint32 // the XRC SRQ number (24 bits)
	FETH         uint32
	RETH         RETHFields
	AtomicETH    AtomicETHFields
	AETH         AETHFields
	AtomicAckETH uint64 // original remote data
	ImmDt        uint32
	IETH         uint32 // R_Key to invalidate
	Payload      []byte
}

// Fields returns the fields of a parsed packet; Payload aliases the packet.
// Build(out, &f) reproduces the parsed bytes except reserved bits and the
// ICRC, which Build leaves zero.
func (p *Packet) Fields() PacketFields {
	f := PacketFields{BTH: p.BTH.Fields(), Payload: p.Payload}
	if p.DETH != nil {
		f.DETH = p.DETH.Fields()
	}
	if p.XRCETH != nil {
		f.XRCETH = p.XRCETH.SRQ()
	}
	if p.FETH != nil {
		f.FETH = p.FETH.Value()
	}
	if p.RETH != nil {
		f.RETH = p.RETH.Fields()
	}
	if p.AtomicETH != nil {
		f.AtomicETH = p.AtomicETH.Fields()
	}
	if p.AETH != nil {
		f.AETH = p.AETH.Fields()
	}
	if p.AtomicAckETH != nil {
		f.AtomicAckETH = p.AtomicAckETH.OrigData()
	}
	if p.ImmDt != nil {
		f.ImmDt = p.ImmDt.Value()
	}
	if p.IETH != nil {
		f.IETH = p.IETH.RKey()
	}
	return f
}

// PadCount returns the number of pad bytes for a payload of n bytes:
// (4 − n mod 4) mod 4 (spec §1.9).
func PadCount(n int) int { return -n & 3 }

// PacketLen returns the size of the transport packet (BTH through ICRC) for
// opcode o with n payload bytes, or an error if o is unknown.
func PacketLen(o Opcode, n int) (int, error) {
	info := &opcodeTable[o]
	if info.Op == OpInvalid {
		return 0, ErrUnknownOpcode
	}
	return BTHSize + info.Headers.Len() + n + PadCount(n) + ICRCSize, nil
}

// Build lays out the transport packet described by f into out: BTH, the
// extended headers of f.BTH.Opcode, payload, zero pad and a zero ICRC field,
// and returns out[:n]. The ICRC is filled in by Frame or PutICRC, which know
// the IP and UDP headers. Build validates what Parse validates (known
// opcode, TVer 0, payload rule with unknown PMTU) plus the 24-bit range of
// DestQP, PSN, SrcQP and MSN, so that whatever it builds also parses.
// f.Payload may not overlap out except when it already sits at its final
// offset (out[HeaderLen:]); then it is not copied. Build does not allocate.
func Build(out []byte, f *PacketFields) ([]byte, error) { return build(out, f, 1, 0) }

// BuildRun lays out a run: n consecutive full-PMTU MIDDLE packets of one
// message as one packet, f's BTH being the first's and f.Payload all n
// payloads end to end (n times a valid PMTU). A run never goes on a wire: it
// is how two HCAs of one process hand each other a stretch of a message
// (ParseRun reads it back). n == 1 is Build.
func BuildRun(out []byte, f *PacketFields, n int) ([]byte, error) { return build(out, f, n, 0) }

// BuildRunLent lays out a run whose payload, payloadLen bytes, stays
// elsewhere (the sender's memory, lent to the receiver): the run's headers
// and ICRC field only, f.Payload being empty. ParseRunLent reads it back.
func BuildRunLent(out []byte, f *PacketFields, n, payloadLen int) ([]byte, error) {
	if payloadLen <= 0 || len(f.Payload) != 0 {
		return nil, ErrPayloadLength
	}
	return build(out, f, n, payloadLen)
}

// RunLen returns the size of a run (BuildRun) of n packets of opcode o
// carrying payload bytes in all, or an error when it cannot be one.
func RunLen(o Opcode, payload, n int) (int, error) {
	if err := checkRun(o, payload, n); err != nil {
		return 0, err
	}
	return PacketLen(o, payload)
}

func build(out []byte, f *PacketFields, count, absent int) ([]byte, error) {
	o := f.BTH.Opcode
	info := &opcodeTable[o]
	if info.Op == OpInvalid {
		return nil, ErrUnknownOpcode
	}
	if f.BTH.TVer != 0 {
		return nil, ErrBadTVer
	}
	if f.BTH.DestQP > Mask24 || f.BTH.PSN > Mask24 ||
		(info.Headers&HasDETH != 0 && f.DETH.SrcQP > Mask24) ||
		(info.Headers&HasXRCETH != 0 && f.XRCETH > Mask24) ||
		(info.Headers&HasAETH != 0 && f.AETH.MSN > Mask24) {
		return nil, ErrFieldRange
	}
	n := len(f.Payload)
	if absent < 0 || absent%4 != 0 {
		return nil, ErrPayloadLength
	}
	if err := checkRun(o, n+absent, count); err != nil {
		return nil, err
	}
	pad := PadCount(n)
	hlen := BTHSize + info.Headers.Len()
	total := hlen + n + pad + ICRCSize
	if len(out) < total {
		return nil, ErrShortBuffer
	}
	out = out[:total]
	bth := BTH(out[:BTHSize])
	bth.Encode(&f.BTH)
	bth.SetPadCount(uint8(pad))
	off := BTHSize
	h := info.Headers
	if h&HasDETH != 0 {
		DETH(out[off:]).Encode(&f.DETH)
		off += DETHSize
	}
	if h&HasXRCETH != 0 {
		XRCETH(out[off:]).SetSRQ(f.XRCETH)
		off += XRCETHSize
	}
	if h&HasFETH != 0 {
		FETH(out[off:]).SetValue(f.FETH)
		off += FETHSize
	}
	if h&HasRETH != 0 {
		RETH(out[off:]).Encode(&f.RETH)
		off += RETHSize
	}
	if h&HasAtomicETH != 0 {
		AtomicETH(out[off:]).Encode(&f.AtomicETH)
		off += AtomicETHSize
	}
	if h&HasAETH != 0 {
		AETH(out[off:]).Encode(&f.AETH)
		off += AETHSize
	}
	if h&HasAtomicAckETH != 0 {
		AtomicAckETH(out[off:]).SetOrigData(f.AtomicAckETH)
		off += AtomicAckETHSize
	}
	if h&HasImmDt != 0 {
		ImmDt(out[off:]).SetValue(f.ImmDt)
		off += ImmDtSize
	}
	if h&HasIETH != 0 {
		IETH(out[off:]).SetRKey(f.IETH)
		off += IETHSize
	}
	if h&HasCNPPad != 0 {
		clear(out[off : off+CNPPadSize])
		off += CNPPadSize
	}
	if n > 0 && &out[off] != &f.Payload[0] {
		copy(out[off:], f.Payload)
	}
	clear(out[off+n:])
	return out, nil
}

// RunPacket returns packet i of run, a run of n packets (ParseRun): its BTH,
// written into scratch (BTHSize bytes, which the packet aliases), is the
// run's with the PSN advanced by i and AckReq kept on the last packet only;
// its payload is its share of the run's. A run taken apart this way is the
// packets BuildRun's sender would have sent one at a time.
func RunPacket(run *Packet, i, n int, scratch []byte) Packet {
	bth := BTH(scratch[:BTHSize:BTHSize])
	copy(bth, run.BTH)
	bth.SetPSN(PSNAdd(run.BTH.PSN(), i))
	bth.SetAckReq(run.BTH.AckReq() && i == n-1)
	size := len(run.Payload) / n
	return Packet{BTH: bth, Payload: run.Payload[i*size : (i+1)*size : (i+1)*size], Pad: run.Pad[:0],
		ICRC: run.ICRC, HeaderLen: run.HeaderLen}
}
