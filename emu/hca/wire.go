package hca

import (
	"errors"
	"log/slog"
	"net/netip"
	"time"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
)

// Port is the HCA's attachment to the fabric (a *fabric.Port).
type Port interface {
	// Send puts a RoCEv2 Ethernet frame on the wire; the port owns it after.
	// It returns false when the receiver's queue was full (backpressure).
	Send(frame []byte) bool
	// SetAddrs announces the IP addresses (GIDs) this HCA answers to and
	// sends from, all or nothing: an error (another port owns one of them)
	// leaves the port with the addresses it had.
	SetAddrs(addrs []netip.Addr) error
	// Detach leaves the fabric.
	Detach()
}

// Attach connects a device to a fabric: rx is called with each frame for
// the device (it never blocks; false: queue full, frame dropped).
type Attach func(rx func(frame []byte) bool) Port

// WireModel is what the wire asks of the device model, under the device
// lock.
type WireModel interface {
	// Up reports whether the device takes packets (its driver brought it
	// up: PVRDMA's DSR loaded and ACTIVATE written).
	Up() bool
	// QP is the QP a packet names by its QPN, nil when there is none.
	QP(qpn uint32) *QP
	// Alive reports whether qp is still the QP its handle names (it may
	// have been destroyed while a batch was taken).
	Alive(qp *QP) bool
}

// Wire is an HCA's port as the core runs it: packets built into frames, or,
// between two HCAs of the process with nothing watching the wire, into
// batches without frames (runs among them, their payload lent from guest
// memory); frames and batches received, demultiplexed to their QP's
// transport. Its fields and methods are under the device lock but for
// Attach and Detach.
type Wire struct {
	c     *Core
	model WireModel
	log   *slog.Logger
	mem   dma.Memory // the device's guest memory, as its DMA reaches it
	port  Port
	// direct carries RC packets to other HCAs without frames (out): the
	// port when it is a switch's own (no recorder between), or the link
	// AttachLink was given.
	direct DirectLink
	out    directOut
	// admit, for a link whose batches carry a source LID rather than IP
	// addresses (AttachLink's model is a LinkAdmitter), is the model's
	// check of an RC packet's source; slid the source of the batch taken.
	admit func(qp *QP, pkey, slid uint16) bool
	slid  uint16
	// lend lends the payloads of runs to the HCAs they go to (nil: no
	// guest memory); lent and runScratch are where this device reads runs
	// lent to it; extents, the sender's, while it builds a lent run.
	lend       *Lender
	lent       LentPayload
	runScratch []byte
	extents    []fabric.Extent
	filler     *mr.Filler // the receiver's, while it copies a lent run
	// batching: a batch from another HCA is being taken; held: the RC QPs
	// it reached so far, whose responses wait for its end (ReceiveBatch;
	// a QP whose class-C NAK ended its hold may be listed twice).
	batching bool
	held     []*QP

	// Set by the model: MAC is the source MAC of the frames the port
	// sends; Down, a fault holds the port down (every frame it would send
	// or receive is lost); Tracer, when set, hears every packet received,
	// stamped with Name (the device's).
	MAC    [6]byte
	Down   bool
	Tracer Tracer
	Name   string
	// Stats count the port's frames and what it dropped; QKeyViolations,
	// UD datagrams with the wrong Q_Key (a count the driver reads and a
	// reset clears: the model clears it).
	Stats          PortStats
	QKeyViolations uint32
}

// Attach connects the wire of core c (running model) to a fabric through
// attach (nil: an empty wire). mem is guest memory as the device's DMA
// reaches it (a lent run's payload must be reachable through it); lendMem,
// the guest memory other HCAs read lent payloads from (nil: none to lend).
func (w *Wire) Attach(c *Core, model WireModel, log *slog.Logger, attach Attach, mem, lendMem dma.Memory) {
	w.c, w.model, w.log, w.mem = c, model, log, mem
	if attach == nil {
		return
	}
	w.port = attach(c.Receive)
	// A port of the switch itself (not one a recorder wraps) carries RC
	// packets to other HCAs without frames when nothing watches the wire.
	if fp, ok := w.port.(*fabric.Port); ok {
		fp.SetDirect(c.DirectReceiver())
		w.attachDirect(switchLink{fp}, lendMem)
	}
}

// DirectLink is a port that carries RC packets to the other HCA ports of
// the process without frames while nothing watches the wire: a switch's
// port (addressed by IP), or an InfiniBand subnet's (by LID).
type DirectLink interface {
	// Open starts a batch for the packets of path p. ok=false: frames are
	// needed; a nil batch with ok: the receiver's queue is full.
	Open(p transport.Path) (b *fabric.Batch, ok bool)
	// Flush hands a batch Open started to its receiver, and returns it.
	Flush(b *fabric.Batch) fabric.DirectReceiver
	// FrameLen is the length on the link of a packet of path p whose
	// transport part (BTH through ICRC) is n bytes (the port's counters).
	FrameLen(p transport.Path, n int) int
}

// LinkAdmitter is a model whose link's batches name their source by LID
// (Batch.SLID, an InfiniBand subnet's) instead of IP addresses: it says
// whether an RC packet from slid with P_Key pkey may reach qp (its
// connection's remote LID, its partition), and counts a refusal.
type LinkAdmitter interface {
	AdmitDirect(qp *QP, pkey, slid uint16) bool
}

// AttachLink connects the wire of core c (running model) to a link that
// carries RC packets to other HCAs in batches only (an InfiniBand port,
// whose model builds and receives whole packets itself): Transmit is not
// used, TransmitDirect and TransmitRun are. The model's port must give
// c.DirectReceiver() its batches; mem and lendMem are as for Attach.
func (w *Wire) AttachLink(c *Core, model WireModel, log *slog.Logger, link DirectLink, mem, lendMem dma.Memory) {
	w.c, w.model, w.log, w.mem = c, model, log, mem
	if a, ok := model.(LinkAdmitter); ok {
		w.admit = a.AdmitDirect
	}
	w.attachDirect(link, lendMem)
}

func (w *Wire) attachDirect(link DirectLink, lendMem dma.Memory) {
	w.direct = link
	if lendMem != nil {
		w.lend = NewLender(lendMem)
	}
	w.filler = mr.NewFiller()
}

// switchLink is a switch's port as a DirectLink: packets go by their IP
// addresses, in Ethernet frames otherwise.
type switchLink struct{ port *fabric.Port }

func (l switchLink) Open(p transport.Path) (*fabric.Batch, bool) {
	to := l.port.Direct(p.Src, p.Dst)
	if to == nil {
		return nil, false
	}
	return l.port.Open(to), true
}

func (l switchLink) Flush(b *fabric.Batch) fabric.DirectReceiver { return l.port.Flush(b) }

func (switchLink) FrameLen(p transport.Path, n int) int {
	h, _ := roce.FrameHeaderLen(&roce.FrameFields{SrcIP: p.Src, DstIP: p.Dst})
	return max(h+n, roce.MinFrameSize)
}

// Detach leaves the fabric (the device is closed).
func (w *Wire) Detach() {
	if w.port != nil {
		w.port.Detach()
	}
}

// SetAddrs announces the IP addresses (GIDs) the HCA answers to and sends
// from (Port.SetAddrs); with no fabric, nothing to announce.
func (w *Wire) SetAddrs(addrs []netip.Addr) error {
	if w.port == nil {
		return nil
	}
	return w.port.SetAddrs(addrs)
}

// Filler is what the device's memory space fills guest memory from a lent
// payload with (nil: it makes its own).
func (w *Wire) Filler() *mr.Filler { return w.filler }

// RevokeLoans ends every loan of the device's guest memory and waits for
// the reads in progress: call it before any change to a memory region.
func (w *Wire) RevokeLoans() {
	if w.lend != nil {
		w.lend.Revoke()
	}
}

// FlushOut hands the batch being built to its receiver, if there is one
// (before the device lock goes).
func (w *Wire) FlushOut() {
	if w.out.batch != nil {
		w.flushOut()
	}
}

// ReceiveFrame takes a frame off the wire (engine goroutine, the device
// lock held), unless a fault holds the port down: then it is lost.
func (w *Wire) ReceiveFrame(frame []byte) {
	if w.Down {
		fabric.Release(frame)
		return
	}
	w.receiveFrame(frame)
}

// Transmit builds one packet into a fresh frame and sends it. The payload
// is gathered from mem in place before the headers are written: the only
// copy of the data on the sending side. A full receiver is
// transport.ErrPeerBusy.
func (w *Wire) Transmit(p *transport.Path, f *roce.PacketFields, payload *transport.Payload, mem mr.Space) error {
	if w.port == nil {
		return nil // no fabric: the wire is empty
	}
	if sent, err := w.TransmitDirect(p, f, payload, mem); sent {
		return err
	}
	ff := roce.FrameFields{Dst: p.DMAC, Src: w.MAC, SrcIP: p.Src, DstIP: p.Dst,
		TrafficClass: p.TClass, HopLimit: p.HopLimit, FlowLabel: p.FlowLabel, SrcPort: p.SrcPort}
	if ff.HopLimit == 0 {
		ff.HopLimit = roce.DefaultHopLimit
	}
	h, err := roce.FrameHeaderLen(&ff)
	if err != nil {
		return err
	}
	buf := fabric.NewFrame()
	ib, err := buildIB(buf[h:], f, payload, mem, 1)
	if err != nil {
		fabric.Release(buf)
		return err
	}
	frame, err := roce.Frame(buf, &ff, ib)
	if err != nil {
		fabric.Release(buf)
		return err
	}
	n := len(frame) // (Send gives the frame away)
	if !w.port.Send(frame) {
		return transport.ErrPeerBusy
	}
	w.Stats.FramesOut++
	w.Stats.BytesOut += uint64(n)
	return nil
}

// directOut is the batch of packets being built for another HCA, sent
// without frames (fabric.Batch): flushed when the destination changes, when
// it is full, and before the device lock is let go.
type directOut struct {
	batch    *fabric.Batch
	src, dst netip.Addr
	dlid     uint16
}

// openOut makes w.out a batch for the HCA owning the path's destination:
// false with a nil error when frames are needed (the fabric does not carry
// batches there now), transport.ErrPeerBusy when its queue is full.
func (w *Wire) openOut(p *transport.Path) (bool, error) {
	out := &w.out
	if out.batch != nil && (out.dst != p.Dst || out.src != p.Src || out.dlid != p.DLID) {
		w.flushOut()
	}
	if out.batch != nil {
		return true, nil
	}
	b, ok := w.direct.Open(*p)
	if !ok {
		return false, nil
	}
	if b == nil {
		return false, transport.ErrPeerBusy
	}
	*out = directOut{batch: b, src: p.Src, dst: p.Dst, dlid: p.DLID}
	return true, nil
}

// TransmitDirect builds an RC packet into the batch for the HCA owning the
// path's destination, when the link carries it without a frame (nothing
// watches the wire): only the IB transport part is written, the payload
// gathered in place, and no ICRC computed. sent=false: a frame is needed
// (the caller builds one). A full receiver is transport.ErrPeerBusy, with
// nothing sent.
func (w *Wire) TransmitDirect(p *transport.Path, f *roce.PacketFields, payload *transport.Payload, mem mr.Space) (sent bool, err error) {
	if w.direct == nil || f.BTH.Opcode.Transport() != roce.TransportRC {
		return false, nil
	}
	out := &w.out
	for {
		if ok, err := w.openOut(p); !ok {
			return err != nil, err
		}
		ib, err := buildIB(out.batch.Room(), f, payload, mem, 1)
		if err == roce.ErrTooLong && len(out.batch.Packets) > 0 {
			w.flushOut() // full: the packet goes in the next batch
			continue
		}
		if err != nil {
			return true, err
		}
		frameLen := w.direct.FrameLen(*p, len(ib))
		out.batch.Add(p.Src, p.Dst, ib, frameLen, 1)
		w.Stats.FramesOut++
		w.Stats.BytesOut += uint64(frameLen)
		return true, nil
	}
}

// TransmitRun builds up to n full-PMTU MIDDLE packets of one message as one
// run (roce.BuildRun) into the batch for the HCA owning the path's
// destination, when the fabric carries packets without frames: one header,
// the payloads gathered end to end, as many packets as the batch has room
// for. It returns how many packets the run took; 0 when frames are needed
// (the caller sends the packets one at a time). A full receiver is
// transport.ErrPeerBusy, with nothing sent.
func (w *Wire) TransmitRun(p *transport.Path, f *roce.PacketFields, payload *transport.Payload, n int, mem mr.Space) (int, error) {
	if w.direct == nil || n < 1 || payload.Len%n != 0 {
		return 0, nil
	}
	per := payload.Len / n
	one, err := roce.RunLen(f.BTH.Opcode, per, 1) // one packet's IB part
	if err != nil {
		return 0, err
	}
	frameOne := w.direct.FrameLen(*p, one)
	out := &w.out
	for {
		if ok, err := w.openOut(p); !ok {
			return 0, err
		}
		if k, ok, err := w.lendRun(p, f, payload, n, per, frameOne, mem); ok || err != nil {
			return k, err
		}
		room := out.batch.Room()
		k := min(n, (len(room)-one)/per+1)
		if len(room) < one || k < 1 {
			if len(out.batch.Packets) == 0 {
				return 0, nil // no batch holds one packet: frames
			}
			w.flushOut() // full: the run goes in the next batch
			continue
		}
		run := *payload
		run.Len = k * per
		ib, err := buildIB(room, f, &run, mem, k)
		if err != nil {
			return 0, err
		}
		frameLen := k * frameOne
		out.batch.Add(p.Src, p.Dst, ib, frameLen, k)
		w.Stats.FramesOut += uint64(k)
		w.Stats.BytesOut += uint64(frameLen)
		return k, nil
	}
}

var errFragmented = errors.New("payload in too many pieces to lend")

// maxLentRun bounds the payload of a lent run (and the receiver's scratch
// buffer for one it takes apart).
const maxLentRun = 256 << 10

// lendRun adds up to n packets (per payload bytes each, frameLen the frame
// one would take) to the open batch as a run whose payload stays in guest
// memory, lent to the receiver (see lend.go): the payload is validated
// against the memory regions and found reachable, as gathering it would,
// but not copied. ok=false: it cannot be lent (no memory to lend, or the
// payload is in too many pieces): gather it.
func (w *Wire) lendRun(p *transport.Path, f *roce.PacketFields, payload *transport.Payload, n, per, frameLen int, mem mr.Space) (int, bool, error) {
	b := w.out.batch
	if w.lend == nil || n < 2 {
		return 0, false, nil
	}
	k := min(n, maxLentRun/per)
	size := k * per
	hdr, err := roce.PacketLen(f.BTH.Opcode, 0) // the run without its payload
	if err != nil || len(b.Room()) < hdr || b.ExtentRoom() == 0 {
		return 0, false, nil
	}
	if b.Lender != nil && b.Epoch != w.lend.Epoch() {
		// Loans were revoked since this batch's first: gathered, not lent
		// under an epoch the receiver would refuse.
		return 0, false, nil
	}
	ext, room := w.extents[:0], b.ExtentRoom()
	err = mem.Extents(payload.Segs, payload.Off, uint64(size), func(gpa, m uint64) error {
		if err := w.mem.Access(gpa, m, false, func([]byte) {}); err != nil {
			return err // unreachable now: the gather would fail here
		}
		if last := len(ext) - 1; last >= 0 && ext[last].Addr+ext[last].Len == gpa {
			ext[last].Len += m
			return nil
		}
		if len(ext) == room {
			return errFragmented
		}
		ext = append(ext, fabric.Extent{Addr: gpa, Len: m})
		return nil
	})
	w.extents = ext[:0]
	if err == errFragmented {
		return 0, false, nil
	}
	if err != nil {
		return 0, true, err
	}
	f.Payload = nil
	ib, err := roce.BuildRunLent(b.Room(), f, k, size)
	if err != nil {
		return 0, true, err
	}
	if b.Lender == nil {
		b.Lender, b.Epoch = w.lend, w.lend.Epoch()
	}
	b.AddLent(p.Src, p.Dst, ib, k*frameLen, k, size, ext)
	w.Stats.FramesOut += uint64(k)
	w.Stats.BytesOut += uint64(k * frameLen)
	return k, true, nil
}

// buildIB builds packet f (BTH through the ICRC field, which it leaves for
// roce.Frame) at the start of room, its payload gathered from mem straight
// into place: the only copy of the data on the sending side, whether the
// packet becomes a frame or goes without one. roce.ErrTooLong: room is too
// small (nothing gathered).
func buildIB(room []byte, f *roce.PacketFields, payload *transport.Payload, mem mr.Space, run int) ([]byte, error) {
	n := payload.Len
	total, err := roce.RunLen(f.BTH.Opcode, n, run)
	if err != nil {
		return nil, err
	}
	if total > len(room) {
		return nil, roce.ErrTooLong
	}
	f.Payload = nil
	if n > 0 {
		hlen := total - n - roce.PadCount(n) - roce.ICRCSize
		dst := room[hlen : hlen+n]
		if err := payload.Gather(mem, dst); err != nil {
			return nil, err
		}
		f.Payload = dst
	}
	return roce.BuildRun(room, f, run)
}

// flushOut hands the batch being built to its receiver. Under an engine's
// work the receiver is not woken: the engine offers to take the batch for
// it when the work is done (worker.offer).
func (w *Wire) flushOut() {
	b := w.out.batch
	w.out = directOut{}
	wk := w.c.Worker()
	if wk == nil {
		w.direct.Flush(b)
		return
	}
	b.Helped = true
	wk.Helps(w.direct.Flush(b)) // every HCA port's taker is its device's engine (New)
}

// ReceiveBatch handles a batch of packets another HCA sent without frames
// (engine goroutine, the device lock held): each as receiveFrame handles a frame's,
// without the Ethernet, IP and UDP headers and the ICRC no frame carried.
//
// The RC QPs a batch reaches answer it once: their responses are held until
// the batch is done (rc.QP.HoldResponses), so a stream of small requests is
// acknowledged by one ACK per batch instead of one per packet.
func (w *Wire) ReceiveBatch(b *fabric.Batch) {
	if w.Down || !w.model.Up() {
		return
	}
	w.batching, w.slid = true, b.SLID
	defer w.releaseHeld()
	for i := range b.Packets {
		pkt := &b.Packets[i]
		run := max(pkt.Run, 1)
		w.Stats.FramesIn += uint64(run)
		w.Stats.BytesIn += uint64(pkt.FrameLen)
		if pkt.Extents == nil {
			w.receiveIB(pkt.IB, pkt.Src, pkt.Dst, nil, run, nil)
			continue
		}
		// A payload lent by the sender: read from its memory while the
		// loan is pinned; a revoked loan is a run lost on the wire.
		if b.Lender == nil || !b.Lender.Pin(b.Epoch) {
			w.Stats.Revoked += uint64(run)
			continue
		}
		w.lent.Lend(b.Lender, pkt.Extents, pkt.PayloadLen)
		w.receiveIB(pkt.IB, pkt.Src, pkt.Dst, nil, run, &w.lent)
		w.lent.Forget()
		b.Lender.Unpin()
	}
}

// releaseHeld sends the responses the QPs a batch reached held back.
func (w *Wire) releaseHeld() {
	w.batching = false
	for _, qp := range w.held {
		if w.model.Alive(qp) && qp.RC != nil {
			qp.RC.ReleaseResponses()
		}
	}
	clear(w.held)
	w.held = w.held[:0]
}

// receiveFrame handles one frame from the fabric (engine goroutine, d.mu
// held): it goes to the transport of the QP it names. Frames that do not
// decode, fail the ICRC or name no QP are dropped, as hardware does; so are
// RC packets from outside the QP's connection (counted).
func (w *Wire) receiveFrame(frame []byte) {
	defer fabric.Release(frame)
	if !w.model.Up() {
		return
	}
	w.Stats.FramesIn++
	w.Stats.BytesIn += uint64(len(frame))
	u, err := roce.Unframe(frame)
	if err != nil {
		w.Stats.Malformed++
		w.log.Debug("dropped frame", "err", err)
		return
	}
	if err := u.VerifyICRC(); err != nil {
		w.Stats.BadICRC++
		w.log.Debug("dropped frame: bad ICRC")
		return
	}
	w.receiveIB(u.IB, u.SrcIP, u.DstIP, u.IP, 1, nil)
}

// receiveIB handles the IB transport part of a received packet (BTH through
// ICRC) from src to dst; ipHeader is its frame's IP header (a UD receive
// buffer's GRH), nil for a packet that came without a frame. run is the
// number of packets it stands for: more than 1 for a run (roce.ParseRun),
// which only comes without a frame; lent, when not nil, is its payload
// lent by the sender (only for runs: roce.ParseRunLent).
func (w *Wire) receiveIB(ib []byte, src, dst netip.Addr, ipHeader []byte, run int, lent *LentPayload) {
	var pkt roce.Packet
	var err error
	if lent != nil {
		pkt, err = roce.ParseRunLent(ib, run, lent.Len())
	} else {
		pkt, err = roce.ParseRun(ib, run)
	}
	if err != nil {
		w.Stats.Malformed++
		w.log.Debug("dropped packet", "err", err)
		return
	}
	if pkt.BTH.TVer() != 0 {
		w.Stats.Malformed++
		return
	}
	qp := w.model.QP(pkt.BTH.DestQP())
	if qp == nil {
		w.Stats.NoQP++
		return
	}
	if run > 1 && (w.Tracer != nil || pkt.Opcode().Transport() != roce.TransportRC) {
		// Traced packet by packet, or not RC (malformed below): taken
		// apart, as the sender would have sent it.
		if lent != nil {
			if pkt.Payload = w.readLent(lent); pkt.Payload == nil {
				return
			}
		}
		var bth [roce.BTHSize]byte
		for i := range run {
			one := roce.RunPacket(&pkt, i, run, bth[:])
			w.receivePacket(qp, &one, src, dst, ipHeader, 1, nil)
		}
		return
	}
	w.receivePacket(qp, &pkt, src, dst, ipHeader, run, lent)
}

// readLent reads a lent payload into the device's scratch buffer; nil when
// it cannot be read (the run is lost).
func (w *Wire) readLent(lent *LentPayload) []byte {
	scratch := w.scratch()
	if n := lent.Len(); n > len(scratch) || lent.ReadAt(scratch[:n], 0) != nil {
		w.Stats.Revoked++
		return nil
	}
	return scratch[:lent.Len():lent.Len()]
}

// scratch is the buffer a lent run is read into when it is taken apart,
// made on first use.
func (w *Wire) scratch() []byte {
	if w.runScratch == nil {
		w.runScratch = make([]byte, maxLentRun)
	}
	return w.runScratch
}

// receivePacket hands a parsed packet (a run of run packets, its payload
// lent when lent is not nil) to its QP.
func (w *Wire) receivePacket(qp *QP, pkt *roce.Packet, src, dst netip.Addr, ipHeader []byte, run int, lent *LentPayload) {
	if w.Tracer != nil {
		w.traceRx(qp, pkt, "")
	}
	switch pkt.Opcode().Transport() {
	case roce.TransportUD:
		if ipHeader == nil {
			w.Stats.Malformed++ // UD is never sent without a frame
			return
		}
		if qp.UD != nil && !qp.UD.Receive(pkt, ipHeader) {
			w.QKeyViolations++
			w.Stats.QKey++
			if w.Tracer != nil {
				w.traceRx(qp, pkt, "qkey")
			}
		} else {
			qp.CountRx(pkt, 1, len(pkt.Payload))
		}
	case roce.TransportRC:
		// Only from the peer the QP is connected to, at the address it
		// sends from (rc.QP.ReceiveFrom checks); anything else is counted.
		var from mr.Source
		var scratch []byte
		size := len(pkt.Payload)
		if lent != nil {
			from, size, scratch = lent, lent.Len(), w.scratch()
		}
		if w.admit != nil && (qp.RC == nil || !w.admit(qp, pkt.BTH.PKey(), w.slid)) {
			// A source LID (an IB subnet's batch) the model refused.
			w.Stats.Address += uint64(run)
			if w.Tracer != nil {
				w.traceRx(qp, pkt, "address")
			}
			return
		}
		if w.batching && qp.RC != nil && !qp.RC.Holding() {
			qp.RC.HoldResponses()
			w.held = append(w.held, qp)
		}
		if w.admit != nil {
			// The model checked the source (its LID): the QP takes it.
			qp.RC.ReceiveRun(pkt, run, from, scratch)
			qp.CountRx(pkt, run, size)
		} else if qp.RC != nil && !qp.RC.ReceiveRunFrom(pkt, run, src, dst, from, scratch) {
			w.Stats.Address += uint64(run)
			if w.Tracer != nil {
				w.traceRx(qp, pkt, "address")
			}
		} else {
			qp.CountRx(pkt, run, size)
		}
	}
}

// traceRx reports a received packet to the tracer, and why it was dropped
// if it was (the tracer is set).
func (w *Wire) traceRx(qp *QP, pkt *roce.Packet, dropped string) {
	psn := pkt.BTH.PSN()
	ev := TraceEvent{QPN: qp.QPN, Event: "rx", Dir: "rx", PSN: &psn,
		Opcode: pkt.Opcode().String(), DestQPN: pkt.BTH.DestQP(), Len: len(pkt.Payload), Dropped: dropped}
	if dropped != "" {
		ev.Event = "dropped" // after its rx: the QP did not take it
	}
	if pkt.AETH != nil {
		ev.Syndrome = pkt.AETH.Syndrome().String()
	}
	w.Trace(&ev)
}

// Trace hands ev to the tracer stamped with the time and the device's name
// (the device lock held; the tracer is set).
func (w *Wire) Trace(ev *TraceEvent) {
	ev.Time, ev.Device = time.Now(), w.Name
	w.Tracer.Trace(ev)
}

// TraceTx reports a packet of n payload bytes that QP qpn sent (again: a
// retransmission) to the tracer (the tracer is set).
func (w *Wire) TraceTx(qpn uint32, f *roce.PacketFields, n int, again bool) {
	psn := f.BTH.PSN
	ev := TraceEvent{QPN: qpn, Event: "tx", Dir: "tx", PSN: &psn, Opcode: f.BTH.Opcode.String(),
		DestQPN: f.BTH.DestQP, Len: n}
	if info, _ := f.BTH.Opcode.Info(); info.Headers&roce.HasAETH != 0 {
		ev.Syndrome = f.AETH.Syndrome.String()
	}
	if again {
		ev.Event = "retransmit"
	}
	w.Trace(&ev)
}
