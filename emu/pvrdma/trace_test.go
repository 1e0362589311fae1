package pvrdma_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/hca"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// traceLog is a Tracer keeping every event.
type traceLog struct {
	mu  sync.Mutex
	evs []hca.TraceEvent
}

func (l *traceLog) Trace(ev *hca.TraceEvent) {
	l.mu.Lock()
	l.evs = append(l.evs, *ev)
	l.mu.Unlock()
}

// story is the events of QP qpn, one short line each, without times.
func (l *traceLog) story(qpn uint32) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, ev := range l.evs {
		if ev.QPN != qpn {
			continue
		}
		line := ev.Event
		if ev.PSN != nil {
			line += fmt.Sprintf(" psn=%d", *ev.PSN)
		}
		for _, s := range []string{ev.Opcode, ev.Syndrome, ev.Status, ev.From, ev.To, ev.Async, ev.Dropped} {
			if s != "" {
				line += " " + s
			}
		}
		if ev.WRID != nil {
			line += fmt.Sprintf(" wr_id=%d", *ev.WRID)
		}
		if ev.Len != 0 {
			line += fmt.Sprintf(" len=%d", ev.Len)
		}
		if ev.ByteLen != 0 {
			line += fmt.Sprintf(" byte_len=%d", ev.ByteLen)
		}
		out = append(out, line)
	}
	return out
}

// TestTrace: a traced SEND of 3000 bytes (three packets at PMTU 1024)
// tells the requester's and the responder's story step by step; an RNR
// NAK shows as its rx and the resend as a retransmit; nothing is heard
// after SetTracer(nil).
func TestTrace(t *testing.T) {
	checkGoroutines(t)
	sw := fabric.NewSwitch()
	a, b := newHost(t, sw, 1), newHost(t, sw, 2)
	var la, lb traceLog
	a.dev.SetTracer(&la)
	b.dev.SetTracer(&lb)
	src, lkA, _ := a.mr(t, 4096, allAccess)
	dst, lkB, _ := b.mr(t, 4096, allAccess)
	qa, qb := pairRC(t, a, b, defaultRC(), defaultRC())
	psn := 0x100 + qa.QPN // connect's send PSN

	qb.PostRecv(uverbs.RecvWQE{WRID: 1, SGE: []uverbs.SGE{{Addr: dst, Length: 4096, LKey: lkB}}})
	qa.PostSend(send(uverbs.OpSend, 2, 0, uverbs.SGE{Addr: src, Length: 3000, LKey: lkA}))
	if e := poll(t, a.cq, a, b); e.Status != 0 {
		t.Fatalf("send: %+v", e)
	}
	poll(t, b.cq, a, b)
	wantA := []string{
		"state RESET INIT", "state INIT RTR", "state RTR RTS",
		"wqe send wr_id=2 len=3000",
		fmt.Sprintf("tx psn=%d RC_SEND_FIRST len=1024", psn),
		fmt.Sprintf("tx psn=%d RC_SEND_MIDDLE len=1024", psn+1),
		fmt.Sprintf("tx psn=%d RC_SEND_LAST len=952", psn+2),
		fmt.Sprintf("rx psn=%d RC_ACKNOWLEDGE ACK(credits invalid)", psn+2),
		"cqe send SUCCESS wr_id=2 byte_len=3000",
	}
	if got := la.story(qa.QPN); strings.Join(got, "\n") != strings.Join(wantA, "\n") {
		t.Errorf("requester's story:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantA, "\n"))
	}
	wantB := []string{
		"state RESET INIT", "state INIT RTR", "state RTR RTS",
		fmt.Sprintf("rx psn=%d RC_SEND_FIRST len=1024", psn),
		fmt.Sprintf("rx psn=%d RC_SEND_MIDDLE len=1024", psn+1),
		fmt.Sprintf("rx psn=%d RC_SEND_LAST len=952", psn+2),
		"cqe recv SUCCESS wr_id=1 byte_len=3000",
		fmt.Sprintf("tx psn=%d RC_ACKNOWLEDGE ACK(credits invalid)", psn+2),
	}
	if got := lb.story(qb.QPN); strings.Join(got, "\n") != strings.Join(wantB, "\n") {
		t.Errorf("responder's story:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantB, "\n"))
	}
	// The ACK's syndrome as the fault log would name it; JSON names.
	b0, err := json.Marshal(la.evs[len(la.evs)-2])
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"device":"hca1"`, `"qpn":`, `"event":"rx"`, `"dir":"rx"`, `"psn":`, `"opcode":"RC_ACKNOWLEDGE"`, `"time":"`} {
		if !strings.Contains(string(b0), field) {
			t.Errorf("%s lacks %s", b0, field)
		}
	}

	// No receive posted: the SEND meets an RNR NAK and is resent (with
	// rnr_retry 7, until the receive is there).
	la.mu.Lock()
	la.evs = nil
	la.mu.Unlock()
	qa.PostSend(send(uverbs.OpSend, 3, 0, uverbs.SGE{Addr: src, Length: 100, LKey: lkA}))
	deadline := time.Now().Add(time.Minute)
	for !slicesContainsPrefix(la.story(qa.QPN), fmt.Sprintf("rx psn=%d RC_ACKNOWLEDGE RNR NAK", psn+3)) {
		if time.Now().After(deadline) {
			t.Fatalf("no RNR NAK traced: %q", la.story(qa.QPN))
		}
		a.dev.Sync()
		b.dev.Sync()
		time.Sleep(time.Millisecond)
	}
	qb.PostRecv(uverbs.RecvWQE{WRID: 4, SGE: []uverbs.SGE{{Addr: dst, Length: 4096, LKey: lkB}}})
	if e := poll(t, a.cq, a, b); e.Status != 0 {
		t.Fatalf("send after RNR: %+v", e)
	}
	story := la.story(qa.QPN)
	if !slicesContainsPrefix(story, fmt.Sprintf("retransmit psn=%d RC_SEND_ONLY", psn+3)) || story[1] != fmt.Sprintf("tx psn=%d RC_SEND_ONLY len=100", psn+3) {
		t.Errorf("RNR story: %q; want the first send as tx, a later one as retransmit", story)
	}

	a.dev.SetTracer(nil)
	n := len(la.story(qa.QPN))
	qb.PostRecv(uverbs.RecvWQE{WRID: 5, SGE: []uverbs.SGE{{Addr: dst, Length: 4096, LKey: lkB}}})
	qa.PostSend(send(uverbs.OpSend, 6, 0, uverbs.SGE{Addr: src, Length: 10, LKey: lkA}))
	poll(t, a.cq, a, b)
	if got := len(la.story(qa.QPN)); got != n {
		t.Errorf("%d events after SetTracer(nil)", got-n)
	}
}

func slicesContainsPrefix(lines []string, prefix string) bool {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}
