// Package capture records what crosses the fabric: a link decorator that
// writes every frame to a pcap file (Ethernet link type: Wireshark and tshark
// decode RoCEv2 with no options), the same for another network's links
// (Wrap: emu/ib/subnet.Capture records an InfiniBand subnet in link type
// 252, exported-PDU "infiniband"), and the pcap writer itself.
package capture

import (
	"github.com/hcaemu/hcaemu/emu/fabric"
)

// To is a decorator that writes to w every frame the link it wraps takes:
// delivered, or lost on the way (for nobody), as a wire would have carried
// it. An offer a paused receiver refuses did not cross the wire (the sender
// offers the frame again), so a frame is recorded once, when it is taken;
// a frame its sender gave up on at the pause limit is recorded once, when
// given up (fabric.LossNoter). Records keep the order and the time of the
// offers they record, even though an offer's outcome is known only after
// the link it wraps returns. A write error stops the capture, not the
// traffic.
//
// Decorators outside it (fault injection) act first: the capture records
// what they let through, a frame they drop never, one they duplicate or
// delay as the copies or the late frame are taken.
func To(w *PcapWriter) fabric.Decorator {
	return func(next fabric.Link) fabric.Link { return &link{w: w, next: next} }
}

// link is To's decorator around next.
type link struct {
	w    *PcapWriter
	next fabric.Link
}

func (l *link) Send(from *fabric.Port, frame []byte) bool {
	rec := l.w.stage(frame) // (the frame is next's once passed on)
	ok := l.next.Send(from, frame)
	l.w.settle(rec, ok)
	return ok
}

// Lost records a frame its sender gave up on.
func (l *link) Lost(from *fabric.Port, frame []byte) {
	l.w.settle(l.w.stage(frame), true)
}

// Sender is the link of any network whose ports are P: emu/fabric's
// Link for the Ethernet segment (To), emu/ib/subnet's Link for an
// InfiniBand subnet.
type Sender[P any] interface {
	Send(from P, pkt []byte) bool
}

// Wrap is To for a network other than the Ethernet segment: a link that
// writes to w every packet next takes, as To does, and passes it on.
// emu/ib/subnet's Capture decorator is Wrap around its links, with w made
// with PcapOptions{Dissector: "infiniband"}.
func Wrap[P any](w *PcapWriter, next Sender[P]) Sender[P] { return &wrapped[P]{w: w, next: next} }

// wrapped is Wrap's link around next.
type wrapped[P any] struct {
	w    *PcapWriter
	next Sender[P]
}

func (l *wrapped[P]) Send(from P, pkt []byte) bool {
	rec := l.w.stage(pkt) // (the packet is next's once passed on)
	ok := l.next.Send(from, pkt)
	l.w.settle(rec, ok)
	return ok
}
