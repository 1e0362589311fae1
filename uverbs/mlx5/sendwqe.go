package mlx5

import (
	"errors"
	"fmt"
)

// ST is a QP's service type, the QP context's st field
// (qp.h MLX5_QP_ST_*): what segments its send WQEs carry.
type ST uint8

// Service types a send queue is decoded for.
const (
	STRC     ST = 0x0
	STUC     ST = 0x1
	STUD     ST = 0x2
	STXRC    ST = 0x3 // XRC INI (an XRC TGT has no send queue)
	STQP0    ST = 0x7
	STQP1    ST = 0x8
	STRegUMR ST = 0xc // the kernel's UMR QP
)

func (t ST) String() string {
	switch t {
	case STRC:
		return "RC"
	case STUC:
		return "UC"
	case STUD:
		return "UD"
	case STXRC:
		return "XRC"
	case STQP0:
		return "QP0"
	case STQP1:
		return "QP1"
	case STRegUMR:
		return "REG_UMR"
	}
	return fmt.Sprintf("st %#x", uint8(t))
}

// datagram reports a service type whose WQEs carry an address vector.
func (t ST) datagram() bool { return t == STUD || t == STQP0 || t == STQP1 }

// ErrWQE is what every WQE decoding error matches (errors.Is).
var ErrWQE = errors.New("malformed WQE")

// WQEError is a WQE the device must refuse: it completes with an error CQE
// carrying Syndrome (and the QP goes to the error state).
type WQEError struct {
	Syndrome uint8  // the error CQE's syndrome (Syndrome* values)
	What     string // what is wrong, for logs and strict-mode findings
}

func (e *WQEError) Error() string {
	return fmt.Sprintf("malformed WQE (syndrome %#x): %s", e.Syndrome, e.What)
}

// Is makes a *WQEError match ErrWQE.
func (e *WQEError) Is(target error) bool { return target == ErrWQE }

func wqeErr(synd uint8, format string, args ...any) error {
	return &WQEError{Syndrome: synd, What: fmt.Sprintf(format, args...)}
}

// Segs says which segments a decoded send WQE holds besides the control
// segment and its data segments.
type Segs uint8

// Segment flags.
const (
	HasXRC Segs = 1 << iota
	HasAV
	HasRAddr
	HasAtomic
	HasMaskedAtomic
	HasInline
	HasUMR // UMR control and mkey context segments (and Translation)
)

// SendWQE is a decoded send WQE. Data and Inline alias storage the decoder
// was given (Decode reuses them from WQE to WQE); Translation aliases the
// bytes decoded.
type SendWQE struct {
	Ctrl    CtrlSeg
	Segs    Segs
	XRCSRQN uint32 // HasXRC: the remote XRC SRQ (struct mlx5_wqe_xrc_seg)
	AV      AV     // HasAV
	RAddr   RAddrSeg
	Atomic  AtomicSeg
	UMRCtrl UMRCtrlSeg
	Mkey    MkeyContextSeg
	// Translation is the UMR's inline translation (KLMOctowords*16 bytes,
	// KLM entries that dma/mlx5 decodes).
	Translation []byte
	// Data are the data segments, in order (a zero-length one is kept:
	// it gathers nothing). Empty when HasInline. For a UMR WQE, the one
	// data segment that points at its translation (not inline).
	Data []DataSeg
	// Inline is the inline payload (HasInline).
	Inline []byte
}

// Length is the number of bytes the inline segments and the data
// segments describe (at most 63 segments of 2^32-1 bytes: no overflow).
func (w *SendWQE) Length() uint64 {
	n := uint64(len(w.Inline))
	for _, d := range w.Data {
		n += uint64(d.ByteCount)
	}
	return n
}

// DecodeSendWQE decodes the send WQE whose bytes, in ring order (a WQE that
// runs past the end of the send queue continues at its start: the caller
// copies it out in that order), are b. st is the QP's service type; maxDS
// is the largest WQE the QP may post, in 16-byte units (from the QP's
// max_wqe_sz_sq and never more than the ring; above MaxDS it is MaxDS).
//
// On error the control segment is still decoded when b holds one, for the
// error CQE (its wqe_counter and opcode); the error is a *WQEError.
// Whether the control segment's wqe_index and QPN are the ones expected
// (the SQ counter, the QP rung) is the device's check (mlx5.md §7.9).
func DecodeSendWQE(b []byte, st ST, maxDS int) (SendWQE, error) {
	var w SendWQE
	err := w.Decode(b, st, maxDS)
	return w, err
}

// Decode is DecodeSendWQE into w, reusing the storage of w.Data and
// w.Inline.
func (w *SendWQE) Decode(b []byte, st ST, maxDS int) error {
	data, inl := w.Data[:0], w.Inline[:0]
	*w = SendWQE{Data: data, Inline: inl}
	c, ok := DecodeCtrlSeg(b)
	if !ok {
		return wqeErr(SyndromeLocalQPOpErr, "%d bytes, no control segment", len(b))
	}
	w.Ctrl = c
	maxDS = min(maxDS, MaxDS)
	ds := int(c.DS)
	switch {
	case ds == 0:
		return wqeErr(SyndromeLocalQPOpErr, "ds 0")
	case ds > maxDS:
		return wqeErr(SyndromeLocalQPOpErr, "ds %d above the QP's %d", ds, maxDS)
	case ds*SendWQEDS > len(b):
		return wqeErr(SyndromeLocalQPOpErr, "ds %d: %d bytes given", ds, len(b))
	}
	if c.Opmod != 0 && c.Opcode != OpcodeUMR {
		// No verb the QPs here post sets an opmod (mlx5.md §7.5.1).
		return wqeErr(SyndromeLocalQPOpErr, "opmod %#x", c.Opmod)
	}
	r := reader{b: b[CtrlSegSize : ds*SendWQEDS]}
	if !opcodeValid(st, c.Opcode) {
		return wqeErr(SyndromeLocalQPOpErr, "opcode %#x on a %v QP", c.Opcode, st)
	}
	if c.Opcode == OpcodeNOP {
		return nil // a NOP's segments, if any, mean nothing
	}
	if c.Opcode == OpcodeUMR {
		return w.decodeUMR(&r)
	}
	if st == STXRC {
		s, ok := r.take(XRCSegSize)
		if !ok {
			return wqeErr(SyndromeLocalQPOpErr, "XRC QP: no XRC segment")
		}
		w.XRCSRQN = be.Uint32(s)
		w.Segs |= HasXRC
	}
	if st.datagram() {
		s, ok := r.take(AVSize)
		if !ok {
			return wqeErr(SyndromeLocalQPOpErr, "%v QP: no datagram segment", st)
		}
		w.AV = DecodeAV(s)
		w.Segs |= HasAV
	}
	inline, maxData := true, MaxDS
	switch c.Opcode {
	case OpcodeRDMAWrite, OpcodeRDMAWriteImm, OpcodeRDMARead:
		s, ok := r.take(RAddrSegSize)
		if !ok {
			return wqeErr(SyndromeLocalQPOpErr, "opcode %#x: no remote-address segment", c.Opcode)
		}
		w.RAddr = DecodeRAddrSeg(s)
		w.Segs |= HasRAddr
		inline = c.Opcode != OpcodeRDMARead
	case OpcodeAtomicCS, OpcodeAtomicFA, OpcodeAtomicMaskedCS, OpcodeAtomicMaskedFA:
		s, ok := r.take(RAddrSegSize)
		if !ok {
			return wqeErr(SyndromeLocalQPOpErr, "atomic: no remote-address segment")
		}
		w.RAddr = DecodeRAddrSeg(s)
		masked := c.Opcode == OpcodeAtomicMaskedCS || c.Opcode == OpcodeAtomicMaskedFA
		n, flag := AtomicSegSize, HasAtomic
		if masked {
			n, flag = MaskedAtomicSegSize, HasMaskedAtomic
		}
		if s, ok = r.take(n); !ok {
			return wqeErr(SyndromeLocalQPOpErr, "atomic: no atomic segment")
		}
		w.Atomic = DecodeAtomicSeg(s, masked)
		w.Segs |= HasRAddr | flag
		inline, maxData = false, 1
	}
	return w.decodeData(&r, inline, maxData)
}

// decodeData decodes what follows the fixed segments: (when inline is
// allowed) one inline segment, padded to 16 bytes as the provider's and
// the kernel's set_data_inl_seg pad it, then data segments, the message
// being their bytes in that order. The provider posts one inline segment
// that fills the WQE; UCX's rc_mlx5 puts an active message's header inline
// before the data segments of its payload (uct_rc_mlx5_txqp_dptr_post_iov).
// A second inline segment, or one after a data segment, is refused: no
// driver posts them.
func (w *SendWQE) decodeData(r *reader, inline bool, maxData int) error {
	if len(r.b) >= 4 && be.Uint32(r.b)&InlineSeg != 0 {
		if !inline {
			return wqeErr(SyndromeLocalQPOpErr, "opcode %#x: inline segment", w.Ctrl.Opcode)
		}
		n := int(be.Uint32(r.b) &^ InlineSeg)
		if n > len(r.b)-4 {
			return wqeErr(SyndromeLocalQPOpErr, "inline %d bytes in %d", n, len(r.b)-4)
		}
		pad := (4 + n + SendWQEDS - 1) / SendWQEDS * SendWQEDS
		w.Inline = append(w.Inline, r.b[4:4+n]...)
		w.Segs |= HasInline
		if pad > len(r.b) {
			return wqeErr(SyndromeLocalQPOpErr, "inline %d bytes: its padding runs past the WQE", n)
		}
		r.b = r.b[pad:]
		if len(r.b) >= 4 && be.Uint32(r.b)&InlineSeg != 0 {
			return wqeErr(SyndromeLocalQPOpErr, "a second inline segment")
		}
	}
	if len(r.b)%DataSegSize != 0 {
		return wqeErr(SyndromeLocalQPOpErr, "%d bytes left: not whole data segments", len(r.b))
	}
	if n := len(r.b) / DataSegSize; n > maxData {
		return wqeErr(SyndromeLocalQPOpErr, "opcode %#x: %d data segments, at most %d", w.Ctrl.Opcode, n, maxData)
	}
	for s, ok := r.take(DataSegSize); ok; s, ok = r.take(DataSegSize) {
		d := DecodeDataSeg(s)
		if d.ByteCount&InlineSeg != 0 {
			return wqeErr(SyndromeLocalQPOpErr, "inline segment after data segment %d", len(w.Data))
		}
		w.Data = append(w.Data, d)
	}
	return nil
}

// decodeUMR decodes a UMR WQE: UMR control, mkey context, then the
// translation the control segment announces (mlx5.md §7.5.7): inline, its
// KLMOctowords*16 bytes (the provider's memory-window bind, the kernel's
// small fast-register), or, without UMRCtrlFlagInline, one data segment
// pointing at it (the kernel's set_reg_data_seg: its local DMA lkey and
// the descriptor list's address), decoded into Data.
func (w *SendWQE) decodeUMR(r *reader) error {
	s, ok := r.take(UMRCtrlSegSize)
	if !ok {
		return wqeErr(SyndromeLocalQPOpErr, "UMR: no UMR control segment")
	}
	w.UMRCtrl = DecodeUMRCtrlSeg(s)
	if s, ok = r.take(MkeyContextSegSize); !ok {
		return wqeErr(SyndromeLocalQPOpErr, "UMR: no mkey context segment")
	}
	w.Mkey = DecodeMkeyContextSeg(s)
	w.Segs |= HasUMR
	n := int(w.UMRCtrl.KLMOctowords) * SendWQEDS
	if w.UMRCtrl.Flags&UMRCtrlFlagInline == 0 && n > 0 {
		if len(r.b) != DataSegSize {
			return wqeErr(SyndromeLocalQPOpErr, "UMR: translation by pointer, %d bytes left, want one data segment", len(r.b))
		}
		w.Data = append(w.Data, DecodeDataSeg(r.b))
		return nil
	}
	if w.UMRCtrl.Flags&UMRCtrlFlagInline == 0 {
		n = 0
	}
	if n != len(r.b) {
		return wqeErr(SyndromeLocalQPOpErr, "UMR: %d bytes of translation, %d bytes left", n, len(r.b))
	}
	w.Translation, _ = r.take(n)
	return nil
}

// opcodeValid reports whether opcode may be posted on a QP of type st
// (ibv_post_send(3)'s table; NOP everywhere; the REG_UMR QP posts UMR
// WQEs only).
func opcodeValid(st ST, op uint8) bool {
	switch op {
	case OpcodeNOP:
		return true
	case OpcodeSend, OpcodeSendImm:
		return st != STRegUMR
	case OpcodeSendInval, OpcodeRDMAWrite, OpcodeRDMAWriteImm:
		return st == STRC || st == STUC || st == STXRC
	case OpcodeRDMARead, OpcodeAtomicCS, OpcodeAtomicFA, OpcodeAtomicMaskedCS, OpcodeAtomicMaskedFA:
		return st == STRC || st == STXRC
	case OpcodeUMR:
		return st == STRC || st == STUC || st == STXRC || st == STRegUMR
	}
	return false
}

// reader hands out consecutive segments of a WQE.
type reader struct{ b []byte }

func (r *reader) take(n int) ([]byte, bool) {
	if n > len(r.b) {
		return nil, false
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s, true
}

// Encode writes the WQE as the provider lays it out into b and returns its
// size in bytes (Ctrl.DS*16 when the caller set DS to match; Encode writes
// Ctrl as given, so tests can lie). b must hold the WQE.
func (w *SendWQE) Encode(b []byte) int {
	w.Ctrl.Encode(b)
	n := CtrlSegSize
	put := func(size int, enc func([]byte)) {
		enc(b[n : n+size])
		n += size
	}
	if w.Segs&HasUMR != 0 {
		put(UMRCtrlSegSize, w.UMRCtrl.Encode)
		put(MkeyContextSegSize, w.Mkey.Encode)
		n += copy(b[n:], w.Translation)
		for _, d := range w.Data {
			put(DataSegSize, d.Encode)
		}
		return n
	}
	if w.Segs&HasXRC != 0 {
		put(XRCSegSize, func(s []byte) { clear(s); be.PutUint32(s, w.XRCSRQN) })
	}
	if w.Segs&HasAV != 0 {
		put(AVSize, w.AV.Encode)
	}
	if w.Segs&HasRAddr != 0 {
		put(RAddrSegSize, w.RAddr.Encode)
	}
	if w.Segs&HasAtomic != 0 {
		put(AtomicSegSize, func(s []byte) { w.Atomic.Encode(s, false) })
	}
	if w.Segs&HasMaskedAtomic != 0 {
		put(MaskedAtomicSegSize, func(s []byte) { w.Atomic.Encode(s, true) })
	}
	if w.Segs&HasInline != 0 {
		size := (4 + len(w.Inline) + SendWQEDS - 1) / SendWQEDS * SendWQEDS
		put(size, func(s []byte) {
			clear(s)
			be.PutUint32(s, uint32(len(w.Inline))|InlineSeg)
			copy(s[4:], w.Inline)
		})
	}
	for _, d := range w.Data {
		put(DataSegSize, d.Encode)
	}
	return n
}

// SQ is the index arithmetic of a send queue of 1<<LogSize WQEBBs
// (qpc.log_sq_size). Its counter counts WQEBBs, 16 bits, wrapping at
// 0x10000 whatever the size (mlx5.md §7.2).
type SQ struct{ LogSize uint8 }

// Size is the ring's size in bytes.
func (q SQ) Size() uint64 { return SendWQEBB << q.LogSize }

// Offset is the byte offset in the ring of WQEBB counter n.
func (q SQ) Offset(n uint16) uint64 { return uint64(n) & (1<<q.LogSize - 1) * SendWQEBB }

// Spans splits the n bytes of a WQE starting at WQEBB counter c into the
// at most two pieces of the ring they occupy: [off1, off1+n1) then
// [0, n2) when the WQE wraps. n is bounded by the ring size by the caller
// (maxDS).
func (q SQ) Spans(c uint16, n uint64) (off1, n1, n2 uint64) {
	off1 = q.Offset(c)
	n = min(n, q.Size())
	n1 = min(n, q.Size()-off1)
	return off1, n1, n - n1
}
