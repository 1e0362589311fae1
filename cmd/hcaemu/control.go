package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/hcaemu/hcaemu/emu/fault"
)

// controlSocket is the live-control socket of a run (--control): the
// fault injector's commands (package fault answers them on each
// connection), inspect and trace, on a unix socket on the host, and on one
// socket per guest that its virtio-serial port is connected to.
type controlSocket struct {
	*fault.Control
	path string
	l    *net.UnixListener

	mu     sync.Mutex
	guests []*net.UnixListener
	closed bool
	wg     sync.WaitGroup
}

// listenControl listens on the unix socket path (a stale socket left by a
// dead process is replaced) and serves inj's commands until Close.
func listenControl(path string, inj *fault.Injector) (*controlSocket, error) {
	l, err := listenUnix(path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	c := &controlSocket{Control: fault.NewControl(inj), path: path, l: l}
	c.wg.Go(func() { c.accept(l, func(conn net.Conn) { c.Serve(conn) }) })
	return c, nil
}

// listenUnix listens on the unix socket path; a stale socket left by a dead
// process is replaced, a live one is not.
func listenUnix(path string) (*net.UnixListener, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s: in use", path)
		}
		os.Remove(path)
	}
	return net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
}

// Path is the socket's path.
func (c *controlSocket) Path() string { return c.path }

// accept hands each connection of l to serve, on a goroutine of its own.
func (c *controlSocket) accept(l *net.UnixListener, serve func(conn net.Conn)) {
	var conns sync.WaitGroup
	defer conns.Wait()
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		conns.Go(func() { serve(conn) })
	}
}

// ListenGuest serves one guest's commands on another unix socket at path,
// meant for the chardev of the guest's virtio-serial port (QEMU connects
// to it, and again after a reconnection; a stale socket file is replaced):
// fault.Control.ServeGuest on each connection. Close stops it too.
func (c *controlSocket) ListenGuest(path string) error {
	l, err := listenUnix(path)
	if err != nil {
		return fmt.Errorf("guest control socket: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		l.Close()
		return errors.New("guest control socket: control is closed")
	}
	c.guests = append(c.guests, l)
	c.wg.Go(func() { c.accept(l, func(conn net.Conn) { c.ServeGuest(conn) }) })
	return nil
}

// Close stops listening, closes the connections and removes the socket.
func (c *controlSocket) Close() error {
	c.mu.Lock()
	c.closed = true
	err := c.l.Close()
	for _, l := range c.guests {
		l.Close()
	}
	c.mu.Unlock()
	c.Control.Close() // ends every connection's Serve, and refuses later ones
	c.wg.Wait()
	return err
}

// controlCommand sends one command to the control socket at path and
// returns the response.
func controlCommand(path string, req fault.Request) (fault.Response, error) {
	conn, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		return fault.Response{}, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return fault.Response{}, err
	}
	var rsp fault.Response
	if err := json.NewDecoder(conn).Decode(&rsp); err != nil {
		return fault.Response{}, fmt.Errorf("control socket %s: %w", path, err)
	}
	return rsp, nil
}
