package verbstest

import (
	"bytes"
	"testing"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/transport"
)

// The write oracle of the attack tests: a host made with HostOpts.Watch
// reaches guest memory through a WriteWatch that allows the model's own
// structures; the test allows the regions it registers writable, keeps the
// bytes of everything the device may not write (canaries, regions no work
// may write, regions after their deregistration returned) and checks both
// at the end (ClosingOracle).

// Guarded is a host (made with HostOpts.Watch) with the guest ranges that
// must keep their bytes.
type Guarded struct {
	Host
	snaps []snapshot
}

type snapshot struct {
	name string
	gpa  uint64
	want []byte
}

// Guard is h with nothing kept yet; h must have a WriteWatch.
func Guard(h Host) *Guarded {
	if h.Watch() == nil {
		panic("verbstest: Guard of a host without a WriteWatch (HostOpts.Watch)")
	}
	return &Guarded{Host: h}
}

// Region is a memory region a test registered.
type Region struct {
	Name       string
	PD, Access uint32
	Addr       uint64 // I/O virtual address of byte 0
	GPA        uint64 // guest-physical address of byte 0 (pages are contiguous)
	Size       uint64
	LKey, RKey uint32
}

// Register registers size bytes of fresh guest memory (IOVA = GPA) in pd
// with access (mr's bits), filled with a pattern; when writable, the
// device may write it (the WriteWatch allows it), otherwise its bytes are
// kept and checked at the end.
func (g *Guarded) Register(t *testing.T, name string, pd uint32, size uint64, access uint32, writable bool) *Region {
	t.Helper()
	return g.RegisterAt(t, name, pd, 0, size, access, writable)
}

// RegisterAt is Register with I/O virtual address iova (0: the GPA), as a
// process registering a buffer at a virtual address that other pages
// backed before.
func (g *Guarded) RegisterAt(t *testing.T, name string, pd uint32, iova, size uint64, access uint32, writable bool) *Region {
	t.Helper()
	gpa := g.Alloc(int(size))
	if iova == 0 {
		iova = gpa
	}
	fill(g.Mem(gpa, int(size)), byte(len(g.snaps)*17+int(size)))
	lkey, rkey := g.RegMRAt(pd, iova, gpa, int(size), access)
	r := &Region{Name: name, PD: pd, Access: access, Addr: iova, GPA: gpa, Size: size, LKey: lkey, RKey: rkey}
	if writable {
		g.Watch().Allow(name, r.GPA, size)
	} else {
		g.Keep(name, r.GPA, size)
	}
	return r
}

// Keep records the current bytes of [gpa, gpa+n) as the bytes they must
// still hold at the end.
func (g *Guarded) Keep(name string, gpa, n uint64) {
	g.snaps = append(g.snaps, snapshot{name: name, gpa: gpa, want: bytes.Clone(g.Mem(gpa, int(n)))})
}

// Canaries allocates n pages that belong to nothing, filled with a
// pattern that must survive.
func (g *Guarded) Canaries(n int) {
	gpa := g.Alloc(n * dma.PageSize)
	fill(g.Mem(gpa, n*dma.PageSize), 0xA5)
	g.Keep("canary", gpa, uint64(n)*dma.PageSize)
}

// Deregister deregisters r; from the moment the deregistration returns,
// the device may not write its memory, whose bytes must stay as they are.
// It reports whether the device deregistered it.
func (g *Guarded) Deregister(t *testing.T, r *Region) bool {
	t.Helper()
	if err := g.DeregMR(r.LKey); err != nil {
		t.Logf("%s: %s stays registered: %v", g.Addr(), r.Name, err)
		return false
	}
	g.Watch().Revoke(r.Name)
	g.Keep(r.Name+" (deregistered)", r.GPA, r.Size)
	return true
}

// CheckMemory fails the test for every device write outside the allowed
// places and every kept range whose bytes changed.
func (g *Guarded) CheckMemory(t *testing.T) {
	t.Helper()
	for _, v := range g.Watch().Violations() {
		t.Errorf("%s: %s", g.Addr(), v)
	}
	for _, s := range g.snaps {
		got := g.Mem(s.gpa, len(s.want))
		if i := firstDiff(got, s.want); i >= 0 {
			t.Errorf("%s: %s [%#x, +%#x) changed at %#x: %#02x, was %#02x", g.Addr(), s.name, s.gpa, len(s.want), s.gpa+uint64(i), got[i], s.want[i])
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

// Settle lets every device process what it has queued, and what that
// causes, until all are idle (bounded: a device that keeps itself busy,
// e.g. retransmitting, is left to its timers).
func Settle(hosts ...Host) {
	for round := 0; round < 64; round++ {
		for _, h := range hosts {
			h.Sync()
		}
		idle := true
		for _, h := range hosts {
			idle = idle && h.Idle()
		}
		if idle {
			return
		}
	}
}

// ClosingOracle is what the attack tests check at the end: no device write
// went astray, the devices still answer commands, and a fresh QP pair on
// them (a PD, CQ and regions of its own) moves checked data, with its
// writes checked too.
func ClosingOracle(t *testing.T, a, b *Guarded) {
	t.Helper()
	a.CheckMemory(t)
	b.CheckMemory(t)
	for _, h := range []*Guarded{a, b} {
		if err := h.Alive(); err != nil {
			t.Fatalf("%s stopped serving: %v", h.Addr(), err)
		}
	}
	if t.Failed() {
		return
	}
	freshPairMoves(t, a, b)
	a.CheckMemory(t)
	b.CheckMemory(t)
}

// freshPairMoves builds a fresh PD, regions, CQ and connected RC QP pair
// on a and b (allowed in their WriteWatches), and moves a SEND and a WRITE
// of a known pattern, compared byte for byte.
func freshPairMoves(t *testing.T, a, b *Guarded) {
	t.Helper()
	fa, fb := &Guarded{Host: a.Fresh()}, &Guarded{Host: b.Fresh()}
	const n = 5000
	src := fa.Register(t, "fresh src", fa.PD(), 2*n, All, true)
	dst := fb.Register(t, "fresh dst", fb.PD(), 2*n, All, true)
	qa, qb := pair(fa.Host, fb.Host, DefaultRC())
	fill(a.Mem(src.GPA, 2*n), 0x3C)
	clear(b.Mem(dst.GPA, 2*n))
	qb.PostRecv(RecvWR{ID: 1, SGEs: []mr.SGE{{Addr: dst.Addr, Length: n, LKey: dst.LKey}}})
	qa.PostSend(SendWR{ID: 2, Opcode: transport.OpSend, SGEs: []mr.SGE{{Addr: src.Addr, Length: n, LKey: src.LKey}}})
	qa.PostSend(write(3, src.Addr+n, n, src.LKey, dst.Addr+n, dst.RKey))
	for _, want := range []uint64{2, 3} {
		if wc := Poll(t, fa, a, b); wc.Status != transport.StatusSuccess || wc.ID != want {
			t.Fatalf("fresh pair: sender completion %+v, want WR %d SUCCESS", wc, want)
		}
	}
	if wc := Poll(t, fb, a, b); wc.Status != transport.StatusSuccess || wc.ID != 1 || wc.ByteLen != n {
		t.Fatalf("fresh pair: receiver completion %+v", wc)
	}
	if !bytes.Equal(a.Mem(src.GPA, 2*n), b.Mem(dst.GPA, 2*n)) {
		t.Fatal("fresh pair: data differs")
	}
}
