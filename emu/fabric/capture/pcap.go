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
}

// PcapWriter writes Ethernet frames to a pcap file (not pcapng), in the
// host's little-endian byte order, LINKTYPE_ETHERNET. It is safe for
// concurrent use; each record is written with one Write call while the
// writer's lock is held, so records never interleave.
type PcapWriter struct {
	mu     sync.Mutex
	w      io.Writer
	nano   bool
	snap   uint32
	err    error // sticky write error or ErrClosed
	record []byte
}

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
	if _, err := w.Write(hdr[:]); err != nil {
		return nil, err
	}
	return &PcapWriter{w: w, nano: opts.Nanosecond, snap: snap}, nil
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
	capLen := min(uint32(len(frame)), p.snap)
	n := 16 + int(capLen)
	if cap(p.record) < n {
		p.record = make([]byte, n)
	}
	rec := p.record[:n]
	le := binary.LittleEndian
	sec := ts.Unix()
	frac := uint32(ts.Nanosecond())
	if !p.nano {
		frac /= 1000
	}
	le.PutUint32(rec[0:], uint32(sec))
	le.PutUint32(rec[4:], frac)
	le.PutUint32(rec[8:], capLen)
	le.PutUint32(rec[12:], uint32(len(frame)))
	copy(rec[16:], frame[:capLen])
	if _, err := p.w.Write(rec); err != nil {
		p.err = err
		return err
	}
	return nil
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
	p.err = ErrClosed
	p.record = nil
	if c, ok := p.w.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
