package fabric

import (
	"net/netip"
	"os"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// inNetns runs f on a thread in a new network namespace of its own, which
// goes away with the thread (never unlocked, it exits with the goroutine).
func inNetns(t *testing.T, f func() error) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces and TAP devices")
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		errc <- f()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// tagged keeps the frames of one test's EtherType (0x88b5, local
// experimental) and the RoCEv2 frames, not the kernel's own (IPv6
// neighbour discovery on the new interface).
type tagged struct {
	mu  sync.Mutex
	got []string
	c   chan struct{}
}

func newTagged() *tagged { return &tagged{c: make(chan struct{}, 64)} }

func (r *tagged) rx(f []byte) bool {
	defer Release(f)
	if !IsRoCE(f) && (len(f) < 14 || f[12] != 0x88 || f[13] != 0xb5) {
		return true
	}
	r.mu.Lock()
	r.got = append(r.got, describe(f)+" "+string(f[len(f)-4:]))
	r.mu.Unlock()
	r.c <- struct{}{}
	return true
}

// wait waits for n frames and returns them.
func (r *tagged) wait(t *testing.T, n int) []string {
	t.Helper()
	for range n {
		select {
		case <-r.c:
		case <-time.After(30 * time.Second): // a bound, not a timing assumption
			t.Fatalf("waited for %d frames, got %q", n, r.got)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	got := r.got
	r.got = nil
	return got
}

// TestUplink: two segments (two hosts' hcaemu) joined by a cable made of a
// TAP device and an AF_PACKET socket on it (tap:hcx0 on one side, dev:hcx0
// on the other). Broadcasts and unicasts cross it, the MACs behind each
// uplink are learnt, RoCEv2 between the HCAs crosses it, and what comes in
// through an uplink may not pretend to be a local station: not its MAC,
// not RoCEv2 from its HCA's address.
func TestUplink(t *testing.T) {
	swA, swB := NewSwitch(), NewSwitch()
	nicA, nicB, hcaA, hcaB := newTagged(), newTagged(), newTagged(), newTagged()
	macA, macB := stationMAC(1), stationMAC(2)
	pa, _ := swA.AttachNIC("a", macA, nicA.rx)
	pb, _ := swB.AttachNIC("b", macB, nicB.rx)
	ha := swA.Attach("hcaA", macA, hcaA.rx)
	hb := swB.Attach("hcaB", macB, hcaB.rx)
	ha.SetAddrs([]netip.Addr{netip.MustParseAddr("10.0.0.1")})
	hb.SetAddrs([]netip.Addr{netip.MustParseAddr("10.0.0.2")})
	var upA, upB *Uplink
	inNetns(t, func() error {
		var err error
		if upA, err = swA.OpenUplink("tap:hcx0"); err != nil {
			return err
		}
		upB, err = swB.OpenUplink("dev:hcx0")
		return err
	})
	defer upA.Close()
	defer upB.Close()
	frame := func(dst, src [6]byte, tag string) []byte {
		return Clone(ether(dst, src, 0x88b5, []byte(tag)))
	}

	pa.Send(frame(bcast, macA, "bc-1"))
	if got := nicB.wait(t, 1); !slices.Equal(got, []string{"type 0x88b5 bc-1"}) {
		t.Fatalf("b got %q", got)
	}
	pb.Send(frame(macA, macB, "uc-2"))
	if got := nicA.wait(t, 1); !slices.Equal(got, []string{"type 0x88b5 uc-2"}) {
		t.Fatalf("a got %q", got)
	}
	// RoCEv2 from HCA a to HCA b (its station's MAC learnt by now).
	roce := ipFrame(macB, macA, "10.0.0.1", "10.0.0.2", 4791)
	ha.Send(Clone(append(roce, "rc-3"...)))
	if got := hcaB.wait(t, 1); !slices.Equal(got, []string{"roce>10.0.0.2 rc-3"}) {
		t.Fatalf("HCA b got %q", got)
	}
	// From beyond A's uplink (B's side) pretending to be A's station: its
	// MAC, or RoCEv2 from its HCA's address: dropped at A's uplink.
	before := swA.Spoofed.Load()
	upB.receive(Clone(ether(bcast, macA, 0x88b5, []byte("sp-4"))))
	upB.receive(Clone(append(ipFrame(macA, macB, "10.0.0.1", "10.0.0.1", 4791), "sp-5"...)))
	pb.Send(frame(macA, macB, "ok-6")) // in order after them
	if got := nicA.wait(t, 1); !slices.Equal(got, []string{"type 0x88b5 ok-6"}) {
		t.Fatalf("a got %q", got)
	}
	if got := hcaA.wait(t, 0); len(got) != 0 {
		t.Fatalf("HCA a got %q", got)
	}
	if n := swA.Spoofed.Load() - before; n != 2 {
		t.Fatalf("A's switch dropped %d spoofed frames, want 2", n)
	}
	if st := upA.Stats(); st.In < 3 || st.Out < 2 {
		t.Fatalf("uplink A stats %+v", st)
	}
}

func TestParseUplink(t *testing.T) {
	for _, tc := range []struct {
		in         string
		kind, name string
	}{
		{"tap:hcaemu0", "tap", "hcaemu0"},
		{"dev:eth0", "dev", "eth0"},
		{"tap:", "", ""},
		{"eth0", "", ""},
		{"udp:1.2.3.4", "", ""},
		{"dev:a/b", "", ""},
		{"dev:waytoolonginterfacename", "", ""},
	} {
		kind, name, err := ParseUplink(tc.in)
		if kind != tc.kind || name != tc.name || (err == nil) != (tc.kind != "") {
			t.Errorf("ParseUplink(%q) = %q, %q, %v", tc.in, kind, name, err)
		}
	}
}
