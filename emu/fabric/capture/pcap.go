package capture

import (
	"encoding/binary"
	"errors"
	"io"
	"sync"
	"time"
)

// pcap (libpcap "classic" format) constants.
const (
	pcapMagicMicro   = 0xA1B2C3D4
	pcapMagicNano    = 0xA1B23C4D
	LinkTypeEthernet = 1
	// LinkTypeUpperPDU is LINKTYPE_WIRESHARK_UPPER_PDU: each record starts
	// with exported-PDU tags naming the dissector of the bytes after them
	// (PcapOptions.Dissector). bookworm's tshark (4.0) decodes native
	// InfiniBand this way ("infiniband"), and not in LINKTYPE_INFINIBAND
	// (247), which it refuses (shared/spec/mlx5.md §5.9).
	LinkTypeUpperPDU = 252
	// DefaultSnapLen is the snapshot length used when PcapOptions.SnapLen
	// is 0.
	DefaultSnapLen = 262144
)

// ErrClosed is returned by a PcapWriter after Close.
var ErrClosed = errors.New("fabric: pcap writer closed")

// PcapOptions configures NewPcapWriter.
type PcapOptions struct {
	Nanosecond bool   // nanosecond timestamps (magic 0xA1B23C4D); default microseconds
	SnapLen    uint32 // frames are truncated to this length; 0 means DefaultSnapLen
	// Dissector, when set, makes the file LinkTypeUpperPDU: every record is
	// the exported-PDU tags naming this dissector (e.g. "infiniband" for
	// native IB packets, LRH first), then the packet. Empty: Ethernet.
	Dissector string
}

// PcapWriter writes Ethernet frames to a pcap file (not pcapng), in the
// host's little-endian byte order, LINKTYPE_ETHERNET; or, with
// PcapOptions.Dissector, packets of that dissector in LinkTypeUpperPDU. It is safe for
// concurrent use; each record is written with one Write call while the
// writer's lock is held, so records never interleave.
//
// A record may be staged before it is known whether it is to be kept (the
// capture decorator stages a frame, then learns whether the link took it):
// records are written in the order they were staged, each once it and every
// record staged before it are settled, and a record settled as not kept is
// never written.
type PcapWriter struct {
	mu      sync.Mutex
	w       io.Writer
	nano    bool
	snap    uint32
	err     error     // sticky write error or ErrClosed
	pending []*staged // staged and not yet written, oldest first
	prefix  []byte    // exported-PDU tags before every packet (LinkTypeUpperPDU)
}

// staged is one record staged: its bytes, and whether it is settled and
// kept.
type staged struct {
	rec           []byte
	settled, keep bool
}

// recordPool holds the buffers of staged records.
var recordPool = sync.Pool{New: func() any { return new(staged) }}

// NewPcapWriter writes the pcap file header to w and returns a writer.
func NewPcapWriter(w io.Writer, opts PcapOptions) (*PcapWriter, error) {
	snap := opts.SnapLen
	if snap == 0 {
		snap = DefaultSnapLen
	}
	var hdr [24]byte
	magic := uint32(pcapMagicMicro)
	if opts.Nanosecond {
		magic = pcapMagicNano
	}
	le := binary.LittleEndian
	le.PutUint32(hdr[0:], magic)
	le.PutUint16(hdr[4:], 2) // version 2.4
	le.PutUint16(hdr[6:], 4)
	// thiszone, sigfigs: 0
	le.PutUint32(hdr[16:], snap)
	le.PutUint32(hdr[20:], LinkTypeEthernet)
	var prefix []byte
	if opts.Dissector != "" {
		if len(opts.Dissector) > 255 {
			return nil, errors.New("fabric: pcap dissector name too long")
		}
		le.PutUint32(hdr[20:], LinkTypeUpperPDU)
		prefix = exportedPDUTags(opts.Dissector)
	}
	if _, err := w.Write(hdr[:]); err != nil {
		return nil, err
	}
	return &PcapWriter{w: w, nano: opts.Nanosecond, snap: snap, prefix: prefix}, nil
}

// Exported-PDU tags (Wireshark's exported_pdu.h): big-endian tag and
// length, the value padded with zeros to a multiple of 4 bytes.
const (
	expPDUTagEnd           = 0
	expPDUTagDissectorName = 12
)

// exportedPDUTags returns the tags that name dissector, then the end tag.
func exportedPDUTags(dissector string) []byte {
	n := (len(dissector) + 3) &^ 3
	b := make([]byte, 4+n+4)
	binary.BigEndian.PutUint16(b[0:], expPDUTagDissectorName)
	binary.BigEndian.PutUint16(b[2:], uint16(n))
	copy(b[4:], dissector)
	binary.BigEndian.PutUint16(b[4+n:], expPDUTagEnd)
	return b
}

// WritePacket appends one frame captured at ts. Frames longer than the snap
// length are truncated (the record keeps the original length). After a
// write error every later call returns that error.
func (p *PcapWriter) WritePacket(ts time.Time, frame []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err
	}
	s := p.stageLocked(ts, frame)
	s.settled, s.keep = true, true
	p.flushLocked()
	return p.err
}

// stage makes a record of frame captured now, written once it is settled
// (settle); nil after a write error or Close.
func (p *PcapWriter) stage(frame []byte) *staged {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return nil
	}
	// The time is taken under the lock: records in the file are in the
	// order of their times.
	return p.stageLocked(time.Now(), frame)
}

// stageLocked copies frame into a record captured at ts, last in the
// pending queue (p.mu held).
func (p *PcapWriter) stageLocked(ts time.Time, frame []byte) *staged {
	pre := len(p.prefix)
	origLen := uint32(pre + len(frame))
	capLen := min(origLen, p.snap)
	n := 16 + int(capLen)
	s := recordPool.Get().(*staged)
	if cap(s.rec) < n {
		s.rec = make([]byte, n)
	}
	rec := s.rec[:n]
	le := binary.LittleEndian
	sec := ts.Unix()
	frac := uint32(ts.Nanosecond())
	if !p.nano {
		frac /= 1000
	}
	le.PutUint32(rec[0:], uint32(sec))
	le.PutUint32(rec[4:], frac)
	le.PutUint32(rec[8:], capLen)
	le.PutUint32(rec[12:], origLen)
	copy(rec[16+copy(rec[16:], p.prefix):], frame)
	s.rec, s.settled, s.keep = rec, false, false
	p.pending = append(p.pending, s)
	return s
}

// settle says whether a staged record is kept, and writes the records
// settled at the head of the queue (s nil: nothing staged).
func (p *PcapWriter) settle(s *staged, keep bool) {
	if s == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s.settled, s.keep = true, keep
	p.flushLocked()
}

// flushLocked writes the kept records at the head of the queue up to the
// first one not settled, and recycles them (p.mu held). After an error or
// Close nothing more is written: the queue is only emptied.
func (p *PcapWriter) flushLocked() {
	i := 0
	for ; i < len(p.pending) && p.pending[i].settled; i++ {
		s := p.pending[i]
		if s.keep && p.err == nil {
			if _, err := p.w.Write(s.rec); err != nil {
				p.err = err
			}
		}
		p.pending[i] = nil
		if cap(s.rec) <= 16+DefaultSnapLen {
			recordPool.Put(s)
		}
	}
	if i == len(p.pending) {
		p.pending = p.pending[:0]
	} else if i > 0 {
		p.pending = append(p.pending[:0], p.pending[i:]...)
	}
}

// Close stops the writer and closes the underlying writer if it is an
// io.Closer. Later WritePacket calls return ErrClosed; a second Close
// returns nil.
func (p *PcapWriter) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == ErrClosed {
		return nil
	}
	// Records still staged (a frame on its way as the capture stops) are
	// not written.
	p.err = ErrClosed
	if c, ok := p.w.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
