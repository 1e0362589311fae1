package fabric

import "sync"

// FrameSize is the size of a frame buffer: a 4096-byte PMTU packet with
// every header (Ethernet, IPv6, UDP, BTH and extended headers, ICRC).
const FrameSize = 4096 + 256

// framePool holds the frame buffers every port sends from and every
// receiver gives back: the steady state of the data path allocates nothing.
var framePool = sync.Pool{New: func() any { return new([FrameSize]byte) }}

// NewFrame returns a frame buffer of FrameSize bytes (its contents are not
// zeroed). A sender builds a frame in it and hands the frame (a prefix of
// the buffer) to Port.Send; from then on the fabric owns it.
func NewFrame() []byte { return framePool.Get().(*[FrameSize]byte)[:] }

// Release gives a frame back to the pool: the receiver calls it when done
// with a delivered frame, a link when it drops one. The frame must not be
// used afterwards. A slice that did not come from NewFrame (too small) is
// left to the garbage collector.
func Release(frame []byte) {
	if cap(frame) >= FrameSize {
		framePool.Put((*[FrameSize]byte)(frame[:FrameSize]))
	}
}

// Clone copies frame into a fresh buffer from the pool: a link that
// duplicates a frame sends the copy, since each copy is released by its own
// receiver. A frame longer than FrameSize is cut at FrameSize.
func Clone(frame []byte) []byte {
	dup := NewFrame()
	return dup[:copy(dup, frame)]
}
