package record

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/vfio"
)

// pinger is a small PCI function with an engine goroutine, as a device
// model has: a write of a guest address to register 0 makes the engine load
// the 32-bit value there, store value+step after it, raise vector 1 and send
// a frame holding the value; a received frame is written to guest memory at
// 0x100. Register 8 counts the writes. The knobs change its behaviour the
// way a regression would.
type pinger struct {
	host vfio.Host
	port Port
	step uint32 // what is added
	irq  int    // vector raised
	skew uint64 // added to the address read

	mu     sync.Mutex
	writes uint32
	work   chan func()
	done   chan struct{}
}

func newPinger(host vfio.Host, attach func(rx Receiver) Port, step uint32, irq int, skew uint64) *pinger {
	p := &pinger{host: host, step: step, irq: irq, skew: skew, work: make(chan func(), 16), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for f := range p.work {
			f()
		}
	}()
	p.port = attach(p.receive)
	return p
}

func (p *pinger) RegionSize(index int) uint64 {
	if index == 0 {
		return 64
	}
	return 0
}
func (p *pinger) IRQCount(index int) uint32 { return 2 }

func (p *pinger) ReadRegion(index int, off uint64, b []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(b)
	if off == 8 && len(b) == 4 {
		binary.LittleEndian.PutUint32(b, p.writes)
	}
	return nil
}

func (p *pinger) WriteRegion(index int, off uint64, b []byte) error {
	if off != 0 || len(b) != 8 {
		return nil
	}
	gpa := binary.LittleEndian.Uint64(b) + p.skew
	p.mu.Lock()
	p.writes++
	first := p.writes == 1
	p.mu.Unlock()
	if first {
		p.port.SetAddrs([]netip.Addr{netip.MustParseAddr("10.0.0.1")})
	}
	p.work <- func() {
		v, err := dma.LoadUint32(p.host.Mem, gpa)
		if err != nil {
			return
		}
		var out [4]byte
		binary.LittleEndian.PutUint32(out[:], v+p.step)
		if p.host.Mem.WriteAt(out[:], gpa+4) != nil {
			return
		}
		p.host.MSIX(p.irq)
		p.port.Send([]byte{'p', byte(v), byte(v >> 8)})
	}
	return nil
}

func (p *pinger) receive(frame []byte) bool {
	p.work <- func() { _ = p.host.Mem.WriteAt(frame, 0x100) }
	return true
}

// sync waits until the engine has done the work queued so far.
func (p *pinger) sync() {
	ch := make(chan struct{})
	p.work <- func() { close(ch) }
	<-ch
}

func (p *pinger) Reset() {}
func (p *pinger) Close() {
	close(p.work)
	<-p.done
	p.port.Detach()
}

// wire is the port the recorded pinger is attached to: it keeps what is sent.
type wire struct {
	mu   sync.Mutex
	sent [][]byte
}

func (w *wire) Send(frame []byte) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sent = append(w.sent, frame)
	return true
}
func (w *wire) SetAddrs([]netip.Addr) error { return nil }
func (w *wire) Detach()                     {}

// recordPinger records a short session of a pinger driven like a guest
// would, and returns the recording as read back from its file.
func recordPinger(t *testing.T) *Recording {
	t.Helper()
	path := filepath.Join(t.TempDir(), "p.rec.gz")
	rec := NewRecorder(path, "p0", "00:50:56:00:00:01")
	ram := dma.NewFlat(0, 4096)
	binary.LittleEndian.PutUint32(ram.Mem[0x10:], 41)
	binary.LittleEndian.PutUint32(ram.Mem[0x20:], 1000)
	w := &wire{}
	var rx Receiver
	host := rec.Host(vfio.Host{Mem: ram, MSIX: func(int) {}})
	p := newPinger(host, func(r Receiver) Port { rx = rec.Receiver(r); return rec.Port(w) }, 1, 1, 0)
	dev := rec.Device(p)
	var reg [8]byte
	for _, gpa := range []uint64{0x10, 0x20, 0x10} {
		binary.LittleEndian.PutUint64(reg[:], gpa)
		if err := dev.WriteRegion(0, 0, reg[:]); err != nil {
			t.Fatal(err)
		}
		p.sync()
		// The guest changes the value between pings.
		binary.LittleEndian.PutUint32(ram.Mem[gpa:], binary.LittleEndian.Uint32(ram.Mem[gpa:])+10)
	}
	rx([]byte("hello"))
	p.sync()
	var cnt [4]byte
	if err := dev.ReadRegion(0, 8, cnt[:]); err != nil {
		t.Fatal(err)
	}
	dev.Close()
	if !bytes.Equal(ram.Mem[0x100:0x105], []byte("hello")) || len(w.sent) != 3 {
		t.Fatalf("the pinger misbehaved while recorded: ram %q, %d frames", ram.Mem[0x100:0x105], len(w.sent))
	}
	if err := rec.Save(); err != nil {
		t.Fatal(err)
	}
	r, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func replayPinger(r *Recording, step uint32, irq int, skew uint64) *Result {
	rp := NewReplay(r, Options{})
	p := newPinger(rp.Host(), rp.Attach, step, irq, skew)
	return rp.Run(p, p.sync)
}

func TestReplay(t *testing.T) {
	r := recordPinger(t)
	if r.Name != "p0" || r.MAC != "00:50:56:00:00:01" {
		t.Errorf("header: %+v", r.Header)
	}
	tests := []struct {
		name       string
		step       uint32
		irq        int
		skew       uint64
		alter      func(r *Recording)
		want       []string // substrings of the diff; none: the replay must match
		wantInputs int
	}{
		{name: "same", step: 1, irq: 1, wantInputs: 6},
		{name: "another value written", step: 2, irq: 1, want: []string{
			"guest memory write #1 at 0x14\n\twant: 2a 00 00 00\n\t got: 2b 00 00 00 (first difference at byte 0: want 0x2a, got 0x2b)",
		}},
		{name: "another vector", step: 1, irq: 0, want: []string{
			"MSI-X vector 0 raised\n\twant: 0 times\n\t got: 3 times", "MSI-X vector 1 raised\n\twant: 3 times\n\t got: 0 times",
		}},
		{name: "another address read", step: 1, irq: 1, skew: 4, want: []string{
			"guest memory read access of [0x14, +4) that the recording never made",
			"guest memory read of [0x10, +4)\n\twant: 2 reads\n\t got: 0 reads",
			"sent frame #1: missing",
		}},
		{name: "register reply", step: 1, irq: 1, alter: func(r *Recording) {
			for i := range r.Events {
				if r.Events[i].Kind == RegionRead {
					r.Events[i].Data = []byte{9, 0, 0, 0}
				}
			}
		}, want: []string{"region 0 read at 0x8 (4 bytes): reply\n\twant: 09 00 00 00\n\t got: 03 00 00 00"}},
		{name: "frame", step: 1, irq: 1, alter: func(r *Recording) {
			for i := range r.Events {
				if r.Events[i].Kind == FrameTx {
					r.Events[i].Data = []byte{'p', 0, 0}
					break
				}
			}
		}, want: []string{"sent frame #1\n\twant: 70 00 00\n\t got: 70 29 00 (first difference at byte 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := *r
			rec.Events = append([]Event(nil), r.Events...)
			for i := range rec.Events {
				rec.Events[i].Data = clone(rec.Events[i].Data)
			}
			if tt.alter != nil {
				tt.alter(&rec)
			}
			res := replayPinger(&rec, tt.step, tt.irq, tt.skew)
			err := res.Err()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if res.Inputs != tt.wantInputs || res.Frames != 3 || res.IRQs != 3 {
					t.Errorf("replayed %d inputs, %d frames, %d interrupts; want %d, 3, 3", res.Inputs, res.Frames, res.IRQs, tt.wantInputs)
				}
				return
			}
			if err == nil {
				t.Fatal("replay of a changed function passed")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("diff lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestReplayRepeatedReads(t *testing.T) {
	// A function that polls more often than when it was recorded gets the
	// last recorded data again; one that never made a read fails cleanly.
	r := &Recording{Header: Header{Name: "x"}, Events: []Event{
		{Kind: MemRead, GPA: 0x40, Len: 4, Data: []byte{1, 0, 0, 0}},
		{Kind: MemRead, GPA: 0x40, Len: 4, Data: []byte{2, 0, 0, 0}},
	}}
	rp := NewReplay(r, Options{})
	mem := rp.Host().Mem
	for _, want := range []uint32{1, 2, 2} {
		got, err := dma.LoadUint32(mem, 0x40)
		if err != nil || got != want {
			t.Errorf("load: %d, %v; want %d", got, err, want)
		}
	}
	if _, err := dma.LoadUint32(mem, 0x44); err == nil {
		t.Errorf("a read the recording lacks succeeded")
	}
	if err := mem.ReadAt(make([]byte, 4), ^uint64(0)); err == nil {
		t.Errorf("a read at the top of the address space succeeded")
	}
}

func TestReadRejects(t *testing.T) {
	var good bytes.Buffer
	if err := (&Recording{Header: Header{Name: "x"}, Events: []Event{{Kind: IRQ, Vector: 3}}}).Write(&good); err != nil {
		t.Fatal(err)
	}
	if r, err := Read(bytes.NewReader(good.Bytes())); err != nil || len(r.Events) != 1 || r.Events[0].Vector != 3 {
		t.Fatalf("round trip: %+v, %v", r, err)
	}
	var future bytes.Buffer
	if err := write(&future, Header{Format: 99, Name: "x"}, nil); err != nil {
		t.Fatal(err)
	}
	header := func(h Header) []byte {
		var b bytes.Buffer
		h.Format = FormatVersion
		if err := write(&b, h, nil); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	tests := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"not gzip", []byte("{}\n")},
		{"truncated", good.Bytes()[:good.Len()-10]},
		{"other format", future.Bytes()},
		{"unknown link", header(Header{Name: "x", Link: "fddi"})},
		{"InfiniBand without a port", header(Header{Name: "x", Link: LinkInfiniBand})},
		{"InfiniBand port at the SM's LID", header(Header{Name: "x", Link: LinkInfiniBand, IB: &IBPort{LID: 1, PortGUID: 5}})},
		{"InfiniBand port at a multicast LID", header(Header{Name: "x", Link: LinkInfiniBand, IB: &IBPort{LID: 0xC001, PortGUID: 5}})},
		{"an IB port on Ethernet", header(Header{Name: "x", IB: &IBPort{LID: 2, PortGUID: 5}})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Read(bytes.NewReader(tt.data))
			if err == nil {
				t.Fatalf("accepted")
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("a multi-line error: %q", err)
			}
		})
	}
}

func TestRepeatedFrames(t *testing.T) {
	tests := []struct {
		name   string
		frames []string
		want   int
	}{
		{"none", nil, 0},
		{"distinct", []string{"a", "b", "c"}, 0},
		{"one retransmission", []string{"a", "b", "a"}, 1},
		{"go-back-N", []string{"a", "b", "c", "b", "c"}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &Recording{}
			for _, f := range tt.frames {
				rec.Events = append(rec.Events, Event{Kind: FrameTx, Data: []byte(f)}, Event{Kind: FrameRx, Data: []byte(f)})
			}
			if got := rec.RepeatedFrames(); got != tt.want {
				t.Errorf("RepeatedFrames() = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestInfiniBandHeader checks that a recorder of an InfiniBand port writes
// its link and identity, and records its packets both ways.
func TestInfiniBandHeader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hca0.rec.gz")
	r := NewRecorder(path, "hca0", "")
	r.SetInfiniBand(IBPort{LID: 3, PortGUID: 0x0002c90300000101, GIDPrefix: 0xfe80000000000000})
	send := r.Sender(func([]byte) bool { return false })
	if send([]byte{1, 2}) {
		t.Errorf("the wrapped send did not report the port's push-back")
	}
	rx := r.Receiver(func([]byte) bool { return true })
	rx([]byte{3})
	if err := r.Save(); err != nil {
		t.Fatal(err)
	}
	rec, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Link != LinkInfiniBand || rec.IB == nil || *rec.IB != (IBPort{LID: 3, PortGUID: 0x0002c90300000101, GIDPrefix: 0xfe80000000000000}) {
		t.Errorf("header: link %q, port %+v", rec.Link, rec.IB)
	}
	want := []Event{{Kind: FrameTx, Data: []byte{1, 2}, Refused: true}, {Kind: FrameRx, Data: []byte{3}}}
	if len(rec.Events) != 2 || rec.Events[0].Kind != want[0].Kind || !rec.Events[0].Refused || rec.Events[1].Kind != want[1].Kind ||
		!bytes.Equal(rec.Events[0].Data, want[0].Data) || !bytes.Equal(rec.Events[1].Data, want[1].Data) {
		t.Errorf("events %+v, want %+v", rec.Events, want)
	}
}
