package mlx5

// SRQNextSeg is the first segment of an SRQ (RMP, XRC SRQ) WQE
// (struct mlx5_wqe_srq_next_seg): the link to the next free WQE.
type SRQNextSeg struct {
	NextWQEIndex uint16
	Signature    uint8
}

// DecodeSRQNextSeg decodes the 16-byte segment at the start of b.
func DecodeSRQNextSeg(b []byte) SRQNextSeg {
	_ = b[SRQNextSegSize-1]
	return SRQNextSeg{NextWQEIndex: be.Uint16(b[2:]), Signature: b[4]}
}

// Encode writes the segment (reserved bytes zero) into b.
func (s SRQNextSeg) Encode(b []byte) {
	_ = b[SRQNextSegSize-1]
	clear(b[:SRQNextSegSize])
	be.PutUint16(b[2:], s.NextWQEIndex)
	b[4] = s.Signature
}

// RecvWQE is a decoded receive WQE: its scatter list up to the terminator,
// and for an SRQ WQE the next-pointer segment before it.
type RecvWQE struct {
	Next SRQNextSeg // SRQ WQEs only
	// Data are the scatter entries before the terminator (an entry with
	// lkey MLX5_INVALID_LKEY) or the end of the WQE. Zero-length entries
	// are kept (the SRQ path of the provider posts them): they scatter
	// nothing.
	Data []DataSeg
}

// DecodeRecvWQE decodes a receive WQE from one stride-sized copy b of its
// slot (16 << log_rq_stride bytes; an RMP's 1 << log_wq_stride). srq says
// the WQE starts with the next-pointer segment (SRQ, RMP, XRC SRQ).
func DecodeRecvWQE(b []byte, srq bool) (RecvWQE, error) {
	var w RecvWQE
	err := w.Decode(b, srq)
	return w, err
}

// Decode is DecodeRecvWQE into w, reusing the storage of w.Data.
func (w *RecvWQE) Decode(b []byte, srq bool) error {
	w.Next, w.Data = SRQNextSeg{}, w.Data[:0]
	if len(b)%DataSegSize != 0 || len(b) == 0 {
		return wqeErr(SyndromeLocalQPOpErr, "receive WQE of %d bytes", len(b))
	}
	if srq {
		w.Next = DecodeSRQNextSeg(b)
		b = b[SRQNextSegSize:]
	}
	for ; len(b) >= DataSegSize; b = b[DataSegSize:] {
		d := DecodeDataSeg(b)
		if d.LKey == InvalidLKey {
			break
		}
		w.Data = append(w.Data, d)
	}
	return nil
}

// Encode writes the WQE as the provider does into b (a whole slot): the
// next segment for an SRQ, the data segments, and the terminator when the
// slot has room for one. It returns false when the segments do not fit.
func (w *RecvWQE) Encode(b []byte, srq bool) bool {
	off := 0
	if srq {
		if len(b) < SRQNextSegSize {
			return false
		}
		w.Next.Encode(b)
		off = SRQNextSegSize
	}
	if off+len(w.Data)*DataSegSize > len(b) {
		return false
	}
	for _, d := range w.Data {
		d.Encode(b[off:])
		off += DataSegSize
	}
	if off+DataSegSize <= len(b) {
		DataSeg{LKey: InvalidLKey}.Encode(b[off:])
	}
	return true
}

// RQ is the index arithmetic of a receive queue (or SRQ) of 1<<LogSize
// WQEs of 1<<StrideShift bytes each. StrideShift is log2 of the WQE size in
// bytes: a QP's or XRC SRQ's log_rq_stride + 4, an RMP's log_wq_stride.
// A QP's RQ counter is 16 bits (mlx5.md §7.2); an SRQ's WQE index is its
// slot.
type RQ struct{ LogSize, StrideShift uint8 }

// Size is the ring's size in bytes.
func (q RQ) Size() uint64 { return uint64(1) << (q.LogSize + q.StrideShift) }

// Offset is the byte offset in the ring of WQE counter (or index) n.
func (q RQ) Offset(n uint16) uint64 { return uint64(n) & (1<<q.LogSize - 1) << q.StrideShift }
