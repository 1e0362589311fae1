package pvrdma_test

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	doorbell "github.com/hcaemu/hcaemu/doorbell/pvrdma"
	"github.com/hcaemu/hcaemu/emu/emutest"
	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/pvrdma"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	"github.com/hcaemu/hcaemu/emu/ratelog"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// watchdog fails the test if done is not closed in a long time: the
// operations it guards return at once unless they deadlock, so the bound only
// turns a hang into a readable failure.
func watchdog(t *testing.T, what string, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("%s: still blocked after a minute (deadlock)", what)
	}
}

// TestRegisterReadDoesNotWaitForDeviceLock: a vCPU reading BAR1 (ERR, ICR,
// IMR, MAC, DSR) is answered while the engine holds the device lock.
func TestRegisterReadDoesNotWaitForDeviceLock(t *testing.T) {
	r := probed(t, nil)
	r.dev.WithLock(func() {
		done := make(chan struct{})
		go func() {
			defer close(done)
			buf := make([]byte, 4)
			for _, reg := range []uint64{abi.RegVersion, abi.RegDSRLow, abi.RegDSRHigh, abi.RegErr, abi.RegICR, abi.RegIMR, abi.RegMACL, abi.RegMACH} {
				if err := r.dev.ReadRegion(1, reg, buf); err != nil {
					t.Errorf("read %#x: %v", reg, err)
				}
			}
			if err := r.dev.ReadRegion(1, abi.RegVersion, buf); err != nil || binary.LittleEndian.Uint32(buf) != abi.VersionQPHandle {
				t.Errorf("VERSION %d, %v", binary.LittleEndian.Uint32(buf), err)
			}
		}()
		watchdog(t, "register read while the device lock is held", done)
	})
}

// TestInterruptsRaisedOutsideDeviceLock: every MSI-X vector is sent after the
// device lock is released. The interrupt handler here writes a doorbell at
// once (which takes the device lock): if the vector were sent under the lock,
// that write would deadlock.
func TestInterruptsRaisedOutsideDeviceLock(t *testing.T) {
	checkGoroutines(t)
	drv := emutest.New(64 << 20)
	var dev *pvrdma.Device
	raised := 0
	msix := func(v int) {
		raised++
		drv.IRQ.Raise(v)
		// A CQ doorbell for a CQ that does not exist: it takes the device
		// lock, finds nothing and returns.
		val := uint32(0xFFFFF) | doorbell.CQArm
		buf := binary.LittleEndian.AppendUint32(nil, val)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = dev.WriteRegion(2, 4, buf)
		}()
		watchdog(t, "doorbell from the interrupt handler", done)
	}
	dev = pvrdma.New(pvrdma.Config{Name: "t", Mem: drv.RAM, MSIX: msix, Log: testLog(t),
		MAC: [6]byte{0x00, 0x50, 0x56, 0x01, 0x02, 0x03}})
	t.Cleanup(dev.Close)
	drv.Dev = dev
	if err := drv.Probe(); err != nil { // commands raise the response vector
		t.Fatal(err)
	}
	if _, _, _, _, err := drv.KernelGSI(); err != nil {
		t.Fatal(err)
	}
	dev.Sync()
	if raised == 0 || drv.IRQ.Count[abi.IntrVectorResponse].Load() == 0 {
		t.Fatalf("no response interrupt raised (%d in all)", raised)
	}
}

// TestCloseTwice: closing a device again (a second disconnect path, a test's
// cleanup after an explicit Close) does nothing: both calls return, the
// first freed everything and stopped the engine, the second changed
// nothing, and no goroutine is left (checkGoroutines).
func TestCloseTwice(t *testing.T) {
	checkGoroutines(t)
	r := probed(t, nil)
	if _, err := r.CreatePD(0); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		r.dev.Close()
		r.dev.Close() // and the rig's cleanup closes it a third time
	}()
	select {
	case <-closed:
	case <-time.After(time.Minute): // a watchdog, not a timing
		t.Fatal("closing the device twice did not return within a minute")
	}
	st := r.dev.Inspect()
	if st.Active || len(st.PDs) != 0 || len(st.Contexts) != 0 || st.PinnedPages != 0 {
		t.Errorf("after Close: active %v, %d PDs, %d contexts, %d pinned pages; want nothing", st.Active, len(st.PDs), len(st.Contexts), st.PinnedPages)
	}
	if !r.dev.Idle() {
		t.Error("after Close the engine still has work")
	}
}

// TestGuestTriggeredLogsAreBounded: a guest that writes REQUEST 100 000 times
// before activating the device gets a handful of log lines, the later ones
// counting what was suppressed, not 100 000.
func TestGuestTriggeredLogsAreBounded(t *testing.T) {
	checkGoroutines(t)
	var lines lineCounter
	drv := emutest.New(1 << 20)
	dev := pvrdma.New(pvrdma.Config{Name: "t", Mem: drv.RAM, Log: slog.New(slog.NewTextHandler(&lines, nil))})
	t.Cleanup(dev.Close)
	for range 100000 {
		if err := dev.WriteRegion(1, abi.RegRequest, []byte{0, 0, 0, 0}); err != nil {
			t.Fatal(err)
		}
	}
	if n := lines.count(); n == 0 || n > 2*ratelog.DefaultBurst {
		t.Fatalf("%d log lines for 100000 REQUEST writes before activation, want 1..%d", n, 2*ratelog.DefaultBurst)
	}
}

// lineCounter counts the lines written to it.
type lineCounter struct {
	mu sync.Mutex
	n  int
}

func (c *lineCounter) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.n += bytes.Count(p, []byte{'\n'})
	c.mu.Unlock()
	return len(p), nil
}

func (c *lineCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// TestEnginePanicIsDeviceFatal: a panic in the engine's work (a bug that
// guest or peer input reached) is logged with its stack and becomes this
// device's DEVICE_FATAL async event; the process, and the other device on the
// fabric, go on; the fatal device does no more engine work until it is reset.
func TestEnginePanicIsDeviceFatal(t *testing.T) {
	checkGoroutines(t)
	sw := fabric.NewSwitch()
	var logged syncBuffer
	drv := emutest.New(64 << 20)
	dev := pvrdma.New(pvrdma.Config{Name: "fatal", Mem: drv.RAM, MSIX: drv.IRQ.Raise,
		Log: slog.New(slog.NewTextHandler(&logged, nil)), MAC: [6]byte{0x00, 0x50, 0x56, 0, 0, 9}})
	t.Cleanup(dev.Close)
	drv.Dev = dev
	if err := drv.Probe(); err != nil {
		t.Fatal(err)
	}
	asyncBefore := drv.IRQ.Count[abi.IntrVectorAsync].Load()
	if !dev.EngineWork(func() { panic("injected engine bug") }) {
		t.Fatal("the panicking work did not run")
	}
	if !hasEvent(drv.AsyncEvents(), abi.EventDeviceFatal, 0) {
		t.Fatalf("async events %v: no DEVICE_FATAL", drv.AsyncEvents())
	}
	if drv.IRQ.Count[abi.IntrVectorAsync].Load() == asyncBefore {
		t.Fatal("no async interrupt for DEVICE_FATAL")
	}
	if log := logged.String(); !strings.Contains(log, "injected engine bug") || !strings.Contains(log, "TestEnginePanicIsDeviceFatal") {
		t.Fatalf("the log line lacks the panic or its stack:\n%s", log)
	}
	if dev.EngineWork(func() { t.Error("a fatal device ran engine work") }) {
		t.Fatal("engine work ran on a fatal device")
	}
	// Other devices in the process are untouched: RC traffic between two
	// healthy HCAs still moves checked data.
	b, c := newHost(t, sw, 2), newHost(t, sw, 3)
	src, lk, _ := b.mr(t, 4096, allAccess)
	dst, lk2, _ := c.mr(t, 4096, allAccess)
	qb, qc := pairRC(t, b, c, defaultRC(), defaultRC())
	fill(b.RAM.Mem[src:src+4096], 7)
	qc.PostRecv(uverbs.RecvWQE{WRID: 1, SGE: []uverbs.SGE{{Addr: dst, Length: 4096, LKey: lk2}}})
	qb.PostSend(send(uverbs.OpSend, 2, 0, uverbs.SGE{Addr: src, Length: 4096, LKey: lk}))
	if e := poll(t, b.cq, b, c); e.Status != 0 {
		t.Fatalf("SEND between healthy devices: %+v", e)
	}
	if e := poll(t, c.cq, b, c); e.Status != 0 || !bytes.Equal(b.RAM.Mem[src:src+4096], c.RAM.Mem[dst:dst+4096]) {
		t.Fatalf("RECV between healthy devices: %+v", e)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger on another goroutine.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
