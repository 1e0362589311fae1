package pvrdma_test

// Helpers of the attack fuzzers (FuzzGuestMemory, FuzzRCPeer): hosts whose
// device reaches guest memory through an verbstest.WriteWatch, canary pages,
// quiescence without sleeping, and the closing check that a fresh QP pair
// on the attacked devices still moves checked data.

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/netip"
	"testing"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/emutest"
	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/pvrdma"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	"github.com/hcaemu/hcaemu/emu/verbstest"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// watchedHost is a host whose device writes guest memory through a
// WriteWatch. It has no DMA MR (whose L_Key would let a receive write
// anywhere): every region is a real one the test places.
type watchedHost struct {
	*host
	watch *verbstest.WriteWatch
	// snaps are guest ranges that must keep their bytes (canaries, regions
	// no work may write, deregistered regions), with the bytes to keep.
	snaps []snapshot
}

type snapshot struct {
	name string
	gpa  uint64
	want []byte
}

// newWatchedHost probes an HCA on sw with IPv4 10.0.0.k (GID index 1),
// ram bytes of guest RAM, room for maxMR memory regions (0: the default), a
// kernel PD and a CQ of 256 entries, and allows the device's own rings and
// the CQ in its WriteWatch (not armed yet).
func newWatchedHost(t *testing.T, sw *fabric.Switch, k, ram int, maxMR uint32) *watchedHost {
	t.Helper()
	mac := [6]byte{0x00, 0x50, 0x56, 0, 0, byte(k)}
	drv := emutest.New(ram)
	watch := verbstest.NewWriteWatch(drv.RAM)
	log := slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	caps := pvrdma.DefaultCaps()
	if maxMR != 0 {
		caps.MaxMR = maxMR
	}
	dev := pvrdma.New(pvrdma.Config{Name: fmt.Sprintf("hca%d", k), Mem: watch, MSIX: drv.IRQ.Raise,
		Log: log, MAC: mac, Attach: attachTo(sw, "hca", mac), Caps: &caps})
	t.Cleanup(dev.Close)
	drv.Dev = dev
	h := &host{rig: &rig{Driver: drv, dev: dev}, mac: mac, ip: netip.AddrFrom4([4]byte{10, 0, 0, byte(k)})}
	if err := drv.Probe(); err != nil {
		t.Fatal(err)
	}
	v4 := h.ip.As16()
	v4[10], v4[11] = 0xff, 0xff
	ll := [16]byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x50, 0x56, 0xff, 0xfe, 0, 0, byte(k)}
	for i, gid := range [][16]byte{ll, v4} {
		if err := drv.BindGID(uint32(i), gid); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	if h.pd, err = drv.CreatePD(0); err != nil {
		t.Fatal(err)
	}
	if h.cq, err = drv.CreateCQ(0, 256); err != nil {
		t.Fatal(err)
	}
	emutest.AllowDevice(watch, drv)
	emutest.AllowCQ(watch, "cq", h.cq)
	return &watchedHost{host: h, watch: watch}
}

// region is a memory region the test registered.
type region struct {
	name       string
	pd         uint32
	access     uint32
	handle     uint32
	addr       uint64 // I/O virtual address of byte 0
	gpa        uint64 // guest-physical address of byte 0 (pages are contiguous)
	pdir       uint64 // its page directory
	size       uint64
	lkey, rkey uint32
}

// register registers size bytes of fresh guest memory (IOVA = GPA) in pd
// with access; when writable, the device may write it (the WriteWatch
// allows it), otherwise its bytes are kept and checked at the end.
func (h *watchedHost) register(t *testing.T, name string, pd uint32, size uint64, access uint32, writable bool) *region {
	t.Helper()
	return h.registerAt(t, name, pd, 0, size, access, writable)
}

// registerAt is register with I/O virtual address iova (0: the GPA), as a
// process registering a buffer at a virtual address that other pages
// backed before.
func (h *watchedHost) registerAt(t *testing.T, name string, pd uint32, iova, size uint64, access uint32, writable bool) *region {
	t.Helper()
	pages, dir := h.Buffer(int((size + dma.PageSize - 1) / dma.PageSize))
	if iova == 0 {
		iova = pages[0]
	}
	fill(h.RAM.Mem[pages[0]:pages[0]+size], byte(len(h.snaps)*17+int(size)))
	rsp, err := h.CreateMR(abi.CmdCreateMR{Start: iova, Length: size, PdirDMA: dir,
		PDHandle: pd, AccessFlags: access, NChunks: uint32(len(pages))})
	if err != nil {
		t.Fatal(err)
	}
	r := &region{name: name, pd: pd, access: access, handle: rsp.MRHandle, addr: iova, gpa: pages[0], pdir: dir, size: size, lkey: rsp.LKey, rkey: rsp.RKey}
	if writable {
		h.watch.Allow(name, r.gpa, size)
	} else {
		h.keep(name, r.gpa, size)
	}
	return r
}

// keep records the current bytes of [gpa, gpa+n) as the bytes they must
// still hold at the end.
func (h *watchedHost) keep(name string, gpa, n uint64) {
	h.snaps = append(h.snaps, snapshot{name: name, gpa: gpa, want: bytes.Clone(h.RAM.Mem[gpa : gpa+n])})
}

// canaries allocates n pages that belong to nothing, filled with a pattern
// that must survive.
func (h *watchedHost) canaries(n int) {
	gpa := h.AllocPages(n)
	fill(h.RAM.Mem[gpa:gpa+uint64(n)*dma.PageSize], 0xA5)
	h.keep("canary", gpa, uint64(n)*dma.PageSize)
}

// destroyMR deregisters r; from the moment DESTROY_MR returns, the device
// may not write its memory, whose bytes must stay as they are. It reports
// whether the device deregistered it.
func (h *watchedHost) destroyMR(t *testing.T, r *region) bool {
	t.Helper()
	if err := h.MustCmd(&abi.CmdDestroyMR{MRHandle: r.handle}, nil); err != nil {
		t.Logf("%s: %s stays registered: %v", h.ip, r.name, err)
		return false
	}
	h.watch.Revoke(r.name)
	h.keep(r.name+" (deregistered)", r.gpa, r.size)
	return true
}

// checkMemory fails the test for every device write outside the allowed
// places and every kept range whose bytes changed.
func (h *watchedHost) checkMemory(t *testing.T) {
	t.Helper()
	for _, v := range h.watch.Violations() {
		t.Errorf("%s: %s", h.ip, v)
	}
	for _, s := range h.snaps {
		got := h.RAM.Mem[s.gpa : s.gpa+uint64(len(s.want))]
		if i := firstDiff(got, s.want); i >= 0 {
			t.Errorf("%s: %s [%#x, +%#x) changed at %#x: %#02x, was %#02x", h.ip, s.name, s.gpa, len(s.want), s.gpa+uint64(i), got[i], s.want[i])
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// settle lets every device process what it has queued, and what that
// causes, until all are idle (bounded: a device that keeps itself busy,
// e.g. retransmitting, is left to its timers).
func settle(hosts ...*watchedHost) {
	for round := 0; round < 64; round++ {
		for _, h := range hosts {
			h.dev.Sync()
		}
		idle := true
		for _, h := range hosts {
			idle = idle && h.dev.Idle()
		}
		if idle {
			return
		}
	}
}

// alive fails the test unless every device still answers QUERY_PORT.
// closingOracle is what both attack fuzzers check at the end of a program:
// no device write went astray, the devices still answer commands, and a
// fresh QP pair on them moves checked data (with its writes checked too).
func closingOracle(t *testing.T, a, b *watchedHost) {
	t.Helper()
	a.checkMemory(t)
	b.checkMemory(t)
	alive(t, a, b)
	if t.Failed() {
		return
	}
	freshPairMoves(t, a, b)
	a.checkMemory(t)
	b.checkMemory(t)
}

func alive(t *testing.T, hosts ...*watchedHost) {
	t.Helper()
	for _, h := range hosts {
		if _, err := h.QueryPort(1); err != nil {
			t.Fatalf("%s stopped serving: %v", h.ip, err)
		}
	}
}

// freshPairMoves builds a fresh PD, MRs, CQ and connected RC QP pair on a
// and b (allowed in their WriteWatches), and moves a SEND and a WRITE of a
// known pattern, compared byte for byte.
func freshPairMoves(t *testing.T, a, b *watchedHost) {
	t.Helper()
	fresh := func(h *watchedHost) *watchedHost {
		pd, err := h.CreatePD(0)
		if err != nil {
			t.Fatalf("%s: fresh PD: %v", h.ip, err)
		}
		cq, err := h.CreateCQ(0, 64)
		if err != nil {
			t.Fatalf("%s: fresh CQ: %v", h.ip, err)
		}
		emutest.AllowCQ(h.watch, "fresh cq", cq)
		hc := *h.host
		hc.pd, hc.cq = pd, cq
		return &watchedHost{host: &hc, watch: h.watch}
	}
	fa, fb := fresh(a), fresh(b)
	const n = 5000
	src := fa.register(t, "fresh src", fa.pd, 2*n, allAccess, true)
	dst := fb.register(t, "fresh dst", fb.pd, 2*n, allAccess, true)
	qa, qb := pairRC(t, fa.host, fb.host, defaultRC(), defaultRC())
	for _, h := range []struct {
		h  *watchedHost
		qp *emutest.QP
	}{{a, qa}, {b, qb}} {
		emutest.AllowQP(h.h.watch, "fresh qp", h.qp)
	}
	fill(a.RAM.Mem[src.gpa:src.gpa+2*n], 0x3C)
	clear(b.RAM.Mem[dst.gpa : dst.gpa+2*n])
	qb.PostRecv(uverbs.RecvWQE{WRID: 1, SGE: []uverbs.SGE{{Addr: dst.addr, Length: n, LKey: dst.lkey}}})
	qa.PostSend(send(uverbs.OpSend, 2, 0, uverbs.SGE{Addr: src.addr, Length: n, LKey: src.lkey}))
	w := send(uverbs.OpRDMAWrite, 3, 0, uverbs.SGE{Addr: src.addr + n, Length: n, LKey: src.lkey})
	w.SetRDMA(dst.addr+n, dst.rkey)
	qa.PostSend(w)
	for _, want := range []uint64{2, 3} {
		if e := poll(t, fa.cq, a.host, b.host); e.Status != uverbs.WCSuccess || e.WRID != want {
			t.Fatalf("fresh pair: sender CQE %+v, want WRID %d SUCCESS", e, want)
		}
	}
	if e := poll(t, fb.cq, a.host, b.host); e.Status != uverbs.WCSuccess || e.WRID != 1 || e.ByteLen != n {
		t.Fatalf("fresh pair: receiver CQE %+v", e)
	}
	if !bytes.Equal(a.RAM.Mem[src.gpa:src.gpa+2*n], b.RAM.Mem[dst.gpa:dst.gpa+2*n]) {
		t.Fatal("fresh pair: data differs")
	}
}
