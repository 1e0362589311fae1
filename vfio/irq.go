package vfio

import (
	"errors"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// irqTable holds the eventfd of every interrupt vector: what the client's
// DEVICE_SET_IRQS messages install, and delivers interrupts to them.
//
// Delivery cannot block anyone but itself. trigger, called by the device from
// any goroutine (often under the device's own locks), only counts the
// interrupt and wakes the table's sender goroutine, which writes the eventfds.
// An eventfd write blocks when the counter is saturated and the file is not
// O_NONBLOCK, and no write can be made safe from that: O_NONBLOCK belongs to
// the open file description, which the client shares and may flip between
// any fcntl of ours and the write; pwritev2's RWF_NOWAIT fails with
// EOPNOTSUPP on an eventfd (it has no write_iter); an eventfd cannot be
// reopened as a description of our own (/proc/self/fd/N: ENXIO); a poll for
// POLLOUT is stale by the time of the write. A sender blocked by a hostile
// client stalls only that client's interrupts, and close unsticks it: it
// reads the counter, which lets a blocked write through, until the sender
// has ended. A read can be made non-blocking per call (preadv2 RWF_NOWAIT),
// so close never blocks on the client's file and never changes its flags.
// A client that keeps re-saturating the counter can win each drain, but only
// while it lives: once it has exited no one else writes and the next drain
// lets the sender through. Until then the connection is not over (ServeConn
// has not returned) and keeps its slot among Server.MaxConns.
//
// A vector with no eventfd drops its interrupt at trigger time, so "nothing is
// delivered after de-assignment" holds synchronously.
type irqTable struct {
	log  *slog.Logger
	mu   sync.RWMutex             // guards fds and the shape of pend
	fds  [NumIRQs][]*irqFD        // nil: no eventfd
	pend [NumIRQs][]atomic.Uint64 // interrupts counted, not yet written

	wake     chan struct{} // 1-buffered: the sender has work
	quit     chan struct{}
	done     chan struct{}
	inflight atomic.Pointer[irqFD] // the eventfd the sender is writing, if any
}

// irqFD is one eventfd, reference counted: the table holds one reference and
// the sender one more while it writes, so the fd is closed (and its number
// free for reuse) only when neither uses it.
type irqFD struct {
	fd   int
	refs atomic.Int32
}

func newIRQFD(fd int) *irqFD {
	f := &irqFD{fd: fd}
	f.refs.Store(1)
	return f
}

func (f *irqFD) release() {
	if f.refs.Add(-1) == 0 {
		unix.Close(f.fd)
	}
}

// unstickWait is how often close drains the counter of the eventfd a
// blocked sender writes. shutdownWait is how long it keeps at it once the
// server is shutting down before it gives up on the sender (logging it): a
// client that keeps re-saturating its counter must not hold up the server's
// exit.
const (
	unstickWait  = 50 * time.Millisecond
	shutdownWait = time.Second
)

// start starts the sender.
func (t *irqTable) start(log *slog.Logger) {
	t.log = log
	t.wake = make(chan struct{}, 1)
	t.quit = make(chan struct{})
	t.done = make(chan struct{})
	go t.send()
}

// size sets the number of vectors of index (done once, when the device is
// made).
func (t *irqTable) size(index int, n uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.fds[index] = make([]*irqFD, n)
	t.pend[index] = make([]atomic.Uint64, n)
}

// trigger signals vector v of index. It never blocks: it counts the interrupt
// for the sender. A vector without an eventfd drops the interrupt.
func (t *irqTable) trigger(index, v int) {
	t.mu.RLock()
	if index < 0 || index >= NumIRQs || v < 0 || v >= len(t.fds[index]) || t.fds[index][v] == nil {
		t.mu.RUnlock()
		return
	}
	t.pend[index][v].Add(1)
	t.mu.RUnlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// send is the sender goroutine: it writes the counted interrupts to their
// eventfds until close.
func (t *irqTable) send() {
	defer close(t.done)
	type write struct {
		f *irqFD
		n uint64
	}
	var batch []write
	for {
		select {
		case <-t.quit:
			return
		case <-t.wake:
		}
		batch = batch[:0]
		t.mu.RLock()
		for index := range t.fds {
			for v, f := range t.fds[index] {
				if f == nil {
					continue
				}
				if n := t.pend[index][v].Swap(0); n > 0 {
					f.refs.Add(1)
					batch = append(batch, write{f, n})
				}
			}
		}
		t.mu.RUnlock()
		for i, w := range batch {
			select {
			case <-t.quit:
				// The connection is being torn down: what is left is
				// not written (each write could block again).
				for _, r := range batch[i:] {
					r.f.release()
				}
				return
			default:
			}
			var val [8]byte
			le.PutUint64(val[:], w.n)
			t.inflight.Store(w.f)
			// EAGAIN (a saturated counter) means the interrupt is pending
			// anyway.
			_, _ = unix.Write(w.f.fd, val[:])
			t.inflight.Store(nil)
			w.f.release()
		}
	}
}

// assign installs fds for vectors start.. of index, taking ownership of
// them, and releases the eventfds they replace. The range must be valid.
func (t *irqTable) assign(index int, start uint32, fds []int) {
	t.mu.Lock()
	var old []*irqFD
	for i, fd := range fds {
		slot := &t.fds[index][int(start)+i]
		if *slot != nil {
			old = append(old, *slot)
		}
		*slot = newIRQFD(fd)
	}
	t.mu.Unlock()
	releaseAll(old)
}

// deassign releases the eventfds of vectors [start, start+count) of index.
func (t *irqTable) deassign(index int, start, count uint32) {
	t.mu.Lock()
	var old []*irqFD
	for i := start; i < start+count; i++ {
		slot := &t.fds[index][i]
		if *slot != nil {
			old = append(old, *slot)
			*slot = nil
			t.pend[index][i].Store(0)
		}
	}
	t.mu.Unlock()
	releaseAll(old)
}

// disable releases every eventfd of index.
func (t *irqTable) disable(index int) {
	t.mu.Lock()
	var old []*irqFD
	for i, f := range t.fds[index] {
		if f != nil {
			old = append(old, f)
			t.fds[index][i] = nil
			t.pend[index][i].Store(0)
		}
	}
	t.mu.Unlock()
	releaseAll(old)
}

// close stops the sender and releases every eventfd. If a hostile client
// keeps the sender blocked in a write (a blocking eventfd with a saturated
// counter), close drains that eventfd's counter every unstickWait until the
// write completes and the sender has ended, so nothing of the connection
// outlives it. Once shutdown is closed (the server is stopping) it gives up
// after shutdownWait and leaves the sender to end when its write does.
func (t *irqTable) close(shutdown <-chan struct{}) {
	for i := range t.fds {
		t.disable(i)
	}
	if t.quit == nil {
		return // never started
	}
	close(t.quit)
	tick := time.NewTicker(unstickWait)
	defer tick.Stop()
	var giveUp <-chan time.Time
	var since time.Time
	for {
		select {
		case <-t.done:
			if !since.IsZero() {
				t.log.Info("vfio-user: interrupt sender released", "after", time.Since(since).Round(time.Millisecond))
			}
			return
		case <-shutdown:
			shutdown = nil
			giveUp = time.After(shutdownWait)
			continue
		case <-giveUp:
			t.log.Error("vfio-user: interrupt sender blocked by the client's eventfd at shutdown; abandoning it")
			return
		case <-tick.C:
		}
		f := t.inflight.Load()
		if f == nil || f.refs.Add(1) == 1 {
			continue // between writes, or the write is done and f closed
		}
		if since.IsZero() {
			since = time.Now()
			t.log.Warn("vfio-user: interrupt sender blocked by the client's eventfd; draining it until the write completes")
		}
		drain(f.fd)
		f.release()
	}
}

// drain reads (resets) an eventfd's counter without blocking, whatever the
// client has made of the file's O_NONBLOCK; a write blocked on the
// saturated counter can then complete.
func drain(fd int) {
	var buf [8]byte
	_, err := unix.Preadv2(fd, [][]byte{buf[:]}, -1, unix.RWF_NOWAIT)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		// An older kernel, whose eventfd reads know no RWF_NOWAIT (it
		// came with their read_iter, in 5.x): set O_NONBLOCK and read. A client that clears the flag again in
		// between and empties the counter itself lets the sender's
		// write through, which this read then takes; only one that
		// empties it once more before this read leaves it waiting.
		_ = unix.SetNonblock(fd, true)
		_, _ = unix.Read(fd, buf[:])
	}
}

func releaseAll(fds []*irqFD) {
	for _, f := range fds {
		f.release()
	}
}

// isEventfd reports whether fd is an eventfd, the only kind of file an
// interrupt may be delivered to (a pipe could block the writer).
func isEventfd(fd int) bool {
	target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	return err == nil && target == "anon_inode:[eventfd]"
}
