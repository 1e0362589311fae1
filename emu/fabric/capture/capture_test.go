package capture

import (
	"bytes"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/hcaemu/hcaemu/emu/fabric"
)

// frame4 is the start of an Ethernet/IPv4 frame to dst: all the switch reads.
func frame4(dst string) []byte {
	f := make([]byte, 14+20)
	f[12], f[13] = 0x08, 0x00
	a := netip.MustParseAddr(dst).As4()
	copy(f[14+16:], a[:])
	return f
}

// TestCapture: the capture decorator records every frame that crosses the
// link, delivered or not, and keeps the backpressure answer of the link it
// wraps.
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
		from    *fabric.Port
		dst     string
		full    bool
		wantOK  bool
		comment string
	}{
		{a, "10.0.0.2", false, true, "delivered"},
		{b, "10.0.0.1", false, true, "reply"},
		{a, "10.0.0.9", false, true, "nobody: lost, counts as sent"},
		{a, "10.0.0.2", true, false, "receiver full: backpressure"},
	}
	for _, s := range sends {
		full.Store(s.full)
		frame := fabric.Clone(frame4(s.dst))
		if got := s.from.Send(frame); got != s.wantOK {
			t.Errorf("%s: Send = %v", s.comment, got)
		}
	}
	w.Close()
	_, _, _, recs := readPcap(t, buf.Bytes())
	if len(recs) != len(sends) {
		t.Fatalf("%d frames captured, want %d", len(recs), len(sends))
	}
	for i, s := range sends {
		if !bytes.Equal(recs[i].data, frame4(s.dst)) {
			t.Errorf("record %d (%s) differs", i, s.comment)
		}
	}
}
