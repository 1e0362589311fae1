package capture

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/fabric"
)

// roce4 is a RoCEv2 frame (IPv4, UDP 4791) from src to dst, its last byte
// tag, between the stations of MACs srcMAC and dstMAC.
func roce4(srcMAC, dstMAC [6]byte, src, dst string, tag byte) []byte {
	f := frame4(src, dst)
	copy(f, dstMAC[:])
	copy(f[6:], srcMAC[:])
	f[14], f[14+9] = 0x45, 17
	f = append(f, 0x12, 0xb7, 0x12, 0xb7, 0, 9, 0, 0, tag) // UDP 4791
	return f
}

// pausing is a receiver that refuses its first n offers (its queue full),
// then takes frames; it tells got of each frame taken.
type pausing struct {
	mu     sync.Mutex
	refuse int
	offers int
	got    chan []byte
}

func (p *pausing) rx(f []byte) bool {
	p.mu.Lock()
	p.offers++
	full := p.refuse > 0
	if full {
		p.refuse--
	}
	p.mu.Unlock()
	if !full {
		p.got <- bytes.Clone(f)
	}
	fabric.Release(f)
	return !full
}

// capturedSwitch is a switch whose frames are captured into buf, with the
// stations 0 (NIC and HCA at 10.0.0.1) and 1.
func capturedSwitch(t *testing.T) (*fabric.Switch, *PcapWriter, *bytes.Buffer) {
	t.Helper()
	buf := &bytes.Buffer{}
	w, err := NewPcapWriter(buf, PcapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return fabric.NewSwitch(To(w)), w, buf
}

var mac0, mac1 = [6]byte{0x52, 0x54, 0, 0, 0, 1}, [6]byte{0x52, 0x54, 0, 0, 0, 2}

// TestCapturePausedReceiver: a frame whose receiver is paused (its queue
// full) is offered again and again until taken; the capture holds it once,
// as the receiver got it once. Both ways: an HCA's frame to a guest's NIC
// (the HCA's engine offers it again, as its transport does), and a guest's
// frame to an HCA (its StreamNIC offers it again).
func TestCapturePausedReceiver(t *testing.T) {
	const refusals = 5
	t.Run("hca-to-nic", func(t *testing.T) {
		sw, w, buf := capturedSwitch(t)
		nic := &pausing{refuse: refusals, got: make(chan []byte, 4)}
		if _, err := sw.AttachNIC("g1", mac1, nic.rx); err != nil {
			t.Fatal(err)
		}
		hca := sw.Attach("hca0", mac0, func(f []byte) bool { fabric.Release(f); return true })
		hca.SetAddrs([]netip.Addr{netip.MustParseAddr("10.0.0.1")})
		frame := roce4(mac0, mac1, "10.0.0.1", "10.0.0.2", 7)
		sends := 0
		for {
			sends++
			if hca.Send(fabric.Clone(frame)) {
				break
			}
			if sends > 100 {
				t.Fatal("never taken")
			}
		}
		if got := <-nic.got; !bytes.Equal(got, frame) || len(nic.got) != 0 {
			t.Fatalf("the NIC got %x (and %d more)", got, len(nic.got))
		}
		w.Close()
		checkRecords(t, buf.Bytes(), [][]byte{frame})
		if sends != refusals+1 || sw.Paused.Load() != refusals || sw.Dropped.Load() != 0 || sw.Forwarded.Load() != 1 {
			t.Errorf("%d sends; switch paused %d dropped %d forwarded %d", sends, sw.Paused.Load(), sw.Dropped.Load(), sw.Forwarded.Load())
		}
	})
	t.Run("nic-to-hca", func(t *testing.T) {
		sw, w, buf := capturedSwitch(t)
		hca, nic, closeNIC := guestToHCA(t, sw, refusals)
		nic.SetPauseLimit(time.Hour) // no watchdog: the frame waits as long as it takes
		frame := roce4(mac1, mac0, "10.0.0.2", "10.0.0.1", 9)
		guestSend(t, nic, frame)
		if got := <-hca.got; !bytes.Equal(got, frame) {
			t.Fatalf("the HCA got %x", got)
		}
		closeNIC() // its reader is done: the capture knows the frame was taken
		w.Close()
		checkRecords(t, buf.Bytes(), [][]byte{frame})
		if st := nic.Stats(); st.Paused != refusals || st.Dropped != 0 || st.In != 1 || hca.offers != refusals+1 {
			t.Errorf("NIC stats %+v, %d offers", st, hca.offers)
		}
	})
}

// TestCaptureGivenUp: a guest's frame whose receiver stays paused past the
// pause limit is dropped: the capture holds it once, the switch and the NIC
// count it once, and the switch logs it.
func TestCaptureGivenUp(t *testing.T) {
	sw, w, buf := capturedSwitch(t)
	logged := make(chan string, 4)
	sw.SetLogger(slog.New(chanHandler(logged)))
	hca, nic, closeNIC := guestToHCA(t, sw, 1<<30)
	nic.SetPauseLimit(time.Millisecond)
	frame := roce4(mac1, mac0, "10.0.0.2", "10.0.0.1", 3)
	guestSend(t, nic, frame)
	select {
	case msg := <-logged:
		t.Logf("logged: %s", msg)
	case <-time.After(time.Minute):
		t.Fatal("no log line for the frame given up on")
	}
	closeNIC()
	w.Close()
	checkRecords(t, buf.Bytes(), [][]byte{frame})
	hca.mu.Lock()
	offers := hca.offers
	hca.mu.Unlock()
	if st := nic.Stats(); st.Dropped != 1 || st.Paused < 2 || sw.Dropped.Load() != 1 || uint64(offers) != st.Paused {
		t.Errorf("NIC stats %+v; switch dropped %d; %d offers", st, sw.Dropped.Load(), offers)
	}
}

// guestToHCA attaches to sw an HCA at 10.0.0.1 (station 0) that refuses
// its first refuse offers, and guest 1's StreamNIC; closeNIC closes the NIC
// (once: also as the test ends).
func guestToHCA(t *testing.T, sw *fabric.Switch, refuse int) (hca *pausing, nic *fabric.StreamNIC, closeNIC func()) {
	t.Helper()
	hca = &pausing{refuse: refuse, got: make(chan []byte, 4)}
	sw.Attach("hca0", mac0, hca.rx).SetAddrs([]netip.Addr{netip.MustParseAddr("10.0.0.1")})
	nic, err := sw.ListenNIC("g1", mac1, filepath.Join(t.TempDir(), "g1.sw"))
	if err != nil {
		t.Fatal(err)
	}
	closeNIC = sync.OnceFunc(func() { nic.Close() })
	t.Cleanup(closeNIC)
	return hca, nic, closeNIC
}

// guestSend writes frame to the NIC's socket as the guest's QEMU does.
func guestSend(t *testing.T, nic *fabric.StreamNIC, frame []byte) {
	t.Helper()
	c, err := net.Dial("unix", nic.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(frame))), frame...)); err != nil {
		t.Fatal(err)
	}
}

// chanHandler is a slog handler sending each record's message to a
// channel (without blocking).
type chanHandler chan string

func (h chanHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h chanHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h <- r.Message:
	default:
	}
	return nil
}
func (h chanHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h chanHandler) WithGroup(string) slog.Handler      { return h }
