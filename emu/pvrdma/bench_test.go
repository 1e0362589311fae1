package pvrdma_test

// Data-path benchmarks: two emulated HCAs driven by the fake driver
// (emu/emutest), joined by the in-process fabric switch, move RC RDMA_WRITE
// and SEND messages with a full send queue, the way perftest's ib_write_bw
// and ib_send_bw do; BenchmarkCopy gives the memory bandwidth of a plain
// copy() of the same sizes for comparison. See docs/performance.md.
//
//	go test -run XXX -bench . -benchmem ./emu/
//
// The benchmark goroutine plays the guest: it keeps the send queue full,
// reposts receive buffers, and waits for the CQ's completion interrupt
// (MSI-X vector 2) when there is nothing to poll, so that it does not take a
// core away from the devices' engines.

import (
	"fmt"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/benchtest"
	"github.com/hcaemu/hcaemu/emu/emutest"
	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/pvrdma"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

const (
	benchSQ   = 128 // send queue depth: WQEs in flight
	benchRQ   = 256 // receive queue depth (> benchSQ: the responder never RNRs)
	benchCQ   = 1024
	benchMTU  = 3 // IB MTU 1024, the active MTU the guests negotiate (1500-byte Ethernet)
	benchWait = 10 * time.Second
)

var benchSizes = []struct {
	name string
	n    int
}{{"4KiB", 4 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}}

// benchHost is one fake guest with its HCA on the switch; irq gets a token
// on every completion interrupt.
type benchHost struct {
	*host
	irq chan struct{}
}

func newBenchHost(tb testing.TB, sw *fabric.Switch, k int) *benchHost {
	tb.Helper()
	return newBenchHostWith(tb, sw, k, 64<<20, nil)
}

// newBenchHostWith is newBenchHost with ramSize bytes of guest RAM and, when
// caps is not nil, those capabilities.
func newBenchHostWith(tb testing.TB, sw *fabric.Switch, k, ramSize int, caps *abi.DeviceCaps) *benchHost {
	tb.Helper()
	mac := [6]byte{0x00, 0x50, 0x56, 0, 0, byte(k)}
	drv := emutest.New(ramSize)
	irq := make(chan struct{}, 1)
	msix := func(v int) {
		drv.IRQ.Raise(v)
		if v == abi.IntrVectorCQ {
			select {
			case irq <- struct{}{}:
			default:
			}
		}
	}
	dev := pvrdma.New(pvrdma.Config{Name: fmt.Sprintf("hca%d", k), Mem: drv.RAM, MSIX: msix,
		Log: slog.New(slog.DiscardHandler), MAC: mac, Attach: attachTo(sw, "hca", mac), Caps: caps})
	tb.Cleanup(dev.Close)
	drv.Dev = dev
	h := &host{rig: &rig{Driver: drv, dev: dev}, mac: mac, ip: netip.AddrFrom4([4]byte{10, 0, 0, byte(k)})}
	must := func(_ []byte, err error) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
	}
	if err := drv.Probe(); err != nil {
		tb.Fatal(err)
	}
	v4 := h.ip.As16()
	v4[10], v4[11] = 0xff, 0xff
	must(nil, drv.BindGID(1, v4))
	pd, err := drv.CreatePD(0)
	must(nil, err)
	h.pd = pd
	if h.cq, err = drv.CreateCQ(0, benchCQ); err != nil {
		tb.Fatal(err)
	}
	return &benchHost{host: h, irq: irq}
}

// ackCQNotifications consumes the CQ notification ring, as the driver's
// vector-2 handler does, so that the device can keep notifying.
func (h *benchHost) ackCQNotifications() {
	st := h.CQRing[0]
	h.Put32(st+uverbs.RxConsHead, h.Get32(st+uverbs.RxProdTail))
}

// buffer registers n bytes of guest memory with every access right.
func (h *benchHost) buffer(tb testing.TB, n int) (addr uint64, lkey, rkey uint32) {
	tb.Helper()
	pages, dir := h.Buffer((n + 4095) / 4096)
	mr, err := h.CreateMR(abi.CmdCreateMR{Start: pages[0], Length: uint64(n), PdirDMA: dir,
		PDHandle: h.pd, AccessFlags: allAccess, NChunks: uint32(len(pages))})
	if err != nil {
		tb.Fatal(err)
	}
	return pages[0], mr.LKey, mr.RKey
}

// benchPair connects an RC QP on a to one on b (the same attributes as
// perftest: PMTU 1024, timeout 14, retry 7, RNR retry 7).
func benchPair(tb testing.TB, a, b *benchHost) (qa, qb *emutest.QP) {
	tb.Helper()
	return benchPairWR(tb, a, b, benchSQ, benchRQ)
}

// benchPairWR is benchPair with sendWR and recvWR entries in the queues.
func benchPairWR(tb testing.TB, a, b *benchHost, sendWR, recvWR uint32) (qa, qb *emutest.QP) {
	tb.Helper()
	mk := func(h *benchHost) *emutest.QP {
		q, err := h.CreateQP(emutest.QPSpec{PD: h.pd, SendCQ: h.cq, RecvCQ: h.cq, Type: abi.QPTypeRC,
			SendWR: sendWR, RecvWR: recvWR, SendSGE: 1, RecvSGE: 1})
		if err != nil {
			tb.Fatal(err)
		}
		return q
	}
	qa, qb = mk(a), mk(b)
	up := func(h *benchHost, q *emutest.QP, p *benchHost, peer *emutest.QP) {
		if err := q.Modify(abi.AttrState|abi.AttrPKeyIndex|abi.AttrPort|abi.AttrAccessFlags,
			abi.QPAttr{State: abi.QPStateInit, PortNum: 1, AccessFlags: allAccess}); err != nil {
			tb.Fatal(err)
		}
		rtr := abi.QPAttr{State: abi.QPStateRTR, PathMTU: benchMTU, DestQPN: peer.QPN, RQPSN: 0x100 + peer.QPN, MaxDestRdAtomic: 16, MinRNRTimer: 1}
		rtr.AH.DGID = p.ip.As16()
		rtr.AH.DGID[10], rtr.AH.DGID[11] = 0xff, 0xff
		rtr.AH.SGIDIndex, rtr.AH.HopLimit, rtr.AH.AHFlags, rtr.AH.PortNum, rtr.AH.DMAC = 1, 64, 1, 1, p.mac
		if err := q.Modify(abi.AttrState|abi.AttrAV|abi.AttrPathMTU|abi.AttrDestQPN|abi.AttrRQPSN|abi.AttrMaxDestRdAtomic|abi.AttrMinRNRTimer, rtr); err != nil {
			tb.Fatal(err)
		}
		rts := abi.QPAttr{State: abi.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: 0x100 + q.QPN, MaxRdAtomic: 16}
		if err := q.Modify(abi.AttrState|abi.AttrTimeout|abi.AttrRetryCnt|abi.AttrRNRRetry|abi.AttrSQPSN|abi.AttrMaxQPRdAtomic, rts); err != nil {
			tb.Fatal(err)
		}
	}
	up(a, qa, b, qb)
	up(b, qb, a, qa)
	return qa, qb
}

// streamer keeps b.N messages of one kind flowing from a to b.
type streamer struct {
	a, b   *benchHost
	qa, qb *emutest.QP
	send   uverbs.SendWQE
	recv   uverbs.RecvWQE
	isSend bool
	timer  *time.Timer
}

func newStreamer(b *testing.B, op uint32, size int) *streamer {
	b.Helper()
	sw := fabric.NewSwitch()
	ha, hb := newBenchHost(b, sw, 1), newBenchHost(b, sw, 2)
	qa, qb := benchPair(b, ha, hb)
	src, lkA, _ := ha.buffer(b, size)
	dst, lkB, rkB := hb.buffer(b, size)
	fill(ha.RAM.Mem[src:src+uint64(size)], 3)
	s := &streamer{a: ha, b: hb, qa: qa, qb: qb, isSend: op == uverbs.OpSend, timer: time.NewTimer(benchWait)}
	s.send = uverbs.SendWQE{Opcode: op, SendFlags: uverbs.SendSignaled, NumSGE: 1,
		SGE: []uverbs.SGE{{Addr: src, Length: uint32(size), LKey: lkA}}}
	s.send.SetRDMA(dst, rkB)
	s.recv = uverbs.RecvWQE{NumSGE: 1, SGE: []uverbs.SGE{{Addr: dst, Length: uint32(size), LKey: lkB}}}
	if s.isSend {
		for i := 0; i < benchRQ; i++ {
			s.qb.PostRecv(s.recv)
		}
	}
	return s
}

// run sends n messages, at most benchSQ outstanding, and waits for all of
// them to complete.
func (s *streamer) run(b *testing.B, n int) {
	if err := s.stream(n); err != nil {
		b.Fatal(err)
	}
}

// stream is run for any goroutine: it returns what went wrong.
func (s *streamer) stream(n int) error {
	posted, done := 0, 0
	for done < n {
		for posted < n && posted-done < benchSQ {
			s.send.WRID = uint64(posted)
			s.qa.PostSend(s.send)
			posted++
		}
		got, err := s.reap()
		if err != nil {
			return err
		}
		if got == 0 {
			// Nothing to poll: arm the CQ, look once more (a CQE that landed
			// before the arm raises no interrupt), then wait for one.
			s.a.cq.Arm(false)
			if got, err = s.reap(); err != nil {
				return err
			}
			if got == 0 {
				s.timer.Reset(benchWait)
				select {
				case <-s.a.irq:
					s.a.ackCQNotifications()
				case <-s.timer.C:
					return fmt.Errorf("no completion in %v: %d of %d done, %d posted", benchWait, done, n, posted)
				}
				s.timer.Stop()
				if got, err = s.reap(); err != nil {
					return err
				}
			}
		}
		done += got
	}
	return nil
}

// reap polls the sender's CQ and, for SEND, reposts the receive buffers
// the responder consumed. It returns the number of send completions.
func (s *streamer) reap() (int, error) {
	if s.isSend {
		for {
			e, ok := s.b.cq.Poll()
			if !ok {
				break
			}
			if e.Status != uverbs.WCSuccess || e.Opcode != uverbs.WCRecv {
				return 0, fmt.Errorf("receive completion %+v", e)
			}
			s.qb.PostRecv(s.recv)
		}
	}
	n := 0
	for {
		e, ok := s.a.cq.Poll()
		if !ok {
			return n, nil
		}
		if e.Status != uverbs.WCSuccess {
			return n, fmt.Errorf("send completion %+v", e)
		}
		n++
	}
}

func benchStream(b *testing.B, op uint32, size int) {
	s := newStreamer(b, op, size)
	// The yardstick, in the same run: copy() of the same size between the
	// same two guest buffers, and the data path's rate as a share of it.
	src, dst := s.send.SGE[0].Addr, s.recv.SGE[0].Addr
	benchtest.Stream(b, size, func(n int) { s.run(b, n) }, s.b.RAM.Mem[dst:dst+uint64(size)], s.a.RAM.Mem[src:src+uint64(size)])
}

// BenchmarkRCWrite is ib_write_bw: RC RDMA_WRITE, 128 WQEs in flight, every
// one signaled.
func BenchmarkRCWrite(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) { benchStream(b, uverbs.OpRDMAWrite, sz.n) })
	}
}

// BenchmarkRCSend is ib_send_bw: RC SEND into posted receive buffers.
func BenchmarkRCSend(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) { benchStream(b, uverbs.OpSend, sz.n) })
	}
}

// BenchmarkRCMessageRate is the small-message rate: 64-byte messages, one
// packet each, so the cost is per packet and per WQE, not per byte.
func BenchmarkRCMessageRate(b *testing.B) {
	b.Run("WRITE64", func(b *testing.B) { benchStream(b, uverbs.OpRDMAWrite, 64) })
	b.Run("SEND64", func(b *testing.B) { benchStream(b, uverbs.OpSend, 64) })
}

// BenchmarkCopy is the yardstick: one copy() of the same sizes between two
// buffers. The data path copies each byte twice (guest memory into the
// frame, frame into the peer's guest memory), so its ceiling is about half
// of this.
func BenchmarkCopy(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			src, dst := make([]byte, sz.n), make([]byte, sz.n)
			fill(src, 1)
			b.SetBytes(int64(sz.n))
			b.ResetTimer()
			for range b.N {
				copy(dst, src)
			}
		})
	}
}
