package mlx5test

import (
	"encoding/binary"

	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// SRQRing is an SRQ's (RMP's, XRC SRQ's) linked list of WQEs as the
// provider keeps it (srq.c): every WQE's next segment links it to the
// following one at creation, posts take the head and follow its link,
// the doorbell record's 32-bit word counts the posts, and a completed
// WQE goes back at the tail.
type SRQRing struct {
	S                   *SRQ
	LogSize             uint8
	Stride              uint64 // bytes
	Head, Tail, Counter uint16
	Hold                func(func())
}

func (r *SRQRing) hold(fn func()) { (&WQ{Hold: r.Hold}).hold(fn) }

// InitSRQ links WQE i to i+1 (mlx5_alloc_srq_buf): head 0, tail the last.
func (d *Driver) InitSRQ(r *SRQRing) {
	n := uint16(1) << r.LogSize
	for i := uint16(0); i < n; i++ {
		var next [uverbs.SRQNextSegSize]byte
		uverbs.SRQNextSeg{NextWQEIndex: (i + 1) & (n - 1)}.Encode(next[:])
		d.writeBuf(r.S.Buf, uint64(i)*r.Stride, next[:])
	}
	r.Head, r.Tail = 0, n-1
}

// PostSRQRecv writes data segments into the WQE at the head (its next
// segment kept), moves the head along its link and publishes the count
// (mlx5_post_srq_recv). It returns the WQE's index.
func (d *Driver) PostSRQRecv(r *SRQRing, segs ...uverbs.DataSeg) uint16 {
	idx := r.Head
	r.hold(func() {
		off := uint64(idx) * r.Stride
		next := uverbs.DecodeSRQNextSeg(d.Bytes(bufAt(r.S.Buf, off), uverbs.SRQNextSegSize))
		b := make([]byte, r.Stride)
		(&uverbs.RecvWQE{Next: next, Data: segs}).Encode(b, true)
		d.writeBuf(r.S.Buf, off, b)
		r.Head = next.NextWQEIndex
		r.Counter++
		binary.BigEndian.PutUint32(d.Bytes(r.S.DBR, 4), uint32(r.Counter))
	})
	return idx
}

// FreeSRQWQE links a completed WQE back at the tail (mlx5_free_srq_wqe).
func (d *Driver) FreeSRQWQE(r *SRQRing, idx uint16) {
	r.hold(func() {
		var next [uverbs.SRQNextSegSize]byte
		uverbs.SRQNextSeg{NextWQEIndex: idx}.Encode(next[:])
		d.writeBuf(r.S.Buf, uint64(r.Tail)*r.Stride, next[:])
		r.Tail = idx
	})
}
