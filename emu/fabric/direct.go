package fabric

import "net/netip"

// Direct delivery: between two HCA ports of one switch, with nothing
// watching the wire (no capture, no fault rule, no recorder), a packet need
// not become a frame. The sending HCA writes only the IB transport part of
// each packet (BTH through the ICRC field) into a Batch, and hands the batch
// to the receiving port in one go: no Ethernet, IP or UDP header is written
// or parsed, no ICRC is computed or checked (no frame exists to carry one),
// and one hand-off to the receiver carries many packets. Everything else is
// as for frames: the receiver sees the same IB bytes and the same IP
// addresses, the switch counts the packets as forwarded, and a full
// receiver refuses a batch before it is filled (Open), so nothing is lost
// for lack of room.
//
// Where a frame is needed — a capture, a fault rule that may touch one, a
// recording device, a NIC, an uplink, a soft-RoCE peer — the sender gets no
// direct port and sends frames, with their ICRC, as before.

// DirectReceiver is an HCA port's taker of batches.
type DirectReceiver interface {
	// Reserve makes room for one batch, false when the receiver's queue is
	// full (back off, as for a refused frame). A reservation is used by one
	// Deliver.
	Reserve() bool
	// Deliver hands over a batch Reserve made room for: it never blocks
	// and owns the batch afterwards (it calls Release). A batch marked
	// Helped may wait in the receiver's queue without waking its taker:
	// its sender offers to take it (for the receiver) soon after, and
	// wakes the taker where that fails.
	Deliver(b *Batch)
}

// Extent is a piece of a payload a batch carries by reference: Len bytes
// at address Addr of the sending HCA's memory.
type Extent struct{ Addr, Len uint64 }

// Lender is the sending HCA's memory as the receiver of its batches reaches
// it. A run's payload may stay where it is (Packet.Extents): the receiver
// reads it straight from the sender's memory into its own, one copy where a
// payload in the batch takes two. Pin and Unpin bracket those reads. Pin
// fails when what the sender lent at epoch may no longer be its to lend (a
// memory region the payload came from was deregistered, invalidated or
// registered again since): the packet is then lost, as on a wire. The
// sender waits for pinned reads to end before such a change completes, so
// no read sees memory after its region stopped covering it. Lender's
// methods may be called from any goroutine.
type Lender interface {
	Pin(epoch uint64) bool
	Unpin()
	ReadAt(p []byte, addr uint64) error
}

// Packet is one packet of a Batch: the IB transport part and the IP
// addresses its frame would carry.
type Packet struct {
	Src, Dst netip.Addr
	// IB is the BTH through the ICRC field; the ICRC is not computed.
	IB []byte
	// FrameLen is the length the frames of the packet would have, all
	// together (counters).
	FrameLen int
	// Run is the number of packets this one stands for: more than one for
	// a run of full-PMTU MIDDLE packets of one message (roce.BuildRun),
	// which only a batch carries.
	Run int
	// Extents, when not nil, is where the payload lies in the sender's
	// memory (Batch.Lender): IB holds the packet without its payload, which
	// is PayloadLen bytes.
	Extents    []Extent
	PayloadLen int
}

// Batch is packets from one HCA port to another, carried without frames.
type Batch struct {
	Packets []Packet
	// Lender and Epoch: whose memory the packets' Extents name, and the
	// epoch at which it lent them (see Lender).
	Lender Lender
	Epoch  uint64
	// Helped: the sender will see to it that the receiver takes the batch
	// (DirectReceiver.Deliver), so delivering it need not wake anyone.
	Helped bool
	// SLID is the sending port's LID when the batch crosses an InfiniBand
	// subnet (the subnet sets it: the sender cannot choose it); 0 on the
	// Ethernet segment, whose packets carry IP addresses.
	SLID    uint16
	extents []Extent
	to      *Port          // a Switch's receiving port
	taker   DirectReceiver // another link's receiver (NewBatch)
	buf     []byte
	used    int
	count   uint64 // packets, runs counting as theirs
	inRuns  uint64 // packets inside runs
	lent    uint64 // packets whose payload is lent
}

// Batch limits: the bytes of IB packets one batch holds, and its packets.
// A receiver holds at most directQueue batches (its DirectReceiver's
// bound), so these bound the memory a receiver's queue takes.
const (
	BatchBytes   = 128 << 10
	BatchPackets = 64
	BatchExtents = 256 // extents of payloads carried by reference
)

// batchFree keeps released batches for reuse: a list of its own rather than
// a sync.Pool, which the garbage collector empties, so that a steady stream
// does not allocate (and clear) a buffer of BatchBytes again after every
// collection. Beyond its bound, released batches are left to the collector.
// (A stack, reusing the batch released last, measured no faster: that
// batch's bytes sit in the receiving core's cache, not the sender's.)
var batchFree = make(chan *Batch, 64) // at most 8 MiB kept

func newBatch() *Batch {
	select {
	case b := <-batchFree:
		return b
	default:
		return &Batch{Packets: make([]Packet, 0, BatchPackets), buf: make([]byte, BatchBytes),
			extents: make([]Extent, 0, BatchExtents)}
	}
}

// NewBatch starts a batch for a link other than a Switch's that carries
// packets between HCA ports without frames (an InfiniBand subnet's): to is
// the receiving port's taker, which Reserve made room in, and slid the
// sending port's LID. The link hands it over itself (Taker().Deliver).
func NewBatch(to DirectReceiver, slid uint16) *Batch {
	b := newBatch()
	b.taker, b.SLID = to, slid
	return b
}

// Taker is the receiver NewBatch was given (nil for a Switch's batch).
func (b *Batch) Taker() DirectReceiver { return b.taker }

// Room returns the free part of the batch's buffer, where the next packet
// is built; empty when the batch holds BatchPackets packets.
func (b *Batch) Room() []byte {
	if len(b.Packets) >= BatchPackets {
		return nil
	}
	return b.buf[b.used:]
}

// Add appends the packet just built at the start of Room (ib is that
// prefix of Room); run is the number of packets it stands for (1, or more
// for a run: roce.BuildRun), frameLen the length of their frames.
func (b *Batch) Add(src, dst netip.Addr, ib []byte, frameLen, run int) {
	b.Packets = append(b.Packets, Packet{Src: src, Dst: dst, IB: ib[:len(ib):len(ib)], FrameLen: frameLen, Run: run})
	b.used += len(ib)
	b.count += uint64(run)
	if run > 1 {
		b.inRuns += uint64(run)
	}
}

// ExtentRoom is the number of extents the batch can still take.
func (b *Batch) ExtentRoom() int { return cap(b.extents) - len(b.extents) }

// AddLent appends a run built at the start of Room without its payload,
// which stays in the memory of the batch's Lender at ext (at most
// ExtentRoom extents, copied; payloadLen bytes in all).
func (b *Batch) AddLent(src, dst netip.Addr, ib []byte, frameLen, run, payloadLen int, ext []Extent) {
	start := len(b.extents)
	b.extents = append(b.extents, ext...)
	b.Add(src, dst, ib, frameLen, run)
	p := &b.Packets[len(b.Packets)-1]
	p.Extents = b.extents[start:len(b.extents):len(b.extents)]
	p.PayloadLen = payloadLen
	b.lent += uint64(run)
}

// Count is the number of packets the batch carries, a run counting as the
// packets it stands for.
func (b *Batch) Count() uint64 { return b.count }

// InRuns is the number of packets inside the batch's runs, and Lent the
// number of those whose payload is lent (Count's share of each).
func (b *Batch) InRuns() uint64 { return b.inRuns }
func (b *Batch) Lent() uint64   { return b.lent }

// Release returns the batch to the pool; the caller must not use it (nor
// its packets' bytes) afterwards.
func (b *Batch) Release() {
	clear(b.Packets)
	b.Packets, b.to, b.used, b.count, b.inRuns = b.Packets[:0], nil, 0, 0, 0
	b.Lender, b.Epoch, b.extents, b.lent, b.Helped = nil, 0, b.extents[:0], 0, false
	b.SLID, b.taker = 0, nil
	select {
	case batchFree <- b:
	default:
	}
}

// SetDirect registers the port's taker of batches: other HCA ports may then
// send to it without frames. A port without one only takes frames.
func (p *Port) SetDirect(r DirectReceiver) {
	if p.nic {
		return
	}
	p.direct.Store(&r)
}

// AllowDirect lets the switch's HCA ports send to each other without
// frames whenever quiet reports true: the caller knows its decorators and
// quiet says when none of them would see or change a frame (no capture,
// no fault rule). A switch made with no decorators allows it always.
func (s *Switch) AllowDirect(quiet func() bool) { s.quiet.Store(&quiet) }

// directOK reports whether frames between HCAs may be skipped now.
func (s *Switch) directOK() bool {
	q := s.quiet.Load()
	if q == nil {
		return !s.decorated
	}
	return (*q)()
}

// Direct returns the HCA port to send packets from src to dst to without
// frames, or nil when frames are needed: the switch does not allow it now,
// this port does not own src (its frame would be refused as spoofed), or
// dst belongs to no HCA port that takes batches.
func (p *Port) Direct(src, dst netip.Addr) *Port {
	if p.nic || p.gone.Load() || !p.sw.directOK() || !p.Owns(src) {
		return nil
	}
	s := p.sw
	s.mu.RLock()
	to := s.byIP[dst.Unmap()]
	s.mu.RUnlock()
	if to == nil || to.gone.Load() || to.direct.Load() == nil {
		return nil
	}
	return to
}

// Open starts a batch for port to (from Direct): nil when to's queue is
// full (back off and send again, as for a refused frame).
func (p *Port) Open(to *Port) *Batch {
	r := to.direct.Load()
	if r == nil || !(*r).Reserve() {
		return nil
	}
	b := newBatch()
	b.to = to
	return b
}

// Flush hands the batch Open started to its port, and returns the port's
// taker it went to. An empty batch, or one for a port gone since, still
// uses its reservation: the receiver releases it.
func (p *Port) Flush(b *Batch) DirectReceiver {
	to := b.to
	if n := b.count; to.gone.Load() {
		p.sw.Dropped.Add(n)
	} else {
		p.sw.Forwarded.Add(n)
		p.sw.Direct.Add(n)
		p.sw.DirectRuns.Add(b.inRuns)
		p.sw.DirectLent.Add(b.lent)
	}
	r := *to.direct.Load()
	r.Deliver(b)
	return r
}
