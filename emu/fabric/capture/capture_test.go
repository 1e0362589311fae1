package capture

import (
	"bytes"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/hcaemu/hcaemu/emu/fabric"
)

// frame4 is the start of an Ethernet/IPv4 frame from src to dst: all the
// switch reads.
func frame4(src, dst string) []byte {
	f := make([]byte, 14+20)
	f[12], f[13] = 0x08, 0x00
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(f[14+12:], s[:])
	copy(f[14+16:], d[:])
	return f
}

// TestCapture: the capture decorator records every frame the link takes,
// delivered or lost on the way (for nobody), and keeps the backpressure
// answer of the link it wraps; an offer a full receiver refuses did not
// cross the wire (the sender offers it again) and is not recorded. A frame
// from a source address its port does not own never enters the fabric: the
// capture does not see it.
func TestCapture(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewPcapWriter(&buf, PcapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	full := atomic.Bool{}
	sw := fabric.NewSwitch(To(w))
	a := sw.Attach("a", [6]byte{1}, func(f []byte) bool { fabric.Release(f); return true })
	b := sw.Attach("b", [6]byte{2}, func(f []byte) bool { fabric.Release(f); return !full.Load() })
	a.SetAddrs([]netip.Addr{netip.MustParseAddr("10.0.0.1")})
	b.SetAddrs([]netip.Addr{netip.MustParseAddr("10.0.0.2")})
	sends := []struct {
		from     *fabric.Port
		src, dst string
		full     bool
		wantOK   bool
		captured bool
		comment  string
	}{
		{a, "10.0.0.1", "10.0.0.2", false, true, true, "delivered"},
		{b, "10.0.0.2", "10.0.0.1", false, true, true, "reply"},
		{a, "10.0.0.1", "10.0.0.9", false, true, true, "nobody: lost, counts as sent"},
		{a, "10.0.0.1", "10.0.0.2", true, false, false, "receiver full: backpressure, not on the wire"},
		{a, "10.0.0.2", "10.0.0.2", false, true, false, "spoofed source: dropped before the capture"},
	}
	var want [][]byte
	for _, s := range sends {
		full.Store(s.full)
		frame := fabric.Clone(frame4(s.src, s.dst))
		if got := s.from.Send(frame); got != s.wantOK {
			t.Errorf("%s: Send = %v", s.comment, got)
		}
		if s.captured {
			want = append(want, frame4(s.src, s.dst))
		}
	}
	w.Close()
	checkRecords(t, buf.Bytes(), want)
	if sw.Spoofed.Load() != 1 {
		t.Errorf("spoofed %d, want 1", sw.Spoofed.Load())
	}
}

// checkRecords reads a pcap and checks that its records are the frames
// want, in order.
func checkRecords(t *testing.T, pcap []byte, want [][]byte) []pcapRecord {
	t.Helper()
	_, _, _, recs := readPcap(t, pcap)
	if len(recs) != len(want) {
		t.Fatalf("%d frames captured, want %d", len(recs), len(want))
	}
	for i := range want {
		if !bytes.Equal(recs[i].data, want[i]) {
			t.Errorf("record %d differs", i)
		}
	}
	return recs
}

// TestCaptureSegment: the capture holds everything on the segment, the
// guests' own traffic (ARP, IP) from their NICs as well as RoCE between
// HCAs, in the order it crossed.
func TestCaptureSegment(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewPcapWriter(&buf, PcapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sw := fabric.NewSwitch(To(w))
	drop := func(f []byte) bool { fabric.Release(f); return true }
	mac0, mac1 := [6]byte{0x52, 0x54, 0, 0, 0, 1}, [6]byte{0x52, 0x54, 0, 0, 0, 2}
	nic0, _ := sw.AttachNIC("g0", mac0, drop)
	sw.AttachNIC("g1", mac1, drop)
	hca0 := sw.Attach("hca0", mac0, drop)
	sw.Attach("hca1", mac1, drop).SetAddrs([]netip.Addr{netip.MustParseAddr("10.0.0.2")})
	hca0.SetAddrs([]netip.Addr{netip.MustParseAddr("10.0.0.1")})

	arp := append(append(append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, mac0[:]...), 0x08, 0x06), make([]byte, 28)...)
	ip := frame4("10.0.0.1", "10.0.0.2")
	copy(ip, mac1[:])
	copy(ip[6:], mac0[:])
	roce := append(frame4("10.0.0.1", "10.0.0.2"), 0x12, 0xb7, 0x12, 0xb7, 0, 8, 0, 0) // UDP 4791
	roce[14], roce[14+9] = 0x45, 17
	copy(roce, mac1[:])
	copy(roce[6:], mac0[:])
	want := [][]byte{arp, ip, roce}
	for i, f := range want {
		from := nic0
		if i == 2 {
			from = hca0
		}
		from.Send(fabric.Clone(f))
	}
	w.Close()
	recs := checkRecords(t, buf.Bytes(), want)
	if !fabric.IsRoCE(recs[2].data) || fabric.IsRoCE(recs[1].data) {
		t.Error("the capture's RoCE frame is not the third")
	}
}
