package vfio

import (
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
// O_NONBLOCK; the client shares the file description and can clear that flag
// at any time, so no check at SET_IRQS time can rule it out. A sender blocked
// by a hostile client stalls only that client's interrupts, and close unsticks
// it by draining the counter.
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

// unstickTries bounds how long close works on a sender a hostile client keeps
// blocked before it gives up on it (logging it; the goroutine then ends when
// the write does).
const (
	unstickTries = 20
	unstickWait  = 50 * time.Millisecond
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
		for _, w := range batch {
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
// counter), close drains that eventfd's counter so that the write completes;
// it gives up after a bounded time and leaves the sender to finish on its own.
func (t *irqTable) close() {
	for i := range t.fds {
		t.disable(i)
	}
	if t.quit == nil {
		return // never started
	}
	close(t.quit)
	for try := 0; ; try++ {
		select {
		case <-t.done:
			return
		case <-time.After(unstickWait):
		}
		if try == unstickTries {
			t.log.Error("vfio-user: interrupt sender blocked by the client's eventfd; abandoning it")
			return
		}
		if f := t.inflight.Load(); f != nil && f.refs.Add(1) > 1 {
			// Reading the counter resets it to 0 and wakes the writer.
			var buf [8]byte
			_ = unix.SetNonblock(f.fd, true)
			_, _ = unix.Read(f.fd, buf[:])
			f.release()
		}
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
