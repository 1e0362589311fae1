package fabric

import (
	"bytes"
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
)

// frame4 is a minimal Ethernet/IPv4 frame from src to dst.
func frame4(src, dst string) []byte {
	f := make([]byte, 14+20)
	f[12], f[13] = 0x08, 0x00
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(f[14+12:], s[:])
	copy(f[14+16:], d[:])
	return f
}

// frame6 is a minimal Ethernet/IPv6 frame from src to dst.
func frame6(src, dst string) []byte {
	f := make([]byte, 14+40)
	f[12], f[13] = 0x86, 0xDD
	s, d := netip.MustParseAddr(src).As16(), netip.MustParseAddr(dst).As16()
	copy(f[14+8:], s[:])
	copy(f[14+24:], d[:])
	return f
}

func TestSwitchRoutesByDestinationIP(t *testing.T) {
	var got [2]atomic.Int32
	full := atomic.Bool{}
	sw := NewSwitch()
	a := sw.Attach("a", [6]byte{1}, func([]byte) bool { got[0].Add(1); return true })
	b := sw.Attach("b", [6]byte{2}, func([]byte) bool { got[1].Add(1); return !full.Load() })
	if err := a.SetAddrs([]netip.Addr{netip.MustParseAddr("::ffff:10.0.0.1")}); err != nil { // IPv4-mapped GID
		t.Fatal(err)
	}
	if err := b.SetAddrs([]netip.Addr{netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fe80::2")}); err != nil {
		t.Fatal(err)
	}
	if !a.Send(frame4("10.0.0.1", "10.0.0.2")) || got[1].Load() != 1 {
		t.Fatal("a -> b not delivered")
	}
	a.Send(frame4("10.0.0.1", "10.0.0.1")) // loopback
	if got[0].Load() != 1 {
		t.Fatal("loopback not delivered")
	}
	a.Send(frame4("10.0.0.1", "10.0.0.9")) // nobody: dropped, not backpressure
	if sw.Dropped.Load() != 1 {
		t.Fatalf("dropped %d", sw.Dropped.Load())
	}
	full.Store(true)
	if a.Send(frame4("10.0.0.1", "10.0.0.2")) {
		t.Fatal("full receiver: no backpressure")
	}
	// An address another port owns stays with it: SetAddrs refuses it and
	// a keeps what it had.
	var inUse *AddrInUseError
	if err := a.SetAddrs([]netip.Addr{netip.MustParseAddr("10.0.0.2")}); !errors.As(err, &inUse) || inUse.Owner != "b" {
		t.Fatalf("SetAddrs of b's address: %v", err)
	}
	if o, _ := sw.Owner(netip.MustParseAddr("10.0.0.2")); o != "b" {
		t.Fatalf("10.0.0.2 owned by %q", o)
	}
	if o, _ := sw.Owner(netip.MustParseAddr("10.0.0.1")); o != "a" {
		t.Fatalf("after a refused SetAddrs, 10.0.0.1 owned by %q", o)
	}
	b.Detach()
	full.Store(false)
	before := got[1].Load()
	a.Send(frame4("10.0.0.1", "10.0.0.2"))
	if got[1].Load() != before {
		t.Fatal("delivered to a detached port")
	}
	if _, ok := DstIP([]byte{1, 2, 3}); ok {
		t.Fatal("DstIP of a runt frame")
	}
	if _, ok := SrcIP([]byte{1, 2, 3}); ok {
		t.Fatal("SrcIP of a runt frame")
	}
}

// TestSwitchSourceOwnership: a port's frame enters the fabric only from an
// address the port owns (IPv4, IPv6, IPv4-mapped owned or sent); anything
// else, frames without IP included, is dropped and counted as Spoofed.
func TestSwitchSourceOwnership(t *testing.T) {
	tests := []struct {
		name      string
		owned     []string // the sender's addresses
		frame     []byte
		delivered bool
	}{
		{"IPv4 owned", []string{"10.0.0.1"}, frame4("10.0.0.1", "10.0.0.2"), true},
		{"IPv4 owned as a mapped GID", []string{"::ffff:10.0.0.1"}, frame4("10.0.0.1", "10.0.0.2"), true},
		{"IPv4 of the receiver", []string{"10.0.0.1"}, frame4("10.0.0.2", "10.0.0.2"), false},
		{"IPv4 of a third port", []string{"10.0.0.1"}, frame4("10.0.0.3", "10.0.0.2"), false},
		{"IPv4 of nobody", []string{"10.0.0.1"}, frame4("10.9.9.9", "10.0.0.2"), false},
		{"IPv4 unspecified", []string{"10.0.0.1"}, frame4("0.0.0.0", "10.0.0.2"), false},
		{"no addresses", nil, frame4("10.0.0.1", "10.0.0.2"), false},
		{"IPv6 link-local owned", []string{"fe80::1"}, frame6("fe80::1", "fe80::2"), true},
		{"IPv6 global owned", []string{"10.0.0.1", "2001:db8::1"}, frame6("2001:db8::1", "fe80::2"), true},
		{"IPv6 of the receiver", []string{"fe80::1"}, frame6("fe80::2", "fe80::2"), false},
		{"IPv6 of a third port", []string{"fe80::1"}, frame6("fe80::3", "fe80::2"), false},
		{"IPv6 mapped source of an owned IPv4", []string{"10.0.0.1"}, frame6("::ffff:10.0.0.1", "fe80::2"), true},
		{"IPv6 mapped source of the receiver", []string{"10.0.0.1"}, frame6("::ffff:10.0.0.2", "fe80::2"), false},
		{"IPv4 source, owner has only IPv6", []string{"fe80::1"}, frame4("10.0.0.1", "10.0.0.2"), false},
		{"not IP", []string{"10.0.0.1"}, func() []byte { f := frame4("10.0.0.1", "10.0.0.2"); f[12] = 0x88; return f }(), false},
		{"runt IPv4", []string{"10.0.0.1"}, frame4("10.0.0.1", "10.0.0.2")[:30], false},
		{"runt Ethernet", []string{"10.0.0.1"}, []byte{1, 2, 3}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got atomic.Int32
			sw := NewSwitch()
			a := sw.Attach("a", [6]byte{1}, func([]byte) bool { return true })
			b := sw.Attach("b", [6]byte{2}, func([]byte) bool { got.Add(1); return true })
			c := sw.Attach("c", [6]byte{3}, func([]byte) bool { return true })
			var owned []netip.Addr
			for _, s := range tt.owned {
				owned = append(owned, netip.MustParseAddr(s))
			}
			for _, set := range []struct {
				port  *Port
				addrs []netip.Addr
			}{
				{a, owned},
				{b, []netip.Addr{netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fe80::2")}},
				{c, []netip.Addr{netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("fe80::3")}},
			} {
				if err := set.port.SetAddrs(set.addrs); err != nil {
					t.Fatal(err)
				}
			}
			if !a.Send(tt.frame) {
				t.Fatal("Send reported backpressure")
			}
			want, spoofed := int32(0), uint64(1)
			if tt.delivered {
				want, spoofed = 1, 0
			}
			if got.Load() != want || sw.Spoofed.Load() != spoofed {
				t.Fatalf("delivered %d, spoofed %d; want %d, %d", got.Load(), sw.Spoofed.Load(), want, spoofed)
			}
		})
	}
}

// TestSwitchAddressClaims: an address belongs to one port at a time; a
// refused SetAddrs changes nothing; a detached port's addresses are free.
func TestSwitchAddressClaims(t *testing.T) {
	addrs := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	type step struct {
		port  string // "a", "b", "c"; "-a" detaches a
		addrs []netip.Addr
		inUse string // the address refused, "" when granted
	}
	tests := []struct {
		name  string
		steps []step
		owner map[string]string // address -> port at the end ("" nobody)
	}{
		{"disjoint", []step{{"a", addrs("10.0.0.1", "fe80::1"), ""}, {"b", addrs("10.0.0.2", "fe80::2"), ""}},
			map[string]string{"10.0.0.1": "a", "fe80::1": "a", "10.0.0.2": "b", "fe80::2": "b"}},
		{"IPv4 clash", []step{{"a", addrs("10.0.0.1"), ""}, {"b", addrs("10.0.0.2", "10.0.0.1"), "10.0.0.1"}},
			map[string]string{"10.0.0.1": "a", "10.0.0.2": ""}},
		{"mapped clash with plain", []step{{"a", addrs("10.0.0.1"), ""}, {"b", addrs("::ffff:10.0.0.1"), "10.0.0.1"}},
			map[string]string{"10.0.0.1": "a"}},
		{"link-local clash (same MAC)", []step{{"a", addrs("fe80::250:56ff:fe00:1"), ""}, {"b", addrs("fe80::250:56ff:fe00:1"), "fe80::250:56ff:fe00:1"}},
			map[string]string{"fe80::250:56ff:fe00:1": "a"}},
		{"refusal keeps the old set", []step{{"b", addrs("10.0.0.2"), ""}, {"a", addrs("10.0.0.1"), ""}, {"b", addrs("10.0.0.2", "10.0.0.1"), "10.0.0.1"}},
			map[string]string{"10.0.0.1": "a", "10.0.0.2": "b"}},
		{"same port twice, duplicates", []step{{"a", addrs("10.0.0.1", "::ffff:10.0.0.1", "10.0.0.1"), ""}, {"a", addrs("10.0.0.1", "fe80::1"), ""}},
			map[string]string{"10.0.0.1": "a", "fe80::1": "a"}},
		{"released by a smaller set", []step{{"a", addrs("10.0.0.1", "fe80::1"), ""}, {"a", addrs("fe80::1"), ""}, {"b", addrs("10.0.0.1"), ""}},
			map[string]string{"10.0.0.1": "b", "fe80::1": "a"}},
		{"released by detach", []step{{"a", addrs("10.0.0.1"), ""}, {"-a", nil, ""}, {"b", addrs("10.0.0.1"), ""}},
			map[string]string{"10.0.0.1": "b"}},
		{"detached port owns nothing", []step{{"-a", nil, ""}, {"a", addrs("10.0.0.1"), ""}},
			map[string]string{"10.0.0.1": ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sw := NewSwitch()
			ports := map[string]*Port{}
			for i, name := range []string{"a", "b", "c"} {
				ports[name] = sw.Attach(name, [6]byte{byte(i)}, func([]byte) bool { return true })
			}
			for i, st := range tt.steps {
				if st.port[0] == '-' {
					ports[st.port[1:]].Detach()
					continue
				}
				err := ports[st.port].SetAddrs(st.addrs)
				var inUse *AddrInUseError
				switch {
				case st.inUse == "" && err != nil:
					t.Fatalf("step %d: %v", i, err)
				case st.inUse != "" && (!errors.As(err, &inUse) || inUse.Addr != netip.MustParseAddr(st.inUse)):
					t.Fatalf("step %d: err %v, want %s in use", i, err, st.inUse)
				}
			}
			for addr, want := range tt.owner {
				if got, _ := sw.Owner(netip.MustParseAddr(addr)); got != want {
					t.Errorf("%s owned by %q, want %q", addr, got, want)
				}
			}
		})
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
	if err := p.SetAddrs([]netip.Addr{netip.MustParseAddr("10.0.0.1")}); err != nil {
		t.Fatal(err)
	}
	p.Send(frame4("10.0.0.1", "10.0.0.1"))
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
