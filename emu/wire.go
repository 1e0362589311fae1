package emu

import (
	"errors"
	"net/netip"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/hca"
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

// gidAddr is the IP address a GID stands for.
func gidAddr(g [16]byte) netip.Addr { return netip.AddrFrom16(g).Unmap() }

// pathFor resolves a source GID index and a destination GID into a path.
func (d *Device) pathFor(sgid uint8, dgid [16]byte) (transport.Path, bool) {
	if int(sgid) >= len(d.res.gids) || !d.res.gids[sgid].Valid {
		return transport.Path{}, false
	}
	p := transport.Path{Src: gidAddr(d.res.gids[sgid].GID), Dst: gidAddr(dgid)}
	if p.Src.Is4() != p.Dst.Is4() {
		return transport.Path{}, false
	}
	return p, true
}

// transmit builds one packet into a fresh frame and sends it. The payload
// is gathered from mem in place before the headers are written: the only
// copy of the data on the sending side. A full receiver is
// transport.ErrPeerBusy.
func (d *Device) transmit(p *transport.Path, f *roce.PacketFields, payload *transport.Payload, mem mr.Space) error {
	if d.port == nil {
		return nil // no fabric: the wire is empty
	}
	if d.direct != nil && f.BTH.Opcode.Transport() == roce.TransportRC {
		if sent, err := d.transmitDirect(p, f, payload, mem); sent {
			return err
		}
	}
	ff := roce.FrameFields{Dst: p.DMAC, Src: d.wireMAC, SrcIP: p.Src, DstIP: p.Dst,
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
	if !d.port.Send(frame) {
		return transport.ErrPeerBusy
	}
	d.stats.port.FramesOut++
	d.stats.port.BytesOut += uint64(n)
	return nil
}

// directOut is the batch of packets being built for another HCA, sent
// without frames (fabric.Batch): flushed when the destination changes, when
// it is full, and before the device lock is let go.
type directOut struct {
	batch    *fabric.Batch
	src, dst netip.Addr
}

// openOut makes d.out a batch for the HCA owning the path's destination:
// false with a nil error when frames are needed (the fabric does not carry
// batches there now), transport.ErrPeerBusy when its queue is full.
func (d *Device) openOut(p *transport.Path) (bool, error) {
	out := &d.out
	if out.batch != nil && (out.dst != p.Dst || out.src != p.Src) {
		d.flushOut()
	}
	if out.batch != nil {
		return true, nil
	}
	to := d.direct.Direct(p.Src, p.Dst)
	if to == nil {
		return false, nil
	}
	b := d.direct.Open(to)
	if b == nil {
		return false, transport.ErrPeerBusy
	}
	*out = directOut{batch: b, src: p.Src, dst: p.Dst}
	return true, nil
}

// transmitDirect builds an RC packet into the batch for the HCA owning the
// path's destination, when the fabric carries it without a frame (nothing
// watches the wire): only the IB transport part is written, the payload
// gathered in place, and no ICRC computed. sent=false: a frame is needed
// (the caller builds one). A full receiver is transport.ErrPeerBusy, with
// nothing sent.
func (d *Device) transmitDirect(p *transport.Path, f *roce.PacketFields, payload *transport.Payload, mem mr.Space) (sent bool, err error) {
	h, err := roce.FrameHeaderLen(&roce.FrameFields{SrcIP: p.Src, DstIP: p.Dst})
	if err != nil {
		return true, err
	}
	out := &d.out
	for {
		if ok, err := d.openOut(p); !ok {
			return err != nil, err
		}
		ib, err := buildIB(out.batch.Room(), f, payload, mem, 1)
		if err == roce.ErrTooLong && len(out.batch.Packets) > 0 {
			d.flushOut() // full: the packet goes in the next batch
			continue
		}
		if err != nil {
			return true, err
		}
		frameLen := max(h+len(ib), roce.MinFrameSize)
		out.batch.Add(p.Src, p.Dst, ib, frameLen, 1)
		d.stats.port.FramesOut++
		d.stats.port.BytesOut += uint64(frameLen)
		return true, nil
	}
}

// transmitRun builds up to n full-PMTU MIDDLE packets of one message as one
// run (roce.BuildRun) into the batch for the HCA owning the path's
// destination, when the fabric carries packets without frames: one header,
// the payloads gathered end to end, as many packets as the batch has room
// for. It returns how many packets the run took; 0 when frames are needed
// (the caller sends the packets one at a time). A full receiver is
// transport.ErrPeerBusy, with nothing sent.
func (d *Device) transmitRun(p *transport.Path, f *roce.PacketFields, payload *transport.Payload, n int, mem mr.Space) (int, error) {
	if d.port == nil || d.direct == nil || n < 1 || payload.Len%n != 0 {
		return 0, nil
	}
	per := payload.Len / n
	one, err := roce.RunLen(f.BTH.Opcode, per, 1) // one packet's IB part
	if err != nil {
		return 0, err
	}
	h, err := roce.FrameHeaderLen(&roce.FrameFields{SrcIP: p.Src, DstIP: p.Dst})
	if err != nil {
		return 0, err
	}
	out := &d.out
	for {
		if ok, err := d.openOut(p); !ok {
			return 0, err
		}
		if k, ok, err := d.lendRun(p, f, payload, n, per, h+one, mem); ok || err != nil {
			return k, err
		}
		room := out.batch.Room()
		k := min(n, (len(room)-one)/per+1)
		if len(room) < one || k < 1 {
			if len(out.batch.Packets) == 0 {
				return 0, nil // no batch holds one packet: frames
			}
			d.flushOut() // full: the run goes in the next batch
			continue
		}
		run := *payload
		run.Len = k * per
		ib, err := buildIB(room, f, &run, mem, k)
		if err != nil {
			return 0, err
		}
		frameLen := k * max(h+one, roce.MinFrameSize)
		out.batch.Add(p.Src, p.Dst, ib, frameLen, k)
		d.stats.port.FramesOut += uint64(k)
		d.stats.port.BytesOut += uint64(frameLen)
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
func (d *Device) lendRun(p *transport.Path, f *roce.PacketFields, payload *transport.Payload, n, per, frameLen int, mem mr.Space) (int, bool, error) {
	b := d.out.batch
	if d.lend == nil || n < 2 {
		return 0, false, nil
	}
	k := min(n, maxLentRun/per)
	size := k * per
	hdr, err := roce.PacketLen(f.BTH.Opcode, 0) // the run without its payload
	if err != nil || len(b.Room()) < hdr || b.ExtentRoom() == 0 {
		return 0, false, nil
	}
	if b.Lender != nil && b.Epoch != d.lend.Epoch() {
		// Loans were revoked since this batch's first: gathered, not lent
		// under an epoch the receiver would refuse.
		return 0, false, nil
	}
	ext, room := d.extents[:0], b.ExtentRoom()
	err = mem.Extents(payload.Segs, payload.Off, uint64(size), func(gpa, m uint64) error {
		if err := d.mem.Access(gpa, m, false, func([]byte) {}); err != nil {
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
	d.extents = ext[:0]
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
		b.Lender, b.Epoch = d.lend, d.lend.Epoch()
	}
	b.AddLent(p.Src, p.Dst, ib, k*frameLen, k, size, ext)
	d.stats.port.FramesOut += uint64(k)
	d.stats.port.BytesOut += uint64(k * frameLen)
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
func (d *Device) flushOut() {
	b := d.out.batch
	d.out = directOut{}
	w := d.core.Worker()
	if w == nil {
		d.direct.Flush(b)
		return
	}
	b.Helped = true
	w.Helps(d.direct.Flush(b)) // every HCA port's taker is its device's engine (New)
}

// receiveDirect handles a batch of packets another HCA sent without frames
// (engine goroutine, d.mu held): each as receiveFrame handles a frame's,
// without the Ethernet, IP and UDP headers and the ICRC no frame carried.
//
// The RC QPs a batch reaches answer it once: their responses are held until
// the batch is done (rc.QP.HoldResponses), so a stream of small requests is
// acknowledged by one ACK per batch instead of one per packet.
func (d *Device) receiveDirect(b *fabric.Batch) {
	if d.portDown || d.dsr == nil || !d.active {
		return
	}
	d.batching = true
	defer d.releaseHeld()
	for i := range b.Packets {
		pkt := &b.Packets[i]
		run := max(pkt.Run, 1)
		d.stats.port.FramesIn += uint64(run)
		d.stats.port.BytesIn += uint64(pkt.FrameLen)
		if pkt.Extents == nil {
			d.receiveIB(pkt.IB, pkt.Src, pkt.Dst, nil, run, nil)
			continue
		}
		// A payload lent by the sender: read from its memory while the
		// loan is pinned; a revoked loan is a run lost on the wire.
		if b.Lender == nil || !b.Lender.Pin(b.Epoch) {
			d.stats.port.Revoked += uint64(run)
			continue
		}
		d.lent.Lend(b.Lender, pkt.Extents, pkt.PayloadLen)
		d.receiveIB(pkt.IB, pkt.Src, pkt.Dst, nil, run, &d.lent)
		d.lent.Forget()
		b.Lender.Unpin()
	}
}

// releaseHeld sends the responses the QPs a batch reached held back.
func (d *Device) releaseHeld() {
	d.batching = false
	for _, qp := range d.held {
		if d.res.qp.get(qp.Handle) == qp && qp.RC != nil {
			qp.RC.ReleaseResponses()
		}
	}
	clear(d.held)
	d.held = d.held[:0]
}

// receiveFrame handles one frame from the fabric (engine goroutine, d.mu
// held): it goes to the transport of the QP it names. Frames that do not
// decode, fail the ICRC or name no QP are dropped, as hardware does; so are
// RC packets from outside the QP's connection (counted).
func (d *Device) receiveFrame(frame []byte) {
	defer fabric.Release(frame)
	if d.dsr == nil || !d.active {
		return
	}
	d.stats.port.FramesIn++
	d.stats.port.BytesIn += uint64(len(frame))
	u, err := roce.Unframe(frame)
	if err != nil {
		d.stats.port.Malformed++
		d.log.Debug("dropped frame", "err", err)
		return
	}
	if err := u.VerifyICRC(); err != nil {
		d.stats.port.BadICRC++
		d.log.Debug("dropped frame: bad ICRC")
		return
	}
	d.receiveIB(u.IB, u.SrcIP, u.DstIP, u.IP, 1, nil)
}

// receiveIB handles the IB transport part of a received packet (BTH through
// ICRC) from src to dst; ipHeader is its frame's IP header (a UD receive
// buffer's GRH), nil for a packet that came without a frame. run is the
// number of packets it stands for: more than 1 for a run (roce.ParseRun),
// which only comes without a frame; lent, when not nil, is its payload
// lent by the sender (only for runs: roce.ParseRunLent).
func (d *Device) receiveIB(ib []byte, src, dst netip.Addr, ipHeader []byte, run int, lent *hca.LentPayload) {
	var pkt roce.Packet
	var err error
	if lent != nil {
		pkt, err = roce.ParseRunLent(ib, run, lent.Len())
	} else {
		pkt, err = roce.ParseRun(ib, run)
	}
	if err != nil {
		d.stats.port.Malformed++
		d.log.Debug("dropped packet", "err", err)
		return
	}
	if pkt.BTH.TVer() != 0 {
		d.stats.port.Malformed++
		return
	}
	qp := d.qpByQPN(pkt.BTH.DestQP())
	if qp == nil {
		d.stats.port.NoQP++
		return
	}
	if run > 1 && (d.tracer != nil || pkt.Opcode().Transport() != roce.TransportRC) {
		// Traced packet by packet, or not RC (malformed below): taken
		// apart, as the sender would have sent it.
		if lent != nil {
			if pkt.Payload = d.readLent(lent); pkt.Payload == nil {
				return
			}
		}
		var bth [roce.BTHSize]byte
		for i := range run {
			one := roce.RunPacket(&pkt, i, run, bth[:])
			d.receivePacket(qp, &one, src, dst, ipHeader, 1, nil)
		}
		return
	}
	d.receivePacket(qp, &pkt, src, dst, ipHeader, run, lent)
}

// readLent reads a lent payload into the device's scratch buffer; nil when
// it cannot be read (the run is lost).
func (d *Device) readLent(lent *hca.LentPayload) []byte {
	scratch := d.scratch()
	if n := lent.Len(); n > len(scratch) || lent.ReadAt(scratch[:n], 0) != nil {
		d.stats.port.Revoked++
		return nil
	}
	return scratch[:lent.Len():lent.Len()]
}

// scratch is the buffer a lent run is read into when it is taken apart,
// made on first use.
func (d *Device) scratch() []byte {
	if d.runScratch == nil {
		d.runScratch = make([]byte, maxLentRun)
	}
	return d.runScratch
}

// receivePacket hands a parsed packet (a run of run packets, its payload
// lent when lent is not nil) to its QP.
func (d *Device) receivePacket(qp *qp, pkt *roce.Packet, src, dst netip.Addr, ipHeader []byte, run int, lent *hca.LentPayload) {
	if d.tracer != nil {
		d.traceRx(qp, pkt, "")
	}
	switch pkt.Opcode().Transport() {
	case roce.TransportUD:
		if ipHeader == nil {
			d.stats.port.Malformed++ // UD is never sent without a frame
			return
		}
		if qp.UD != nil && !qp.UD.Receive(pkt, ipHeader) {
			d.res.qkeyViolations++
			d.stats.port.QKey++
			if d.tracer != nil {
				d.traceRx(qp, pkt, "qkey")
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
			from, size, scratch = lent, lent.Len(), d.scratch()
		}
		if d.batching && qp.RC != nil && !qp.RC.Holding() {
			qp.RC.HoldResponses()
			d.held = append(d.held, qp)
		}
		if qp.RC != nil && !qp.RC.ReceiveRunFrom(pkt, run, src, dst, from, scratch) {
			d.stats.port.Address += uint64(run)
			if d.tracer != nil {
				d.traceRx(qp, pkt, "address")
			}
		} else {
			qp.CountRx(pkt, run, size)
		}
	}
}

// Counters are the drop counts the driver can read (QUERY_PORT), which a
// reset clears; Stats().Port has every drop by reason, over the device's life.
type Counters struct {
	// QKeyViolations: UD datagrams with the wrong Q_Key (QUERY_PORT's
	// qkey_viol_cntr).
	QKeyViolations uint32
}

// Counters returns the drop counters (since the last reset).
func (d *Device) Counters() Counters {
	d.core.Lock()
	defer d.unlock()
	return Counters{QKeyViolations: d.res.qkeyViolations}
}
