package vfio

import (
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// irqTable holds the eventfd of every interrupt vector: what the client's
// DEVICE_SET_IRQS messages install. trigger may run on any goroutine while
// the reader goroutine swaps fds; the RWMutex makes sure an fd is never
// written after it is closed (or its number reused).
type irqTable struct {
	mu  sync.RWMutex
	fds [NumIRQs][]int // -1: no eventfd
}

// size sets the number of vectors of index (done once, when the device is
// made).
func (t *irqTable) size(index int, n uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v := make([]int, n)
	for i := range v {
		v[i] = -1
	}
	t.fds[index] = v
}

// trigger signals vector v of index: it adds 1 to the eventfd's counter. It
// never blocks: the eventfds QEMU passes are non-blocking, and EAGAIN (a
// saturated counter) means the interrupt is pending anyway. A vector without
// an eventfd drops the interrupt.
func (t *irqTable) trigger(index, v int) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if index < 0 || index >= NumIRQs || v < 0 || v >= len(t.fds[index]) {
		return
	}
	fd := t.fds[index][v]
	if fd < 0 {
		return
	}
	var one [8]byte
	le.PutUint64(one[:], 1)
	_, _ = unix.Write(fd, one[:])
}

// assign installs fds for vectors start.. of index, taking ownership of
// them, and closes the fds they replace. The range must be valid.
func (t *irqTable) assign(index int, start uint32, fds []int) {
	t.mu.Lock()
	var old []int
	for i, fd := range fds {
		slot := &t.fds[index][int(start)+i]
		if *slot >= 0 {
			old = append(old, *slot)
		}
		*slot = fd
	}
	t.mu.Unlock()
	closeAll(old)
}

// deassign closes the eventfds of vectors [start, start+count) of index.
func (t *irqTable) deassign(index int, start, count uint32) {
	t.mu.Lock()
	var old []int
	for i := start; i < start+count; i++ {
		slot := &t.fds[index][i]
		if *slot >= 0 {
			old = append(old, *slot)
			*slot = -1
		}
	}
	t.mu.Unlock()
	closeAll(old)
}

// disable closes every eventfd of index.
func (t *irqTable) disable(index int) {
	t.mu.Lock()
	var old []int
	for i, fd := range t.fds[index] {
		if fd >= 0 {
			old = append(old, fd)
			t.fds[index][i] = -1
		}
	}
	t.mu.Unlock()
	closeAll(old)
}

func (t *irqTable) closeAll() {
	for i := range t.fds {
		t.disable(i)
	}
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// isEventfd reports whether fd is an eventfd, the only kind of file an
// interrupt may be delivered to (a pipe could block the writer).
func isEventfd(fd int) bool {
	target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	return err == nil && target == "anon_inode:[eventfd]"
}
