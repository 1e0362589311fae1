package fabric

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Uplink is the segment's trunk to a network outside the process: a TAP
// device (tap:NAME) that the user bridges or routes as they like, or a
// host interface (dev:IFACE) read and written with an AF_PACKET socket.
// Hosts beyond it are stations whose MACs the switch learns from their
// frames; guests on two machines, each with its segment and an uplink to
// a network between them, talk IP and RoCEv2 through it.
type Uplink struct {
	port    *Port
	file    *os.File
	raw     syscall.RawConn
	packet  bool // an AF_PACKET socket (skips the frames it sent itself)
	closing chan struct{}
	wg      sync.WaitGroup
	name    string

	in, out, paused, dropped atomic.Uint64
}

// UplinkStats counts an uplink's frames.
type UplinkStats struct {
	// In and Out count frames from and to the network.
	In, Out uint64
	// Paused counts the times a frame from the network found its receiver
	// full and waited.
	Paused uint64
	// Dropped counts frames lost: the interface down, or a pause past
	// DefaultPauseLimit.
	Dropped uint64
}

// ParseUplink checks an uplink spec: tap:NAME or dev:IFACE.
func ParseUplink(spec string) (kind, name string, err error) {
	kind, name, ok := strings.Cut(spec, ":")
	if !ok || (kind != "tap" && kind != "dev") || name == "" || len(name) >= unix.IFNAMSIZ || strings.ContainsAny(name, "/ \t\n:") {
		return "", "", fmt.Errorf("uplink %q: want tap:NAME or dev:IFACE (an interface name of at most %d characters)", spec, unix.IFNAMSIZ-1)
	}
	return kind, name, nil
}

// OpenUplink attaches the uplink spec (tap:NAME or dev:IFACE) to the
// switch. A TAP device is made (or taken, if it exists) and set up; an
// interface must exist, and is put in promiscuous mode while attached.
func (s *Switch) OpenUplink(spec string) (*Uplink, error) {
	kind, name, err := ParseUplink(spec)
	if err != nil {
		return nil, err
	}
	u := &Uplink{closing: make(chan struct{}), name: spec}
	switch kind {
	case "tap":
		u.file, err = openTap(name)
	case "dev":
		u.file, err = openPacket(name)
		u.packet = true
	}
	if err != nil {
		return nil, fmt.Errorf("uplink %s: %w", spec, err)
	}
	if u.raw, err = u.file.SyscallConn(); err != nil {
		u.file.Close()
		return nil, fmt.Errorf("uplink %s: %w", spec, err)
	}
	u.port = s.AttachUplink(spec, u.receive)
	u.wg.Go(u.readLoop)
	return u, nil
}

// Stats returns the uplink's counters.
func (u *Uplink) Stats() UplinkStats {
	return UplinkStats{In: u.in.Load(), Out: u.out.Load(), Paused: u.paused.Load(), Dropped: u.dropped.Load()}
}

// Close detaches the uplink (a TAP device made here goes away).
func (u *Uplink) Close() error {
	u.port.Detach()
	close(u.closing)
	err := u.file.Close()
	u.wg.Wait()
	return err
}

// openTap opens the TAP device name, made if it does not exist, and sets
// it up.
func openTap(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("TUNSETIFF: %w", err)
	}
	if err := setUp(name, false); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "tap:"+name), nil
}

// openPacket opens an AF_PACKET socket on interface name, bound to it and
// in promiscuous mode.
func openPacket(name string) (*os.File, error) {
	iface, err := net.InterfaceByName(name)
	if err != nil {
		return nil, err
	}
	proto := htons(unix.ETH_P_ALL)
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, int(proto))
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: iface.Index}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	mreq := unix.PacketMreq{Ifindex: int32(iface.Index), Type: unix.PACKET_MR_PROMISC}
	if err := unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, &mreq); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("promiscuous mode: %w", err)
	}
	// Not our own frames back (kernels since 4.20; the read loop checks
	// the packet type as well).
	_ = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1)
	if iface.Flags&net.FlagUp == 0 {
		if err := setUp(name, true); err != nil {
			unix.Close(fd)
			return nil, err
		}
	}
	return os.NewFile(uintptr(fd), "dev:"+name), nil
}

// setUp sets interface name up.
func setUp(name string, quiet bool) error {
	sock, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(sock)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(sock, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCGIFFLAGS: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(sock, unix.SIOCSIFFLAGS, ifr); err != nil && !quiet {
		return fmt.Errorf("setting %s up: %w", name, err)
	}
	return nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// receive writes a frame from the segment to the network. A device that
// takes nothing now refuses it (pause).
func (u *Uplink) receive(frame []byte) bool {
	defer Release(frame)
	var err error
	if cerr := u.raw.Write(func(fd uintptr) bool {
		_, err = unix.Write(int(fd), frame)
		return true // never wait here: EAGAIN is backpressure
	}); cerr != nil {
		err = cerr
	}
	switch {
	case err == nil:
		u.out.Add(1)
		return true
	case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.ENOBUFS):
		return false
	default:
		u.dropped.Add(1) // the interface went down: lost on the wire
		return true
	}
}

// readLoop takes the network's frames to the switch.
func (u *Uplink) readLoop() {
	buf := make([]byte, maxNICFrame)
	for {
		var n int
		var outgoing bool
		var err error
		rerr := u.raw.Read(func(fd uintptr) bool {
			if u.packet {
				// MSG_TRUNC: n is the frame's length even when buf was short.
				var from unix.Sockaddr
				n, from, err = unix.Recvfrom(int(fd), buf, unix.MSG_TRUNC)
				if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
					outgoing = true
				}
			} else {
				n, err = unix.Read(int(fd), buf)
			}
			return !errors.Is(err, unix.EAGAIN)
		})
		if rerr != nil {
			return // closed
		}
		if err != nil {
			if errors.Is(err, unix.EBADF) {
				return
			}
			// The interface went down (ENETDOWN) or the like: read again
			// in a while, not in a loop that spins on the error.
			select {
			case <-u.closing:
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		if n > len(buf) {
			u.dropped.Add(1) // longer than any frame QEMU takes: cut, not forwarded
			continue
		}
		if outgoing || n < 14 {
			continue
		}
		u.in.Add(1)
		forwardFrame(u.port, buf[:n], u.closing, DefaultPauseLimit, &u.paused, &u.dropped)
	}
}
