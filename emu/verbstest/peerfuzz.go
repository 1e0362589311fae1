package verbstest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"

	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
)

// frameGate holds the packets the victim HCAs send until the step program
// lets them through, so that "mid-message" is a point of the program, not of
// the scheduler. The attacker's packets pass at once. Released packets keep
// their order.
type frameGate struct {
	mu       sync.Mutex
	open     bool
	held     []packet
	attacker string // name of the port whose packets pass at once
}

func (g *frameGate) hook(p packet) bool {
	g.mu.Lock()
	if g.open || p.name == g.attacker {
		g.mu.Unlock()
		return p.send(p.buf)
	}
	g.held = append(g.held, p)
	g.mu.Unlock()
	return true
}

// release lets the n oldest held frames through (a refused one is lost, as
// on a full queue: the sender retransmits).
func (g *frameGate) release(n int) {
	g.mu.Lock()
	n = min(n, len(g.held))
	out := append([]packet(nil), g.held[:n]...)
	g.held = append(g.held[:0], g.held[n:]...)
	g.mu.Unlock()
	for _, p := range out {
		p.send(p.buf)
	}
}

// openAll lets every held frame through and the gate stays open.
func (g *frameGate) openAll() {
	for {
		g.mu.Lock()
		if len(g.held) == 0 {
			g.open = true
			g.mu.Unlock()
			return
		}
		out := g.held
		g.held = nil
		g.mu.Unlock()
		for _, p := range out {
			p.send(p.buf)
		}
	}
}

// victimOp is one work request of the victim pair (host a's QP to host
// b's): its opcode, length, and where its data comes from and goes to
// (offsets in the regions of peerRig).
type victimOp struct {
	op       transport.Opcode
	size     uint32
	src, dst uint64
}

// victimOps are the work requests the program posts, in order: multi-packet
// messages (PMTU 1024) of each kind, so the program can act mid-message.
var victimOps = []victimOp{
	{transport.OpSend, 3000, 0, 0},
	{transport.OpWrite, 5000, 4096, 0},
	{transport.OpRead, 4000, 0, 0},
	{transport.OpSend, 2500, 12288, 0},
	{transport.OpFetchAdd, 8, 0, 8192},
	{transport.OpWrite, 2000, 16384, 12288},
	{transport.OpSend, 100, 20480, 0},
	{transport.OpRead, 1500, 5000, 5000},
}

const (
	peerAtomicStart = 1000 // the atomic target's value before the FETCH_ADD
	peerAtomicAdd   = 5
	peerRecvs       = 8 // receives posted on b, 4096 bytes each
)

// peerRig is the victim pair and what the step program acts on.
type peerRig struct {
	t      *testing.T
	gate   *frameGate
	a, b   *Guarded
	qa, qb QP
	evil   *attacker
	// a's regions: src (send data), readDst (READ and atomic results);
	// b's: recvBuf (receives), target (WRITE and atomic target), readSrc
	// (READ source, remote read only), foreign (another PD, all access).
	src, readDst, recvBuf, target, readSrc, foreign *Region
	// destroyable regions in the order step bytes name them, with their host.
	victims []*Region
	owner   []*Guarded
	gone    []bool
	posted  int
	rereg   int
}

func newPeerRig(t *testing.T, newHost NewHost) *peerRig {
	g := &frameGate{attacker: attackerName}
	sw := NewNet(g.hook)
	r := &peerRig{t: t, gate: g}
	// Room for one region more than each host registers (a: 2, b: 4),
	// so that a region registered after a deregistration gets the handle
	// the deregistered one had (the table hands out handles round-robin,
	// and the spare region below moves its hint to the wrap).
	r.a = Guard(newHost(t, sw, 1, HostOpts{RAM: 2 << 20, Regions: 3, Watch: true}))
	r.b = Guard(newHost(t, sw, 2, HostOpts{RAM: 2 << 20, Regions: 5, Watch: true}))
	a, b := r.a, r.b
	r.src = a.Register(t, "src", a.PD(), 24576, All, false)
	r.readDst = a.Register(t, "readDst", a.PD(), 12288, mr.LocalWrite, true)
	r.recvBuf = b.Register(t, "recvBuf", b.PD(), peerRecvs*4096, mr.LocalWrite, true)
	r.target = b.Register(t, "target", b.PD(), 16384, All, true)
	r.readSrc = b.Register(t, "readSrc", b.PD(), 8192, mr.RemoteRead, false)
	r.foreign = b.Register(t, "foreign", b.NewPD(), 8192, All, false)
	for _, h := range []*Guarded{a, b} {
		if !h.Deregister(t, h.Register(t, "spare", h.PD(), 4096, mr.LocalWrite, false)) {
			t.Fatal("deregistering an idle region failed")
		}
	}
	binary.LittleEndian.PutUint64(b.Mem(r.target.GPA+8192, 8), peerAtomicStart)
	a.Canaries(2)
	b.Canaries(2)
	// A short retransmission timer: packets are held back by the program,
	// and a victim broken by the attacker should fail fast rather than
	// after the default second.
	r.qa, r.qb = pair(a.Host, b.Host, RCOpts{Timeout: 12, RetryCnt: 3, RNRRetry: 3})
	for i := range peerRecvs {
		off := uint64(i) * 4096
		r.qb.PostRecv(RecvWR{ID: 100 + uint64(i), SGEs: []mr.SGE{{Addr: r.recvBuf.Addr + off, Length: 4096, LKey: r.recvBuf.LKey}}})
	}
	r.victims = []*Region{r.target, r.recvBuf, r.readSrc, r.src, r.readDst}
	r.owner = []*Guarded{b, b, b, a, a}
	r.gone = make([]bool, len(r.victims))
	r.evil = sw.attach(t, a.Caps().LinkLayer)
	a.Watch().Arm()
	b.Watch().Arm()
	return r
}

// postNext posts the next victim work request, if any is left.
func (r *peerRig) postNext() {
	if r.posted == len(victimOps) {
		return
	}
	v := victimOps[r.posted]
	wrid := uint64(r.posted)
	r.posted++
	wr := SendWR{ID: wrid, Opcode: v.op, SGEs: []mr.SGE{{Addr: r.src.Addr + v.src, Length: v.size, LKey: r.src.LKey}}}
	switch v.op {
	case transport.OpWrite:
		wr.RemoteAddr, wr.RKey = r.target.Addr+v.dst, r.target.RKey
	case transport.OpRead:
		wr.SGEs = []mr.SGE{{Addr: r.readDst.Addr + v.dst, Length: v.size, LKey: r.readDst.LKey}}
		wr.RemoteAddr, wr.RKey = r.readSrc.Addr+v.src, r.readSrc.RKey
	case transport.OpFetchAdd:
		wr.SGEs = []mr.SGE{{Addr: r.readDst.Addr + 8192, Length: 8, LKey: r.readDst.LKey}}
		wr.RemoteAddr, wr.RKey, wr.CompareAdd = r.target.Addr+v.dst, r.target.RKey, peerAtomicAdd
	}
	r.qa.PostSend(wr)
	Settle(r.a) // the request's first packets wait at the gate
}

// destroy deregisters victim region i (if still registered).
func (r *peerRig) destroy(i int) {
	if r.gone[i] {
		return
	}
	r.gone[i] = r.owner[i].Deregister(r.t, r.victims[i])
}

// reregister registers fresh pages at the I/O virtual address of
// deregistered region i, with its PD, size and access, as a process does
// that frees a buffer and registers a new one at the same address: the
// device may hand out the same handle again. Nothing may write the new
// pages: no work request names the new registration.
func (r *peerRig) reregister(i int) {
	if !r.gone[i] || r.rereg == 4 {
		return
	}
	r.rereg++
	old := r.victims[i]
	h := r.owner[i]
	re := h.RegisterAt(r.t, old.Name+" (re-registered)", old.PD, old.Addr, old.Size, old.Access, false)
	r.t.Logf("%s (handle %d) re-registered as handle %d", old.Name, mr.Handle(old.LKey), mr.Handle(re.LKey))
	// A later deregistration of i deregisters the new registration.
	r.victims[i], r.gone[i] = re, false
}

// attackerOpcodes are the opcodes the attacker sends.
var attackerOpcodes = []roce.Opcode{
	roce.RCSendFirst, roce.RCSendMiddle, roce.RCSendLast, roce.RCSendOnly,
	roce.RCRDMAWriteFirst, roce.RCRDMAWriteMiddle, roce.RCRDMAWriteLast, roce.RCRDMAWriteOnly,
	roce.RCRDMAReadRequest, roce.RCRDMAReadResponseFirst, roce.RCRDMAReadResponseMiddle,
	roce.RCRDMAReadResponseLast, roce.RCRDMAReadResponseOnly, roce.RCAcknowledge,
	roce.RCAtomicAcknowledge, roce.RCCompareSwap, roce.RCFetchAdd, roce.RCSendOnlyWithImmediate,
}

// attack sends one packet from the attacker's port, built from 16
// argument bytes:
//
//	[0]     opcode (attackerOpcodes)
//	[1]     bits 0-1 source address: own, spoofed a, spoofed b, own
//	        other (a link-local IPv6 address to the victim's; on
//	        InfiniBand, a GRH with the GIDs);
//	        bit 2: to a's QP (responses) instead of b's (requests);
//	        bit 3: destination QPN from [13:16] instead of the victim's
//	[2]     PSN: the victim's initial PSN plus this signed offset
//	[3]     R_Key: below 96, that of region [3]%6 (b's target, receive
//	        buffers, READ source, other PD's region; a's source, READ
//	        destination); else guessed: handle [3]&31, variant [15]
//	[4:6]   VA offset into the region (or the target)
//	[6:8]   payload length (mod 1025)
//	[8]     payload byte
//	[9]     AETH syndrome
//	[10:13] MSN, DMA length, atomic values
//	[13:16] raw destination QPN ([15] is also the guessed key's variant)
func (r *peerRig) attack(arg []byte) {
	op := attackerOpcodes[int(arg[0])%len(attackerOpcodes)]
	to, qpn := r.b.Host, r.qb.QPN()
	if arg[1]&4 != 0 {
		to, qpn = r.a.Host, r.qa.QPN()
	}
	src, dst := []Addr{r.evil.own, r.a.Addr(), r.b.Addr()}[min(arg[1]&3, 2)], to.Addr()
	if arg[1]&3 == 3 {
		src, dst = r.evil.other, otherAddr(to)
	}
	if arg[1]&8 != 0 {
		qpn = uint32(arg[13])<<16 | uint32(arg[14])<<8 | uint32(arg[15])
	}
	base := StartPSN(r.qa.QPN()) // a's SQ PSN and b's expected PSN
	psn := (base + uint32(int32(int8(arg[2])))) & roce.Mask24
	keyed := []*Region{r.target, r.recvBuf, r.readSrc, r.foreign, r.src, r.readDst}
	var rkey uint32
	var va uint64
	if k := int(arg[3]); k < 6*16 {
		reg := keyed[k%6]
		rkey, va = reg.RKey, reg.Addr
	} else {
		rkey, va = mr.Key(uint32(arg[3]&31), arg[15]), r.target.Addr
	}
	va += uint64(binary.BigEndian.Uint16(arg[4:]))
	n := int(binary.BigEndian.Uint16(arg[6:])) % 1025
	payload := bytes.Repeat([]byte{arg[8]}, n)
	switch op {
	case roce.RCRDMAReadRequest, roce.RCCompareSwap, roce.RCFetchAdd, roce.RCAcknowledge, roce.RCAtomicAcknowledge:
		payload = nil
	}
	pf := roce.PacketFields{Payload: payload}
	pf.BTH.Opcode, pf.BTH.PSN, pf.BTH.PKey, pf.BTH.AckReq, pf.BTH.DestQP = op, psn, 0xFFFF, true, qpn
	dmaLen := uint32(n)
	if op == roce.RCRDMAReadRequest {
		dmaLen = uint32(binary.BigEndian.Uint16(arg[10:])) % 8192
	}
	pf.RETH = roce.RETHFields{VA: va, RKey: rkey, DMALength: dmaLen}
	pf.AtomicETH = roce.AtomicETHFields{VA: va &^ 7, RKey: rkey, SwapAdd: uint64(arg[10]), Compare: uint64(arg[11])}
	pf.AETH = roce.AETHFields{Syndrome: roce.Syndrome(arg[9]), MSN: uint32(arg[10])<<16 | uint32(arg[11])<<8 | uint32(arg[12])}
	pf.AtomicAckETH = uint64(arg[12])
	r.evil.send(src, dst, &pf)
}

// peerStepArgs is the number of argument bytes after each step's opcode.
const peerStepArgs = 16

// Step kinds of FuzzRCPeer's program (the first byte of each step, mod 6).
const (
	peerPost       = iota // post the next victim work request
	peerRelease           // let [0]%8+1 held victim packets through, then sync
	peerAttack            // one attacker packet (see attack)
	peerDestroy           // deregistration of victim region [0]%5
	peerReregister        // register a buffer like deregistered region [0]%5
	peerSync              // sync both devices
	peerStepKinds
)

// run plays a step program (at most 48 steps).
func (r *peerRig) run(in []byte) {
	for steps := 0; len(in) > 0 && steps < 48; steps++ {
		var arg [peerStepArgs]byte
		kind := in[0] % peerStepKinds
		in = in[1:]
		in = in[copy(arg[:], in):]
		r.gate.mu.Lock()
		held := len(r.gate.held)
		r.gate.mu.Unlock()
		r.t.Logf("step %d: kind %d args % x (%d packets held, %d WRs posted)", steps, kind, arg, held, r.posted)
		switch kind {
		case peerPost:
			r.postNext()
		case peerRelease:
			r.gate.release(int(arg[0])%8 + 1)
			Settle(r.a, r.b)
		case peerAttack:
			r.attack(arg[:])
		case peerDestroy:
			r.destroy(int(arg[0]) % len(r.victims))
		case peerReregister:
			r.reregister(int(arg[0]) % len(r.victims))
		case peerSync:
			Settle(r.a, r.b)
		}
	}
}

// check lets everything through, waits for every victim work request to
// complete and applies the oracle.
func (r *peerRig) check() {
	t := r.t
	r.gate.openAll()
	Settle(r.a, r.b)
	a, b := r.a, r.b
	done := map[uint64]transport.Status{}
	for len(done) < r.posted {
		e := Poll(t, a, a, b)
		if e.QPN != r.qa.QPN() || e.Recv || e.ID >= uint64(r.posted) {
			if e.Status == transport.StatusSuccess {
				t.Errorf("a: completion nobody asked for: %+v", e)
			}
			continue
		}
		if _, dup := done[e.ID]; dup {
			t.Fatalf("a: WR %d completed twice: %+v", e.ID, e)
		}
		done[e.ID] = e.Status
	}
	Settle(a, b)
	t.Logf("victim completions (WRID: status): %v", done)
	var sendsOK []int // victim SENDs that completed successfully, in order
	var sends []int   // every victim SEND posted, in order
	for i := 0; i < r.posted; i++ {
		v := victimOps[i]
		ok := done[uint64(i)] == transport.StatusSuccess
		switch v.op {
		case transport.OpSend:
			sends = append(sends, i)
			if ok {
				sendsOK = append(sendsOK, i)
			}
		case transport.OpWrite:
			if ok && !bytes.Equal(b.Mem(r.target.GPA+v.dst, int(v.size)), a.Mem(r.src.GPA+v.src, int(v.size))) {
				t.Errorf("WRITE %d completed SUCCESS but the target holds other data", i)
			}
		case transport.OpRead:
			if ok && !bytes.Equal(a.Mem(r.readDst.GPA+v.dst, int(v.size)), b.Mem(r.readSrc.GPA+v.src, int(v.size))) {
				t.Errorf("READ %d completed SUCCESS with data the source does not hold", i)
			}
		case transport.OpFetchAdd:
			orig := binary.LittleEndian.Uint64(a.Mem(r.readDst.GPA+8192, 8))
			now := binary.LittleEndian.Uint64(b.Mem(r.target.GPA+v.dst, 8))
			if ok && (orig != peerAtomicStart || now != peerAtomicStart+peerAtomicAdd) {
				t.Errorf("FETCH_ADD %d completed SUCCESS: returned %d, target now %d (want %d, %d)", i, orig, now, peerAtomicStart, peerAtomicStart+peerAtomicAdd)
			}
		}
	}
	// Every successful receive on b holds, in order, the data of a victim
	// SEND; every SEND that succeeded was received.
	next, received := 0, map[int]bool{}
	for range 4 * peerRecvs {
		e, ok := b.Poll()
		if !ok {
			break
		}
		if e.Status != transport.StatusSuccess {
			continue
		}
		if e.QPN != r.qb.QPN() || !e.Recv || e.Opcode != transport.WCRecv || e.ID < 100 || e.ID >= 100+peerRecvs {
			t.Errorf("b: completion nobody asked for: %+v", e)
			continue
		}
		got := b.Mem(r.recvBuf.GPA+(e.ID-100)*4096, int(e.ByteLen))
		match := -1
		for j := next; j < len(sends); j++ {
			v := victimOps[sends[j]]
			if v.size == e.ByteLen && bytes.Equal(got, a.Mem(r.src.GPA+v.src, int(v.size))) {
				match = j
				break
			}
		}
		if match < 0 {
			t.Errorf("b: receive %+v completed SUCCESS with data no victim SEND carried (in order)", e)
			continue
		}
		received[sends[match]] = true
		next = match + 1
	}
	for _, i := range sendsOK {
		if !received[i] {
			t.Errorf("SEND %d completed SUCCESS at a but b received no such message", i)
		}
	}
	ClosingOracle(t, a, b)
}

// peerSeeds are FuzzRCPeer's seed programs, each an attack worth keeping.
func peerSeeds() [][]byte {
	var seeds [][]byte
	step := func(kind byte, args ...byte) []byte {
		var s [1 + peerStepArgs]byte
		s[0] = kind
		copy(s[1:], args)
		return s[:]
	}
	prog := func(steps ...[]byte) []byte { return bytes.Join(steps, nil) }
	all := prog(step(peerPost), step(peerPost), step(peerPost), step(peerPost),
		step(peerPost), step(peerPost), step(peerPost), step(peerPost), step(peerRelease, 7), step(peerSync))
	// The victims alone.
	seeds = append(seeds, all)
	// A SEND from the attacker's own address at the PSN b expects.
	seeds = append(seeds, prog(step(peerAttack, 3, 0, 0, 0, 0, 0, 0, 64, 0xEE), step(peerSync), step(peerPost), step(peerRelease, 7)))
	// The same spoofing a's address, mid-message of a's SEND.
	seeds = append(seeds, prog(step(peerPost), step(peerRelease, 0), step(peerAttack, 1, 1, 1, 0, 0, 0, 0x04, 0, 0xEE), step(peerRelease, 7)))
	// A WRITE into b's target with its R_Key, spoofing a.
	seeds = append(seeds, prog(step(peerAttack, 7, 1, 0, 0, 0, 0, 0, 200, 0x55), step(peerPost), step(peerPost), step(peerRelease, 7)))
	// A WRITE with the R_Key of b's region in another PD.
	seeds = append(seeds, prog(step(peerAttack, 7, 0, 0, 3, 0, 0, 0, 200, 0x55), step(peerSync)))
	// Forged READ response and ACKs towards a, spoofing b.
	seeds = append(seeds, prog(step(peerPost), step(peerPost), step(peerPost), step(peerRelease, 5),
		step(peerAttack, 12, 6, 8, 0, 0, 0, 0x0F, 0xA0, 0x77), step(peerAttack, 13, 6, 8, 0, 0, 0, 0, 0, 0, 0x1F, 0, 0, 9), step(peerRelease, 7)))
	// A NAK towards a.
	seeds = append(seeds, prog(step(peerPost), step(peerRelease, 1), step(peerAttack, 13, 6, 0, 0, 0, 0, 0, 0, 0, 0x62), step(peerRelease, 7)))
	// b's WRITE target deregistered mid-WRITE and registered again (the
	// handle comes back), then the rest of the WRITE.
	seeds = append(seeds, prog(step(peerPost), step(peerPost), step(peerRelease, 3), step(peerRelease, 1),
		step(peerDestroy, 0), step(peerReregister, 0), step(peerRelease, 7), step(peerRelease, 7)))
	// a's READ destination deregistered and registered again mid-READ.
	seeds = append(seeds, prog(step(peerPost), step(peerPost), step(peerPost), step(peerRelease, 7), step(peerRelease, 7),
		step(peerDestroy, 4), step(peerReregister, 4), step(peerRelease, 7), step(peerRelease, 7)))
	// b's receive buffers and a's source deregistered mid-SEND.
	seeds = append(seeds, prog(step(peerPost), step(peerRelease, 0), step(peerDestroy, 1), step(peerDestroy, 3),
		step(peerReregister, 1), step(peerRelease, 7), step(peerPost), step(peerRelease, 7)))
	// An atomic from the attacker at b's target.
	seeds = append(seeds, prog(step(peerAttack, 16, 0, 0, 0, 0x20, 0, 0, 0, 0, 0, 9, 9), step(peerPost), step(peerRelease, 7)))
	// WRITEs with keys guessed from the key format (handle 4 = the other
	// PD's region, variants 0 and 1), spoofing a, mid-WRITE.
	seeds = append(seeds, prog(step(peerPost), step(peerPost), step(peerRelease, 4), step(peerAttack, 7, 1, 4, 100, 0, 0, 0, 200, 0x55),
		step(peerAttack, 7, 1, 4, 100, 0, 0, 0, 200, 0x55, 0, 0, 0, 0, 0, 0, 1), step(peerRelease, 7)))
	return seeds
}

// testRCPeerSeeds plays FuzzRCPeer's seed programs under its oracle (the
// WriteWatch, canaries, the victims' data and completions, the closing
// fresh pair): what the fuzzer starts from holds for every model.
func testRCPeerSeeds(t *testing.T, newHost NewHost) {
	for i, seed := range peerSeeds() {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			CheckGoroutines(t)
			r := newPeerRig(t, newHost)
			r.run(seed)
			r.check()
		})
	}
}

// FuzzRCPeer attacks a connected RC pair (host a's QP requesting from host
// b's) from a third port on the switch, while the pair moves checked data:
// the input is a program that posts the pair's work requests, lets their
// frames through a few at a time (so "mid-message" is a point of the
// program), sends RC packets of every kind from the attacker's own address
// or spoofing a's or b's (the victims' QPNs, PSNs around theirs, R_Keys of
// the victims' regions or guessed from the key format), and deregisters
// the pair's regions mid-message and registers new ones that may reuse the
// handle. Oracle: no device write outside the places it may write (rings,
// the regions the pair's work names; never a deregistered region after
// its deregistration returned, a re-registered one, another PD's or a canary);
// every victim work request completes, and one that completes SUCCESS
// moved the right data; the devices still serve commands and a fresh QP
// pair moves checked data.
//
// A model's test package calls it from its own FuzzRCPeer (the seed corpus
// and the fuzz cache are the calling package's, under that name).
func FuzzRCPeer(f *testing.F, newHost NewHost) {
	for _, seed := range peerSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		CheckGoroutines(t)
		r := newPeerRig(t, newHost)
		r.run(in)
		r.check()
	})
}
