package vfio_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/vfio"
	"github.com/hcaemu/hcaemu/vfio/vfiotest"
	"golang.org/x/sys/unix"
)

// saturated is the largest eventfd counter: any further write to it blocks
// (or fails with EAGAIN where the file is O_NONBLOCK).
const saturated = 0xfffffffffffffffe

// threadsInWrite counts the process's threads that are inside write(2), per
// /proc/self/task/*/syscall (a thread blocked writing a saturated eventfd
// stays there), leaving out those writing an fd skip reports.
func threadsInWrite(t testing.TB, skip func(fd int) bool) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		b, err := os.ReadFile("/proc/self/task/" + e.Name() + "/syscall")
		if err != nil {
			continue // the thread has exited
		}
		// "nr arg0 ...": the number, then the fd in hex.
		f := strings.Fields(string(b))
		if len(f) < 2 || f[0] != strconv.Itoa(unix.SYS_WRITE) {
			continue
		}
		fd, err := strconv.ParseInt(strings.TrimPrefix(f[1], "0x"), 16, 64)
		if err == nil && skip != nil && skip(int(fd)) {
			continue
		}
		n++
	}
	return n
}

// threadCount is the process's number of threads (what Go's limit of 10000
// counts; idle ones included: the runtime keeps a thread it made).
func threadCount(t testing.TB) int {
	t.Helper()
	return countEntries(t, "/proc/self/task")
}

// fdList describes the process's fds.
func fdList(t testing.TB) string {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range ents {
		target, _ := os.Readlink("/proc/self/fd/" + e.Name())
		fmt.Fprintf(&b, "%s:%s ", e.Name(), target)
	}
	return b.String()
}

// serveOnPair serves one connection of srv on a socket pair and returns its
// client and a channel closed when ServeConn has returned.
func serveOnPair(t testing.TB, ctx context.Context, srv *vfio.Server) (*vfiotest.Client, chan struct{}) {
	t.Helper()
	cl, sv, err := vfiotest.Pair()
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.ServeConn(ctx, sv)
	}()
	c := vfiotest.NewClient(cl)
	c.Timeout = time.Minute
	t.Cleanup(func() { c.Close() })
	return c, served
}

// waitUntil polls cond until it holds or a minute has passed (a bound that
// only turns a server that never lets go into a failure; the CI machine is
// loaded) and reports whether it held.
func waitUntil(cond func() bool) bool {
	for deadline := time.Now().Add(time.Minute); ; {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// hostileClient is the client of issue 28: one blocking eventfd, saturated,
// installed for MSI-X vectors 0-2, and writers that keep it saturated while
// the server tears the connection down. What it holds is counted so that the
// test can tell the server's share: each count goes down just before the
// thing it counts is let go, never after, so the server's share is never
// underestimated.
type hostileClient struct {
	t       testing.TB
	c       *vfiotest.Client
	efd     int
	keeper  int          // the client's own copy, for the test's cleanup only
	fdNums  map[int]bool // every fd number the client has had; fixed once attack returns
	fds     atomic.Int32 // of those, the ones still open
	running atomic.Int32 // writers not yet ended (each holds a dup of efd and its own thread)
	stop    atomic.Bool
	wrote   atomic.Int64 // saturating writes that completed: each one followed a drain by the server
	wg      sync.WaitGroup
}

// open counts fd as the client's.
func (h *hostileClient) open(fd int, err error) int {
	if err != nil {
		h.t.Fatal(err)
	}
	h.fdNums[fd] = true
	h.fds.Add(1)
	return fd
}

func (h *hostileClient) close(fd int) {
	h.fds.Add(-1)
	unix.Close(fd)
}

func (h *hostileClient) isClientFD(fd int) bool { return h.fdNums[fd] }

// attack does steps 1-4 on c: VERSION; SET_IRQS of vectors 0-2 with one
// blocking eventfd whose counter is saturated; raise (the device raising the
// vectors) until the connection's interrupt sender is blocked in write(2);
// then writers goroutines that each clear O_NONBLOCK and block writing the
// saturating value, again after every drain. Nothing else of the test may
// be blocked in write(2) while it runs (it counts the threads there).
func attack(t testing.TB, c *vfiotest.Client, raise func(), writers int) *hostileClient {
	t.Helper()
	h := &hostileClient{t: t, c: c, efd: -1, keeper: -1, fdNums: map[int]bool{}}
	t.Cleanup(h.release)
	if _, _, _, err := c.Version(vfiotest.QEMUVersionJSON); err != nil {
		t.Fatal(err)
	}
	h.efd = h.open(unix.Eventfd(0, unix.EFD_CLOEXEC)) // blocking
	h.keeper = h.open(unix.Dup(h.efd))
	var sat [8]byte
	le.PutUint64(sat[:], saturated)
	if _, err := unix.Write(h.efd, sat[:]); err != nil {
		t.Fatal(err)
	}
	if err := c.SetIRQs(vfio.IRQMSIX, trigEventfd, 0, 3, h.efd, h.efd, h.efd); err != nil {
		t.Fatal(err)
	}
	inWrite := threadsInWrite(t, nil)
	raise()
	if !waitUntil(func() bool { return threadsInWrite(t, nil) == inWrite+1 }) {
		t.Fatal("the interrupt sender did not block on the saturated eventfd")
	}
	dups := make([]int, writers)
	for i := range dups {
		dups[i] = h.open(unix.Dup(h.efd))
	}
	for _, fd := range dups {
		h.running.Add(1)
		h.wg.Go(func() {
			defer h.running.Add(-1)
			defer h.close(fd)
			// A client's thread ends with its process: this one ends with
			// its goroutine, so it leaves no idle thread behind.
			runtime.LockOSThread()
			for !h.stop.Load() {
				// O_NONBLOCK belongs to the file description the
				// server shares: clear it again before every write.
				if err := unix.SetNonblock(fd, false); err != nil {
					t.Error(err)
					return
				}
				_, err := unix.Write(fd, sat[:])
				if errors.Is(err, unix.EAGAIN) {
					continue // the server set O_NONBLOCK in between
				}
				if err != nil {
					t.Error(err)
					return
				}
				h.wrote.Add(1)
			}
		})
	}
	if !waitUntil(func() bool { return threadsInWrite(t, nil) == inWrite+1+writers }) {
		t.Fatalf("%d of %d writers blocked", threadsInWrite(t, nil)-inWrite-1, writers)
	}
	return h
}

// exit is step 5's end: the client stops re-saturating and closes its
// eventfd. Its writers still blocked stay blocked until someone reads the
// counter (a real client's would die with its process).
func (h *hostileClient) exit() {
	h.stop.Store(true)
	if h.efd >= 0 {
		h.close(h.efd)
		h.efd = -1
	}
}

// release ends the client's writers (and, where a server abandoned its
// sender, that sender too) by draining the counter through the client's
// own copy, then closes it.
func (h *hostileClient) release() {
	h.exit()
	if h.keeper < 0 {
		return
	}
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	var buf [8]byte
	for {
		_, _ = unix.Preadv2(h.keeper, [][]byte{buf[:]}, -1, unix.RWF_NOWAIT)
		select {
		case <-done:
			// One more: a sender the server abandoned is now the only
			// writer left, and gets through.
			_, _ = unix.Preadv2(h.keeper, [][]byte{buf[:]}, -1, unix.RWF_NOWAIT)
			h.close(h.keeper)
			h.keeper = -1
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// fightUntil is the client keeping its eventfd saturated after it closed the
// connection, until the server has drained the counter more than drains
// times (the server once tried 20 times before it abandoned its sender), or
// served is closed (the server is done with the connection); then it exits.
func (h *hostileClient) fightUntil(served <-chan struct{}, drains int64) {
	waitUntil(func() bool {
		select {
		case <-served:
			return true
		default:
			return h.wrote.Load() > drains
		}
	})
	h.exit()
}

// TestClosedConnectionLeavesNothing is issue 28's hostile client on 4
// connections at once: each connection's interrupt sender is blocked
// writing its client's blocking, saturated eventfd, 64 writers keep
// re-saturating it while the connection is torn down, then the client closes
// its eventfd. Within a bounded time the server holds no goroutine, thread
// (inside write(2)) or fd more than before the clients connected: what is
// left is the clients' own (their writers still blocked, their fds). The
// server once drained a counter 20 times, abandoned the sender and returned,
// leaving the sender blocked for good with its thread and three fds; the
// sender got through first now and then, hence 4 clients.
func TestClosedConnectionLeavesNothing(t *testing.T) {
	base := takeBaseline(t)
	devs := make(chan *fakeDevice, 1)
	srv := &vfio.Server{
		Log: slog.New(slog.NewTextHandler(testWriter{t}, nil)),
		NewDevice: func(host vfio.Host) (vfio.Device, error) {
			d := newFakeDevice(host)
			devs <- d
			return d, nil
		},
	}
	var all []*fakeDevice
	start := time.Now()
	hs, served := attackAtOnce(t, srv, 4, 64, func(*vfiotest.Client) {
		d := <-devs // made by this client's VERSION
		all = append(all, d)
		for v := range 3 {
			d.host.MSIX(v)
		}
	})
	base.wantNothingHeld(t, served, hs)
	t.Logf("%v after the connections closed; process threads %d -> %d (the clients' blocked writers included)",
		time.Since(start).Round(time.Millisecond), base.threads, threadCount(t))
	for _, d := range all {
		d.mu.Lock()
		if d.closed != 1 {
			t.Errorf("Device.Close called %d times", d.closed)
		}
		d.mu.Unlock()
	}
}

// attackAtOnce serves n connections of srv, each attacked by a
// hostileClient with writers writers (raise making the device raise the
// vectors), then closes them all; each client keeps re-saturating its
// eventfd until the server is done with its connection or has drained the
// counter 30 times, then exits. It returns the clients and the channels
// closed when their ServeConn has returned.
func attackAtOnce(t testing.TB, srv *vfio.Server, n, writers int, raise func(*vfiotest.Client)) ([]*hostileClient, []chan struct{}) {
	t.Helper()
	hs := make([]*hostileClient, n)
	served := make([]chan struct{}, n)
	for i := range n {
		var c *vfiotest.Client
		c, served[i] = serveOnPair(t, context.Background(), srv)
		hs[i] = attack(t, c, func() { raise(c) }, writers)
	}
	var wg sync.WaitGroup
	for i, h := range hs {
		h.c.Close()
		wg.Go(func() { h.fightUntil(served[i], 30) })
	}
	wg.Wait()
	var wrote []int64
	for _, h := range hs {
		wrote = append(wrote, h.wrote.Load())
	}
	t.Logf("the clients' saturating writes after the server's drains: %v", wrote)
	return hs, served
}

// baseline is what the process held before the clients connected.
type baseline struct{ goroutines, fds, inWrite, threads int }

func takeBaseline(t testing.TB) baseline {
	// Go's netpoller makes its epoll fd and eventfd with the first socket:
	// have them before counting.
	cl, sv, err := vfiotest.Pair()
	if err != nil {
		t.Fatal(err)
	}
	cl.Close()
	sv.Close()
	return baseline{runtime.NumGoroutine(), countFDs(t), threadsInWrite(t, nil), threadCount(t)}
}

// wantNothingHeld waits until every connection is served (ServeConn has
// returned) and the server holds no goroutine, fd or thread inside write(2)
// beyond b, and fails t if that does not come within a minute. The server's
// share is what the clients do not account for: their writers not yet ended
// (goroutines), their fds still open, and threads inside write(2) on any fd
// but theirs. No one drains the counters but the server, so once it is done
// the clients' writers still blocked stay put.
func (b baseline) wantNothingHeld(t testing.TB, served []chan struct{}, hs []*hostileClient) {
	t.Helper()
	clientFD := func(fd int) bool {
		for _, h := range hs {
			if h.isClientFD(fd) {
				return true
			}
		}
		return false
	}
	var held string
	ok := waitUntil(func() bool {
		for _, s := range served {
			select {
			case <-s:
			default:
				held = "a connection whose ServeConn has not returned"
				return false
			}
		}
		var w, f int
		for _, h := range hs {
			w += int(h.running.Load())
			f += int(h.fds.Load())
		}
		tw := threadsInWrite(t, clientFD) - b.inWrite
		g, f := runtime.NumGoroutine()-b.goroutines-w, countFDs(t)-b.fds-f
		held = fmt.Sprintf("goroutines %+d, fds %+d, threads in write(2) %+d (besides the clients' %d writers)", g, f, tw, w)
		return g <= 0 && f <= 0 && tw <= 0
	})
	t.Logf("the server holds %s", held)
	if !ok {
		buf := make([]byte, 1<<20)
		t.Errorf("a minute after the clients exited the server still holds %s\nfds: %s\n%s", held, fdList(t), buf[:runtime.Stack(buf, true)])
	}
}

// TestHostileClientsLeaveNothing: 50 of issue 28's clients (10 at a time,
// 8 writers each) leave the server's fd, goroutine and thread counts where
// they started.
func TestHostileClientsLeaveNothing(t *testing.T) {
	const clients, atOnce, writers = 50, 10, 8
	base := takeBaseline(t)
	srv := &vfio.Server{Log: slogDiscard(), NewDevice: func(host vfio.Host) (vfio.Device, error) { return newFakeDevice(host), nil }}
	var after []int
	for range clients / atOnce {
		// Each client has the server raise the vectors itself
		// (DATA_NONE|ACTION_TRIGGER).
		hs, served := attackAtOnce(t, srv, atOnce, writers, func(c *vfiotest.Client) {
			if err := c.SetIRQs(vfio.IRQMSIX, vfio.IRQDataNone|vfio.IRQActionTrigger, 0, 3); err != nil {
				t.Fatal(err)
			}
		})
		base.wantNothingHeld(t, served, hs)
		for _, h := range hs {
			h.release()
		}
		after = append(after, threadCount(t))
	}
	var g, f, tw int
	if !waitUntil(func() bool {
		g, f, tw = runtime.NumGoroutine(), countFDs(t), threadsInWrite(t, nil)
		return g <= base.goroutines && f <= base.fds && tw <= base.inWrite
	}) {
		t.Errorf("after %d clients: goroutines %d -> %d, fds %d -> %d, threads in write(2) %d -> %d",
			clients, base.goroutines, g, base.fds, f, base.inWrite, tw)
	}
	t.Logf("after %d clients: goroutines %d -> %d, fds %d -> %d, threads in write(2) %d -> %d, threads %d -> %v after each batch",
		clients, base.goroutines, g, base.fds, f, base.inWrite, tw, base.threads, after)
	// Idle threads the runtime keeps are reused: the count does not grow
	// with every batch as it does when each client strands a thread.
	if last, first := after[len(after)-1], after[0]; last > first+atOnce {
		t.Errorf("threads grew from %d after the first batch to %d after the last", first, last)
	}
}

// TestShutdownWithABlockedSender: when the server shuts down (ServeConn's
// context ends) while a client that never gives up keeps the interrupt
// sender blocked, ServeConn still returns, after a bounded time: the
// process is ending and must not wait for the client.
func TestShutdownWithABlockedSender(t *testing.T) {
	srv := &vfio.Server{Log: slogDiscard(), NewDevice: func(host vfio.Host) (vfio.Device, error) { return newFakeDevice(host), nil }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, served := serveOnPair(t, ctx, srv)
	h := attack(t, c, func() {
		if err := c.SetIRQs(vfio.IRQMSIX, vfio.IRQDataNone|vfio.IRQActionTrigger, 0, 3); err != nil {
			t.Fatal(err)
		}
	}, 16)
	cancel()
	start := time.Now()
	h.fightUntil(served, math.MaxInt64)
	select {
	case <-served:
	default:
		t.Fatal("ServeConn did not return within a minute of the shutdown")
	}
	t.Logf("ServeConn returned %v after the shutdown", time.Since(start).Round(time.Millisecond))
}
