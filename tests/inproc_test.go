package tests

import (
	"context"
	"encoding/binary"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/emutest"
	"github.com/hcaemu/hcaemu/emu/pvrdma"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	"github.com/hcaemu/hcaemu/vfio"
	"github.com/hcaemu/hcaemu/vfio/vfiotest"
)

// viaVFIO is the fake driver's view of a device behind a vfio-user client:
// region accesses become REGION_READ / non-posted REGION_WRITE messages (as
// with x-no-posted-writes), interrupts arrive on eventfds.
type viaVFIO struct {
	c   *vfiotest.Client
	efd []int
	irq *emutest.IRQs
}

func (v *viaVFIO) ReadRegion(index int, off uint64, p []byte) error {
	b, err := v.c.RegionRead(uint32(index), off, uint32(len(p)))
	copy(p, b)
	return err
}

func (v *viaVFIO) WriteRegion(index int, off uint64, p []byte) error {
	err := v.c.RegionWrite(uint32(index), off, p, false)
	v.collect()
	return err
}

// WaitInterrupt implements emutest.InterruptWaiter: it waits for vector's
// eventfd as the driver waits for its command-completion interrupt.
func (v *viaVFIO) WaitInterrupt(vector int) {
	if vector < 0 || vector >= len(v.efd) {
		return
	}
	pfd := []unix.PollFd{{Fd: int32(v.efd[vector]), Events: unix.POLLIN}}
	_, _ = unix.Poll(pfd, int(time.Minute/time.Millisecond))
	v.collect()
}

// collect moves eventfd counts into the driver's interrupt recorder.
func (v *viaVFIO) collect() {
	var b [8]byte
	for i, fd := range v.efd {
		if n, _ := unix.Read(fd, b[:]); n == 8 {
			v.irq.Count[i].Add(int64(binary.LittleEndian.Uint64(b[:])))
		}
	}
}

// attachVFIO connects to an HCA's vfio-user socket as QEMU does: the
// version handshake, guest RAM (the memfd ramFD of size bytes) mapped for
// DMA at I/O address 0, an eventfd per MSI-X vector. The caller closes the
// client and the eventfds.
func attachVFIO(t *testing.T, path string, ramFD, size int) *viaVFIO {
	t.Helper()
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	c := vfiotest.NewClient(conn)
	if _, _, _, err := c.Version(vfiotest.QEMUVersionJSON); err != nil {
		t.Fatal(err)
	}
	dup, _ := unix.Dup(ramFD)
	if err := c.DMAMap(0, uint64(size), 0, dup, 3); err != nil {
		t.Fatal(err)
	}
	unix.Close(dup)
	v := &viaVFIO{c: c}
	for range pvrdma.Vectors {
		efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		v.efd = append(v.efd, efd)
	}
	if err := c.SetIRQs(2, 0x24, 0, pvrdma.Vectors, v.efd...); err != nil {
		t.Fatal(err)
	}
	return v
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// guestRAM is a shared memfd as QEMU's memory-backend-memfd,share=on.
func guestRAM(t *testing.T, size int) (fd int, ram *dma.Flat) {
	fd, err := unix.MemfdCreate("guest-ram", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem); unix.Close(fd) })
	return fd, &dma.Flat{Base: 0, Mem: mem}
}

// TestProbeOverVFIOUser runs the driver's probe and the MAD layer's setup
// through the real vfio-user server and device, then disconnects like a
// killed QEMU: the device is freed (no goroutines or fds left) and the
// server is ready for the next client.
func TestProbeOverVFIOUser(t *testing.T) {
	const size = 32 << 20
	ramFD, ram := guestRAM(t, size)
	goroutines, fds := runtime.NumGoroutine(), openFDs(t)

	l, err := vfio.Listen(t.TempDir() + "/hca.sock")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := &vfio.Server{NewDevice: func(h vfio.Host) (vfio.Device, error) {
		return pvrdma.New(pvrdma.Config{Name: "hca0", Mem: h.Mem, MSIX: h.MSIX, MAC: [6]byte{0, 0x50, 0x56, 1, 2, 3}}), nil
	}}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, l) }()

	for round := 0; round < 2; round++ {
		v := attachVFIO(t, l.Addr().String(), ramFD, size)
		c := v.c
		clear(ram.Mem)
		drv := emutest.NewWithRAM(ram)
		v.irq = drv.IRQ
		drv.Dev = v
		if err := drv.Probe(); err != nil {
			t.Fatalf("round %d: probe: %v", round, err)
		}
		if _, _, _, _, err := drv.KernelGSI(); err != nil {
			t.Fatalf("round %d: MAD layer: %v", round, err)
		}
		if drv.IRQ.Count[0].Load() == 0 {
			t.Fatal("no command interrupts arrived on the eventfd")
		}
		port, err := drv.QueryPort(1)
		if err != nil || port.State != abi.PortStateActive {
			t.Fatalf("QUERY_PORT: %v state %d", err, port.State)
		}
		// QEMU killed: the socket just closes.
		c.Close()
		for _, fd := range v.efd {
			unix.Close(fd)
		}
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) && (runtime.NumGoroutine() > goroutines || openFDs(t) > fds) {
		time.Sleep(10 * time.Millisecond)
	}
	if g, f := runtime.NumGoroutine(), openFDs(t); g > goroutines || f > fds {
		t.Fatalf("leak after disconnect: goroutines %d -> %d, fds %d -> %d", goroutines, g, fds, f)
	}
}
