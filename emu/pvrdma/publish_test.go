package pvrdma_test

import (
	"sync"
	"testing"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/pvrdma"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// The device stores a CQ's prod_tail and a send queue's cons_head once per
// batch, not per entry. What the guest must still see: every CQE the
// device wrote by the time its completion interrupt arrives, and the
// indexes of every entry taken or written once the work is done, on the
// RC path (the transport publishes) and the UD path (the device's lock
// hold ends).
func TestRingIndexesPublished(t *testing.T) {
	checkGoroutines(t)
	sw := fabric.NewSwitch()
	var (
		mu      sync.Mutex
		a       *host
		stale   int // CQ interrupts that found no CQE past the guest's cons_head
		checked int
	)
	h := newHostConfig(t, sw, 1, 64<<20, func(cfg *pvrdma.Config) {
		raise := cfg.MSIX
		cfg.MSIX = func(v int) {
			if v == abi.IntrVectorCQ {
				// What the guest's handler would find in the CQ now.
				mu.Lock()
				if a != nil {
					st := a.cq.Pages[0]
					if a.Get32(st+uverbs.RxProdTail) == a.Get32(st+uverbs.RxConsHead) {
						stale++
					}
					checked++
				}
				mu.Unlock()
			}
			raise(v)
		}
	})
	mu.Lock()
	a = h
	mu.Unlock()
	b := newHost(t, sw, 2)
	src, lkA, _ := a.mr(t, 4096, allAccess)
	dst, _, rkB := b.mr(t, 4096, allAccess)
	qa, _ := pairRC(t, a, b, defaultRC(), defaultRC())

	// RC: sixteen WRITEs behind one doorbell, the CQ armed before each.
	const n = 16
	for round := 0; round < 2; round++ {
		a.cq.Arm(false)
		for i := 0; i < n; i++ {
			w := send(uverbs.OpRDMAWrite, uint64(i), 0, uverbs.SGE{Addr: src, Length: 64, LKey: lkA})
			w.SetRDMA(dst, rkB)
			qa.WriteSend(w)
		}
		qa.RingSend()
		for i := 0; i < n; i++ {
			if e := poll(t, a.cq, a, b); e.Status != uverbs.WCSuccess || e.WRID != uint64(i) {
				t.Fatalf("round %d CQE %d: %+v", round, i, e)
			}
		}
		want := uint32(n * (round + 1))
		if got := a.Get32(qa.Pages[0] + uverbs.TxConsHead); got != want {
			t.Errorf("round %d: SQ cons_head %d, want %d: the guest does not see its send queue emptied", round, got, want)
		}
		if got := a.Get32(a.cq.Pages[0] + uverbs.RxProdTail); got != want {
			t.Errorf("round %d: CQ prod_tail %d, want %d", round, got, want)
		}
	}

	// UD: the device takes and completes the WQEs under one hold.
	cq, err := a.CreateCQ(0, 16)
	if err != nil {
		t.Fatal(err)
	}
	ud := a.readyUD(t, cq)
	for i := 0; i < 3; i++ {
		ud.WriteSend(udSendTo9(uint64(i), uverbs.SGE{Addr: src, Length: 10, LKey: lkA}))
	}
	ud.RingSend()
	a.dev.Sync()
	if got := a.Get32(ud.Pages[0] + uverbs.TxConsHead); got != 3 {
		t.Errorf("UD SQ cons_head %d, want 3", got)
	}
	if got := a.Get32(cq.Pages[0] + uverbs.RxProdTail); got != 3 {
		t.Errorf("UD CQ prod_tail %d, want 3", got)
	}

	mu.Lock()
	defer mu.Unlock()
	if checked == 0 {
		t.Fatal("no CQ interrupt: the test is void")
	}
	if stale > 0 {
		t.Errorf("%d of %d CQ interrupts came before their CQE's prod_tail", stale, checked)
	}
}
