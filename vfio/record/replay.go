package record

import (
	"bytes"
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/vfio"
)

// Options tune a replay.
type Options struct {
	// Frame describes a frame in one line for a diff (nil: hex).
	Frame func(frame []byte) string
	// MemWrite describes data written to guest memory at gpa for a diff
	// (nil, or "" from it: hex).
	MemWrite func(gpa uint64, data []byte) string
	// MaxDiffs bounds the diffs kept (0: 30).
	MaxDiffs int
}

// Diff is one way the replayed function differed from the recording.
type Diff struct {
	Event int    // index of the recorded event it concerns, -1 if none
	What  string // which event, which field
	Want  string
	Got   string
}

func (d Diff) String() string {
	var b strings.Builder
	if d.Event >= 0 {
		fmt.Fprintf(&b, "event %d: ", d.Event)
	}
	b.WriteString(d.What)
	if d.Want != "" || d.Got != "" {
		fmt.Fprintf(&b, "\n\twant: %s\n\t got: %s", d.Want, d.Got)
	}
	return b.String()
}

// Result is the outcome of a replay.
type Result struct {
	Diffs      []Diff // the first MaxDiffs differences
	TotalDiffs int
	// Counts of what was replayed and compared. RepeatedFrames counts the
	// sent frames that repeat an earlier one byte for byte: for a network
	// function, retransmissions, which a timer may fire when the replay is
	// slow (see Recording.RepeatedFrames).
	Inputs, Reads, ExtraReads, Writes, IRQs, Frames, RepeatedFrames int
}

// RepeatedFrames counts the recorded sent frames that repeat an earlier
// one byte for byte.
func (rec *Recording) RepeatedFrames() int {
	var frames [][]byte
	for _, ev := range rec.Events {
		if ev.Kind == FrameTx {
			frames = append(frames, ev.Data)
		}
	}
	return repeats(frames)
}

func repeats(frames [][]byte) int {
	seen := map[string]bool{}
	n := 0
	for _, f := range frames {
		if seen[string(f)] {
			n++
		}
		seen[string(f)] = true
	}
	return n
}

// Err returns nil when the replay matched the recording, else an error
// listing the differences.
func (r *Result) Err() error {
	if r.TotalDiffs == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "replay differs from the recording in %d places", r.TotalDiffs)
	if r.TotalDiffs > len(r.Diffs) {
		fmt.Fprintf(&b, " (first %d shown)", len(r.Diffs))
	}
	b.WriteString(":")
	for _, d := range r.Diffs {
		b.WriteString("\n")
		b.WriteString(d.String())
	}
	return fmt.Errorf("%s", b.String())
}

// Replay feeds a recording into a fresh function and compares what it does
// with what was recorded:
//   - region accesses, resets, received frames and the close are fed in their
//     recorded order, waiting after each until the function is idle; region
//     read replies are compared as they come;
//   - guest memory reads are served by matching: the n-th read of (gpa,
//     length) gets the data of the n-th recorded read of the same range (a
//     function that polls a range more often than it did when recorded gets
//     the last recorded data again; a range never read in the recording is a
//     difference and fails with dma.ErrFault);
//   - guest memory writes are compared per address in order, interrupts as
//     counts per vector, sent frames and announced addresses in order.
//
// Make the function with Host() and Attach (if it has a port), then Run it.
type Replay struct {
	rec  *Recording
	opts Options

	mu     sync.Mutex
	reads  map[memRange]*readQueue
	rx     Receiver
	port   *replayPort
	res    Result
	writes map[uint64][][]byte // got, per address
	irqs   map[int]int         // got, per vector
	tx     [][]byte            // got
	txRef  []bool              // recorded Refused of the n-th sent frame
	addrs  [][]string          // got
}

type memRange struct {
	gpa  uint64
	size int
}

type readQueue struct {
	events []int // recorded MemRead events, in order
	next   int
}

// NewReplay prepares the replay of rec.
func NewReplay(rec *Recording, opts Options) *Replay {
	if opts.MaxDiffs <= 0 {
		opts.MaxDiffs = 30
	}
	r := &Replay{rec: rec, opts: opts, reads: map[memRange]*readQueue{},
		writes: map[uint64][][]byte{}, irqs: map[int]int{}}
	for i, ev := range rec.Events {
		switch ev.Kind {
		case MemRead:
			k := memRange{ev.GPA, ev.Len}
			queue := r.reads[k]
			if queue == nil {
				queue = &readQueue{}
				r.reads[k] = queue
			}
			queue.events = append(queue.events, i)
		case FrameTx:
			r.txRef = append(r.txRef, ev.Refused)
		}
	}
	return r
}

// diff records a difference (r.mu held).
func (r *Replay) diff(d Diff) {
	r.res.TotalDiffs++
	if len(r.res.Diffs) < r.opts.MaxDiffs {
		r.res.Diffs = append(r.res.Diffs, d)
	}
}

// Host is the host the replayed function must be made with.
func (r *Replay) Host() vfio.Host {
	return vfio.Host{Mem: replayMemory{r}, MSIX: r.msix}
}

func (r *Replay) msix(v int) {
	r.mu.Lock()
	r.irqs[v]++
	r.mu.Unlock()
}

// Attach connects the replayed function's port: rx gets the recorded
// received frames, the port returned takes its sent frames.
func (r *Replay) Attach(rx Receiver) Port {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rx = rx
	r.port = &replayPort{r: r}
	return r.port
}

type replayMemory struct{ r *Replay }

// read serves the next recorded read of [gpa, +size).
func (m replayMemory) read(gpa uint64, size int, how string) ([]byte, error) {
	r := m.r
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.Reads++
	queue := r.reads[memRange{gpa, size}]
	if queue == nil {
		r.diff(Diff{Event: -1, What: fmt.Sprintf("guest memory %s of [%#x, +%d) that the recording never made", how, gpa, size)})
		return nil, dma.Fault(gpa, uint64(size), "not in the recording")
	}
	nth := queue.next
	if nth < len(queue.events) {
		queue.next++
	} else {
		nth = len(queue.events) - 1
		r.res.ExtraReads++
	}
	ev := &r.rec.Events[queue.events[nth]]
	if ev.Err != "" {
		return nil, fmt.Errorf("%w (recorded: %s)", dma.ErrFault, ev.Err)
	}
	if len(ev.Data) != size {
		r.diff(Diff{Event: queue.events[nth], What: fmt.Sprintf("recorded read of [%#x, +%d) holds %d bytes", gpa, size, len(ev.Data))})
		return nil, dma.Fault(gpa, uint64(size), "bad recording")
	}
	return clone(ev.Data), nil
}

func (m replayMemory) write(gpa uint64, p []byte) {
	r := m.r
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes[gpa] = append(r.writes[gpa], clone(p))
}

func (m replayMemory) ReadAt(p []byte, gpa uint64) error {
	b, err := m.read(gpa, len(p), "read")
	if err != nil {
		return err
	}
	copy(p, b)
	return nil
}

func (m replayMemory) WriteAt(p []byte, gpa uint64) error {
	if _, ok := dma.End(gpa, uint64(len(p))); !ok {
		return dma.Fault(gpa, uint64(len(p)), "address overflows")
	}
	m.write(gpa, p)
	return nil
}

// Access mirrors the recorder: a write access is shown the recorded range
// before the access and its result is compared as a write.
func (m replayMemory) Access(gpa, n uint64, write bool, fn func(b []byte)) error {
	if n > uint64(maxAccess) {
		return dma.Fault(gpa, n, "longer than any recorded access")
	}
	how := "read access"
	if write {
		how = "write access"
	}
	b, err := m.read(gpa, int(n), how)
	if err != nil {
		return err
	}
	fn(b)
	if write {
		m.write(gpa, b)
	}
	return nil
}

// maxAccess bounds one replayed access (a recorded one is never larger
// than the largest DMA window QEMU maps, far below this).
const maxAccess = 1 << 30

type replayPort struct{ r *Replay }

func (p *replayPort) Send(frame []byte) bool {
	r := p.r
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.tx)
	r.tx = append(r.tx, clone(frame))
	return n >= len(r.txRef) || !r.txRef[n]
}

func (p *replayPort) SetAddrs(addrs []netip.Addr) error {
	p.r.mu.Lock()
	defer p.r.mu.Unlock()
	p.r.addrs = append(p.r.addrs, addrStrings(addrs))
	return nil
}

func (p *replayPort) Detach() {}

// Run replays the recording into dev, made with Host() (and Attach), calling
// idle after each input to wait until the function has done all the work
// it queued, and compares. It closes dev.
func (r *Replay) Run(dev vfio.Device, idle func()) *Result {
	closed := false
	for i := range r.rec.Events {
		ev := &r.rec.Events[i]
		switch ev.Kind {
		case RegionRead:
			if ev.Len < 0 || ev.Len > maxAccess {
				r.locked(func() { r.diff(Diff{Event: i, What: "bad recorded region read length"}) })
				continue
			}
			p := make([]byte, ev.Len)
			err := dev.ReadRegion(ev.Region, ev.Off, p)
			idle()
			r.locked(func() {
				r.res.Inputs++
				what := fmt.Sprintf("region %d read at %#x (%d bytes)", ev.Region, ev.Off, ev.Len)
				if got := errString(err); got != ev.Err {
					r.diff(Diff{Event: i, What: what + ": error", Want: quoteErr(ev.Err), Got: quoteErr(got)})
				} else if err == nil && !bytes.Equal(p, ev.Data) {
					r.diff(Diff{Event: i, What: what + ": reply", Want: hexBytes(ev.Data), Got: hexBytes(p)})
				}
			})
		case RegionWrite:
			err := dev.WriteRegion(ev.Region, ev.Off, clone(ev.Data))
			idle()
			r.locked(func() {
				r.res.Inputs++
				if got := errString(err); got != ev.Err {
					r.diff(Diff{Event: i, What: fmt.Sprintf("region %d write at %#x of %s: error", ev.Region, ev.Off, hexBytes(ev.Data)),
						Want: quoteErr(ev.Err), Got: quoteErr(got)})
				}
			})
		case Reset:
			dev.Reset()
			idle()
			r.locked(func() { r.res.Inputs++ })
		case FrameRx:
			if ev.Refused {
				continue // the function's queue was full: it never got this frame
			}
			r.mu.Lock()
			rx := r.rx
			r.res.Inputs++
			r.mu.Unlock()
			if rx == nil {
				r.locked(func() { r.diff(Diff{Event: i, What: "received frame, but the function never attached a port"}) })
				continue
			}
			ok := rx(clone(ev.Data))
			idle()
			if !ok {
				r.locked(func() {
					r.diff(Diff{Event: i, What: "received frame refused (queue full): " + r.frame(ev.Data)})
				})
			}
		case Close:
			dev.Close()
			closed = true
			r.locked(func() { r.res.Inputs++ })
		}
		if closed {
			break
		}
	}
	if !closed {
		dev.Close()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.compare()
	res := r.res
	return &res
}

func (r *Replay) locked(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
}

// compare checks the outputs against the recording (r.mu held).
func (r *Replay) compare() {
	// Guest memory writes, per address in order.
	want := map[uint64][]int{}
	var wantTx []int
	var wantAddrs []int
	wantIRQs := map[int]int{}
	for i, ev := range r.rec.Events {
		switch ev.Kind {
		case MemWrite:
			if ev.Err == "" {
				want[ev.GPA] = append(want[ev.GPA], i)
			}
		case FrameTx:
			wantTx = append(wantTx, i)
		case Addrs:
			wantAddrs = append(wantAddrs, i)
		case IRQ:
			wantIRQs[ev.Vector]++
		}
	}
	var gpas []uint64
	for gpa := range want {
		gpas = append(gpas, gpa)
	}
	for gpa := range r.writes {
		if _, ok := want[gpa]; !ok {
			gpas = append(gpas, gpa)
		}
	}
	slices.Sort(gpas)
	for _, gpa := range gpas {
		wantEvs, got := want[gpa], r.writes[gpa]
		r.res.Writes += len(got)
		for k := 0; k < max(len(wantEvs), len(got)); k++ {
			what := fmt.Sprintf("guest memory write #%d at %#x", k+1, gpa)
			switch {
			case k >= len(got):
				ev := &r.rec.Events[wantEvs[k]]
				r.diff(Diff{Event: wantEvs[k], What: what + ": missing", Want: r.memWrite(gpa, ev.Data), Got: "(no such write)"})
			case k >= len(wantEvs):
				r.diff(Diff{Event: -1, What: what + ": not in the recording", Want: "(no such write)", Got: r.memWrite(gpa, got[k])})
			default:
				ev := &r.rec.Events[wantEvs[k]]
				if !bytes.Equal(ev.Data, got[k]) {
					at := diffAt(ev.Data, got[k])
					r.diff(Diff{Event: wantEvs[k], What: what, Want: r.memWriteAt(gpa, ev.Data, at), Got: r.memWriteAt(gpa, got[k], at) + firstDiff(ev.Data, got[k])})
				}
			}
		}
	}

	// Recorded reads the replay never made.
	var ranges []memRange
	for k, queue := range r.reads {
		if queue.next < len(queue.events) {
			ranges = append(ranges, k)
		}
	}
	slices.SortFunc(ranges, func(a, b memRange) int {
		if a.gpa != b.gpa {
			return cmp.Compare(a.gpa, b.gpa)
		}
		return a.size - b.size
	})
	for _, k := range ranges {
		queue := r.reads[k]
		r.diff(Diff{Event: queue.events[queue.next], What: fmt.Sprintf("guest memory read of [%#x, +%d)", k.gpa, k.size),
			Want: fmt.Sprintf("%d reads", len(queue.events)), Got: fmt.Sprintf("%d reads", queue.next)})
	}

	// Interrupts, counted per vector.
	var vectors []int
	for v := range wantIRQs {
		vectors = append(vectors, v)
	}
	for v := range r.irqs {
		if _, ok := wantIRQs[v]; !ok {
			vectors = append(vectors, v)
		}
	}
	slices.Sort(vectors)
	for _, v := range vectors {
		r.res.IRQs += r.irqs[v]
		if wantIRQs[v] != r.irqs[v] {
			r.diff(Diff{Event: -1, What: fmt.Sprintf("MSI-X vector %d raised", v),
				Want: fmt.Sprintf("%d times", wantIRQs[v]), Got: fmt.Sprintf("%d times", r.irqs[v])})
		}
	}

	// Sent frames, in order.
	wantFrames := make([][]byte, len(wantTx))
	for k, i := range wantTx {
		wantFrames[k] = r.rec.Events[i].Data
	}
	gotFrames := r.tx
	r.res.Frames = len(r.tx)
	r.res.RepeatedFrames = repeats(r.tx)
	for k := 0; k < max(len(wantFrames), len(gotFrames)); k++ {
		switch {
		case k >= len(gotFrames):
			r.diff(Diff{Event: wantTx[k], What: fmt.Sprintf("sent frame #%d: missing", k+1), Want: r.frame(wantFrames[k]), Got: "(no such frame)"})
		case k >= len(wantFrames):
			r.diff(Diff{Event: -1, What: fmt.Sprintf("sent frame #%d: not in the recording", k+1), Want: "(no such frame)", Got: r.frame(gotFrames[k])})
		case !bytes.Equal(wantFrames[k], gotFrames[k]):
			r.diff(Diff{Event: wantTx[k], What: fmt.Sprintf("sent frame #%d", k+1), Want: r.frame(wantFrames[k]), Got: r.frame(gotFrames[k]) + firstDiff(wantFrames[k], gotFrames[k])})
		}
	}

	// Announced addresses, in order.
	for k := 0; k < max(len(wantAddrs), len(r.addrs)); k++ {
		var wantList, gotList []string
		event := -1
		if k < len(wantAddrs) {
			event = wantAddrs[k]
			wantList = r.rec.Events[event].Addrs
		}
		if k < len(r.addrs) {
			gotList = r.addrs[k]
		}
		if k >= len(wantAddrs) || k >= len(r.addrs) || !slices.Equal(wantList, gotList) {
			r.diff(Diff{Event: event, What: fmt.Sprintf("port addresses, change #%d", k+1), Want: fmt.Sprint(wantList), Got: fmt.Sprint(gotList)})
		}
	}
}

func (r *Replay) frame(b []byte) string {
	if r.opts.Frame != nil {
		return r.opts.Frame(b)
	}
	return hexBytes(b)
}

func (r *Replay) memWrite(gpa uint64, b []byte) string { return r.memWriteAt(gpa, b, 0) }

// memWriteAt describes a write, showing the bytes around offset at when it
// has no decoder for them.
func (r *Replay) memWriteAt(gpa uint64, b []byte, at int) string {
	if r.opts.MemWrite != nil {
		if s := r.opts.MemWrite(gpa, b); s != "" {
			return s
		}
	}
	return hexAround(b, at)
}

func quoteErr(s string) string {
	if s == "" {
		return "no error"
	}
	return fmt.Sprintf("%queue", s)
}

// hexBytes shows up to 64 bytes in hex.
func hexBytes(b []byte) string {
	if len(b) > 64 {
		return fmt.Sprintf("%d bytes % x …", len(b), b[:64])
	}
	return fmt.Sprintf("% x", b)
}

// hexAround shows the bytes of b around offset at (all of b when short).
func hexAround(b []byte, at int) string {
	if len(b) <= 64 {
		return hexBytes(b)
	}
	from := max(0, min(at-16, len(b)-48))
	to := min(len(b), from+48)
	return fmt.Sprintf("%d bytes, [%d:%d]: % x", len(b), from, to, b[from:to])
}

// diffAt returns the offset of the first difference (0 if none).
func diffAt(want, got []byte) int {
	for k := 0; k < min(len(want), len(got)); k++ {
		if want[k] != got[k] {
			return k
		}
	}
	return min(len(want), len(got))
}

// firstDiff says where two byte strings first differ.
func firstDiff(want, got []byte) string {
	for k := 0; k < min(len(want), len(got)); k++ {
		if want[k] != got[k] {
			return fmt.Sprintf(" (first difference at byte %d: want %#02x, got %#02x)", k, want[k], got[k])
		}
	}
	if len(want) != len(got) {
		return fmt.Sprintf(" (length: want %d, got %d)", len(want), len(got))
	}
	return ""
}
