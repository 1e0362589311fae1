package rc

import "testing"

// TestResponseQueueBounded: while a long READ stream is queued, a peer that
// floods duplicate requests cannot grow the QP's response queue: ACKs
// coalesce, and other responses stop at maxQueuedResponses.
func TestResponseQueueBounded(t *testing.T) {
	qp := &QP{}
	qp.out = []respItem{{kind: respRead, res: resource{first: 0, last: 1 << 20}}}
	for i := uint32(0); i < 10000; i++ {
		qp.respond(respItem{kind: respAck, psn: i})
	}
	if n := len(qp.out); n != 2 || qp.out[1].psn != 9999 {
		t.Fatalf("after 10000 ACKs: %d queued, last PSN %d", n, qp.out[n-1].psn)
	}
	for i := 0; i < 10000; i++ {
		qp.respond(respItem{kind: respAtomic})
		qp.respond(respItem{kind: respAck})
	}
	if n := len(qp.out); n > maxQueuedResponses {
		t.Fatalf("%d responses queued, bound %d", n, maxQueuedResponses)
	}
}
