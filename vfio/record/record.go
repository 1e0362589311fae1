// Package record records what crosses the boundary of one PCI function (a
// vfio.Device) while a real guest drives it, and replays a recording into a
// fresh function with no QEMU to check that it still behaves the same.
//
// The boundary is everything the function sees and does: region reads (and
// their replies) and writes, resets and the close from the vfio-user client;
// reads and writes of guest memory (dma.Memory); MSI-X vectors raised; and,
// for a function with a network port, the frames it sends and receives and
// the addresses it announces. Frames are Ethernet frames, or InfiniBand
// packets (LRH through VCRC) for a port on an IB subnet: the header's Link
// says which, and IB the port's LID, GUID and GID prefix. A Recorder wraps each of these and writes one
// ordered event stream per function, a gzip-compressed file of JSON lines.
//
// The package knows nothing of what the function is: the device model, its
// fabric port and its frame formats are plugged in by the caller (the port
// through the Port interface, frame and memory decoding for diffs through
// Decoders).
package record

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sync"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/vfio"
)

// Kind says what an event is.
type Kind string

// Event kinds. Inputs are what the replay feeds the function (region
// accesses, resets, received frames, the close); outputs are what it compares
// (region read replies, guest memory writes, interrupts, sent frames,
// announced addresses). Guest memory reads are inputs served on demand.
const (
	RegionRead  Kind = "rr"    // Region, Off, Len; Data is the reply, Err its error
	RegionWrite Kind = "rw"    // Region, Off, Data; Err the error
	Reset       Kind = "reset" // DEVICE_RESET
	Close       Kind = "close" // the connection ended
	MemRead     Kind = "mr"    // GPA, Data (what the function read), Err
	MemWrite    Kind = "mw"    // GPA, Data (what it wrote), Err
	IRQ         Kind = "irq"   // Vector
	FrameTx     Kind = "tx"    // Data: the frame sent; Refused: the wire pushed back
	FrameRx     Kind = "rx"    // Data: the frame delivered; Refused: the function's queue was full
	Addrs       Kind = "addrs" // Addrs: the addresses the port answers to
	Detach      Kind = "detach"
)

// Event is one crossing of the function's boundary.
type Event struct {
	Kind    Kind     `json:"k"`
	Region  int      `json:"r,omitempty"`
	Off     uint64   `json:"o,omitempty"`
	Len     int      `json:"n,omitempty"`
	GPA     uint64   `json:"a,omitempty"`
	Vector  int      `json:"v,omitempty"`
	Data    []byte   `json:"d,omitempty"`
	Err     string   `json:"e,omitempty"`
	Refused bool     `json:"x,omitempty"`
	Addrs   []string `json:"ip,omitempty"`
}

// Header is the first line of a recording.
type Header struct {
	Format int    `json:"hcaemu_record"`
	Name   string `json:"name"`
	MAC    string `json:"mac,omitempty"`
	Note   string `json:"note,omitempty"`
	// Link says what the frames (tx, rx) are: LinkEthernet ("" in
	// recordings made before there was another) or LinkInfiniBand.
	Link string `json:"link,omitempty"`
	// IB is the InfiniBand port's identity on its subnet (Link
	// LinkInfiniBand), which a replay must give the device again.
	IB *IBPort `json:"ib,omitempty"`
}

// Links: what a recording's frames are.
const (
	// LinkEthernet: Ethernet frames (RoCEv2 and the rest) on the segment.
	LinkEthernet = "ethernet"
	// LinkInfiniBand: native InfiniBand packets, LRH through VCRC, on an
	// IB subnet (emu/ib/subnet); those received include the SA's answers.
	LinkInfiniBand = "infiniband"
)

// IBPort is an InfiniBand port's identity while it was recorded: the LID
// its subnet's SM gave it, its port GUID and the subnet's GID prefix.
type IBPort struct {
	LID       uint16 `json:"lid"`
	PortGUID  uint64 `json:"port_guid"`
	GIDPrefix uint64 `json:"gid_prefix"`
}

// check validates a header read from a file (user input).
func (h *Header) check() error {
	switch h.Link {
	case "", LinkEthernet:
		if h.IB != nil {
			return fmt.Errorf("recording %q: an InfiniBand port on an Ethernet link", h.Name)
		}
	case LinkInfiniBand:
		// LIDs 0x0001–0xBFFF are unicast; 1 is the SM's.
		if h.IB == nil || h.IB.LID < 2 || h.IB.LID >= 0xC000 || h.IB.PortGUID < 2 {
			return fmt.Errorf("recording %q: InfiniBand link without a valid port (LID 2–0xBFFF, GUID ≥ 2)", h.Name)
		}
	default:
		return fmt.Errorf("recording %q: unknown link %q", h.Name, h.Link)
	}
	return nil
}

// FormatVersion is written in every header.
const FormatVersion = 1

// Recording is one function's event stream.
type Recording struct {
	Header
	Events []Event
}

// maxEvents bounds what a recorder keeps (and what Read accepts): a
// recording is for a scenario, not for a guest that runs for days.
const maxEvents = 4 << 20

// ErrTooLong reports a recording that exceeded maxEvents; the recorder drops
// later events and says so in the file's header note.
var ErrTooLong = errors.New("recording too long")

// Recorder collects the events of one function. Its wrappers may be called
// from any goroutine; events are kept in the order they entered the
// recorder. An input event takes its place when the call starts (a region
// write is placed before its effects, a frame when it is handed over), and
// its reply is filled in when the call returns.
type Recorder struct {
	hdr    Header
	path   string
	mu     sync.Mutex
	events []*Event
	full   bool
	saved  bool
	err    error // of the first Save
}

// NewRecorder returns a recorder for the function called name (mac, if not
// empty, is kept for the replay) that Save writes to path.
func NewRecorder(path, name, mac string) *Recorder {
	return &Recorder{path: path, hdr: Header{Format: FormatVersion, Name: name, MAC: mac}}
}

// add places ev in the stream and returns it so that the caller may fill in
// the reply (under r.mu, through fill).
func (r *Recorder) add(ev *Event) *Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.events) >= maxEvents {
		r.full = true
		return ev
	}
	r.events = append(r.events, ev)
	return ev
}

// fill runs f on an event already in the stream (under the lock, so that
// Save never sees it half written).
func (r *Recorder) fill(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	if s := err.Error(); s != "" {
		return s
	}
	return "error"
}

// Save writes the recording to its file, once; later calls return the
// first call's error.
func (r *Recorder) Save() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.saved {
		r.saved = true
		r.err = r.writeFile()
	}
	return r.err
}

// writeFile writes the recording (r.mu held).
func (r *Recorder) writeFile() error {
	hdr := r.hdr
	if r.full {
		hdr.Note = fmt.Sprintf("%v: only the first %d events were kept", ErrTooLong, maxEvents)
	}
	f, err := os.Create(r.path)
	if err != nil {
		return fmt.Errorf("recording %s: %w", hdr.Name, err)
	}
	if err := write(f, hdr, r.events); err != nil {
		f.Close()
		return fmt.Errorf("recording %s: %w", hdr.Name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("recording %s: %w", hdr.Name, err)
	}
	return nil
}

func write(w io.Writer, hdr Header, events []*Event) error {
	zw, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(zw)
	enc := json.NewEncoder(bw)
	if err := enc.Encode(hdr); err != nil {
		return err
	}
	for _, ev := range events {
		if err := enc.Encode(ev); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return zw.Close()
}

// Write writes rec in the recording file format (gzip, JSON lines).
func (rec *Recording) Write(w io.Writer) error {
	events := make([]*Event, len(rec.Events))
	for i := range rec.Events {
		events[i] = &rec.Events[i]
	}
	hdr := rec.Header
	hdr.Format = FormatVersion
	return write(w, hdr, events)
}

// Read parses a recording file.
func Read(r io.Reader) (*Recording, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("recording: %w", err)
	}
	defer zr.Close()
	dec := json.NewDecoder(bufio.NewReader(zr))
	rec := &Recording{}
	if err := dec.Decode(&rec.Header); err != nil {
		return nil, fmt.Errorf("recording header: %w", err)
	}
	if rec.Format != FormatVersion {
		return nil, fmt.Errorf("recording %q: format %d, want %d", rec.Name, rec.Format, FormatVersion)
	}
	if err := rec.Header.check(); err != nil {
		return nil, err
	}
	for {
		var ev Event
		err := dec.Decode(&ev)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("recording %q, event %d: %w", rec.Name, len(rec.Events), err)
		}
		if len(rec.Events) >= maxEvents {
			return nil, fmt.Errorf("recording %q: %w (more than %d events)", rec.Name, ErrTooLong, maxEvents)
		}
		rec.Events = append(rec.Events, ev)
	}
	return rec, nil
}

// ReadFile parses the recording file at path.
func ReadFile(path string) (*Recording, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Read(f)
}

// Device wraps the function dev so that its region accesses, resets and
// close are recorded. Close saves the recording after dev.Close returns
// (dev has stopped touching memory then, so the stream is complete).
func (r *Recorder) Device(dev vfio.Device) vfio.Device { return &recDevice{rec: r, dev: dev} }

type recDevice struct {
	rec *Recorder
	dev vfio.Device
}

func (d *recDevice) RegionSize(index int) uint64 { return d.dev.RegionSize(index) }
func (d *recDevice) IRQCount(index int) uint32   { return d.dev.IRQCount(index) }

func (d *recDevice) ReadRegion(index int, off uint64, p []byte) error {
	ev := d.rec.add(&Event{Kind: RegionRead, Region: index, Off: off, Len: len(p)})
	err := d.dev.ReadRegion(index, off, p)
	d.rec.fill(func() { ev.Data, ev.Err = clone(p), errString(err) })
	return err
}

func (d *recDevice) WriteRegion(index int, off uint64, p []byte) error {
	ev := d.rec.add(&Event{Kind: RegionWrite, Region: index, Off: off, Data: clone(p)})
	err := d.dev.WriteRegion(index, off, p)
	d.rec.fill(func() { ev.Err = errString(err) })
	return err
}

func (d *recDevice) Reset() {
	d.rec.add(&Event{Kind: Reset})
	d.dev.Reset()
}

func (d *recDevice) Close() {
	d.rec.add(&Event{Kind: Close})
	d.dev.Close()
	// A failed save cannot be reported to the client; whoever made the
	// recorder gets the error from its own Save call.
	_ = d.rec.Save()
}

// Host wraps the function's view of the host: guest memory reads and writes
// and MSI-X vectors are recorded.
func (r *Recorder) Host(h vfio.Host) vfio.Host {
	msix := h.MSIX
	return vfio.Host{
		Mem: &recMemory{rec: r, mem: h.Mem},
		MSIX: func(v int) {
			r.add(&Event{Kind: IRQ, Vector: v})
			if msix != nil {
				msix(v)
			}
		},
	}
}

type recMemory struct {
	rec *Recorder
	mem dma.Memory
}

func (m *recMemory) ReadAt(p []byte, gpa uint64) error {
	err := m.mem.ReadAt(p, gpa)
	ev := &Event{Kind: MemRead, GPA: gpa, Len: len(p), Err: errString(err)}
	if err == nil {
		ev.Data = clone(p)
	}
	m.rec.add(ev)
	return err
}

func (m *recMemory) WriteAt(p []byte, gpa uint64) error {
	err := m.mem.WriteAt(p, gpa)
	m.rec.add(&Event{Kind: MemWrite, GPA: gpa, Len: len(p), Data: clone(p), Err: errString(err)})
	return err
}

// Access records a read access as a read of what fn was shown, and a write
// access as a read of the range before fn and a write of it after (fn may
// read, modify and write, as an atomic does).
func (m *recMemory) Access(gpa, n uint64, write bool, fn func(b []byte)) error {
	var before, after []byte
	err := m.mem.Access(gpa, n, write, func(b []byte) {
		before = clone(b)
		if !write {
			// fn is shown the copy that is recorded, so that it sees
			// exactly what the replay will show it.
			fn(before)
			return
		}
		fn(b)
		after = clone(b)
	})
	m.rec.add(&Event{Kind: MemRead, GPA: gpa, Len: int(n), Data: before, Err: errString(err)})
	if write && err == nil {
		m.rec.add(&Event{Kind: MemWrite, GPA: gpa, Len: int(n), Data: after})
	}
	return err
}

// SetInfiniBand says that the function's frames are InfiniBand packets
// of a port with identity p (written in the header).
func (r *Recorder) SetInfiniBand(p IBPort) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hdr.Link, r.hdr.IB = LinkInfiniBand, &p
}

// Sender wraps a port's send function: each frame sent is recorded (copied
// before send takes it), with whether the port pushed back.
func (r *Recorder) Sender(send func(frame []byte) bool) func(frame []byte) bool {
	return func(frame []byte) bool {
		ev := r.add(&Event{Kind: FrameTx, Data: clone(frame)})
		ok := send(frame)
		r.fill(func() { ev.Refused = !ok })
		return ok
	}
}

// Port is a function's attachment to a network: the method set of the
// device model's port, so that the device model's own interface accepts it.
type Port interface {
	Send(frame []byte) bool
	SetAddrs(addrs []netip.Addr) error
	Detach()
}

// Receiver takes a frame for the function; false: its queue was full.
type Receiver = func(frame []byte) bool

// Receiver wraps the function's frame receiver: each frame is recorded when
// it is handed over.
func (r *Recorder) Receiver(rx Receiver) Receiver {
	return func(frame []byte) bool {
		ev := r.add(&Event{Kind: FrameRx, Data: clone(frame)})
		ok := rx(frame)
		r.fill(func() { ev.Refused = !ok })
		return ok
	}
}

// Port wraps the function's port: frames sent (copied before the port takes
// them) and the addresses announced are recorded.
func (r *Recorder) Port(p Port) Port { return &recPort{rec: r, port: p} }

type recPort struct {
	rec  *Recorder
	port Port
}

func (p *recPort) Send(frame []byte) bool { return p.rec.Sender(p.port.Send)(frame) }

func (p *recPort) SetAddrs(addrs []netip.Addr) error {
	p.rec.add(&Event{Kind: Addrs, Addrs: addrStrings(addrs)})
	return p.port.SetAddrs(addrs)
}

func (p *recPort) Detach() {
	p.rec.add(&Event{Kind: Detach})
	p.port.Detach()
}

func addrStrings(addrs []netip.Addr) []string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return s
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}
