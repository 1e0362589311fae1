package vfio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Server serves one PCI function per vfio-user connection.
type Server struct {
	// NewDevice makes the function for each connection, once its VERSION
	// has been negotiated.
	NewDevice NewDevice
	// Log receives the server's messages; nil means slog.Default().
	Log *slog.Logger
	// MaxConns bounds the connections Serve serves at once (each is a
	// device with its own DMA windows, descriptors and memory); a client
	// beyond it is closed at once. A connection counts until ServeConn has
	// returned, after its teardown has let go of everything it held. 0
	// means DefaultMaxConns.
	MaxConns int
}

// DefaultMaxConns is the connections one listener serves at once: a socket
// is one PCI function for one QEMU, with room for a restarted QEMU that
// connects while the old connection is still being torn down.
const DefaultMaxConns = 4

func (s *Server) logger() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

// Listen listens for vfio-user clients on the unix socket path. A stale
// socket file left there by a previous server is removed first; a socket that
// still accepts connections, or a file that is not a socket, is an error. The
// socket file is removed when the listener is closed.
func Listen(path string) (*net.UnixListener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("vfio-user socket %s: exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("vfio-user socket %s: another server is listening on it", path)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("vfio-user socket %s: removing stale socket: %w", path, err)
		}
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("vfio-user socket: %w", err)
	}
	return l, nil
}

// FileListener returns a listener for an already listening unix stream
// socket fd inherited from the parent process (hcaemu serve --fd N). It takes
// ownership of fd.
func FileListener(fd int) (*net.UnixListener, error) {
	f := os.NewFile(uintptr(fd), fmt.Sprintf("vfio-user-listener-%d", fd))
	if f == nil {
		return nil, fmt.Errorf("vfio-user listener: bad fd %d", fd)
	}
	defer f.Close()
	l, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("vfio-user listener fd %d: %w", fd, err)
	}
	ul, ok := l.(*net.UnixListener)
	if !ok {
		l.Close()
		return nil, fmt.Errorf("vfio-user listener fd %d: not a unix socket (%T)", fd, l)
	}
	return ul, nil
}

// Serve accepts connections on l and serves each in its own goroutine. It
// closes l when ctx is cancelled and returns nil once every connection has
// ended. It returns early with an error if l fails for another reason, after
// the connections already accepted have ended.
func (s *Server) Serve(ctx context.Context, l *net.UnixListener) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	log := s.logger()
	var backoff time.Duration
	maxConns := s.MaxConns
	if maxConns <= 0 {
		maxConns = DefaultMaxConns
	}
	var active atomic.Int32
	var refused uint64
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var errno unix.Errno
			if errors.As(err, &errno) && (errno == unix.EMFILE || errno == unix.ENFILE ||
				errno == unix.ENOBUFS || errno == unix.ENOMEM || errno == unix.ECONNABORTED) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				log.Warn("vfio-user: accept failed; retrying", "err", err, "delay", backoff)
				select {
				case <-time.After(backoff):
				case <-ctx.Done():
				}
				continue
			}
			return fmt.Errorf("vfio-user: accept: %w", err)
		}
		backoff = 0
		if int(active.Load()) >= maxConns {
			refused++
			if refused&(refused-1) == 0 { // 1st, 2nd, 4th, 8th…: bounded logging
				log.Warn("vfio-user: connection refused: too many at once", "max", maxConns, "refused", refused)
			}
			c.Close()
			continue
		}
		active.Add(1)
		wg.Go(func() {
			defer active.Add(-1)
			_ = s.ServeConn(ctx, c) // logs its own end
		})
	}
}

// ServeConn serves one client connection: one PCI function. It creates the
// device once VERSION succeeds and returns when the client disconnects, ctx is
// cancelled or the stream is unusable. Before it returns it closes the device,
// every DMA window, conn and every interrupt eventfd; an interrupt sender the
// client keeps blocked in an eventfd write is waited for (its counter drained
// until the write completes; once ctx is cancelled, for a second at most),
// so nothing of the connection outlives the call. A clean end (EOF, cancellation) returns nil.
func (s *Server) ServeConn(ctx context.Context, conn *net.UnixConn) error {
	c := newConn(s, conn)
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	defer c.teardown(ctx.Done())
	err := c.run()
	if ctx.Err() != nil || errors.Is(err, io.EOF) || errors.Is(err, unix.ECONNRESET) || errors.Is(err, unix.EPIPE) {
		c.log.Info("vfio-user: connection ended")
		return nil
	}
	c.log.Warn("vfio-user: closing connection", "err", err)
	return err
}
