// Package transporttest is the fake device the tests of the transport
// services (packages rc and ud) drive a queue pair with: a transport.Env
// whose guest memory is a byte slice with one registered region, whose
// send and receive queues are slices, which records the packets put on the
// wire, the completions and the asynchronous errors, and whose timer is
// armed and fired by hand. It is for tests only.
package transporttest

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
)

// The guest memory of an Env: Pages pages at RAMBase, all of them one
// memory region of protection domain PD at VA, with Key as its L_Key and
// R_Key.
const (
	PD      = 7
	Key     = 1 << 8 // region handle 1, variant 0
	VA      = 0x7000_0000
	RAMBase = 0x10_0000
	Pages   = 16
)

// RegionTable is the region table of an Env's memory.
type RegionTable map[uint32]*mr.Region

// Region returns the region of a handle (nil: none).
func (t RegionTable) Region(handle uint32) *mr.Region { return t[handle] }

// Packet is a packet the QP put on the wire.
type Packet struct {
	Fields  roce.PacketFields
	Payload []byte
	// Run is the number of packets a run stands for (TransmitRun), 0 for
	// one packet.
	Run int
}

// QP is what an Env needs of the transport object it serves: Error moves
// it to ERR, as the device does.
type QP interface {
	SetState(next transport.State)
}

var _ transport.Env = (*Env)(nil)

// Env is a fake transport.Env serving one QP.
type Env struct {
	T       *testing.T
	QP      QP // set it to the QP the Env serves
	RAM     *dma.Flat
	Regions RegionTable
	Sends   []transport.SendWR // posted, not yet taken
	Recvs   []transport.RecvWR // posted, not yet consumed
	Sent    []Packet
	Done    []transport.Completion
	Events  []transport.Event
	Kicks   []transport.Work
	Timer   time.Duration  // armed duration; 0: stopped
	NoPath  bool           // Path and PathTo find no path
	Route   transport.Path // the path Path and PathTo find
	// RunLimit is the most packets TransmitRun takes as one run; 0: the
	// wire carries no runs.
	RunLimit int
	// Busy is how many of the next Transmit calls find the receiver's
	// queue full (transport.ErrPeerBusy, nothing sent).
	Busy int
}

// NewEnv makes an Env with its memory registered and its queues empty.
func NewEnv(t *testing.T) *Env {
	t.Helper()
	env := &Env{T: t, RAM: dma.NewFlat(RAMBase, Pages*dma.PageSize), Regions: RegionTable{}}
	pages := make(dma.Pages, Pages)
	for i := range pages {
		pages[i] = RAMBase + uint64(i)*dma.PageSize
	}
	env.Regions[mr.Handle(Key)] = &mr.Region{PD: PD, Access: mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic,
		Valid: true, Start: VA, Length: Pages * dma.PageSize, Pages: pages, LKey: Key, RKey: Key}
	return env
}

// Mem is the memory the QP reaches.
func (env *Env) Mem() mr.Space { return mr.Space{Mem: env.RAM, Regions: env.Regions} }

// BytesAt is guest memory at region offset off.
func (env *Env) BytesAt(off, n int) []byte { return env.RAM.Mem[off : off+n] }

// Fill writes a recognisable pattern at region offset off and returns a
// copy of it.
func (env *Env) Fill(off, n int, seed byte) []byte {
	b := env.BytesAt(off, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return append([]byte(nil), b...)
}

// Segs is the segment list of [off, off+n) of the region.
func (env *Env) Segs(off, n int) []mr.Seg {
	env.T.Helper()
	segs, _, err := env.Mem().Segs(PD, []mr.SGE{{Addr: VA + uint64(off), Length: uint32(n), LKey: Key}}, true)
	if err != nil {
		env.T.Fatal(err)
	}
	return segs
}

// PostRecv queues a receive request over [off, off+n).
func (env *Env) PostRecv(id uint64, off, n int) {
	env.Recvs = append(env.Recvs, transport.RecvWR{ID: id, Segs: env.Segs(off, n), Cap: uint32(n)})
}

// Post queues a send request over [off, off+n) of the region (the QP
// takes it when pumped).
func (env *Env) Post(wr transport.SendWR, off, n int) {
	wr.Segs, wr.Length = env.Segs(off, n), uint32(n)
	env.Sends = append(env.Sends, wr)
}

// Connect moves qp from RESET through INIT and RTR to RTS.
func Connect(qp QP) {
	for _, s := range []transport.State{transport.StateInit, transport.StateRTR, transport.StateRTS} {
		qp.SetState(s)
	}
}

// Take returns and forgets the packets sent so far.
func (env *Env) Take() []Packet {
	sent := env.Sent
	env.Sent = nil
	return sent
}

// Completions returns and forgets the completions so far.
func (env *Env) Completions() []transport.Completion {
	done := env.Done
	env.Done = nil
	return done
}

// --- transport.Env ------------------------------------------------------------

// PendingSends implements transport.Env.
func (env *Env) PendingSends() (uint32, bool) { return uint32(len(env.Sends)), true }

// TakeSend implements transport.Env.
func (env *Env) TakeSend(wr *transport.SendWR) bool {
	*wr = env.Sends[0]
	env.Sends = env.Sends[1:]
	return true
}

// PeekRecv implements transport.Env.
func (env *Env) PeekRecv() (transport.RecvWR, transport.Status, bool) {
	if len(env.Recvs) == 0 {
		return transport.RecvWR{}, 0, false
	}
	return env.Recvs[0], transport.StatusSuccess, true
}

// PopRecv implements transport.Env.
func (env *Env) PopRecv() { env.Recvs = env.Recvs[1:] }

// Complete implements transport.Env.
func (env *Env) Complete(c transport.Completion) { env.Done = append(env.Done, c) }

// LocalOp implements transport.Env.
func (env *Env) LocalOp(*transport.SendWR) transport.Status { return transport.StatusSuccess }

// Error implements transport.Env: it records ev and moves the QP to ERR.
func (env *Env) Error(ev transport.Event) {
	env.Events = append(env.Events, ev)
	env.QP.SetState(transport.StateErr)
}

// Drained implements transport.Env.
func (env *Env) Drained() {}

// Publish implements transport.Env.
func (env *Env) Publish() {}

// Path implements transport.Env.
func (env *Env) Path() (transport.Path, bool) { return env.Route, !env.NoPath }

// PathTo implements transport.Env.
func (env *Env) PathTo(*transport.AddressHandle) (transport.Path, bool) {
	return env.Route, !env.NoPath
}

// Transmit implements transport.Env: it records the packet.
func (env *Env) Transmit(_ transport.Path, f roce.PacketFields, payload transport.Payload) error {
	if env.Busy > 0 {
		env.Busy--
		return transport.ErrPeerBusy
	}
	b := make([]byte, payload.Len)
	if payload.Len > 0 {
		if err := payload.Gather(env.Mem(), b); err != nil {
			return err
		}
	}
	env.Sent = append(env.Sent, Packet{Fields: f, Payload: b})
	return nil
}

// TransmitRun implements transport.Env: it records up to RunLimit packets
// as one run.
func (env *Env) TransmitRun(_ transport.Path, f roce.PacketFields, payload transport.Payload, n int) (int, error) {
	if n <= 0 || env.RunLimit <= 0 {
		return 0, nil
	}
	per := payload.Len / n
	n = min(n, env.RunLimit)
	payload.Len = per * n
	b := make([]byte, payload.Len)
	if err := payload.Gather(env.Mem(), b); err != nil {
		return 0, err
	}
	env.Sent = append(env.Sent, Packet{Fields: f, Payload: b, Run: n})
	return n, nil
}

// ArmTimer implements transport.Env.
func (env *Env) ArmTimer(d time.Duration) { env.Timer = d }

// StopTimer implements transport.Env.
func (env *Env) StopTimer() { env.Timer = 0 }

// Kick implements transport.Env: it records the work.
func (env *Env) Kick(work transport.Work, _ bool) { env.Kicks = append(env.Kicks, work) }

// --- checks ---------------------------------------------------------------------

// CheckCompletions compares completions on the fields a test names.
func CheckCompletions(t *testing.T, got, want []transport.Completion) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d completions, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.WRID != w.WRID || g.Status != w.Status || g.Opcode != w.Opcode || g.ByteLen != w.ByteLen || g.Recv != w.Recv {
			t.Errorf("completion %d: %+v, want %+v", i, g, w)
		}
	}
}

// CheckPayload compares bytes.
func CheckPayload(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Errorf("%s: %d bytes differ from the %d expected", what, len(got), len(want))
	}
}

// --- packets from a peer --------------------------------------------------------

// Parsed builds the packet f and parses it back: a packet from the peer.
func Parsed(tb testing.TB, f roce.PacketFields) *roce.Packet {
	tb.Helper()
	b, err := roce.Build(make([]byte, 8192), &f)
	if err != nil {
		tb.Fatalf("build %v: %v", f.BTH.Opcode, err)
	}
	p, err := roce.Parse(b)
	if err != nil {
		tb.Fatalf("parse %v: %v", f.BTH.Opcode, err)
	}
	return &p
}

// Seed is a fuzz input of the packets fields describes, each after its
// 2-byte length (what Packets takes apart).
func Seed(tb testing.TB, fields ...roce.PacketFields) []byte {
	tb.Helper()
	var out []byte
	for _, f := range fields {
		b, err := roce.Build(make([]byte, 8192), &f)
		if err != nil {
			tb.Fatal(err)
		}
		out = binary.BigEndian.AppendUint16(out, uint16(len(b)))
		out = append(out, b...)
	}
	return out
}

// Packets takes a fuzz input made as Seed makes it apart: at most max
// length-prefixed chunks (a length beyond the input takes the rest), each
// copied out and handed to fn.
func Packets(in []byte, max int, fn func(b []byte)) {
	for n := 0; len(in) >= 2 && n < max; n++ {
		l := min(int(binary.BigEndian.Uint16(in)), len(in)-2)
		b := append([]byte(nil), in[2:2+l]...)
		in = in[2+l:]
		fn(b)
	}
}
