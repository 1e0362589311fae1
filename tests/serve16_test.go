package tests

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hcaemu/hcaemu/emu/emutest"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// rssKiB is a process's resident set.
func rssKiB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// cpuTime is a process's CPU time (user and system, all its threads).
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command (which may hold spaces) in parentheses:
	// utime and stime are the 14th and 15th of the line, in clock ticks.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	const hz = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / hz
}

// probeOverSocket connects to an HCA's vfio-user socket as QEMU does (a
// memfd of guest RAM, the MSI-X eventfds) and probes it with the fake
// driver, which then binds the IPv4 GID ::ffff:ip at index 1.
func probeOverSocket(t *testing.T, path string, ip netip.Addr) *emutest.Driver {
	t.Helper()
	const size = 8 << 20
	ramFD, ram := guestRAM(t, size)
	v := attachVFIO(t, path, ramFD, size)
	t.Cleanup(func() {
		v.c.Close()
		for _, fd := range v.efd {
			unix.Close(fd)
		}
	})
	drv := emutest.NewWithRAM(ram)
	v.irq = drv.IRQ
	drv.Dev = v
	if err := drv.Probe(); err != nil {
		t.Fatalf("%s: probe: %v", path, err)
	}
	gid := ip.As16()
	gid[10], gid[11] = 0xff, 0xff
	if err := drv.BindGID(1, gid); err != nil {
		t.Fatalf("%s: GID: %v", path, err)
	}
	return drv
}

// TestE2EServe16: one "hcaemu serve" process with sixteen HCAs (sixteen
// sockets), each probed over vfio-user by the fake driver as a guest's
// would be; the first and the last then run an RC SEND through the
// serve's segment, whose bytes arrive. The process's resident memory per
// idle probed device is measured (RSS before and after the sixteen), and
// its CPU time over five idle seconds.
func TestE2EServe16(t *testing.T) {
	needE2E(t)
	const n = 16
	dir := t.TempDir()
	args := []string{"serve", "--log-level", "warn"}
	for k := range n {
		args = append(args, "--socket-path", filepath.Join(dir, fmt.Sprintf("hca%d.sock", k)))
	}
	cmd := exec.Command(hcaemuBin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(unix.SIGTERM)
		cmd.Wait()
		t.Logf("hcaemu serve's stderr:\n%s", stderr.String())
	}()
	for k := range n { // the sockets are bound before serve listens: wait for the last
		p := filepath.Join(dir, fmt.Sprintf("hca%d.sock", k))
		for deadline := time.Now().Add(time.Minute); ; {
			if c, err := net.Dial("unix", p); err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: hcaemu serve does not listen", p)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	before := rssKiB(t, cmd.Process.Pid)
	drvs := make([]*emutest.Driver, n)
	for k := range n {
		drvs[k] = probeOverSocket(t, filepath.Join(dir, fmt.Sprintf("hca%d.sock", k)), netip.AddrFrom4([4]byte{10, 0, 0, byte(k + 1)}))
		if port, err := drvs[k].QueryPort(1); err != nil || port.State != abi.PortStateActive {
			t.Fatalf("hca%d: QUERY_PORT: %v state %d", k, err, port.State)
		}
	}
	after := rssKiB(t, cmd.Process.Pid)
	t.Logf("hcaemu serve: RSS %d KiB with no device, %d KiB with %d probed: %d KiB per idle device", before, after, n, (after-before)/n)

	// Idle, the process sleeps: its CPU time over a few seconds with the
	// sixteen devices probed and nothing to do (no busy polling). A
	// measurement, logged; it fails only at a fifth of a core, which no
	// machine's load can cause (load takes CPU from it, it adds none).
	cpu0, wall0 := cpuTime(t, cmd.Process.Pid), time.Now()
	time.Sleep(5 * time.Second)
	used, wall := cpuTime(t, cmd.Process.Pid)-cpu0, time.Since(wall0)
	t.Logf("hcaemu serve with %d idle devices: %v of CPU in %v (%.3f %% of a core)", n, used, wall.Round(time.Millisecond), 100*used.Seconds()/wall.Seconds())
	if used > wall/5 {
		t.Errorf("hcaemu serve used %v of CPU in %v with %d idle devices", used, wall, n)
	}

	// An RC SEND from the first HCA to the last, through the segment.
	a, b := drvs[0], drvs[n-1]
	type side struct {
		drv *emutest.Driver
		ip  netip.Addr
		qp  *emutest.QP
		cq  *emutest.CQ
	}
	mk := func(drv *emutest.Driver, ip netip.Addr) *side {
		_, cq, qp, err := drv.CreateRCQP(4)
		if err != nil {
			t.Fatal(err)
		}
		return &side{drv: drv, ip: ip, qp: qp, cq: cq}
	}
	sa, sb := mk(a, netip.AddrFrom4([4]byte{10, 0, 0, 1})), mk(b, netip.AddrFrom4([4]byte{10, 0, 0, n}))
	const access = 1 | 2 | 4 | 8
	up := func(s, peer *side) {
		if err := s.qp.Modify(abi.AttrState|abi.AttrPKeyIndex|abi.AttrPort|abi.AttrAccessFlags,
			abi.QPAttr{State: abi.QPStateInit, PortNum: 1, AccessFlags: access}); err != nil {
			t.Fatal(err)
		}
		rtr := abi.QPAttr{State: abi.QPStateRTR, PathMTU: 3, DestQPN: peer.qp.QPN, RQPSN: 100, MaxDestRdAtomic: 1, MinRNRTimer: 1}
		rtr.AH.DGID = peer.ip.As16()
		rtr.AH.DGID[10], rtr.AH.DGID[11] = 0xff, 0xff
		rtr.AH.SGIDIndex, rtr.AH.HopLimit, rtr.AH.AHFlags, rtr.AH.PortNum = 1, 64, 1, 1
		if err := s.qp.Modify(abi.AttrState|abi.AttrAV|abi.AttrPathMTU|abi.AttrDestQPN|abi.AttrRQPSN|abi.AttrMaxDestRdAtomic|abi.AttrMinRNRTimer, rtr); err != nil {
			t.Fatal(err)
		}
		rts := abi.QPAttr{State: abi.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: 100, MaxRdAtomic: 1}
		if err := s.qp.Modify(abi.AttrState|abi.AttrTimeout|abi.AttrRetryCnt|abi.AttrRNRRetry|abi.AttrSQPSN|abi.AttrMaxQPRdAtomic, rts); err != nil {
			t.Fatal(err)
		}
	}
	up(sa, sb)
	up(sb, sa)
	region := func(s *side, size int) (addr uint64, lkey uint32) {
		pages, pdir := s.drv.Buffer((size + 4095) / 4096)
		mr, err := s.drv.CreateMR(abi.CmdCreateMR{Start: pages[0], Length: uint64(size), PdirDMA: pdir,
			PDHandle: s.qp.Spec.PD, AccessFlags: access, NChunks: uint32(len(pages))})
		if err != nil {
			t.Fatal(err)
		}
		return pages[0], mr.LKey
	}
	const size = 5000
	src, lkA := region(sa, size)
	dst, lkB := region(sb, size)
	for i := range size {
		a.RAM.Mem[src+uint64(i)] = byte(i*7 + 3)
	}
	sb.qp.PostRecv(uverbs.RecvWQE{WRID: 7, SGE: []uverbs.SGE{{Addr: dst, Length: size, LKey: lkB}}})
	sa.qp.PostSend(uverbs.SendWQE{WRID: 9, Opcode: uverbs.OpSend, SendFlags: uverbs.SendSignaled, SGE: []uverbs.SGE{{Addr: src, Length: size, LKey: lkA}}})
	poll := func(cq *emutest.CQ, what string) uverbs.CQE {
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if e, ok := cq.Poll(); ok {
				return e
			}
		}
		t.Fatalf("no completion of the %s", what)
		return uverbs.CQE{}
	}
	if e := poll(sa.cq, "SEND"); e.Status != uverbs.WCSuccess || e.WRID != 9 {
		t.Fatalf("sender CQE %+v", e)
	}
	if e := poll(sb.cq, "receive"); e.Status != uverbs.WCSuccess || e.WRID != 7 || e.ByteLen != size {
		t.Fatalf("receiver CQE %+v", e)
	}
	if !bytes.Equal(b.RAM.Mem[dst:dst+size], a.RAM.Mem[src:src+size]) {
		t.Fatal("the bytes differ")
	}
}
