package verbstest

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/ib"
	"github.com/hcaemu/hcaemu/emu/ib/subnet"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
)

// The direct path between HCAs of one process: packets without frames
// where nothing watches the wire, in batches and runs, payloads lent from
// the sender's guest memory, one ACK per batch. Its tests run on hosts that
// declare capability Direct (on emu/fabric's Switch for RoCE, on
// emu/ib/subnet's Subnet for InfiniBand), and are skipped for the others.

// needDirect skips t unless newHost's hosts declare capability Direct, and
// returns their link layer.
func needDirect(t *testing.T, newHost NewHost) LinkLayer {
	t.Helper()
	need(t, newHost, "Direct (the direct path between HCAs of one process)", func(c Caps) bool { return c.Direct })
	return newHost(t, NewNet(), 1, HostOpts{RAM: 1 << 20}).Caps().LinkLayer
}

// directNet is a Net of link layer ll for the direct path's tests: its
// wire (a Switch, or a Subnet) made by mk, and that wire's counters of the
// packets it carried without frames.
type directNet struct {
	*Net
	ll LinkLayer
}

// newDirectNet is a bare wire of link layer ll: batches always allowed.
func newDirectNet(ll LinkLayer) directNet {
	return directNet{&Net{Switch: fabric.NewSwitch(), Subnet: subnet.New(subnet.Config{})}, ll}
}

// direct, runs, lent and forwarded are the wire's counters: packets that
// went without frames, inside runs, with a lent payload, and all it
// delivered.
func (n directNet) direct() uint64 {
	if n.ll == InfiniBand {
		return n.Subnet.Direct.Load()
	}
	return n.Switch.Direct.Load()
}

func (n directNet) runs() uint64 {
	if n.ll == InfiniBand {
		return n.Subnet.DirectRuns.Load()
	}
	return n.Switch.DirectRuns.Load()
}

func (n directNet) lent() uint64 {
	if n.ll == InfiniBand {
		return n.Subnet.DirectLent.Load()
	}
	return n.Switch.DirectLent.Load()
}

func (n directNet) forwarded() uint64 {
	if n.ll == InfiniBand {
		return n.Subnet.Forwarded.Load()
	}
	return n.Switch.Forwarded.Load()
}

// checkWhole is a hook that checks every packet it sees is whole: a RoCEv2
// frame, or an IB packet from LRH to VCRC, with its CRCs right (counted in
// *seen; the first failure in *bad).
func checkWhole(seen *atomic.Int64, bad *atomic.Pointer[error]) hook {
	return func(p packet) bool {
		var err error
		if p.ib {
			_, err = ib.Parse(p.buf)
		} else {
			var u roce.Unframed
			if u, err = roce.Unframe(p.buf); err == nil {
				err = u.VerifyICRC()
			}
		}
		if err != nil {
			bad.CompareAndSwap(nil, &err)
		}
		seen.Add(1)
		return p.send(p.buf)
	}
}

// directRun is what one run of the equivalence workload leaves behind.
type directRun struct {
	memA, memB []byte // both hosts' registered buffers
	wcsA, wcsB []WC
	// Payload bytes each device's QPs sent and received (ACKs, whose
	// number runs may change, carry none).
	bytesA, bytesB [2]uint64
}

// runDirectWorkload runs every RC operation, single and pipelined, the
// failures a responder finds included, between two HCAs on net.
func runDirectWorkload(t *testing.T, net *Net, newHost NewHost) directRun {
	t.Helper()
	seq := HostOpts{SequentialQPNs: true}
	a, b := newHost(t, net, 1, seq), newHost(t, net, 2, seq)
	qa, qb := pair(a, b, DefaultRC())
	const n = 256 << 10
	srcA, lkA, _ := region(a, a.PD(), n, All)
	dstB, lkB, rkB := region(b, b.PD(), n, All)
	fill(a.Mem(srcA, n), 3)
	fill(b.Mem(dstB, n), 5)
	var run directRun
	collect := func(wcsA, wcsB int) {
		for range wcsA {
			run.wcsA = append(run.wcsA, Poll(t, a, a, b))
		}
		for range wcsB {
			run.wcsB = append(run.wcsB, Poll(t, b, a, b))
		}
	}
	sge := func(off uint64, size uint32) mr.SGE { return mr.SGE{Addr: srcA + off, Length: size, LKey: lkA} }
	wrid := uint64(0)
	post := func(op transport.Opcode, remote uint64, rkey uint32, sges ...mr.SGE) {
		wrid++
		qa.PostSend(SendWR{ID: wrid, Opcode: op, Imm: 0x01020300 | uint32(byte(wrid)), RemoteAddr: remote, RKey: rkey, SGEs: sges})
	}
	recv := func(off uint64, size uint32) {
		wrid++
		qb.PostRecv(RecvWR{ID: 1000 + wrid, SGEs: []mr.SGE{{Addr: dstB + off, Length: size, LKey: lkB}}})
	}
	// SENDs of every shape, one at a time.
	for _, size := range []uint32{0, 1, 64, 1024, 3000, 10000, 65536} {
		recv(0, 128<<10)
		post(transport.OpSend, 0, 0, sge(uint64(size), size))
		collect(1, 1)
	}
	recv(0, 128<<10)
	post(transport.OpSendImm, 0, 0, sge(7, 5000))
	collect(1, 1)
	// WRITEs, with immediate, and a READ and atomics.
	post(transport.OpWrite, dstB+100, rkB, sge(11, 70000))
	recv(0, 16)
	post(transport.OpWriteImm, dstB+80000, rkB, sge(1, 2048))
	post(transport.OpRead, dstB+5, rkB, sge(200000, 30000))
	collect(3, 1)
	wrid++
	qa.PostSend(SendWR{ID: wrid, Opcode: transport.OpFetchAdd, RemoteAddr: dstB + 240000, RKey: rkB, CompareAdd: 3, SGEs: []mr.SGE{sge(250000, 8)}})
	collect(1, 0)
	// Pipelined: many WRITEs and SENDs in flight at once, from several
	// SGEs, so batches carry packets of several messages.
	for i := range 24 {
		off := uint64(i) * 9000
		if i%3 == 0 {
			recv(off, 9000)
			post(transport.OpSend, 0, 0, sge(off, 4000), sge(off+5000, 3000))
			continue
		}
		post(transport.OpWrite, dstB+off, rkB, sge(off+1, 8999-uint32(i)))
	}
	collect(24, 8)
	// The responder's errors: a WRITE beyond the region ends the QP.
	post(transport.OpWrite, dstB+n-10, rkB, sge(0, 100))
	collect(1, 0)
	// Each device's port counted every packet its QPs sent and received,
	// a run as the packets it stands for.
	counted := func(name string, h Host) [2]uint64 {
		st, _ := h.Stats()
		if st.Port.FramesOut != st.QPs.PacketsSent || st.Port.FramesIn != st.QPs.PacketsReceived {
			t.Errorf("%s: port %+v, QPs %+v", name, st.Port, st.QPs)
		}
		return [2]uint64{st.QPs.BytesSent, st.QPs.BytesReceived}
	}
	run.bytesA, run.bytesB = counted("a", a), counted("b", b)
	run.memA = bytes.Clone(a.Mem(srcA, n))
	run.memB = bytes.Clone(b.Mem(dstB, n))
	return run
}

// testDirectEquivalent: the same traffic between two HCAs with and without
// something watching the wire (packets without frames, MIDDLE packets in
// runs, against whole packets with their CRCs) leaves identical bytes in
// guest memory and identical completions; every packet the watcher saw is
// whole and its CRCs right.
func testDirectEquivalent(t *testing.T, newHost NewHost) {
	ll := needDirect(t, newHost)
	direct := newDirectNet(ll)
	got := runDirectWorkload(t, direct.Net, newHost)
	if direct.direct() == 0 || direct.runs() == 0 || direct.lent() == 0 {
		t.Fatalf("%d packets went without a frame on a wire nothing watches, %d of them in runs, %d lent",
			direct.direct(), direct.runs(), direct.lent())
	}

	var seen atomic.Int64
	var bad atomic.Pointer[error]
	framed := directNet{NewNet(checkWhole(&seen, &bad)), ll}
	want := runDirectWorkload(t, framed.Net, newHost)
	if n := framed.direct(); n != 0 {
		t.Fatalf("%d packets skipped the watcher", n)
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(directRun{})); diff != "" {
		t.Fatalf("without frames (+) and watched (-) differ:\n%s", diff)
	}
	if len(got.wcsA) != 37 || got.wcsA[len(got.wcsA)-1].Status != transport.StatusRemAccess {
		t.Fatalf("workload ran %d sender completions, last %+v", len(got.wcsA), got.wcsA[len(got.wcsA)-1])
	}
	if e := bad.Load(); e != nil {
		t.Fatalf("a watched packet is not whole: %v", *e)
	}
	if n := seen.Load(); uint64(n) != framed.forwarded() || n < 200 {
		t.Fatalf("%d packets watched, %d forwarded", n, framed.forwarded())
	}
}

// testDirectGating: packets go without frames only where nothing watches
// the wire and only from an address the sending port owns, to an HCA port
// that takes batches.
func testDirectGating(t *testing.T, newHost NewHost) {
	ll := needDirect(t, newHost)
	passThrough := func(p packet) bool { return p.send(p.buf) }
	for _, c := range []struct {
		name  string
		net   func() directNet
		quiet bool // AllowDirect(quiet)
		want  bool
	}{
		{"plain wire", func() directNet { return newDirectNet(ll) }, false, true},
		{"decorated", func() directNet { return directNet{NewNet(passThrough), ll} }, false, false},
		{"decorated, quiet", func() directNet {
			n := directNet{NewNet(passThrough), ll}
			n.Switch.AllowDirect(func() bool { return true })
			n.Subnet.AllowDirect(func() bool { return true })
			return n
		}, true, true},
		{"decorated, not quiet", func() directNet {
			n := directNet{NewNet(passThrough), ll}
			n.Switch.AllowDirect(func() bool { return false })
			n.Subnet.AllowDirect(func() bool { return false })
			return n
		}, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			net := c.net()
			a, b := newHost(t, net.Net, 1, HostOpts{}), newHost(t, net.Net, 2, HostOpts{})
			qa, _ := pair(a, b, DefaultRC())
			src, lk, _ := region(a, a.PD(), 4096, All)
			dst, _, rk := region(b, b.PD(), 4096, All)
			qa.PostSend(write(1, src, 4096, lk, dst, rk))
			must(t, "WRITE", Poll(t, a, a, b), transport.StatusSuccess)
			if got := net.direct() > 0; got != c.want {
				t.Fatalf("direct packets %d, want some: %v", net.direct(), c.want)
			}
		})
	}
}

// WaitFor waits (bounded) until cond holds, letting hosts run.
func WaitFor(t *testing.T, what string, cond func() bool, hosts ...Host) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s in a minute", what)
		}
		for _, h := range hosts {
			h.Sync()
		}
		time.Sleep(time.Millisecond)
	}
}

// testLentPayloadRevoked: a run's payload lent by the sender is never read
// after the region it came from stops covering it. The receiver is held
// (its lock taken) while the sender hands it a WRITE whose runs are lent;
// then the source region goes (deregistered, invalidated by a LOCAL_INV
// from another QP, or the sending device reset) and the sender's guest
// reuses its pages; when the receiver goes on, the loan is revoked: the
// runs are lost (counted as revoked), and not one byte the guest wrote
// after the region went reaches the receiver's memory. A requester still
// there finds the region gone when it sends the runs again: an error
// completion.
func testLentPayloadRevoked(t *testing.T, newHost NewHost) {
	ll := needDirect(t, newHost)
	fastReg := newHost(t, NewNet(), 1, HostOpts{RAM: 1 << 20}).Caps().FastReg
	const n = 64 << 10
	// A source region on a: where its bytes are, the address and L_Key
	// an SGE names them by, and how the region goes.
	type source struct {
		addr, va uint64
		lkey     uint32
		end      func()
	}
	for _, fate := range []struct {
		name    string
		setup   func(t *testing.T, a, b Host, qa QP) source
		reset   bool
		fastReg bool // needs capability FastReg
	}{
		{"deregistered", func(t *testing.T, a, _ Host, _ QP) source {
			addr, lkey, _ := region(a, a.PD(), n, All)
			return source{addr, addr, lkey, func() { dereg(t, a, lkey) }}
		}, false, false},
		{"invalidated", func(t *testing.T, a, b Host, qa QP) source {
			_, frmr := a.AllocFRMR(n / 4096)
			key := frmr&^0xFF | 0x33
			addr := a.Alloc(n)
			pages := make([]uint64, n/4096)
			for i := range pages {
				pages[i] = addr + uint64(i)*4096
			}
			const iova = 0x7f0000000000
			qa.PostSend(SendWR{ID: 7, Opcode: transport.OpFastReg, FastReg: &FastReg{Key: key, IOVA: iova,
				Pages: pages, Length: n, Access: mr.LocalWrite}})
			must(t, "FAST_REG_MR", Poll(t, a, a), transport.StatusSuccess)
			other, _ := pair(a, b, DefaultRC())
			return source{addr, iova, key, func() {
				other.PostSend(SendWR{ID: 8, Opcode: transport.OpLocalInv, InvalidateKey: key})
				if wc := Poll(t, a, a); wc.Status != transport.StatusSuccess || wc.Opcode != transport.WCLocalInv {
					t.Fatalf("LOCAL_INV %+v", wc)
				}
			}}
		}, false, true},
		{"sender reset", func(t *testing.T, a, _ Host, _ QP) source {
			addr, lkey, _ := region(a, a.PD(), n, All)
			return source{addr, addr, lkey, a.Reset}
		}, true, false},
	} {
		t.Run(fate.name, func(t *testing.T) {
			if fate.fastReg && !fastReg {
				t.Skip("the model does not declare capability FastReg")
			}
			CheckGoroutines(t)
			net := newDirectNet(ll)
			a, b := newHost(t, net.Net, 1, HostOpts{}), newHost(t, net.Net, 2, HostOpts{})
			qa, _ := pair(a, b, DefaultRC())
			src := fate.setup(t, a, b, qa)
			dst, _, rk := region(b, b.PD(), n, All)
			fill(a.Mem(src.addr, n), 3)
			orig := bytes.Clone(a.Mem(src.addr, n))
			clear(b.Mem(dst, n))

			b.Hold(func() {
				qa.PostSend(write(1, src.va, n, src.lkey, dst, rk))
				WaitFor(t, "a lent run handed to the held receiver", func() bool { return net.lent() > 0 }, a)
				src.end()
				mem := a.Mem(src.addr, n)
				for i := range mem {
					mem[i] = ^orig[i] // the guest reuses the pages
				}
			})
			if !fate.reset {
				if wc := Poll(t, a, a, b); wc.Status == transport.StatusSuccess {
					t.Fatalf("the WRITE from a region gone completed: %+v", wc)
				}
			}
			b.Sync()
			if st, _ := b.Stats(); st.Port.Revoked == 0 {
				t.Errorf("no run counted as revoked: %+v", st.Port)
			}
			for i, got := range b.Mem(dst, n) {
				if got != 0 && got != orig[i] {
					t.Fatalf("byte %d of the target is %#x: neither what it was nor what the region held (%#x) but what the sender's guest wrote after the region went",
						i, got, orig[i])
				}
			}
		})
	}
}

// testSenderTakesBatches: between two HCAs of one process, the sending
// HCA's engine takes the batches it sends for the receiver (the receiver's
// engine is not woken), and everything arrives as it would otherwise;
// where it cannot take them — the receiver's lock held (a vCPU's register
// write, a command), or the receiver's engine taking already — it neither
// waits nor strands them: the receiver's engine is woken instead, and
// nothing has to be sent again.
func testSenderTakesBatches(t *testing.T, newHost NewHost) {
	ll := needDirect(t, newHost)
	const n = 1 << 20
	for _, hold := range []string{"free", "receiver locked", "receiver taking"} {
		t.Run(hold, func(t *testing.T) {
			CheckGoroutines(t)
			net := newDirectNet(ll)
			a, b := newHost(t, net.Net, 1, HostOpts{}), newHost(t, net.Net, 2, HostOpts{})
			qa, _ := pair(a, b, DefaultRC())
			src, lk, _ := region(a, a.PD(), n, All)
			dst, _, rk := region(b, b.PD(), n, All)
			fill(a.Mem(src, n), 7)
			clear(b.Mem(dst, n))
			w := write(1, src, n, lk, dst, rk)
			sent := net.direct()
			post := func() {
				qa.PostSend(w)
				// No Sync of b here: it would take b's batches itself.
				WaitFor(t, "packets handed to the held receiver", func() bool { return net.direct() > sent })
				// a's engine found b's batches out of its reach: it must
				// go on with its own work, not wait for b.
				synced := make(chan struct{})
				go func() { a.Sync(); close(synced) }()
				select {
				case <-synced:
				case <-time.After(time.Minute):
					t.Fatal("a's engine is stuck behind b")
				}
			}
			switch hold {
			case "free":
				qa.PostSend(w)
			case "receiver locked":
				b.Hold(post)
			case "receiver taking":
				b.HoldTaking(post)
			}
			must(t, "WRITE", Poll(t, a), transport.StatusSuccess)
			if !bytes.Equal(b.Mem(dst, n), a.Mem(src, n)) {
				t.Fatal("the target does not hold the source's bytes")
			}
			_, qps := a.Stats()
			if st := qps[qa.QPN()]; st.Retransmitted != 0 || st.Timeouts != 0 {
				t.Errorf("packets sent again (a batch left in the queue until a timeout): %+v", st)
			}
			if hold == "free" && b.Helped() == 0 {
				t.Error("no batch taken by the sender's engine")
			}
		})
	}
}

// testDirectAcksCoalesced: the responder answers a batch of packets from
// another HCA of the process once (one cumulative ACK for the batch, as
// hardware coalesces ACKs), not once per packet, and every WRITE still
// completes with its data in place.
func testDirectAcksCoalesced(t *testing.T, newHost NewHost) {
	net := newDirectNet(needDirect(t, newHost))
	a, b := newHost(t, net.Net, 1, HostOpts{}), newHost(t, net.Net, 2, HostOpts{})
	qa, _ := pair(a, b, DefaultRC())
	const n, size = 32, 64
	src, lk, _ := region(a, a.PD(), n*size, All)
	dst, _, rk := region(b, b.PD(), n*size, All)
	fill(a.Mem(src, n*size), 9)
	clear(b.Mem(dst, n*size))
	var wrs []SendWR
	for i := range uint64(n) {
		wrs = append(wrs, write(i+1, src+i*size, size, lk, dst+i*size, rk))
	}
	qa.PostSends(wrs...) // one doorbell for all: the requester sends them in one batch
	for i := range n {
		if wc := Poll(t, a); wc.Status != transport.StatusSuccess || wc.ID != uint64(i+1) {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	if !bytes.Equal(b.Mem(dst, n*size), a.Mem(src, n*size)) {
		t.Fatal("the targets do not hold the sources' bytes")
	}
	_, qps := a.Stats()
	if st := qps[qa.QPN()]; st.PacketsReceived == 0 || st.PacketsReceived > n/4 {
		t.Errorf("%d ACKs for %d WRITEs sent in one batch, want a few", st.PacketsReceived, n)
	}
}

// testDirectForeignPeer: a packet that comes without a frame is held to the
// connection as a whole one is. A third HCA on the same quiet wire
// connects a QP of its own to the victim's QP (its QPN, its PSNs) and
// WRITEs with the victim's R_Key: the wire carries it in a batch, which
// names the third HCA as its source, and the victim drops it (counted as
// from outside the connection); its memory is untouched and its real peer
// still reaches it.
func testDirectForeignPeer(t *testing.T, newHost NewHost) {
	net := newDirectNet(needDirect(t, newHost))
	a, b, c := newHost(t, net.Net, 1, HostOpts{}), newHost(t, net.Net, 2, HostOpts{}), newHost(t, net.Net, 3, HostOpts{})
	qa, qb := pair(a, b, DefaultRC())
	qc := c.CreateRCQP(64)
	c.Connect(qc, b, qb, DefaultRC()) // b's QP stays connected to a's
	const n = 8192
	dst, _, rk := region(b, b.PD(), n, All)
	clear(b.Mem(dst, n))
	srcC, lkC, _ := region(c, c.PD(), n, All)
	fill(c.Mem(srcC, n), 0xEE)
	before := net.direct()
	qc.PostSend(write(1, srcC, n, lkC, dst, rk))
	WaitFor(t, "the foreign WRITE dropped by the victim", func() bool {
		st, _ := b.Stats()
		return st.Port.Address > 0
	}, c, b)
	if net.direct() == before {
		t.Fatal("the foreign WRITE went as a frame: this test needs it in a batch")
	}
	if got := b.Mem(dst, n); !bytes.Equal(got, make([]byte, n)) {
		t.Fatal("the foreign HCA's WRITE reached the victim's memory")
	}
	// The real peer still reaches the victim.
	srcA, lkA, _ := region(a, a.PD(), n, All)
	fill(a.Mem(srcA, n), 0x11)
	qa.PostSend(write(2, srcA, n, lkA, dst, rk))
	must(t, "WRITE from the connected peer", Poll(t, a, a, b), transport.StatusSuccess)
	if !bytes.Equal(b.Mem(dst, n), a.Mem(srcA, n)) {
		t.Fatal("the connected peer's WRITE did not land")
	}
}
