package pvrdma_test

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/hcaemu/hcaemu/emu/emutest"
	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	"github.com/hcaemu/hcaemu/emu/roce"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// Isolation against a hostile peer: a third party on the switch knows a
// connected RC pair's QPNs, PSNs and R_Key and sends at it, from its own
// address (the receiving device's address check drops it) or with the
// real peer's address as IP source (the fabric drops it: the sending port
// does not own that address). The victims' data and completions must not
// change, and the drops are counted.

// rawFrame frames an RC packet from src to dst with a valid ICRC.
func rawFrame(t *testing.T, src, dst netip.Addr, f roce.PacketFields) []byte {
	t.Helper()
	ib, err := roce.Build(make([]byte, 8192), &f)
	if err != nil {
		t.Fatal(err)
	}
	ff := roce.FrameFields{SrcIP: src, DstIP: dst, HopLimit: 64, SrcPort: 0xC000}
	frame, err := roce.Frame(make([]byte, 64+len(ib)+64), &ff, ib)
	if err != nil {
		t.Fatal(err)
	}
	return frame
}

// victims is a connected RC pair a (10.0.0.1) -> b (10.0.0.2) on sw that
// has moved one message; the next message is a SEND of 300 bytes into a
// receive of b's (postSend, postRecv).
type victims struct {
	a, b           *host
	qa, qb         *emutest.QP
	src, dst       uint64 // a's send buffer, b's receive buffer / WRITE target
	lkA, lkB, rkB  uint32
	nextSendPSN    uint32 // the PSN of qa's next request (b expects it)
	expectedByB    []byte // b's receive buffer and WRITE target before any attack
	recvWRID       uint64
	firstSendBytes int
	sent, received bool // the next SEND and its receive are posted
}

const victimBuf = 4096

func newVictims(t *testing.T, sw *fabric.Switch) *victims {
	t.Helper()
	v := &victims{a: newHostRAM(t, sw, 1, 4<<20), b: newHostRAM(t, sw, 2, 4<<20), recvWRID: 20, firstSendBytes: 64}
	v.src, v.lkA, _ = v.a.mr(t, victimBuf, allAccess)
	v.dst, v.lkB, v.rkB = v.b.mr(t, 2*victimBuf, allAccess)
	v.qa, v.qb = pairRC(t, v.a, v.b, defaultRC(), defaultRC())
	fill(v.a.RAM.Mem[v.src:v.src+victimBuf], 1)
	v.qb.PostRecv(uverbs.RecvWQE{WRID: 10, SGE: []uverbs.SGE{{Addr: v.dst, Length: victimBuf, LKey: v.lkB}}})
	v.qa.PostSend(send(uverbs.OpSend, 1, 0, uverbs.SGE{Addr: v.src, Length: uint32(v.firstSendBytes), LKey: v.lkA}))
	if e := poll(t, v.a.cq, v.a, v.b); e.Status != uverbs.WCSuccess {
		t.Fatalf("first SEND: %+v", e)
	}
	if e := poll(t, v.b.cq, v.a, v.b); e.Status != uverbs.WCSuccess || e.WRID != 10 {
		t.Fatalf("first receive: %+v", e)
	}
	v.nextSendPSN = 0x100 + v.qa.QPN + 1 // connect's SQ PSN, one packet sent
	fill(v.b.RAM.Mem[v.dst:v.dst+2*victimBuf], 0xA0)
	v.expectedByB = bytes.Clone(v.b.RAM.Mem[v.dst : v.dst+2*victimBuf])
	return v
}

// postRecv posts b's receive for the next SEND.
func (v *victims) postRecv() {
	v.qb.PostRecv(uverbs.RecvWQE{WRID: v.recvWRID, SGE: []uverbs.SGE{{Addr: v.dst, Length: victimBuf, LKey: v.lkB}}})
	v.received = true
}

// postSend posts a's next SEND (300 bytes).
func (v *victims) postSend() {
	fill(v.a.RAM.Mem[v.src:v.src+victimBuf], 7)
	v.qa.PostSend(send(uverbs.OpSend, 2, 0, uverbs.SGE{Addr: v.src, Length: 300, LKey: v.lkA}))
	v.sent = true
}

// intact checks that nothing reached b's memory or either CQ, then that
// the pair still moves the next SEND (into the receive posted before the
// attack, if any) and a WRITE, with the right data.
func (v *victims) intact(t *testing.T, hosts ...*host) {
	t.Helper()
	noCQE(t, v.a.cq, hosts...)
	noCQE(t, v.b.cq, hosts...)
	if !bytes.Equal(v.b.RAM.Mem[v.dst:v.dst+2*victimBuf], v.expectedByB) {
		t.Fatal("the attack changed the victim's memory")
	}
	for _, q := range []*emutest.QP{v.qa, v.qb} {
		if attr, err := q.Query(); err != nil || attr.State != abi.QPStateRTS {
			t.Fatalf("QP %d state %d (%v)", q.Handle, attr.State, err)
		}
	}
	if !v.received {
		v.postRecv()
	}
	if !v.sent {
		v.postSend()
	}
	if e := poll(t, v.a.cq, hosts...); e.Status != uverbs.WCSuccess || e.WRID != 2 {
		t.Fatalf("SEND after the attack: %+v", e)
	}
	if e := poll(t, v.b.cq, hosts...); e.Status != uverbs.WCSuccess || e.WRID != v.recvWRID || e.ByteLen != 300 || e.QP != uint64(v.qb.Handle) {
		t.Fatalf("receive after the attack: %+v", e)
	}
	w := send(uverbs.OpRDMAWrite, 3, 0, uverbs.SGE{Addr: v.src + 1000, Length: 200, LKey: v.lkA})
	w.SetRDMA(v.dst+victimBuf, v.rkB)
	v.qa.PostSend(w)
	if e := poll(t, v.a.cq, hosts...); e.Status != uverbs.WCSuccess || e.WRID != 3 {
		t.Fatalf("WRITE after the attack: %+v", e)
	}
	if !bytes.Equal(v.b.RAM.Mem[v.dst:v.dst+300], v.a.RAM.Mem[v.src:v.src+300]) ||
		!bytes.Equal(v.b.RAM.Mem[v.dst+victimBuf:v.dst+victimBuf+200], v.a.RAM.Mem[v.src+1000:v.src+1200]) {
		t.Fatal("data after the attack differs")
	}
	noCQE(t, v.b.cq, hosts...)
}

func TestIsolationHostilePeer(t *testing.T) {
	aIP, bIP := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	evilIP := netip.MustParseAddr("10.0.0.3")
	evilLinkLocal := netip.MustParseAddr("fe80::2:ff:fe00:3")
	bLinkLocal := netip.MustParseAddr("fe80::250:56ff:fe00:2")
	payload := bytes.Repeat([]byte("pwned!"), 50)
	// The attacks, against b's responder (SEND, WRITE) and a's requester
	// (a forged ACK for a SEND b has not received: b has no receive posted
	// for it, so a retries on RNR until b posts one).
	sendAt := func(v *victims) roce.PacketFields {
		f := roce.PacketFields{Payload: payload}
		f.BTH = roce.BTHFields{Opcode: roce.RCSendOnly, PKey: roce.DefaultPKey, DestQP: v.qb.QPN, PSN: v.nextSendPSN, AckReq: true}
		return f
	}
	writeAt := func(v *victims) roce.PacketFields {
		f := roce.PacketFields{Payload: payload}
		f.BTH = roce.BTHFields{Opcode: roce.RCRDMAWriteOnly, PKey: roce.DefaultPKey, DestQP: v.qb.QPN, PSN: v.nextSendPSN, AckReq: true}
		f.RETH = roce.RETHFields{VA: v.dst + victimBuf, RKey: v.rkB, DMALength: uint32(len(payload))}
		return f
	}
	ackAt := func(v *victims) roce.PacketFields {
		f := roce.PacketFields{}
		f.BTH = roce.BTHFields{Opcode: roce.RCAcknowledge, PKey: roce.DefaultPKey, DestQP: v.qa.QPN, PSN: v.nextSendPSN}
		f.AETH = roce.AETHFields{Syndrome: roce.SyndromeACKNoCredit, MSN: 2}
		return f
	}
	tests := []struct {
		name     string
		packet   func(*victims) roce.PacketFields
		src, dst netip.Addr
		toA      bool // the victim QP is a's (a forged response)
		spoofed  bool // the fabric drops it (else b's or a's device does)
	}{
		{"SEND from its own address", sendAt, evilIP, bIP, false, false},
		{"WRITE from its own address", writeAt, evilIP, bIP, false, false},
		{"SEND to the victim's other address", sendAt, evilLinkLocal, bLinkLocal, false, false},
		{"ACK from its own address", ackAt, evilIP, aIP, true, false},
		{"SEND spoofing the peer", sendAt, aIP, bIP, false, true},
		{"WRITE spoofing the peer", writeAt, aIP, bIP, false, true},
		{"ACK spoofing the peer", ackAt, bIP, aIP, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkGoroutines(t)
			sw := fabric.NewSwitch()
			v := newVictims(t, sw)
			evil := sw.Attach("evil", [6]byte{0x02, 0, 0, 0, 0, 3}, func(f []byte) bool { fabric.Release(f); return true })
			t.Cleanup(evil.Detach)
			if err := evil.SetAddrs([]netip.Addr{evilIP, evilLinkLocal}); err != nil {
				t.Fatal(err)
			}
			victim := v.b
			if tt.toA {
				// An outstanding SEND for the forged ACK to complete: b has
				// no receive for it (RNR, retried) until intact posts one.
				victim = v.a
				v.postSend()
			} else {
				// A receive for the forged SEND to land in.
				v.postRecv()
			}
			const attempts = 3
			for range attempts {
				evil.Send(rawFrame(t, tt.src, tt.dst, tt.packet(v)))
			}
			v.intact(t, v.a, v.b)
			wantSpoofed, wantMismatch := uint64(0), uint64(attempts)
			if tt.spoofed {
				wantSpoofed, wantMismatch = attempts, 0
			}
			if got := sw.Spoofed.Load(); got != wantSpoofed {
				t.Errorf("switch: %d spoofed frames, want %d", got, wantSpoofed)
			}
			if got := victim.dev.AddrMismatches(); got != wantMismatch {
				t.Errorf("victim device: %d address mismatches, want %d", got, wantMismatch)
			}
		})
	}
}

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
