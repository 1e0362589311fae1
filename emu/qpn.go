package emu

import (
	"crypto/rand"
	"math/bits"
	mrand "math/rand/v2"
)

// QP numbers. A QPN is what a peer names a QP by on the wire, so a small
// sequential one is a guess away for a hostile peer. From VERSION 20
// (PVRDMA_QPHANDLE_VERSION) CREATE_QP's response carries the QPN and the QP
// handle apart: vmw_pvrdma indexes its QP table, async events and CQEs by
// the handle (qp_tbl[handle % max_qp], cqe->qp & 0xFFFF) and uses the QPN
// only as ibqp.qp_num, and rdma-core's provider rings doorbells with the
// handle. So the device makes QPNs of 24 bits: the handle in the low bits
// (the handle table stays the index: a QPN finds its QP by its low bits and
// must then equal that QP's QPN), and random high bits from a per-device
// source seeded from crypto/rand. The GSI QP is QPN 1, as the wire says.

// qpnSource makes the random high bits of QP numbers.
type qpnSource struct {
	sequential bool // QPN == handle (Config.SequentialQPNs)
	rng        *mrand.ChaCha8
}

func newQPNSource(sequential bool) qpnSource {
	var seed [32]byte
	rand.Read(seed[:]) // never fails (crypto/rand panics rather)
	return qpnSource{sequential: sequential, rng: mrand.NewChaCha8(seed)}
}

// qpnHandleBits is how many low bits of a QPN hold the handle: enough for
// every handle of the QP table.
func (r *resources) qpnHandleBits() uint { return uint(bits.Len32(r.qp.limit - 1)) }

// newQPN is the QPN of the QP with handle h (called under the device lock).
func (d *Device) newQPN(h uint32) uint32 {
	if h == 1 || d.qpns.sequential {
		return h
	}
	w := d.res.qpnHandleBits()
	hiMask := uint32(1)<<(24-w) - 1
	// Never 0: a QPN is never its handle, so the handle is never a guess
	// that works (the table holds at most 2^16 QPs: hiMask >= 255).
	hi := 1 + uint32(d.qpns.rng.Uint64()%uint64(hiMask))
	if hi == hiMask && h == uint32(1)<<w-1 {
		hi-- // 0xFFFFFF is the multicast QPN
	}
	return hi<<w | h
}

// qpByQPN finds the QP a packet names by its QPN (nil: none).
func (d *Device) qpByQPN(qpn uint32) *qp {
	w := d.res.qpnHandleBits()
	qp := d.res.qp.get(qpn & (uint32(1)<<w - 1))
	if qp == nil || qp.qpn != qpn {
		return nil
	}
	return qp
}
