package fabric

import (
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DgramNIC is a guest's NIC on the switch: QEMU's "-netdev dgram" over unix
// datagram sockets, one Ethernet frame per datagram. QEMU binds its end
// (local.path, QEMUPath) and sends to ours (remote.path, Path); each NIC
// has a socket of its own, so that a paused receiver pauses only the
// traffic headed for it.
//
// Lossless both ways, as a PFC link is:
//   - to the guest, frames wait in a queue while QEMU does not read (its
//     socket holds a few datagrams), and a full queue refuses frames, which
//     pauses their sender (Port.Send returns false);
//   - from the guest, a frame the switch refuses (its receiver is full) is
//     offered again until taken; meanwhile this NIC reads nothing more, so
//     QEMU keeps its frames and the guest's transmit ring fills.
//
// Like PFC's watchdog, a pause that lasts the pause limit (a guest stopped,
// paused in a debugger, or gone) turns into drops for that receiver until
// it reads again, so that one stuck guest cannot stall the segment.
type DgramNIC struct {
	port     *Port
	conn     *net.UnixConn
	raw      syscall.RawConn
	path     string
	qemuPath string
	closing  chan struct{}
	wg       sync.WaitGroup

	pauseLimit atomic.Int64 // how long a frame waits for a paused receiver

	// The frames for the guest. A frame the guest's socket has room for is
	// written at once by the sender's goroutine; the others queue for the
	// writer goroutine, which waits for room (wake tells it of new ones).
	mu        sync.Mutex
	queue     [][]byte // oldest first, at most dgramQueue
	busy      bool     // the writer is writing queued frames
	connected bool     // the socket is connected to QEMU's
	stalled   bool     // the watchdog fired, nothing written since
	wake      chan struct{}

	in, outN, paused, dropped, refused atomic.Uint64
}

// DgramStats counts a NIC's frames.
type DgramStats struct {
	// In and Out count frames from and to the guest.
	In, Out uint64
	// Paused counts the times a frame found its receiver full and waited.
	Paused uint64
	// Dropped counts frames lost: the guest not there yet or gone, or a
	// pause past the pause limit.
	Dropped uint64
	// Refused counts datagrams from anyone but the NIC's QEMU.
	Refused uint64
}

// DefaultPauseLimit is how long a frame waits for a paused receiver before
// it is dropped, unless SetPauseLimit says otherwise.
const DefaultPauseLimit = 2 * time.Second

// dgramQueue is how many frames wait for a guest that does not read.
const dgramQueue = 256

// ListenDgram attaches a NIC called name with MAC mac to the switch,
// listening on path for the frames of the QEMU whose socket is qemuPath.
func (s *Switch) ListenDgram(name string, mac [6]byte, path, qemuPath string) (*DgramNIC, error) {
	os.Remove(path)
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return nil, err
	}
	raw, err := conn.SyscallConn()
	if err != nil {
		conn.Close()
		return nil, err
	}
	d := &DgramNIC{conn: conn, raw: raw, path: path, qemuPath: qemuPath,
		wake: make(chan struct{}, 1), closing: make(chan struct{})}
	d.pauseLimit.Store(int64(DefaultPauseLimit))
	if d.port, err = s.AttachNIC(name, mac, d.receive); err != nil {
		conn.Close()
		os.Remove(path)
		return nil, err
	}
	d.wg.Go(d.readLoop)
	d.wg.Go(d.writeLoop)
	return d, nil
}

// SetPauseLimit changes how long a frame waits for a paused receiver.
func (d *DgramNIC) SetPauseLimit(limit time.Duration) { d.pauseLimit.Store(int64(limit)) }

// Path is the NIC's socket (QEMU's remote.path).
func (d *DgramNIC) Path() string { return d.path }

// Port is the NIC's port on the switch.
func (d *DgramNIC) Port() *Port { return d.port }

// Stats returns the NIC's counters.
func (d *DgramNIC) Stats() DgramStats {
	return DgramStats{In: d.in.Load(), Out: d.outN.Load(), Paused: d.paused.Load(),
		Dropped: d.dropped.Load(), Refused: d.refused.Load()}
}

// Close detaches the NIC and removes its socket.
func (d *DgramNIC) Close() error {
	d.port.Detach()
	close(d.closing)
	err := d.conn.Close()
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

// receive takes a frame for the guest: written at once when nothing is
// queued and the guest's socket has room, else queued; a full queue
// refuses it.
func (d *DgramNIC) receive(frame []byte) bool {
	d.mu.Lock()
	if !d.busy && len(d.queue) == 0 && d.connected && !d.stalled {
		var err error
		if cerr := d.raw.Control(func(fd uintptr) {
			err = unix.Send(int(fd), frame, unix.MSG_DONTWAIT)
		}); cerr == nil && err == nil {
			d.mu.Unlock()
			d.outN.Add(1)
			Release(frame)
			return true
		} else if cerr != nil || !errors.Is(err, unix.EAGAIN) {
			d.connected = false // QEMU gone: the writer connects again
		}
	}
	if len(d.queue) >= dgramQueue {
		d.mu.Unlock()
		d.paused.Add(1)
		Release(frame)
		return false
	}
	d.queue = append(d.queue, frame)
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
	return true
}

// readLoop takes the guest's frames to the switch.
func (d *DgramNIC) readLoop() {
	buf := make([]byte, 65536)
	for {
		n, from, err := d.conn.ReadFromUnix(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if from == nil || from.Name != d.qemuPath || n < 14 {
			d.refused.Add(1)
			continue
		}
		d.in.Add(1)
		d.forward(buf[:n])
	}
}

// forward offers the guest's frame to the switch until it is taken (or
// the pause limit passes, or the NIC closes).
func (d *DgramNIC) forward(b []byte) {
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
		if d.port.Send(f) {
			return
		}
		d.paused.Add(1)
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(time.Duration(d.pauseLimit.Load()))
		} else if now.After(deadline) {
			d.dropped.Add(1)
			return
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-d.closing:
			timer.Stop()
			return
		case <-timer.C:
		}
		wait = min(2*wait, 5*time.Millisecond)
	}
}

// writeLoop writes the queued frames to the guest.
func (d *DgramNIC) writeLoop() {
	for {
		select {
		case <-d.closing:
			return
		case <-d.wake:
		}
		for {
			d.mu.Lock()
			if len(d.queue) == 0 {
				d.busy = false
				d.mu.Unlock()
				break
			}
			d.busy = true
			f := d.queue[0]
			d.queue[0] = nil
			d.queue = d.queue[1:]
			d.mu.Unlock()
			if d.write(f) {
				d.outN.Add(1)
			} else {
				d.dropped.Add(1)
			}
			Release(f)
		}
	}
}

// write sends one frame to QEMU, waiting while its socket is full, at most
// the pause limit; after a pause that long it only writes what fits at once,
// until a write succeeds.
func (d *DgramNIC) write(frame []byte) bool {
	d.mu.Lock()
	connected, stalled := d.connected, d.stalled
	d.mu.Unlock()
	if !connected {
		// Connected, the socket polls writable only when QEMU's socket
		// has room: the wait below is the kernel's, not a loop.
		var err error
		if cerr := d.raw.Control(func(fd uintptr) {
			err = unix.Connect(int(fd), &unix.SockaddrUnix{Name: d.qemuPath})
		}); cerr != nil || err != nil {
			return false // QEMU not there (yet)
		}
		d.setState(true, stalled)
	}
	var err error
	try := func(fd uintptr) bool {
		err = unix.Send(int(fd), frame, unix.MSG_DONTWAIT)
		return !errors.Is(err, unix.EAGAIN)
	}
	var werr error
	if stalled {
		werr = d.raw.Control(func(fd uintptr) { try(fd) })
	} else {
		d.conn.SetWriteDeadline(time.Now().Add(time.Duration(d.pauseLimit.Load())))
		werr = d.raw.Write(try)
	}
	switch {
	case werr != nil:
		if errors.Is(werr, os.ErrDeadlineExceeded) {
			d.setState(true, true)
		}
		return false
	case errors.Is(err, unix.EAGAIN):
		return false // stalled, still full
	case err != nil:
		d.setState(false, stalled) // QEMU gone (ECONNREFUSED): connect again next time
		return false
	}
	d.setState(true, false)
	return true
}

// setState records whether the socket is connected and stalled.
func (d *DgramNIC) setState(connected, stalled bool) {
	d.mu.Lock()
	d.connected, d.stalled = connected, stalled
	d.mu.Unlock()
}
