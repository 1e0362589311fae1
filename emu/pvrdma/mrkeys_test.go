package pvrdma_test

import (
	"bytes"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/emutest"
	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/pvrdma"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	"github.com/hcaemu/hcaemu/emu/roce"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// Attacks on memory regions that work in flight still refers to: a guest
// deregisters (or re-registers) a region while a peer's packets for it are
// on the wire, or reuses its handle. Nothing may land in, or be read from,
// pages a region no longer owns after DESTROY_MR returned.

// smallMRTable is the capabilities of an HCA with two MR handles: the
// kernel PD's DMA MR takes 1, so every other registration reuses handle 2.
func smallMRTable() *abi.DeviceCaps {
	caps := pvrdma.DefaultCaps()
	caps.MaxMR = 2
	return &caps
}

// newHostCaps is newHost with capabilities of its own.
func newHostCaps(t *testing.T, sw *fabric.Switch, k int, caps *abi.DeviceCaps) *host {
	t.Helper()
	mac := [6]byte{0x00, 0x50, 0x56, 0, 0, byte(k)}
	drv := emutest.New(16 << 20)
	dev := pvrdma.New(pvrdma.Config{Name: "hca" + string(rune('0'+k)), Mem: drv.RAM, MSIX: drv.IRQ.Raise,
		Log: testLog(t), MAC: mac, Attach: attachTo(sw, "hca", mac), Caps: caps})
	t.Cleanup(dev.Close)
	drv.Dev = dev
	h := &host{rig: &rig{Driver: drv, dev: dev}, mac: mac, ip: netip.AddrFrom4([4]byte{10, 0, 0, byte(k)})}
	if err := drv.Probe(); err != nil {
		t.Fatal(err)
	}
	v4 := h.ip.As16()
	v4[10], v4[11] = 0xff, 0xff
	ll := [16]byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x50, 0x56, 0xff, 0xfe, 0, 0, byte(k)}
	for i, g := range [][16]byte{ll, v4} {
		if err := drv.BindGID(uint32(i), g); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	if h.pd, err = drv.CreatePD(0); err != nil {
		t.Fatal(err)
	}
	dmaMR, err := drv.CreateMR(abi.CmdCreateMR{PDHandle: h.pd, AccessFlags: abi.AccessLocalWrite, Flags: abi.MRFlagDMA})
	if err != nil {
		t.Fatal(err)
	}
	h.lkey = dmaMR.LKey
	if h.cq, err = drv.CreateCQ(0, 1024); err != nil {
		t.Fatal(err)
	}
	return h
}

// region registers n bytes of fresh guest memory (IOVA = GPA) in protection
// domain pd.
func (h *host) region(t *testing.T, pd uint32, n int, access uint32) (uint64, abi.CmdCreateMRResp) {
	t.Helper()
	return h.regionAt(t, pd, 0, n, access)
}

// regionAt registers n bytes of fresh guest memory at virtual address va
// (0: its GPA) and returns the memory's GPA.
func (h *host) regionAt(t *testing.T, pd uint32, va uint64, n int, access uint32) (uint64, abi.CmdCreateMRResp) {
	t.Helper()
	pages, dir := h.Buffer((n + 4095) / 4096)
	if va == 0 {
		va = pages[0]
	}
	rsp, err := h.CreateMR(abi.CmdCreateMR{Start: va, Length: uint64(n), PdirDMA: dir,
		PDHandle: pd, AccessFlags: access, NChunks: uint32(len(pages))})
	if err != nil {
		t.Fatal(err)
	}
	return pages[0], rsp
}

func (h *host) destroyMR(t *testing.T, handle uint32) {
	t.Helper()
	if err := h.MustCmd(&abi.CmdDestroyMR{MRHandle: handle}, nil); err != nil {
		t.Fatal(err)
	}
}

// expectCQE polls h's CQ for the next completion and checks its status.
func expectCQE(t *testing.T, h *host, wrid uint64, status uint32, hosts ...*host) {
	t.Helper()
	e := poll(t, h.cq, hosts...)
	if e.WRID != wrid || e.Status != status {
		t.Fatalf("completion %+v, want WR %d status %d", e, wrid, status)
	}
}

// gate sits on the fabric: per source MAC, it lets the first frames
// through, then holds (or drops) the rest until opened.
type gate struct {
	mu    sync.Mutex
	next  fabric.Link
	rules map[[6]byte]*gateRule
	// tap: copies of the frames from this MAC that went through.
	tap    [6]byte
	tapped []heldFrame
}

type gateRule struct {
	pass    int  // frames still let through
	drop    bool // drop instead of holding
	dropped int
	held    []heldFrame
}

type heldFrame struct {
	from  *fabric.Port
	frame []byte
}

func (g *gate) decorator(next fabric.Link) fabric.Link {
	g.next = next
	return fabric.LinkFunc(g.send)
}

func (g *gate) send(from *fabric.Port, frame []byte) bool {
	g.mu.Lock()
	rule := g.rules[from.MAC()]
	if from.MAC() == g.tap && (rule == nil || rule.pass > 0) {
		g.tapped = append(g.tapped, heldFrame{from, fabric.Clone(frame)})
	}
	if rule == nil || rule.pass > 0 {
		if rule != nil {
			rule.pass--
		}
		g.mu.Unlock()
		return g.next.Send(from, frame)
	}
	defer g.mu.Unlock()
	if rule.drop {
		rule.dropped++
		fabric.Release(frame)
		return true
	}
	rule.held = append(rule.held, heldFrame{from, frame})
	return true
}

// arm starts holding (drop: dropping) the frames from src after the next
// pass ones.
func (g *gate) arm(src [6]byte, pass int, drop bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.rules[src] = &gateRule{pass: pass, drop: drop}
}

// waitFor waits (bounded) until cond holds of src's frames, letting the
// hosts run.
func (g *gate) waitFor(t *testing.T, src [6]byte, what string, cond func(held, dropped int) bool, hosts ...*host) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		for _, h := range hosts {
			h.dev.Sync()
		}
		g.mu.Lock()
		rule := g.rules[src]
		ok := rule != nil && cond(len(rule.held), rule.dropped)
		g.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(200 * time.Microsecond)
	}
	t.Fatalf("gate: no %s", what)
}

// open lets src's frames through again and sends the held ones on, in
// order.
func (g *gate) open(src [6]byte) {
	g.mu.Lock()
	var held []heldFrame
	if rule := g.rules[src]; rule != nil {
		held = rule.held
	}
	delete(g.rules, src)
	g.mu.Unlock()
	for _, f := range held {
		g.next.Send(f.from, f.frame) // refused: lost, as on a wire
	}
}

// discard releases what the gate still holds (test cleanup).
func (g *gate) discard() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for src, rule := range g.rules {
		for _, f := range rule.held {
			fabric.Release(f.frame)
		}
		delete(g.rules, src)
	}
	for _, f := range g.tapped {
		fabric.Release(f.frame)
	}
	g.tapped = nil
}

// heldPackets parses the frames held from src.
func (g *gate) heldPackets(t *testing.T, src [6]byte) []roce.Packet {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	var pkts []roce.Packet
	if rule := g.rules[src]; rule != nil {
		for _, f := range rule.held {
			pkts = append(pkts, parseFrame(t, f.frame))
		}
	}
	return pkts
}

func parseFrame(t *testing.T, frame []byte) roce.Packet {
	t.Helper()
	u, err := roce.Unframe(frame)
	if err != nil {
		t.Fatal(err)
	}
	pkt, err := roce.Parse(u.IB)
	if err != nil {
		t.Fatal(err)
	}
	return pkt
}

// replay sends a copy of the tapped frame that satisfies match again, from
// the port that sent it (a peer replaying its own packet).
func (g *gate) replay(t *testing.T, match func(roce.Packet) bool) {
	t.Helper()
	g.mu.Lock()
	var again heldFrame
	for _, f := range g.tapped {
		if match(parseFrame(t, f.frame)) {
			again = heldFrame{f.from, fabric.Clone(f.frame)}
			break
		}
	}
	g.mu.Unlock()
	if again.frame == nil {
		t.Fatal("gate: no such frame tapped")
	}
	g.send(again.from, again.frame)
}

func gatedSwitch(t *testing.T) (*fabric.Switch, *gate) {
	g := &gate{rules: map[[6]byte]*gateRule{}}
	t.Cleanup(g.discard)
	return fabric.NewSwitch(g.decorator), g
}

// TestMRKeyGenerations: every registration of a reused MR handle gets
// another key (lkey == rkey, handle in bits 31:8): the variant is bumped,
// and wraps from 255 to 0 without coming back to the previous one.
func TestMRKeyGenerations(t *testing.T) {
	checkGoroutines(t)
	b := newHostCaps(t, fabric.NewSwitch(), 2, smallMRTable())
	flavours := []struct {
		name string
		req  abi.CmdCreateMR
	}{
		{"user MR", abi.CmdCreateMR{Length: 4096, AccessFlags: allAccess, NChunks: 1}},
		{"FRMR", abi.CmdCreateMR{Flags: abi.MRFlagFRMR, NChunks: 4}},
	}
	_, dir := b.Buffer(1)
	var prev uint32
	seen := map[uint32]int{}
	for i := 0; i < 300; i++ {
		req := flavours[i%2].req
		req.PDHandle, req.PdirDMA = b.pd, dir
		rsp, err := b.CreateMR(req)
		if err != nil {
			t.Fatalf("registration %d: %v", i, err)
		}
		if rsp.MRHandle != 2 || mr.Handle(rsp.LKey) != 2 || rsp.RKey != rsp.LKey {
			t.Fatalf("registration %d: handle %d, lkey %#x, rkey %#x", i, rsp.MRHandle, rsp.LKey, rsp.RKey)
		}
		if rsp.LKey == prev {
			t.Fatalf("registration %d of handle 2 got its previous key %#x back", i, prev)
		}
		if j, again := seen[rsp.LKey]; again && i-j < 256 {
			t.Fatalf("registration %d got the key %#x of registration %d", i, rsp.LKey, j)
		}
		seen[rsp.LKey], prev = i, rsp.LKey
		b.destroyMR(t, rsp.MRHandle)
	}
}

// TestDeregMidWriteDevice: the responder's guest deregisters the region a
// multi-packet WRITE is landing in, between its first packet and the rest:
// the requester completes with REM_ACCESS_ERR, the responder raises
// QP_ACCESS_ERR, and the old pages are unchanged byte for byte after the
// DESTROY_MR returned.
func TestDeregMidWriteDevice(t *testing.T) {
	checkGoroutines(t)
	sw, g := gatedSwitch(t)
	a, b := newHost(t, sw, 1), newHost(t, sw, 2)
	const n = 4 * 1024 // four packets at PMTU 1024
	src, lkA, _ := a.mr(t, n, allAccess)
	fill(a.RAM.Mem[src:src+n], 17)
	dst, mrB := b.region(t, b.pd, n, allAccess)
	qa, qb := pairRC(t, a, b, defaultRC(), defaultRC())
	g.arm(a.mac, 1, false)
	w := send(uverbs.OpRDMAWrite, 1, 0, uverbs.SGE{Addr: src, Length: n, LKey: lkA})
	w.SetRDMA(dst, mrB.RKey)
	qa.PostSend(w)
	g.waitFor(t, a.mac, "held WRITE packets", func(held, _ int) bool { return held >= 3 }, a, b)
	b.dev.Sync() // the first packet landed
	if !bytes.Equal(b.RAM.Mem[dst:dst+1024], a.RAM.Mem[src:src+1024]) {
		t.Fatal("the first WRITE packet did not land")
	}
	b.destroyMR(t, mrB.MRHandle)
	before := append([]byte(nil), b.RAM.Mem[dst:dst+n]...)
	g.open(a.mac)
	expectCQE(t, a, 1, uverbs.WCRemAccessErr, a, b)
	noCQE(t, b.cq, a, b)
	if !bytes.Equal(b.RAM.Mem[dst:dst+n], before) {
		t.Fatal("the region's old pages changed after DESTROY_MR returned")
	}
	if !hasEvent(b.AsyncEvents(), abi.EventQPAccessErr, qb.Handle) {
		t.Error("no QP_ACCESS_ERR on the responder")
	}
}

// TestDeregMidSendDevice: the region of the receive request a multi-packet
// SEND is landing in is deregistered between its packets: the receive
// completes with LOC_PROT_ERR, the sender with REM_OP_ERR, and nothing more
// lands.
func TestDeregMidSendDevice(t *testing.T) {
	checkGoroutines(t)
	sw, g := gatedSwitch(t)
	a, b := newHost(t, sw, 1), newHost(t, sw, 2)
	const n = 4 * 1024
	src, lkA, _ := a.mr(t, n, allAccess)
	fill(a.RAM.Mem[src:src+n], 29)
	dst, mrB := b.region(t, b.pd, n, allAccess)
	qa, qb := pairRC(t, a, b, defaultRC(), defaultRC())
	qb.PostRecv(uverbs.RecvWQE{WRID: 7, SGE: []uverbs.SGE{{Addr: dst, Length: n, LKey: mrB.LKey}}})
	g.arm(a.mac, 1, false)
	qa.PostSend(send(uverbs.OpSend, 1, 0, uverbs.SGE{Addr: src, Length: n, LKey: lkA}))
	g.waitFor(t, a.mac, "held SEND packets", func(held, _ int) bool { return held >= 3 }, a, b)
	b.dev.Sync()
	b.destroyMR(t, mrB.MRHandle)
	before := append([]byte(nil), b.RAM.Mem[dst:dst+n]...)
	g.open(a.mac)
	expectCQE(t, b, 7, uverbs.WCLocProtErr, a, b)
	expectCQE(t, a, 1, uverbs.WCRemOpErr, a, b)
	if !bytes.Equal(b.RAM.Mem[dst:dst+n], before) {
		t.Fatal("the SEND landed in a deregistered region")
	}
}

// TestDeregSourceMidRetransmission: the requester's guest deregisters the
// source region of a SEND whose packets were lost: the retransmission
// completes it with LOC_PROT_ERR instead of reading the old pages, and the
// request behind it is flushed.
func TestDeregSourceMidRetransmission(t *testing.T) {
	checkGoroutines(t)
	sw, g := gatedSwitch(t)
	a, b := newHost(t, sw, 1), newHost(t, sw, 2)
	const n = 4 * 1024
	src, mrA := a.region(t, a.pd, n, allAccess)
	fill(a.RAM.Mem[src:src+n], 31)
	dst, lkB, _ := b.mr(t, n, allAccess)
	// The default timeout (about 1 s, 7 retries): the steps between the
	// loss and the retransmission must not outlast the retries, however
	// loaded the machine; the test waits one timeout for the retry.
	qa, qb := pairRC(t, a, b, defaultRC(), defaultRC())
	qb.PostRecv(uverbs.RecvWQE{WRID: 7, SGE: []uverbs.SGE{{Addr: dst, Length: n, LKey: lkB}}})
	g.arm(a.mac, 0, true) // everything a sends is lost
	qa.PostSend(send(uverbs.OpSend, 1, 0, uverbs.SGE{Addr: src, Length: n, LKey: mrA.LKey}))
	qa.PostSend(send(uverbs.OpSend, 2, 0, uverbs.SGE{Addr: src, Length: 8, LKey: a.lkey}))
	g.waitFor(t, a.mac, "lost SEND packets", func(_, dropped int) bool { return dropped >= 4 }, a, b)
	a.destroyMR(t, mrA.MRHandle)
	g.open(a.mac)
	expectCQE(t, a, 1, uverbs.WCLocProtErr, a, b)
	expectCQE(t, a, 2, uverbs.WCWRFlushErr, a, b)
	noCQE(t, b.cq, a, b)
}

// TestDeregReadDestination: the requester's guest deregisters the region a
// READ's responses are to land in while they are on the wire: the READ
// completes with LOC_PROT_ERR and the old pages stay as they were.
func TestDeregReadDestination(t *testing.T) {
	checkGoroutines(t)
	sw, g := gatedSwitch(t)
	a, b := newHost(t, sw, 1), newHost(t, sw, 2)
	const n = 2 * 1024
	dst, mrA := a.region(t, a.pd, n, allAccess)
	src, _, rkB := b.mr(t, n, allAccess)
	fill(b.RAM.Mem[src:src+n], 43)
	qa, _ := pairRC(t, a, b, defaultRC(), defaultRC())
	g.arm(b.mac, 0, false) // b's responses wait
	w := send(uverbs.OpRDMARead, 1, 0, uverbs.SGE{Addr: dst, Length: n, LKey: mrA.LKey})
	w.SetRDMA(src, rkB)
	qa.PostSend(w)
	g.waitFor(t, b.mac, "held READ responses", func(held, _ int) bool { return held >= 2 }, a, b)
	a.destroyMR(t, mrA.MRHandle)
	before := append([]byte(nil), a.RAM.Mem[dst:dst+n]...)
	g.open(b.mac)
	expectCQE(t, a, 1, uverbs.WCLocProtErr, a, b)
	if !bytes.Equal(a.RAM.Mem[dst:dst+n], before) {
		t.Fatal("READ responses landed in a deregistered region")
	}
}

// TestDuplicateReadAfterReuse: a READ's responses are lost; meanwhile the
// responder's guest deregisters the region and registers another one, in
// another PD and granting no remote access, which gets the same handle.
// The requester's retried READ (a duplicate for the responder) gets a NAK
// and completes with REM_ACCESS_ERR: never the new region's data.
func TestDuplicateReadAfterReuse(t *testing.T) {
	checkGoroutines(t)
	sw, g := gatedSwitch(t)
	a, b := newHost(t, sw, 1), newHostCaps(t, sw, 2, smallMRTable())
	const n = 2 * 1024
	dst, lkA, _ := a.mr(t, n, allAccess)
	src1, mr1 := b.region(t, b.pd, n, allAccess)
	fill(b.RAM.Mem[src1:src1+n], 53)
	// The default timeout (about 1 s, 7 retries): the steps between the
	// loss and the retransmission must not outlast the retries, however
	// loaded the machine; the test waits one timeout for the retry.
	qa, qb := pairRC(t, a, b, defaultRC(), defaultRC())
	g.arm(b.mac, 0, true) // b's READ responses are lost
	w := send(uverbs.OpRDMARead, 1, 0, uverbs.SGE{Addr: dst, Length: n, LKey: lkA})
	w.SetRDMA(src1, mr1.RKey)
	qa.PostSend(w)
	g.waitFor(t, b.mac, "lost READ responses", func(_, dropped int) bool { return dropped >= 2 }, a, b)
	g.arm(a.mac, 0, false) // a's retries wait until the handle is reused
	b.destroyMR(t, mr1.MRHandle)
	pd2, err := b.CreatePD(0)
	if err != nil {
		t.Fatal(err)
	}
	src2, mr2 := b.region(t, pd2, n, abi.AccessLocalWrite)
	if mr2.MRHandle != mr1.MRHandle {
		t.Fatalf("new region got handle %d, want %d again", mr2.MRHandle, mr1.MRHandle)
	}
	fill(b.RAM.Mem[src2:src2+n], 97)
	g.open(b.mac)
	g.waitFor(t, a.mac, "retried READ", func(held, _ int) bool { return held >= 1 }, a, b)
	g.open(a.mac)
	expectCQE(t, a, 1, uverbs.WCRemAccessErr, a, b)
	if !bytes.Equal(a.RAM.Mem[dst:dst+n], make([]byte, n)) {
		t.Fatal("READ data reached the requester")
	}
	if !hasEvent(b.AsyncEvents(), abi.EventQPAccessErr, qb.Handle) {
		t.Error("no QP_ACCESS_ERR on the responder")
	}
}

// TestReplayedReadAfterReuse: a hostile peer replays, from its own port,
// a READ request the responder already answered, after the responder's
// guest deregistered the region and registered another one at the same
// virtual address (other pages), granting no remote access, which got the
// same handle. The responder answers with a
// remote access error NAK and raises QP_ACCESS_ERR: not one byte of the new
// region goes on the wire.
func TestReplayedReadAfterReuse(t *testing.T) {
	for _, otherPD := range []bool{false, true} {
		name := "same PD"
		if otherPD {
			name = "another PD"
		}
		t.Run(name, func(t *testing.T) {
			checkGoroutines(t)
			sw, g := gatedSwitch(t)
			a, b := newHost(t, sw, 1), newHostCaps(t, sw, 2, smallMRTable())
			const n = 2 * 1024
			dst, lkA, _ := a.mr(t, n, allAccess)
			src1, mr1 := b.region(t, b.pd, n, allAccess)
			fill(b.RAM.Mem[src1:src1+n], 61)
			qa, qb := pairRC(t, a, b, defaultRC(), defaultRC())
			g.mu.Lock()
			g.tap = a.mac
			g.mu.Unlock()
			w := send(uverbs.OpRDMARead, 1, 0, uverbs.SGE{Addr: dst, Length: n, LKey: lkA})
			w.SetRDMA(src1, mr1.RKey)
			qa.PostSend(w)
			expectCQE(t, a, 1, uverbs.WCSuccess, a, b)
			b.destroyMR(t, mr1.MRHandle)
			pd := b.pd
			if otherPD {
				var err error
				if pd, err = b.CreatePD(0); err != nil {
					t.Fatal(err)
				}
			}
			src2, mr2 := b.regionAt(t, pd, src1, n, abi.AccessLocalWrite)
			if mr2.MRHandle != mr1.MRHandle {
				t.Fatalf("new region got handle %d, want %d again", mr2.MRHandle, mr1.MRHandle)
			}
			fill(b.RAM.Mem[src2:src2+n], 97)
			g.arm(b.mac, 0, false) // what b answers stays here
			g.replay(t, func(pkt roce.Packet) bool { return pkt.Opcode() == roce.RCRDMAReadRequest })
			g.waitFor(t, b.mac, "answer to the replayed READ", func(held, _ int) bool { return held >= 1 }, a, b)
			for i := 0; i < 3; i++ {
				b.dev.Sync()
			}
			pkts := g.heldPackets(t, b.mac)
			if len(pkts) != 1 || pkts[0].Opcode() != roce.RCAcknowledge || pkts[0].AETH == nil ||
				pkts[0].AETH.Syndrome() != roce.NAKSyndrome(roce.NAKRemoteAccessError) {
				var ops []string
				for _, pkt := range pkts {
					ops = append(ops, pkt.Opcode().String())
				}
				t.Fatalf("answer to the replayed READ: %v, want one remote access error NAK", ops)
			}
			if !hasEvent(b.AsyncEvents(), abi.EventQPAccessErr, qb.Handle) {
				t.Error("no QP_ACCESS_ERR on the responder")
			}
		})
	}
}

// TestFastRegKeyChange: an FRMR registered again under a new key variant
// no longer answers to the old key; after LOCAL_INV it answers to none.
func TestFastRegKeyChange(t *testing.T) {
	checkGoroutines(t)
	sw := fabric.NewSwitch()
	a, b := newHost(t, sw, 1), newHost(t, sw, 2)
	src, lkA, _ := a.mr(t, 4096, allAccess)
	frmr, err := b.CreateMR(abi.CmdCreateMR{PDHandle: b.pd, Flags: abi.MRFlagFRMR, NChunks: 4})
	if err != nil {
		t.Fatal(err)
	}
	pages, pl := b.Buffer(2)
	const iova = 0x7f0000001000
	var qa, qb *emutest.QP
	fastReg := func(key uint32) {
		t.Helper()
		w := send(uverbs.OpFastRegMR, 1, 0)
		w.SetFastReg(uverbs.FastReg{IOVA: iova, PageListDir: pl, PageShift: 12, PageListLen: 2, Length: 8192, Access: 1 | 2, RKey: key})
		qb.PostSend(w)
		expectCQE(t, b, 1, uverbs.WCSuccess, a, b)
	}
	localInv := func(key uint32) {
		t.Helper()
		inv := send(uverbs.OpLocalInv, 2, 0)
		le.PutUint32(inv.Ex[:], key)
		qb.PostSend(inv)
		expectCQE(t, b, 2, uverbs.WCSuccess, a, b)
	}
	write := func(key uint32, status uint32) {
		t.Helper()
		w := send(uverbs.OpRDMAWrite, 3, 0, uverbs.SGE{Addr: src, Length: 64, LKey: lkA})
		w.SetRDMA(iova, key)
		qa.PostSend(w)
		expectCQE(t, a, 3, status, a, b)
		if status != uverbs.WCSuccess {
			qa, qb = pairRC(t, a, b, defaultRC(), defaultRC()) // both went to ERR
		}
	}
	qa, qb = pairRC(t, a, b, defaultRC(), defaultRC())
	k1 := mr.Key(mr.Handle(frmr.RKey), 0x41)
	k2 := mr.Key(mr.Handle(frmr.RKey), mr.NextVariant(0x41))
	fastReg(k1)
	write(k1, uverbs.WCSuccess)
	localInv(k1)
	fastReg(k2)
	fill(b.RAM.Mem[pages[0]:pages[0]+64], 1)
	before := append([]byte(nil), b.RAM.Mem[pages[0]:pages[0]+64]...)
	write(k1, uverbs.WCRemAccessErr)
	if !bytes.Equal(b.RAM.Mem[pages[0]:pages[0]+64], before) {
		t.Fatal("a WRITE with the FRMR's old key landed")
	}
	write(k2, uverbs.WCSuccess)
	localInv(k2)
	write(k2, uverbs.WCRemAccessErr)
}
