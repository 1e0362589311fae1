package pvrdma_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/fault"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// faultyFabric is a switch whose frames pass through a fault plan.
func faultyFabric(t *testing.T, plan string) (*fabric.Switch, *fault.Injector) {
	t.Helper()
	p, err := fault.DecodePlan(strings.NewReader(plan))
	if err != nil {
		t.Fatal(err)
	}
	seed := uint64(1)
	inj, err := fault.NewInjector(p, fault.Options{Seed: &seed})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inj.Close() })
	return fabric.NewSwitch(inj.Decorator()), inj
}

// TestFaultICRCDropped: the receiving HCA drops every frame whose ICRC a
// fault corrupted, as hardware does: a SEND whose every copy arrives with a
// bad ICRC never completes at the responder, and the requester runs out of
// retries (RETRY_EXC_ERR). With only the first copy corrupted, the
// retransmission delivers the message once.
func TestFaultICRCDropped(t *testing.T) {
	checkGoroutines(t)
	for _, tc := range []struct {
		name     string
		times    int
		timeout  uint8
		wantSend uint32
	}{
		// Every copy lost: a short timer (4 ms) runs the retries out fast.
		{"every copy", 0, 10, uverbs.WCRetryExcErr},
		// The first copy lost: the retransmission must be acknowledged
		// before two more timeouts pass, however loaded the machine: 268 ms.
		{"first copy", 1, 16, uverbs.WCSuccess},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// QPNs are allocated from the same start on every HCA: the
			// rule names b's first RC QP by the direction of the frame.
			plan := fmt.Sprintf(`{"rules":[{"name":"bad-icrc","match":{"classes":["send"],"peer":"10.0.0.2"},
				"action":{"kind":"corrupt_icrc"},"schedule":{"times":%d}}]}`, tc.times)
			sw, inj := faultyFabric(t, plan)
			a, b := newHost(t, sw, 1), newHost(t, sw, 2)
			src, lkA, _ := a.mr(t, 4096, allAccess)
			dst, lkB, _ := b.mr(t, 4096, allAccess)
			o := defaultRC()
			o.retryCnt, o.timeout = 2, tc.timeout
			qa, qb := pairRC(t, a, b, o, o)
			fill(a.RAM.Mem[src:src+1000], 7)
			qb.PostRecv(uverbs.RecvWQE{WRID: 1, SGE: []uverbs.SGE{{Addr: dst, Length: 4096, LKey: lkB}}})
			qa.PostSend(send(uverbs.OpSend, 2, 0, uverbs.SGE{Addr: src, Length: 1000, LKey: lkA}))
			if e := poll(t, a.cq, a, b); e.Status != tc.wantSend {
				t.Fatalf("SEND completion %+v, want status %d", e, tc.wantSend)
			}
			fired := inj.Stats().Rules[0].Fired
			if tc.wantSend == uverbs.WCRetryExcErr {
				noCQE(t, b.cq, a, b)
				// The original and retry_cnt retransmissions, all dropped.
				if fired != 3 {
					t.Fatalf("%d frames corrupted, want 3 (1 + retry_cnt 2)", fired)
				}
				return
			}
			if e := poll(t, b.cq, a, b); e.Status != 0 || e.ByteLen != 1000 {
				t.Fatalf("RECV %+v", e)
			}
			if !bytes.Equal(a.RAM.Mem[src:src+1000], b.RAM.Mem[dst:dst+1000]) {
				t.Fatal("data differs")
			}
			noCQE(t, b.cq, a, b)
			if fired != 1 {
				t.Fatalf("%d frames corrupted, want 1", fired)
			}
		})
	}
}

// TestFaultPayloadCorruptionUndetected: a payload corrupted under a valid
// ICRC is accepted by the receiving HCA (silent data corruption): the
// message completes successfully with exactly the byte the rule changed.
func TestFaultPayloadCorruptionUndetected(t *testing.T) {
	checkGoroutines(t)
	sw, _ := faultyFabric(t, `{"rules":[{"match":{"classes":["send"],"peer":"10.0.0.2"},
		"action":{"kind":"corrupt_payload","offset":10,"xor":128},"schedule":{"times":1}}]}`)
	a, b := newHost(t, sw, 1), newHost(t, sw, 2)
	src, lkA, _ := a.mr(t, 4096, allAccess)
	dst, lkB, _ := b.mr(t, 4096, allAccess)
	qa, qb := pairRC(t, a, b, defaultRC(), defaultRC())
	fill(a.RAM.Mem[src:src+1000], 3)
	qb.PostRecv(uverbs.RecvWQE{WRID: 1, SGE: []uverbs.SGE{{Addr: dst, Length: 4096, LKey: lkB}}})
	qa.PostSend(send(uverbs.OpSend, 2, 0, uverbs.SGE{Addr: src, Length: 1000, LKey: lkA}))
	if e := poll(t, a.cq, a, b); e.Status != 0 {
		t.Fatalf("SEND %+v", e)
	}
	if e := poll(t, b.cq, a, b); e.Status != 0 || e.ByteLen != 1000 {
		t.Fatalf("RECV %+v", e)
	}
	want := bytes.Clone(a.RAM.Mem[src : src+1000])
	want[10] ^= 128
	if got := b.RAM.Mem[dst : dst+1000]; !bytes.Equal(got, want) {
		t.Fatalf("received data: byte 10 is %#x (sent %#x), want exactly byte 10 flipped", got[10], a.RAM.Mem[src+10])
	}
}
