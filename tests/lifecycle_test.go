package tests

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/pvrdma"
	"github.com/hcaemu/hcaemu/qemu"
	"github.com/hcaemu/hcaemu/vfio"
)

// TestE2EReboot reboots a guest: QEMU resets the machine, the device is
// reset (DEVICE_RESET) and the driver probes again cleanly.
func TestE2EReboot(t *testing.T) {
	needE2E(t)
	script := `echo "BOOT $HCAEMU_BOOT"
ibv_devinfo | grep PORT_
dmesg | grep -i pvrdma
if [ "$HCAEMU_BOOT" = 1 ]; then
  shutdown reboot
  sleep 120
fi
echo "REBOOTED $HCAEMU_BOOT"
`
	out, code := hcaemuRun(t, "--reboots", "--timeout", "5m", "--log-level", "info", "--", script)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	g := strings.Join(guestLines(out, 0), "\n")
	if strings.Count(g, "PORT_ACTIVE") != 2 || !strings.Contains(g, "BOOT 2") || !strings.Contains(g, "REBOOTED 2") {
		t.Errorf("guest did not come back with an active port:\n%s", g)
	}
	if !strings.Contains(out, `why="device reset"`) {
		t.Error("the device was not reset by the reboot")
	}
	for _, l := range guestLines(out, 0) {
		if strings.Contains(strings.ToLower(l), "pvrdma") && (strings.Contains(l, "fail") || strings.Contains(l, "error")) &&
			!strings.Contains(l, "tainting kernel") { // the out-of-tree module's signature note
			t.Errorf("driver error after reboot: %s", l)
		}
	}
}

// liveDevice counts devices that have not been closed.
type liveDevice struct {
	*pvrdma.Device
	live *atomic.Int32
}

func (d liveDevice) Close() {
	d.Device.Close()
	d.live.Add(-1)
}

// watch is an io.Writer that closes ready when it sees a line.
type watch struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	want  string
	ready chan struct{}
	once  sync.Once
}

func (w *watch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.ready) })
	}
	return len(p), nil
}

func memfdMappings(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "memfd:")
}

// qemuPID finds the QEMU whose command line names socket.
func qemuPID(socket string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmd, []byte("qemu-system")) && bytes.Contains(cmd, []byte(socket)) {
			return pid
		}
	}
	return 0
}

// TestE2EQEMUKilled kills QEMU with SIGKILL while the guest's driver is
// bound: the server (this process) keeps running, the device is freed (no
// leaked goroutines, fds or guest-RAM mappings) and the next QEMU probes
// the device again.
func TestE2EQEMUKilled(t *testing.T) {
	needE2E(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env, err := qemu.Provision(ctx, qemu.Options{Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := env.NewCluster(1)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cl.Devices, cl.Timeout, cl.Stderr = true, 5*time.Minute, io.Discard
	var live atomic.Int32
	srv := &vfio.Server{NewDevice: func(h vfio.Host) (vfio.Device, error) {
		live.Add(1)
		return liveDevice{pvrdma.New(pvrdma.Config{Name: "hca0", Mem: h.Mem, MSIX: h.MSIX}), &live}, nil
	}}
	l, err := vfio.Listen(cl.SocketPath(0))
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, l) }()

	settle := func() (int, int, int) {
		time.Sleep(50 * time.Millisecond)
		return runtime.NumGoroutine(), openFDs(t), memfdMappings(t)
	}
	g0, f0, m0 := settle()

	w := &watch{want: "READY", ready: make(chan struct{})}
	cl.Stdout = w
	done := make(chan []qemu.GuestResult, 1)
	go func() {
		r, _ := cl.Run(ctx, "ibv_devinfo | grep PORT_; echo READY; sleep 600")
		done <- r
	}()
	select {
	case <-w.ready:
	case <-time.After(4 * time.Minute):
		t.Fatalf("guest never became ready:\n%s", w.buf.String())
	}
	if !strings.Contains(w.buf.String(), "PORT_ACTIVE") {
		t.Fatalf("port not active before the kill:\n%s", w.buf.String())
	}
	if live.Load() != 1 || memfdMappings(t) <= m0 {
		t.Fatalf("%d live devices, %d memfd mappings (baseline %d)", live.Load(), memfdMappings(t), m0)
	}
	pid := qemuPID(cl.SocketPath(0))
	if pid == 0 {
		t.Fatal("QEMU process not found")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if r := <-done; len(r) != 1 || r[0].Err == nil {
		t.Fatalf("killed guest reported %+v", r)
	}
	deadline := time.Now().Add(time.Minute)
	var g, f, m int
	for {
		g, f, m = settle()
		if live.Load() == 0 && g <= g0 && f <= f0 && m <= m0 {
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("after the kill: %d live devices, goroutines %d->%d, fds %d->%d, memfd mappings %d->%d\n%s",
				live.Load(), g0, g, f0, f, m0, m, buf[:runtime.Stack(buf, true)])
		}
	}
	select {
	case err := <-served:
		t.Fatalf("server stopped: %v", err)
	default:
	}

	// The next QEMU gets a fresh device.
	w2 := &watch{want: "PORT_ACTIVE", ready: make(chan struct{})}
	cl.Stdout = w2
	r, err := cl.Run(ctx, "ibv_devinfo | grep PORT_")
	if err != nil || len(r) != 1 || r[0].Err != nil || r[0].ExitStatus != 0 {
		t.Fatalf("second QEMU: %v %+v\n%s", err, r, w2.buf.String())
	}
	if !strings.Contains(w2.buf.String(), "PORT_ACTIVE") {
		t.Fatalf("second QEMU: port not active:\n%s", w2.buf.String())
	}
	cancel()
	<-served
}
