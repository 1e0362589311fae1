// Package pvrdma holds the PVRDMA formats (pvrdma-abi.h) that the
// unprivileged guest (the rdma-core vmw_pvrdma provider) and the kernel
// driver write into guest memory for the device to read, and that the device writes back: ring indices, send and
// receive work queue elements (WQEs), scatter/gather elements (SGEs), address
// vectors and completion queue entries (CQEs). It decodes bytes into Go
// values and encodes Go values into bytes; what the values mean is the
// device's business (package emu/pvrdma).
//
// Importers name it uverbs, the concept it holds for its model: another
// model's formats sit beside it (uverbs/<model>).
//
// All integers are little-endian. Decoders take byte slices that were copied
// out of guest memory once; they never see guest memory itself.
package pvrdma

import (
	"encoding/binary"
	"errors"
	"math/bits"
)

var le = binary.LittleEndian

// Ring is the index arithmetic of a PVRDMA ring of N elements: indices count
// 0..2N-1, the top bit being a wrap bit. It is bit-exact with the driver's
// and provider's helpers, including for the non-power-of-two N of the two
// device rings.
type Ring struct{ N uint32 }

// Valid reports whether index i has no bits outside 2N-1.
func (r Ring) Valid(i uint32) bool { return i&^(2*r.N-1) == 0 }

// Slot is the element index of ring index i.
func (r Ring) Slot(i uint32) uint32 { return i & (r.N - 1) }

// Next advances ring index i by one.
func (r Ring) Next(i uint32) uint32 { return (i + 1) & (2*r.N - 1) }

// Empty reports prod == cons.
func (r Ring) Empty(prod, cons uint32) bool { return prod == cons }

// Full reports prod == cons ^ N.
func (r Ring) Full(prod, cons uint32) bool { return prod == cons^r.N }

// Pending is the number of elements between cons and prod along the index
// cycle, for a power-of-two ring. Callers validate both indices first.
func (r Ring) Pending(prod, cons uint32) uint32 { return (prod - cons) & (2*r.N - 1) }

// IsPow2 reports whether n is a non-zero power of two.
func IsPow2(n uint32) bool { return n != 0 && n&(n-1) == 0 }

// nextPow2 returns the smallest power of two >= n (n > 0, n <= 1<<31).
func nextPow2(n uint32) uint32 {
	if n <= 1 {
		return 1
	}
	return 1 << (32 - bits.LeadingZeros32(n-1))
}

// Ring-state offsets inside page 0 of a QP, CQ or SRQ.
const (
	TxProdTail = 0  // send queue: guest-owned producer index
	TxConsHead = 4  // send queue: device-owned consumer index
	RxProdTail = 8  // RQ/SRQ: guest producer; CQ and device rings: device producer
	RxConsHead = 12 // RQ/SRQ: device consumer; CQ and device rings: guest consumer
)

// Sizes of the fixed formats.
const (
	SGESize        = 16
	SendWQEHdrSize = 80
	RecvWQEHdrSize = 16
	CQESize        = 64
	AVSize         = 40
	EQESize        = 8 // async event entry
	CQNESize       = 4 // CQ notification entry
)

// SQStride is the send WQE stride for maxSGE SGEs: next_pow2(80 + 16*maxSGE).
func SQStride(maxSGE uint32) uint32 { return nextPow2(SendWQEHdrSize + SGESize*maxSGE) }

// RQStride is the receive (and SRQ) WQE stride for maxSGE SGEs.
func RQStride(maxSGE uint32) uint32 { return nextPow2(RecvWQEHdrSize + SGESize*maxSGE) }

// SGE is one scatter/gather element.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// Send opcodes (pvrdma_wr_opcode), the PVRDMA numbering.
const (
	OpRDMAWrite      = 0
	OpRDMAWriteImm   = 1
	OpSend           = 2
	OpSendImm        = 3
	OpRDMARead       = 4
	OpAtomicCmpSwp   = 5
	OpAtomicFetchAdd = 6
	OpLSO            = 7
	OpSendInv        = 8
	OpRDMAReadInv    = 9
	OpLocalInv       = 10
	OpFastRegMR      = 11
	OpMaskedCmpSwp   = 12
	OpMaskedFetchAdd = 13
	OpBindMW         = 14
	OpRegSigMR       = 15
)

// Send flags.
const (
	SendFence     = 1 << 0
	SendSignaled  = 1 << 1
	SendSolicited = 1 << 2
	SendInline    = 1 << 3
)

// AV is an address vector (pvrdma_av).
type AV struct {
	PortPD          uint32 // bits 23:0 PD handle, 31:24 port
	SLTClassFlowLbl uint32
	DGID            [16]byte
	SrcPathBits     uint8
	GIDIndex        uint8
	StatRate        uint8
	HopLimit        uint8
	DMAC            [6]byte
}

// DecodeAV decodes a 40-byte address vector.
func DecodeAV(b []byte) AV {
	var a AV
	a.PortPD = le.Uint32(b[0:])
	a.SLTClassFlowLbl = le.Uint32(b[4:])
	copy(a.DGID[:], b[8:24])
	a.SrcPathBits = b[24]
	a.GIDIndex = b[25]
	a.StatRate = b[26]
	a.HopLimit = b[27]
	copy(a.DMAC[:], b[28:34])
	return a
}

// FlowLabel, TrafficClass of the AV.
func (a AV) FlowLabel() uint32   { return a.SLTClassFlowLbl & 0xFFFFF }
func (a AV) TrafficClass() uint8 { return uint8(a.SLTClassFlowLbl >> 20) }

// SendWQE is a decoded send work queue element (header and its SGEs).
type SendWQE struct {
	WRID      uint64
	NumSGE    uint32
	Opcode    uint32
	SendFlags uint32
	Ex        [4]byte // imm_data (raw, network order) or invalidate_rkey (LE)
	// The 48-byte work-request union, decoded per opcode by the accessors.
	WR  [48]byte
	SGE []SGE
}

// ErrWQE reports a WQE whose SGE list does not fit its stride or exceeds the
// queue's SGE limit.
var ErrWQE = errors.New("malformed WQE")

// DecodeSendWQE decodes a send WQE from one stride-sized copy of the slot.
// maxSGE is the queue's SGE limit from CREATE_QP. On ErrWQE the header fields
// are still filled in (for the error completion).
func DecodeSendWQE(b []byte, maxSGE uint32) (SendWQE, error) {
	return DecodeSendWQEInto(b, maxSGE, nil)
}

// DecodeSendWQEInto is DecodeSendWQE with the SGEs decoded into sges's
// storage when it holds them (the caller's buffer, reused from WQE to WQE:
// no allocation); the WQE's SGE list is valid until that buffer is reused.
func DecodeSendWQEInto(b []byte, maxSGE uint32, sges []SGE) (SendWQE, error) {
	var w SendWQE
	if len(b) < SendWQEHdrSize {
		return w, ErrWQE
	}
	w.WRID = le.Uint64(b[0:])
	w.NumSGE = le.Uint32(b[8:])
	w.Opcode = le.Uint32(b[16:])
	w.SendFlags = le.Uint32(b[20:])
	copy(w.Ex[:], b[24:28])
	copy(w.WR[:], b[32:80])
	sges, err := decodeSGEs(b[SendWQEHdrSize:], w.NumSGE, maxSGE, sges[:0])
	w.SGE = sges
	return w, err
}

// ImmData is the raw immediate data (network order).
func (w *SendWQE) ImmData() [4]byte { return w.Ex }

// InvalidateRKey is the key of SEND_WITH_INV and LOCAL_INV.
func (w *SendWQE) InvalidateRKey() uint32 { return le.Uint32(w.Ex[:]) }

// RDMA is the rdma variant: remote address and rkey.
func (w *SendWQE) RDMA() (remoteAddr uint64, rkey uint32) {
	return le.Uint64(w.WR[0:]), le.Uint32(w.WR[8:])
}

// Atomic is the atomic variant.
func (w *SendWQE) Atomic() (remoteAddr, compareAdd, swap uint64, rkey uint32) {
	return le.Uint64(w.WR[0:]), le.Uint64(w.WR[8:]), le.Uint64(w.WR[16:]), le.Uint32(w.WR[24:])
}

// FastReg is the fast_reg variant.
type FastReg struct {
	IOVA        uint64
	PageListDir uint64
	PageShift   uint32
	PageListLen uint32
	Length      uint32
	Access      uint32
	RKey        uint32
}

// FastReg decodes the fast_reg variant.
func (w *SendWQE) FastReg() FastReg {
	return FastReg{
		IOVA:        le.Uint64(w.WR[0:]),
		PageListDir: le.Uint64(w.WR[8:]),
		PageShift:   le.Uint32(w.WR[16:]),
		PageListLen: le.Uint32(w.WR[20:]),
		Length:      le.Uint32(w.WR[24:]),
		Access:      le.Uint32(w.WR[28:]),
		RKey:        le.Uint32(w.WR[32:]),
	}
}

// UD is the ud variant: destination QP, Q_Key and address vector.
func (w *SendWQE) UD() (remoteQPN, remoteQKey uint32, av AV) {
	return le.Uint32(w.WR[0:]), le.Uint32(w.WR[4:]), DecodeAV(w.WR[8:48])
}

// RecvWQE is a decoded receive (RQ or SRQ) work queue element.
type RecvWQE struct {
	WRID   uint64
	NumSGE uint32
	SGE    []SGE
}

// DecodeRecvWQE decodes a receive WQE from one stride-sized copy.
func DecodeRecvWQE(b []byte, maxSGE uint32) (RecvWQE, error) {
	return DecodeRecvWQEInto(b, maxSGE, nil)
}

// DecodeRecvWQEInto is DecodeRecvWQE with the SGEs in sges's storage when
// it holds them (as DecodeSendWQEInto).
func DecodeRecvWQEInto(b []byte, maxSGE uint32, sges []SGE) (RecvWQE, error) {
	var w RecvWQE
	if len(b) < RecvWQEHdrSize {
		return w, ErrWQE
	}
	w.WRID = le.Uint64(b[0:])
	w.NumSGE = le.Uint32(b[8:])
	sges, err := decodeSGEs(b[RecvWQEHdrSize:], w.NumSGE, maxSGE, sges[:0])
	w.SGE = sges
	return w, err
}

// decodeSGEs decodes n SGEs from b, appended to dst (empty; a new slice
// when its capacity is short).
func decodeSGEs(b []byte, n, maxSGE uint32, dst []SGE) ([]SGE, error) {
	if n > maxSGE || uint64(n)*SGESize > uint64(len(b)) {
		return nil, ErrWQE
	}
	if uint32(cap(dst)) < n {
		dst = make([]SGE, 0, n)
	}
	for i := range int(n) {
		e := b[i*SGESize:]
		dst = append(dst, SGE{Addr: le.Uint64(e[0:]), Length: le.Uint32(e[8:]), LKey: le.Uint32(e[12:])})
	}
	return dst, nil
}

// Completion opcodes (pvrdma_wc_opcode).
const (
	WCSend        = 0
	WCRDMAWrite   = 1
	WCRDMARead    = 2
	WCCompSwap    = 3
	WCFetchAdd    = 4
	WCBindMW      = 5
	WCLocalInv    = 7
	WCFastRegMR   = 8
	WCRecv        = 128
	WCRecvRDMAImm = 129
)

// Completion status (pvrdma_wc_status = IB numbering).
const (
	WCSuccess      = 0
	WCLocLenErr    = 1
	WCLocQPOpErr   = 2
	WCLocProtErr   = 4
	WCWRFlushErr   = 5
	WCBadRespErr   = 7
	WCLocAccessErr = 8
	WCRemInvReqErr = 9
	WCRemAccessErr = 10
	WCRemOpErr     = 11
	WCRetryExcErr  = 12
	WCRNRRetryExc  = 13
	WCFatalErr     = 19
	WCGeneralErr   = 21
)

// Completion flags (pvrdma_wc_flags).
const (
	WCFlagGRH            = 1 << 0
	WCFlagImm            = 1 << 1
	WCFlagInvalidate     = 1 << 2
	WCFlagNetworkHdrType = 1 << 6
)

// CQE is a completion queue entry (pvrdma_cqe).
type CQE struct {
	WRID           uint64
	QP             uint64
	Opcode         uint32
	Status         uint32
	ByteLen        uint32
	ImmData        [4]byte
	SrcQP          uint32
	WCFlags        uint32
	VendorErr      uint32
	PKeyIndex      uint16
	PortNum        uint8
	NetworkHdrType uint8
}

// Encode writes the 64-byte CQE into b.
func (c *CQE) Encode(b []byte) {
	_ = b[CQESize-1]
	clear(b[:CQESize])
	le.PutUint64(b[0:], c.WRID)
	le.PutUint64(b[8:], c.QP)
	le.PutUint32(b[16:], c.Opcode)
	le.PutUint32(b[20:], c.Status)
	le.PutUint32(b[24:], c.ByteLen)
	copy(b[28:32], c.ImmData[:])
	le.PutUint32(b[32:], c.SrcQP)
	le.PutUint32(b[36:], c.WCFlags)
	le.PutUint32(b[40:], c.VendorErr)
	le.PutUint16(b[44:], c.PKeyIndex)
	b[50] = c.PortNum
	b[57] = c.NetworkHdrType
}

// DecodeCQE is the inverse of Encode (for tests and fake drivers).
func DecodeCQE(b []byte) CQE {
	var c CQE
	c.WRID = le.Uint64(b[0:])
	c.QP = le.Uint64(b[8:])
	c.Opcode = le.Uint32(b[16:])
	c.Status = le.Uint32(b[20:])
	c.ByteLen = le.Uint32(b[24:])
	copy(c.ImmData[:], b[28:32])
	c.SrcQP = le.Uint32(b[32:])
	c.WCFlags = le.Uint32(b[36:])
	c.VendorErr = le.Uint32(b[40:])
	c.PKeyIndex = le.Uint16(b[44:])
	c.PortNum = b[50]
	c.NetworkHdrType = b[57]
	return c
}

// Encode writes the send WQE (header, union and SGEs) into b, which must hold
// 80 + 16*len(SGE) bytes. NumSGE is written as given (tests may lie).
func (w *SendWQE) Encode(b []byte) {
	clear(b[:SendWQEHdrSize])
	le.PutUint64(b[0:], w.WRID)
	le.PutUint32(b[8:], w.NumSGE)
	le.PutUint32(b[16:], w.Opcode)
	le.PutUint32(b[20:], w.SendFlags)
	copy(b[24:28], w.Ex[:])
	copy(b[32:80], w.WR[:])
	encodeSGEs(b[SendWQEHdrSize:], w.SGE)
}

// SetRDMA fills the rdma variant.
func (w *SendWQE) SetRDMA(remoteAddr uint64, rkey uint32) {
	le.PutUint64(w.WR[0:], remoteAddr)
	le.PutUint32(w.WR[8:], rkey)
}

// SetAtomic fills the atomic variant.
func (w *SendWQE) SetAtomic(remoteAddr, compareAdd, swap uint64, rkey uint32) {
	le.PutUint64(w.WR[0:], remoteAddr)
	le.PutUint64(w.WR[8:], compareAdd)
	le.PutUint64(w.WR[16:], swap)
	le.PutUint32(w.WR[24:], rkey)
}

// SetUD fills the ud variant.
func (w *SendWQE) SetUD(remoteQPN, remoteQKey uint32, av AV) {
	le.PutUint32(w.WR[0:], remoteQPN)
	le.PutUint32(w.WR[4:], remoteQKey)
	av.Encode(w.WR[8:48])
}

// SetFastReg fills the fast_reg variant.
func (w *SendWQE) SetFastReg(f FastReg) {
	le.PutUint64(w.WR[0:], f.IOVA)
	le.PutUint64(w.WR[8:], f.PageListDir)
	le.PutUint32(w.WR[16:], f.PageShift)
	le.PutUint32(w.WR[20:], f.PageListLen)
	le.PutUint32(w.WR[24:], f.Length)
	le.PutUint32(w.WR[28:], f.Access)
	le.PutUint32(w.WR[32:], f.RKey)
}

// Encode writes the 40-byte address vector.
func (a AV) Encode(b []byte) {
	clear(b[:AVSize])
	le.PutUint32(b[0:], a.PortPD)
	le.PutUint32(b[4:], a.SLTClassFlowLbl)
	copy(b[8:24], a.DGID[:])
	b[24], b[25], b[26], b[27] = a.SrcPathBits, a.GIDIndex, a.StatRate, a.HopLimit
	copy(b[28:34], a.DMAC[:])
}

// Encode writes the receive WQE into b (16 + 16*len(SGE) bytes).
func (w *RecvWQE) Encode(b []byte) {
	clear(b[:RecvWQEHdrSize])
	le.PutUint64(b[0:], w.WRID)
	le.PutUint32(b[8:], w.NumSGE)
	encodeSGEs(b[RecvWQEHdrSize:], w.SGE)
}

func encodeSGEs(b []byte, s []SGE) {
	for i, g := range s {
		e := b[i*SGESize:]
		le.PutUint64(e[0:], g.Addr)
		le.PutUint32(e[8:], g.Length)
		le.PutUint32(e[12:], g.LKey)
	}
}
