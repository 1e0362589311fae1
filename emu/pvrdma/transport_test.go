package pvrdma_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/emutest"
	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/pvrdma"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// host is one guest with its HCA on the shared fabric.
type host struct {
	*rig
	ip   netip.Addr
	mac  [6]byte
	pd   uint32
	lkey uint32
	cq   *emutest.CQ
}

func attachTo(sw *fabric.Switch, name string, mac [6]byte) pvrdma.Attach {
	return func(rx func([]byte) bool) pvrdma.Port { return sw.Attach(name, mac, rx) }
}

// newHost probes an HCA on sw whose port has IPv4 10.0.0.k (GID index 1)
// and a link-local GID (index 0), with a kernel PD, its DMA lkey and a CQ.
func newHost(t *testing.T, sw *fabric.Switch, k int) *host {
	t.Helper()
	return newHostRAM(t, sw, k, 64<<20)
}

func newHostRAM(t *testing.T, sw *fabric.Switch, k int, ram int) *host {
	t.Helper()
	return newHostHook(t, sw, k, ram, nil)
}

// newHostHook is newHostRAM with a fault hook.
func newHostHook(t *testing.T, sw *fabric.Switch, k int, ram int, hook hca.FaultHook) *host {
	t.Helper()
	return newHostConfig(t, sw, k, ram, func(cfg *pvrdma.Config) { cfg.Faults = hook })
}

// newHostConfig is newHostRAM with the device's configuration adjusted by
// adjust (a fault hook, strict mode, a logger).
func newHostConfig(t *testing.T, sw *fabric.Switch, k int, ram int, adjust func(*pvrdma.Config)) *host {
	t.Helper()
	return newHostWith(t, sw, k, ram, func(cfg *pvrdma.Config, _ *emutest.Driver) { adjust(cfg) }, true)
}

// newHostWith probes an HCA as newHost does, ram bytes of guest RAM, its
// configuration adjusted by adjust (which may wrap the driver's RAM as the
// device's memory); dmaMR: the kernel PD gets its DMA region (h.lkey).
func newHostWith(t *testing.T, sw *fabric.Switch, k int, ram int, adjust func(*pvrdma.Config, *emutest.Driver), dmaMR bool) *host {
	t.Helper()
	mac := [6]byte{0x00, 0x50, 0x56, 0, 0, byte(k)}
	drv := emutest.New(ram)
	// Configured with another MAC than the one of the default GID below:
	// frames must carry the default GID's (the vmxnet3's).
	cfgMAC := mac
	cfgMAC[3] = 0xEE
	cfg := pvrdma.Config{Name: "hca" + string(rune('0'+k)), Mem: drv.RAM, MSIX: drv.IRQ.Raise,
		Log: testLog(t), MAC: cfgMAC, Attach: attachTo(sw, "hca"+string(rune('0'+k)), mac)}
	adjust(&cfg, drv)
	dev := pvrdma.New(cfg)
	t.Cleanup(dev.Close)
	drv.Dev = dev
	h := &host{rig: &rig{Driver: drv, dev: dev}, mac: mac, ip: netip.AddrFrom4([4]byte{10, 0, 0, byte(k)})}
	if err := drv.Probe(); err != nil {
		t.Fatal(err)
	}
	ll := [16]byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x50, 0x56, 0xff, 0xfe, 0, 0, byte(k)}
	v4 := h.ip.As16()
	v4[10], v4[11] = 0xff, 0xff
	for i, g := range [][16]byte{ll, v4} {
		if err := drv.BindGID(uint32(i), g); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	if h.pd, err = drv.CreatePD(0); err != nil {
		t.Fatal(err)
	}
	if dmaMR {
		mr, err := drv.CreateMR(abi.CmdCreateMR{PDHandle: h.pd, AccessFlags: abi.AccessLocalWrite, Flags: abi.MRFlagDMA})
		if err != nil {
			t.Fatal(err)
		}
		h.lkey = mr.LKey
	}
	if h.cq, err = drv.CreateCQ(0, 1024); err != nil {
		t.Fatal(err)
	}
	return h
}

// mr registers n bytes of fresh guest memory (IOVA = GPA) with access and
// returns its GPA and keys.
func (h *host) mr(t *testing.T, n int, access uint32) (addr uint64, lkey, rkey uint32) {
	t.Helper()
	pages, dir := h.Buffer((n + 4095) / 4096)
	addr = pages[0]
	mr, err := h.CreateMR(abi.CmdCreateMR{Start: addr, Length: uint64(n), PdirDMA: dir,
		PDHandle: h.pd, AccessFlags: access, NChunks: uint32(len(pages))})
	if err != nil {
		t.Fatal(err)
	}
	return addr, mr.LKey, mr.RKey
}

func (h *host) qp(t *testing.T, typ uint8, depth uint32) *emutest.QP {
	t.Helper()
	q, err := h.CreateQP(emutest.QPSpec{PD: h.pd, SendCQ: h.cq, RecvCQ: h.cq, Type: typ,
		SendWR: depth, RecvWR: depth, SendSGE: 4, RecvSGE: 4})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

const allAccess = 1 | 2 | 4 | 8

type rcOpts struct {
	rnrRetry, retryCnt, timeout, minRNR uint8
	access                              uint32
	destQPN                             uint32
	pathMTU                             uint32 // enum pvrdma_mtu; 0: 1024 (3)
}

func defaultRC() rcOpts {
	// Timeout 18 (4.096 us << 18, about 1.07 s): the links in these tests
	// lose nothing, so the retransmission timer only fires when the machine
	// stalls the responder; at 14 (67 ms) a 12 MiB WRITE under the race
	// detector on a loaded machine ran out of retries. Tests of the timer
	// set their own (TestRCErrors, the lossy-link tests).
	return rcOpts{rnrRetry: 7, retryCnt: 7, timeout: 18, minRNR: 1, access: allAccess}
}

// connect brings local QP q of h to RTS towards QP peer of p.
func connect(t *testing.T, h *host, q *emutest.QP, p *host, peer *emutest.QP, o rcOpts) {
	t.Helper()
	dest := peer.QPN
	if o.destQPN != 0 {
		dest = o.destQPN
	}
	if err := q.Modify(abi.AttrState|abi.AttrPKeyIndex|abi.AttrPort|abi.AttrAccessFlags,
		abi.QPAttr{State: abi.QPStateInit, PortNum: 1, AccessFlags: o.access}); err != nil {
		t.Fatal(err)
	}
	pmtu := o.pathMTU
	if pmtu == 0 {
		pmtu = abi.MTU1024
	}
	rtr := abi.QPAttr{State: abi.QPStateRTR, PathMTU: pmtu, DestQPN: dest, RQPSN: 0x100 + peer.QPN, MaxDestRdAtomic: 16, MinRNRTimer: o.minRNR}
	rtr.AH.DGID = p.ip.As16()
	rtr.AH.DGID[10], rtr.AH.DGID[11] = 0xff, 0xff
	rtr.AH.SGIDIndex, rtr.AH.HopLimit, rtr.AH.AHFlags, rtr.AH.PortNum, rtr.AH.DMAC = 1, 64, 1, 1, p.mac
	if err := q.Modify(abi.AttrState|abi.AttrAV|abi.AttrPathMTU|abi.AttrDestQPN|abi.AttrRQPSN|abi.AttrMaxDestRdAtomic|abi.AttrMinRNRTimer, rtr); err != nil {
		t.Fatal(err)
	}
	rts := abi.QPAttr{State: abi.QPStateRTS, Timeout: o.timeout, RetryCnt: o.retryCnt, RNRRetry: o.rnrRetry, SQPSN: 0x100 + q.QPN, MaxRdAtomic: 16}
	if err := q.Modify(abi.AttrState|abi.AttrTimeout|abi.AttrRetryCnt|abi.AttrRNRRetry|abi.AttrSQPSN|abi.AttrMaxQPRdAtomic, rts); err != nil {
		t.Fatal(err)
	}
}

// pairRC connects a fresh RC QP on a with one on b.
func pairRC(t *testing.T, a, b *host, oa, ob rcOpts) (*emutest.QP, *emutest.QP) {
	qa, qb := a.qp(t, abi.QPTypeRC, 64), b.qp(t, abi.QPTypeRC, 64)
	connect(t, a, qa, b, qb, oa)
	connect(t, b, qb, a, qa, ob)
	return qa, qb
}

// poll waits (bounded) for the next CQE of cq, letting every device run.
func poll(t *testing.T, cq *emutest.CQ, hosts ...*host) uverbs.CQE {
	t.Helper()
	// The bound only turns a lost completion into a failure: a 12 MiB
	// transfer under the race detector on a loaded machine takes seconds.
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		for _, h := range hosts {
			h.dev.Sync()
		}
		if e, ok := cq.Poll(); ok {
			return e
		}
		time.Sleep(200 * time.Microsecond)
	}
	t.Fatalf("no completion on CQ %d", cq.Handle)
	return uverbs.CQE{}
}

// noCQE checks that nothing more completes once everything is quiet.
func noCQE(t *testing.T, cq *emutest.CQ, hosts ...*host) {
	t.Helper()
	for i := 0; i < 3; i++ {
		for _, h := range hosts {
			h.dev.Sync()
		}
	}
	if e, ok := cq.Poll(); ok {
		t.Fatalf("unexpected CQE %+v", e)
	}
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) + seed
	}
}

func send(op uint32, wrid uint64, flags uint32, sges ...uverbs.SGE) uverbs.SendWQE {
	return uverbs.SendWQE{WRID: wrid, Opcode: op, SendFlags: flags | uverbs.SendSignaled, SGE: sges}
}

func TestRCOpcodes(t *testing.T) {
	checkGoroutines(t)
	sw := fabric.NewSwitch()
	a, b := newHost(t, sw, 1), newHost(t, sw, 2)
	qa, qb := pairRC(t, a, b, defaultRC(), defaultRC())
	const n = 10000 // ten packets at PMTU 1024
	srcA, lkA, _ := a.mr(t, n, allAccess)
	dstB, lkB, rkB := b.mr(t, n, allAccess)
	fill(a.RAM.Mem[srcA:srcA+n], 1)

	cases := []struct {
		name  string
		size  uint32
		op    uint32
		recv  bool
		wantA uint32 // sender completion opcode
		wantB uint32 // receiver completion opcode (if recv)
		imm   bool
	}{
		{"SEND small", 64, uverbs.OpSend, true, uverbs.WCSend, uverbs.WCRecv, false},
		{"SEND multi-packet", n, uverbs.OpSend, true, uverbs.WCSend, uverbs.WCRecv, false},
		{"SEND zero", 0, uverbs.OpSend, true, uverbs.WCSend, uverbs.WCRecv, false},
		{"SEND_WITH_IMM", 3000, uverbs.OpSendImm, true, uverbs.WCSend, uverbs.WCRecv, true},
		{"RDMA_WRITE", n, uverbs.OpRDMAWrite, false, uverbs.WCRDMAWrite, 0, false},
		{"RDMA_WRITE small", 17, uverbs.OpRDMAWrite, false, uverbs.WCRDMAWrite, 0, false},
		{"RDMA_WRITE_WITH_IMM", 2048, uverbs.OpRDMAWriteImm, true, uverbs.WCRDMAWrite, uverbs.WCRecvRDMAImm, true},
		{"RDMA_WRITE_WITH_IMM one packet", 100, uverbs.OpRDMAWriteImm, true, uverbs.WCRDMAWrite, uverbs.WCRecvRDMAImm, true},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clear(b.RAM.Mem[dstB : dstB+n])
			fill(a.RAM.Mem[srcA:srcA+n], byte(i))
			if c.recv {
				qb.PostRecv(uverbs.RecvWQE{WRID: 100 + uint64(i), SGE: []uverbs.SGE{{Addr: dstB, Length: n, LKey: lkB}}})
			}
			w := send(c.op, uint64(i), 0, uverbs.SGE{Addr: srcA, Length: c.size, LKey: lkA})
			if c.imm {
				w.Ex = [4]byte{0xde, 0xad, 0xbe, byte(i)}
			}
			w.SetRDMA(dstB, rkB)
			qa.PostSend(w)
			e := poll(t, a.cq, a, b)
			if e.Status != uverbs.WCSuccess || e.Opcode != c.wantA || e.WRID != uint64(i) || e.QP != uint64(qa.Handle) {
				t.Fatalf("sender CQE %+v", e)
			}
			if c.recv {
				r := poll(t, b.cq, a, b)
				want := c.size
				if r.Status != uverbs.WCSuccess || r.Opcode != c.wantB || r.ByteLen != want || r.WRID != 100+uint64(i) {
					t.Fatalf("receiver CQE %+v", r)
				}
				if c.imm && (r.ImmData != w.Ex || r.WCFlags&uverbs.WCFlagImm == 0) {
					t.Errorf("immediate %x flags %#x", r.ImmData, r.WCFlags)
				}
			}
			if !bytes.Equal(a.RAM.Mem[srcA:srcA+uint64(c.size)], b.RAM.Mem[dstB:dstB+uint64(c.size)]) {
				t.Fatalf("data differs")
			}
			noCQE(t, b.cq, a, b)
		})
	}

	t.Run("RDMA_READ", func(t *testing.T) {
		fill(b.RAM.Mem[dstB:dstB+n], 77)
		clear(a.RAM.Mem[srcA : srcA+n])
		w := send(uverbs.OpRDMARead, 50, 0, uverbs.SGE{Addr: srcA, Length: 6000, LKey: lkA})
		w.SetRDMA(dstB, rkB)
		qa.PostSend(w)
		e := poll(t, a.cq, a, b)
		if e.Status != 0 || e.Opcode != uverbs.WCRDMARead || e.ByteLen != 6000 {
			t.Fatalf("READ CQE %+v", e)
		}
		if !bytes.Equal(a.RAM.Mem[srcA:srcA+6000], b.RAM.Mem[dstB:dstB+6000]) {
			t.Fatal("READ data differs")
		}
	})
	t.Run("atomics", func(t *testing.T) {
		binary.LittleEndian.PutUint64(b.RAM.Mem[dstB:], 40)
		w := send(uverbs.OpAtomicFetchAdd, 60, 0, uverbs.SGE{Addr: srcA, Length: 8, LKey: lkA})
		w.SetAtomic(dstB, 2, 0, rkB)
		qa.PostSend(w)
		e := poll(t, a.cq, a, b)
		if e.Status != 0 || e.Opcode != uverbs.WCFetchAdd || binary.LittleEndian.Uint64(a.RAM.Mem[srcA:]) != 40 || binary.LittleEndian.Uint64(b.RAM.Mem[dstB:]) != 42 {
			t.Fatalf("FETCH_ADD %+v orig %d now %d", e, binary.LittleEndian.Uint64(a.RAM.Mem[srcA:]), binary.LittleEndian.Uint64(b.RAM.Mem[dstB:]))
		}
		w = send(uverbs.OpAtomicCmpSwp, 61, 0, uverbs.SGE{Addr: srcA, Length: 8, LKey: lkA})
		w.SetAtomic(dstB, 42, 99, rkB)
		qa.PostSend(w)
		e = poll(t, a.cq, a, b)
		if e.Status != 0 || e.Opcode != uverbs.WCCompSwap || binary.LittleEndian.Uint64(a.RAM.Mem[srcA:]) != 42 || binary.LittleEndian.Uint64(b.RAM.Mem[dstB:]) != 99 {
			t.Fatalf("CMP_SWP %+v", e)
		}
		w.SetAtomic(dstB, 1, 5, rkB) // compare fails: value stays
		qa.PostSend(w)
		e = poll(t, a.cq, a, b)
		if e.Status != 0 || binary.LittleEndian.Uint64(a.RAM.Mem[srcA:]) != 99 || binary.LittleEndian.Uint64(b.RAM.Mem[dstB:]) != 99 {
			t.Fatalf("failed CMP_SWP %+v", e)
		}
	})
	t.Run("multi-SGE gather and scatter", func(t *testing.T) {
		fill(a.RAM.Mem[srcA:srcA+n], 9)
		clear(b.RAM.Mem[dstB : dstB+n])
		qb.PostRecv(uverbs.RecvWQE{WRID: 7, SGE: []uverbs.SGE{{Addr: dstB, Length: 1000, LKey: lkB}, {Addr: dstB + 5000, Length: 4000, LKey: lkB}}})
		qa.PostSend(send(uverbs.OpSend, 8, 0, uverbs.SGE{Addr: srcA, Length: 300, LKey: lkA}, uverbs.SGE{Addr: srcA + 2000, Length: 2700, LKey: lkA}))
		poll(t, a.cq, a, b)
		r := poll(t, b.cq, a, b)
		if r.ByteLen != 3000 {
			t.Fatalf("recv %+v", r)
		}
		want := append(append([]byte{}, a.RAM.Mem[srcA:srcA+300]...), a.RAM.Mem[srcA+2000:srcA+4700]...)
		got := append(append([]byte{}, b.RAM.Mem[dstB:dstB+1000]...), b.RAM.Mem[dstB+5000:dstB+7000]...)
		if !bytes.Equal(want, got) {
			t.Fatal("scatter/gather data differs")
		}
	})
	t.Run("unsignaled", func(t *testing.T) {
		w := uverbs.SendWQE{WRID: 90, Opcode: uverbs.OpRDMAWrite, SGE: []uverbs.SGE{{Addr: srcA, Length: 8, LKey: lkA}}}
		w.SetRDMA(dstB, rkB)
		qa.PostSend(w)
		w2 := send(uverbs.OpRDMAWrite, 91, 0, uverbs.SGE{Addr: srcA, Length: 8, LKey: lkA})
		w2.SetRDMA(dstB, rkB)
		qa.PostSend(w2)
		if e := poll(t, a.cq, a, b); e.WRID != 91 {
			t.Fatalf("unsignaled WQE completed: %+v", e)
		}
	})
}

func TestRCErrors(t *testing.T) {
	checkGoroutines(t)
	sw := fabric.NewSwitch()
	a, b := newHost(t, sw, 1), newHost(t, sw, 2)
	srcA, lkA, _ := a.mr(t, 8192, allAccess)
	dstB, lkB, rkB := b.mr(t, 8192, allAccess)
	_, _, rkRO := b.mr(t, 4096, 1|4) // local write + remote read only

	expect := func(t *testing.T, h *host, status uint32, hosts ...*host) uverbs.CQE {
		t.Helper()
		e := poll(t, h.cq, hosts...)
		if e.Status != status {
			t.Fatalf("status %d, want %d (%+v)", e.Status, status, e)
		}
		return e
	}
	t.Run("RNR then receive", func(t *testing.T) {
		qa, qb := pairRC(t, a, b, defaultRC(), defaultRC())
		qa.PostSend(send(uverbs.OpSend, 1, 0, uverbs.SGE{Addr: srcA, Length: 100, LKey: lkA}))
		noCQE(t, a.cq, a, b) // RNR NAKs, retried forever (rnr_retry 7)
		qb.PostRecv(uverbs.RecvWQE{WRID: 2, SGE: []uverbs.SGE{{Addr: dstB, Length: 100, LKey: lkB}}})
		expect(t, a, uverbs.WCSuccess, a, b)
		expect(t, b, uverbs.WCSuccess, a, b)
	})
	t.Run("RNR retries exhausted", func(t *testing.T) {
		o := defaultRC()
		o.rnrRetry = 1
		qa, qb := pairRC(t, a, b, o, defaultRC())
		_ = qb
		qa.PostSend(send(uverbs.OpSend, 3, 0, uverbs.SGE{Addr: srcA, Length: 100, LKey: lkA}))
		expect(t, a, uverbs.WCRNRRetryExc, a, b)
	})
	t.Run("remote access error", func(t *testing.T) {
		qa, _ := pairRC(t, a, b, defaultRC(), defaultRC())
		w := send(uverbs.OpRDMAWrite, 4, 0, uverbs.SGE{Addr: srcA, Length: 100, LKey: lkA})
		w.SetRDMA(dstB, rkRO)
		qa.PostSend(w)
		expect(t, a, uverbs.WCRemAccessErr, a, b)
		// The requester's QP is in ERR: the next WQE is flushed.
		qa.PostSend(send(uverbs.OpSend, 5, 0, uverbs.SGE{Addr: srcA, Length: 1, LKey: lkA}))
		expect(t, a, uverbs.WCWRFlushErr, a, b)
	})
	t.Run("rkey outside MR", func(t *testing.T) {
		qa, _ := pairRC(t, a, b, defaultRC(), defaultRC())
		w := send(uverbs.OpRDMARead, 6, 0, uverbs.SGE{Addr: srcA, Length: 100, LKey: lkA})
		w.SetRDMA(dstB+8150, rkB)
		qa.PostSend(w)
		expect(t, a, uverbs.WCRemAccessErr, a, b)
	})
	t.Run("QP without remote write", func(t *testing.T) {
		ob := defaultRC()
		ob.access = 1
		qa, _ := pairRC(t, a, b, defaultRC(), ob)
		w := send(uverbs.OpRDMAWrite, 7, 0, uverbs.SGE{Addr: srcA, Length: 10, LKey: lkA})
		w.SetRDMA(dstB, rkB)
		qa.PostSend(w)
		expect(t, a, uverbs.WCRemInvReqErr, a, b)
	})
	t.Run("message larger than receive buffer", func(t *testing.T) {
		qa, qb := pairRC(t, a, b, defaultRC(), defaultRC())
		qb.PostRecv(uverbs.RecvWQE{WRID: 8, SGE: []uverbs.SGE{{Addr: dstB, Length: 10, LKey: lkB}}})
		qa.PostSend(send(uverbs.OpSend, 9, 0, uverbs.SGE{Addr: srcA, Length: 100, LKey: lkA}))
		expect(t, a, uverbs.WCRemInvReqErr, a, b)
		expect(t, b, uverbs.WCLocLenErr, a, b)
	})
	t.Run("retries exhausted", func(t *testing.T) {
		o := defaultRC()
		o.timeout, o.retryCnt, o.destQPN = 1, 2, 999 // nobody answers
		qa := a.qp(t, abi.QPTypeRC, 4)
		connect(t, a, qa, b, qa, o)
		qa.PostSend(send(uverbs.OpSend, 10, 0, uverbs.SGE{Addr: srcA, Length: 10, LKey: lkA}))
		expect(t, a, uverbs.WCRetryExcErr, a, b)
	})
	t.Run("local errors", func(t *testing.T) {
		qa, qb := pairRC(t, a, b, defaultRC(), defaultRC())
		_ = qb
		qa.PostSend(uverbs.SendWQE{WRID: 11, Opcode: uverbs.OpLSO, SendFlags: uverbs.SendSignaled})
		expect(t, a, uverbs.WCLocQPOpErr, a, b)
		qa2, _ := pairRC(t, a, b, defaultRC(), defaultRC())
		qa2.PostSend(send(uverbs.OpSend, 12, 0, uverbs.SGE{Addr: srcA, Length: 10, LKey: lkB ^ 0x100}))
		expect(t, a, uverbs.WCLocProtErr, a, b)
		qa3, _ := pairRC(t, a, b, defaultRC(), defaultRC())
		qa3.PostSend(send(uverbs.OpSend, 13, 0, uverbs.SGE{Addr: srcA + 8000, Length: 400, LKey: lkA}))
		expect(t, a, uverbs.WCLocProtErr, a, b)
		qa4, _ := pairRC(t, a, b, defaultRC(), defaultRC())
		w := send(uverbs.OpSend, 14, 0)
		w.NumSGE = 5 // more than the QP's 4
		qa4.PostSend(w)
		expect(t, a, uverbs.WCLocLenErr, a, b)
		// Other QPs keep working.
		qa5, qb5 := pairRC(t, a, b, defaultRC(), defaultRC())
		qb5.PostRecv(uverbs.RecvWQE{WRID: 15, SGE: []uverbs.SGE{{Addr: dstB, Length: 100, LKey: lkB}}})
		qa5.PostSend(send(uverbs.OpSend, 16, 0, uverbs.SGE{Addr: srcA, Length: 100, LKey: lkA}))
		expect(t, a, uverbs.WCSuccess, a, b)
		expect(t, b, uverbs.WCSuccess, a, b)
	})
	t.Run("ring index out of range", func(t *testing.T) {
		qa, _ := pairRC(t, a, b, defaultRC(), defaultRC())
		qa.SetSQProd(0xFFFF)
		for i := 0; i < 3; i++ {
			a.dev.Sync()
		}
		ev := a.AsyncEvents()
		found := false
		for _, e := range ev {
			if e[0] == abi.EventQPFatal && e[1] == qa.Handle {
				found = true
			}
		}
		if !found {
			t.Fatalf("no QP_FATAL for QP %d in %v", qa.Handle, ev)
		}
	})
	t.Run("flush on ERR", func(t *testing.T) {
		qa, qb := pairRC(t, a, b, defaultRC(), defaultRC())
		_ = qa
		for i := 0; i < 3; i++ {
			qb.PostRecv(uverbs.RecvWQE{WRID: 20 + uint64(i), SGE: []uverbs.SGE{{Addr: dstB, Length: 10, LKey: lkB}}})
		}
		if err := qb.Modify(abi.AttrState, abi.QPAttr{State: abi.QPStateErr}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			e := expect(t, b, uverbs.WCWRFlushErr, a, b)
			if e.WRID != 20+uint64(i) || e.Opcode != uverbs.WCRecv {
				t.Fatalf("flush order %+v", e)
			}
		}
	})
}

func TestUDAndGSI(t *testing.T) {
	checkGoroutines(t)
	sw := fabric.NewSwitch()
	a, b := newHost(t, sw, 1), newHost(t, sw, 2)
	srcA, lkA, _ := a.mr(t, 4096, allAccess)
	dstB, lkB, _ := b.mr(t, 4096, allAccess)
	fill(a.RAM.Mem[srcA:srcA+4096], 5)
	ud := func(h *host, qkey uint32) *emutest.QP {
		q := h.qp(t, abi.QPTypeUD, 16)
		if err := q.Modify(abi.AttrState|abi.AttrPKeyIndex|abi.AttrPort|abi.AttrQKey, abi.QPAttr{State: 1, PortNum: 1, QKey: qkey}); err != nil {
			t.Fatal(err)
		}
		q.Modify(abi.AttrState, abi.QPAttr{State: 2})
		q.Modify(abi.AttrState|abi.AttrSQPSN, abi.QPAttr{State: 3})
		return q
	}
	qa, qb := ud(a, 0x1111), ud(b, 0x1111)
	av := uverbs.AV{PortPD: 1<<24 | a.pd, GIDIndex: 1, HopLimit: 64, DMAC: b.mac}
	av.DGID = b.ip.As16()
	av.DGID[10], av.DGID[11] = 0xff, 0xff
	qb.PostRecv(uverbs.RecvWQE{WRID: 1, SGE: []uverbs.SGE{{Addr: dstB, Length: 2048, LKey: lkB}}})
	w := send(uverbs.OpSendImm, 2, 0, uverbs.SGE{Addr: srcA, Length: 500, LKey: lkA})
	w.Ex = [4]byte{1, 2, 3, 4}
	w.SetUD(qb.QPN, 0x1111, av)
	qa.PostSend(w)
	if e := poll(t, a.cq, a, b); e.Status != 0 || e.Opcode != uverbs.WCSend {
		t.Fatalf("UD send %+v", e)
	}
	r := poll(t, b.cq, a, b)
	if r.Status != 0 || r.ByteLen != 540 || r.SrcQP != qa.QPN || r.WCFlags&uverbs.WCFlagGRH == 0 || r.ImmData != w.Ex || r.NetworkHdrType != 1 {
		t.Fatalf("UD recv %+v", r)
	}
	if !bytes.Equal(b.RAM.Mem[dstB+40:dstB+540], a.RAM.Mem[srcA:srcA+500]) {
		t.Fatal("UD payload differs")
	}
	grh := b.RAM.Mem[dstB : dstB+40]
	if grh[20] != 0x45 || !bytes.Equal(grh[32:36], []byte{10, 0, 0, 1}) || !bytes.Equal(grh[36:40], []byte{10, 0, 0, 2}) {
		t.Fatalf("GRH area % x", grh)
	}
	// Wrong Q_Key: dropped.
	qb.PostRecv(uverbs.RecvWQE{WRID: 3, SGE: []uverbs.SGE{{Addr: dstB, Length: 2048, LKey: lkB}}})
	w.SetUD(qb.QPN, 0x2222, av)
	qa.PostSend(w)
	poll(t, a.cq, a, b)
	noCQE(t, b.cq, a, b)
	// GSI: QP1 to QP1 with the well-known Q_Key.
	_, glk, gcqA, gA, err := a.KernelGSI()
	if err != nil {
		t.Fatal(err)
	}
	_, _, gcqB, _, err := b.KernelGSI()
	if err != nil {
		t.Fatal(err)
	}
	mad := make([]byte, 256)
	mad[0], mad[1], mad[2], mad[3] = 1, 7, 2, 3
	copy(a.RAM.Mem[srcA:], mad)
	gw := send(uverbs.OpSend, 4, 0, uverbs.SGE{Addr: srcA, Length: 256, LKey: glk})
	gw.SetUD(1, 0x80010000, av)
	gA.PostSend(gw)
	if e := poll(t, gcqA, a, b); e.Status != 0 {
		t.Fatalf("GSI send %+v", e)
	}
	g := poll(t, gcqB, a, b)
	if g.Status != 0 || g.ByteLen != 296 || g.SrcQP != 1 || g.QP != 1 {
		t.Fatalf("GSI recv %+v", g)
	}
}

// TestUDJumbo: on a jumbo-frame segment (Config.MTU 9000, active MTU 4096)
// a UD datagram carries up to 4096 bytes, as the port advertises; one byte
// more completes unsent (as on a 1500-byte segment past 1024).
func TestUDJumbo(t *testing.T) {
	checkGoroutines(t)
	sw := fabric.NewSwitch()
	jumbo := func(cfg *pvrdma.Config) { cfg.MTU = 9000 }
	a, b := newHostConfig(t, sw, 1, 64<<20, jumbo), newHostConfig(t, sw, 2, 64<<20, jumbo)
	const n = 4096
	srcA, lkA, _ := a.mr(t, n+1, allAccess)
	dstB, lkB, _ := b.mr(t, 40+n+1, allAccess)
	fill(a.RAM.Mem[srcA:srcA+n+1], 9)
	ud := func(h *host) *emutest.QP {
		q := h.qp(t, abi.QPTypeUD, 16)
		if err := q.Modify(abi.AttrState|abi.AttrPKeyIndex|abi.AttrPort|abi.AttrQKey, abi.QPAttr{State: 1, PortNum: 1, QKey: 7}); err != nil {
			t.Fatal(err)
		}
		q.Modify(abi.AttrState, abi.QPAttr{State: 2})
		q.Modify(abi.AttrState|abi.AttrSQPSN, abi.QPAttr{State: 3})
		return q
	}
	qa, qb := ud(a), ud(b)
	av := uverbs.AV{PortPD: 1<<24 | a.pd, GIDIndex: 1, HopLimit: 64, DMAC: b.mac}
	av.DGID = b.ip.As16()
	av.DGID[10], av.DGID[11] = 0xff, 0xff
	for _, size := range []uint32{n, n + 1} {
		qb.PostRecv(uverbs.RecvWQE{WRID: uint64(size), SGE: []uverbs.SGE{{Addr: dstB, Length: 40 + n + 1, LKey: lkB}}})
		w := send(uverbs.OpSend, uint64(size), 0, uverbs.SGE{Addr: srcA, Length: size, LKey: lkA})
		w.SetUD(qb.QPN, 7, av)
		qa.PostSend(w)
		if e := poll(t, a.cq, a, b); e.Status != 0 {
			t.Fatalf("UD send of %d: %+v", size, e)
		}
	}
	if r := poll(t, b.cq, a, b); r.Status != 0 || r.ByteLen != 40+n || r.WRID != n {
		t.Fatalf("UD recv %+v", r)
	}
	if !bytes.Equal(b.RAM.Mem[dstB+40:dstB+40+n], a.RAM.Mem[srcA:srcA+n]) {
		t.Fatal("UD payload differs")
	}
	noCQE(t, b.cq, a, b) // the 4097-byte datagram was not sent
}

func TestLoopback(t *testing.T) {
	checkGoroutines(t)
	sw := fabric.NewSwitch()
	a := newHost(t, sw, 1)
	src, lk, _ := a.mr(t, 4096, allAccess)
	dst, lk2, _ := a.mr(t, 4096, allAccess)
	fill(a.RAM.Mem[src:src+4096], 3)
	q1, q2 := pairRC(t, a, a, defaultRC(), defaultRC())
	q2.PostRecv(uverbs.RecvWQE{WRID: 1, SGE: []uverbs.SGE{{Addr: dst, Length: 4096, LKey: lk2}}})
	q1.PostSend(send(uverbs.OpSend, 2, 0, uverbs.SGE{Addr: src, Length: 4096, LKey: lk}))
	e1, e2 := poll(t, a.cq, a), poll(t, a.cq, a)
	if e1.Status != 0 || e2.Status != 0 {
		t.Fatalf("loopback %+v %+v", e1, e2)
	}
	if !bytes.Equal(a.RAM.Mem[src:src+4096], a.RAM.Mem[dst:dst+4096]) {
		t.Fatal("loopback data differs")
	}
}

// TestRCLargeMessages moves messages larger than the receiver's frame queue
// (8192 packets): READ responses are streamed, and senders back off when the
// receiver is full instead of losing packets.
func TestRCLargeMessages(t *testing.T) {
	checkGoroutines(t)
	sw := fabric.NewSwitch()
	a, b := newHost(t, sw, 1), newHost(t, sw, 2)
	const n = 12 << 20 // 12288 packets at PMTU 1024
	bufA, lkA, _ := a.mr(t, n, allAccess)
	bufB, _, rkB := b.mr(t, n, allAccess)
	qa, _ := pairRC(t, a, b, defaultRC(), defaultRC())
	fill(b.RAM.Mem[bufB:bufB+n], 41)
	w := send(uverbs.OpRDMARead, 1, 0, uverbs.SGE{Addr: bufA, Length: n, LKey: lkA})
	w.SetRDMA(bufB, rkB)
	qa.PostSend(w)
	if e := poll(t, a.cq, a, b); e.Status != 0 || e.ByteLen != n {
		t.Fatalf("12 MiB READ: %+v", e)
	}
	if !bytes.Equal(a.RAM.Mem[bufA:bufA+n], b.RAM.Mem[bufB:bufB+n]) {
		t.Fatal("12 MiB READ data differs")
	}
	fill(a.RAM.Mem[bufA:bufA+n], 43)
	w = send(uverbs.OpRDMAWrite, 2, 0, uverbs.SGE{Addr: bufA, Length: n, LKey: lkA})
	w.SetRDMA(bufB, rkB)
	qa.PostSend(w)
	if e := poll(t, a.cq, a, b); e.Status != 0 {
		t.Fatalf("12 MiB WRITE: %+v", e)
	}
	if !bytes.Equal(a.RAM.Mem[bufA:bufA+n], b.RAM.Mem[bufB:bufB+n]) {
		t.Fatal("12 MiB WRITE data differs")
	}
}

// TestRCPathMTU: every path MTU from 256 to 4096 (4096 being what a port on
// a jumbo-frame segment advertises, hcaemu run --mtu 9000) moves SEND,
// WRITE and READ messages in packets of that size: the bytes arrive, and
// the requester's frames number one per PMTU of payload.
func TestRCPathMTU(t *testing.T) {
	checkGoroutines(t)
	for pmtu := uint32(abi.MTU256); pmtu <= abi.MTU4096; pmtu++ {
		size := 128 << pmtu
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			sw := fabric.NewSwitch()
			a, b := newHost(t, sw, 1), newHost(t, sw, 2)
			o := defaultRC()
			o.pathMTU = pmtu
			qa, qb := pairRC(t, a, b, o, o)
			const n = 40000 // not a multiple of any PMTU: a short last packet
			src, lkA, _ := a.mr(t, n, allAccess)
			dst, lkB, rkB := b.mr(t, n, allAccess)
			packets := uint64((n + size - 1) / size)
			for i, op := range []uint32{uverbs.OpSend, uverbs.OpRDMAWrite, uverbs.OpRDMARead} {
				fill(a.RAM.Mem[src:src+n], byte(i+1))
				fill(b.RAM.Mem[dst:dst+n], byte(i+101))
				before, _ := a.dev.Stats()
				w := send(op, uint64(i), 0, uverbs.SGE{Addr: src, Length: n, LKey: lkA})
				if op == uverbs.OpSend {
					qb.PostRecv(uverbs.RecvWQE{WRID: 9, SGE: []uverbs.SGE{{Addr: dst, Length: n, LKey: lkB}}})
				} else {
					w.SetRDMA(dst, rkB)
				}
				qa.PostSend(w)
				if e := poll(t, a.cq, a, b); e.Status != uverbs.WCSuccess || e.WRID != uint64(i) {
					t.Fatalf("op %d: %+v", op, e)
				}
				if op == uverbs.OpSend {
					if e := poll(t, b.cq, a, b); e.Status != uverbs.WCSuccess || e.ByteLen != n {
						t.Fatalf("receive: %+v", e)
					}
				}
				if !bytes.Equal(a.RAM.Mem[src:src+n], b.RAM.Mem[dst:dst+n]) {
					t.Fatalf("op %d: the bytes differ", op)
				}
				after, _ := a.dev.Stats()
				want := packets // the requests; a READ's request is one packet, its responses come back
				if op == uverbs.OpRDMARead {
					want = 1
				}
				if sent := after.Port.FramesOut - before.Port.FramesOut; sent < want || sent > want+2 {
					t.Errorf("op %d at PMTU %d: %d frames sent, want %d (and an ACK or two)", op, size, sent, want)
				}
			}
		})
	}
}

// TestSourceMAC: frames carry the MAC of the paired vmxnet3, which the
// device learns from the default (link-local) GID the driver binds, not the
// MAC it was configured with.
func TestSourceMAC(t *testing.T) {
	checkGoroutines(t)
	var mu sync.Mutex
	var srcs [][6]byte
	sw := fabric.NewSwitch(func(next fabric.Link) fabric.Link {
		return fabric.LinkFunc(func(from *fabric.Port, f []byte) bool {
			mu.Lock()
			srcs = append(srcs, [6]byte(f[6:12]))
			mu.Unlock()
			return next.Send(from, f)
		})
	})
	a, b := newHost(t, sw, 1), newHost(t, sw, 2) // link-local GIDs fe80::250:56ff:fe00:k
	src, lk, _ := a.mr(t, 4096, allAccess)
	dst, lk2, _ := b.mr(t, 4096, allAccess)
	qa, qb := pairRC(t, a, b, defaultRC(), defaultRC())
	qb.PostRecv(uverbs.RecvWQE{WRID: 1, SGE: []uverbs.SGE{{Addr: dst, Length: 100, LKey: lk2}}})
	qa.PostSend(send(uverbs.OpSend, 2, 0, uverbs.SGE{Addr: src, Length: 10, LKey: lk}))
	poll(t, a.cq, a, b)
	poll(t, b.cq, a, b)
	mu.Lock()
	defer mu.Unlock()
	want := map[[6]byte]bool{{0x00, 0x50, 0x56, 0, 0, 1}: true, {0x00, 0x50, 0x56, 0, 0, 2}: true}
	if len(srcs) < 2 {
		t.Fatalf("%d frames", len(srcs))
	}
	for _, m := range srcs {
		if !want[m] {
			t.Fatalf("frame from MAC % x", m)
		}
	}
}
