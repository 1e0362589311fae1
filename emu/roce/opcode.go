package roce

import "strconv"

// Opcode is the BTH opcode (spec §2). Bits 7–5 select the transport, bits
// 4–0 the operation.
type Opcode uint8

// RC opcodes (spec §2.1).
const (
	RCSendFirst                  Opcode = 0x00
	RCSendMiddle                 Opcode = 0x01
	RCSendLast                   Opcode = 0x02
	RCSendLastWithImmediate      Opcode = 0x03
	RCSendOnly                   Opcode = 0x04
	RCSendOnlyWithImmediate      Opcode = 0x05
	RCRDMAWriteFirst             Opcode = 0x06
	RCRDMAWriteMiddle            Opcode = 0x07
	RCRDMAWriteLast              Opcode = 0x08
	RCRDMAWriteLastWithImmediate Opcode = 0x09
	RCRDMAWriteOnly              Opcode = 0x0A
	RCRDMAWriteOnlyWithImmediate Opcode = 0x0B
	RCRDMAReadRequest            Opcode = 0x0C
	RCRDMAReadResponseFirst      Opcode = 0x0D
	RCRDMAReadResponseMiddle     Opcode = 0x0E
	RCRDMAReadResponseLast       Opcode = 0x0F
	RCRDMAReadResponseOnly       Opcode = 0x10
	RCAcknowledge                Opcode = 0x11
	RCAtomicAcknowledge          Opcode = 0x12
	RCCompareSwap                Opcode = 0x13
	RCFetchAdd                   Opcode = 0x14
	RCSendLastWithInvalidate     Opcode = 0x16
	RCSendOnlyWithInvalidate     Opcode = 0x17
	RCFlush                      Opcode = 0x1C // IBTA 1.5, optional (spec §2.1)
	RCAtomicWrite                Opcode = 0x1D // IBTA 1.5, optional (spec §2.1)
)

// UC opcodes (spec §2.2).
const (
	UCSendFirst                  Opcode = 0x20
	UCSendMiddle                 Opcode = 0x21
	UCSendLast                   Opcode = 0x22
	UCSendLastWithImmediate      Opcode = 0x23
	UCSendOnly                   Opcode = 0x24
	UCSendOnlyWithImmediate      Opcode = 0x25
	UCRDMAWriteFirst             Opcode = 0x26
	UCRDMAWriteMiddle            Opcode = 0x27
	UCRDMAWriteLast              Opcode = 0x28
	UCRDMAWriteLastWithImmediate Opcode = 0x29
	UCRDMAWriteOnly              Opcode = 0x2A
	UCRDMAWriteOnlyWithImmediate Opcode = 0x2B
)

// UD opcodes and the RoCEv2 CNP (spec §2.3).
const (
	UDSendOnly              Opcode = 0x64
	UDSendOnlyWithImmediate Opcode = 0x65
	CNP                     Opcode = 0x81
)

// xrcOffset is what an RC opcode's XRC counterpart adds (IBTA 9.2:
// XRC_SEND_FIRST 0xA0 ... XRC_SEND_ONLY_WITH_INVALIDATE 0xB7).
const xrcOffset = 0xA0

// XRC is the XRC opcode of the RC operation o (an RC opcode through
// RC_SEND_ONLY_WITH_INVALIDATE); RC is the RC opcode of the XRC opcode
// o. Each returns o itself for any other opcode.
func (o Opcode) XRC() Opcode {
	if o <= RCSendOnlyWithInvalidate && opcodeTable[o].Op != OpInvalid {
		return o + xrcOffset
	}
	return o
}

// UC is the UC opcode of the RC SEND or RDMA WRITE opcode o (RC_SEND_FIRST
// through RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE); o itself for any other.
func (o Opcode) UC() Opcode {
	if o <= RCRDMAWriteOnlyWithImmediate {
		return o + UCSendFirst
	}
	return o
}

// RC: see XRC.
func (o Opcode) RC() Opcode {
	if o >= xrcOffset && o <= xrcOffset+RCSendOnlyWithInvalidate && opcodeTable[o].Op != OpInvalid {
		return o - xrcOffset
	}
	return o
}

// Transport is the transport service selected by opcode bits 7–5.
type Transport uint8

// Transports (spec §2).
const (
	TransportRC  Transport = 0
	TransportUC  Transport = 1
	TransportRD  Transport = 2
	TransportUD  Transport = 3
	TransportCNP Transport = 4
	TransportXRC Transport = 5
)

var transportNames = [8]string{"RC", "UC", "RD", "UD", "CNP", "XRC", "T6", "T7"}

func (t Transport) String() string { return transportNames[t&7] }

// Transport returns the transport service encoded in bits 7–5 of o.
func (o Opcode) Transport() Transport { return Transport(o >> 5) }

// ExtHeaders is a set of extended transport headers.
type ExtHeaders uint16

// Extended transport headers. The bit order is the order in which the
// headers follow the BTH on the wire (spec §1.7; FETH precedes RETH in a
// FLUSH, spec §2.1).
const (
	HasDETH ExtHeaders = 1 << iota
	HasXRCETH
	HasFETH
	HasRETH
	HasAtomicETH
	HasAETH
	HasAtomicAckETH
	HasImmDt
	HasIETH
	HasCNPPad     // the 16 reserved bytes of a CNP
	numExtHeaders = iota
)

// Sizes of the headers, in bytes.
const (
	BTHSize          = 12
	DETHSize         = 8
	XRCETHSize       = 4
	FETHSize         = 4
	RETHSize         = 16
	AtomicETHSize    = 28
	AETHSize         = 4
	AtomicAckETHSize = 8
	ImmDtSize        = 4
	IETHSize         = 4
	CNPPadSize       = 16
	ICRCSize         = 4
)

var extHeaderSizes = [numExtHeaders]int{
	DETHSize, XRCETHSize, FETHSize, RETHSize, AtomicETHSize, AETHSize, AtomicAckETHSize,
	ImmDtSize, IETHSize, CNPPadSize,
}

var extHeaderNames = [numExtHeaders]string{
	"DETH", "XRCETH", "FETH", "RETH", "AtomicETH", "AETH", "AtomicAckETH", "ImmDt", "IETH", "CNPPad",
}

// Len is the total size in bytes of the headers in h.
func (h ExtHeaders) Len() int {
	if h < 1<<numExtHeaders {
		return int(extHeadersLen[h]) // (it is asked several times per packet)
	}
	return h.sum()
}

// sum adds up the sizes of the headers in h, one by one.
func (h ExtHeaders) sum() int {
	n := 0
	for i := range numExtHeaders {
		if h&(1<<i) != 0 {
			n += extHeaderSizes[i]
		}
	}
	return n
}

// extHeadersLen is ExtHeaders.sum of every combination of headers.
var extHeadersLen = func() (t [1 << numExtHeaders]uint8) {
	for h := range t {
		t[h] = uint8(ExtHeaders(h).sum())
	}
	return t
}()

func (h ExtHeaders) String() string {
	if h == 0 {
		return "none"
	}
	s := ""
	for i := range numExtHeaders {
		if h&(1<<i) != 0 {
			if s != "" {
				s += "+"
			}
			s += extHeaderNames[i]
		}
	}
	return s
}

// PayloadRule says how many payload bytes an opcode's packets carry
// (spec §1.9 and the "Payload" column of §2).
type PayloadRule uint8

// Payload rules.
const (
	PayloadNone    PayloadRule = iota // no payload, PadCnt 0
	PayloadFull                       // exactly PMTU bytes (FIRST, MIDDLE)
	PayloadLast                       // 1..PMTU bytes (LAST)
	PayloadOnly                       // 0..PMTU bytes (ONLY, UD)
	PayloadAtomic8                    // exactly 8 bytes (ATOMIC_WRITE)
)

func (r PayloadRule) String() string {
	switch r {
	case PayloadNone:
		return "none"
	case PayloadFull:
		return "=PMTU"
	case PayloadLast:
		return "1..PMTU"
	case PayloadOnly:
		return "0..PMTU"
	case PayloadAtomic8:
		return "8"
	}
	return "PayloadRule(" + strconv.Itoa(int(r)) + ")"
}

// Position is a packet's place in a multi-packet message.
type Position uint8

// Positions.
const (
	PosNone   Position = iota // not part of a segmented message (ACK, READ request, atomic, CNP)
	PosFirst                  // FIRST
	PosMiddle                 // MIDDLE
	PosLast                   // LAST
	PosOnly                   // ONLY
)

// Operation is the kind of message an opcode belongs to.
type Operation uint8

// Operations.
const (
	OpInvalid Operation = iota
	OpSend
	OpRDMAWrite
	OpRDMAReadRequest
	OpRDMAReadResponse
	OpAcknowledge
	OpAtomicAcknowledge
	OpCompareSwap
	OpFetchAdd
	OpFlush
	OpAtomicWrite
	OpCNP
)

// MinPMTU and MaxPMTU bound the path MTU (spec conventions).
const (
	MinPMTU = 256
	MaxPMTU = 4096
)

// OpcodeInfo describes one opcode of the table of spec §2.
type OpcodeInfo struct {
	Name       string      // e.g. "RC_SEND_ONLY"
	Op         Operation   // kind of message
	Pos        Position    // FIRST/MIDDLE/LAST/ONLY or none
	Headers    ExtHeaders  // extended headers after the BTH, in wire order
	Payload    PayloadRule // payload length rule
	Response   bool        // sent by the responder (READ responses, ACKs)
	ConsumesRQ bool        // consumes a receive WQE at the responder (the "RQ" column)
}

// HeaderLen is the size of the BTH plus the extended headers.
func (i OpcodeInfo) HeaderLen() int { return BTHSize + i.Headers.Len() }

var opcodeTable [256]OpcodeInfo

func def(o Opcode, name string, op Operation, pos Position, h ExtHeaders, p PayloadRule, resp, rq bool) {
	opcodeTable[o] = OpcodeInfo{Name: name, Op: op, Pos: pos, Headers: h, Payload: p, Response: resp, ConsumesRQ: rq}
}

func init() {
	// RC, spec §2.1.
	def(RCSendFirst, "RC_SEND_FIRST", OpSend, PosFirst, 0, PayloadFull, false, true)
	def(RCSendMiddle, "RC_SEND_MIDDLE", OpSend, PosMiddle, 0, PayloadFull, false, false)
	def(RCSendLast, "RC_SEND_LAST", OpSend, PosLast, 0, PayloadLast, false, false)
	def(RCSendLastWithImmediate, "RC_SEND_LAST_WITH_IMMEDIATE", OpSend, PosLast, HasImmDt, PayloadLast, false, false)
	def(RCSendOnly, "RC_SEND_ONLY", OpSend, PosOnly, 0, PayloadOnly, false, true)
	def(RCSendOnlyWithImmediate, "RC_SEND_ONLY_WITH_IMMEDIATE", OpSend, PosOnly, HasImmDt, PayloadOnly, false, true)
	def(RCRDMAWriteFirst, "RC_RDMA_WRITE_FIRST", OpRDMAWrite, PosFirst, HasRETH, PayloadFull, false, false)
	def(RCRDMAWriteMiddle, "RC_RDMA_WRITE_MIDDLE", OpRDMAWrite, PosMiddle, 0, PayloadFull, false, false)
	def(RCRDMAWriteLast, "RC_RDMA_WRITE_LAST", OpRDMAWrite, PosLast, 0, PayloadLast, false, false)
	def(RCRDMAWriteLastWithImmediate, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", OpRDMAWrite, PosLast, HasImmDt, PayloadLast, false, true)
	def(RCRDMAWriteOnly, "RC_RDMA_WRITE_ONLY", OpRDMAWrite, PosOnly, HasRETH, PayloadOnly, false, false)
	def(RCRDMAWriteOnlyWithImmediate, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", OpRDMAWrite, PosOnly, HasRETH|HasImmDt, PayloadOnly, false, true)
	def(RCRDMAReadRequest, "RC_RDMA_READ_REQUEST", OpRDMAReadRequest, PosNone, HasRETH, PayloadNone, false, false)
	def(RCRDMAReadResponseFirst, "RC_RDMA_READ_RESPONSE_FIRST", OpRDMAReadResponse, PosFirst, HasAETH, PayloadFull, true, false)
	def(RCRDMAReadResponseMiddle, "RC_RDMA_READ_RESPONSE_MIDDLE", OpRDMAReadResponse, PosMiddle, 0, PayloadFull, true, false)
	def(RCRDMAReadResponseLast, "RC_RDMA_READ_RESPONSE_LAST", OpRDMAReadResponse, PosLast, HasAETH, PayloadLast, true, false)
	def(RCRDMAReadResponseOnly, "RC_RDMA_READ_RESPONSE_ONLY", OpRDMAReadResponse, PosOnly, HasAETH, PayloadOnly, true, false)
	def(RCAcknowledge, "RC_ACKNOWLEDGE", OpAcknowledge, PosNone, HasAETH, PayloadNone, true, false)
	def(RCAtomicAcknowledge, "RC_ATOMIC_ACKNOWLEDGE", OpAtomicAcknowledge, PosNone, HasAETH|HasAtomicAckETH, PayloadNone, true, false)
	def(RCCompareSwap, "RC_COMPARE_SWAP", OpCompareSwap, PosNone, HasAtomicETH, PayloadNone, false, false)
	def(RCFetchAdd, "RC_FETCH_ADD", OpFetchAdd, PosNone, HasAtomicETH, PayloadNone, false, false)
	def(RCSendLastWithInvalidate, "RC_SEND_LAST_WITH_INVALIDATE", OpSend, PosLast, HasIETH, PayloadLast, false, false)
	def(RCSendOnlyWithInvalidate, "RC_SEND_ONLY_WITH_INVALIDATE", OpSend, PosOnly, HasIETH, PayloadOnly, false, true)
	def(RCFlush, "RC_FLUSH", OpFlush, PosNone, HasFETH|HasRETH, PayloadNone, false, false)
	def(RCAtomicWrite, "RC_ATOMIC_WRITE", OpAtomicWrite, PosNone, HasRETH, PayloadAtomic8, false, false)

	// UC, spec §2.2.
	def(UCSendFirst, "UC_SEND_FIRST", OpSend, PosFirst, 0, PayloadFull, false, true)
	def(UCSendMiddle, "UC_SEND_MIDDLE", OpSend, PosMiddle, 0, PayloadFull, false, false)
	def(UCSendLast, "UC_SEND_LAST", OpSend, PosLast, 0, PayloadLast, false, false)
	def(UCSendLastWithImmediate, "UC_SEND_LAST_WITH_IMMEDIATE", OpSend, PosLast, HasImmDt, PayloadLast, false, false)
	def(UCSendOnly, "UC_SEND_ONLY", OpSend, PosOnly, 0, PayloadOnly, false, true)
	def(UCSendOnlyWithImmediate, "UC_SEND_ONLY_WITH_IMMEDIATE", OpSend, PosOnly, HasImmDt, PayloadOnly, false, true)
	def(UCRDMAWriteFirst, "UC_RDMA_WRITE_FIRST", OpRDMAWrite, PosFirst, HasRETH, PayloadFull, false, false)
	def(UCRDMAWriteMiddle, "UC_RDMA_WRITE_MIDDLE", OpRDMAWrite, PosMiddle, 0, PayloadFull, false, false)
	def(UCRDMAWriteLast, "UC_RDMA_WRITE_LAST", OpRDMAWrite, PosLast, 0, PayloadLast, false, false)
	def(UCRDMAWriteLastWithImmediate, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", OpRDMAWrite, PosLast, HasImmDt, PayloadLast, false, true)
	def(UCRDMAWriteOnly, "UC_RDMA_WRITE_ONLY", OpRDMAWrite, PosOnly, HasRETH, PayloadOnly, false, false)
	def(UCRDMAWriteOnlyWithImmediate, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", OpRDMAWrite, PosOnly, HasRETH|HasImmDt, PayloadOnly, false, true)

	// XRC (IBTA 9.2 and Annex A14): the RC operations with the XRC
	// transport's opcodes, the XRCETH (the destination XRC SRQ) after
	// the BTH of every request; responses carry none.
	for o := RCSendFirst; o <= RCSendOnlyWithInvalidate; o++ {
		rc := opcodeTable[o]
		if rc.Op == OpInvalid {
			continue
		}
		h := rc.Headers
		if !rc.Response {
			h |= HasXRCETH
		}
		def(o+xrcOffset, "XRC"+rc.Name[2:], rc.Op, rc.Pos, h, rc.Payload, rc.Response, rc.ConsumesRQ)
	}

	// UD and CNP, spec §2.3.
	def(UDSendOnly, "UD_SEND_ONLY", OpSend, PosOnly, HasDETH, PayloadOnly, false, true)
	def(UDSendOnlyWithImmediate, "UD_SEND_ONLY_WITH_IMMEDIATE", OpSend, PosOnly, HasDETH|HasImmDt, PayloadOnly, false, true)
	def(CNP, "CNP", OpCNP, PosNone, HasCNPPad, PayloadNone, false, false)
}

// Info returns the table entry for o; ok is false for opcodes the spec does
// not list (reserved, RD).
func (o Opcode) Info() (info OpcodeInfo, ok bool) {
	info = opcodeTable[o]
	return info, info.Op != OpInvalid
}

// Valid reports whether o is listed in the opcode table of spec §2.
func (o Opcode) Valid() bool { return opcodeTable[o].Op != OpInvalid }

// HeaderLen returns BTH plus extended header length for o, or -1 if o is not
// a known opcode.
func (o Opcode) HeaderLen() int {
	i := &opcodeTable[o]
	if i.Op == OpInvalid {
		return -1
	}
	return i.HeaderLen()
}

func (o Opcode) String() string {
	if i := &opcodeTable[o]; i.Op != OpInvalid {
		return i.Name
	}
	return "Opcode(0x" + strconv.FormatUint(uint64(o), 16) + ")"
}

// IsValidPMTU reports whether n is one of the IB path MTUs 256…4096.
func IsValidPMTU(n int) bool {
	return n == 256 || n == 512 || n == 1024 || n == 2048 || n == 4096
}

// CheckPayloadLen checks payload length n against the rule of opcode o for
// path MTU pmtu (spec §1.9). With pmtu == 0 the PMTU is unknown: FIRST and
// MIDDLE packets must then carry one of the valid PMTU sizes and other
// packets at most MaxPMTU bytes; that is what Parse checks.
func CheckPayloadLen(o Opcode, n, pmtu int) error {
	info := &opcodeTable[o]
	if info.Op == OpInvalid {
		return ErrUnknownOpcode
	}
	if pmtu != 0 && !IsValidPMTU(pmtu) {
		return ErrBadPMTU
	}
	limit := pmtu
	if limit == 0 {
		limit = MaxPMTU
	}
	switch info.Payload {
	case PayloadNone:
		if n != 0 {
			return ErrPayloadLength
		}
	case PayloadFull:
		if (pmtu == 0 && !IsValidPMTU(n)) || (pmtu != 0 && n != pmtu) {
			return ErrPayloadLength
		}
	case PayloadLast:
		if n < 1 || n > limit {
			return ErrPayloadLength
		}
	case PayloadOnly:
		if n < 0 || n > limit {
			return ErrPayloadLength
		}
	case PayloadAtomic8:
		if n != 8 {
			return ErrPayloadLength
		}
	}
	return nil
}
