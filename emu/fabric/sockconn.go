package fabric

import (
	"errors"
	"net"
	"sync"

	"golang.org/x/sys/unix"
)

// sockConn is a connected unix stream socket kept out of the Go runtime's
// netpoller: a raw nonblocking descriptor whose reader sleeps in poll(2)
// itself, in a thread of its own, so that data arriving wakes that thread
// and no other (a descriptor the netpoller watches also wakes the thread
// asleep in epoll_wait, for nothing, on every arrival).
//
// Every use of the descriptor holds mu for reading; Close shuts the socket
// down first, which wakes whoever sleeps in poll(2) on it, then takes mu to
// close it: a descriptor number is never used once closed (and perhaps
// reused for another file).
type sockConn struct {
	mu     sync.RWMutex
	fd     int
	closed bool
}

// acceptSock takes the next connection of ln as a sockConn, waiting for it
// as ln's other callers do (net.ErrClosed once ln is closed). The
// connection is accepted by the runtime, then its descriptor duplicated and
// the runtime's closed, which takes it out of the netpoller (a listener's
// raw connection cannot accept by itself).
func acceptSock(ln *net.UnixListener) (*sockConn, error) {
	conn, err := ln.AcceptUnix()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd, derr := -1, error(nil)
	if err := raw.Control(func(cfd uintptr) { fd, derr = unix.FcntlInt(cfd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	return &sockConn{fd: fd}, nil
}

// use calls f with the descriptor unless the connection is closed.
func (c *sockConn) use(f func(fd int)) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return false
	}
	f(c.fd)
	return true
}

// peerUID is the user of the process at the other end.
func (c *sockConn) peerUID() (uint32, error) {
	var cred *unix.Ucred
	err := errClosed
	c.use(func(fd int) { cred, err = unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if err != nil {
		return 0, err
	}
	return cred.Uid, nil
}

var errClosed = errors.New("connection closed")

// read reads what the socket holds into b, sleeping in poll(2) while it
// holds nothing: the count, 0 at the end of the stream or once the
// connection is shut down.
func (c *sockConn) read(b []byte) (n int, err error) {
	err = errClosed
	c.use(func(fd int) { n, err = readWait(fd, b) })
	return n, err
}

// sendNow writes what the socket takes of bufs at once, without waiting:
// the bytes written.
func (c *sockConn) sendNow(bufs [][]byte) int {
	n := 0
	c.use(func(fd int) {
		var err error
		if n, err = unix.SendmsgBuffers(fd, bufs, nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL); err != nil {
			n = 0
		}
	})
	return n
}

// writeAll writes all of bufs, sleeping in poll(2) while the socket is
// full; it fails once the connection is shut down or the peer is gone. It
// consumes bufs (the slices, not the bytes).
func (c *sockConn) writeAll(bufs [][]byte) error {
	for len(bufs) > 0 {
		var err error
		if !c.use(func(fd int) {
			var n int
			n, err = unix.SendmsgBuffers(fd, bufs, nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
			switch {
			case err == unix.EAGAIN || err == unix.EINTR:
				pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
				if _, perr := unix.Poll(pfd, -1); perr != nil && perr != unix.EINTR {
					err = perr
				} else {
					err = nil
				}
			case err == nil:
				bufs = consume(bufs, n)
			}
		}) {
			return errClosed
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// consume drops the first n bytes of bufs.
func consume(bufs [][]byte, n int) [][]byte {
	for len(bufs) > 0 && n >= len(bufs[0]) {
		n -= len(bufs[0])
		bufs = bufs[1:]
	}
	if len(bufs) > 0 {
		bufs[0] = bufs[0][n:]
	}
	return bufs
}

// Close shuts the connection down (a reader or writer asleep in poll(2)
// wakes and fails) and closes the descriptor once nobody uses it.
func (c *sockConn) Close() error {
	c.mu.RLock()
	if !c.closed {
		unix.Shutdown(c.fd, unix.SHUT_RDWR)
	}
	c.mu.RUnlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	return unix.Close(c.fd)
}

// readWait reads what the nonblocking socket fd holds into b, sleeping in
// poll(2) while it holds nothing: the count, 0 at the end of the stream.
func readWait(fd int, b []byte) (int, error) {
	for {
		n, err := unix.Read(fd, b)
		switch err {
		case nil:
			return n, nil
		case unix.EINTR:
		case unix.EAGAIN:
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			if _, err := unix.Poll(pfd, -1); err != nil && err != unix.EINTR {
				return 0, err
			}
		default:
			return 0, err
		}
	}
}
