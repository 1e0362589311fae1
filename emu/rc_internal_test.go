package emu

import "testing"

// TestResponseQueueBounded: while a long READ stream is queued, a peer that
// floods duplicate requests cannot grow the QP's response queue: ACKs
// coalesce, and other responses stop at maxQueuedResponses.
func TestResponseQueueBounded(t *testing.T) {
	d := &Device{}
	x := &qp{}
	x.rc.out = []respItem{{kind: respRead, res: rdRes{first: 0, last: 1 << 20}}}
	for i := uint32(0); i < 10000; i++ {
		d.rcRespond(x, respItem{kind: respAck, psn: i})
	}
	if n := len(x.rc.out); n != 2 || x.rc.out[1].psn != 9999 {
		t.Fatalf("after 10000 ACKs: %d queued, last PSN %d", n, x.rc.out[n-1].psn)
	}
	for i := 0; i < 10000; i++ {
		d.rcRespond(x, respItem{kind: respAtomic})
		d.rcRespond(x, respItem{kind: respAck})
	}
	if n := len(x.rc.out); n > maxQueuedResponses {
		t.Fatalf("%d responses queued, bound %d", n, maxQueuedResponses)
	}
}
