package pvrdma_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// TestPathFollowsGIDTable: a connected QP's packets take the address its
// GID index holds now, not the one it held when the path was last
// resolved: after the GID is bound again to another address, a's WRITE
// leaves from the new address (b, connected to the old one, drops it as
// from outside its connection) and never from the old one (which the switch
// would refuse as spoofed).
func TestPathFollowsGIDTable(t *testing.T) {
	checkGoroutines(t)
	sw := fabric.NewSwitch()
	a, b := newHost(t, sw, 1), newHost(t, sw, 2)
	qa, _ := pairRC(t, a, b, defaultRC(), defaultRC())
	src, lk, _ := a.mr(t, 4096, allAccess)
	dst, _, rk := b.mr(t, 4096, allAccess)
	write := func(id uint64) {
		w := send(uverbs.OpRDMAWrite, id, 0, uverbs.SGE{Addr: src, Length: 64, LKey: lk})
		w.SetRDMA(dst, rk)
		qa.PostSend(w)
	}
	write(1)
	if e := poll(t, a.cq, a, b); e.Status != uverbs.WCSuccess {
		t.Fatalf("CQE %+v", e)
	}
	if err := a.MustCmd(&abi.CmdDestroyBind{Index: 1}, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.BindGID(1, mappedGID(netip.MustParseAddr("10.0.0.77"))); err != nil {
		t.Fatal(err)
	}
	write(2)
	for range 1000 {
		a.dev.Sync()
		b.dev.Sync()
		if b.dev.AddrMismatches() > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if n := b.dev.AddrMismatches(); n == 0 || sw.Spoofed.Load() != 0 {
		t.Fatalf("b dropped %d packets from outside the connection; the switch refused %d as spoofed", n, sw.Spoofed.Load())
	}
}
