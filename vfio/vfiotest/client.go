// Package vfiotest is an in-process vfio-user client: the part of QEMU's
// vfio-user-pci device that talks to the server, for tests. It speaks the
// protocol over a unix stream socket, sends fds with SCM_RIGHTS and, like
// QEMU 11.1, insists that every reply has exactly the size QEMU expects.
package vfiotest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/hcaemu/hcaemu/vfio"
	"golang.org/x/sys/unix"
)

var le = binary.LittleEndian

// QEMUVersionJSON is the capability JSON QEMU 11.1.3 sends, byte for byte;
// with its NUL the VERSION request is 214 bytes.
const QEMUVersionJSON = `{"capabilities": {"pgsizes": 4096, "max_msg_fds": 16, "max_dma_maps": 65535, "max_data_xfer_size": 1048576, "migration": {"max_bitmap_size": 268435456, "pgsize": 4096}, "write_multiple": true}}`

// Pair returns the two ends of a connected unix stream socket pair.
func Pair() (client, server *net.UnixConn, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	conn := func(fd int, name string) (*net.UnixConn, error) {
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			return nil, err
		}
		return c.(*net.UnixConn), nil
	}
	client, err = conn(fds[0], "vfio-user-client")
	if err != nil {
		unix.Close(fds[1])
		return nil, nil, err
	}
	server, err = conn(fds[1], "vfio-user-server")
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return client, server, nil
}

// Client is a vfio-user client on one connection. It is not safe for
// concurrent use.
type Client struct {
	Conn *net.UnixConn
	// Timeout bounds each wait for a reply (default 5 s, QEMU's
	// x-msg-timeout).
	Timeout time.Duration
	nextID  uint16
}

// NewClient returns a client on conn.
func NewClient(conn *net.UnixConn) *Client {
	return &Client{Conn: conn, Timeout: 5 * time.Second}
}

// Close closes the connection.
func (c *Client) Close() error { return c.Conn.Close() }

// Msg is a received message.
type Msg struct {
	Header  vfio.Header
	Payload []byte
	FDs     []int
}

// ReplyError is an error reply from the server.
type ReplyError struct {
	Command uint16
	Errno   unix.Errno
}

func (e *ReplyError) Error() string {
	return fmt.Sprintf("vfio-user %s: error reply: %v", vfio.CmdName(e.Command), e.Errno)
}

// Unwrap lets errors.Is(err, unix.EINVAL) match.
func (e *ReplyError) Unwrap() error { return e.Errno }

// Errno returns the errno of an error reply in err, or 0.
func Errno(err error) unix.Errno {
	var re *ReplyError
	if errors.As(err, &re) {
		return re.Errno
	}
	return 0
}

// SendRaw writes b as is, with fds attached to its first byte.
func (c *Client) SendRaw(b []byte, fds ...int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, _, err := c.Conn.WriteMsgUnix(b, oob, nil)
	if err != nil {
		return err
	}
	if n < len(b) {
		_, err = c.Conn.Write(b[n:])
	}
	return err
}

// Send sends one message. A zero h.Size is filled in from the payload.
func (c *Client) Send(h vfio.Header, payload []byte, fds ...int) error {
	if h.Size == 0 {
		h.Size = uint32(vfio.HeaderSize + len(payload))
	}
	b := make([]byte, vfio.HeaderSize+len(payload))
	h.Put(b)
	copy(b[vfio.HeaderSize:], payload)
	return c.SendRaw(b, fds...)
}

// Recv receives one message (waiting at most Timeout).
func (c *Client) Recv() (*Msg, error) {
	if err := c.Conn.SetReadDeadline(time.Now().Add(c.Timeout)); err != nil {
		return nil, err
	}
	m := &Msg{}
	var hdr [vfio.HeaderSize]byte
	oob := make([]byte, unix.CmsgSpace(64*4))
	got := 0
	for got < len(hdr) {
		n, oobn, _, _, err := c.Conn.ReadMsgUnix(hdr[got:], oob)
		if oobn > 0 {
			if cms, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
				for i := range cms {
					if fds, err := unix.ParseUnixRights(&cms[i]); err == nil {
						m.FDs = append(m.FDs, fds...)
					}
				}
			}
		}
		got += n
		if err != nil {
			closeFDs(m.FDs)
			if errors.Is(err, io.EOF) && got > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	m.Header = vfio.ParseHeader(hdr[:])
	if m.Header.Size < vfio.HeaderSize || m.Header.Size > 64<<20 {
		closeFDs(m.FDs)
		return nil, fmt.Errorf("vfiotest: bad msg_size %d", m.Header.Size)
	}
	m.Payload = make([]byte, m.Header.Size-vfio.HeaderSize)
	if _, err := io.ReadFull(c.Conn, m.Payload); err != nil {
		closeFDs(m.FDs)
		return nil, err
	}
	return m, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// Call sends a request with the next message ID and, unless flags has
// NO_REPLY, returns its reply. An error reply is returned as *ReplyError.
// The reply must match the request's ID and command and be a reply.
func (c *Client) Call(cmd uint16, flags uint32, payload []byte, fds ...int) (*Msg, error) {
	id := c.nextID
	c.nextID++
	h := vfio.Header{ID: id, Command: cmd, Flags: flags &^ vfio.FlagTypeMask}
	if err := c.Send(h, payload, fds...); err != nil {
		return nil, err
	}
	if flags&vfio.FlagNoReply != 0 {
		return nil, nil
	}
	m, err := c.Recv()
	if err != nil {
		return nil, fmt.Errorf("vfiotest: %s reply: %w", vfio.CmdName(cmd), err)
	}
	closeFDs(m.FDs)
	switch {
	case m.Header.ID != id || m.Header.Command != cmd:
		return nil, fmt.Errorf("vfiotest: reply id %d command %d to request id %d command %d", m.Header.ID, m.Header.Command, id, cmd)
	case m.Header.Flags&vfio.FlagTypeMask != vfio.FlagReply:
		return nil, fmt.Errorf("vfiotest: %s reply has flags %#x", vfio.CmdName(cmd), m.Header.Flags)
	case m.Header.Flags&vfio.FlagError != 0:
		if m.Header.Size != vfio.HeaderSize {
			return nil, fmt.Errorf("vfiotest: %s error reply of %d bytes, want %d", vfio.CmdName(cmd), m.Header.Size, vfio.HeaderSize)
		}
		return m, &ReplyError{Command: cmd, Errno: unix.Errno(m.Header.Errno)}
	}
	return m, nil
}

// call is Call checking the reply's payload size exactly, as QEMU needs.
func (c *Client) call(cmd uint16, payload []byte, replyLen int, fds ...int) ([]byte, error) {
	m, err := c.Call(cmd, 0, payload, fds...)
	if err != nil {
		return nil, err
	}
	if len(m.Payload) != replyLen {
		return nil, fmt.Errorf("vfiotest: %s reply payload of %d bytes, want exactly %d", vfio.CmdName(cmd), len(m.Payload), replyLen)
	}
	return m.Payload, nil
}

// Version negotiates with the given capability JSON ("" sends no JSON). It
// returns the server's version and JSON (without its NUL). Like QEMU it
// requires the reply to be no larger than the request and to end in NUL.
func (c *Client) Version(json string) (major, minor uint16, caps string, err error) {
	p := make([]byte, 4, 4+len(json)+1)
	if json != "" {
		p = append(append(p, json...), 0)
	}
	m, err := c.Call(vfio.CmdVersion, 0, p)
	if err != nil {
		return 0, 0, "", err
	}
	if int(m.Header.Size) > vfio.HeaderSize+len(p) {
		return 0, 0, "", fmt.Errorf("vfiotest: VERSION reply of %d bytes is larger than the %d-byte request", m.Header.Size, vfio.HeaderSize+len(p))
	}
	r := m.Payload
	if len(r) < 5 || r[len(r)-1] != 0 {
		return 0, 0, "", fmt.Errorf("vfiotest: VERSION reply %q lacks NUL-terminated JSON", r)
	}
	return le.Uint16(r[0:]), le.Uint16(r[2:]), string(r[4 : len(r)-1]), nil
}

// DMAMap maps [iova, iova+size) at offset of fd (fd < 0: no fd).
func (c *Client) DMAMap(iova, size, offset uint64, fd int, flags uint32) error {
	p := make([]byte, 32)
	le.PutUint32(p[0:], 32)
	le.PutUint32(p[4:], flags)
	le.PutUint64(p[8:], offset)
	le.PutUint64(p[16:], iova)
	le.PutUint64(p[24:], size)
	var fds []int
	if fd >= 0 {
		fds = []int{fd}
	}
	_, err := c.call(vfio.CmdDMAMap, p, 0, fds...)
	return err
}

// DMAUnmap unmaps [iova, iova+size) (flags: vfio.DMAUnmapAll).
func (c *Client) DMAUnmap(iova, size uint64, flags uint32) error {
	p := make([]byte, 24)
	le.PutUint32(p[0:], 24)
	le.PutUint32(p[4:], flags)
	le.PutUint64(p[8:], iova)
	le.PutUint64(p[16:], size)
	r, err := c.call(vfio.CmdDMAUnmap, p, 24)
	if err == nil && string(r) != string(p) {
		return fmt.Errorf("vfiotest: DMA_UNMAP reply %x does not echo the request %x", r, p)
	}
	return err
}

// DeviceInfo is the DEVICE_GET_INFO reply.
type DeviceInfo struct{ Argsz, Flags, NumRegions, NumIRQs uint32 }

// GetInfo asks for the device info.
func (c *Client) GetInfo() (DeviceInfo, error) {
	p := make([]byte, 16)
	le.PutUint32(p, 16)
	r, err := c.call(vfio.CmdGetInfo, p, 16)
	if err != nil {
		return DeviceInfo{}, err
	}
	return DeviceInfo{le.Uint32(r[0:]), le.Uint32(r[4:]), le.Uint32(r[8:]), le.Uint32(r[12:])}, nil
}

// RegionInfo is the fixed part of a DEVICE_GET_REGION_INFO reply.
type RegionInfo struct {
	Argsz, Flags, Index, CapOffset uint32
	Size, Offset                   uint64
}

// RegionInfo asks for region index with argsz 32, as QEMU does first.
func (c *Client) RegionInfo(index uint32) (RegionInfo, error) {
	p := make([]byte, 32)
	le.PutUint32(p[0:], 32)
	le.PutUint32(p[8:], index)
	r, err := c.call(vfio.CmdGetRegionInfo, p, 32)
	if err != nil {
		return RegionInfo{}, err
	}
	return RegionInfo{le.Uint32(r[0:]), le.Uint32(r[4:]), le.Uint32(r[8:]), le.Uint32(r[12:]), le.Uint64(r[16:]), le.Uint64(r[24:])}, nil
}

// IRQInfo is the DEVICE_GET_IRQ_INFO reply.
type IRQInfo struct{ Argsz, Flags, Index, Count uint32 }

// IRQInfo asks for IRQ index.
func (c *Client) IRQInfo(index uint32) (IRQInfo, error) {
	p := make([]byte, 16)
	le.PutUint32(p[0:], 16)
	le.PutUint32(p[8:], index)
	r, err := c.call(vfio.CmdGetIRQInfo, p, 16)
	if err != nil {
		return IRQInfo{}, err
	}
	return IRQInfo{le.Uint32(r[0:]), le.Uint32(r[4:]), le.Uint32(r[8:]), le.Uint32(r[12:])}, nil
}

// SetIRQs sends DEVICE_SET_IRQS with argsz 20 and fds in SCM_RIGHTS, as QEMU
// does (e.g. flags vfio.IRQDataEventfd|vfio.IRQActionTrigger).
func (c *Client) SetIRQs(index, flags, start, count uint32, fds ...int) error {
	p := make([]byte, 20)
	le.PutUint32(p[0:], 20)
	le.PutUint32(p[4:], flags)
	le.PutUint32(p[8:], index)
	le.PutUint32(p[12:], start)
	le.PutUint32(p[16:], count)
	_, err := c.call(vfio.CmdSetIRQs, p, 0, fds...)
	return err
}

// RegionRead reads count bytes of region at off.
func (c *Client) RegionRead(region uint32, off uint64, count uint32) ([]byte, error) {
	p := make([]byte, 16)
	le.PutUint64(p[0:], off)
	le.PutUint32(p[8:], region)
	le.PutUint32(p[12:], count)
	r, err := c.call(vfio.CmdRegionRead, p, 16+int(count))
	if err != nil {
		return nil, err
	}
	if string(r[:16]) != string(p) {
		return nil, fmt.Errorf("vfiotest: REGION_READ reply header %x does not echo %x", r[:16], p)
	}
	return r[16:], nil
}

// RegionWrite writes data to region at off; posted writes use NO_REPLY and
// get no answer.
func (c *Client) RegionWrite(region uint32, off uint64, data []byte, posted bool) error {
	p := make([]byte, 16+len(data))
	le.PutUint64(p[0:], off)
	le.PutUint32(p[8:], region)
	le.PutUint32(p[12:], uint32(len(data)))
	copy(p[16:], data)
	if posted {
		_, err := c.Call(vfio.CmdRegionWrite, vfio.FlagNoReply, p)
		return err
	}
	r, err := c.call(vfio.CmdRegionWrite, p, 16)
	if err == nil && string(r) != string(p[:16]) {
		return fmt.Errorf("vfiotest: REGION_WRITE reply %x does not echo %x", r, p[:16])
	}
	return err
}

// Reset sends DEVICE_RESET.
func (c *Client) Reset() error {
	_, err := c.call(vfio.CmdDeviceReset, nil, 0)
	return err
}
