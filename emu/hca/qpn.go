package hca

import (
	"crypto/rand"
	"math/bits"
	mrand "math/rand/v2"
)

// QP numbers. A QPN is what a peer names a QP by on the wire, so a small
// sequential one is a guess away for a hostile peer. From VERSION 20
// (PVRDMA_QPHANDLE_VERSION) PVRDMA's CREATE_QP response carries the QPN and the QP
// handle apart: vmw_pvrdma indexes its QP table, async events and CQEs by
// the handle (qp_tbl[handle % max_qp], cqe->qp & 0xFFFF) and uses the QPN
// only as ibqp.qp_num, and rdma-core's provider rings doorbells with the
// handle. So the device makes QPNs of 24 bits: the handle in the low bits
// (the handle table stays the index: a QPN finds its QP by its low bits and
// must then equal that QP's QPN), and random high bits from a per-device
// source seeded from crypto/rand. The GSI QP is QPN 1, as the wire says.

// The same scheme serves every model whose driver keys its tables by a
// handle apart from the QPN (mlx5's QPN is the device's to choose too).

// QPNs makes the QP numbers of one device.
type QPNs struct {
	sequential bool // QPN == handle (for recording and replaying)
	rng        *mrand.ChaCha8
}

// NewQPNs makes QP numbers with random high bits, seeded from crypto/rand;
// sequential: every QPN is its handle.
func NewQPNs(sequential bool) QPNs {
	var seed [32]byte
	rand.Read(seed[:]) // never fails (crypto/rand panics rather)
	return QPNs{sequential: sequential, rng: mrand.NewChaCha8(seed)}
}

// HandleBits is how many low bits of a QPN hold the handle, for a QP table
// of limit handles (at most 1<<16).
func HandleBits(limit uint32) uint { return uint(bits.Len32(limit - 1)) }

// QPN is the QPN of the QP with handle h, the table's handles taking w low
// bits (the caller serializes calls: the device lock).
func (q *QPNs) QPN(h uint32, w uint) uint32 {
	if h == 1 || q.sequential {
		return h
	}
	hiMask := uint32(1)<<(24-w) - 1
	// Never 0: a QPN is never its handle, so the handle is never a guess
	// that works (the table holds at most 2^16 QPs: hiMask >= 255).
	hi := 1 + uint32(q.rng.Uint64()%uint64(hiMask))
	if hi == hiMask && h == uint32(1)<<w-1 {
		hi-- // 0xFFFFFF is the multicast QPN
	}
	return hi<<w | h
}

// Handle is the handle a QPN names (its w low bits); the QP found by it
// must have that whole QPN.
func Handle(qpn uint32, w uint) uint32 { return qpn & (uint32(1)<<w - 1) }
