package fabric

import (
	"net"
	"path/filepath"
	"testing"
	"time"
)

// TestSegment: the guests' segment floods broadcasts and unknown unicasts,
// learns source MACs, and switches between QEMU sockets and in-process ports.
func TestSegment(t *testing.T) {
	dir := t.TempDir()
	ports := []string{filepath.Join(dir, "p0"), filepath.Join(dir, "p1"), filepath.Join(dir, "p2")}
	sw, err := NewSegment(filepath.Join(dir, "sw"), ports)
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	conns := make([]*net.UnixConn, len(ports))
	for i, p := range ports {
		c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: p, Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	swAddr := &net.UnixAddr{Name: sw.Path(), Net: "unixgram"}
	mac := func(i byte) []byte { return []byte{0x52, 0x54, 0, 0, 0, i} }
	frame := func(dst, src []byte, payload string) []byte {
		return append(append(append(append([]byte{}, dst...), src...), 0x08, 0x00), payload...)
	}
	recv := func(i int) string {
		conns[i].SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		b := make([]byte, 2048)
		n, _, err := conns[i].ReadFromUnix(b)
		if err != nil {
			return ""
		}
		return string(b[14:n])
	}
	bcast := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	// Broadcast from port 0 floods to 1 and 2 (and teaches the switch mac 1).
	conns[0].WriteToUnix(frame(bcast, mac(1), "arp"), swAddr)
	if recv(1) != "arp" || recv(2) != "arp" || recv(0) != "" {
		t.Fatal("broadcast not flooded to the other ports only")
	}
	// Port 2 answers mac 1: unicast to port 0 only.
	conns[2].WriteToUnix(frame(mac(1), mac(3), "reply"), swAddr)
	if recv(0) != "reply" || recv(1) != "" {
		t.Fatal("learned unicast not forwarded to its port only")
	}
	// Unknown unicast floods.
	conns[0].WriteToUnix(frame(mac(9), mac(1), "who"), swAddr)
	if recv(1) != "who" || recv(2) != "who" {
		t.Fatal("unknown unicast not flooded")
	}
	if st := sw.Stats(); st.Frames != 3 || st.Flooded != 2 {
		t.Errorf("stats %+v", st)
	}
	// An in-process port sees floods, and its frames reach learned ports.
	got := make(chan string, 4)
	send := sw.Attach(func(f []byte) { got <- string(f[14:]) })
	conns[1].WriteToUnix(frame(bcast, mac(2), "hello all"), swAddr)
	select {
	case s := <-got:
		if s != "hello all" {
			t.Errorf("in-process port got %q", s)
		}
	case <-time.After(time.Second):
		t.Fatal("in-process port got nothing")
	}
	recv(0)
	recv(2)
	send(frame(mac(2), mac(7), "to 2"))
	if recv(1) != "to 2" || recv(0) != "" || recv(2) != "" {
		t.Fatal("frame from the in-process port not switched to its learned port only")
	}
}

// TestSegmentCAMBounded: a guest sending from ever new source MACs cannot grow
// the segment's MAC table past camSize: once it is full of live entries, new
// MACs are not learned (their frames flood, counted as CAMFull), known ones
// keep switching, and entries older than camAge make room again.
func TestSegmentCAMBounded(t *testing.T) {
	dir := t.TempDir()
	ports := []string{filepath.Join(dir, "p0"), filepath.Join(dir, "p1")}
	seg, err := NewSegment(filepath.Join(dir, "sw"), ports)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	clock := time.Unix(1000, 0)
	seg.now = func() time.Time { return clock }
	frame := func(dst, src [6]byte) []byte {
		return append(append(append([]byte{}, dst[:]...), src[:]...), 0x08, 0x00)
	}
	mac := func(i int) [6]byte { return [6]byte{0x52, 0x54, 0, byte(i >> 16), byte(i >> 8), byte(i)} }
	known := mac(1 << 20)
	seg.forward(1, frame(mac(0), known)) // port 1's MAC, learned first
	for i := range 10 * camSize {
		seg.forward(0, frame(known, mac(i)))
	}
	if n := len(seg.macs); n > camSize {
		t.Fatalf("%d MACs learned, bound %d", n, camSize)
	}
	if seg.stats.CAMFull == 0 {
		t.Fatal("a full table learned every new MAC")
	}
	if outs := seg.forward(0, frame(known, mac(1))); len(outs) != 1 || outs[0].path != ports[1] {
		t.Fatalf("a known MAC is no longer switched: %v", outs)
	}
	late := mac(20 * camSize)
	seg.forward(0, frame(known, late))
	if _, ok := seg.macs[late]; ok {
		t.Fatal("learned a new MAC into a full table of live entries")
	}
	clock = clock.Add(camAge)
	seg.forward(0, frame(known, late))
	if e, ok := seg.macs[late]; !ok || e.port != 0 {
		t.Fatalf("after ageing: %v %v, want learned on port 0", e, ok)
	}
}
