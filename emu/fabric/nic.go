package fabric

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// StreamNIC is a guest's NIC on the switch: QEMU's "-netdev stream" as a
// client of a unix stream socket this NIC listens on (Path), each Ethernet
// frame preceded by its length (4 bytes, big-endian), as QEMU frames them.
// Each NIC has a socket of its own, so that a paused receiver pauses only
// the traffic headed for it.
//
// Lossless both ways, as a PFC link is:
//   - to the guest, frames wait while QEMU does not read (in the socket's
//     buffer, then in a queue), and a full queue refuses frames, which
//     pauses their sender (Port.Send returns false);
//   - from the guest, a frame the switch refuses (its receiver is full) is
//     offered again until taken; meanwhile this NIC reads nothing more, so
//     QEMU's writes wait, it stops taking frames from the vmxnet3, and the
//     guest's transmit ring fills.
//
// Like PFC's watchdog, a pause that lasts the pause limit (a guest stopped,
// paused in a debugger, or gone) turns into drops for that receiver until
// it reads again, so that one stuck guest cannot stall the segment.
type StreamNIC struct {
	port    *Port
	ln      *net.UnixListener
	path    string
	closing chan struct{}
	wg      sync.WaitGroup

	pauseLimit atomic.Int64 // how long a frame waits for a paused receiver

	// The frames for the guest, queued for the writer goroutine (wake
	// tells it of new ones).
	mu        sync.Mutex
	conn      *sockConn // QEMU's connection; nil until it connects
	queue     [][]byte  // oldest first, at most nicQueue
	partial   []byte    // the rest of a frame written in part, before the queue
	busySince time.Time // when the writer's current write began; zero when idle
	stuckSaid bool      // the watchdog's drops since busySince are logged
	wake      chan struct{}

	in, out, paused, dropped, refused atomic.Uint64
	accepted                          atomic.Uint64 // connections taken
}

// NICStats counts a NIC's frames.
type NICStats struct {
	// In and Out count frames from and to the guest.
	In, Out uint64
	// Paused counts the times a frame found its receiver full and waited.
	Paused uint64
	// Dropped counts frames lost: the guest not there yet or gone, or a
	// pause past the pause limit.
	Dropped uint64
	// Refused counts connections from another user than this process's,
	// and frames longer than maxNICFrame.
	Refused uint64
}

// DefaultPauseLimit is how long a frame waits for a paused receiver before
// it is dropped, unless SetPauseLimit says otherwise.
const DefaultPauseLimit = 2 * time.Second

// nicQueue is how many frames wait for a guest that does not read, beyond
// what its socket holds.
const nicQueue = 256

// maxNICFrame is the longest frame a NIC takes: QEMU's largest (a 64 KiB
// packet and its Ethernet header).
const maxNICFrame = 65536 + 14

// ListenNIC attaches a NIC called name with MAC mac to the switch,
// listening on the unix stream socket path for its QEMU. A later
// connection (QEMU started again) replaces the earlier one.
func (s *Switch) ListenNIC(name string, mac [6]byte, path string) (*StreamNIC, error) {
	os.Remove(path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	d := &StreamNIC{ln: ln, path: path, wake: make(chan struct{}, 1), closing: make(chan struct{})}
	d.pauseLimit.Store(int64(DefaultPauseLimit))
	if d.port, err = s.AttachNIC(name, mac, d.receive); err != nil {
		ln.Close()
		return nil, err
	}
	d.wg.Go(d.acceptLoop)
	d.wg.Go(d.writeLoop)
	return d, nil
}

// SetPauseLimit changes how long a frame waits for a paused receiver.
func (d *StreamNIC) SetPauseLimit(limit time.Duration) { d.pauseLimit.Store(int64(limit)) }

// Path is the NIC's socket (QEMU's addr.path).
func (d *StreamNIC) Path() string { return d.path }

// Port is the NIC's port on the switch.
func (d *StreamNIC) Port() *Port { return d.port }

// Stats returns the NIC's counters.
func (d *StreamNIC) Stats() NICStats {
	return NICStats{In: d.in.Load(), Out: d.out.Load(), Paused: d.paused.Load(),
		Dropped: d.dropped.Load(), Refused: d.refused.Load()}
}

// Close detaches the NIC, ends its connection and removes its socket.
func (d *StreamNIC) Close() error {
	d.port.Detach()
	close(d.closing)
	err := d.ln.Close()
	d.mu.Lock()
	if d.conn != nil {
		d.conn.Close()
	}
	d.mu.Unlock()
	d.wg.Wait()
	d.mu.Lock()
	for _, f := range d.queue {
		Release(f)
	}
	d.queue = nil
	d.mu.Unlock()
	os.Remove(d.path)
	return err
}

// receive queues a frame for the guest. A full queue refuses it (pause);
// a guest whose socket has been full for the pause limit, or that is not
// connected, loses it.
func (d *StreamNIC) receive(frame []byte) bool {
	d.mu.Lock()
	stuck := !d.busySince.IsZero() && time.Since(d.busySince) > time.Duration(d.pauseLimit.Load())
	if d.conn == nil || stuck {
		say := stuck && !d.stuckSaid
		d.stuckSaid = d.stuckSaid || stuck
		d.mu.Unlock()
		d.dropped.Add(1)
		Release(frame)
		if l := d.port.sw.log.Load(); say && l != nil {
			// Once per stall: the frames are dropped until the guest reads.
			l.Warn("segment: a guest's NIC stayed paused for the pause limit: frames to it are dropped until it reads again",
				"nic", d.port.name, "limit", time.Duration(d.pauseLimit.Load()))
		}
		return true
	}
	if len(d.queue) == 0 && d.partial == nil && d.busySince.IsZero() {
		// Nothing waits: write now from the sender's goroutine, if the
		// socket takes the whole frame at once; what it does not take
		// goes first in the queue (the frame's remaining bytes).
		n := d.writeNow(frame)
		if n == 4+len(frame) {
			d.mu.Unlock()
			d.out.Add(1)
			Release(frame)
			return true
		}
		if n > 0 {
			rest := make([]byte, 4+len(frame)-n)
			copy(rest, binary.BigEndian.AppendUint32(nil, uint32(len(frame)))[min(n, 4):])
			copy(rest[max(0, 4-n):], frame[max(0, n-4):])
			Release(frame)
			d.partial = rest
			d.mu.Unlock()
			d.out.Add(1)
			d.kick()
			return true
		}
	}
	if len(d.queue) >= nicQueue {
		d.mu.Unlock()
		d.paused.Add(1)
		Release(frame)
		return false
	}
	d.queue = append(d.queue, frame)
	d.mu.Unlock()
	d.kick()
	return true
}

// kick wakes the writer.
func (d *StreamNIC) kick() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// writeNow writes a frame's length and bytes to QEMU without waiting
// (d.mu held): the number of bytes the socket took.
func (d *StreamNIC) writeNow(frame []byte) int {
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(frame)))
	return d.conn.sendNow([][]byte{hdr[:], frame})
}

// acceptLoop takes QEMU's connections, one at a time.
func (d *StreamNIC) acceptLoop() {
	for {
		conn, err := acceptSock(d.ln)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors, say: try again in a while, not in a spin.
			select {
			case <-d.closing:
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		if uid, err := conn.peerUID(); err != nil || int(uid) != os.Geteuid() {
			// Another user's process: not its QEMU.
			d.refused.Add(1)
			conn.Close()
			continue
		}
		d.mu.Lock()
		old := d.conn
		d.conn = conn
		d.mu.Unlock()
		d.accepted.Add(1)
		if old != nil {
			old.Close() // its reader ends
		}
		d.wg.Go(func() { d.readLoop(conn) })
	}
}

// readLoop takes the guest's frames to the switch until the connection
// ends. It runs in a thread of its own that sleeps in poll(2) on the
// socket (sockConn), so that a frame from the guest wakes this thread,
// which relays it at once, instead of the Go scheduler's netpoller waking
// a thread that then hands the goroutine on (docs/performance.md, 2b: half
// the latency of a relayed frame on a busy machine). The work per wakeup
// is bounded (the frames read at once, each offered to the switch) and it
// sleeps again when the socket is empty.
func (d *StreamNIC) readLoop(conn *sockConn) {
	defer func() {
		d.mu.Lock()
		if d.conn == conn {
			d.conn = nil
		}
		d.mu.Unlock()
		conn.Close()
	}()
	// Not locked to its thread: the thread sleeping in poll(2) is the one
	// it returns on anyway, and a thread that ended with a locked goroutine
	// would take with it the QEMUs started from it (their parent-death
	// signal is the thread's, not the process's).
	buf := make([]byte, 256<<10) // holds the longest frame and its length
	have := 0
	for {
		n, err := conn.read(buf[have:])
		if err != nil || n == 0 {
			return // closed, shut down (Close), or an error
		}
		have += n
		off := 0
		for have-off >= 4 {
			size := int(binary.BigEndian.Uint32(buf[off:]))
			if size > maxNICFrame {
				d.refused.Add(1)
				return // not QEMU's framing: the stream cannot be followed further
			}
			if have-off-4 < size {
				break
			}
			frame := buf[off+4 : off+4+size]
			off += 4 + size
			if size < 14 {
				d.refused.Add(1)
				continue
			}
			d.in.Add(1)
			forwardFrame(d.port, frame, d.closing, time.Duration(d.pauseLimit.Load()), &d.paused, &d.dropped)
		}
		have = copy(buf, buf[off:have])
	}
}

// forwardFrame offers a copy of b to the switch through port until it is
// taken, the pause limit passes (counted in dropped, and given up on at the
// switch: Switch.lost) or closing closes; each refusal counts in paused.
// Each offer is a frame of its own, but only the one taken crossed the
// wire: the capture records that one, or b once when given up on.
func forwardFrame(port *Port, b []byte, closing <-chan struct{}, limit time.Duration, paused, dropped *atomic.Uint64) {
	var deadline time.Time
	var timer *time.Timer
	wait := 20 * time.Microsecond
	for {
		var f []byte
		if len(b) <= FrameSize {
			f = NewFrame()[:len(b)]
		} else {
			f = make([]byte, len(b)) // a jumbo frame: not from the pool
		}
		copy(f, b)
		if port.Send(f) {
			return
		}
		paused.Add(1)
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(limit)
		} else if now.After(deadline) {
			dropped.Add(1)
			port.sw.lost(port, b, limit)
			return
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-closing:
			timer.Stop()
			return
		case <-timer.C:
		}
		wait = min(2*wait, 5*time.Millisecond)
	}
}

// writeLoop writes the queued frames to the guest, all that are queued in
// one write.
func (d *StreamNIC) writeLoop() {
	var hdrs []byte
	for {
		select {
		case <-d.closing:
			return
		case <-d.wake:
		}
		for {
			d.mu.Lock()
			batch, conn, partial := d.queue, d.conn, d.partial
			d.queue, d.partial = nil, nil
			if len(batch) == 0 && partial == nil {
				d.busySince, d.stuckSaid = time.Time{}, false
				d.mu.Unlock()
				break
			}
			d.busySince = time.Now()
			d.mu.Unlock()
			if conn == nil {
				d.dropped.Add(uint64(len(batch)))
			} else {
				hdrs = hdrs[:0]
				bufs := make([][]byte, 0, 2*len(batch)+1)
				if partial != nil {
					bufs = append(bufs, partial)
				}
				for _, f := range batch {
					hdrs = binary.BigEndian.AppendUint32(hdrs, uint32(len(f)))
				}
				for i, f := range batch {
					bufs = append(bufs, hdrs[4*i:4*i+4], f)
				}
				// (writeAll consumes bufs; the frames stay ours.) Waits
				// as long as QEMU does not read: the watchdog is
				// receive's, which drops new frames meanwhile.
				if err := conn.writeAll(bufs); err != nil {
					d.dropped.Add(uint64(len(batch)))
					conn.Close() // its reader clears d.conn
				} else {
					d.out.Add(uint64(len(batch)))
				}
			}
			for _, f := range batch {
				Release(f)
			}
		}
	}
}
