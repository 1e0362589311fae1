package emu

import (
	"errors"
	"net/netip"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/uverbs"
)

// Port is the HCA's attachment to the fabric (a *fabric.Port).
type Port interface {
	// Send puts a RoCEv2 Ethernet frame on the wire; the port owns it after.
	// It returns false when the receiver's queue was full (backpressure).
	Send(frame []byte) bool
	// SetAddrs announces the IP addresses (GIDs) this HCA answers to.
	SetAddrs(addrs []netip.Addr)
	// Detach leaves the fabric.
	Detach()
}

// Attach connects a device to a fabric: rx is called with each frame for
// the device (it never blocks; false: queue full, frame dropped).
type Attach func(rx func(frame []byte) bool) Port

// errPeerBusy reports a frame the receiver's full queue refused: send it again
// a little later.
var errPeerBusy = errors.New("receiver busy")

// mtuBytes maps the IB MTU enum to bytes.
func mtuBytes(enum uint32) int {
	if enum < 1 || enum > 5 {
		return 1024
	}
	return 128 << enum
}

// path is where a QP's packets go.
type path struct {
	src, dst  netip.Addr
	dmac      [6]byte
	hopLimit  uint8
	tclass    uint8
	flowLabel uint32
	srcPort   uint16
}

// gidAddr is the IP address a GID stands for.
func gidAddr(g [16]byte) netip.Addr { return netip.AddrFrom16(g).Unmap() }

// pathFor resolves a source GID index and a destination GID into a path.
func (d *Device) pathFor(sgid uint8, dgid [16]byte) (path, bool) {
	if int(sgid) >= len(d.res.gids) || !d.res.gids[sgid].Valid {
		return path{}, false
	}
	p := path{src: gidAddr(d.res.gids[sgid].GID), dst: gidAddr(dgid)}
	if p.src.Is4() != p.dst.Is4() {
		return path{}, false
	}
	return p, true
}

// transmit builds one packet into a fresh frame and sends it. gather, if
// not nil, fills the payload in place (n bytes) before the headers are
// written: the only copy of the data on the sending side.
func (d *Device) transmit(p *path, f *roce.PacketFields, n int, gather func(dst []byte) error) error {
	if d.port == nil {
		return nil // no fabric: the wire is empty
	}
	ff := roce.FrameFields{Dst: p.dmac, Src: d.wireMAC, SrcIP: p.src, DstIP: p.dst,
		TrafficClass: p.tclass, HopLimit: p.hopLimit, FlowLabel: p.flowLabel, SrcPort: p.srcPort}
	if ff.HopLimit == 0 {
		ff.HopLimit = roce.DefaultHopLimit
	}
	buf := fabric.NewFrame()
	h, err := roce.FrameHeaderLen(&ff)
	if err != nil {
		fabric.Release(buf)
		return err
	}
	total, err := roce.PacketLen(f.BTH.Opcode, n)
	if err != nil {
		fabric.Release(buf)
		return err
	}
	hlen := total - n - roce.PadCount(n) - roce.ICRCSize
	if h+total > len(buf) {
		fabric.Release(buf)
		return roce.ErrTooLong
	}
	if gather != nil {
		payload := buf[h+hlen : h+hlen+n]
		if err := gather(payload); err != nil {
			fabric.Release(buf)
			return err
		}
		f.Payload = payload
	}
	ib, err := roce.Build(buf[h:], f)
	if err != nil {
		fabric.Release(buf)
		return err
	}
	frame, err := roce.Frame(buf, &ff, ib)
	if err != nil {
		fabric.Release(buf)
		return err
	}
	if !d.port.Send(frame) {
		return errPeerBusy
	}
	return nil
}

// seg is one validated piece of local memory an SGE names.
type seg struct {
	m    *mr
	addr uint64
	n    uint64
}

// segsFor validates a WQE's SGE list against the QP's PD: every lkey must
// name a valid MR of that PD (the kernel's DMA MR only for kernel QPs), with
// LOCAL_WRITE when the device writes into it, and each [addr, addr+len) must
// lie inside the MR; the total must fit 31 bits. It returns the segments,
// their total length and a completion status.
func (d *Device) segsFor(x *qp, sges []uverbs.SGE, write bool) ([]seg, uint32, uint32) {
	segs := make([]seg, 0, len(sges))
	var total uint64
	for _, s := range sges {
		m := d.lookupKey(s.LKey, false)
		if m == nil || m.pd != x.pd {
			return nil, 0, uverbs.WCLocProtErr
		}
		if write && m.access&accLocalWrite == 0 {
			return nil, 0, uverbs.WCLocProtErr
		}
		if !m.inRange(s.Addr, uint64(s.Length)) {
			return nil, 0, uverbs.WCLocProtErr
		}
		total += uint64(s.Length)
		if total > 1<<31 {
			return nil, 0, uverbs.WCLocLenErr
		}
		if s.Length > 0 {
			segs = append(segs, seg{m: m, addr: s.Addr, n: uint64(s.Length)})
		}
	}
	return segs, uint32(total), uverbs.WCSuccess
}

// inRange reports whether [va, va+n) lies inside the MR.
func (m *mr) inRange(va, n uint64) bool {
	if m.dmaMR {
		_, ok := dma.End(va, n)
		return ok
	}
	end, ok := dma.End(va, n)
	mend, _ := dma.End(m.start, m.length)
	return ok && va >= m.start && end <= mend
}

// span visits the guest memory behind [va, va+n) of the MR, split into
// pieces that are contiguous in guest-physical memory.
func (d *Device) span(m *mr, va, n uint64, fn func(gpa, n, done uint64) error) error {
	if m.dmaMR {
		return fn(va, n, 0)
	}
	return m.pages.Range(va-m.start&^(dma.PageSize-1), n, fn)
}

// copySegs copies between buf and the segments' memory starting at byte off
// of the segment list (toGuest: buf -> guest).
func (d *Device) copySegs(segs []seg, off uint64, buf []byte, toGuest bool) error {
	left := uint64(len(buf))
	var pos uint64
	for _, s := range segs {
		if left == 0 {
			break
		}
		if off >= s.n {
			off -= s.n
			continue
		}
		n := min(s.n-off, left)
		b := buf[pos : pos+n]
		err := d.span(s.m, s.addr+off, n, func(gpa, k, done uint64) error {
			if toGuest {
				return d.mem.WriteAt(b[done:done+k], gpa)
			}
			return d.mem.ReadAt(b[done:done+k], gpa)
		})
		if err != nil {
			return err
		}
		pos += n
		left -= n
		off = 0
	}
	if left != 0 {
		return dma.Fault(0, left, "SGE list shorter than the data")
	}
	return nil
}
