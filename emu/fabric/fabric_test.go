package fabric

import (
	"bytes"
	"net/netip"
	"sync/atomic"
	"testing"
)

// frame4 is a minimal Ethernet/IPv4 frame to dst.
func frame4(dst string) []byte {
	f := make([]byte, 14+20)
	f[12], f[13] = 0x08, 0x00
	a := netip.MustParseAddr(dst).As4()
	copy(f[14+16:], a[:])
	return f
}

func TestSwitchRoutesByDestinationIP(t *testing.T) {
	var got [2]atomic.Int32
	full := atomic.Bool{}
	sw := NewSwitch()
	a := sw.Attach("a", [6]byte{1}, func([]byte) bool { got[0].Add(1); return true })
	b := sw.Attach("b", [6]byte{2}, func([]byte) bool { got[1].Add(1); return !full.Load() })
	a.SetAddrs([]netip.Addr{netip.MustParseAddr("::ffff:10.0.0.1")}) // IPv4-mapped GID
	b.SetAddrs([]netip.Addr{netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fe80::2")})
	if !a.Send(frame4("10.0.0.2")) || got[1].Load() != 1 {
		t.Fatal("a -> b not delivered")
	}
	a.Send(frame4("10.0.0.1")) // loopback
	if got[0].Load() != 1 {
		t.Fatal("loopback not delivered")
	}
	a.Send(frame4("10.0.0.9")) // nobody: dropped, not backpressure
	if sw.Dropped.Load() != 1 {
		t.Fatalf("dropped %d", sw.Dropped.Load())
	}
	full.Store(true)
	if a.Send(frame4("10.0.0.2")) {
		t.Fatal("full receiver: no backpressure")
	}
	// An address another port owns stays with it.
	a.SetAddrs([]netip.Addr{netip.MustParseAddr("10.0.0.2")})
	if o, _ := sw.Owner(netip.MustParseAddr("10.0.0.2")); o != "b" {
		t.Fatalf("10.0.0.2 owned by %q", o)
	}
	b.Detach()
	full.Store(false)
	before := got[1].Load()
	a.Send(frame4("10.0.0.2"))
	if got[1].Load() != before {
		t.Fatal("delivered to a detached port")
	}
	if _, ok := DstIP([]byte{1, 2, 3}); ok {
		t.Fatal("DstIP of a runt frame")
	}
}

func TestDecoratorsWrapInOrder(t *testing.T) {
	var order []string
	mk := func(name string) Decorator {
		return func(next Link) Link {
			return LinkFunc(func(from *Port, f []byte) bool {
				order = append(order, name)
				return next.Send(from, f)
			})
		}
	}
	sw := NewSwitch(mk("outer"), mk("inner"))
	p := sw.Attach("p", [6]byte{}, func([]byte) bool { order = append(order, "rx"); return true })
	p.SetAddrs([]netip.Addr{netip.MustParseAddr("10.0.0.1")})
	p.Send(frame4("10.0.0.1"))
	if len(order) != 3 || order[0] != "outer" || order[1] != "inner" || order[2] != "rx" {
		t.Fatalf("order %v", order)
	}
}

func TestFramePool(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want int // length of the clone
	}{
		{"empty", nil, 0},
		{"small", []byte{1, 2, 3}, 3},
		{"full", make([]byte, FrameSize), FrameSize},
		{"oversized is cut", make([]byte, FrameSize+10), FrameSize},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dup := Clone(tt.in)
			if len(dup) != tt.want || cap(dup) != FrameSize || !bytes.Equal(dup, tt.in[:tt.want]) {
				t.Fatalf("clone: len %d cap %d", len(dup), cap(dup))
			}
			if len(tt.in) > 0 {
				dup[0]++
				if dup[0] == tt.in[0] {
					t.Fatal("clone shares the original's bytes")
				}
			}
			Release(dup)
			Release(tt.in) // not from the pool (too small) or from it: both fine
		})
	}
	if f := NewFrame(); len(f) != FrameSize {
		t.Fatalf("NewFrame: %d bytes", len(f))
	}
}
