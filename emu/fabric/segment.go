package fabric

import (
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Segment is the guests' L2 Ethernet segment: a learning switch in this
// process, joined by QEMU's "-netdev dgram" over unix datagram sockets (each
// frame is one datagram) and by in-process ports (Attach), e.g. the
// emulator's own RoCE ports. Nothing leaves the machine: there are no IP
// sockets at all.
//
// Unlike the RoCE Switch, the segment is lossy on purpose: a guest that does
// not read (paused, dead, not started yet) loses frames instead of stalling
// the others, as on a shared Ethernet without pause frames.
type Segment struct {
	conn *net.UnixConn
	raw  syscall.RawConn
	path string

	mu    sync.Mutex
	ports []segmentPort        // by port number
	macs  map[[6]byte]camEntry // learned MAC -> port, at most camSize
	now   func() time.Time     // the clock entries age by (tests replace it)
	stats SegmentStats
	done  chan struct{}
}

// The MAC table is bounded the way a switch's CAM is: a guest sending from
// ever new source MACs cannot grow it without limit. Entries age out after
// camAge (the usual 300 s); when the table is full of live entries, new
// MACs are not learned and frames to them flood, as on real switches.
const (
	camSize = 1024
	camAge  = 300 * time.Second
)

// camEntry is one learned MAC: its port and when it was last seen.
type camEntry struct {
	port int
	seen time.Time
}

// segmentPort is a QEMU's unix socket (path) or an in-process receiver.
type segmentPort struct {
	path    string
	deliver func(frame []byte)
}

// SegmentStats counts frames.
type SegmentStats struct {
	Frames, Flooded, Dropped uint64
	// CAMFull counts source MACs not learned because the table was full.
	CAMFull uint64
}

// NewSegment listens on the unix datagram socket path for the given ports
// (each port is the socket path its QEMU binds as local.path).
func NewSegment(path string, ports []string) (*Segment, error) {
	os.Remove(path)
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return nil, err
	}
	raw, err := conn.SyscallConn()
	if err != nil {
		conn.Close()
		return nil, err
	}
	s := &Segment{conn: conn, raw: raw, path: path, macs: map[[6]byte]camEntry{}, now: time.Now, done: make(chan struct{})}
	for _, p := range ports {
		s.ports = append(s.ports, segmentPort{path: p})
	}
	go s.loop()
	return s, nil
}

// Path is the segment's socket (QEMU's remote.path).
func (s *Segment) Path() string { return s.path }

// Stats returns the frame counters.
func (s *Segment) Stats() SegmentStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Attach adds an in-process port. deliver receives the frames switched to
// it; it runs on the sender's goroutine, must not block and must not keep
// the slice. send puts a frame (destination MAC first) on the segment.
func (s *Segment) Attach(deliver func(frame []byte)) (send func(frame []byte)) {
	s.mu.Lock()
	in := len(s.ports)
	s.ports = append(s.ports, segmentPort{deliver: deliver})
	s.mu.Unlock()
	return func(frame []byte) {
		if len(frame) < 14 {
			return
		}
		s.switchFrame(in, frame)
	}
}

// Close stops the segment and removes its socket.
func (s *Segment) Close() error {
	err := s.conn.Close()
	<-s.done
	os.Remove(s.path)
	return err
}

func (s *Segment) portOf(addr *net.UnixAddr) int {
	if addr == nil {
		return -1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, p := range s.ports {
		if p.deliver == nil && p.path == addr.Name {
			return i
		}
	}
	return -1
}

func (s *Segment) loop() {
	defer close(s.done)
	buf := make([]byte, 65536)
	for {
		n, from, err := s.conn.ReadFromUnix(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		in := s.portOf(from)
		if in < 0 || n < 14 {
			s.mu.Lock()
			s.stats.Dropped++
			s.mu.Unlock()
			continue
		}
		s.switchFrame(in, buf[:n])
	}
}

func (s *Segment) switchFrame(in int, frame []byte) {
	for _, out := range s.forward(in, frame) {
		if out.deliver != nil {
			out.deliver(frame)
		} else {
			s.send(out.path, frame)
		}
	}
}

// send writes frame to a QEMU's socket without blocking: a guest that does
// not read (paused, dead, not started yet) loses frames instead of stalling
// the segment.
func (s *Segment) send(path string, frame []byte) {
	var err error
	cerr := s.raw.Write(func(fd uintptr) bool {
		err = unix.Sendto(int(fd), frame, unix.MSG_DONTWAIT, &unix.SockaddrUnix{Name: path})
		return true
	})
	if cerr != nil || err != nil {
		s.mu.Lock()
		s.stats.Dropped++
		s.mu.Unlock()
	}
}

// learn records that mac was seen on port in (s.mu held), within the table's
// bound: a full table first drops aged entries, then stops learning.
func (s *Segment) learn(mac [6]byte, in int, now time.Time) {
	if _, ok := s.macs[mac]; !ok && len(s.macs) >= camSize {
		for m, e := range s.macs {
			if now.Sub(e.seen) >= camAge {
				delete(s.macs, m)
			}
		}
		if len(s.macs) >= camSize {
			s.stats.CAMFull++
			return
		}
	}
	s.macs[mac] = camEntry{port: in, seen: now}
}

// forward learns the frame's source MAC on port in and returns the ports the
// frame goes to.
func (s *Segment) forward(in int, frame []byte) []segmentPort {
	var dst, src [6]byte
	copy(dst[:], frame[0:6])
	copy(src[:], frame[6:12])
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Frames++
	now := s.now()
	if src[0]&1 == 0 {
		s.learn(src, in, now)
	}
	if dst[0]&1 == 0 {
		if e, ok := s.macs[dst]; ok && now.Sub(e.seen) < camAge {
			if e.port == in {
				return nil
			}
			return []segmentPort{s.ports[e.port]}
		}
	}
	s.stats.Flooded++
	outs := make([]segmentPort, 0, len(s.ports)-1)
	for i, p := range s.ports {
		if i != in {
			outs = append(outs, p)
		}
	}
	return outs
}
