package vfio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"

	"github.com/hcaemu/hcaemu/dma"
	"golang.org/x/sys/unix"
)

// conn is the server side of one vfio-user connection.
type conn struct {
	s   *Server
	nc  *net.UnixConn
	log *slog.Logger

	wmu sync.Mutex // serialises writes to nc

	// Owned by the reader goroutine.
	versioned bool
	client    ClientCaps
	dev       Device
	irqCount  [NumIRQs]uint32
	oob       []byte

	mem  *dma.Map
	irqs irqTable
}

// msg is one received message. fds are owned by the message until a handler
// takes them (setting fds to nil); whatever is left is closed after handling.
type msg struct {
	hdr     Header
	payload []byte
	fds     []int
}

func (m *msg) closeFDs() {
	for _, fd := range m.fds {
		unix.Close(fd)
	}
	m.fds = nil
}

func (m *msg) takeFDs() []int {
	fds := m.fds
	m.fds = nil
	return fds
}

// oobSize has room for 64 fds: more than the 16 we advertise, so a client
// sending too many is detected (error reply) rather than truncated.
var oobSize = unix.CmsgSpace(64 * 4)

func newConn(s *Server, nc *net.UnixConn) *conn {
	c := &conn{s: s, nc: nc, log: s.logger(), oob: make([]byte, oobSize), mem: new(dma.Map)}
	c.irqs.start(c.log)
	return c
}

// framingError ends the connection: the byte stream cannot be trusted any
// more.
type framingError struct{ msg string }

func (e *framingError) Error() string { return "vfio-user framing: " + e.msg }

// run is the reader loop. It returns io.EOF on a clean end.
func (c *conn) run() error {
	for {
		m, err := c.read()
		if err != nil {
			return err
		}
		if err := c.handle(m); err != nil {
			return fmt.Errorf("%s (id %d): %w", CmdName(m.hdr.Command), m.hdr.ID, err)
		}
	}
}

// read reads one message with its fds. Framing errors close the connection;
// when the header was readable and the client wants replies, an error reply
// is sent first.
func (c *conn) read() (*msg, error) {
	m := &msg{}
	var hdr [HeaderSize]byte
	if err := c.readFull(m, hdr[:]); err != nil {
		m.closeFDs()
		return nil, err
	}
	m.hdr = ParseHeader(hdr[:])
	h := m.hdr
	typ := h.Flags & FlagTypeMask
	var bad string
	switch {
	case typ != FlagRequest && typ != FlagReply:
		m.closeFDs()
		return nil, &framingError{fmt.Sprintf("message type %d in flags %#x", typ, h.Flags)}
	case h.Size < HeaderSize:
		bad = fmt.Sprintf("msg_size %d is smaller than the header", h.Size)
	case h.Size > MaxMsgSize:
		bad = fmt.Sprintf("msg_size %d exceeds the limit %d", h.Size, MaxMsgSize)
	}
	if bad != "" {
		m.closeFDs()
		if typ == FlagRequest && h.Flags&FlagNoReply == 0 {
			_ = c.sendError(h, unix.EINVAL)
		}
		return nil, &framingError{fmt.Sprintf("%s %s", CmdName(h.Command), bad)}
	}
	m.payload = make([]byte, h.Size-HeaderSize)
	if err := c.readFull(m, m.payload); err != nil {
		m.closeFDs()
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("%s body: %w", CmdName(h.Command), err)
	}
	return m, nil
}

// readFull fills p from the socket, collecting any fds into m.fds.
func (c *conn) readFull(m *msg, p []byte) error {
	got := 0
	for got < len(p) {
		n, oobn, flags, _, err := c.nc.ReadMsgUnix(p[got:], c.oob)
		if oobn > 0 {
			fds, perr := parseRights(c.oob[:oobn])
			m.fds = append(m.fds, fds...)
			if perr != nil && err == nil {
				err = &framingError{"bad control message: " + perr.Error()}
			}
		}
		if err == nil && flags&unix.MSG_CTRUNC != 0 {
			err = &framingError{"control data truncated (MSG_CTRUNC): too many fds"}
		}
		got += n
		if err != nil {
			if errors.Is(err, io.EOF) && got > 0 {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

func parseRights(oob []byte) ([]int, error) {
	cms, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for i := range cms {
		if cms[i].Header.Level != unix.SOL_SOCKET || cms[i].Header.Type != unix.SCM_RIGHTS {
			continue
		}
		r, err := unix.ParseUnixRights(&cms[i])
		if err != nil {
			return fds, err
		}
		fds = append(fds, r...)
	}
	return fds, nil
}

// errnoFor is the errno an error reply carries for err: the unix.Errno it
// wraps, else EIO.
func errnoFor(err error) unix.Errno {
	var e unix.Errno
	if errors.As(err, &e) && e > 0 && e < 4096 {
		return e
	}
	return unix.EIO
}

// reqError makes the error a handler returns for a bad request field.
// expectedError is a failure every client provokes in normal operation
// (QEMU asks for an ERR interrupt the device does not have): logged quietly.
type expectedError struct{ error }

func (e *expectedError) Unwrap() error { return e.error }

func reqError(errno unix.Errno, format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), errno)
}

// handle processes one message. A returned error closes the connection.
func (c *conn) handle(m *msg) error {
	defer m.closeFDs()
	h := m.hdr
	name := CmdName(h.Command)
	if h.Flags&FlagTypeMask == FlagReply {
		// The server sends no requests of its own, so no reply can be
		// expected. Answering a reply could only confuse the client.
		c.log.Warn("vfio-user: unsolicited reply ignored", "cmd", name, "id", h.ID, "fds", len(m.fds))
		return nil
	}
	posted := h.Flags&FlagNoReply != 0

	reply, fatal, err := c.dispatch(m)
	// Unclaimed fds are closed before the reply goes out, so the client
	// can rely on them being gone once it has the reply.
	m.closeFDs()
	if err != nil {
		level := slog.LevelWarn
		var q *expectedError
		if errors.As(err, &q) {
			level = slog.LevelDebug
		}
		c.log.Log(context.Background(), level, "vfio-user: request failed", "cmd", name, "id", h.ID, "posted", posted, "err", err)
		if !posted {
			if werr := c.sendError(h, errnoFor(err)); werr != nil {
				return werr
			}
		}
		if fatal {
			return err
		}
		return nil
	}
	if posted {
		return nil
	}
	return c.sendReply(h, reply)
}

// dispatch runs the command's handler, turning a panic into an error.
// fatal reports that the connection must be closed after the error reply.
func (c *conn) dispatch(m *msg) (reply []byte, fatal bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("vfio-user: panic while handling request", "cmd", CmdName(m.hdr.Command), "id", m.hdr.ID,
				"panic", r, "stack", string(debug.Stack()))
			reply, err = nil, fmt.Errorf("panic: %v: %w", r, unix.EIO)
			fatal = m.hdr.Command == CmdVersion
		}
	}()
	if len(m.fds) > MaxMsgFDs {
		return nil, false, reqError(unix.EINVAL, "%d fds attached, at most %d allowed", len(m.fds), MaxMsgFDs)
	}
	if m.hdr.Command == CmdVersion {
		if c.versioned {
			return nil, false, reqError(unix.EINVAL, "VERSION already negotiated")
		}
		// A failed negotiation leaves nothing to talk about.
		reply, err = c.version(m)
		return reply, err != nil, err
	}
	if !c.versioned {
		return nil, false, reqError(unix.EINVAL, "VERSION has not been negotiated")
	}
	if len(m.fds) > 0 && m.hdr.Command != CmdDMAMap && m.hdr.Command != CmdSetIRQs {
		return nil, false, reqError(unix.EINVAL, "%d fds attached; the command takes none", len(m.fds))
	}
	switch m.hdr.Command {
	case CmdDMAMap:
		reply, err = c.dmaMap(m)
	case CmdDMAUnmap:
		reply, err = c.dmaUnmap(m)
	case CmdGetInfo:
		reply, err = c.getInfo(m)
	case CmdGetRegionInfo:
		reply, err = c.getRegionInfo(m)
	case CmdGetIRQInfo:
		reply, err = c.getIRQInfo(m)
	case CmdSetIRQs:
		reply, err = c.setIRQs(m)
	case CmdRegionRead:
		reply, err = c.regionRead(m)
	case CmdRegionWrite:
		reply, err = c.regionWrite(m)
	case CmdDeviceReset:
		reply, err = c.reset(m)
	case CmdDeviceFeature:
		err = reqError(unix.ENOTTY, "no device features")
	case CmdGetRegionIOFDs, CmdDirtyPages, CmdRegionWriteMulti, CmdDMARead, CmdDMAWrite:
		err = reqError(unix.EINVAL, "not supported")
	default:
		err = reqError(unix.ENOSYS, "unknown command")
	}
	return reply, false, err
}

func (c *conn) send(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.nc.Write(b)
	return err
}

func (c *conn) sendReply(req Header, payload []byte) error {
	b := make([]byte, HeaderSize+len(payload))
	Header{ID: req.ID, Command: req.Command, Size: uint32(len(b)), Flags: FlagReply}.Put(b)
	copy(b[HeaderSize:], payload)
	return c.send(b)
}

func (c *conn) sendError(req Header, errno unix.Errno) error {
	var b [HeaderSize]byte
	Header{ID: req.ID, Command: req.Command, Size: HeaderSize, Flags: FlagReply | FlagError, Errno: uint32(errno)}.Put(b[:])
	return c.send(b[:])
}

// teardown ends the connection: the device first (it must stop using guest
// memory and interrupts), then the DMA windows, the socket and the eventfds
// (which may wait for an interrupt sender the client keeps blocked; see
// irqTable.close: shutdown is the server's context ending).
func (c *conn) teardown(shutdown <-chan struct{}) {
	if c.dev != nil {
		func() {
			defer func() {
				if r := recover(); r != nil {
					c.log.Error("vfio-user: panic in Device.Close", "panic", r, "stack", string(debug.Stack()))
				}
			}()
			c.dev.Close()
		}()
	}
	c.mem.Close()
	c.nc.Close()
	c.irqs.close(shutdown)
}
