package pvrdma_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/emutest"
	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	"github.com/hcaemu/hcaemu/emu/verbstest"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// guestStruct is a guest structure the device reads (or owns fields of)
// that the step program may scribble over.
type guestStruct struct {
	side int // which host's RAM
	name string
	gpa  uint64
	size uint64
}

// guestSide is one host of FuzzGuestMemory and its objects.
type guestSide struct {
	*verbsHost
	guard  *verbstest.Guarded // its WriteWatch oracle
	rc, ud *emutest.QP
	// In the host's PD: rw (all access), lw (local write only), ro
	// (remote read only), lo (local write only, named by no local SGE:
	// only a remote WRITE or atomic, which it does not grant, could write
	// it); x: all access in a PD no QP uses.
	rw, lw, ro, lo, x *verbstest.Region
	av                uverbs.AV // towards the other host
}

// guestRig is FuzzGuestMemory's pair of hosts.
type guestRig struct {
	t       *testing.T
	sides   [2]*guestSide
	structs []guestStruct
	wrid    uint64
}

const guestUDQKey = 0x1111

// pdirOf returns the page directory emutest built right after pages
// (Driver.Buffer allocates the pages, then the directory and its one
// table), after checking that it is one.
func pdirOf(t *testing.T, h *verbsHost, pages []uint64) uint64 {
	t.Helper()
	dir := pages[len(pages)-1] + dma.PageSize
	if tbl := h.Get64(dir); tbl != dir+dma.PageSize || h.Get64(tbl) != pages[0] {
		t.Fatalf("page directory of %#x not at %#x", pages[0], dir)
	}
	return dir
}

func newGuestRig(t *testing.T) *guestRig {
	sw := fabric.NewSwitch()
	g := &guestRig{t: t}
	for i := range g.sides {
		h := newVerbsHost(t, &verbstest.Net{Switch: sw}, i+1, verbstest.HostOpts{RAM: 2 << 20, Watch: true}).(*verbsHost)
		gh := verbstest.Guard(h)
		s := &guestSide{verbsHost: h, guard: gh}
		s.rw = gh.Register(t, "rw", h.pd, 16384, verbstest.All, true)
		s.lw = gh.Register(t, "lw", h.pd, 8192, mr.LocalWrite, true)
		s.ro = gh.Register(t, "ro", h.pd, 4096, mr.RemoteRead, false)
		s.lo = gh.Register(t, "lo", h.pd, 4096, mr.LocalWrite, false)
		s.x = gh.Register(t, "x", h.NewPD(), 8192, verbstest.All, false)
		gh.Canaries(2)
		s.ud = h.qp(t, abi.QPTypeUD, 16)
		if err := s.ud.Modify(abi.AttrState|abi.AttrPKeyIndex|abi.AttrPort|abi.AttrQKey,
			abi.QPAttr{State: abi.QPStateInit, PortNum: 1, QKey: guestUDQKey}); err != nil {
			t.Fatal(err)
		}
		if err := s.ud.Modify(abi.AttrState, abi.QPAttr{State: abi.QPStateRTR}); err != nil {
			t.Fatal(err)
		}
		if err := s.ud.Modify(abi.AttrState|abi.AttrSQPSN, abi.QPAttr{State: abi.QPStateRTS}); err != nil {
			t.Fatal(err)
		}
		g.sides[i] = s
	}
	a, b := g.sides[0], g.sides[1]
	a.rc, b.rc = pairRC(t, a.host, b.host, defaultRC(), defaultRC())
	for i, s := range g.sides {
		peer := g.sides[1-i]
		s.av = uverbs.AV{PortPD: 1<<24 | s.pd, GIDIndex: 1, HopLimit: 64, DMAC: peer.mac}
		s.av.DGID = peer.ip.As16()
		s.av.DGID[10], s.av.DGID[11] = 0xff, 0xff
		for _, qp := range []*emutest.QP{s.rc, s.ud} {
			emutest.AllowQP(s.watch, "qp", qp)
			g.structs = append(g.structs,
				guestStruct{i, "QP ring state", qp.Pages[0], 16},
				guestStruct{i, "QP work queues", qp.Pages[1], uint64(len(qp.Pages)-1) * dma.PageSize},
				guestStruct{i, "QP page directory", pdirOf(t, s.verbsHost, qp.Pages), 2 * dma.PageSize})
		}
		g.structs = append(g.structs,
			guestStruct{i, "CQ ring state", s.cq.Pages[0], 16},
			guestStruct{i, "CQ entries", s.cq.Pages[1], uint64(len(s.cq.Pages)-1) * dma.PageSize},
			guestStruct{i, "CQ page directory", pdirOf(t, s.verbsHost, s.cq.Pages), 2 * dma.PageSize},
			guestStruct{i, "MR page directory", s.dirs[s.rw.GPA].dir, 2 * dma.PageSize},
			guestStruct{i, "async ring", s.AsyncRing[0], uint64(len(s.AsyncRing)) * dma.PageSize},
			guestStruct{i, "CQ notification ring", s.CQRing[0], uint64(len(s.CQRing)) * dma.PageSize},
			guestStruct{i, "DSR", s.DSR, dma.PageSize})
		for k := range 4 {
			g.postRecv(s, s.rc, uverbs.RecvWQE{WRID: g.nextWRID(), SGE: []uverbs.SGE{{Addr: s.lw.Addr, Length: 8192, LKey: s.lw.LKey}}})
			g.postRecv(s, s.ud, uverbs.RecvWQE{WRID: g.nextWRID(), SGE: []uverbs.SGE{{Addr: s.rw.Addr + uint64(k)*4096, Length: 4096, LKey: s.rw.LKey}}})
		}
	}
	for _, s := range g.sides {
		s.watch.Arm()
	}
	// Traffic in flight when the program starts.
	g.legit([]byte{0, 0, 0x10, 0})
	g.legit([]byte{1, 1, 0x20, 0})
	return g
}

func (g *guestRig) nextWRID() uint64 { g.wrid++; return g.wrid }

// The guest's writes to memory the device may be reading or writing at the
// same moment (scribbles, and WQEs once ring indices are scribbled over)
// happen while it holds the device's lock: the device sees them between
// two of its own steps, as it would see a guest's store, and the race
// detector sees the lock.

// postSend writes a send WQE on s's QP under its device's lock and rings.
func (g *guestRig) postSend(s *guestSide, qp *emutest.QP, w uverbs.SendWQE) {
	s.dev.WithLock(func() { qp.WriteSend(w) })
	qp.RingSend()
}

// postRecv writes a receive WQE on s's QP under its device's lock and rings.
func (g *guestRig) postRecv(s *guestSide, qp *emutest.QP, w uverbs.RecvWQE) {
	s.dev.WithLock(func() { qp.WriteRecv(w) })
	qp.RingRecv()
}

// legit posts a well-formed work request from side [0]&1 to the other:
// [1]%5 picks SEND, WRITE, READ, FETCH_ADD or a UD SEND, [2:4] the length.
func (g *guestRig) legit(arg []byte) {
	s, peer := g.sides[arg[0]&1], g.sides[1-arg[0]&1]
	n := uint32(binary.BigEndian.Uint16(arg[2:])) % 8192
	src := uverbs.SGE{Addr: s.rw.Addr, Length: n, LKey: s.rw.LKey}
	switch arg[1] % 5 {
	case 0:
		g.postRecv(peer, peer.rc, uverbs.RecvWQE{WRID: g.nextWRID(), SGE: []uverbs.SGE{{Addr: peer.lw.Addr, Length: 8192, LKey: peer.lw.LKey}}})
		g.postSend(s, s.rc, send(uverbs.OpSend, g.nextWRID(), 0, src))
	case 1:
		w := send(uverbs.OpRDMAWrite, g.nextWRID(), 0, src)
		w.SetRDMA(peer.rw.Addr+8192, peer.rw.RKey)
		g.postSend(s, s.rc, w)
	case 2:
		w := send(uverbs.OpRDMARead, g.nextWRID(), 0, uverbs.SGE{Addr: s.lw.Addr, Length: n, LKey: s.lw.LKey})
		w.SetRDMA(peer.rw.Addr, peer.rw.RKey)
		g.postSend(s, s.rc, w)
	case 3:
		w := send(uverbs.OpAtomicFetchAdd, g.nextWRID(), 0, uverbs.SGE{Addr: s.lw.Addr + 8, Length: 8, LKey: s.lw.LKey})
		w.SetAtomic(peer.rw.Addr+16, 1, 0, peer.rw.RKey)
		g.postSend(s, s.rc, w)
	case 4:
		g.postRecv(peer, peer.ud, uverbs.RecvWQE{WRID: g.nextWRID(), SGE: []uverbs.SGE{{Addr: peer.lw.Addr, Length: 4096, LKey: peer.lw.LKey}}})
		src.Length = min(n, 1024)
		w := send(uverbs.OpSend, g.nextWRID(), 0, src)
		w.SetUD(peer.ud.QPN, guestUDQKey, s.av)
		g.postSend(s, s.ud, w)
	}
}

// sge builds an SGE from 7 bytes: [0] picks a key (the side's rw, lw, ro,
// the foreign PD's x, the peer's rw, or a raw key from [3:7]), [1:3] an
// offset from the region's start, [3:7] the length (mod 16 KiB).
func (g *guestRig) sge(s *guestSide, arg []byte) uverbs.SGE {
	peer := g.sides[1-g.sideIndex(s)]
	regions := []*verbstest.Region{s.rw, s.lw, s.ro, s.x, peer.rw}
	off := uint64(binary.BigEndian.Uint16(arg[1:]))
	raw := binary.BigEndian.Uint32(arg[3:])
	if k := int(arg[0]) % 6; k < len(regions) {
		return uverbs.SGE{Addr: regions[k].Addr + off, Length: raw % 16384, LKey: regions[k].LKey}
	}
	if raw == s.lo.LKey {
		raw ^= 1 << 31 // a local SGE never names lo
	}
	return uverbs.SGE{Addr: s.rw.Addr + off, Length: raw % 16384, LKey: raw}
}

// remote picks an R_Key and address from 3 bytes as sge does, among the
// peer's regions (and one of the side's own).
func (g *guestRig) remote(s *guestSide, arg []byte) (uint64, uint32) {
	peer := g.sides[1-g.sideIndex(s)]
	regions := []*verbstest.Region{peer.rw, peer.lw, peer.ro, peer.x, s.rw, peer.lo}
	reg := regions[int(arg[0])%len(regions)]
	return reg.Addr + uint64(binary.BigEndian.Uint16(arg[1:])), reg.RKey
}

func (g *guestRig) sideIndex(s *guestSide) int {
	if s == g.sides[0] {
		return 0
	}
	return 1
}

// guestStepArgs is the number of argument bytes after each step's kind.
const guestStepArgs = 16

// Step kinds of FuzzGuestMemory's program (the first byte of each step).
const (
	guestWrite32  = iota // [0] structure, [1:3] offset, [3:7] value: a 32-bit store
	guestFill            // [0] structure, [1:3] offset, [3] byte, [4] length-1 (mod 64)
	guestDoorbell        // [0] side, [1] offset (QP, CQ, SRQ, word [2]), [3] handle (RC, UD, CQ, raw), [4:8] value
	guestSettle          // let every engine run until idle
	guestLegit           // a well-formed work request (see legit)
	guestWQE             // a send WQE with fuzzed opcode, flags, SGE and remote
	guestRecv            // a receive WQE with a fuzzed SGE
	guestProducer        // [0] side, [1] queue, [2:6] raw producer index, and its doorbell
	guestStepKinds
)

// run plays a step program of at most 64 steps.
func (g *guestRig) run(in []byte) {
	for steps := 0; len(in) > 0 && steps < 64; steps++ {
		var arg [guestStepArgs]byte
		kind := in[0] % guestStepKinds
		in = in[1:]
		in = in[copy(arg[:], in):]
		g.t.Logf("step %d: kind %d args % x", steps, kind, arg)
		s := g.sides[arg[0]&1]
		switch kind {
		case guestWrite32, guestFill:
			st := g.structs[int(arg[0])%len(g.structs)]
			h := g.sides[st.side]
			off := uint64(binary.BigEndian.Uint16(arg[1:])) % st.size
			h.dev.WithLock(func() {
				if kind == guestWrite32 {
					h.Put32(st.gpa+off&^3, binary.LittleEndian.Uint32(arg[3:]))
					return
				}
				n := min(uint64(arg[4]%64)+1, st.size-off)
				for i := range n {
					h.RAM.Mem[st.gpa+off+i] = arg[3]
				}
			})
		case guestDoorbell:
			// Offsets 0 (QP), 4 (CQ), 8 (SRQ) or any word of the page;
			// the handle one of the side's QPs' or its CQ's, or raw.
			off := []uint64{0, 4, 8, uint64(arg[2]) * 4}[arg[1]%4]
			value := binary.LittleEndian.Uint32(arg[4:])
			switch arg[3] % 4 {
			case 0:
				value = value&^0xFFFFFF | s.rc.Handle
			case 1:
				value = value&^0xFFFFFF | s.ud.Handle
			case 2:
				value = value&^0xFFFFFF | s.cq.Handle
			}
			s.Doorbell(0, off, value)
		case guestSettle:
			verbstest.Settle(g.sides[0], g.sides[1])
		case guestLegit:
			g.legit(arg[:])
		case guestWQE:
			w := uverbs.SendWQE{WRID: g.nextWRID(), Opcode: uint32(arg[1] % 16), SendFlags: uint32(arg[2]) & 0xF,
				SGE: []uverbs.SGE{g.sge(s, arg[3:10])}}
			addr, rkey := g.remote(s, arg[10:13])
			if arg[13]&1 != 0 {
				w.SetAtomic(addr, uint64(arg[14]), uint64(arg[15]), rkey)
			} else {
				w.SetRDMA(addr, rkey)
			}
			if arg[0]&2 != 0 {
				w.SetUD(g.sides[1-g.sideIndex(s)].ud.QPN, guestUDQKey, s.av)
				g.postSend(s, s.ud, w)
			} else {
				g.postSend(s, s.rc, w)
			}
		case guestRecv:
			w := uverbs.RecvWQE{WRID: g.nextWRID(), SGE: []uverbs.SGE{g.sge(s, arg[1:8])}}
			if arg[0]&2 != 0 {
				g.postRecv(s, s.ud, w)
			} else {
				g.postRecv(s, s.rc, w)
			}
		case guestProducer:
			qp := []*emutest.QP{s.rc, s.ud}[arg[1]&1]
			v := binary.LittleEndian.Uint32(arg[2:])
			if arg[1]&2 != 0 {
				s.Put32(qp.Pages[0]+uverbs.RxProdTail, v)
				qp.RingRecv()
			} else {
				qp.SetSQProd(v)
			}
		}
	}
}

// check drains what completed, then applies the oracle.
func (g *guestRig) check() {
	t := g.t
	verbstest.Settle(g.sides[0], g.sides[1])
	for _, s := range g.sides {
		// The ring indices may be scribbled over: drain under the lock.
		s.dev.WithLock(func() {
			for range 2 * s.cq.N {
				e, ok := s.cq.Poll()
				if !ok {
					break
				}
				t.Logf("%s: CQE %+v", s.ip, e)
			}
			s.AsyncEvents()
			s.CQNotifications()
		})
	}
	verbstest.ClosingOracle(t, g.sides[0].guard, g.sides[1].guard)
}

// FuzzGuestMemory plays a guest that scribbles over what it shares with a
// live device: two hosts with RC and UD QPs, traffic in flight, and regions
// of every kind (remote writable, local write only, remote read only, and
// all access in a PD no QP uses); the input is a program of 32-bit stores
// and byte runs over ring indices, work queue entries, page directories,
// CQ rings, the async and CQ notification rings and the DSR, doorbells
// (well-formed or raw), fuzzed send and receive WQEs (opcodes, flags, keys
// of every region, lengths), raw producer indices, legitimate work
// requests and quiescence points. Oracle: no device write outside the
// places it may write (its rings, the index fields it owns, the response
// slot, the regions a QP's PD grants local write in; never a read-only
// region, the other PD's, or a canary page), the devices answer QUERY_PORT
// and leave no goroutine behind, and a fresh QP pair on the same devices
// moves checked data.
func FuzzGuestMemory(f *testing.F) {
	step := func(kind byte, args ...byte) []byte {
		var s [1 + guestStepArgs]byte
		s[0] = kind
		copy(s[1:], args)
		return s[:]
	}
	prog := func(steps ...[]byte) []byte { return bytes.Join(steps, nil) }
	// Each seed exercises one step kind, then lets the engines run.
	f.Add(prog(step(guestSettle)))
	f.Add(prog(step(guestWrite32, 0, 0, 4, 0xFF, 0xFF, 0, 0), step(guestDoorbell, 0, 0, 0, 0, 0, 0, 0, 0x40), step(guestSettle)))
	f.Add(prog(step(guestWrite32, 1, 0, 0, 0, 0, 0, 0x10), step(guestLegit, 0, 1, 0x10, 0), step(guestSettle)))
	f.Add(prog(step(guestFill, 1, 0, 0x20, 0xFF, 63), step(guestDoorbell, 0, 0, 0, 0, 0, 0, 0, 0x40), step(guestSettle)))
	f.Add(prog(step(guestWrite32, 2, 0, 0, 0, 0x10, 0, 0), step(guestLegit, 0, 0, 0x30, 0), step(guestSettle)))
	// Structures 0-12 are host a's (RC QP ring state, work queues, page
	// directory; the same for the UD QP; CQ ring state, entries, page
	// directory; an MR's page directory; async ring; CQ notification
	// ring; DSR), 13-25 host b's.
	f.Add(prog(step(guestWrite32, 6, 0, 12, 0xFF, 0xFF, 0, 0), step(guestLegit, 1, 0, 0x20, 0), step(guestSettle)))
	f.Add(prog(step(guestFill, 7, 0, 0, 0xAB, 63), step(guestLegit, 0, 3, 0, 8), step(guestSettle)))
	f.Add(prog(step(guestWrite32, 8, 0, 0, 0, 0x20, 0, 0), step(guestLegit, 1, 1, 0x10, 0), step(guestSettle)))
	f.Add(prog(step(guestWrite32, 9, 0, 8, 0, 0x30, 0, 0), step(guestLegit, 1, 2, 0x10, 0), step(guestSettle)))
	f.Add(prog(step(guestWrite32, 10, 0, 8, 7, 0, 0, 0), step(guestWrite32, 11, 0, 12, 0x55, 0, 0, 0), step(guestLegit, 0, 4, 0, 100), step(guestSettle)))
	f.Add(prog(step(guestFill, 12, 0, 0, 0xFF, 63), step(guestLegit, 0, 0, 0x10, 0), step(guestSettle)))
	f.Add(prog(step(guestWrite32, 13, 0, 8, 0x40, 0, 0, 0), step(guestDoorbell, 1, 0, 0, 0, 0, 0, 0, 0x80), step(guestSettle)))
	f.Add(prog(step(guestDoorbell, 1, 2, 0, 2, 0, 0, 0, 0x60), step(guestDoorbell, 0, 3, 9, 3, 1, 2, 3, 4), step(guestSettle)))
	f.Add(prog(step(guestWQE, 0, 0, 2, 2, 0, 0, 0, 0, 0x10, 0, 3, 0, 0), step(guestSettle)))
	f.Add(prog(step(guestWQE, 0, 4, 2, 2, 0, 0, 0, 0, 0x10, 0, 3, 0, 0), step(guestWQE, 1, 0, 2, 0, 0, 0, 0, 0, 0x10, 0, 2, 0, 0), step(guestSettle)))
	f.Add(prog(step(guestWQE, 0, 6, 2, 1, 0, 8, 0, 0, 0, 8, 2, 0, 16, 1, 1), step(guestWQE, 2, 2, 2, 3, 0, 0, 0, 0, 1, 0), step(guestSettle)))
	f.Add(prog(step(guestRecv, 1, 2, 0, 0, 0, 0, 0x10, 0), step(guestLegit, 0, 0, 0x08, 0), step(guestSettle)))
	// The other PD's region as a READ's destination, a WRITE's target
	// and a receive's buffer.
	f.Add(prog(step(guestWQE, 0, 4, 2, 3, 0, 0, 0, 0, 0x10, 0, 0, 0, 0), step(guestSettle)))
	f.Add(prog(step(guestWQE, 0, 0, 2, 0, 0, 0, 0, 0, 0x10, 0, 3, 0, 0), step(guestSettle)))
	// A WRITE and an atomic at a local-write-only region of the peer.
	f.Add(prog(step(guestWQE, 0, 0, 2, 0, 0, 0, 0, 0, 0x10, 0, 5, 0, 0), step(guestWQE, 1, 6, 2, 1, 0, 8, 0, 0, 0, 8, 5, 0, 16, 1, 1), step(guestSettle)))
	// (b's RQ has four receives left from setup: the fifth SEND lands in
	// the fuzzed one.)
	f.Add(prog(step(guestRecv, 1, 3, 0, 0, 0, 0, 0x10, 0), step(guestLegit, 0, 0, 0x08, 0), step(guestLegit, 0, 0, 0x08, 0),
		step(guestLegit, 0, 0, 0x08, 0), step(guestLegit, 0, 0, 0x08, 0), step(guestLegit, 0, 0, 0x08, 0), step(guestSettle)))
	f.Add(prog(step(guestRecv, 3, 3, 0, 0, 0, 0, 0x10, 0), step(guestLegit, 0, 4, 0x01, 0), step(guestSettle)))
	f.Add(prog(step(guestProducer, 0, 0, 0xFF, 0, 0, 0), step(guestProducer, 1, 3, 9, 0, 0, 0), step(guestSettle)))
	f.Fuzz(func(t *testing.T, in []byte) {
		checkGoroutines(t)
		g := newGuestRig(t)
		g.run(in)
		g.check()
	})
}
