package pvrdma_test

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/emutest"
	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/pvrdma"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

func hasEvent(evs [][2]uint32, typ, info uint32) bool {
	for _, e := range evs {
		if e[0] == typ && e[1] == info {
			return true
		}
	}
	return false
}

func TestSRQ(t *testing.T) {
	checkGoroutines(t)
	sw := fabric.NewSwitch()
	a, b := newHost(t, sw, 1), newHost(t, sw, 2)
	src, lkA, _ := a.mr(t, 4096, allAccess)
	dst, lkB, _ := b.mr(t, 4096, allAccess)
	fill(a.RAM.Mem[src:src+4096], 11)
	srq, err := b.CreateSRQ(b.pd, 8, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	qa := a.qp(t, abi.QPTypeRC, 16)
	qb, err := b.CreateQP(emutest.QPSpec{PD: b.pd, SendCQ: b.cq, RecvCQ: b.cq, SRQ: srq.Handle, Type: abi.QPTypeRC, SendWR: 16, SendSGE: 2})
	if err != nil {
		t.Fatal(err)
	}
	connect(t, a, qa, b, qb, defaultRC())
	connect(t, b, qb, a, qa, defaultRC())
	for i := 0; i < 3; i++ {
		srq.PostRecv(uverbs.RecvWQE{WRID: 100 + uint64(i), SGE: []uverbs.SGE{{Addr: dst + uint64(i)*1000, Length: 1000, LKey: lkB}}})
	}
	// Arm the limit: fewer than 2 posted WQEs left raises SRQ_LIMIT_REACHED.
	if err := b.MustCmd(&abi.CmdModifySRQ{SRQHandle: srq.Handle, AttrMask: abi.SRQAttrLimit, Attrs: abi.SRQAttr{SRQLimit: 2}}, nil); err != nil {
		t.Fatal(err)
	}
	var q abi.CmdQuerySRQResp
	b.MustCmd(&abi.CmdQuerySRQ{SRQHandle: srq.Handle}, &q)
	if q.Attrs.MaxWR != 8 || q.Attrs.SRQLimit != 2 {
		t.Fatalf("QUERY_SRQ %+v", q.Attrs)
	}
	for i := 0; i < 2; i++ {
		qa.PostSend(send(uverbs.OpSend, uint64(i), 0, uverbs.SGE{Addr: src, Length: 900, LKey: lkA}))
		poll(t, a.cq, a, b)
		e := poll(t, b.cq, a, b)
		if e.Status != 0 || e.QP != uint64(qb.Handle) || e.WRID != 100+uint64(i) || e.ByteLen != 900 {
			t.Fatalf("SRQ receive %+v", e)
		}
	}
	if !bytes.Equal(b.RAM.Mem[dst+1000:dst+1900], a.RAM.Mem[src:src+900]) {
		t.Fatal("SRQ data differs")
	}
	if !hasEvent(b.AsyncEvents(), abi.EventSRQLimitReached, srq.Handle) {
		t.Error("no SRQ_LIMIT_REACHED")
	}
	// An SRQ in use cannot be destroyed.
	if e, _ := b.Cmd(&abi.CmdDestroySRQ{SRQHandle: srq.Handle}, nil); e == 0 {
		t.Error("destroyed an SRQ in use")
	}
}

func TestFastRegAndInvalidate(t *testing.T) {
	checkGoroutines(t)
	sw := fabric.NewSwitch()
	a, b := newHost(t, sw, 1), newHost(t, sw, 2)
	src, lkA, _ := a.mr(t, 8192, allAccess)
	fill(a.RAM.Mem[src:src+8192], 21)
	qa, qb := pairRC(t, a, b, defaultRC(), defaultRC())
	// An FRMR on b, registered by a FAST_REG_MR work request.
	mr, err := b.CreateMR(abi.CmdCreateMR{PDHandle: b.pd, Flags: abi.MRFlagFRMR, NChunks: 4})
	if err != nil {
		t.Fatal(err)
	}
	key := mr.RKey
	pages, pl := b.Buffer(2)
	const iova = 0x7f0000001000
	reg := func(k uint32) {
		w := send(uverbs.OpFastRegMR, 1, 0)
		w.SetFastReg(uverbs.FastReg{IOVA: iova, PageListDir: pl, PageShift: 12, PageListLen: 2, Length: 8192, Access: 1 | 2, RKey: k})
		qb.PostSend(w)
		if e := poll(t, b.cq, a, b); e.Status != 0 || e.Opcode != uverbs.WCFastRegMR {
			t.Fatalf("FAST_REG_MR %+v", e)
		}
	}
	write := func(k uint32, want uint32) {
		t.Helper()
		w := send(uverbs.OpRDMAWrite, 2, 0, uverbs.SGE{Addr: src, Length: 6000, LKey: lkA})
		w.SetRDMA(iova+100, k)
		qa.PostSend(w)
		if e := poll(t, a.cq, a, b); e.Status != want {
			t.Fatalf("WRITE with key %#x: %+v, want status %d", k, e, want)
		}
	}
	k1 := key&^0xFF | 0x11
	reg(k1)
	write(k1, uverbs.WCSuccess)
	got := append(append([]byte{}, b.RAM.Mem[pages[0]+100:pages[0]+4096]...), b.RAM.Mem[pages[1]:pages[1]+2004]...)
	if !bytes.Equal(got, a.RAM.Mem[src:src+6000]) {
		t.Fatal("data through the FRMR differs")
	}
	// SEND_WITH_INV invalidates it at the responder.
	rb, lkB, _ := b.mr(t, 4096, allAccess)
	qb.PostRecv(uverbs.RecvWQE{WRID: 3, SGE: []uverbs.SGE{{Addr: rb, Length: 100, LKey: lkB}}})
	w := send(uverbs.OpSendInv, 4, 0, uverbs.SGE{Addr: src, Length: 10, LKey: lkA})
	le.PutUint32(w.Ex[:], k1)
	qa.PostSend(w)
	poll(t, a.cq, a, b)
	e := poll(t, b.cq, a, b)
	if e.Status != 0 || e.WCFlags&uverbs.WCFlagInvalidate == 0 || le.Uint32(e.ImmData[:]) != k1 {
		t.Fatalf("SEND_WITH_INV receive %+v", e)
	}
	write(k1, uverbs.WCRemAccessErr)

	// Register again under a new key and invalidate locally.
	qa, qb = pairRC(t, a, b, defaultRC(), defaultRC())
	k2 := key&^0xFF | 0x22
	reg(k2)
	write(k2, uverbs.WCSuccess)
	inv := send(uverbs.OpLocalInv, 5, 0)
	le.PutUint32(inv.Ex[:], k2)
	qb.PostSend(inv)
	if e := poll(t, b.cq, a, b); e.Status != 0 || e.Opcode != uverbs.WCLocalInv {
		t.Fatalf("LOCAL_INV %+v", e)
	}
	write(k2, uverbs.WCRemAccessErr)
}

func TestCQNotifications(t *testing.T) {
	checkGoroutines(t)
	sw := fabric.NewSwitch()
	a, b := newHost(t, sw, 1), newHost(t, sw, 2)
	src, lkA, _ := a.mr(t, 4096, allAccess)
	dst, lkB, _ := b.mr(t, 4096, allAccess)
	qa, qb := pairRC(t, a, b, defaultRC(), defaultRC())
	msg := func(solicited bool) {
		qb.PostRecv(uverbs.RecvWQE{WRID: 1, SGE: []uverbs.SGE{{Addr: dst, Length: 100, LKey: lkB}}})
		var f uint32
		if solicited {
			f = uverbs.SendSolicited
		}
		qa.PostSend(send(uverbs.OpSend, 2, f, uverbs.SGE{Addr: src, Length: 10, LKey: lkA}))
		poll(t, a.cq, a, b)
		poll(t, b.cq, a, b)
	}
	irq := func() int64 { return b.IRQ.Count[abi.IntrVectorCQ].Load() }
	b.cq.Arm(false)
	before := irq()
	msg(false)
	if n := b.CQNotifications(); len(n) != 1 || n[0] != b.cq.Handle || irq() != before+1 {
		t.Fatalf("armed: notifications %v, vector 2 raised %d times", n, irq()-before)
	}
	msg(false) // not re-armed: nothing
	if n := b.CQNotifications(); len(n) != 0 {
		t.Fatalf("unarmed CQ notified: %v", n)
	}
	b.cq.Arm(true) // solicited only
	msg(false)
	if n := b.CQNotifications(); len(n) != 0 {
		t.Fatalf("ARM_SOL notified for an unsolicited message: %v", n)
	}
	msg(true)
	if n := b.CQNotifications(); len(n) != 1 {
		t.Fatalf("ARM_SOL: no notification for a solicited message: %v", n)
	}
}

func TestCQOverrun(t *testing.T) {
	checkGoroutines(t)
	sw := fabric.NewSwitch()
	a := newHost(t, sw, 1)
	src, lk, _ := a.mr(t, 4096, allAccess)
	cq, err := a.CreateCQ(0, 4)
	if err != nil {
		t.Fatal(err)
	}
	q := a.readyUD(t, cq)
	for i := 0; i < 5; i++ { // the guest never polls
		q.PostSend(udSendTo9(uint64(i), uverbs.SGE{Addr: src, Length: 10, LKey: lk}))
	}
	for i := 0; i < 3; i++ {
		a.dev.Sync()
	}
	if !hasEvent(a.AsyncEvents(), abi.EventCQErr, cq.Handle) {
		t.Fatal("no CQ_ERR after overrun")
	}
	for i := 0; i < 4; i++ { // the 4 CQEs before the overrun are intact
		if e, ok := cq.Poll(); !ok || e.WRID != uint64(i) {
			t.Fatalf("CQE %d: %+v %v", i, e, ok)
		}
	}
}

func TestSQDrained(t *testing.T) {
	checkGoroutines(t)
	sw := fabric.NewSwitch()
	a, b := newHost(t, sw, 1), newHost(t, sw, 2)
	qa, _ := pairRC(t, a, b, defaultRC(), defaultRC())
	if err := qa.Modify(abi.AttrState|abi.AttrEnSQDAsync, abi.QPAttr{State: abi.QPStateSQD, EnSQDAsyncNotify: 1}); err != nil {
		t.Fatal(err)
	}
	if !hasEvent(a.AsyncEvents(), abi.EventSQDrained, qa.Handle) {
		t.Fatal("no SQ_DRAINED")
	}
}

// rewritingMem rewrites a WQE slot in guest memory right after the device
// first reads it, as a racing guest could: a device that fetched the WQE
// twice would act on the rewrite.
type rewritingMem struct {
	dma.Memory
	mu      sync.Mutex
	slot    uint64
	garbage []byte
	done    bool
}

func (m *rewritingMem) ReadAt(p []byte, gpa uint64) error {
	err := m.Memory.ReadAt(p, gpa)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.done && m.slot != 0 && gpa <= m.slot && gpa+uint64(len(p)) > m.slot {
		m.done = true
		m.Memory.WriteAt(m.garbage, m.slot)
	}
	return err
}

func TestWQEFetchedOnce(t *testing.T) {
	checkGoroutines(t)
	sw := fabric.NewSwitch()
	b := newHost(t, sw, 2)
	drv := emutest.New(64 << 20)
	mem := &rewritingMem{Memory: drv.RAM}
	mac := [6]byte{0, 0x50, 0x56, 0, 0, 1}
	dev := pvrdma.New(pvrdma.Config{Mem: mem, MSIX: drv.IRQ.Raise, Log: testLog(t), MAC: mac, Attach: attachTo(sw, "a", mac)})
	t.Cleanup(dev.Close)
	drv.Dev = dev
	if err := drv.Probe(); err != nil {
		t.Fatal(err)
	}
	a := &host{rig: &rig{Driver: drv, dev: dev}, mac: mac, ip: b.ip}
	a.ip = a.ip.Prev()
	v4 := a.ip.As16()
	v4[10], v4[11] = 0xff, 0xff
	drv.BindGID(1, v4)
	a.pd, _ = drv.CreatePD(0)
	a.cq, _ = drv.CreateCQ(0, 64)
	src, lkA, _ := a.mr(t, 4096, allAccess)
	dst, lkB, _ := b.mr(t, 4096, allAccess)
	fill(a.RAM.Mem[src:src+4096], 31)
	qa, qb := pairRC(t, a, b, defaultRC(), defaultRC())
	qb.PostRecv(uverbs.RecvWQE{WRID: 1, SGE: []uverbs.SGE{{Addr: dst, Length: 4096, LKey: lkB}}})
	// The next SQ slot is page 1 of the QP, slot 0.
	mem.mu.Lock()
	mem.slot = qa.Pages[1]
	mem.garbage = bytes.Repeat([]byte{0xff}, 80)
	mem.mu.Unlock()
	qa.PostSend(send(uverbs.OpSend, 42, 0, uverbs.SGE{Addr: src, Length: 3000, LKey: lkA}))
	e := poll(t, a.cq, a, b)
	if e.Status != 0 || e.WRID != 42 {
		t.Fatalf("send after rewrite: %+v", e)
	}
	if r := poll(t, b.cq, a, b); r.ByteLen != 3000 || !bytes.Equal(b.RAM.Mem[dst:dst+3000], a.RAM.Mem[src:src+3000]) {
		t.Fatalf("receive %+v", r)
	}
	if !mem.done {
		t.Fatal("the rewrite never happened: test is void")
	}
}

// readyUD creates a UD QP (8 WRs, one SGE) whose queues complete to cq and
// takes it to RTS with QKey 1.
func (h *host) readyUD(t *testing.T, cq *emutest.CQ) *emutest.QP {
	t.Helper()
	q, err := h.CreateQP(emutest.QPSpec{PD: h.pd, SendCQ: cq, RecvCQ: cq, Type: abi.QPTypeUD, SendWR: 8, RecvWR: 8, SendSGE: 1, RecvSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	q.Modify(abi.AttrState|abi.AttrPKeyIndex|abi.AttrPort|abi.AttrQKey, abi.QPAttr{State: 1, PortNum: 1, QKey: 1})
	q.Modify(abi.AttrState, abi.QPAttr{State: 2})
	q.Modify(abi.AttrState|abi.AttrSQPSN, abi.QPAttr{State: 3})
	return q
}

// udSendTo9 is a signaled UD SEND to QP 5 (QKey 1) at 10.0.0.9, a host no
// test attaches: it goes to the wire and completes.
func udSendTo9(wrid uint64, sge uverbs.SGE) uverbs.SendWQE {
	w := send(uverbs.OpSend, wrid, 0, sge)
	w.SetUD(5, 1, uverbs.AV{GIDIndex: 1, DGID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 15: 9}})
	return w
}

// storeFailingMem refuses writes over one guest address once armed, as a
// page the guest unmapped between the device's reads and its writes would.
type storeFailingMem struct {
	dma.Memory
	bad atomic.Uint64 // 0: none
}

func (m *storeFailingMem) hit(gpa, n uint64) bool {
	bad := m.bad.Load()
	return bad != 0 && gpa <= bad && bad < gpa+n
}

func (m *storeFailingMem) WriteAt(p []byte, gpa uint64) error {
	if m.hit(gpa, uint64(len(p))) {
		return dma.Fault(gpa, uint64(len(p)), "unmapped (test)")
	}
	return m.Memory.WriteAt(p, gpa)
}

func (m *storeFailingMem) Access(gpa, n uint64, write bool, fn func([]byte)) error {
	if write && m.hit(gpa, n) {
		return dma.Fault(gpa, n, "unmapped (test)")
	}
	return m.Memory.Access(gpa, n, write, fn)
}

// TestSQIndexUnwritable: when the device cannot store a send queue's
// cons_head, the guest would never see its queue emptied and wait for a
// free slot for ever; the QP fails with QP_FATAL instead (the store's error
// was dropped before).
func TestSQIndexUnwritable(t *testing.T) {
	checkGoroutines(t)
	sw := fabric.NewSwitch()
	var mem *storeFailingMem
	a := newHostConfig(t, sw, 1, 16<<20, func(cfg *pvrdma.Config) {
		mem = &storeFailingMem{Memory: cfg.Mem}
		cfg.Mem = mem
	})
	src, lk, _ := a.mr(t, 4096, allAccess)
	q := a.readyUD(t, a.cq)
	mem.bad.Store(q.Pages[0] + uverbs.TxConsHead)
	q.PostSend(udSendTo9(1, uverbs.SGE{Addr: src, Length: 10, LKey: lk}))
	a.dev.Sync()
	if !hasEvent(a.AsyncEvents(), abi.EventQPFatal, q.Handle) {
		t.Fatal("no QP_FATAL for a send queue whose cons_head the device cannot store")
	}
	if n := a.dev.Findings()[hca.FindingPageDir]; n == 0 {
		t.Error("no page-directory finding")
	}
}
