package vfio_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/vfio"
	"github.com/hcaemu/hcaemu/vfio/vfiotest"
	"golang.org/x/sys/unix"
)

// Region sizes of the fake device (the PVRDMA layout of the spec's
// Appendix C, with a smaller UAR).
var fakeRegions = [vfio.NumRegions]uint64{
	vfio.RegionBAR0:   0x4000,
	vfio.RegionBAR1:   0x100,
	vfio.RegionBAR2:   0x2000,
	vfio.RegionConfig: 0x100,
}

// Offsets in BAR1 where the fake device misbehaves.
const (
	offPanic = 0xf0 // ReadRegion and WriteRegion panic
	offError = 0xf8 // ReadRegion and WriteRegion fail
)

// fakeDevice is a Device whose regions are plain memory; it records calls.
type fakeDevice struct {
	host vfio.Host
	irqs [vfio.NumIRQs]uint32

	mu     sync.Mutex
	mem    [vfio.NumRegions][]byte
	calls  []string
	resets int
	closed int
}

func newFakeDevice(h vfio.Host) *fakeDevice {
	d := &fakeDevice{host: h}
	d.irqs[vfio.IRQMSIX] = 3
	for i, sz := range fakeRegions {
		d.mem[i] = make([]byte, sz)
	}
	return d
}

func (d *fakeDevice) record(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, fmt.Sprintf(format, args...))
}

func (d *fakeDevice) Calls() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.calls...)
}

func (d *fakeDevice) RegionSize(i int) uint64 { return fakeRegions[i] }
func (d *fakeDevice) IRQCount(i int) uint32   { return d.irqs[i] }

func (d *fakeDevice) ReadRegion(i int, off uint64, p []byte) error {
	d.record("read %d %#x %d", i, off, len(p))
	if i == vfio.RegionBAR1 && off == offPanic {
		panic("fake device: read panic")
	}
	if i == vfio.RegionBAR1 && off == offError {
		return errors.New("fake device: read error")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	copy(p, d.mem[i][off:])
	return nil
}

func (d *fakeDevice) WriteRegion(i int, off uint64, p []byte) error {
	d.record("write %d %#x %x", i, off, p)
	if i == vfio.RegionBAR1 && off == offPanic {
		panic("fake device: write panic")
	}
	if i == vfio.RegionBAR1 && off == offError {
		return fmt.Errorf("fake device: write error: %w", unix.EPERM)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	copy(d.mem[i][off:], p)
	return nil
}

func (d *fakeDevice) Reset() {
	d.record("reset")
	d.mu.Lock()
	d.resets++
	d.mu.Unlock()
}

func (d *fakeDevice) resetCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.resets
}

func (d *fakeDevice) Close() {
	d.record("close")
	d.mu.Lock()
	d.closed++
	d.mu.Unlock()
}

func countFDs(t testing.TB) int {
	t.Helper()
	return countEntries(t, "/proc/self/fd")
}

// countEntries is the number of entries of the directory dir.
func countEntries(t testing.TB, dir string) int {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// heldFDs returns how many fds the process holds beyond base, waiting until
// it is want or a minute has passed: an eventfd the server lets go is closed
// once its interrupt sender is done with it, a moment after the reply.
func heldFDs(t testing.TB, base, want int) int {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		got := countFDs(t) - base
		if got == want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(time.Millisecond)
	}
}

// checkLeaks fails t if goroutines or fds outlive it. Register it before
// anything whose cleanup must run first.
func checkLeaks(t testing.TB) {
	t.Helper()
	g0, f0 := runtime.NumGoroutine(), countFDs(t)
	t.Cleanup(func() {
		deadline := time.Now().Add(time.Minute)
		for {
			g, f := runtime.NumGoroutine(), countFDs(t)
			if g <= g0 && f <= f0 {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("leak: goroutines %d -> %d, fds %d -> %d\n%s", g0, g, f0, f, buf)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// session is one served connection with its client and device.
type session struct {
	t      testing.TB
	c      *vfiotest.Client
	done   chan error
	mu     sync.Mutex
	dev    *fakeDevice
	setup  func(*fakeDevice)
	newErr error
}

func (s *session) device() *fakeDevice {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dev
}

// serve starts a server connection on a socket pair, checking for leaks when
// the test ends. setup, if not nil, adjusts the device when it is made.
func serve(t testing.TB, setup func(*fakeDevice)) *session {
	t.Helper()
	checkLeaks(t)
	return serveNoLeakCheck(t, setup, slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})))
}

func serveNoLeakCheck(t testing.TB, setup func(*fakeDevice), log *slog.Logger) *session {
	cl, sv, err := vfiotest.Pair()
	if err != nil {
		t.Fatal(err)
	}
	s := &session{t: t, c: vfiotest.NewClient(cl), done: make(chan error, 1), setup: setup}
	srv := &vfio.Server{
		Log: log,
		NewDevice: func(h vfio.Host) (vfio.Device, error) {
			s.mu.Lock()
			newErr := s.newErr
			s.mu.Unlock()
			if newErr != nil {
				return nil, newErr
			}
			d := newFakeDevice(h)
			if s.setup != nil {
				s.setup(d)
			}
			s.mu.Lock()
			s.dev = d
			s.mu.Unlock()
			return d, nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { s.done <- srv.ServeConn(ctx, sv) }()
	t.Cleanup(func() {
		s.c.Close()
		select {
		case <-s.done:
		case <-time.After(time.Minute):
			t.Error("ServeConn did not return after the client closed")
			cancel()
			<-s.done
		}
		cancel()
		if d := s.device(); d != nil {
			d.mu.Lock()
			closed := d.closed
			d.mu.Unlock()
			if closed != 1 {
				t.Errorf("Device.Close called %d times, want 1", closed)
			}
		}
	})
	return s
}

// negotiated returns a session past VERSION.
func negotiated(t testing.TB, setup func(*fakeDevice)) *session {
	t.Helper()
	s := serve(t, setup)
	if _, _, _, err := s.c.Version(vfiotest.QEMUVersionJSON); err != nil {
		t.Fatal(err)
	}
	return s
}

// wantClosed checks that the server ended the connection with an error,
// after at most one error reply.
func (s *session) wantClosed() {
	s.t.Helper()
	s.c.Timeout = 5 * time.Second
	for i := 0; ; i++ {
		m, err := s.c.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, unix.ECONNRESET) {
				s.t.Fatalf("want EOF, got %v", err)
			}
			break
		}
		if i > 0 || m.Header.Flags&vfio.FlagError == 0 || m.Header.Size != vfio.HeaderSize {
			s.t.Fatalf("unexpected message before close: %+v", m.Header)
		}
	}
	select {
	case err := <-s.done:
		if err == nil {
			s.t.Error("ServeConn returned nil for a broken stream")
		}
		s.done <- err // for the cleanup
	case <-time.After(time.Minute):
		s.t.Fatal("ServeConn did not return")
	}
}

// alive checks that the connection still answers requests in order.
func (s *session) alive() {
	s.t.Helper()
	info, err := s.c.GetInfo()
	if err != nil {
		s.t.Fatalf("connection not usable: %v", err)
	}
	if info.NumRegions != vfio.NumRegions {
		s.t.Fatalf("GET_INFO after error: %+v", info)
	}
}

func eventfd(t testing.TB) int {
	t.Helper()
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// readEventfd returns the eventfd's counter (0 if nothing was written) and
// resets it.
func readEventfd(t testing.TB, fd int) uint64 {
	t.Helper()
	var b [8]byte
	n, err := unix.Read(fd, b[:])
	if errors.Is(err, unix.EAGAIN) {
		return 0
	}
	if err != nil || n != 8 {
		t.Fatalf("read eventfd: %d, %v", n, err)
	}
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24
}

// waitEventfd reads the eventfd until its counter has added up to want
// (interrupts are written by the connection's sender goroutine, so they
// arrive a little after the device raises them) and returns the total. It
// waits as long as it takes, up to a minute that only turns a lost interrupt
// into a failure.
func waitEventfd(t testing.TB, fd int, want uint64) uint64 {
	t.Helper()
	var total uint64
	deadline := time.Now().Add(time.Minute)
	for total < want && time.Now().Before(deadline) {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(pfd, 1000); err != nil && !errors.Is(err, unix.EINTR) {
			t.Fatalf("poll eventfd: %v", err)
		}
		total += readEventfd(t, fd)
	}
	return total
}

func memfd(t testing.TB, size int64) int {
	t.Helper()
	fd, err := unix.MemfdCreate("guest-ram", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func isClosedOnServer(t testing.TB, before int) {
	t.Helper()
	if got := countFDs(t); got != before {
		t.Fatalf("server holds %d fds more than before", got-before)
	}
}

var _ dma.Memory = (*dma.Map)(nil)
