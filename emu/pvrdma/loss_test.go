package pvrdma_test

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// lossy is a link decorator that loses frames at random (seeded, so a run
// is replayable): requests, responses and ACKs alike. Periodic loss would
// not do: a go-back-N retransmission of a multiple of the period loses the
// same packet every time, and exhausting the retry count is then right.
func lossy(percent int, seed uint64, dropped *atomic.Int64) fabric.Decorator {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, seed))
	return func(next fabric.Link) fabric.Link {
		return fabric.LinkFunc(func(from *fabric.Port, frame []byte) bool {
			mu.Lock()
			lose := rng.IntN(100) < percent
			mu.Unlock()
			if lose {
				dropped.Add(1)
				fabric.Release(frame)
				return true // lost on the wire
			}
			return next.Send(from, frame)
		})
	}
}

// TestRCRecoversFromLoss runs every RC operation over a link that loses
// frames: go-back-N retransmission, PSN sequence NAKs, duplicate ACKs, READ
// response replay and atomic replay (an atomic whose ACK was lost must not
// execute twice) all have to work for the data and completions to come out
// right.
func TestRCRecoversFromLoss(t *testing.T) {
	checkGoroutines(t)
	var dropped atomic.Int64
	sw := fabric.NewSwitch(lossy(10, 1, &dropped))
	a, b := newHost(t, sw, 1), newHost(t, sw, 2)
	const n = 64 << 10
	bufA, lkA, _ := a.mr(t, n, allAccess)
	bufB, lkB, rkB := b.mr(t, n, allAccess)
	o := defaultRC()
	o.timeout = 14 // 67 ms: seven timeouts in a row (470 ms) without progress are needed to fail, more than a loaded machine stalls a goroutine
	qa, qb := pairRC(t, a, b, o, o)
	for round := 0; round < 5; round++ {
		fill(a.RAM.Mem[bufA:bufA+n], byte(round))
		clear(b.RAM.Mem[bufB : bufB+n])
		qb.PostRecv(uverbs.RecvWQE{WRID: 1, SGE: []uverbs.SGE{{Addr: bufB, Length: n, LKey: lkB}}})
		qa.PostSend(send(uverbs.OpSend, 2, 0, uverbs.SGE{Addr: bufA, Length: 20000, LKey: lkA}))
		if e := poll(t, a.cq, a, b); e.Status != 0 {
			t.Fatalf("round %d SEND: %+v", round, e)
		}
		if e := poll(t, b.cq, a, b); e.Status != 0 || e.ByteLen != 20000 {
			t.Fatalf("round %d RECV: %+v", round, e)
		}
		if !bytes.Equal(a.RAM.Mem[bufA:bufA+20000], b.RAM.Mem[bufB:bufB+20000]) {
			t.Fatalf("round %d: SEND data differs", round)
		}
		w := send(uverbs.OpRDMAWrite, 3, 0, uverbs.SGE{Addr: bufA, Length: n, LKey: lkA})
		w.SetRDMA(bufB, rkB)
		qa.PostSend(w)
		if e := poll(t, a.cq, a, b); e.Status != 0 {
			t.Fatalf("round %d WRITE: %+v", round, e)
		}
		fill(b.RAM.Mem[bufB:bufB+n], byte(100+round))
		r := send(uverbs.OpRDMARead, 4, 0, uverbs.SGE{Addr: bufA, Length: n, LKey: lkA})
		r.SetRDMA(bufB, rkB)
		qa.PostSend(r)
		if e := poll(t, a.cq, a, b); e.Status != 0 {
			t.Fatalf("round %d READ: %+v", round, e)
		}
		if !bytes.Equal(a.RAM.Mem[bufA:bufA+n], b.RAM.Mem[bufB:bufB+n]) {
			t.Fatalf("round %d: READ data differs", round)
		}
	}
	// 40 fetch-and-adds of 1, each completing before the next is posted: the
	// counter ends at exactly 40 however many requests or ACKs were lost.
	counter := bufB + n - 8
	binary.LittleEndian.PutUint64(b.RAM.Mem[counter:], 0)
	for i := 0; i < 40; i++ {
		w := send(uverbs.OpAtomicFetchAdd, uint64(i), 0, uverbs.SGE{Addr: bufA, Length: 8, LKey: lkA})
		w.SetAtomic(counter, 1, 0, rkB)
		qa.PostSend(w)
		if e := poll(t, a.cq, a, b); e.Status != 0 {
			t.Fatalf("FETCH_ADD %d: %+v", i, e)
		}
		if got := binary.LittleEndian.Uint64(a.RAM.Mem[bufA:]); got != uint64(i) {
			t.Fatalf("FETCH_ADD %d returned %d", i, got)
		}
	}
	if got := binary.LittleEndian.Uint64(b.RAM.Mem[counter:]); got != 40 {
		t.Fatalf("counter %d after 40 fetch-and-adds: an atomic executed twice or not at all", got)
	}
	if dropped.Load() < 20 {
		t.Fatalf("only %d frames lost: the test did not exercise recovery", dropped.Load())
	}
	t.Logf("%d frames lost and recovered", dropped.Load())
}

// TestRemoteOperationalError: the responder's receive WQE names memory of
// another PD; its receive completes with LOC_QP_OP_ERR, it NAKs with a
// remote operational error and the requester completes REM_OP_ERR.
func TestRemoteOperationalError(t *testing.T) {
	checkGoroutines(t)
	sw := fabric.NewSwitch()
	a, b := newHost(t, sw, 1), newHost(t, sw, 2)
	src, lkA, _ := a.mr(t, 4096, allAccess)
	otherPD, err := b.CreatePD(0)
	if err != nil {
		t.Fatal(err)
	}
	pages, dir := b.Buffer(1)
	mr, err := b.CreateMR(abi.CmdCreateMR{Start: pages[0], Length: 4096, PdirDMA: dir, PDHandle: otherPD,
		AccessFlags: abi.AccessLocalWrite, NChunks: 1})
	if err != nil {
		t.Fatal(err)
	}
	foreign := mr.LKey
	qa, qb := pairRC(t, a, b, defaultRC(), defaultRC())
	qb.PostRecv(uverbs.RecvWQE{WRID: 1, SGE: []uverbs.SGE{{Addr: pages[0], Length: 100, LKey: foreign}}})
	qa.PostSend(send(uverbs.OpSend, 2, 0, uverbs.SGE{Addr: src, Length: 10, LKey: lkA}))
	if e := poll(t, a.cq, a, b); e.Status != uverbs.WCRemOpErr {
		t.Fatalf("requester %+v, want REM_OP_ERR", e)
	}
	if e := poll(t, b.cq, a, b); e.Status != uverbs.WCLocQPOpErr {
		t.Fatalf("responder %+v, want LOC_QP_OP_ERR", e)
	}
}
