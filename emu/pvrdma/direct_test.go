package pvrdma_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hcaemu/hcaemu/emu/emutest"
	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/fabric/capture"
	"github.com/hcaemu/hcaemu/emu/pvrdma"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	"github.com/hcaemu/hcaemu/emu/roce"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// directRun is what one run of the equivalence workload leaves behind.
type directRun struct {
	memA, memB   []byte // both hosts' registered buffers
	cqesA, cqesB []uverbs.CQE
	// Payload bytes each device's QPs sent and received (ACKs, whose
	// number runs may change, carry none).
	bytesA, bytesB [2]uint64
}

// runDirectWorkload runs every RC operation, single and pipelined, the
// failures a responder finds included, between two HCAs on sw.
func runDirectWorkload(t *testing.T, sw *fabric.Switch) directRun {
	t.Helper()
	seq := func(cfg *pvrdma.Config) { cfg.SequentialQPNs = true }
	a, b := newHostConfig(t, sw, 1, 64<<20, seq), newHostConfig(t, sw, 2, 64<<20, seq)
	qa, qb := pairRC(t, a, b, defaultRC(), defaultRC())
	const n = 256 << 10
	srcA, lkA, _ := a.mr(t, n, allAccess)
	dstB, lkB, rkB := b.mr(t, n, allAccess)
	fill(a.RAM.Mem[srcA:srcA+n], 3)
	fill(b.RAM.Mem[dstB:dstB+n], 5)
	var run directRun
	collect := func(cqesA, cqesB int) {
		for range cqesA {
			run.cqesA = append(run.cqesA, poll(t, a.cq, a, b))
		}
		for range cqesB {
			run.cqesB = append(run.cqesB, poll(t, b.cq, a, b))
		}
	}
	sge := func(off uint64, size uint32) uverbs.SGE { return uverbs.SGE{Addr: srcA + off, Length: size, LKey: lkA} }
	wrid := uint64(0)
	post := func(op uint32, remote uint64, rkey uint32, sges ...uverbs.SGE) {
		wrid++
		w := send(op, wrid, 0, sges...)
		w.Ex = [4]byte{1, 2, 3, byte(wrid)}
		w.SetRDMA(remote, rkey)
		qa.PostSend(w)
	}
	recv := func(off uint64, size uint32) {
		wrid++
		qb.PostRecv(uverbs.RecvWQE{WRID: 1000 + wrid, SGE: []uverbs.SGE{{Addr: dstB + off, Length: size, LKey: lkB}}})
	}
	// SENDs of every shape, one at a time.
	for _, size := range []uint32{0, 1, 64, 1024, 3000, 10000, 65536} {
		recv(0, 128<<10)
		post(uverbs.OpSend, 0, 0, sge(uint64(size), size))
		collect(1, 1)
	}
	recv(0, 128<<10)
	post(uverbs.OpSendImm, 0, 0, sge(7, 5000))
	collect(1, 1)
	// WRITEs, with immediate, and a READ and atomics.
	post(uverbs.OpRDMAWrite, dstB+100, rkB, sge(11, 70000))
	recv(0, 16)
	post(uverbs.OpRDMAWriteImm, dstB+80000, rkB, sge(1, 2048))
	post(uverbs.OpRDMARead, dstB+5, rkB, sge(200000, 30000))
	collect(3, 1)
	wrid++
	atomic := send(uverbs.OpAtomicFetchAdd, wrid, 0, sge(250000, 8))
	atomic.SetAtomic(dstB+240000, 3, 0, rkB)
	qa.PostSend(atomic)
	collect(1, 0)
	// Pipelined: many WRITEs and SENDs in flight at once, from several
	// SGEs, so batches carry packets of several messages.
	for i := range 24 {
		off := uint64(i) * 9000
		if i%3 == 0 {
			recv(off, 9000)
			post(uverbs.OpSend, 0, 0, sge(off, 4000), sge(off+5000, 3000))
			continue
		}
		post(uverbs.OpRDMAWrite, dstB+off, rkB, sge(off+1, 8999-uint32(i)))
	}
	collect(24, 8)
	// The responder's errors: a WRITE beyond the region ends the QP.
	post(uverbs.OpRDMAWrite, dstB+n-10, rkB, sge(0, 100))
	collect(1, 0)
	// Each device's port counted every packet its QPs sent and received,
	// a run as the packets it stands for.
	counted := func(h *host) [2]uint64 {
		st, _ := h.dev.Stats()
		if st.Port.FramesOut != st.QPs.PacketsSent || st.Port.FramesIn != st.QPs.PacketsReceived {
			t.Errorf("%s: port %+v, QPs %+v", h.dev.Name(), st.Port, st.QPs)
		}
		return [2]uint64{st.QPs.BytesSent, st.QPs.BytesReceived}
	}
	run.bytesA, run.bytesB = counted(a), counted(b)
	run.memA = bytes.Clone(a.RAM.Mem[srcA : srcA+n])
	run.memB = bytes.Clone(b.RAM.Mem[dstB : dstB+n])
	return run
}

// TestDirectEquivalent: the same traffic between two HCAs with and without a
// capture attached (packets without frames, MIDDLE packets in runs, and
// frames with their ICRC) leaves identical bytes in guest memory and
// identical CQEs; the capture holds every packet as a frame whose ICRC is
// right.
func TestDirectEquivalent(t *testing.T) {
	checkGoroutines(t)
	direct := fabric.NewSwitch()
	got := runDirectWorkload(t, direct)
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
	want := runDirectWorkload(t, framed)
	if n := framed.Direct.Load(); n != 0 {
		t.Fatalf("%d packets skipped the capture", n)
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(directRun{})); diff != "" {
		t.Fatalf("without frames (+) and with a capture (-) differ:\n%s", diff)
	}
	if len(got.cqesA) != 37 || got.cqesA[len(got.cqesA)-1].Status != uverbs.WCRemAccessErr {
		t.Fatalf("workload ran %d sender CQEs, last %+v", len(got.cqesA), got.cqesA[len(got.cqesA)-1])
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

// TestDirectGating: packets go without frames only where nothing watches
// the wire and only from an address the sending port owns, to an HCA port
// that takes batches.
func TestDirectGating(t *testing.T) {
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
			a := newHost(t, sw, 1)
			b := newHost(t, sw, 2)
			qa, _ := pairRC(t, a, b, defaultRC(), defaultRC())
			src, lk, _ := a.mr(t, 4096, allAccess)
			dst, _, rk := b.mr(t, 4096, allAccess)
			w := send(uverbs.OpRDMAWrite, 1, 0, uverbs.SGE{Addr: src, Length: 4096, LKey: lk})
			w.SetRDMA(dst, rk)
			qa.PostSend(w)
			if e := poll(t, a.cq, a, b); e.Status != uverbs.WCSuccess {
				t.Fatalf("CQE %+v", e)
			}
			if got := sw.Direct.Load() > 0; got != c.want {
				t.Fatalf("direct packets %d, want some: %v", sw.Direct.Load(), c.want)
			}
		})
	}
}

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

// TestLentPayloadRevoked: a run's payload lent by the sender is never read
// after the region it came from stops covering it. The receiver is held
// (its lock taken) while the sender hands it a WRITE whose runs are lent;
// then the source region goes (deregistered, invalidated by a LOCAL_INV
// from another QP, or the sending device reset) and the sender's guest
// reuses its pages; when the receiver goes on, the loan is revoked: the
// runs are lost (counted as revoked), and not one byte the guest wrote
// after the region went reaches the receiver's memory. A requester still
// there finds the region gone when it sends the runs again: an error
// completion.
func TestLentPayloadRevoked(t *testing.T) {
	const n = 64 << 10
	// A source region on a: where its bytes are, the address and L_Key
	// an SGE names them by, and how the region goes.
	type source struct {
		addr, va uint64
		lkey     uint32
		end      func()
	}
	plain := func(t *testing.T, a *host) (uint64, uint32, uint32) {
		pages, dir := a.Buffer(n / 4096)
		region, err := a.CreateMR(abi.CmdCreateMR{Start: pages[0], Length: n, PdirDMA: dir,
			PDHandle: a.pd, AccessFlags: allAccess, NChunks: uint32(len(pages))})
		if err != nil {
			t.Fatal(err)
		}
		return pages[0], region.LKey, region.MRHandle
	}
	for _, fate := range []struct {
		name  string
		setup func(t *testing.T, a, b *host, qa *emutest.QP) source
		reset bool
	}{
		{"deregistered", func(t *testing.T, a, _ *host, _ *emutest.QP) source {
			addr, lkey, handle := plain(t, a)
			return source{addr, addr, lkey, func() {
				if err := a.MustCmd(&abi.CmdDestroyMR{MRHandle: handle}, nil); err != nil {
					t.Fatal(err)
				}
			}}
		}, false},
		{"invalidated", func(t *testing.T, a, b *host, qa *emutest.QP) source {
			frmr, err := a.CreateMR(abi.CmdCreateMR{PDHandle: a.pd, Flags: abi.MRFlagFRMR, NChunks: n / 4096})
			if err != nil {
				t.Fatal(err)
			}
			key := frmr.LKey&^0xFF | 0x33
			pages, pl := a.Buffer(n / 4096)
			for i := 1; i < len(pages); i++ {
				if pages[i] != pages[0]+uint64(i)*4096 {
					t.Fatal("buffer pages not contiguous")
				}
			}
			const iova = 0x7f0000000000
			reg := send(uverbs.OpFastRegMR, 7, 0)
			reg.SetFastReg(uverbs.FastReg{IOVA: iova, PageListDir: pl, PageShift: 12, PageListLen: n / 4096, Length: n,
				Access: 1, RKey: key})
			qa.PostSend(reg)
			if e := poll(t, a.cq, a); e.Status != 0 {
				t.Fatalf("FAST_REG_MR %+v", e)
			}
			other, _ := pairRC(t, a, b, defaultRC(), defaultRC())
			return source{pages[0], iova, key, func() {
				inv := send(uverbs.OpLocalInv, 8, 0)
				le.PutUint32(inv.Ex[:], key)
				other.PostSend(inv)
				if e := poll(t, a.cq, a); e.Status != 0 || e.Opcode != uverbs.WCLocalInv {
					t.Fatalf("LOCAL_INV %+v", e)
				}
			}}
		}, false},
		{"sender reset", func(t *testing.T, a, _ *host, _ *emutest.QP) source {
			addr, lkey, _ := plain(t, a)
			return source{addr, addr, lkey, a.dev.Reset}
		}, true},
	} {
		t.Run(fate.name, func(t *testing.T) {
			checkGoroutines(t)
			sw := fabric.NewSwitch()
			a, b := newHost(t, sw, 1), newHost(t, sw, 2)
			qa, _ := pairRC(t, a, b, defaultRC(), defaultRC())
			src := fate.setup(t, a, b, qa)
			dst, _, rk := b.mr(t, n, allAccess)
			fill(a.RAM.Mem[src.addr:src.addr+n], 3)
			orig := bytes.Clone(a.RAM.Mem[src.addr : src.addr+n])
			clear(b.RAM.Mem[dst : dst+n])

			b.dev.WithLock(func() {
				w := send(uverbs.OpRDMAWrite, 1, 0, uverbs.SGE{Addr: src.va, Length: n, LKey: src.lkey})
				w.SetRDMA(dst, rk)
				qa.PostSend(w)
				waitFor(t, "a lent run handed to the held receiver", func() bool { return sw.DirectLent.Load() > 0 }, a)
				src.end()
				for i := range uint64(n) {
					a.RAM.Mem[src.addr+i] = ^orig[i] // the guest reuses the pages
				}
			})
			if !fate.reset {
				if e := poll(t, a.cq, a, b); e.Status == uverbs.WCSuccess {
					t.Fatalf("the WRITE from a region gone completed: %+v", e)
				}
			}
			b.dev.Sync()
			st, _ := b.dev.Stats()
			if st.Port.Revoked == 0 {
				t.Errorf("no run counted as revoked: %+v", st.Port)
			}
			for i, got := range b.RAM.Mem[dst : dst+n] {
				if got != 0 && got != orig[i] {
					t.Fatalf("byte %d of the target is %#x: neither what it was nor what the region held (%#x) but what the sender's guest wrote after the region went",
						i, got, orig[i])
				}
			}
		})
	}
}

// TestSenderTakesBatches: between two HCAs of one process, the sending
// HCA's engine takes the batches it sends for the receiver (the receiver's
// engine is not woken), and everything arrives as it would otherwise; where
// it cannot take them — the receiver's lock held (a vCPU's register write,
// a command), or the receiver's engine taking already — it neither waits
// nor strands them: the receiver's engine is woken instead, and nothing has
// to be sent again.
func TestSenderTakesBatches(t *testing.T) {
	const n = 1 << 20
	for _, hold := range []string{"free", "receiver locked", "receiver taking"} {
		t.Run(hold, func(t *testing.T) {
			checkGoroutines(t)
			sw := fabric.NewSwitch()
			a, b := newHost(t, sw, 1), newHost(t, sw, 2)
			qa, _ := pairRC(t, a, b, defaultRC(), defaultRC())
			src, lk, _ := a.mr(t, n, allAccess)
			dst, _, rk := b.mr(t, n, allAccess)
			fill(a.RAM.Mem[src:src+n], 7)
			clear(b.RAM.Mem[dst : dst+n])
			w := send(uverbs.OpRDMAWrite, 1, 0, uverbs.SGE{Addr: src, Length: n, LKey: lk})
			w.SetRDMA(dst, rk)
			sent := sw.Direct.Load()
			post := func() {
				qa.PostSend(w)
				// No Sync of b here: it would take b's batches itself.
				waitFor(t, "packets handed to the held receiver", func() bool { return sw.Direct.Load() > sent })
				// a's engine found b's batches out of its reach: it must
				// go on with its own work, not wait for b.
				synced := make(chan struct{})
				go func() { a.dev.Sync(); close(synced) }()
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
				b.dev.WithLock(post)
			case "receiver taking":
				b.dev.HoldTaking(post)
			}
			if e := poll(t, a.cq); e.Status != uverbs.WCSuccess {
				t.Fatalf("WRITE %+v", e)
			}
			if !bytes.Equal(b.RAM.Mem[dst:dst+n], a.RAM.Mem[src:src+n]) {
				t.Fatal("the target does not hold the source's bytes")
			}
			_, qps := a.dev.Stats()
			if st := qps[qa.QPN]; st.Retransmitted != 0 || st.Timeouts != 0 {
				t.Errorf("packets sent again (a batch left in the queue until a timeout): %+v", st)
			}
			if hold == "free" && b.dev.HelpedBatches() == 0 {
				t.Error("no batch taken by the sender's engine")
			}
		})
	}
}

// TestDirectAcksCoalesced: the responder answers a batch of packets from
// another HCA of the process once (one cumulative ACK for the batch, as
// hardware coalesces ACKs), not once per packet, and every WRITE still
// completes with its data in place.
func TestDirectAcksCoalesced(t *testing.T) {
	checkGoroutines(t)
	sw := fabric.NewSwitch()
	a, b := newHost(t, sw, 1), newHost(t, sw, 2)
	qa, _ := pairRC(t, a, b, defaultRC(), defaultRC())
	const n, size = 32, 64
	src, lk, _ := a.mr(t, n*size, allAccess)
	dst, _, rk := b.mr(t, n*size, allAccess)
	fill(a.RAM.Mem[src:src+n*size], 9)
	clear(b.RAM.Mem[dst : dst+n*size])
	for i := range uint64(n) {
		w := send(uverbs.OpRDMAWrite, i+1, 0, uverbs.SGE{Addr: src + i*size, Length: size, LKey: lk})
		w.SetRDMA(dst+i*size, rk)
		qa.WriteSend(w) // one doorbell for all: the requester sends them in one batch
	}
	qa.RingSend()
	for i := range n {
		if e := poll(t, a.cq); e.Status != uverbs.WCSuccess || e.WRID != uint64(i+1) {
			t.Fatalf("completion %d: %+v", i, e)
		}
	}
	if !bytes.Equal(b.RAM.Mem[dst:dst+n*size], a.RAM.Mem[src:src+n*size]) {
		t.Fatal("the targets do not hold the sources' bytes")
	}
	_, qps := a.dev.Stats()
	if st := qps[qa.QPN]; st.PacketsReceived == 0 || st.PacketsReceived > n/4 {
		t.Errorf("%d ACKs for %d WRITEs sent in one batch, want a few", st.PacketsReceived, n)
	}
}
