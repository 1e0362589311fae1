package vfio_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/vfio"
	"github.com/hcaemu/hcaemu/vfio/vfiotest"
	"golang.org/x/sys/unix"
)

var le = binary.LittleEndian

const wantServerJSON = `{"capabilities":{"max_msg_fds":16,"max_data_xfer_size":1048576,"pgsizes":4096,"max_dma_maps":65535}}`

func TestVersion(t *testing.T) {
	s := serve(t, nil)
	major, minor, caps, err := s.c.Version(vfiotest.QEMUVersionJSON)
	if err != nil {
		t.Fatal(err)
	}
	if major != 0 || minor != 0 || caps != wantServerJSON {
		t.Fatalf("VERSION reply %d.%d %s, want 0.0 %s", major, minor, caps, wantServerJSON)
	}
	if strings.Contains(caps, "write_multiple") {
		t.Fatal("server offers write_multiple")
	}
	if s.device() == nil {
		t.Fatal("no device made after VERSION")
	}
	s.alive()
}

func TestVersionReplyFitsSmallRequest(t *testing.T) {
	s := serve(t, nil)
	// 20+20 bytes: only the smallest JSON fits. The client checks the
	// reply is no larger than the request and NUL-terminated.
	if _, _, caps, err := s.c.Version(`{"capabilities":{}}`); err != nil || caps != "{}" {
		t.Fatalf("VERSION = %q, %v", caps, err)
	}
}

func versionPayload(major, minor uint16, json string, nul bool) []byte {
	p := make([]byte, 4, 5+len(json))
	le.PutUint16(p[0:], major)
	le.PutUint16(p[2:], minor)
	p = append(p, json...)
	if nul {
		p = append(p, 0)
	}
	return p
}

func TestVersionRejects(t *testing.T) {
	for _, tc := range []struct {
		name    string
		payload []byte
	}{
		{"short", []byte{0, 0}},
		{"major 1", versionPayload(1, 0, `{}`, true)},
		{"no NUL", versionPayload(0, 0, `{}`, false)},
		{"NUL inside", versionPayload(0, 0, "{}\x00{}", true)},
		{"unterminated string", versionPayload(0, 0, `{"capabilities": "ab`, true)},
		{"unterminated object", versionPayload(0, 0, `{"capabilities": {`, true)},
		{"not an object", versionPayload(0, 0, `[1,2]`, true)},
		{"capabilities not an object", versionPayload(0, 0, `{"capabilities": 1}`, true)},
		{"capabilities null", versionPayload(0, 0, `{"capabilities": null}`, true)},
		{"max_msg_fds string", versionPayload(0, 0, `{"capabilities": {"max_msg_fds": "8"}}`, true)},
		{"max_msg_fds negative", versionPayload(0, 0, `{"capabilities": {"max_msg_fds": -1}}`, true)},
		{"max_msg_fds huge", versionPayload(0, 0, `{"capabilities": {"max_msg_fds": 1025}}`, true)},
		{"max_msg_fds float", versionPayload(0, 0, `{"capabilities": {"max_msg_fds": 1.5}}`, true)},
		{"max_data_xfer_size null", versionPayload(0, 0, `{"capabilities": {"max_data_xfer_size": null}}`, true)},
		{"migration not an object", versionPayload(0, 0, `{"capabilities": {"migration": 4096}}`, true)},
		{"pgsize wrong type", versionPayload(0, 0, `{"capabilities": {"migration": {"pgsize": "4k"}}}`, true)},
		{"write_multiple not bool", versionPayload(0, 0, `{"capabilities": {"write_multiple": 1}}`, true)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := serve(t, nil)
			_, err := s.c.Call(vfio.CmdVersion, 0, tc.payload)
			if vfiotest.Errno(err) != unix.EINVAL {
				t.Fatalf("VERSION = %v, want EINVAL", err)
			}
			s.wantClosed()
			if s.device() != nil {
				t.Fatal("device made for a failed VERSION")
			}
		})
	}
}

func TestVersionWithFDsRejectedAndClosed(t *testing.T) {
	s := serve(t, nil)
	efd := eventfd(t)
	before := countFDs(t)
	_, err := s.c.Call(vfio.CmdVersion, 0, versionPayload(0, 0, `{}`, true), efd)
	if vfiotest.Errno(err) != unix.EINVAL {
		t.Fatalf("VERSION with fd = %v, want EINVAL", err)
	}
	s.wantClosed()
	// The server's socket is gone; the fd it received must be gone too.
	isClosedOnServer(t, before-1)
}

func TestVersionMustComeFirst(t *testing.T) {
	s := serve(t, nil)
	if _, err := s.c.GetInfo(); vfiotest.Errno(err) != unix.EINVAL {
		t.Fatalf("GET_INFO before VERSION = %v, want EINVAL", err)
	}
	if _, _, _, err := s.c.Version(vfiotest.QEMUVersionJSON); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := s.c.Version(vfiotest.QEMUVersionJSON); vfiotest.Errno(err) != unix.EINVAL {
		t.Fatalf("second VERSION = %v, want EINVAL", err)
	}
	s.alive()
}

func TestVersionNewDeviceFails(t *testing.T) {
	s := serve(t, nil)
	s.mu.Lock()
	s.newErr = errors.New("no such device")
	s.mu.Unlock()
	if _, _, _, err := s.c.Version(vfiotest.QEMUVersionJSON); vfiotest.Errno(err) != unix.ENODEV {
		t.Fatalf("VERSION = %v, want ENODEV", err)
	}
	s.wantClosed()
}

func TestGetInfo(t *testing.T) {
	s := negotiated(t, nil)
	info, err := s.c.GetInfo()
	if err != nil {
		t.Fatal(err)
	}
	want := vfiotest.DeviceInfo{Argsz: 16, Flags: vfio.DeviceFlagPCI | vfio.DeviceFlagReset, NumRegions: 9, NumIRQs: 5}
	if diff := cmp.Diff(want, info); diff != "" {
		t.Fatalf("GET_INFO (-want +got):\n%s", diff)
	}
}

func TestRegionInfo(t *testing.T) {
	s := negotiated(t, nil)
	for i := range uint32(vfio.NumRegions) {
		got, err := s.c.RegionInfo(i)
		if err != nil {
			t.Fatalf("region %d: %v", i, err)
		}
		want := vfiotest.RegionInfo{Argsz: 32, Index: i, Size: fakeRegions[i]}
		if want.Size != 0 {
			want.Flags = vfio.RegionFlagRead | vfio.RegionFlagWrite
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("region %d (-want +got):\n%s", i, diff)
		}
	}
}

func TestIRQInfo(t *testing.T) {
	s := negotiated(t, nil)
	for _, tc := range []struct {
		index     uint32
		want      vfiotest.IRQInfo
		wantErrno unix.Errno
	}{
		{vfio.IRQINTx, vfiotest.IRQInfo{Argsz: 16, Flags: 7, Index: 0, Count: 0}, 0},
		{vfio.IRQMSI, vfiotest.IRQInfo{Argsz: 16, Flags: 1, Index: 1, Count: 0}, 0},
		{vfio.IRQMSIX, vfiotest.IRQInfo{Argsz: 16, Flags: vfio.IRQInfoEventfd, Index: 2, Count: 3}, 0},
		{vfio.IRQErr, vfiotest.IRQInfo{}, unix.EINVAL},
		{vfio.IRQReq, vfiotest.IRQInfo{Argsz: 16, Flags: 1, Index: 4, Count: 0}, 0},
		{5, vfiotest.IRQInfo{}, unix.EINVAL},
		{0xffffffff, vfiotest.IRQInfo{}, unix.EINVAL},
	} {
		got, err := s.c.IRQInfo(tc.index)
		if vfiotest.Errno(err) != tc.wantErrno || (tc.wantErrno == 0 && err != nil) {
			t.Errorf("IRQ info %d: %v, want errno %v", tc.index, err, tc.wantErrno)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("IRQ info %d (-want +got):\n%s", tc.index, diff)
		}
	}
	s.alive()
}

func TestIRQInfoErrNotifier(t *testing.T) {
	s := negotiated(t, func(d *fakeDevice) { d.irqs[vfio.IRQErr] = 5 }) // capped to 1
	got, err := s.c.IRQInfo(vfio.IRQErr)
	if err != nil || got.Count != 1 || got.Flags != vfio.IRQInfoEventfd {
		t.Fatalf("ERR info = %+v, %v", got, err)
	}
	efd := eventfd(t)
	if err := s.c.SetIRQs(vfio.IRQErr, vfio.IRQDataEventfd|vfio.IRQActionTrigger, 0, 1, efd); err != nil {
		t.Fatal(err)
	}
	if err := s.c.SetIRQs(vfio.IRQErr, vfio.IRQDataNone|vfio.IRQActionTrigger, 0, 1); err != nil {
		t.Fatal(err)
	}
	if n := waitEventfd(t, efd, 1); n != 1 {
		t.Fatalf("ERR eventfd = %d, want 1", n)
	}
	if err := s.c.SetIRQs(vfio.IRQErr, vfio.IRQDataEventfd|vfio.IRQActionTrigger, 0, 2); vfiotest.Errno(err) != unix.EINVAL {
		t.Fatalf("ERR count 2 = %v, want EINVAL", err)
	}
}

// TestReplySizes checks every reply against the sizes QEMU 11.1.3 receives
// into (spec §1.6).
func TestReplySizes(t *testing.T) {
	s := serve(t, nil)
	call := func(cmd uint16, flags uint32, p []byte, fds ...int) *vfiotest.Msg {
		t.Helper()
		m, err := s.c.Call(cmd, flags, p, fds...)
		if err != nil {
			t.Fatalf("%s: %v", vfio.CmdName(cmd), err)
		}
		return m
	}
	u32s := func(vs ...uint32) []byte {
		b := make([]byte, 4*len(vs))
		for i, v := range vs {
			le.PutUint32(b[4*i:], v)
		}
		return b
	}
	ver := versionPayload(0, 0, vfiotest.QEMUVersionJSON, true)
	if len(ver)+16 != 214 {
		t.Fatalf("QEMU VERSION request is %d bytes, want 214", len(ver)+16)
	}
	mem := memfd(t, 0x10000)
	efd := eventfd(t)
	for _, tc := range []struct {
		name    string
		cmd     uint16
		payload []byte
		fds     []int
		want    uint32
	}{
		{"VERSION", vfio.CmdVersion, ver, nil, 16 + 4 + uint32(len(wantServerJSON)) + 1},
		{"DMA_MAP", vfio.CmdDMAMap, append(u32s(32, 3), make([]byte, 24)...), []int{mem}, 16},
		{"DMA_UNMAP", vfio.CmdDMAUnmap, append(u32s(24, 0), make([]byte, 16)...), nil, 40},
		{"DEVICE_GET_INFO", vfio.CmdGetInfo, u32s(16, 0, 0, 0), nil, 32},
		{"DEVICE_GET_REGION_INFO", vfio.CmdGetRegionInfo, u32s(32, 0, 1, 0, 0, 0, 0, 0), nil, 48},
		{"DEVICE_GET_IRQ_INFO", vfio.CmdGetIRQInfo, u32s(16, 0, 2, 0), nil, 32},
		{"DEVICE_SET_IRQS", vfio.CmdSetIRQs, u32s(20, 0x24, 2, 0, 1), []int{efd}, 16},
		{"REGION_READ", vfio.CmdRegionRead, u32s(0, 0, 7, 256), nil, 32 + 256},
		{"REGION_WRITE", vfio.CmdRegionWrite, u32s(4, 0, 1, 4, 0xdead), nil, 32},
		{"DEVICE_RESET", vfio.CmdDeviceReset, nil, nil, 16},
	} {
		// DMA_MAP at iova 0 size 0x10000: fix up the payload.
		if tc.cmd == vfio.CmdDMAMap {
			le.PutUint64(tc.payload[24:], 0x10000)
		}
		if tc.cmd == vfio.CmdDMAUnmap {
			le.PutUint64(tc.payload[16:], 0x10000)
		}
		m := call(tc.cmd, 0, tc.payload, tc.fds...)
		if m.Header.Size != tc.want || m.Header.Flags != vfio.FlagReply || m.Header.Errno != 0 {
			t.Errorf("%s reply: size %d flags %#x errno %d, want size %d flags 0x1", tc.name, m.Header.Size, m.Header.Flags, m.Header.Errno, tc.want)
		}
	}
}

func TestRegionReadWrite(t *testing.T) {
	s := negotiated(t, nil)
	if err := s.c.RegionWrite(vfio.RegionBAR1, 0x10, []byte{1, 2, 3, 4}, false); err != nil {
		t.Fatal(err)
	}
	// Posted writes get no reply; a later read observes them, in order.
	if err := s.c.RegionWrite(vfio.RegionBAR1, 0x10, []byte{5, 6}, true); err != nil {
		t.Fatal(err)
	}
	if err := s.c.RegionWrite(vfio.RegionBAR2, 0x1ff8, []byte{1, 2, 3, 4, 5, 6, 7, 8}, true); err != nil {
		t.Fatal(err)
	}
	got, err := s.c.RegionRead(vfio.RegionBAR1, 0x10, 4)
	if err != nil || !bytes.Equal(got, []byte{5, 6, 3, 4}) {
		t.Fatalf("read = %x, %v; want 05060304", got, err)
	}
	got, err = s.c.RegionRead(vfio.RegionBAR2, 0x1ff8, 8)
	if err != nil || !bytes.Equal(got, []byte{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Fatalf("read BAR2 = %x, %v", got, err)
	}
	// Whole config space in one read, as QEMU does at realize.
	if got, err := s.c.RegionRead(vfio.RegionConfig, 0, 256); err != nil || len(got) != 256 {
		t.Fatalf("config read: %d bytes, %v", len(got), err)
	}
	want := []string{
		"write 1 0x10 01020304", "write 1 0x10 0506", "write 2 0x1ff8 0102030405060708",
		"read 1 0x10 4", "read 2 0x1ff8 8", "read 7 0x0 256",
	}
	if diff := cmp.Diff(want, s.device().Calls()); diff != "" {
		t.Fatalf("device calls (-want +got):\n%s", diff)
	}
}

func regionReq(off uint64, region, count uint32, data []byte) []byte {
	p := make([]byte, 16, 16+len(data))
	le.PutUint64(p[0:], off)
	le.PutUint32(p[8:], region)
	le.PutUint32(p[12:], count)
	return append(p, data...)
}

func TestRegionAccessRejects(t *testing.T) {
	s := negotiated(t, nil)
	for _, tc := range []struct {
		name    string
		cmd     uint16
		payload []byte
		want    unix.Errno
	}{
		{"read short payload", vfio.CmdRegionRead, make([]byte, 15), unix.EINVAL},
		{"read extra payload", vfio.CmdRegionRead, regionReq(0, 1, 4, []byte{0}), unix.EINVAL},
		{"read region 9", vfio.CmdRegionRead, regionReq(0, 9, 4, nil), unix.EINVAL},
		{"read region huge", vfio.CmdRegionRead, regionReq(0, 0xffffffff, 4, nil), unix.EINVAL},
		{"read absent region", vfio.CmdRegionRead, regionReq(0, 3, 4, nil), unix.EINVAL},
		{"read ROM", vfio.CmdRegionRead, regionReq(0x0, vfio.RegionROM, 4, nil), unix.EINVAL},
		{"read count 0", vfio.CmdRegionRead, regionReq(0, 1, 0, nil), unix.EINVAL},
		{"read beyond end", vfio.CmdRegionRead, regionReq(0xfe, 1, 4, nil), unix.EINVAL},
		{"read offset overflow", vfio.CmdRegionRead, regionReq(^uint64(0)-1, 1, 4, nil), unix.EINVAL},
		{"read count > max", vfio.CmdRegionRead, regionReq(0, 1, vfio.MaxDataXferSize+1, nil), unix.EINVAL},
		{"read device error", vfio.CmdRegionRead, regionReq(offError, 1, 4, nil), unix.EIO},
		{"read device panic", vfio.CmdRegionRead, regionReq(offPanic, 1, 4, nil), unix.EIO},
		{"write short data", vfio.CmdRegionWrite, regionReq(0, 1, 4, []byte{1, 2}), unix.EINVAL},
		{"write long data", vfio.CmdRegionWrite, regionReq(0, 1, 2, []byte{1, 2, 3}), unix.EINVAL},
		{"write count 0", vfio.CmdRegionWrite, regionReq(0, 1, 0, nil), unix.EINVAL},
		{"write beyond end", vfio.CmdRegionWrite, regionReq(0x100, 1, 1, []byte{1}), unix.EINVAL},
		{"write absent region", vfio.CmdRegionWrite, regionReq(0, 8, 1, []byte{1}), unix.EINVAL},
		{"write device error", vfio.CmdRegionWrite, regionReq(offError, 1, 1, []byte{1}), unix.EPERM},
		{"write device panic", vfio.CmdRegionWrite, regionReq(offPanic, 1, 1, []byte{1}), unix.EIO},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.c.Call(tc.cmd, 0, tc.payload); vfiotest.Errno(err) != tc.want {
				t.Fatalf("= %v, want %v", err, tc.want)
			}
			s.alive()
		})
	}
	// The same failures posted: never a reply (the next call's reply
	// would not match otherwise), connection goes on.
	for _, p := range [][]byte{
		regionReq(0, 9, 1, []byte{1}), regionReq(0x100, 1, 1, []byte{1}),
		regionReq(offError, 1, 1, []byte{1}), regionReq(offPanic, 1, 1, []byte{1}),
		regionReq(0, 1, 4, []byte{1}),
	} {
		if _, err := s.c.Call(vfio.CmdRegionWrite, vfio.FlagNoReply, p); err != nil {
			t.Fatal(err)
		}
	}
	s.alive()
}

func TestNoReplyOnAnyCommand(t *testing.T) {
	s := negotiated(t, nil)
	for _, cmd := range []uint16{vfio.CmdGetInfo, vfio.CmdDeviceReset, vfio.CmdDeviceFeature, 99} {
		var p []byte
		if cmd == vfio.CmdGetInfo {
			p = make([]byte, 16)
			le.PutUint32(p, 16)
		}
		if _, err := s.c.Call(cmd, vfio.FlagNoReply, p); err != nil {
			t.Fatal(err)
		}
	}
	s.alive()
	if got := s.device().Calls(); len(got) != 1 || got[0] != "reset" {
		t.Fatalf("device calls %q, want one reset", got)
	}
}

func TestResetAndUnsupported(t *testing.T) {
	s := negotiated(t, nil)
	if err := s.c.Reset(); err != nil {
		t.Fatal(err)
	}
	if err := s.c.Reset(); err != nil {
		t.Fatal(err)
	}
	if n := s.device().resetCount(); n != 2 {
		t.Fatalf("%d resets, want 2", n)
	}
	if _, err := s.c.Call(vfio.CmdDeviceReset, 0, []byte{1, 2, 3, 4}); vfiotest.Errno(err) != unix.EINVAL {
		t.Fatalf("RESET with payload = %v, want EINVAL", err)
	}
	for _, tc := range []struct {
		cmd  uint16
		p    []byte
		want unix.Errno
	}{
		{vfio.CmdDeviceFeature, []byte{16, 0, 0, 0, 1, 0, 1, 0}, unix.ENOTTY},
		{vfio.CmdGetRegionIOFDs, make([]byte, 16), unix.EINVAL},
		{vfio.CmdDirtyPages, make([]byte, 16), unix.EINVAL},
		{vfio.CmdRegionWriteMulti, make([]byte, 8), unix.EINVAL},
		{vfio.CmdDMARead, make([]byte, 16), unix.EINVAL},
		{vfio.CmdDMAWrite, make([]byte, 16), unix.EINVAL},
		{0, nil, unix.ENOSYS},
		{17, nil, unix.ENOSYS},
		{0xffff, make([]byte, 100), unix.ENOSYS},
	} {
		if _, err := s.c.Call(tc.cmd, 0, tc.p); vfiotest.Errno(err) != tc.want {
			t.Errorf("%s = %v, want %v", vfio.CmdName(tc.cmd), err, tc.want)
		}
	}
	s.alive()
}

func TestFixedRequestRejects(t *testing.T) {
	s := negotiated(t, nil)
	u32s := func(vs ...uint32) []byte {
		b := make([]byte, 4*len(vs))
		for i, v := range vs {
			le.PutUint32(b[4*i:], v)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		cmd  uint16
		p    []byte
	}{
		{"GET_INFO empty", vfio.CmdGetInfo, nil},
		{"GET_INFO short", vfio.CmdGetInfo, u32s(16, 0, 0)},
		{"GET_INFO argsz 15", vfio.CmdGetInfo, u32s(15, 0, 0, 0)},
		{"REGION_INFO short", vfio.CmdGetRegionInfo, u32s(32, 0, 1)},
		{"REGION_INFO argsz 31", vfio.CmdGetRegionInfo, u32s(31, 0, 1, 0, 0, 0, 0, 0)},
		{"REGION_INFO index 9", vfio.CmdGetRegionInfo, u32s(32, 0, 9, 0, 0, 0, 0, 0)},
		{"REGION_INFO index huge", vfio.CmdGetRegionInfo, u32s(32, 0, 0xffffffff, 0, 0, 0, 0, 0)},
		{"IRQ_INFO short", vfio.CmdGetIRQInfo, u32s(16, 0)},
		{"IRQ_INFO argsz 15", vfio.CmdGetIRQInfo, u32s(15, 0, 2, 0)},
	} {
		if _, err := s.c.Call(tc.cmd, 0, tc.p); vfiotest.Errno(err) != unix.EINVAL {
			t.Errorf("%s = %v, want EINVAL", tc.name, err)
		}
	}
	s.alive()
}

func TestDMAMapAndAccess(t *testing.T) {
	s := negotiated(t, nil)
	const ramSize = 0x40000
	ram := memfd(t, ramSize)
	before := countFDs(t)
	// RAM in two windows of one memfd, like QEMU around the 4 GiB hole;
	// BIOS ROM without fd.
	if err := s.c.DMAMap(0, 0x20000, 0, ram, vfio.DMAFlagRead|vfio.DMAFlagWrite); err != nil {
		t.Fatal(err)
	}
	if err := s.c.DMAMap(0x100000000, 0x20000, 0x20000, ram, vfio.DMAFlagRead|vfio.DMAFlagWrite); err != nil {
		t.Fatal(err)
	}
	if err := s.c.DMAMap(0xfffc0000, 0x40000, 0, -1, vfio.DMAFlagRead); err != nil {
		t.Fatal(err)
	}
	// One fd kept for the two windows of the same file.
	if got := countFDs(t); got != before+1 {
		t.Fatalf("server holds %d fds for one backing file, want 1", got-before)
	}
	mem := s.device().host.Mem
	if _, err := unix.Pwrite(ram, []byte("guest"), 0x20010); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if err := mem.ReadAt(got, 0x100000010); err != nil || string(got) != "guest" {
		t.Fatalf("device read %q, %v", got, err)
	}
	if err := mem.WriteAt([]byte("dev"), 0x100); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Pread(ram, got[:3], 0x100); err != nil || string(got[:3]) != "dev" {
		t.Fatalf("guest sees %q, %v", got[:3], err)
	}
	if err := mem.ReadAt(got, 0xfffc0000); !errors.Is(err, dma.ErrFault) {
		t.Fatalf("read of fd-less window = %v, want ErrFault", err)
	}
	// Unmap one RAM window: its addresses fault, the other still works.
	if err := s.c.DMAUnmap(0, 0x20000, 0); err != nil {
		t.Fatal(err)
	}
	if err := mem.ReadAt(got, 0x100); !errors.Is(err, dma.ErrFault) {
		t.Fatalf("read after unmap = %v, want ErrFault", err)
	}
	if err := mem.ReadAt(got, 0x100000010); err != nil {
		t.Fatal(err)
	}
	if err := s.c.DMAUnmap(0, 0, vfio.DMAUnmapAll); err != nil {
		t.Fatal(err)
	}
	if err := mem.ReadAt(got, 0x100000010); !errors.Is(err, dma.ErrFault) {
		t.Fatalf("read after UNMAP_ALL = %v, want ErrFault", err)
	}
	isClosedOnServer(t, before)
}

func dmaMapReq(argsz, flags uint32, off, iova, size uint64) []byte {
	p := make([]byte, 32)
	le.PutUint32(p[0:], argsz)
	le.PutUint32(p[4:], flags)
	le.PutUint64(p[8:], off)
	le.PutUint64(p[16:], iova)
	le.PutUint64(p[24:], size)
	return p
}

func dmaUnmapReq(argsz, flags uint32, iova, size uint64) []byte {
	p := make([]byte, 24)
	le.PutUint32(p[0:], argsz)
	le.PutUint32(p[4:], flags)
	le.PutUint64(p[8:], iova)
	le.PutUint64(p[16:], size)
	return p
}

func TestDMARejects(t *testing.T) {
	s := negotiated(t, nil)
	ram := memfd(t, 0x10000)
	if err := s.c.DMAMap(0x10000, 0x10000, 0, ram, 3); err != nil {
		t.Fatal(err)
	}
	efd := eventfd(t)
	before := countFDs(t)
	for _, tc := range []struct {
		name  string
		cmd   uint16
		p     []byte
		nfds  int
		errno unix.Errno
	}{
		{"map short payload", vfio.CmdDMAMap, make([]byte, 31), 0, unix.EINVAL},
		{"map argsz 31", vfio.CmdDMAMap, dmaMapReq(31, 3, 0, 0x40000, 0x1000), 0, unix.EINVAL},
		{"map unknown flags", vfio.CmdDMAMap, dmaMapReq(32, 7, 0, 0x40000, 0x1000), 1, unix.EINVAL},
		{"map size 0", vfio.CmdDMAMap, dmaMapReq(32, 3, 0, 0x40000, 0), 1, unix.EINVAL},
		{"map overflow", vfio.CmdDMAMap, dmaMapReq(32, 3, 0, ^uint64(0)-0xfff, 0x2000), 0, unix.EINVAL},
		{"map overlap", vfio.CmdDMAMap, dmaMapReq(32, 3, 0, 0x18000, 0x10000), 1, unix.EEXIST},
		{"map identical", vfio.CmdDMAMap, dmaMapReq(32, 3, 0, 0x10000, 0x10000), 1, unix.EEXIST},
		{"map two fds", vfio.CmdDMAMap, dmaMapReq(32, 3, 0, 0x40000, 0x1000), 2, unix.EINVAL},
		{"map beyond file", vfio.CmdDMAMap, dmaMapReq(32, 3, 0x8000, 0x40000, 0x9000), 1, unix.EINVAL},
		{"map eventfd as RAM", vfio.CmdDMAMap, dmaMapReq(32, 3, 0, 0x40000, 0x1000), -1, unix.EINVAL},
		{"unmap short", vfio.CmdDMAUnmap, make([]byte, 23), 0, unix.EINVAL},
		{"unmap argsz 23", vfio.CmdDMAUnmap, dmaUnmapReq(23, 0, 0x10000, 0x10000), 0, unix.EINVAL},
		{"unmap unknown flags", vfio.CmdDMAUnmap, dmaUnmapReq(24, 4, 0x10000, 0x10000), 0, unix.EINVAL},
		{"unmap dirty bitmap", vfio.CmdDMAUnmap, dmaUnmapReq(24, 1, 0x10000, 0x10000), 0, unix.EINVAL},
		{"unmap all nonzero", vfio.CmdDMAUnmap, dmaUnmapReq(24, 2, 0x10000, 0x10000), 0, unix.EINVAL},
		{"unmap partial", vfio.CmdDMAUnmap, dmaUnmapReq(24, 0, 0x10000, 0x1000), 0, unix.ENOENT},
		{"unmap inside", vfio.CmdDMAUnmap, dmaUnmapReq(24, 0, 0x11000, 0xf000), 0, unix.ENOENT},
		{"unmap nothing", vfio.CmdDMAUnmap, dmaUnmapReq(24, 0, 0x80000, 0x1000), 0, unix.ENOENT},
		{"unmap with fd", vfio.CmdDMAUnmap, dmaUnmapReq(24, 0, 0x10000, 0x10000), 1, unix.EINVAL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fds []int
			switch {
			case tc.nfds < 0:
				fds = []int{efd}
			default:
				for range tc.nfds {
					fds = append(fds, ram)
				}
			}
			if _, err := s.c.Call(tc.cmd, 0, tc.p, fds...); vfiotest.Errno(err) != tc.errno {
				t.Fatalf("= %v, want %v", err, tc.errno)
			}
			isClosedOnServer(t, before)
		})
	}
	// The original window is intact.
	var b [1]byte
	if err := s.device().host.Mem.ReadAt(b[:], 0x10000); err != nil {
		t.Fatal(err)
	}
}

const trigEventfd = vfio.IRQDataEventfd | vfio.IRQActionTrigger

func TestSetIRQsMSIX(t *testing.T) {
	s := negotiated(t, nil)
	msix := s.device().host.MSIX
	e := []int{eventfd(t), eventfd(t), eventfd(t)}
	base := countFDs(t) // with our own three

	// QEMU's enable sequence: INTx off, "enabled, no vectors", then fds.
	if err := s.c.SetIRQs(vfio.IRQINTx, vfio.IRQDataNone|vfio.IRQActionTrigger, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.c.SetIRQs(vfio.IRQMSIX, trigEventfd, 0, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.c.SetIRQs(vfio.IRQMSIX, trigEventfd, 0, 3, e...); err != nil {
		t.Fatal(err)
	}
	if got := heldFDs(t, base, 3); got != 3 {
		t.Fatalf("server holds %d eventfds, want 3", got)
	}
	msix(0)
	msix(2)
	msix(2)
	msix(3)  // out of range: dropped
	msix(-1) // dropped
	if got := []uint64{waitEventfd(t, e[0], 1), readEventfd(t, e[1]), waitEventfd(t, e[2], 2)}; !cmp.Equal(got, []uint64{1, 0, 2}) {
		t.Fatalf("eventfd counters %v, want [1 0 2]", got)
	}

	// De-assign vector 2 alone (start > 0): nothing written, fd closed.
	if err := s.c.SetIRQs(vfio.IRQMSIX, trigEventfd, 2, 1); err != nil {
		t.Fatal(err)
	}
	if got := heldFDs(t, base, 2); got != 2 {
		t.Fatalf("server holds %d eventfds after de-assigning one, want 2", got)
	}
	msix(2)
	msix(1)
	if n := readEventfd(t, e[2]); n != 0 {
		t.Fatalf("de-assigned vector 2 signalled %d times", n)
	}
	if n := waitEventfd(t, e[1], 1); n != 1 {
		t.Fatalf("vector 1 signalled %d times, want 1", n)
	}

	// Replace vector 1: the old fd is closed, the new one signalled.
	if err := s.c.SetIRQs(vfio.IRQMSIX, trigEventfd, 1, 1, e[2]); err != nil {
		t.Fatal(err)
	}
	if got := heldFDs(t, base, 2); got != 2 {
		t.Fatalf("server holds %d eventfds after replacing one, want 2", got)
	}
	msix(1)
	if a, b := readEventfd(t, e[1]), waitEventfd(t, e[2], 1); a != 0 || b != 1 {
		t.Fatalf("after swap: old %d new %d, want 0 1", a, b)
	}

	// DATA_NONE and DATA_BOOL triggers from the client.
	if err := s.c.SetIRQs(vfio.IRQMSIX, vfio.IRQDataNone|vfio.IRQActionTrigger, 0, 2); err != nil {
		t.Fatal(err)
	}
	if a, b := waitEventfd(t, e[0], 1), waitEventfd(t, e[2], 1); a != 1 || b != 1 {
		t.Fatalf("DATA_NONE trigger: %d %d, want 1 1", a, b)
	}
	p := make([]byte, 22)
	le.PutUint32(p[0:], 22)
	le.PutUint32(p[4:], vfio.IRQDataBool|vfio.IRQActionTrigger)
	le.PutUint32(p[8:], vfio.IRQMSIX)
	le.PutUint32(p[12:], 0)
	le.PutUint32(p[16:], 2)
	p[20], p[21] = 0, 1
	if _, err := s.c.Call(vfio.CmdSetIRQs, 0, p); err != nil {
		t.Fatal(err)
	}
	if a, b := readEventfd(t, e[0]), waitEventfd(t, e[2], 1); a != 0 || b != 1 {
		t.Fatalf("DATA_BOOL trigger: %d %d, want 0 1", a, b)
	}

	// Mask/unmask are accepted and change nothing.
	if err := s.c.SetIRQs(vfio.IRQMSIX, vfio.IRQDataNone|vfio.IRQActionMask, 0, 1); err != nil {
		t.Fatal(err)
	}
	msix(0)
	if n := waitEventfd(t, e[0], 1); n != 1 {
		t.Fatalf("after MASK vector 0 signalled %d, want 1", n)
	}

	// Disable the index: every fd closed, nothing signalled.
	if err := s.c.SetIRQs(vfio.IRQMSIX, vfio.IRQDataNone|vfio.IRQActionTrigger, 0, 0); err != nil {
		t.Fatal(err)
	}
	if got := heldFDs(t, base, 0); got != 0 {
		t.Fatalf("server holds %d eventfds after disable", got)
	}
	for v := range 3 {
		msix(v)
	}
	for i, fd := range e {
		if n := readEventfd(t, fd); n != 0 {
			t.Fatalf("eventfd %d signalled after disable", i)
		}
	}
}

func TestSetIRQsRejects(t *testing.T) {
	s := negotiated(t, nil)
	efd := eventfd(t)
	var pipe [2]int
	if err := unix.Pipe2(pipe[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pipe[0])
	defer unix.Close(pipe[1])
	before := countFDs(t)
	req := func(argsz, flags, index, start, count uint32, extra ...byte) []byte {
		p := make([]byte, 20, 20+len(extra))
		le.PutUint32(p[0:], argsz)
		le.PutUint32(p[4:], flags)
		le.PutUint32(p[8:], index)
		le.PutUint32(p[12:], start)
		le.PutUint32(p[16:], count)
		return append(p, extra...)
	}
	const none = vfio.IRQDataNone | vfio.IRQActionTrigger
	for _, tc := range []struct {
		name string
		p    []byte
		fds  []int
	}{
		{"short payload", make([]byte, 19), nil},
		{"argsz 19", req(19, trigEventfd, 2, 0, 1), nil},
		{"argsz beyond payload", req(24, trigEventfd, 2, 0, 1), nil},
		{"start 1 count max (overflow)", req(20, trigEventfd, 2, 1, 0xffffffff), nil},
		{"start max count 2 (overflow)", req(20, trigEventfd, 2, 0xffffffff, 2), nil},
		{"start 3", req(20, trigEventfd, 2, 3, 1), []int{efd}},
		{"start 2 count 2", req(20, trigEventfd, 2, 2, 2), []int{efd, efd}},
		{"index 5", req(20, trigEventfd, 5, 0, 1), []int{efd}},
		{"index max", req(20, none, 0xffffffff, 0, 0), nil},
		{"two data bits", req(20, vfio.IRQDataNone|vfio.IRQDataEventfd|vfio.IRQActionTrigger, 2, 0, 1), nil},
		{"two action bits", req(20, vfio.IRQDataNone|vfio.IRQActionMask|vfio.IRQActionTrigger, 2, 0, 1), nil},
		{"no action", req(20, vfio.IRQDataNone, 2, 0, 1), nil},
		{"no data", req(20, vfio.IRQActionTrigger, 2, 0, 1), nil},
		{"unknown flag", req(20, none|0x40, 2, 0, 1), nil},
		{"count 0 with EVENTFD", req(20, trigEventfd, 2, 0, 0), nil},
		{"count 0 with start 1", req(20, none, 2, 1, 0), nil},
		{"count 0 with MASK", req(20, vfio.IRQDataNone|vfio.IRQActionMask, 2, 0, 0), nil},
		{"fds without EVENTFD", req(20, none, 2, 0, 1), []int{efd}},
		{"fds on disable", req(20, none, 2, 0, 0), []int{efd}},
		{"1 fd for count 2", req(20, trigEventfd, 2, 0, 2), []int{efd}},
		{"3 fds for count 2", req(20, trigEventfd, 2, 0, 2), []int{efd, efd, efd}},
		{"pipe as eventfd", req(20, trigEventfd, 2, 0, 1), []int{pipe[1]}},
		{"BOOL short", req(21, vfio.IRQDataBool|vfio.IRQActionTrigger, 2, 0, 2, 1), nil},
		{"BOOL long", req(23, vfio.IRQDataBool|vfio.IRQActionTrigger, 2, 0, 2, 1, 1, 1), nil},
		{"data after NONE", req(21, none, 2, 0, 1, 1), nil},
		{"INTx vector (count 0)", req(20, trigEventfd, 0, 0, 1), []int{efd}},
		{"MSI vector (count 0)", req(20, trigEventfd, 1, 0, 1), []int{efd}},
		{"ERR vector (count 0)", req(20, trigEventfd, 3, 0, 1), []int{efd}},
		{"too many fds", req(20, trigEventfd, 2, 0, 17), []int{efd, efd, efd, efd, efd, efd, efd, efd, efd, efd, efd, efd, efd, efd, efd, efd, efd}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.c.Call(vfio.CmdSetIRQs, 0, tc.p, tc.fds...); vfiotest.Errno(err) != unix.EINVAL {
				t.Fatalf("= %v, want EINVAL", err)
			}
			isClosedOnServer(t, before)
		})
	}
	// Disable is accepted on every index, as QEMU sends it for INTx.
	for i := range uint32(vfio.NumIRQs) {
		if err := s.c.SetIRQs(i, none, 0, 0); err != nil {
			t.Errorf("disable index %d: %v", i, err)
		}
	}
	s.alive()
}

// TestMSIXRacesSetIRQs signals vectors from many goroutines while the client
// keeps swapping and removing their eventfds (run with -race).
func TestMSIXRacesSetIRQs(t *testing.T) {
	s := negotiated(t, nil)
	msix := s.device().host.MSIX
	e := []int{eventfd(t), eventfd(t), eventfd(t)}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				msix((g + i) % 3)
				if i%16 == 0 {
					// Leave the scheduler room to run the server and
					// client on small machines.
					time.Sleep(10 * time.Microsecond)
				}
			}
		})
	}
	for i := range 300 {
		var err error
		switch i % 3 {
		case 0:
			err = s.c.SetIRQs(vfio.IRQMSIX, trigEventfd, 0, 3, e...)
		case 1:
			err = s.c.SetIRQs(vfio.IRQMSIX, trigEventfd, uint32(i%3), 1, e[i%3])
		case 2:
			err = s.c.SetIRQs(vfio.IRQMSIX, vfio.IRQDataNone|vfio.IRQActionTrigger, 0, 0)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	// Whatever the race left installed, an interrupt raised on a freshly
	// assigned vector arrives.
	if err := s.c.SetIRQs(vfio.IRQMSIX, trigEventfd, 0, 3, e...); err != nil {
		t.Fatal(err)
	}
	msix(0)
	if total := waitEventfd(t, e[0], 1); total == 0 {
		t.Fatal("no interrupt was delivered")
	}
}

func TestFDsOnCommandsThatTakeNone(t *testing.T) {
	s := negotiated(t, nil)
	efd := eventfd(t)
	before := countFDs(t)
	p := make([]byte, 16)
	le.PutUint32(p, 16)
	if _, err := s.c.Call(vfio.CmdGetInfo, 0, p, efd, efd); vfiotest.Errno(err) != unix.EINVAL {
		t.Fatalf("GET_INFO with fds = %v, want EINVAL", err)
	}
	isClosedOnServer(t, before)
	// Posted write with an fd: no reply, fd closed, write not done.
	if _, err := s.c.Call(vfio.CmdRegionWrite, vfio.FlagNoReply, regionReq(0, 1, 1, []byte{7}), efd); err != nil {
		t.Fatal(err)
	}
	if _, err := s.c.Call(vfio.CmdDeviceReset, 0, nil, efd); vfiotest.Errno(err) != unix.EINVAL {
		t.Fatalf("RESET with fd = %v, want EINVAL", err)
	}
	s.alive()
	isClosedOnServer(t, before)
	if got := s.device().Calls(); len(got) != 0 {
		t.Fatalf("device calls %q for rejected requests", got)
	}
}

func TestUnsolicitedReplyIgnored(t *testing.T) {
	s := negotiated(t, nil)
	efd := eventfd(t)
	before := countFDs(t)
	h := vfio.Header{ID: 77, Command: vfio.CmdDMARead, Flags: vfio.FlagReply}
	if err := s.c.Send(h, make([]byte, 16), efd); err != nil {
		t.Fatal(err)
	}
	h.Flags = vfio.FlagReply | vfio.FlagError
	h.Errno = 5
	if err := s.c.Send(h, nil); err != nil {
		t.Fatal(err)
	}
	s.alive() // its reply must be the next message
	isClosedOnServer(t, before)
}

func TestFramingErrorsCloseConnection(t *testing.T) {
	hdr := func(size, flags uint32) []byte {
		b := make([]byte, 16)
		vfio.Header{ID: 1, Command: vfio.CmdGetInfo, Size: size, Flags: flags}.Put(b)
		return b
	}
	for _, tc := range []struct {
		name string
		send func(c *vfiotest.Client, efd int) error
	}{
		{"size 0", func(c *vfiotest.Client, _ int) error { return c.SendRaw(hdr(0, 0)) }},
		{"size 15", func(c *vfiotest.Client, _ int) error { return c.SendRaw(hdr(15, 0)) }},
		{"size too large", func(c *vfiotest.Client, _ int) error { return c.SendRaw(hdr(vfio.MaxMsgSize+1, 0)) }},
		{"size max uint32", func(c *vfiotest.Client, efd int) error { return c.SendRaw(hdr(0xffffffff, 0), efd) }},
		{"type 2", func(c *vfiotest.Client, _ int) error { return c.SendRaw(hdr(16, 2)) }},
		{"type 15 with fd", func(c *vfiotest.Client, efd int) error { return c.SendRaw(hdr(16, 0xf), efd) }},
		{"truncated body then EOF", func(c *vfiotest.Client, efd int) error {
			if err := c.SendRaw(hdr(32, 0)[:16], efd); err != nil {
				return err
			}
			return c.Conn.CloseWrite()
		}},
		{"70 fds (MSG_CTRUNC)", func(c *vfiotest.Client, efd int) error {
			fds := make([]int, 70)
			for i := range fds {
				fds[i] = efd
			}
			return c.SendRaw(hdr(32, 0), fds...)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := negotiated(t, nil)
			efd := eventfd(t)
			if err := tc.send(s.c, efd); err != nil {
				t.Fatal(err)
			}
			if tc.name == "truncated body then EOF" {
				// A clean-ish EOF mid-message is still an error.
				select {
				case err := <-s.done:
					if err == nil {
						t.Error("ServeConn returned nil for a truncated message")
					}
					s.done <- err
				case <-time.After(time.Minute):
					t.Fatal("ServeConn did not return")
				}
				return
			}
			s.wantClosed()
		})
	}
}

func TestLargeRegionWrite(t *testing.T) {
	s := negotiated(t, func(d *fakeDevice) {})
	// The largest legal message: a max_data_xfer_size write, here to config
	// space it does not fit, so EINVAL, but the framing must accept it.
	data := make([]byte, vfio.MaxDataXferSize)
	if err := s.c.RegionWrite(vfio.RegionConfig, 0, data, false); vfiotest.Errno(err) != unix.EINVAL {
		t.Fatalf("1 MiB write = %v, want EINVAL", err)
	}
	s.alive()
}

func TestEOFTearsDown(t *testing.T) {
	checkLeaks(t)
	cl, sv, err := vfiotest.Pair()
	if err != nil {
		t.Fatal(err)
	}
	var dev *fakeDevice
	srv := &vfio.Server{NewDevice: func(h vfio.Host) (vfio.Device, error) {
		dev = newFakeDevice(h)
		return dev, nil
	}, Log: slogDiscard()}
	done := make(chan error, 1)
	go func() { done <- srv.ServeConn(context.Background(), sv) }()
	c := vfiotest.NewClient(cl)
	if _, _, _, err := c.Version(vfiotest.QEMUVersionJSON); err != nil {
		t.Fatal(err)
	}
	ram := memfd(t, 0x10000)
	efd := eventfd(t)
	if err := c.DMAMap(0, 0x10000, 0, ram, 3); err != nil {
		t.Fatal(err)
	}
	if err := c.SetIRQs(vfio.IRQMSIX, trigEventfd, 0, 1, efd); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := <-done; err != nil {
		t.Fatalf("ServeConn after EOF = %v, want nil", err)
	}
	if dev.closed != 1 {
		t.Fatalf("Device.Close called %d times", dev.closed)
	}
	if err := dev.host.Mem.ReadAt(make([]byte, 1), 0); !errors.Is(err, dma.ErrFault) {
		t.Fatalf("DMA after disconnect = %v, want ErrFault", err)
	}
	dev.host.MSIX(0)
	if n := readEventfd(t, efd); n != 0 {
		t.Fatal("interrupt delivered after disconnect")
	}
}

func TestServeListener(t *testing.T) {
	checkLeaks(t)
	path := filepath.Join(t.TempDir(), "pvrdma.sock")
	// A stale socket file from a dead server.
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	l, err := vfio.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	// A second server on a live socket is refused.
	if l2, err := vfio.Listen(path); err == nil {
		l2.Close()
		t.Fatal("Listen on a live socket succeeded")
	}
	var mu sync.Mutex
	var devs []*fakeDevice
	srv := &vfio.Server{NewDevice: func(h vfio.Host) (vfio.Device, error) {
		d := newFakeDevice(h)
		mu.Lock()
		devs = append(devs, d)
		mu.Unlock()
		return d, nil
	}, Log: slogDiscard()}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, l) }()
	var clients []*vfiotest.Client
	for range 3 {
		conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		c := vfiotest.NewClient(conn)
		defer c.Close()
		if _, _, _, err := c.Version(vfiotest.QEMUVersionJSON); err != nil {
			t.Fatal(err)
		}
		if err := c.RegionWrite(vfio.RegionBAR1, 0, []byte{byte(len(clients))}, false); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	// Each connection has its own function.
	for i, c := range clients {
		if b, err := c.RegionRead(vfio.RegionBAR1, 0, 1); err != nil || b[0] != byte(i) {
			t.Fatalf("client %d reads %v, %v", i, b, err)
		}
	}
	clients[0].Close() // one client leaves early
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve = %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Serve did not return after cancel")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(devs) != 3 {
		t.Fatalf("%d devices, want 3", len(devs))
	}
	for i, d := range devs {
		if d.closed != 1 {
			t.Errorf("device %d closed %d times", i, d.closed)
		}
	}
	for _, c := range clients[1:] {
		if _, err := c.Recv(); err == nil {
			t.Error("connection still open after Serve returned")
		}
	}
}

func TestFileListener(t *testing.T) {
	checkLeaks(t)
	path := filepath.Join(t.TempDir(), "fd.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f, err := l.File()
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	fl, err := vfio.FileListener(fd) // owns fd from here on
	if err != nil {
		t.Fatal(err)
	}
	srv := &vfio.Server{NewDevice: func(h vfio.Host) (vfio.Device, error) { return newFakeDevice(h), nil }, Log: slogDiscard()}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, fl) }()
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	c := vfiotest.NewClient(conn)
	if _, _, _, err := c.Version(vfiotest.QEMUVersionJSON); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetInfo(); err != nil {
		t.Fatal(err)
	}
	c.Close()
	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if !isClosed(fd) {
		t.Error("listener fd still open after Serve returned")
	}
}

func isClosed(fd int) bool {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	return errors.Is(err, unix.EBADF)
}

func slogDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestDMAUnmapWaitsForDeviceAccess: the DMA_UNMAP reply comes only after a
// device access in flight on the window has finished.
func TestDMAUnmapWaitsForDeviceAccess(t *testing.T) {
	s := negotiated(t, nil)
	ram := memfd(t, 0x10000)
	if err := s.c.DMAMap(0, 0x10000, 0, ram, 3); err != nil {
		t.Fatal(err)
	}
	mem := s.device().host.Mem
	inside, release, accessed := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		accessed <- mem.Access(0x100, 4, true, func(b []byte) {
			close(inside)
			<-release
			copy(b, "late")
		})
	}()
	<-inside
	unmapped := make(chan error)
	go func() { unmapped <- s.c.DMAUnmap(0, 0x10000, 0) }()
	select {
	case err := <-unmapped:
		t.Fatalf("DMA_UNMAP replied (%v) while DMA was in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-accessed; err != nil {
		t.Fatal(err)
	}
	if err := <-unmapped; err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := unix.Pread(ram, got, 0x100); err != nil || string(got) != "late" {
		t.Fatalf("guest RAM has %q, %v", got, err)
	}
	if err := mem.ReadAt(got, 0x100); !errors.Is(err, dma.ErrFault) {
		t.Fatalf("access after DMA_UNMAP = %v, want ErrFault", err)
	}
}

// TestQEMURealizeSequence replays what QEMU 11.1.3 sends from realize to the
// guest driver's MSI-X bring-up and a machine reset (spec Appendix D).
func TestQEMURealizeSequence(t *testing.T) {
	s := serve(t, nil)
	c := s.c
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, _, _, err := c.Version(vfiotest.QEMUVersionJSON)
	must(err)
	ram := memfd(t, 0x200000)
	must(c.DMAMap(0, 0x200000, 0, ram, 3))
	must(c.DMAMap(0xfffc0000, 0x40000, 0, -1, 1))
	info, err := c.GetInfo()
	must(err)
	if info.Flags != 3 || info.NumRegions != 9 || info.NumIRQs != 5 {
		t.Fatalf("GET_INFO %+v", info)
	}
	for _, i := range []uint32{0, 1, 2, 3, 4, 5, 7} {
		ri, err := c.RegionInfo(i)
		must(err)
		if ri.Flags&vfio.RegionFlagMmap != 0 || ri.Flags&vfio.RegionFlagCaps != 0 || ri.Size != fakeRegions[i] {
			t.Fatalf("region %d: %+v", i, ri)
		}
	}
	if _, err := c.IRQInfo(vfio.IRQErr); vfiotest.Errno(err) != unix.EINVAL {
		t.Fatalf("ERR info = %v", err)
	}
	cfg, err := c.RegionRead(vfio.RegionConfig, 0, 256)
	must(err)
	if len(cfg) != 256 {
		t.Fatal("short config read")
	}
	// ROM BAR probe.
	_, err = c.RegionRead(vfio.RegionConfig, 0x30, 4)
	must(err)
	must(c.RegionWrite(vfio.RegionConfig, 0x30, []byte{0x00, 0xf8, 0xff, 0xff}, false))
	_, err = c.RegionRead(vfio.RegionConfig, 0x30, 4)
	must(err)
	must(c.RegionWrite(vfio.RegionConfig, 0x30, []byte{0, 0, 0, 0}, false))
	msix, err := c.IRQInfo(vfio.IRQMSIX)
	must(err)
	if msix.Count != 3 || msix.Flags&vfio.IRQInfoNoResize != 0 {
		t.Fatalf("MSI-X info %+v", msix)
	}
	// Machine reset.
	must(c.SetIRQs(vfio.IRQINTx, vfio.IRQDataNone|vfio.IRQActionTrigger, 0, 0))
	must(c.RegionWrite(vfio.RegionConfig, 0x4, []byte{0, 0}, false))
	must(c.Reset())
	for off := uint64(0x10); off <= 0x24; off += 4 {
		must(c.RegionWrite(vfio.RegionConfig, off, []byte{0, 0, 0, 0}, false))
	}
	must(c.DMAUnmap(0, 0x200000, 0))
	must(c.DMAMap(0, 0xc0000, 0, ram, 3))
	must(c.DMAMap(0xc0000, 0x20000, 0, -1, 1))
	must(c.DMAMap(0xe0000, 0x120000, 0xe0000, ram, 3))
	// Driver: MSI-X enable, vectors, doorbells, an interrupt.
	e := []int{eventfd(t), eventfd(t), eventfd(t)}
	must(c.RegionWrite(vfio.RegionConfig, 0x42, []byte{0x02, 0x80}, false))
	must(c.SetIRQs(vfio.IRQINTx, vfio.IRQDataNone|vfio.IRQActionTrigger, 0, 0))
	must(c.SetIRQs(vfio.IRQMSIX, trigEventfd, 0, 1))
	must(c.SetIRQs(vfio.IRQMSIX, trigEventfd, 0, 3, e...))
	must(c.RegionWrite(vfio.RegionBAR1, 0x10, []byte{1, 0, 0, 0}, true))
	must(c.RegionWrite(vfio.RegionBAR2, 0x0, []byte{5, 0, 0, 0x40}, true))
	must(c.RegionWrite(vfio.RegionBAR1, 0x20, []byte{1, 2, 3, 4, 5, 6, 7, 8}, true))
	_, err = c.RegionRead(vfio.RegionBAR0, 0x2000, 4) // PBA
	must(err)
	got, err := c.RegionRead(vfio.RegionBAR1, 0x20, 8)
	must(err)
	if !bytes.Equal(got, []byte{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Fatalf("BAR1 0x20 = %x", got)
	}
	dev := s.device()
	must(dev.host.Mem.WriteAt([]byte("cqe"), 0x100000)) // in the remapped RAM
	dev.host.MSIX(1)
	if n := waitEventfd(t, e[1], 1); n != 1 {
		t.Fatalf("vector 1 = %d", n)
	}
	b := make([]byte, 3)
	if _, err := unix.Pread(ram, b, 0x100000); err != nil || string(b) != "cqe" {
		t.Fatalf("guest RAM %q, %v", b, err)
	}
	if err := dev.host.Mem.ReadAt(b, 0xc0000); !errors.Is(err, dma.ErrFault) {
		t.Fatalf("read of fd-less shadow ROM = %v", err)
	}
	if dev.resetCount() != 1 {
		t.Fatalf("%d resets", dev.resetCount())
	}
	// QEMU quits: EOF, no messages. The cleanup checks Close and leaks.
}

// TestBlockingEventfdCannotWedgeTheServer: a hostile client installs an
// eventfd without O_NONBLOCK whose counter is saturated, so that any write to
// it blocks, and then has the server trigger it (DATA_NONE|ACTION_TRIGGER
// runs on the connection's reader; the device raises vectors from its own
// goroutines). The reader keeps answering, the device's MSI-X call returns,
// and when the client leaves, ServeConn returns with every goroutine and fd
// freed (serve's leak check).
func TestBlockingEventfdCannotWedgeTheServer(t *testing.T) {
	s := negotiated(t, nil)
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC) // blocking
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(efd) })
	saturate := make([]byte, 8)
	le.PutUint64(saturate, 0xfffffffffffffffe) // the largest counter: any further write blocks
	if _, err := unix.Write(efd, saturate); err != nil {
		t.Fatal(err)
	}
	if err := s.c.SetIRQs(vfio.IRQMSIX, trigEventfd, 0, 1, efd); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 3 {
			if err := s.c.SetIRQs(vfio.IRQMSIX, vfio.IRQDataNone|vfio.IRQActionTrigger, 0, 1); err != nil {
				t.Error(err)
			}
			s.device().host.MSIX(0)
			s.alive()
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the server stopped answering after triggering a blocking, saturated eventfd")
	}
}

// TestServeBoundsConnections: one listener serves at most MaxConns
// connections at once; a client beyond them is closed at once (it gets no
// device), and a slot freed by a client that leaves serves the next one.
func TestServeBoundsConnections(t *testing.T) {
	checkLeaks(t)
	path := filepath.Join(t.TempDir(), "pvrdma.sock")
	l, err := vfio.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	var devices atomic.Int32
	srv := &vfio.Server{MaxConns: 2, Log: slogDiscard(), NewDevice: func(h vfio.Host) (vfio.Device, error) {
		devices.Add(1)
		return newFakeDevice(h), nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, l) }()
	dial := func() *vfiotest.Client {
		conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		c := vfiotest.NewClient(conn)
		c.Timeout = time.Minute
		t.Cleanup(func() { c.Close() })
		return c
	}
	first, second := dial(), dial()
	for _, c := range []*vfiotest.Client{first, second} {
		if _, _, _, err := c.Version(vfiotest.QEMUVersionJSON); err != nil {
			t.Fatal(err)
		}
	}
	third := dial()
	if _, _, _, err := third.Version(vfiotest.QEMUVersionJSON); err == nil {
		t.Fatal("a third connection was served with MaxConns 2")
	}
	first.Close()
	// The first connection's slot comes free once the server has torn it
	// down; a client that comes before that is refused like the third.
	var fourth *vfiotest.Client
	for deadline := time.Now().Add(time.Minute); ; {
		fourth = dial()
		if _, _, _, err := fourth.Version(vfiotest.QEMUVersionJSON); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no slot came free after a client left")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := devices.Load(); n != 3 {
		t.Fatalf("%d devices made, want 3 (the refused client gets none)", n)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}
