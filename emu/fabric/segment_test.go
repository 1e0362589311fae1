package fabric

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// ether builds an Ethernet frame; ipFrame one carrying IPv4 or IPv6 and
// UDP to dport (0: TCP).
func ether(dst, src [6]byte, etherType uint16, payload []byte) []byte {
	f := append(append(append([]byte{}, dst[:]...), src[:]...), byte(etherType>>8), byte(etherType))
	return append(f, payload...)
}

func ipFrame(dst, src [6]byte, srcIP, dstIP string, dport uint16) []byte {
	s, d := netip.MustParseAddr(srcIP), netip.MustParseAddr(dstIP)
	proto := byte(17)
	if dport == 0 {
		proto = 6
	}
	udp := make([]byte, 8)
	binary.BigEndian.PutUint16(udp[2:], dport)
	if s.Is4() {
		h := make([]byte, 20)
		h[0], h[9] = 0x45, proto
		s4, d4 := s.As4(), d.As4()
		copy(h[12:], s4[:])
		copy(h[16:], d4[:])
		return ether(dst, src, 0x0800, append(h, udp...))
	}
	h := make([]byte, 40)
	h[0], h[6] = 0x60, proto
	s16, d16 := s.As16(), d.As16()
	copy(h[8:], s16[:])
	copy(h[24:], d16[:])
	return ether(dst, src, 0x86DD, append(h, udp...))
}

var bcast = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// arpFor is an ARP reply body saying that ip is at mac.
func arpFor(ip string, mac [6]byte) []byte {
	a := []byte{0, 1, 8, 0, 6, 4, 0, 2}
	a = append(a, mac[:]...)
	a4 := netip.MustParseAddr(ip).As4()
	a = append(a, a4[:]...)
	return append(a, make([]byte, 10)...)
}

func stationMAC(i byte) [6]byte { return [6]byte{0x52, 0x54, 0, 0, 0, i} }

// recorder is a port's receiver that keeps what it got.
type recorder struct {
	mu  sync.Mutex
	got []string
}

func (r *recorder) rx(frame []byte) bool {
	r.mu.Lock()
	r.got = append(r.got, describe(frame))
	r.mu.Unlock()
	Release(frame)
	return true
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := r.got
	r.got = nil
	return got
}

// describe names a test frame by its type and destination.
func describe(f []byte) string {
	switch {
	case IsRoCE(f):
		d, _ := DstIP(f)
		return "roce>" + d.String()
	case binary.BigEndian.Uint16(f[12:]) == 0x0806:
		return "arp"
	default:
		d, ok := DstIP(f)
		if ok {
			return "ip>" + d.String()
		}
		return fmt.Sprintf("type %#x", f[12:14])
	}
}

// TestSegmentForwarding: one segment for NICs and HCAs. Broadcasts flood to
// every other NIC; frames go to a station by MAC (its NIC's, or learnt);
// inside a station RoCEv2 for the HCA's addresses goes to the HCA and
// everything else to the NIC; unknown unicast floods.
func TestSegmentForwarding(t *testing.T) {
	sw := NewSwitch()
	var nics, hcas [3]recorder
	var nicPorts, hcaPorts [3]*Port
	for i := range 3 {
		mac := stationMAC(byte(i))
		var err error
		if nicPorts[i], err = sw.AttachNIC(fmt.Sprintf("g%d", i), mac, nics[i].rx); err != nil {
			t.Fatal(err)
		}
		if i < 2 { // station 2 has a NIC only (e.g. soft-RoCE in its guest)
			hcaPorts[i] = sw.Attach(fmt.Sprintf("hca%d", i), mac, hcas[i].rx)
			if err := hcaPorts[i].SetAddrs([]netip.Addr{netip.MustParseAddr(fmt.Sprintf("10.0.0.%d", i+1)),
				netip.MustParseAddr(fmt.Sprintf("fe80::%d", i+1))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	learnt := [6]byte{0x02, 0, 0, 0, 0, 0x77} // a second MAC in guest 2 (a bridge, a VF)
	tests := []struct {
		name  string
		from  *Port
		frame []byte
		want  [6][]string // nics 0..2, then hcas 0..2
	}{
		{"ARP broadcast floods to the other NICs", nicPorts[0], ether(bcast, stationMAC(0), 0x0806, make([]byte, 28)),
			[6][]string{nil, {"arp"}, {"arp"}}},
		{"ARP for the station's own HCA address", nicPorts[0], ether(bcast, stationMAC(0), 0x0806, arpFor("10.0.0.1", stationMAC(0))),
			[6][]string{nil, {"arp"}, {"arp"}}},
		{"unicast to a station's MAC: its NIC", nicPorts[1], ether(stationMAC(0), stationMAC(1), 0x0806, make([]byte, 28)),
			[6][]string{{"arp"}}},
		{"TCP to the HCA's address goes to the NIC", nicPorts[0], ipFrame(stationMAC(1), stationMAC(0), "10.0.0.1", "10.0.0.2", 0),
			[6][]string{nil, {"ip>10.0.0.2"}}},
		{"UDP to another port goes to the NIC", nicPorts[0], ipFrame(stationMAC(1), stationMAC(0), "10.0.0.1", "10.0.0.2", 4792),
			[6][]string{nil, {"ip>10.0.0.2"}}},
		{"RoCE from an HCA to the peer's HCA", hcaPorts[0], ipFrame(stationMAC(1), stationMAC(0), "10.0.0.1", "10.0.0.2", 4791),
			[6][]string{4: {"roce>10.0.0.2"}}},
		{"RoCE over IPv6", hcaPorts[1], ipFrame(stationMAC(0), stationMAC(1), "fe80::2", "fe80::1", 4791),
			[6][]string{3: {"roce>fe80::1"}}},
		{"RoCE to the HCA from the guest's kernel", nicPorts[0], ipFrame(stationMAC(1), stationMAC(0), "10.0.0.1", "10.0.0.2", 4791),
			[6][]string{4: {"roce>10.0.0.2"}}},
		{"RoCE from an HCA to a station without one: its NIC", hcaPorts[0], ipFrame(stationMAC(2), stationMAC(0), "10.0.0.1", "10.0.0.3", 4791),
			[6][]string{2: {"roce>10.0.0.3"}}},
		{"RoCE from soft-RoCE to an HCA", nicPorts[2], ipFrame(stationMAC(0), stationMAC(2), "10.0.0.3", "10.0.0.1", 4791),
			[6][]string{3: {"roce>10.0.0.1"}}},
		{"RoCE loopback inside a station", hcaPorts[0], ipFrame(stationMAC(0), stationMAC(0), "10.0.0.1", "10.0.0.1", 4791),
			[6][]string{3: {"roce>10.0.0.1"}}},
		{"RoCE for an HCA's address to another station's MAC (a poisoned neighbour cache): still that HCA", hcaPorts[0], ipFrame(stationMAC(2), stationMAC(0), "10.0.0.1", "10.0.0.2", 4791),
			[6][]string{4: {"roce>10.0.0.2"}}},
		{"RoCE for an HCA's address to an unknown MAC: that HCA, no flood", hcaPorts[0], ipFrame([6]byte{0x02, 9, 9, 9, 9, 9}, stationMAC(0), "10.0.0.1", "10.0.0.2", 4791),
			[6][]string{4: {"roce>10.0.0.2"}}},
		{"unknown unicast RoCE for nobody's HCA floods to the NICs", hcaPorts[0], ipFrame([6]byte{0x02, 9, 9, 9, 9, 9}, stationMAC(0), "10.0.0.1", "10.0.0.9", 4791),
			[6][]string{nil, {"roce>10.0.0.9"}, {"roce>10.0.0.9"}}},
		{"a new source MAC is learnt (this frame floods)", nicPorts[2], ether(bcast, learnt, 0x0806, make([]byte, 28)),
			[6][]string{{"arp"}, {"arp"}}},
		{"then frames to it are switched to its station", nicPorts[0], ipFrame(learnt, stationMAC(0), "10.0.0.1", "10.0.0.9", 0),
			[6][]string{2: {"ip>10.0.0.9"}}},
		{"a NIC's frame to its own MAC goes nowhere", nicPorts[2], ether(stationMAC(2), stationMAC(2), 0x0806, make([]byte, 28)),
			[6][]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !tt.from.Send(tt.frame) {
				t.Fatal("backpressure from receivers that take everything")
			}
			for i := range 6 {
				r := &nics[i%3]
				if i >= 3 {
					r = &hcas[i-3]
				}
				if got := r.take(); !slices.Equal(got, tt.want[i]) {
					t.Errorf("port %d got %q, want %q", i, got, tt.want[i])
				}
			}
		})
	}
	if sw.Spoofed.Load() != 0 {
		t.Fatalf("spoofed %d", sw.Spoofed.Load())
	}
}

// TestSegmentSpoofing: no station sends as another. A guest's kernel cannot
// send RoCEv2 from another station's HCA address nor from another NIC's
// MAC (which would also steal its frames); an HCA's frames come from its
// own addresses only. All of it is dropped at the port, counted, and moves
// no MAC.
func TestSegmentSpoofing(t *testing.T) {
	tests := []struct {
		name  string
		from  string // "nic1", "hca1"
		frame []byte
	}{
		{"NIC sends RoCE from the other HCA's IPv4", "nic1", ipFrame(stationMAC(0), stationMAC(1), "10.0.0.1", "10.0.0.1", 4791)},
		{"NIC sends RoCE from the other HCA's IPv6", "nic1", ipFrame(stationMAC(0), stationMAC(1), "fe80::1", "fe80::1", 4791)},
		{"NIC sends from the other NIC's MAC", "nic1", ether(bcast, stationMAC(0), 0x0806, make([]byte, 28))},
		{"NIC sends ARP speaking for the other HCA's address", "nic1", ether(bcast, stationMAC(1), 0x0806, arpFor("10.0.0.1", stationMAC(1)))},
		{"HCA sends from the other NIC's MAC", "hca1", ipFrame(stationMAC(0), stationMAC(0), "10.0.0.2", "10.0.0.1", 4791)},
		{"HCA sends from the other HCA's address", "hca1", ipFrame(stationMAC(0), stationMAC(1), "10.0.0.1", "10.0.0.1", 4791)},
		{"HCA sends ARP", "hca1", ether(bcast, stationMAC(1), 0x0806, make([]byte, 28))},
		{"runt", "nic1", []byte{1, 2, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sw := NewSwitch()
			var nic0, hca0, nic1 recorder
			sw.AttachNIC("g0", stationMAC(0), nic0.rx)
			h0 := sw.Attach("hca0", stationMAC(0), hca0.rx)
			n1, _ := sw.AttachNIC("g1", stationMAC(1), nic1.rx)
			h1 := sw.Attach("hca1", stationMAC(1), func(f []byte) bool { Release(f); return true })
			h0.SetAddrs([]netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fe80::1")})
			h1.SetAddrs([]netip.Addr{netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fe80::2")})
			from := map[string]*Port{"nic1": n1, "hca1": h1}[tt.from]
			from.Send(tt.frame)
			if got := append(nic0.take(), hca0.take()...); len(got) != 0 || sw.Spoofed.Load() != 1 {
				t.Fatalf("delivered %q, spoofed %d", got, sw.Spoofed.Load())
			}
			// Station 0 still gets its own frames.
			n1.Send(ether(stationMAC(0), stationMAC(1), 0x0806, make([]byte, 28)))
			if got := nic0.take(); len(got) != 1 {
				t.Fatalf("after the attempt, station 0's NIC got %q", got)
			}
		})
	}
}

// TestSegmentCAMBounded: a guest sending from ever new source MACs cannot
// grow the MAC table past camSize: once it is full of live entries, new
// MACs are not learnt (their frames flood, counted as CAMFull), known ones
// keep switching, and entries older than camAge make room again.
func TestSegmentCAMBounded(t *testing.T) {
	sw := NewSwitch()
	clock := time.Unix(1000, 0)
	sw.now = func() time.Time { return clock }
	var r0, r1 recorder
	p0, _ := sw.AttachNIC("g0", stationMAC(0), r0.rx)
	p1, _ := sw.AttachNIC("g1", stationMAC(1), r1.rx)
	mac := func(i int) [6]byte { return [6]byte{0x02, 0x54, 0, byte(i >> 16), byte(i >> 8), byte(i)} }
	known := mac(1 << 20)
	p1.Send(ether(bcast, known, 0x0806, nil)) // a second MAC of station 1, learnt first
	for i := range 10 * camSize {
		p0.Send(ether(known, mac(i), 0x0806, nil))
	}
	if n := len(sw.cam); n > camSize {
		t.Fatalf("%d MACs learnt, bound %d", n, camSize)
	}
	if sw.CAMFull.Load() == 0 {
		t.Fatal("a full table learnt every new MAC")
	}
	r0.take()
	if r1.take(); true {
		p0.Send(ether(known, mac(1), 0x0806, nil))
		if got := r1.take(); len(got) != 1 || len(r0.take()) != 0 {
			t.Fatalf("a known MAC is no longer switched: %q", got)
		}
	}
	late := mac(20 * camSize)
	p0.Send(ether(known, late, 0x0806, nil))
	if _, ok := sw.cam[late]; ok {
		t.Fatal("learnt a new MAC into a full table of live entries")
	}
	clock = clock.Add(camAge)
	p0.Send(ether(known, late, 0x0806, nil))
	if e, ok := sw.cam[late]; !ok || e.st != p0.st {
		t.Fatalf("after ageing: %v %v, want learnt at station 0", e, ok)
	}
}

// qemuEnd is a test's stand-in for QEMU's end of a StreamNIC.
type qemuEnd struct {
	conn *net.UnixConn
	r    *bufio.Reader
}

// dialNIC connects to a NIC as QEMU does and waits until the NIC has
// taken the connection.
func dialNIC(t *testing.T, nic *StreamNIC) *qemuEnd {
	t.Helper()
	before := nic.accepted.Load()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: nic.Path(), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for nic.accepted.Load() == before {
		time.Sleep(time.Millisecond)
	}
	return &qemuEnd{conn: c, r: bufio.NewReader(c)}
}

func (q *qemuEnd) send(t *testing.T, frame []byte) {
	t.Helper()
	if _, err := q.conn.Write(binary.BigEndian.AppendUint32(nil, uint32(len(frame)))); err != nil {
		t.Fatal(err)
	}
	if _, err := q.conn.Write(frame); err != nil {
		t.Fatal(err)
	}
}

func (q *qemuEnd) recv(t *testing.T) []byte {
	t.Helper()
	f, err := q.read()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (q *qemuEnd) read() ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(q.r, hdr[:]); err != nil {
		return nil, err
	}
	f := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	_, err := io.ReadFull(q.r, f)
	return f, err
}

// TestStreamNIC: QEMU's frames reach the segment and the segment's reach
// QEMU, length-prefixed on a stream socket per NIC; QEMU connecting again
// (restarted) replaces its earlier connection.
func TestStreamNIC(t *testing.T) {
	dir := t.TempDir()
	sw := NewSwitch()
	var nics [2]*StreamNIC
	var ends [2]*qemuEnd
	for i := range 2 {
		n, err := sw.ListenNIC(fmt.Sprintf("g%d", i), stationMAC(byte(i)), filepath.Join(dir, fmt.Sprintf("g%d.sw", i)))
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		nics[i] = n
		ends[i] = dialNIC(t, n)
	}
	var hca recorder
	h := sw.Attach("hca1", stationMAC(1), hca.rx)
	h.SetAddrs([]netip.Addr{netip.MustParseAddr("10.0.0.2")})
	if _, err := sw.ListenNIC("again", stationMAC(1), filepath.Join(dir, "x.sw")); err == nil {
		t.Fatal("a second NIC with station 1's MAC")
	}

	ends[0].send(t, ether(bcast, stationMAC(0), 0x0806, make([]byte, 28)))
	if got := ends[1].recv(t); describe(got) != "arp" {
		t.Fatalf("guest 1 got %q", describe(got))
	}
	jumbo := ipFrame(stationMAC(0), stationMAC(1), "10.0.0.2", "10.0.0.1", 0)
	jumbo = append(jumbo, make([]byte, 9000-len(jumbo))...)
	ends[1].send(t, jumbo)
	if got := ends[0].recv(t); len(got) != 9000 {
		t.Fatalf("jumbo frame: %d bytes arrived", len(got))
	}
	// A jumbo broadcast reaches every other NIC whole (a flood copies it).
	thirdGot := make(chan int, 1)
	sw.AttachNIC("g2", stationMAC(2), func(f []byte) bool { thirdGot <- len(f); Release(f); return true })
	ends[0].send(t, ether(bcast, stationMAC(0), 0x88b5, make([]byte, 9000-14)))
	if got := ends[1].recv(t); len(got) != 9000 {
		t.Fatalf("jumbo broadcast: %d bytes arrived at guest 1", len(got))
	}
	if n := <-thirdGot; n != 9000 {
		t.Fatalf("jumbo broadcast: %d bytes arrived at the third NIC", n)
	}
	// RoCE from guest 0 to guest 1's HCA address goes to the HCA; the
	// frame after it shows, in order, that it went nowhere else.
	ends[0].send(t, ipFrame(stationMAC(1), stationMAC(0), "10.0.0.1", "10.0.0.2", 4791))
	ends[0].send(t, ipFrame(stationMAC(1), stationMAC(0), "10.0.0.1", "10.0.0.2", 0))
	if got := ends[1].recv(t); describe(got) != "ip>10.0.0.2" {
		t.Fatalf("guest 1 got %q", describe(got))
	}
	if got := hca.take(); !slices.Equal(got, []string{"roce>10.0.0.2"}) {
		t.Fatalf("HCA got %q", got)
	}
	// A frame written a byte at a time (the reader's reads end anywhere in
	// it) arrives whole.
	trickle := ipFrame(stationMAC(1), stationMAC(0), "10.0.0.1", "10.0.0.2", 0)
	for _, b := range binary.BigEndian.AppendUint32(nil, uint32(len(trickle))) {
		ends[0].conn.Write([]byte{b})
	}
	for _, b := range trickle {
		ends[0].conn.Write([]byte{b})
	}
	if got := ends[1].recv(t); !bytes.Equal(got, trickle) {
		t.Fatalf("a frame written a byte at a time: %q arrived", describe(got))
	}
	// Guest 1's QEMU restarts: the new connection gets the frames.
	ends[1].conn.Close()
	again := dialNIC(t, nics[1])
	ends[0].send(t, ether(stationMAC(1), stationMAC(0), 0x0806, make([]byte, 28)))
	if got := again.recv(t); describe(got) != "arp" {
		t.Fatalf("guest 1 after reconnecting got %q", describe(got))
	}
	if st := nics[0].Stats(); st.In != 6 || st.Out != 1 || st.Refused != 0 {
		t.Fatalf("guest 0 NIC stats %+v", st)
	}
	// Not QEMU's framing: the connection ends.
	again.conn.Write([]byte{0xff, 0xff, 0xff, 0xff})
	if _, err := again.read(); err == nil {
		t.Fatal("a frame of 4 GiB announced, the connection stays")
	}
	if st := nics[1].Stats(); st.Refused != 1 {
		t.Fatalf("guest 1 NIC stats %+v", st)
	}
}

// seqFrame is RoCE frame number seq from 10.0.0.1 (station 0) to 10.0.0.2
// (station 1).
func seqFrame(seq uint32) []byte {
	f := ipFrame(stationMAC(1), stationMAC(0), "10.0.0.1", "10.0.0.2", 4791)
	f = append(f, make([]byte, 1000+seq%700)...) // sizes that do not divide the socket's buffer: some frames are written in part
	f = binary.BigEndian.AppendUint32(f, seq)
	return Clone(f)
}

func frameSeq(f []byte) uint32 { return binary.BigEndian.Uint32(f[len(f)-4:]) }

// TestStreamNICLossless: the segment pauses instead of dropping. Towards a
// guest that does not read, frames queue and then the sender is refused
// (backpressure); every frame taken arrives, in order, once the guest
// reads. From a guest towards a full receiver, the NIC offers each frame
// again until it is taken: all arrive, in order.
func TestStreamNICLossless(t *testing.T) {
	dir := t.TempDir()
	sw := NewSwitch()
	var mu sync.Mutex
	var got []uint32
	refuse := 25 // the HCA's first offers find its queue full
	arrived := make(chan struct{}, 64)
	hca := sw.Attach("hca0", stationMAC(0), func(f []byte) bool {
		mu.Lock()
		defer mu.Unlock()
		defer Release(f)
		if refuse > 0 {
			refuse--
			return false
		}
		got = append(got, frameSeq(f))
		arrived <- struct{}{}
		return true
	})
	hca.SetAddrs([]netip.Addr{netip.MustParseAddr("10.0.0.1")})
	nic, err := sw.ListenNIC("g1", stationMAC(1), filepath.Join(dir, "g1.sw"))
	if err != nil {
		t.Fatal(err)
	}
	defer nic.Close()
	q := dialNIC(t, nic)
	nic.SetPauseLimit(time.Hour) // no watchdog: a loaded machine must not turn pauses into drops here

	// To the guest: it reads nothing until the HCA is refused.
	sent := uint32(0)
	for hca.Send(seqFrame(sent)) {
		sent++
		if sent > 100000 {
			t.Fatal("no backpressure from a guest that does not read")
		}
	}
	for i := range sent {
		if f := q.recv(t); IsRoCE(f) && frameSeq(f) != i {
			t.Fatalf("frame %d arrived as %d", i, frameSeq(f))
		}
	}
	if !hca.Send(seqFrame(sent)) {
		t.Fatal("still refused after the guest read everything")
	}
	if f := q.recv(t); frameSeq(f) != sent {
		t.Fatalf("frame %d arrived as %d", sent, frameSeq(f))
	}
	t.Logf("%d frames taken before the first pause", sent)

	// From the guest to an HCA that refuses its first offers.
	const n = 8
	back := func(seq uint32) []byte {
		f := ipFrame(stationMAC(0), stationMAC(1), "10.0.0.2", "10.0.0.1", 4791)
		return binary.BigEndian.AppendUint32(f, seq)
	}
	for i := range uint32(n) {
		q.send(t, back(i))
	}
	for range n {
		<-arrived
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, []uint32{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Fatalf("HCA got %v", got)
	}
	if st := nic.Stats(); st.Dropped != 0 || st.Paused == 0 || st.Out != uint64(sent)+1 || st.In != n {
		t.Fatalf("NIC stats %+v", st)
	}
}

// TestStreamNICWatchdog: a guest that stops reading for longer than the
// pause limit loses frames instead of stalling its senders for ever, which
// the switch logs once per stall; when it reads again, frames flow.
func TestStreamNICWatchdog(t *testing.T) {
	dir := t.TempDir()
	sw := NewSwitch()
	var logged countHandler
	sw.SetLogger(slog.New(&logged))
	hca := sw.Attach("hca0", stationMAC(0), func(f []byte) bool { Release(f); return true })
	hca.SetAddrs([]netip.Addr{netip.MustParseAddr("10.0.0.1")})
	nic, err := sw.ListenNIC("g1", stationMAC(1), filepath.Join(dir, "g1.sw"))
	if err != nil {
		t.Fatal(err)
	}
	defer nic.Close()
	q := dialNIC(t, nic)
	nic.SetPauseLimit(time.Millisecond)
	seq := uint32(0)
	for nic.Stats().Dropped < 3 {
		if hca.Send(seqFrame(seq)) {
			seq++
		} else {
			time.Sleep(time.Millisecond) // paused: wait for the watchdog
		}
	}
	if n := logged.n.Load(); n < 1 || n >= nic.Stats().Dropped {
		t.Errorf("%d log lines for %d frames dropped: want one a stall", n, nic.Stats().Dropped)
	}
	// Reading again, frames flow: a marker sent now arrives (a marker
	// written while the queue still drained may be lost to the watchdog;
	// then the next one is sent).
	for marker := uint32(1 << 31); ; marker++ {
		for !hca.Send(seqFrame(marker)) {
			time.Sleep(time.Millisecond)
		}
		for {
			q.conn.SetReadDeadline(time.Now().Add(time.Second))
			f, err := q.read()
			if err != nil {
				break // this marker was lost: send another
			}
			if frameSeq(f) == marker {
				return
			}
		}
	}
}

// countHandler is a slog handler counting records.
type countHandler struct{ n atomic.Uint64 }

func (h *countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countHandler) Handle(context.Context, slog.Record) error {
	h.n.Add(1)
	return nil
}
func (h *countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countHandler) WithGroup(string) slog.Handler      { return h }
