package verbstest

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/fabric/capture"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
)

// The direct path between HCAs of one process: packets without frames
// where nothing watches the wire, in batches and runs, payloads lent from
// the sender's guest memory, one ACK per batch. Its tests run on hosts that
// declare capability Direct (emu/fabric's Switch, RoCE), and are skipped
// for the others.

// needDirect skips t unless newHost's hosts declare capability Direct.
func needDirect(t *testing.T, newHost NewHost) {
	t.Helper()
	need(t, newHost, "Direct (the direct path between HCAs of one process)", func(c Caps) bool { return c.Direct })
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
// failures a responder finds included, between two HCAs on sw.
func runDirectWorkload(t *testing.T, sw *fabric.Switch, newHost NewHost) directRun {
	t.Helper()
	seq := HostOpts{SequentialQPNs: true}
	a, b := newHost(t, &Net{Switch: sw}, 1, seq), newHost(t, &Net{Switch: sw}, 2, seq)
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
// a capture attached (packets without frames, MIDDLE packets in runs, and
// frames with their ICRC) leaves identical bytes in guest memory and
// identical completions; the capture holds every packet as a frame whose
// ICRC is right.
func testDirectEquivalent(t *testing.T, newHost NewHost) {
	needDirect(t, newHost)
	direct := fabric.NewSwitch()
	got := runDirectWorkload(t, direct, newHost)
	if direct.Direct.Load() == 0 || direct.DirectRuns.Load() == 0 || direct.DirectLent.Load() == 0 {
		t.Fatalf("%d packets went without a frame on a switch nothing watches, %d of them in runs, %d lent",
			direct.Direct.Load(), direct.DirectRuns.Load(), direct.DirectLent.Load())
	}

	var pcap bytes.Buffer
	w, err := capture.NewPcapWriter(&pcap, capture.PcapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	framed := fabric.NewSwitch(capture.To(w))
	want := runDirectWorkload(t, framed, newHost)
	if n := framed.Direct.Load(); n != 0 {
		t.Fatalf("%d packets skipped the capture", n)
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(directRun{})); diff != "" {
		t.Fatalf("without frames (+) and with a capture (-) differ:\n%s", diff)
	}
	if len(got.wcsA) != 37 || got.wcsA[len(got.wcsA)-1].Status != transport.StatusRemAccess {
		t.Fatalf("workload ran %d sender completions, last %+v", len(got.wcsA), got.wcsA[len(got.wcsA)-1])
	}

	// Every frame in the capture is whole: its ICRC is right.
	frames := 0
	b := pcap.Bytes()[24:]
	for len(b) >= 16 {
		size := int(binary.LittleEndian.Uint32(b[8:]))
		frame := b[16 : 16+size]
		b = b[16+size:]
		u, err := roce.Unframe(frame)
		if err != nil {
			t.Fatalf("frame %d: %v", frames, err)
		}
		if err := u.VerifyICRC(); err != nil {
			t.Fatalf("frame %d: %v", frames, err)
		}
		frames++
	}
	if uint64(frames) != framed.Forwarded.Load() || frames < 200 {
		t.Fatalf("%d frames captured, %d forwarded", frames, framed.Forwarded.Load())
	}
}

// testDirectGating: packets go without frames only where nothing watches
// the wire and only from an address the sending port owns, to an HCA port
// that takes batches.
func testDirectGating(t *testing.T, newHost NewHost) {
	needDirect(t, newHost)
	quiet := true
	passThrough := func(next fabric.Link) fabric.Link { return next }
	for _, c := range []struct {
		name string
		sw   func() *fabric.Switch
		want bool
	}{
		{"plain switch", func() *fabric.Switch { return fabric.NewSwitch() }, true},
		{"decorated", func() *fabric.Switch { return fabric.NewSwitch(passThrough) }, false},
		{"decorated, quiet", func() *fabric.Switch {
			sw := fabric.NewSwitch(passThrough)
			sw.AllowDirect(func() bool { return quiet })
			return sw
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			sw := c.sw()
			a, b := newHost(t, &Net{Switch: sw}, 1, HostOpts{}), newHost(t, &Net{Switch: sw}, 2, HostOpts{})
			qa, _ := pair(a, b, DefaultRC())
			src, lk, _ := region(a, a.PD(), 4096, All)
			dst, _, rk := region(b, b.PD(), 4096, All)
			qa.PostSend(write(1, src, 4096, lk, dst, rk))
			must(t, "WRITE", Poll(t, a, a, b), transport.StatusSuccess)
			if got := sw.Direct.Load() > 0; got != c.want {
				t.Fatalf("direct packets %d, want some: %v", sw.Direct.Load(), c.want)
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
	needDirect(t, newHost)
	const n = 64 << 10
	// A source region on a: where its bytes are, the address and L_Key
	// an SGE names them by, and how the region goes.
	type source struct {
		addr, va uint64
		lkey     uint32
		end      func()
	}
	for _, fate := range []struct {
		name  string
		setup func(t *testing.T, a, b Host, qa QP) source
		reset bool
	}{
		{"deregistered", func(t *testing.T, a, _ Host, _ QP) source {
			addr, lkey, _ := region(a, a.PD(), n, All)
			return source{addr, addr, lkey, func() { dereg(t, a, lkey) }}
		}, false},
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
		}, false},
		{"sender reset", func(t *testing.T, a, _ Host, _ QP) source {
			addr, lkey, _ := region(a, a.PD(), n, All)
			return source{addr, addr, lkey, a.Reset}
		}, true},
	} {
		t.Run(fate.name, func(t *testing.T) {
			CheckGoroutines(t)
			sw := fabric.NewSwitch()
			a, b := newHost(t, &Net{Switch: sw}, 1, HostOpts{}), newHost(t, &Net{Switch: sw}, 2, HostOpts{})
			qa, _ := pair(a, b, DefaultRC())
			src := fate.setup(t, a, b, qa)
			dst, _, rk := region(b, b.PD(), n, All)
			fill(a.Mem(src.addr, n), 3)
			orig := bytes.Clone(a.Mem(src.addr, n))
			clear(b.Mem(dst, n))

			b.Hold(func() {
				qa.PostSend(write(1, src.va, n, src.lkey, dst, rk))
				WaitFor(t, "a lent run handed to the held receiver", func() bool { return sw.DirectLent.Load() > 0 }, a)
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
	needDirect(t, newHost)
	const n = 1 << 20
	for _, hold := range []string{"free", "receiver locked", "receiver taking"} {
		t.Run(hold, func(t *testing.T) {
			CheckGoroutines(t)
			sw := fabric.NewSwitch()
			a, b := newHost(t, &Net{Switch: sw}, 1, HostOpts{}), newHost(t, &Net{Switch: sw}, 2, HostOpts{})
			qa, _ := pair(a, b, DefaultRC())
			src, lk, _ := region(a, a.PD(), n, All)
			dst, _, rk := region(b, b.PD(), n, All)
			fill(a.Mem(src, n), 7)
			clear(b.Mem(dst, n))
			w := write(1, src, n, lk, dst, rk)
			sent := sw.Direct.Load()
			post := func() {
				qa.PostSend(w)
				// No Sync of b here: it would take b's batches itself.
				WaitFor(t, "packets handed to the held receiver", func() bool { return sw.Direct.Load() > sent })
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
	needDirect(t, newHost)
	sw := fabric.NewSwitch()
	a, b := newHost(t, &Net{Switch: sw}, 1, HostOpts{}), newHost(t, &Net{Switch: sw}, 2, HostOpts{})
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
