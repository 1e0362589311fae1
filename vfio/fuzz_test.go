package vfio_test

import (
	"context"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/vfio"
	"github.com/hcaemu/hcaemu/vfio/vfiotest"
	"golang.org/x/sys/unix"
)

// wire builds one message.
func wire(id, cmd uint16, flags uint32, payload []byte) []byte {
	b := make([]byte, vfio.HeaderSize+len(payload))
	vfio.Header{ID: id, Command: cmd, Size: uint32(len(b)), Flags: flags}.Put(b)
	copy(b[vfio.HeaderSize:], payload)
	return b
}

func cat(bs ...[]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

// FuzzMessage feeds an arbitrary byte stream (with 0-3 eventfds attached to
// its first byte) into a negotiated connection and checks that the server
// neither panics nor hangs, and ends with no goroutine or fd left behind.
func FuzzMessage(f *testing.F) {
	u32s := func(vs ...uint32) []byte {
		b := make([]byte, 4*len(vs))
		for i, v := range vs {
			le.PutUint32(b[4*i:], v)
		}
		return b
	}
	getInfo := wire(1, vfio.CmdGetInfo, 0, u32s(16, 0, 0, 0))
	seeds := [][]byte{
		getInfo,
		wire(2, vfio.CmdGetRegionInfo, 0, u32s(32, 0, 2, 0, 0, 0, 0, 0)),
		wire(3, vfio.CmdGetIRQInfo, 0, u32s(16, 0, 2, 0)),
		wire(4, vfio.CmdSetIRQs, 0, u32s(20, 0x24, 2, 0, 1)),
		wire(5, vfio.CmdSetIRQs, 0, u32s(20, 0x24, 2, 1, 0xffffffff)),
		wire(6, vfio.CmdSetIRQs, 0, u32s(20, 0x21, 2, 0, 0)),
		wire(7, vfio.CmdRegionRead, 0, u32s(0, 0, 7, 256)),
		wire(8, vfio.CmdRegionWrite, vfio.FlagNoReply, u32s(0x10, 0, 1, 4, 1)),
		wire(9, vfio.CmdRegionWrite, 0, u32s(offPanic, 0, 1, 4, 1)),
		wire(10, vfio.CmdDMAMap, 0, cat(u32s(32, 3), make([]byte, 8), u32s(0, 0, 0x1000, 0))),
		wire(11, vfio.CmdDMAUnmap, 0, u32s(24, 2, 0, 0, 0, 0)),
		wire(12, vfio.CmdDeviceReset, 0, nil),
		wire(13, vfio.CmdDeviceFeature, 0, u32s(16, 1<<16|1)),
		wire(14, vfio.CmdVersion, 0, []byte{0, 0, 0, 0, '{', '}', 0}),
		wire(15, vfio.CmdDMARead, vfio.FlagReply, make([]byte, 16)),
		cat(getInfo, wire(16, vfio.CmdSetIRQs, 0, u32s(20, 0x24, 2, 0, 3)), getInfo),
		wire(17, vfio.CmdGetInfo, 0x2, nil),
		getInfo[:10],
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0},
	}
	for i, s := range seeds {
		f.Add(uint8(i%4), s)
	}
	f.Fuzz(func(t *testing.T, nfds uint8, stream []byte) {
		g0, fd0 := runtime.NumGoroutine(), countFDs(t)
		cl, sv, err := vfiotest.Pair()
		if err != nil {
			t.Fatal(err)
		}
		srv := &vfio.Server{NewDevice: func(h vfio.Host) (vfio.Device, error) { return newFakeDevice(h), nil }, Log: slogDiscard()}
		done := make(chan error, 1)
		go func() { done <- srv.ServeConn(context.Background(), sv) }()
		c := vfiotest.NewClient(cl)
		if _, _, _, err := c.Version(vfiotest.QEMUVersionJSON); err != nil {
			t.Fatal(err)
		}
		drained := make(chan struct{})
		go func() {
			io.Copy(io.Discard, cl)
			close(drained)
		}()
		var fds []int
		if len(stream) > 0 {
			for range nfds % 4 {
				fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
				if err != nil {
					t.Fatal(err)
				}
				fds = append(fds, fd)
			}
			// The server may close the connection before it has read
			// everything: write errors are expected.
			_ = c.SendRaw(stream, fds...)
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
		cl.CloseWrite()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("server did not finish the stream")
		}
		<-drained
		cl.Close()
		deadline := time.Now().Add(5 * time.Second)
		for {
			g, fd := runtime.NumGoroutine(), countFDs(t)
			if g <= g0 && fd <= fd0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("leak: goroutines %d -> %d, fds %d -> %d", g0, g, fd0, fd)
			}
			time.Sleep(time.Millisecond)
		}
	})
}
