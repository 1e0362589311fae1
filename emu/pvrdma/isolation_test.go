package pvrdma_test

import (
	"net/netip"
	"testing"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// mappedGID is the RoCE v2 GID of an IPv4 address.
func mappedGID(ip netip.Addr) [16]byte {
	return netip.AddrFrom16(ip.As16()).As16()
}

// TestGIDClash: a port cannot bind an address (GID) another port on the
// switch owns: CREATE_BIND fails with ERR = EADDRINUSE, which vmw_pvrdma
// reports as "could not create binding" (the GID stays out of its table),
// and the owner keeps the address and its traffic. Two guests with the same
// MAC derive the same link-local GID: the second one's bind fails the same
// way. Once the owner's device is reset or closed (its port detached), the
// address is free: another guest, or the restarted one, binds it.
func TestGIDClash(t *testing.T) {
	const eAddrInUse = 98
	aIP := netip.MustParseAddr("10.0.0.1")
	aLinkLocal := [16]byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x50, 0x56, 0xff, 0xfe, 0, 0, 1}
	tests := []struct {
		name    string
		release func(t *testing.T, a *host) // what a does first (nil: nothing)
		gid     [16]byte
		wantErr uint32
		// reprobe: a's device is probed again and binds its old address,
		// c's now: refused.
		reprobe bool
	}{
		{"a's IPv4 GID", nil, mappedGID(aIP), eAddrInUse, false},
		{"a's IPv4 GID (plain IPv6 form of the address is another GID)", nil, netip.MustParseAddr("::a00:1").As16(), 0, false},
		{"a's link-local GID (same MAC)", nil, aLinkLocal, eAddrInUse, false},
		{"an address nobody owns", nil, mappedGID(netip.MustParseAddr("10.0.0.9")), 0, false},
		{"a's IPv4 GID after a's device reset", func(t *testing.T, a *host) { a.dev.Reset() }, mappedGID(aIP), 0, true},
		{"a's IPv4 GID after a's device closed", func(t *testing.T, a *host) { a.dev.Close() }, mappedGID(aIP), 0, false},
		{"a's IPv4 GID after a's DESTROY_BIND", func(t *testing.T, a *host) {
			if err := a.MustCmd(&abi.CmdDestroyBind{Index: 1}, nil); err != nil {
				t.Fatal(err)
			}
		}, mappedGID(aIP), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkGoroutines(t)
			sw := fabric.NewSwitch()
			a, c := newHostRAM(t, sw, 1, 1<<20), newHostRAM(t, sw, 3, 1<<20)
			if tt.release != nil {
				tt.release(t, a)
			}
			errReg, hdr := c.Cmd(&abi.CmdCreateBind{Index: 2, NewGID: tt.gid, GIDType: abi.GIDTypeFlagRoCEv2}, nil)
			if errReg != tt.wantErr || uint32(hdr.Err) != tt.wantErr {
				t.Fatalf("CREATE_BIND: ERR %d, hdr.err %d; want %d", errReg, hdr.Err, tt.wantErr)
			}
			gidAddr := netip.AddrFrom16(tt.gid).Unmap()
			wantOwner := "hca3"
			if tt.wantErr != 0 {
				wantOwner = "hca1"
			}
			if owner, _ := sw.Owner(gidAddr); owner != wantOwner {
				t.Errorf("%s owned by %q, want %q", gidAddr, owner, wantOwner)
			}
			// c keeps its own addresses whatever the answer.
			if owner, _ := sw.Owner(netip.MustParseAddr("10.0.0.3")); owner != "hca3" {
				t.Errorf("c's own address owned by %q", owner)
			}
			if tt.wantErr != 0 {
				// The owner's traffic is its own: a still talks to c.
				src, lk, _ := a.mr(t, 4096, allAccess)
				dst, lkC, _ := c.mr(t, 4096, allAccess)
				qa, qc := pairRC(t, a, c, defaultRC(), defaultRC())
				qc.PostRecv(uverbs.RecvWQE{WRID: 1, SGE: []uverbs.SGE{{Addr: dst, Length: 100, LKey: lkC}}})
				qa.PostSend(send(uverbs.OpSend, 2, 0, uverbs.SGE{Addr: src, Length: 10, LKey: lk}))
				if e := poll(t, c.cq, a, c); e.Status != uverbs.WCSuccess {
					t.Fatalf("a -> c after the refused bind: %+v", e)
				}
				return
			}
			if tt.reprobe {
				if err := a.Probe(); err != nil {
					t.Fatal(err)
				}
				if errReg, _ := a.Cmd(&abi.CmdCreateBind{Index: 1, NewGID: tt.gid, GIDType: abi.GIDTypeFlagRoCEv2}, nil); errReg != eAddrInUse {
					t.Fatalf("a's bind of its old address, now c's: ERR %d", errReg)
				}
			}
		})
	}
}

// TestGIDRebindAfterRestart: a guest whose device was reset (or whose
// QEMU reconnected: a new device on the same switch after Close) binds
// its addresses again.
func TestGIDRebindAfterRestart(t *testing.T) {
	tests := []struct {
		name    string
		restart func(t *testing.T, sw *fabric.Switch, a *host) *host
	}{
		{"device reset, probed again", func(t *testing.T, sw *fabric.Switch, a *host) *host {
			a.dev.Reset()
			if err := a.Probe(); err != nil {
				t.Fatal(err)
			}
			return a
		}},
		{"CTL=RESET, probed again", func(t *testing.T, sw *fabric.Switch, a *host) *host {
			a.WriteReg(abi.RegCtl, abi.CtlReset)
			if err := a.Probe(); err != nil {
				t.Fatal(err)
			}
			return a
		}},
		{"device closed, a new one", func(t *testing.T, sw *fabric.Switch, a *host) *host {
			a.dev.Close()
			return newHostRAM(t, sw, 1, 1<<20)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkGoroutines(t)
			sw := fabric.NewSwitch()
			a, b := newHostRAM(t, sw, 1, 1<<20), newHostRAM(t, sw, 2, 1<<20)
			a = tt.restart(t, sw, a)
			for i, gid := range [][16]byte{
				{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x50, 0x56, 0xff, 0xfe, 0, 0, 1},
				mappedGID(netip.MustParseAddr("10.0.0.1")),
			} {
				if err := a.BindGID(uint32(i), gid); err != nil {
					t.Fatalf("rebinding GID %d: %v", i, err)
				}
			}
			if owner, _ := sw.Owner(netip.MustParseAddr("10.0.0.1")); owner != "hca1" {
				t.Fatalf("10.0.0.1 owned by %q", owner)
			}
			if a.pd, _ = a.CreatePD(0); a.pd == 0 {
				t.Fatal("CREATE_PD after the restart")
			}
			var err error
			if a.cq, err = a.CreateCQ(0, 64); err != nil {
				t.Fatal(err)
			}
			src, lk, _ := a.mr(t, 4096, allAccess)
			dst, lkB, _ := b.mr(t, 4096, allAccess)
			qa, qb := pairRC(t, a, b, defaultRC(), defaultRC())
			qb.PostRecv(uverbs.RecvWQE{WRID: 1, SGE: []uverbs.SGE{{Addr: dst, Length: 100, LKey: lkB}}})
			qa.PostSend(send(uverbs.OpSend, 2, 0, uverbs.SGE{Addr: src, Length: 10, LKey: lk}))
			if e := poll(t, b.cq, a, b); e.Status != uverbs.WCSuccess {
				t.Fatalf("after the restart: %+v", e)
			}
		})
	}
}
