package verbstest

import (
	"bytes"
	"testing"

	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
)

// Attacks on memory regions that work in flight still refers to: a guest
// deregisters (or re-registers) a region while a peer's packets for it are
// on the wire, or reuses its handle. Nothing may land in, or be read from,
// pages a region no longer owns after the deregistration returned.

// region registers n bytes of fresh guest memory (IOVA = address) in pd.
func region(h Host, pd uint32, n int, access uint32) (addr uint64, lkey, rkey uint32) {
	addr = h.Alloc(n)
	lkey, rkey = h.RegMRAt(pd, 0, addr, n, access)
	return addr, lkey, rkey
}

func dereg(t *testing.T, h Host, lkey uint32) {
	t.Helper()
	if err := h.DeregMR(lkey); err != nil {
		t.Fatalf("deregistering %#x: %v", lkey, err)
	}
}

// expect polls h for the next completion and checks its WR and status.
func expect(t *testing.T, h Host, id uint64, status transport.Status, hosts ...Host) WC {
	t.Helper()
	wc := Poll(t, h, hosts...)
	if wc.ID != id || wc.Status != status {
		t.Fatalf("completion %+v, want WR %d status %d", wc, id, status)
	}
	return wc
}

// NoCompletion checks that nothing more completes on h once everything is
// quiet.
func NoCompletion(t *testing.T, h Host, hosts ...Host) {
	t.Helper()
	for range 3 {
		for _, o := range hosts {
			o.Sync()
		}
	}
	if wc, ok := h.Poll(); ok {
		t.Fatalf("unexpected completion %+v", wc)
	}
}

func write(id uint64, src uint64, n uint32, lkey uint32, dst uint64, rkey uint32) SendWR {
	return SendWR{ID: id, Opcode: transport.OpWrite, RemoteAddr: dst, RKey: rkey, SGEs: []mr.SGE{{Addr: src, Length: n, LKey: lkey}}}
}

func read(id uint64, dst uint64, n uint32, lkey uint32, src uint64, rkey uint32) SendWR {
	return SendWR{ID: id, Opcode: transport.OpRead, RemoteAddr: src, RKey: rkey, SGEs: []mr.SGE{{Addr: dst, Length: n, LKey: lkey}}}
}

// testMRKeyGenerations: every registration of a reused MR handle gets
// another key (lkey == rkey): the variant is bumped, and wraps from 255 to
// 0 without coming back to the previous one, for regions and fast-register
// regions alike.
func testMRKeyGenerations(t *testing.T, newHost NewHost) {
	b := newHost(t, NewNet(), 2, HostOpts{Regions: 1})
	buf := b.Alloc(4096)
	var prev, handle uint32
	seen := map[uint32]int{}
	for i := 0; i < 300; i++ {
		var lkey, rkey uint32
		if i%2 == 0 {
			lkey, rkey = b.RegMRAt(b.PD(), 0, buf, 4096, All)
		} else {
			lkey, rkey = b.AllocFRMR(4)
		}
		if i == 0 {
			handle = mr.Handle(lkey)
		}
		if mr.Handle(lkey) != handle || rkey != lkey {
			t.Fatalf("registration %d: lkey %#x, rkey %#x; want handle %d", i, lkey, rkey, handle)
		}
		if lkey == prev {
			t.Fatalf("registration %d of handle %d got its previous key %#x back", i, handle, prev)
		}
		if j, again := seen[lkey]; again && i-j < 256 {
			t.Fatalf("registration %d got the key %#x of registration %d", i, lkey, j)
		}
		seen[lkey], prev = i, lkey
		dereg(t, b, lkey)
	}
}

// midMessage is a connected pair on a gated switch, a's region of midSize
// bytes (filled) the source of a message into b's, and a's frames let
// through one at first (arm), the rest held.
type midMessage struct {
	g             *gate
	a, b          Host
	qa, qb        QP
	src, dst      uint64
	lkA, lkB, rkB uint32
}

const midSize = 4 * 1024 // four packets at PMTU 1024

func newMidMessage(t *testing.T, newHost NewHost, seed byte) *midMessage {
	t.Helper()
	sw, g := gatedSwitch(t)
	m := &midMessage{g: g, a: newHost(t, sw, 1, HostOpts{}), b: newHost(t, sw, 2, HostOpts{})}
	m.src, m.lkA, _ = region(m.a, m.a.PD(), midSize, All)
	fill(m.a.Mem(m.src, midSize), seed)
	m.dst, m.lkB, m.rkB = region(m.b, m.b.PD(), midSize, All)
	m.qa, m.qb = pair(m.a, m.b, DefaultRC())
	g.arm(keyOf(m.a), 1, false)
	return m
}

// hold waits until the gate holds the message's last three packets, and b
// has taken its first.
func (m *midMessage) hold(t *testing.T, what string) {
	t.Helper()
	m.g.waitFor(t, keyOf(m.a), what, func(held, _ int) bool { return held >= 3 }, m.a, m.b)
	m.b.Sync()
}

// testDeregMidWrite: the responder's guest deregisters the region a
// multi-packet WRITE is landing in, between its first packet and the rest:
// the requester completes with REM_ACCESS_ERR, the responder raises
// QP_ACCESS_ERR, and the old pages are unchanged byte for byte after the
// deregistration returned.
func testDeregMidWrite(t *testing.T, newHost NewHost) {
	m := newMidMessage(t, newHost, 17)
	a, b, qa, qb, src, dst, g := m.a, m.b, m.qa, m.qb, m.src, m.dst, m.g
	qa.PostSend(write(1, src, midSize, m.lkA, dst, m.rkB))
	m.hold(t, "held WRITE packets")
	const n = midSize
	if !bytes.Equal(b.Mem(dst, 1024), a.Mem(src, 1024)) {
		t.Fatal("the first WRITE packet did not land")
	}
	dereg(t, b, m.lkB)
	before := bytes.Clone(b.Mem(dst, n))
	g.open(keyOf(a))
	expect(t, a, 1, transport.StatusRemAccess, a, b)
	NoCompletion(t, b, a, b)
	if !bytes.Equal(b.Mem(dst, n), before) {
		t.Fatal("the region's old pages changed after the deregistration returned")
	}
	if !b.Raised(qb, hca.EventQPAccessErr) {
		t.Error("no QP_ACCESS_ERR on the responder")
	}
}

// testDeregMidSend: the region of the receive request a multi-packet SEND
// is landing in is deregistered between its packets: the receive completes
// with LOC_PROT_ERR, the sender with REM_OP_ERR, and nothing more lands.
func testDeregMidSend(t *testing.T, newHost NewHost) {
	m := newMidMessage(t, newHost, 29)
	a, b, dst, g := m.a, m.b, m.dst, m.g
	const n = midSize
	m.qb.PostRecv(RecvWR{ID: 7, SGEs: []mr.SGE{{Addr: dst, Length: n, LKey: m.lkB}}})
	m.qa.PostSend(SendWR{ID: 1, Opcode: transport.OpSend, SGEs: []mr.SGE{{Addr: m.src, Length: n, LKey: m.lkA}}})
	m.hold(t, "held SEND packets")
	dereg(t, b, m.lkB)
	before := bytes.Clone(b.Mem(dst, n))
	g.open(keyOf(a))
	expect(t, b, 7, transport.StatusLocProtErr, a, b)
	expect(t, a, 1, transport.StatusRemOpErr, a, b)
	if !bytes.Equal(b.Mem(dst, n), before) {
		t.Fatal("the SEND landed in a deregistered region")
	}
}

// testDeregSourceMidRetransmission: the requester's guest deregisters the
// source region of a SEND whose packets were lost: the retransmission
// completes it with LOC_PROT_ERR instead of reading the old pages, and the
// request behind it is flushed.
func testDeregSourceMidRetransmission(t *testing.T, newHost NewHost) {
	sw, g := gatedSwitch(t)
	a, b := newHost(t, sw, 1, HostOpts{}), newHost(t, sw, 2, HostOpts{})
	const n = 4 * 1024
	src, lkA, _ := region(a, a.PD(), n, All)
	fill(a.Mem(src, n), 31)
	other, lkOther, _ := region(a, a.PD(), 8, All)
	dst, lkB, _ := region(b, b.PD(), n, All)
	// The default timeout (about 1 s, 7 retries): the steps between the
	// loss and the retransmission must not outlast the retries, however
	// loaded the machine; the test waits one timeout for the retry.
	qa, qb := pair(a, b, DefaultRC())
	qb.PostRecv(RecvWR{ID: 7, SGEs: []mr.SGE{{Addr: dst, Length: n, LKey: lkB}}})
	g.arm(keyOf(a), 0, true) // everything a sends is lost
	qa.PostSend(SendWR{ID: 1, Opcode: transport.OpSend, SGEs: []mr.SGE{{Addr: src, Length: n, LKey: lkA}}})
	qa.PostSend(SendWR{ID: 2, Opcode: transport.OpSend, SGEs: []mr.SGE{{Addr: other, Length: 8, LKey: lkOther}}})
	g.waitFor(t, keyOf(a), "lost SEND packets", func(_, dropped int) bool { return dropped >= 4 }, a, b)
	dereg(t, a, lkA)
	g.open(keyOf(a))
	expect(t, a, 1, transport.StatusLocProtErr, a, b)
	expect(t, a, 2, transport.StatusWRFlushErr, a, b)
	NoCompletion(t, b, a, b)
}

// testDeregReadDestination: the requester's guest deregisters the region a
// READ's responses are to land in while they are on the wire: the READ
// completes with LOC_PROT_ERR and the old pages stay as they were.
func testDeregReadDestination(t *testing.T, newHost NewHost) {
	sw, g := gatedSwitch(t)
	a, b := newHost(t, sw, 1, HostOpts{}), newHost(t, sw, 2, HostOpts{})
	const n = 2 * 1024
	dst, lkA, _ := region(a, a.PD(), n, All)
	src, _, rkB := region(b, b.PD(), n, All)
	fill(b.Mem(src, n), 43)
	qa, _ := pair(a, b, DefaultRC())
	g.arm(keyOf(b), 0, false) // b's responses wait
	qa.PostSend(read(1, dst, n, lkA, src, rkB))
	g.waitFor(t, keyOf(b), "held READ responses", func(held, _ int) bool { return held >= 2 }, a, b)
	dereg(t, a, lkA)
	before := bytes.Clone(a.Mem(dst, n))
	g.open(keyOf(b))
	expect(t, a, 1, transport.StatusLocProtErr, a, b)
	if !bytes.Equal(a.Mem(dst, n), before) {
		t.Fatal("READ responses landed in a deregistered region")
	}
}

// readReuse is a connected pair on a gated switch for a READ by a of b's
// region src1 (filled) into a's dst, b's region table with room for one
// region, so that the next registration after src1's reuses its handle.
type readReuse struct {
	g             *gate
	a, b          Host
	qa, qb        QP
	dst, src1     uint64
	lkA, lk1, rk1 uint32
}

const readReuseSize = 2 * 1024

func newReadReuse(t *testing.T, newHost NewHost, seed byte) *readReuse {
	t.Helper()
	sw, g := gatedSwitch(t)
	r := &readReuse{g: g, a: newHost(t, sw, 1, HostOpts{}), b: newHost(t, sw, 2, HostOpts{Regions: 1})}
	r.dst, r.lkA, _ = region(r.a, r.a.PD(), readReuseSize, All)
	r.src1, r.lk1, r.rk1 = region(r.b, r.b.PD(), readReuseSize, All)
	fill(r.b.Mem(r.src1, readReuseSize), seed)
	r.qa, r.qb = pair(r.a, r.b, DefaultRC())
	return r
}

// testDuplicateReadAfterReuse: a READ's responses are lost; meanwhile the
// responder's guest deregisters the region and registers another one, in
// another PD and granting no remote access, which gets the same handle.
// The requester's retried READ (a duplicate for the responder) gets a NAK
// and completes with REM_ACCESS_ERR: never the new region's data.
func testDuplicateReadAfterReuse(t *testing.T, newHost NewHost) {
	// The default timeout (about 1 s, 7 retries): the steps between the
	// loss and the retransmission must not outlast the retries, however
	// loaded the machine; the test waits one timeout for the retry.
	r := newReadReuse(t, newHost, 53)
	g, a, b, qa, qb, dst, lkA, src1, lk1, rk1 := r.g, r.a, r.b, r.qa, r.qb, r.dst, r.lkA, r.src1, r.lk1, r.rk1
	const n = readReuseSize
	g.arm(keyOf(b), 0, true) // b's READ responses are lost
	qa.PostSend(read(1, dst, n, lkA, src1, rk1))
	g.waitFor(t, keyOf(b), "lost READ responses", func(_, dropped int) bool { return dropped >= 2 }, a, b)
	g.arm(keyOf(a), 0, false) // a's retries wait until the handle is reused
	dereg(t, b, lk1)
	src2, lk2, _ := region(b, b.NewPD(), n, mr.LocalWrite)
	if mr.Handle(lk2) != mr.Handle(lk1) {
		t.Fatalf("new region got handle %d, want %d again", mr.Handle(lk2), mr.Handle(lk1))
	}
	fill(b.Mem(src2, n), 97)
	g.open(keyOf(b))
	g.waitFor(t, keyOf(a), "retried READ", func(held, _ int) bool { return held >= 1 }, a, b)
	g.open(keyOf(a))
	expect(t, a, 1, transport.StatusRemAccess, a, b)
	if !bytes.Equal(a.Mem(dst, n), make([]byte, n)) {
		t.Fatal("READ data reached the requester")
	}
	if !b.Raised(qb, hca.EventQPAccessErr) {
		t.Error("no QP_ACCESS_ERR on the responder")
	}
}

// testReplayedReadAfterReuse: a hostile peer replays, from its own port, a
// READ request the responder already answered, after the responder's
// guest deregistered the region and registered another one at the same
// virtual address (other pages), granting no remote access, which got the
// same handle. The responder answers with a remote access error NAK and
// raises QP_ACCESS_ERR: not one byte of the new region goes on the wire.
func testReplayedReadAfterReuse(t *testing.T, newHost NewHost) {
	for _, otherPD := range []bool{false, true} {
		name := "same PD"
		if otherPD {
			name = "another PD"
		}
		t.Run(name, func(t *testing.T) {
			CheckGoroutines(t)
			r := newReadReuse(t, newHost, 61)
			g, a, b, qa, qb, dst, lkA, src1, lk1, rk1 := r.g, r.a, r.b, r.qa, r.qb, r.dst, r.lkA, r.src1, r.lk1, r.rk1
			const n = readReuseSize
			g.mu.Lock()
			g.tap = keyOf(a)
			g.mu.Unlock()
			qa.PostSend(read(1, dst, n, lkA, src1, rk1))
			expect(t, a, 1, transport.StatusSuccess, a, b)
			dereg(t, b, lk1)
			pd := b.PD()
			if otherPD {
				pd = b.NewPD()
			}
			src2 := b.Alloc(n)
			lk2, _ := b.RegMRAt(pd, src1, src2, n, mr.LocalWrite)
			if mr.Handle(lk2) != mr.Handle(lk1) {
				t.Fatalf("new region got handle %d, want %d again", mr.Handle(lk2), mr.Handle(lk1))
			}
			fill(b.Mem(src2, n), 97)
			g.arm(keyOf(b), 0, false) // what b answers stays here
			g.replay(t, func(pkt roce.Packet) bool { return pkt.Opcode() == roce.RCRDMAReadRequest })
			g.waitFor(t, keyOf(b), "answer to the replayed READ", func(held, _ int) bool { return held >= 1 }, a, b)
			for range 3 {
				b.Sync()
			}
			pkts := g.heldPackets(t, keyOf(b))
			if len(pkts) != 1 || pkts[0].Opcode() != roce.RCAcknowledge || pkts[0].AETH == nil ||
				pkts[0].AETH.Syndrome() != roce.NAKSyndrome(roce.NAKRemoteAccessError) {
				var ops []string
				for _, pkt := range pkts {
					ops = append(ops, pkt.Opcode().String())
				}
				t.Fatalf("answer to the replayed READ: %v, want one remote access error NAK", ops)
			}
			if !b.Raised(qb, hca.EventQPAccessErr) {
				t.Error("no QP_ACCESS_ERR on the responder")
			}
		})
	}
}

// testFastRegKeyChange: a fast-register region registered again under a
// new key variant no longer answers to the old key; after LOCAL_INV it
// answers to none.
//
// Capability FastReg: the hosts' model carries out FAST_REG_MR and
// LOCAL_INV work requests.
func testFastRegKeyChange(t *testing.T, newHost NewHost) {
	sw := NewNet()
	a, b := newHost(t, sw, 1, HostOpts{}), newHost(t, sw, 2, HostOpts{})
	if !b.Caps().FastReg {
		t.Skipf("the model does not declare capability FastReg (fast-register and LOCAL_INV work requests)")
	}
	src, lkA, _ := region(a, a.PD(), 4096, All)
	_, frmr := b.AllocFRMR(4)
	page := b.Alloc(8192)
	const iova = 0x7f0000001000
	var qa, qb QP
	fastReg := func(key uint32) {
		t.Helper()
		qb.PostSend(SendWR{ID: 1, Opcode: transport.OpFastReg, FastReg: &FastReg{Key: key, IOVA: iova,
			Pages: []uint64{page, page + 4096}, Length: 8192, Access: mr.LocalWrite | mr.RemoteWrite}})
		expect(t, b, 1, transport.StatusSuccess, a, b)
	}
	localInv := func(key uint32) {
		t.Helper()
		qb.PostSend(SendWR{ID: 2, Opcode: transport.OpLocalInv, InvalidateKey: key})
		expect(t, b, 2, transport.StatusSuccess, a, b)
	}
	writeWith := func(key uint32, status transport.Status) {
		t.Helper()
		qa.PostSend(write(3, src, 64, lkA, iova, key))
		expect(t, a, 3, status, a, b)
		if status != transport.StatusSuccess {
			qa, qb = pair(a, b, DefaultRC()) // both went to ERR
		}
	}
	qa, qb = pair(a, b, DefaultRC())
	k1 := mr.Key(mr.Handle(frmr), 0x41)
	k2 := mr.Key(mr.Handle(frmr), mr.NextVariant(0x41))
	fastReg(k1)
	writeWith(k1, transport.StatusSuccess)
	localInv(k1)
	fastReg(k2)
	fill(b.Mem(page, 64), 1)
	before := bytes.Clone(b.Mem(page, 64))
	writeWith(k1, transport.StatusRemAccess)
	if !bytes.Equal(b.Mem(page, 64), before) {
		t.Fatal("a WRITE with the region's old key landed")
	}
	writeWith(k2, transport.StatusSuccess)
	localInv(k2)
	writeWith(k2, transport.StatusRemAccess)
}
