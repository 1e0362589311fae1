package hca

import "testing"

// TestQPNs: a QPN carries its handle in the low bits and random, non-zero
// high bits within 24 bits, never the multicast QPN; the GSI QP is QPN 1;
// sequential QPNs are their handles.
func TestQPNs(t *testing.T) {
	for _, limit := range []uint32{2, 1024, 1 << 16} {
		w := HandleBits(limit)
		q := NewQPNs(false)
		for h := uint32(2); h < min(limit, 4096); h++ {
			qpn := q.QPN(h, w)
			if Handle(qpn, w) != h || qpn>>w == 0 || qpn >= 1<<24 || qpn == 0xFFFFFF {
				t.Fatalf("limit %d: handle %d got QPN %#x", limit, h, qpn)
			}
		}
		if q.QPN(1, w) != 1 {
			t.Errorf("limit %d: the GSI QP is not QPN 1", limit)
		}
		// The last handle with the top random value would be 0xFFFFFF.
		last := uint32(1)<<w - 1
		for range 2000 {
			if q.QPN(last, w) == 0xFFFFFF {
				t.Fatalf("limit %d: QPN 0xFFFFFF handed out", limit)
			}
		}
	}
	seq := NewQPNs(true)
	if got := seq.QPN(77, HandleBits(1024)); got != 77 {
		t.Errorf("sequential QPN of handle 77 = %d", got)
	}
}
