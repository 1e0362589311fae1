package verbstest

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/transport"
)

// RunCore runs the core-behaviour tests against the model whose hosts
// newHost makes.
func RunCore(t *testing.T, newHost NewHost) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, NewHost)
	}{
		{"RCOperations", testRCOperations},
		{"RCRecoversFromLoss", testRCRecoversFromLoss},
		{"RemoteOperationalError", testRemoteOperationalError},
		{"StaleRKeyAfterReuse", testStaleRKeyAfterReuse},
		{"MRKeyGenerations", testMRKeyGenerations},
		{"DeregMidWrite", testDeregMidWrite},
		{"DeregMidSend", testDeregMidSend},
		{"DeregSourceMidRetransmission", testDeregSourceMidRetransmission},
		{"DeregReadDestination", testDeregReadDestination},
		{"DuplicateReadAfterReuse", testDuplicateReadAfterReuse},
		{"ReplayedReadAfterReuse", testReplayedReadAfterReuse},
		{"FastRegKeyChange", testFastRegKeyChange},
		{"IsolationHostilePeer", testIsolationHostilePeer},
		{"DirectEquivalent", testDirectEquivalent},
		{"DirectGating", testDirectGating},
		{"LentPayloadRevoked", testLentPayloadRevoked},
		{"SenderTakesBatches", testSenderTakesBatches},
		{"DirectAcksCoalesced", testDirectAcksCoalesced},
		{"DirectForeignPeer", testDirectForeignPeer},
		{"RCPeerSeeds", testRCPeerSeeds},
	} {
		t.Run(tc.name, func(t *testing.T) {
			CheckGoroutines(t)
			tc.fn(t, newHost)
		})
	}
}

// CheckGoroutines fails the test if it leaves goroutines behind.
func CheckGoroutines(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(time.Minute)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<16)
			t.Errorf("goroutine leak: %d before, %d after\n%s", before, n, buf[:runtime.Stack(buf, true)])
		}
	})
}

// Poll waits (bounded) for the next completion of h, letting every host's
// device run.
func Poll(t *testing.T, h Host, hosts ...Host) WC {
	t.Helper()
	// The bound only turns a lost completion into a failure: a large
	// transfer under the race detector on a loaded machine takes seconds.
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		for _, o := range hosts {
			o.Sync()
		}
		if wc, ok := h.Poll(); ok {
			return wc
		}
		time.Sleep(200 * time.Microsecond)
	}
	t.Fatal("no completion")
	return WC{}
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) + seed
	}
}

// pair connects a fresh RC QP of a with one of b.
func pair(a, b Host, o RCOpts) (QP, QP) {
	qa, qb := a.CreateRCQP(64), b.CreateRCQP(64)
	a.Connect(qa, b, qb, o)
	b.Connect(qb, a, qa, o)
	return qa, qb
}

func must(t *testing.T, what string, wc WC, status transport.Status) {
	t.Helper()
	if wc.Status != status {
		t.Fatalf("%s: %+v, want status %d", what, wc, status)
	}
}

// testRCOperations: every RC operation between two HCAs moves the right
// bytes and completes with the right opcode and length, for sizes around
// the path MTU and across pages.
func testRCOperations(t *testing.T, newHost NewHost) {
	sw := NewNet()
	a, b := newHost(t, sw, 1, HostOpts{}), newHost(t, sw, 2, HostOpts{})
	const n = 20000
	bufA, bufB := a.Alloc(n), b.Alloc(n)
	lkA, _ := a.RegMR(bufA, n, All)
	lkB, rkB := b.RegMR(bufB, n, All)
	qa, qb := pair(a, b, DefaultRC())
	for _, size := range []int{0, 1, 1024, 1025, 4096, 12345, n} {
		fill(a.Mem(bufA, n), byte(size))
		clear(b.Mem(bufB, n))
		qb.PostRecv(RecvWR{ID: 1, SGEs: []mr.SGE{{Addr: bufB, Length: n, LKey: lkB}}})
		qa.PostSend(SendWR{ID: 2, Opcode: transport.OpSendImm, Imm: 77, SGEs: []mr.SGE{{Addr: bufA, Length: uint32(size), LKey: lkA}}})
		if wc := Poll(t, a, a, b); wc.Status != transport.StatusSuccess || wc.Opcode != transport.WCSend {
			t.Fatalf("SEND %d: %+v", size, wc)
		}
		if wc := Poll(t, b, a, b); wc.Status != transport.StatusSuccess || !wc.Recv || wc.ByteLen != uint32(size) {
			t.Fatalf("RECV %d: %+v", size, wc)
		}
		if !bytes.Equal(a.Mem(bufA, size), b.Mem(bufB, size)) {
			t.Fatalf("SEND %d: data differs", size)
		}
		fill(a.Mem(bufA, n), byte(size+1))
		qa.PostSend(SendWR{ID: 3, Opcode: transport.OpWrite, RemoteAddr: bufB, RKey: rkB, SGEs: []mr.SGE{{Addr: bufA, Length: uint32(size), LKey: lkA}}})
		if wc := Poll(t, a, a, b); wc.Status != transport.StatusSuccess || wc.Opcode != transport.WCWrite {
			t.Fatalf("WRITE %d: %+v", size, wc)
		}
		if !bytes.Equal(a.Mem(bufA, size), b.Mem(bufB, size)) {
			t.Fatalf("WRITE %d: data differs", size)
		}
		fill(b.Mem(bufB, n), byte(size+2))
		qa.PostSend(SendWR{ID: 4, Opcode: transport.OpRead, RemoteAddr: bufB, RKey: rkB, SGEs: []mr.SGE{{Addr: bufA, Length: uint32(size), LKey: lkA}}})
		if wc := Poll(t, a, a, b); wc.Status != transport.StatusSuccess || wc.Opcode != transport.WCRead || wc.ByteLen != uint32(size) {
			t.Fatalf("READ %d: %+v", size, wc)
		}
		if !bytes.Equal(a.Mem(bufA, size), b.Mem(bufB, size)) {
			t.Fatalf("READ %d: data differs", size)
		}
	}
	word := bufB + n - 8
	binary.LittleEndian.PutUint64(b.Mem(word, 8), 5)
	qa.PostSend(SendWR{ID: 5, Opcode: transport.OpCompSwap, RemoteAddr: word, RKey: rkB, CompareAdd: 5, Swap: 9, SGEs: []mr.SGE{{Addr: bufA, Length: 8, LKey: lkA}}})
	if wc := Poll(t, a, a, b); wc.Status != transport.StatusSuccess || wc.Opcode != transport.WCCompSwap {
		t.Fatalf("CMP_SWAP: %+v", wc)
	}
	if got, orig := binary.LittleEndian.Uint64(b.Mem(word, 8)), binary.LittleEndian.Uint64(a.Mem(bufA, 8)); got != 9 || orig != 5 {
		t.Fatalf("CMP_SWAP: memory %d, returned %d; want 9, 5", got, orig)
	}
}

// lossy is a hook that loses packets at random (seeded, so a run is
// replayable): requests, responses and ACKs alike. Periodic loss would
// not do: a go-back-N retransmission of a multiple of the period loses the
// same packet every time, and exhausting the retry count is then right.
func lossy(percent int, seed uint64, dropped *atomic.Int64) hook {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, seed))
	return func(p packet) bool {
		mu.Lock()
		lose := rng.IntN(100) < percent
		mu.Unlock()
		if lose {
			dropped.Add(1)
			fabric.Release(p.buf)
			return true // lost on the wire
		}
		return p.send(p.buf)
	}
}

// testRCRecoversFromLoss runs every RC operation over a link that loses
// frames: go-back-N retransmission, PSN sequence NAKs, duplicate ACKs, READ
// response replay and atomic replay (an atomic whose ACK was lost must not
// execute twice) all have to work for the data and completions to come out
// right.
func testRCRecoversFromLoss(t *testing.T, newHost NewHost) {
	var dropped atomic.Int64
	sw := NewNet(lossy(10, 1, &dropped))
	a, b := newHost(t, sw, 1, HostOpts{}), newHost(t, sw, 2, HostOpts{})
	const n = 64 << 10
	bufA, bufB := a.Alloc(n), b.Alloc(n)
	lkA, _ := a.RegMR(bufA, n, All)
	lkB, rkB := b.RegMR(bufB, n, All)
	o := DefaultRC()
	o.Timeout = 14 // 67 ms: seven timeouts in a row (470 ms) without progress are needed to fail, more than a loaded machine stalls a goroutine
	qa, qb := pair(a, b, o)
	for round := 0; round < 5; round++ {
		fill(a.Mem(bufA, n), byte(round))
		clear(b.Mem(bufB, n))
		qb.PostRecv(RecvWR{ID: 1, SGEs: []mr.SGE{{Addr: bufB, Length: n, LKey: lkB}}})
		qa.PostSend(SendWR{ID: 2, Opcode: transport.OpSend, SGEs: []mr.SGE{{Addr: bufA, Length: 20000, LKey: lkA}}})
		must(t, "SEND", Poll(t, a, a, b), transport.StatusSuccess)
		if wc := Poll(t, b, a, b); wc.Status != transport.StatusSuccess || wc.ByteLen != 20000 {
			t.Fatalf("round %d RECV: %+v", round, wc)
		}
		if !bytes.Equal(a.Mem(bufA, 20000), b.Mem(bufB, 20000)) {
			t.Fatalf("round %d: SEND data differs", round)
		}
		qa.PostSend(SendWR{ID: 3, Opcode: transport.OpWrite, RemoteAddr: bufB, RKey: rkB, SGEs: []mr.SGE{{Addr: bufA, Length: n, LKey: lkA}}})
		must(t, "WRITE", Poll(t, a, a, b), transport.StatusSuccess)
		fill(b.Mem(bufB, n), byte(100+round))
		qa.PostSend(SendWR{ID: 4, Opcode: transport.OpRead, RemoteAddr: bufB, RKey: rkB, SGEs: []mr.SGE{{Addr: bufA, Length: n, LKey: lkA}}})
		must(t, "READ", Poll(t, a, a, b), transport.StatusSuccess)
		if !bytes.Equal(a.Mem(bufA, n), b.Mem(bufB, n)) {
			t.Fatalf("round %d: READ data differs", round)
		}
	}
	// 40 fetch-and-adds of 1, each completing before the next is posted: the
	// counter ends at exactly 40 however many requests or ACKs were lost.
	counter := bufB + n - 8
	binary.LittleEndian.PutUint64(b.Mem(counter, 8), 0)
	for i := 0; i < 40; i++ {
		qa.PostSend(SendWR{ID: uint64(i), Opcode: transport.OpFetchAdd, RemoteAddr: counter, RKey: rkB, CompareAdd: 1, SGEs: []mr.SGE{{Addr: bufA, Length: 8, LKey: lkA}}})
		must(t, "FETCH_ADD", Poll(t, a, a, b), transport.StatusSuccess)
		if got := binary.LittleEndian.Uint64(a.Mem(bufA, 8)); got != uint64(i) {
			t.Fatalf("FETCH_ADD %d returned %d", i, got)
		}
	}
	if got := binary.LittleEndian.Uint64(b.Mem(counter, 8)); got != 40 {
		t.Fatalf("counter %d after 40 fetch-and-adds: an atomic executed twice or not at all", got)
	}
	if dropped.Load() < 20 {
		t.Fatalf("only %d packets lost: the test did not exercise recovery", dropped.Load())
	}
	t.Logf("%d packets lost and recovered", dropped.Load())
}

// testRemoteOperationalError: the responder's receive WR names memory of
// another PD; its receive completes with LOC_QP_OP_ERR, it NAKs with a
// remote operational error and the requester completes REM_OP_ERR.
func testRemoteOperationalError(t *testing.T, newHost NewHost) {
	sw := NewNet()
	a, b := newHost(t, sw, 1, HostOpts{}), newHost(t, sw, 2, HostOpts{})
	src := a.Alloc(4096)
	lkA, _ := a.RegMR(src, 4096, All)
	dst := b.Alloc(4096)
	foreign, _ := b.RegMRAt(b.NewPD(), 0, dst, 4096, mr.LocalWrite)
	qa, qb := pair(a, b, DefaultRC())
	qb.PostRecv(RecvWR{ID: 1, SGEs: []mr.SGE{{Addr: dst, Length: 100, LKey: foreign}}})
	qa.PostSend(SendWR{ID: 2, Opcode: transport.OpSend, SGEs: []mr.SGE{{Addr: src, Length: 10, LKey: lkA}}})
	must(t, "requester", Poll(t, a, a, b), transport.StatusRemOpErr)
	must(t, "responder", Poll(t, b, a, b), transport.StatusLocQPOpErr)
}

// testStaleRKeyAfterReuse: a peer keeps the R_Key of a region its owner
// deregistered; the owner registers a new region, which gets the same
// handle, in the same PD with remote write. A WRITE with the old R_Key is a
// remote access error, and the new region is untouched.
func testStaleRKeyAfterReuse(t *testing.T, newHost NewHost) {
	sw := NewNet()
	a, b := newHost(t, sw, 1, HostOpts{}), newHost(t, sw, 2, HostOpts{Regions: 1})
	src := a.Alloc(4096)
	lkA, _ := a.RegMR(src, 4096, All)
	fill(a.Mem(src, 4096), 5)
	qa, _ := pair(a, b, DefaultRC())
	dst1 := b.Alloc(4096)
	lk1, rk1 := b.RegMR(dst1, 4096, All)
	qa.PostSend(SendWR{ID: 1, Opcode: transport.OpWrite, RemoteAddr: dst1, RKey: rk1, SGEs: []mr.SGE{{Addr: src, Length: 100, LKey: lkA}}})
	must(t, "WRITE", Poll(t, a, a, b), transport.StatusSuccess)
	dereg(t, b, lk1)
	dst2 := b.Alloc(4096)
	_, rk2 := b.RegMR(dst2, 4096, All)
	if mr.Handle(rk2) != mr.Handle(rk1) {
		t.Fatalf("new region got handle %d, want %d again", mr.Handle(rk2), mr.Handle(rk1))
	}
	if rk2 == rk1 {
		t.Errorf("new region got the old R_Key %#x", rk1)
	}
	before := bytes.Clone(b.Mem(dst2, 4096))
	qa.PostSend(SendWR{ID: 2, Opcode: transport.OpWrite, RemoteAddr: dst2, RKey: rk1, SGEs: []mr.SGE{{Addr: src, Length: 100, LKey: lkA}}})
	must(t, "WRITE with the old R_Key", Poll(t, a, a, b), transport.StatusRemAccess)
	if !bytes.Equal(b.Mem(dst2, 4096), before) {
		t.Fatal("a WRITE with the old R_Key reached the region that reused its handle")
	}
}
