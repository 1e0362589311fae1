package emu_test

import (
	"encoding/binary"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu"
	"github.com/hcaemu/hcaemu/emu/emutest"
	"github.com/hcaemu/hcaemu/uverbs"
)

var le = binary.LittleEndian

// testLog sends device logs to the test log (shown with -v or on failure).
func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// checkGoroutines fails the test if it leaves goroutines behind.
func checkGoroutines(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(time.Minute)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<16)
			t.Errorf("goroutine leak: %d before, %d after\n%s", before, n, buf[:runtime.Stack(buf, true)])
		}
	})
}

type rig struct {
	*emutest.Driver
	dev *emu.Device
}

func newRig(t *testing.T, caps *emu.Caps) *rig {
	t.Helper()
	checkGoroutines(t)
	drv := emutest.New(64 << 20)
	dev := emu.New(emu.Config{Name: "t", Mem: drv.RAM, MSIX: drv.IRQ.Raise, Log: testLog(t),
		MAC: [6]byte{0x00, 0x50, 0x56, 0x01, 0x02, 0x03}, Caps: caps})
	t.Cleanup(dev.Close)
	drv.Dev = dev
	return &rig{Driver: drv, dev: dev}
}

func probed(t *testing.T, caps *emu.Caps) *rig {
	t.Helper()
	r := newRig(t, caps)
	if err := r.Probe(); err != nil {
		t.Fatalf("probe: %v", err)
	}
	return r
}

// TestProbe runs the kernel's probe sequence: caps, activation, the IB
// core's registration commands and the MAD layer's GSI QP.
func TestProbe(t *testing.T) {
	r := probed(t, nil)
	if got := r.Cap32(188); got != 512 {
		t.Errorf("max_uar = %d", got)
	}
	if r.Caps[203] != 2 || r.Caps[199] != 1 || r.Caps[200] != 0 {
		t.Errorf("gid_types %#x phys_port_cnt %d mode %d", r.Caps[203], r.Caps[199], r.Caps[200])
	}
	wantGUID := []byte{0x02, 0x50, 0x56, 0xff, 0xfe, 0x01, 0x02, 0x03}
	if string(r.Caps[8:16]) != string(wantGUID) {
		t.Errorf("node_guid % x", r.Caps[8:16])
	}
	resp, err := r.MustCmd(emu.CmdQueryPort, emutest.NewBody(24).U8(16, 1))
	if err != nil {
		t.Fatal(err)
	}
	if st, gl, pk := le.Uint32(resp[16:]), le.Uint32(resp[28:]), le.Uint16(resp[48:]); st != 4 || gl != r.Cap32(192) || pk != 1 {
		t.Errorf("QUERY_PORT state %d gid_tbl_len %d pkey_tbl_len %d", st, gl, pk)
	}
	resp, err = r.MustCmd(emu.CmdQueryPKey, emutest.NewBody(24).U8(16, 1))
	if err != nil || le.Uint16(resp[16:]) != 0xFFFF {
		t.Fatalf("QUERY_PKEY: %v %#x", err, le.Uint16(resp[16:]))
	}
	gid := []byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x50, 0x56, 0xff, 0xfe, 0x01, 0x02, 0x03}
	if _, err := r.MustCmd(emu.CmdCreateBind, emutest.NewBody(48).U32(16, 1024).U32(20, 0xfff).U32(24, 0).Bytes(28, gid).U8(44, 2)); err != nil {
		t.Fatal(err)
	}
	_, _, cq, qp, err := r.KernelGSI()
	if err != nil {
		t.Fatalf("MAD layer setup: %v", err)
	}
	r.dev.Sync()
	if qp.Handle != 1 || qp.QPN != 1 {
		t.Errorf("GSI QP handle %d qpn %d", qp.Handle, qp.QPN)
	}
	if _, ok := cq.Poll(); ok {
		t.Errorf("CQE appeared without traffic")
	}
	if ev := r.AsyncEvents(); len(ev) != 0 {
		t.Errorf("unexpected async events %v", ev)
	}
	if n := r.IRQ.Count[0].Load(); n < 10 {
		t.Errorf("only %d response interrupts", n)
	}
}

// TestUserVerbs builds what ibv_rc_pingpong builds, then tears it down.
func TestUserVerbs(t *testing.T) {
	r := probed(t, nil)
	gid := make([]byte, 16)
	gid[10], gid[11], gid[12], gid[15] = 0xff, 0xff, 10, 1
	if _, err := r.MustCmd(emu.CmdCreateBind, emutest.NewBody(48).U32(24, 1).Bytes(28, gid).U8(44, 2)); err != nil {
		t.Fatal(err)
	}
	resp, err := r.MustCmd(emu.CmdCreateUC, emutest.NewBody(24).U64(16, r.BAR2>>12+1))
	if err != nil {
		t.Fatal(err)
	}
	ctx := le.Uint32(resp[16:])
	if ctx == 0 {
		t.Fatal("context handle 0")
	}
	resp, _ = r.MustCmd(emu.CmdCreatePD, emutest.NewBody(24).U32(16, ctx))
	pd := le.Uint32(resp[16:])
	// A 4096-byte buffer starting mid-page spans two pages.
	pages, dir := r.Buffer(2)
	start := uint64(0x7f0000000800)
	resp, err = r.MustCmd(emu.CmdCreateMR, emutest.NewBody(56).U64(16, start).U64(24, 4096).U64(32, dir).U32(40, pd).U32(44, 1).U32(52, 2))
	if err != nil {
		t.Fatal(err)
	}
	mrh := le.Uint32(resp[16:])
	_ = pages
	cq, err := r.CreateCQ(ctx, 512)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := r.CreateQP(emutest.QPSpec{Ctx: ctx, PD: pd, SendCQ: cq, RecvCQ: cq, Type: emu.QPTypeRC,
		SendWR: 1, RecvWR: 512, SendSGE: 1, RecvSGE: 1, UAR: 1})
	if err != nil {
		t.Fatal(err)
	}
	if qp.Handle < 2 || qp.QPN != qp.Handle {
		t.Errorf("RC QP handle %d qpn %d", qp.Handle, qp.QPN)
	}
	init := emu.QPAttr{State: emu.StateInit, PortNum: 1, AccessFlags: 0}
	if err := qp.Modify(emu.AttrState|emu.AttrPKeyIndex|emu.AttrPort|emu.AttrAccessFlags, init); err != nil {
		t.Fatal(err)
	}
	rtr := emu.QPAttr{State: emu.StateRTR, PathMTU: 3, DestQPN: 0x99, RQPSN: 0x123456, MaxDestRdAtomic: 1, MinRNRTimer: 12}
	rtr.AH.SGIDIndex, rtr.AH.HopLimit, rtr.AH.Flags = 1, 1, 1
	if err := qp.Modify(emu.AttrState|emu.AttrAV|emu.AttrPathMTU|emu.AttrDestQPN|emu.AttrRQPSN|emu.AttrMaxDestRdAtomic|emu.AttrMinRNRTimer, rtr); err != nil {
		t.Fatal(err)
	}
	rts := emu.QPAttr{State: emu.StateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: 0x654321, MaxRdAtomic: 1}
	if err := qp.Modify(emu.AttrState|emu.AttrTimeout|emu.AttrRetryCnt|emu.AttrRNRRetry|emu.AttrSQPSN|emu.AttrMaxQPRdAtomic, rts); err != nil {
		t.Fatal(err)
	}
	resp, err = r.MustCmd(emu.CmdQueryQP, emutest.NewBody(24).U32(16, qp.Handle))
	if err != nil {
		t.Fatal(err)
	}
	a := emu.DecodeQPAttr(resp[16:176])
	if a.State != emu.StateRTS || a.DestQPN != 0x99 || a.RQPSN != 0x123456 || a.SQPSN != 0x654321 || a.PathMTU != 3 || a.Cap[1] != 512 {
		t.Errorf("QUERY_QP: %+v", a)
	}
	for _, c := range []struct {
		op uint32
		h  uint32
	}{{emu.CmdDestroyQP, qp.Handle}, {emu.CmdDestroyCQ, cq.Handle}, {emu.CmdDestroyMR, mrh}, {emu.CmdDestroyPD, pd}, {emu.CmdDestroyUC, ctx}} {
		if _, err := r.MustCmd(c.op, emutest.NewBody(24).U32(16, c.h)); err != nil {
			t.Errorf("destroy: %v", err)
		}
	}
}

// TestBeforeActivation: nothing happens before a DSR is loaded and the
// device activated (CVE-2022-1050).
func TestBeforeActivation(t *testing.T) {
	r := newRig(t, nil)
	r.EnablePCI()
	r.WriteReg(emu.RegRequest, 0)
	if r.ReadReg(emu.RegErr) == 0 {
		t.Error("REQUEST before DSR: ERR = 0")
	}
	r.WriteReg(emu.RegCtl, emu.CtlActivate)
	if r.ReadReg(emu.RegErr) == 0 {
		t.Error("ACTIVATE before DSR: ERR = 0")
	}
	r.WriteReg(emu.RegCtl, emu.CtlUnquiesce)
	if r.ReadReg(emu.RegErr) == 0 {
		t.Error("UNQUIESCE before activation: ERR = 0")
	}
	r.Doorbell(0, 0, 1|1<<30)
	r.Doorbell(0, 4, 1|1<<30)
	if n := r.IRQ.Count[0].Load(); n != 0 {
		t.Errorf("%d interrupts before activation", n)
	}
	// A loaded but not activated device refuses commands too.
	r.LoadDSR(4, 4)
	r.WriteReg(emu.RegRequest, 0)
	if r.ReadReg(emu.RegErr) == 0 {
		t.Error("REQUEST before ACTIVATE: ERR = 0")
	}
	// Bus mastering off: the DSR cannot be read, so no caps.
	r2 := newRig(t, nil)
	r2.LoadDSR(4, 4)
	if r2.Cap32(188) != 0 {
		t.Error("caps written with bus mastering disabled")
	}
}

// TestDSRRejected: bad DSRs leave the caps unwritten and activation fails;
// the device accepts a good DSR afterwards (CVE-2021-3607, -3608, 2023-1544).
func TestDSRRejected(t *testing.T) {
	cases := []struct {
		name  string
		setup func(r *rig) uint64
	}{
		{"outside RAM", func(r *rig) uint64 { return 0x7fff00000000 }},
		{"unaligned", func(r *rig) uint64 { return r.AllocPages(1) + 8 }},
		{"async num_pages 0", func(r *rig) uint64 { return dsrWith(r, 0, 4, nil) }},
		{"async num_pages 1", func(r *rig) uint64 { return dsrWith(r, 1, 4, nil) }},
		{"cq num_pages 513", func(r *rig) uint64 { return dsrWith(r, 4, 513, nil) }},
		{"cq num_pages max", func(r *rig) uint64 { return dsrWith(r, 4, 0xFFFFFFFF, nil) }},
		{"cmd slot outside RAM", func(r *rig) uint64 {
			return dsrWith(r, 4, 4, func(dsr uint64) { r.Put64(dsr+16, 0x7fff00000000) })
		}},
		{"ring page table zero entry", func(r *rig) uint64 {
			return dsrWith(r, 4, 4, func(dsr uint64) {
				dir := r.Get64(dsr + 40)
				tbl := r.Get64(dir)
				r.Put64(tbl+8, 0)
			})
		}},
		{"ring page outside RAM", func(r *rig) uint64 {
			return dsrWith(r, 4, 4, func(dsr uint64) {
				dir := r.Get64(dsr + 56)
				tbl := r.Get64(dir)
				r.Put64(tbl+16, 0x7fff00000000)
			})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, nil)
			r.EnablePCI()
			dsr := c.setup(r)
			r.WriteReg(emu.RegDSRLow, uint32(dsr))
			r.WriteReg(emu.RegDSRHigh, uint32(dsr>>32))
			if dsr+72+208 <= uint64(len(r.RAM.Mem)) && le.Uint32(r.RAM.Mem[dsr+72+188:]) != 0 {
				t.Error("caps written for a bad DSR")
			}
			r.WriteReg(emu.RegCtl, emu.CtlActivate)
			if r.ReadReg(emu.RegErr) == 0 {
				t.Error("activated with a bad DSR")
			}
			if err := r.Probe(); err != nil {
				t.Errorf("good probe after a bad DSR: %v", err)
			}
		})
	}
}

// dsrWith builds a DSR with the given ring page counts (rings get 4 real
// pages each) and lets edit change it.
func dsrWith(r *rig, asyncPages, cqPages uint32, edit func(dsr uint64)) uint64 {
	dsr := r.AllocPages(1)
	_, adir := r.Buffer(4)
	_, cdir := r.Buffer(4)
	r.Put32(dsr, 20)
	r.Put64(dsr+16, r.AllocPages(1))
	r.Put64(dsr+24, r.AllocPages(1))
	r.Put32(dsr+32, asyncPages)
	r.Put64(dsr+40, adir)
	r.Put32(dsr+48, cqPages)
	r.Put64(dsr+56, cdir)
	if edit != nil {
		edit(dsr)
	}
	return dsr
}

// TestCommandErrors: every bad command fails with ERR != 0 as the driver
// sees it, and the device keeps serving.
func TestCommandErrors(t *testing.T) {
	r := probed(t, nil)
	_, lkey, kcq, _, err := r.KernelGSI()
	if err != nil {
		t.Fatal(err)
	}
	_ = lkey
	resp, _ := r.MustCmd(emu.CmdCreateUC, emutest.NewBody(24).U64(16, r.BAR2>>12+1))
	ctx1 := le.Uint32(resp[16:])
	resp, _ = r.MustCmd(emu.CmdCreateUC, emutest.NewBody(24).U64(16, r.BAR2>>12+2))
	ctx2 := le.Uint32(resp[16:])
	resp, _ = r.MustCmd(emu.CmdCreatePD, emutest.NewBody(24).U32(16, ctx1))
	pd1 := le.Uint32(resp[16:])
	cq2, err := r.CreateCQ(ctx2, 64)
	if err != nil {
		t.Fatal(err)
	}
	_, dir1 := r.Buffer(1)
	_, dir4 := r.Buffer(4)

	cases := []struct {
		name string
		op   uint32
		body emutest.B
	}{
		{"opcode 21", 21, emutest.NewBody(24)},
		{"opcode max", 0xFFFFFFFF, emutest.NewBody(24)},
		{"RESIZE_CQ", emu.CmdResizeCQ, emutest.NewBody(24).U32(16, kcq.Handle).U32(20, 2048)},
		{"QUERY_PORT port 2", emu.CmdQueryPort, emutest.NewBody(24).U8(16, 2)},
		{"QUERY_PKEY index 1", emu.CmdQueryPKey, emutest.NewBody(24).U8(16, 1).U8(17, 1)},
		{"CREATE_PD unknown ctx", emu.CmdCreatePD, emutest.NewBody(24).U32(16, 77)},
		{"DESTROY_PD unknown", emu.CmdDestroyPD, emutest.NewBody(24).U32(16, 999)},
		{"DESTROY_PD in use", emu.CmdDestroyPD, emutest.NewBody(24).U32(16, 1)},
		{"CREATE_MR no PD", emu.CmdCreateMR, emutest.NewBody(56).U64(16, 0x1000).U64(24, 4096).U64(32, dir1).U32(40, 999).U32(44, 1).U32(52, 1)},
		{"CREATE_MR length 0", emu.CmdCreateMR, emutest.NewBody(56).U64(16, 0x1000).U64(32, dir1).U32(40, pd1).U32(44, 1).U32(52, 1)},
		{"CREATE_MR nchunks mismatch", emu.CmdCreateMR, emutest.NewBody(56).U64(16, 0x1800).U64(24, 4096).U64(32, dir1).U32(40, pd1).U32(44, 1).U32(52, 1)},
		{"CREATE_MR too long", emu.CmdCreateMR, emutest.NewBody(56).U64(16, 0).U64(24, 1<<31).U64(32, dir1).U32(40, pd1).U32(44, 1).U32(52, 1<<19)},
		{"CREATE_MR nchunks huge", emu.CmdCreateMR, emutest.NewBody(56).U64(16, 0).U64(24, 0xFFFFFFFF000).U64(32, dir1).U32(40, pd1).U32(44, 1).U32(52, 0xFFFFFFFF)},
		{"CREATE_MR overflow", emu.CmdCreateMR, emutest.NewBody(56).U64(16, 0xFFFFFFFFFFFFF000).U64(24, 0x2000).U64(32, dir1).U32(40, pd1).U32(44, 1).U32(52, 2)},
		{"CREATE_MR remote write w/o local", emu.CmdCreateMR, emutest.NewBody(56).U64(16, 0x1000).U64(24, 4096).U64(32, dir1).U32(40, pd1).U32(44, 2).U32(52, 1)},
		{"CREATE_MR dir outside RAM", emu.CmdCreateMR, emutest.NewBody(56).U64(16, 0x1000).U64(24, 4096).U64(32, 0x7fff00000000).U32(40, pd1).U32(44, 1).U32(52, 1)},
		{"CREATE_MR DMA on user PD", emu.CmdCreateMR, emutest.NewBody(56).U32(40, pd1).U32(44, 1).U32(48, 1)},
		{"CREATE_MR FRMR 0 pages", emu.CmdCreateMR, emutest.NewBody(56).U32(40, pd1).U32(48, 2)},
		{"CREATE_MR bad flags", emu.CmdCreateMR, emutest.NewBody(56).U32(40, pd1).U32(48, 4)},
		{"CREATE_CQ 0 pages", emu.CmdCreateCQ, emutest.NewBody(40).U64(16, dir1).U32(28, 64)},
		{"CREATE_CQ too few pages", emu.CmdCreateCQ, emutest.NewBody(40).U64(16, dir1).U32(28, 1024).U32(32, 1)},
		{"CREATE_CQ huge pages", emu.CmdCreateCQ, emutest.NewBody(40).U64(16, dir1).U32(28, 64).U32(32, 0xFFFFFFFF)},
		{"CREATE_CQ not pow2", emu.CmdCreateCQ, emutest.NewBody(40).U64(16, dir4).U32(28, 100).U32(32, 4)},
		{"CREATE_CQ cqe 0", emu.CmdCreateCQ, emutest.NewBody(40).U64(16, dir4).U32(28, 0).U32(32, 4)},
		{"CREATE_CQ too big", emu.CmdCreateCQ, emutest.NewBody(40).U64(16, dir4).U32(28, 1<<20).U32(32, 4)},
		{"CREATE_CQ unknown ctx", emu.CmdCreateCQ, emutest.NewBody(40).U64(16, dir4).U32(24, 99).U32(28, 16).U32(32, 2)},
		{"DESTROY_CQ in use", emu.CmdDestroyCQ, emutest.NewBody(24).U32(16, kcq.Handle)},
		{"DESTROY_CQ unknown", emu.CmdDestroyCQ, emutest.NewBody(24).U32(16, 4000)},
		{"CREATE_QP foreign CQ", emu.CmdCreateQP, qpBody(dir4, pd1, cq2.Handle, cq2.Handle, 4, 4, 4, 1, 1)},
		{"CREATE_QP kernel CQ on user PD", emu.CmdCreateQP, qpBody(dir4, pd1, kcq.Handle, kcq.Handle, 4, 4, 4, 1, 1)},
		{"CREATE_QP no PD", emu.CmdCreateQP, qpBody(dir4, 999, kcq.Handle, kcq.Handle, 4, 4, 4, 1, 1)},
		{"CREATE_QP second GSI", emu.CmdCreateQP, qpBodyType(dir4, 1, kcq.Handle, 4, 4, 1, 1, emu.QPTypeGSI)},
		{"CREATE_QP UC", emu.CmdCreateQP, qpBodyType(dir4, 1, kcq.Handle, 4, 4, 1, 1, emu.QPTypeUC)},
		{"CREATE_QP type 9", emu.CmdCreateQP, qpBodyType(dir4, 1, kcq.Handle, 4, 4, 1, 1, 9)},
		{"CREATE_QP wr not pow2", emu.CmdCreateQP, qpBodyType(dir4, 1, kcq.Handle, 3, 4, 1, 1, emu.QPTypeRC)},
		{"CREATE_QP wr too big", emu.CmdCreateQP, qpBodyType(dir4, 1, kcq.Handle, 1<<20, 4, 1, 1, emu.QPTypeRC)},
		{"CREATE_QP sge too big", emu.CmdCreateQP, qpBodyType(dir4, 1, kcq.Handle, 4, 4, 64, 1, emu.QPTypeRC)},
		{"CREATE_QP pages too few", emu.CmdCreateQP, qpBodyType(dir4, 1, kcq.Handle, 1024, 1024, 1, 1, emu.QPTypeRC)},
		{"CREATE_QP total < send", emu.CmdCreateQP, qpBody(dir4, 1, kcq.Handle, kcq.Handle, 4, 4, 1, 1, 2)},
		{"MODIFY_QP unknown", emu.CmdModifyQP, emutest.NewBody(184).U32(16, 777).U32(20, 1)},
		{"QUERY_QP unknown", emu.CmdQueryQP, emutest.NewBody(24).U32(16, 777)},
		{"DESTROY_QP unknown", emu.CmdDestroyQP, emutest.NewBody(24).U32(16, 777)},
		{"CREATE_UC page 0", emu.CmdCreateUC, emutest.NewBody(24).U64(16, r.BAR2>>12)},
		{"CREATE_UC page in use", emu.CmdCreateUC, emutest.NewBody(24).U64(16, r.BAR2>>12+1)},
		{"CREATE_UC not BAR2", emu.CmdCreateUC, emutest.NewBody(24).U64(16, 0x12345)},
		{"DESTROY_UC unknown", emu.CmdDestroyUC, emutest.NewBody(24).U32(16, 300)},
		{"CREATE_BIND index 16", emu.CmdCreateBind, emutest.NewBody(48).U32(24, 16).U8(44, 2)},
		{"CREATE_BIND type 3", emu.CmdCreateBind, emutest.NewBody(48).U32(24, 1).U8(44, 3)},
		{"DESTROY_BIND unbound", emu.CmdDestroyBind, emutest.NewBody(40).U32(16, 5)},
		{"CREATE_SRQ not pow2", emu.CmdCreateSRQ, emutest.NewBody(56).U64(16, dir4).U32(24, pd1).U32(28, 4).U32(32, 3).U32(36, 1)},
		{"CREATE_SRQ too few pages", emu.CmdCreateSRQ, emutest.NewBody(56).U64(16, dir4).U32(24, pd1).U32(28, 2).U32(32, 1024).U32(36, 1)},
		{"CREATE_SRQ type 1", emu.CmdCreateSRQ, emutest.NewBody(56).U64(16, dir4).U32(24, pd1).U32(28, 4).U32(32, 4).U32(36, 1).U8(48, 1)},
		{"MODIFY_SRQ unknown", emu.CmdModifySRQ, emutest.NewBody(40).U32(16, 5).U32(20, 2)},
		{"QUERY_SRQ unknown", emu.CmdQuerySRQ, emutest.NewBody(24).U32(16, 5)},
		{"DESTROY_SRQ unknown", emu.CmdDestroySRQ, emutest.NewBody(24).U32(16, 5)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, resp := r.Cmd(c.op, c.body)
			if e == 0 {
				t.Fatalf("ERR = 0, want a failure")
			}
			if c.op < 21 && resp[12] == 0 {
				t.Errorf("response err byte 0")
			}
			if _, err := r.MustCmd(emu.CmdQueryPort, emutest.NewBody(24).U8(16, 1)); err != nil {
				t.Fatalf("device stopped serving: %v", err)
			}
		})
	}
}

func qpBody(dir uint64, pd, scq, rcq, swr, rwr uint32, total, send uint16, typ uint8) emutest.B {
	return emutest.NewBody(80).U64(16, dir).U32(24, pd).U32(28, scq).U32(32, rcq).U32(40, swr).U32(44, rwr).
		U32(48, 1).U32(52, 1).U16(68, total).U16(70, send).U8(75, typ)
}

func qpBodyType(dir uint64, pd, cq, swr, rwr, sge, _ uint32, typ uint8) emutest.B {
	return emutest.NewBody(80).U64(16, dir).U32(24, pd).U32(28, cq).U32(32, cq).U32(40, swr).U32(44, rwr).
		U32(48, sge).U32(52, sge).U16(68, 4).U16(70, 1).U8(75, typ)
}

// TestModifyQPTransitions checks the IB state table: legal edges succeed,
// illegal ones fail with the response err byte set and leave the state.
func TestModifyQPTransitions(t *testing.T) {
	r := probed(t, nil)
	gid := make([]byte, 16)
	gid[0] = 0xfe
	gid[1] = 0x80
	r.MustCmd(emu.CmdCreateBind, emutest.NewBody(48).U32(24, 0).Bytes(28, gid).U8(44, 2))
	resp, _ := r.MustCmd(emu.CmdCreatePD, emutest.NewBody(24))
	pd := le.Uint32(resp[16:])
	cq, _ := r.CreateCQ(0, 64)
	mk := func(typ uint8) *emutest.QP {
		q, err := r.CreateQP(emutest.QPSpec{PD: pd, SendCQ: cq, RecvCQ: cq, Type: typ, SendWR: 4, RecvWR: 4, SendSGE: 1, RecvSGE: 1})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	const (
		rcInit = emu.AttrState | emu.AttrPKeyIndex | emu.AttrPort | emu.AttrAccessFlags
		rcRTR  = emu.AttrState | emu.AttrAV | emu.AttrPathMTU | emu.AttrDestQPN | emu.AttrRQPSN | emu.AttrMaxDestRdAtomic | emu.AttrMinRNRTimer
		rcRTS  = emu.AttrState | emu.AttrSQPSN | emu.AttrTimeout | emu.AttrRetryCnt | emu.AttrRNRRetry | emu.AttrMaxQPRdAtomic
		udInit = emu.AttrState | emu.AttrPKeyIndex | emu.AttrPort | emu.AttrQKey
	)
	st := func(s uint32) emu.QPAttr {
		a := emu.QPAttr{State: s, PortNum: 1, PathMTU: 3}
		a.AH.Flags = 1
		return a
	}
	type step struct {
		mask uint32
		a    emu.QPAttr
		ok   bool
	}
	cases := []struct {
		name  string
		typ   uint8
		steps []step
	}{
		{"RC happy path", emu.QPTypeRC, []step{{rcInit, st(1), true}, {rcRTR, st(2), true}, {rcRTS, st(3), true},
			{emu.AttrState, st(4), true}, {emu.AttrState, st(3), true}, {emu.AttrState, st(6), true}, {emu.AttrState, st(0), true}}},
		{"RC RESET->RTS", emu.QPTypeRC, []step{{rcRTS, st(3), false}}},
		{"RC RESET->RTR", emu.QPTypeRC, []step{{rcRTR, st(2), false}}},
		{"RC INIT missing attrs", emu.QPTypeRC, []step{{emu.AttrState, st(1), false}}},
		{"RC INIT with QKEY", emu.QPTypeRC, []step{{rcInit | emu.AttrQKey, st(1), false}}},
		{"RC RTR missing AV", emu.QPTypeRC, []step{{rcInit, st(1), true}, {rcRTR &^ emu.AttrAV, st(2), false}}},
		{"RC RTR unbound sgid", emu.QPTypeRC, []step{{rcInit, st(1), true}, {rcRTR, func() emu.QPAttr { a := st(2); a.AH.SGIDIndex = 5; return a }(), false}}},
		{"RC RTR path_mtu 6", emu.QPTypeRC, []step{{rcInit, st(1), true}, {rcRTR, func() emu.QPAttr { a := st(2); a.PathMTU = 6; return a }(), false}}},
		{"RC INIT->RTS", emu.QPTypeRC, []step{{rcInit, st(1), true}, {rcRTS, st(3), false}}},
		{"RC ERR->RTS", emu.QPTypeRC, []step{{emu.AttrState, st(6), true}, {rcRTS, st(3), false}}},
		{"RC bad state 7", emu.QPTypeRC, []step{{emu.AttrState, st(7), false}}},
		{"RC unknown mask bit", emu.QPTypeRC, []step{{rcInit | 1<<21, st(1), false}}},
		{"RC cur_state mismatch", emu.QPTypeRC, []step{{rcInit | emu.AttrCurState, func() emu.QPAttr { a := st(1); a.CurState = 3; return a }(), false}}},
		{"RC port 2", emu.QPTypeRC, []step{{rcInit, func() emu.QPAttr { a := st(1); a.PortNum = 2; return a }(), false}}},
		{"RC retry_cnt 8", emu.QPTypeRC, []step{{rcInit, st(1), true}, {rcRTR, st(2), true}, {rcRTS, func() emu.QPAttr { a := st(3); a.RetryCnt = 8; return a }(), false}}},
		{"UD happy path", emu.QPTypeUD, []step{{udInit, st(1), true}, {emu.AttrState, st(2), true}, {emu.AttrState | emu.AttrSQPSN, st(3), true}, {emu.AttrState | emu.AttrQKey, st(3), true}}},
		{"UD RTR with AV", emu.QPTypeUD, []step{{udInit, st(1), true}, {emu.AttrState | emu.AttrAV, st(2), false}}},
		{"UD RTS without SQ_PSN", emu.QPTypeUD, []step{{udInit, st(1), true}, {emu.AttrState, st(2), true}, {emu.AttrState, st(3), false}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := mk(c.typ)
			state := uint32(0)
			for i, s := range c.steps {
				err := q.Modify(s.mask, s.a)
				if (err == nil) != s.ok {
					t.Fatalf("step %d: err = %v, want ok=%v", i, err, s.ok)
				}
				if err == nil && s.mask&emu.AttrState != 0 {
					state = s.a.State
				}
				resp, qerr := r.MustCmd(emu.CmdQueryQP, emutest.NewBody(24).U32(16, q.Handle))
				if qerr != nil {
					t.Fatal(qerr)
				}
				if got := le.Uint32(resp[16:]); got != state {
					t.Fatalf("step %d: state %d, want %d", i, got, state)
				}
			}
		})
	}
}

// TestResourceLimits: one object past each limit fails with ENOMEM and the
// table is not overrun.
func TestResourceLimits(t *testing.T) {
	caps := emu.DefaultCaps()
	caps.MaxPD, caps.MaxCQ, caps.MaxQP, caps.MaxMR, caps.MaxSRQ, caps.MaxUAR = 3, 3, 4, 3, 3, 4
	r := probed(t, &caps)
	for i := 0; i < 3; i++ {
		if _, err := r.MustCmd(emu.CmdCreatePD, emutest.NewBody(24)); err != nil {
			t.Fatalf("PD %d: %v", i, err)
		}
	}
	if e, _ := r.Cmd(emu.CmdCreatePD, emutest.NewBody(24)); e != 12 {
		t.Errorf("PD past max_pd: ERR %d, want ENOMEM", e)
	}
	// CQ handles must stay < max_cq.
	var last uint32
	for i := 0; i < 2; i++ {
		cq, err := r.CreateCQ(0, 16)
		if err != nil {
			t.Fatalf("CQ %d: %v", i, err)
		}
		last = cq.Handle
	}
	if last >= 3 {
		t.Errorf("CQ handle %d >= max_cq", last)
	}
	if _, err := r.CreateCQ(0, 16); err == nil {
		t.Error("CQ past max_cq succeeded")
	}
	for i := 1; i < 4; i++ {
		if _, err := r.MustCmd(emu.CmdCreateUC, emutest.NewBody(24).U64(16, r.BAR2>>12+uint64(i))); err != nil {
			t.Fatalf("UC %d: %v", i, err)
		}
	}
	// UAR pages beyond max_uar wrap into BAR2's low bits: page 4 = page 0.
	if e, _ := r.Cmd(emu.CmdCreateUC, emutest.NewBody(24).U64(16, r.BAR2>>12+4)); e == 0 {
		t.Error("UC past max_uar succeeded")
	}
}

// TestRegisterAccess reads and writes every BAR offset at every width: no
// panic, defined values (CVE-2018-20191).
func TestRegisterAccess(t *testing.T) {
	r := probed(t, nil)
	for _, region := range []int{0, 1, 2, 7} {
		size := r.dev.RegionSize(region)
		step := uint64(1)
		if size > 0x2000 {
			step = 509
		}
		for off := uint64(0); off < size; off += step {
			for _, w := range []int{1, 2, 4, 8} {
				if off+uint64(w) > size {
					continue
				}
				b := make([]byte, w)
				if err := r.dev.ReadRegion(region, off, b); err != nil {
					t.Fatalf("read %d@%#x/%d: %v", region, off, w, err)
				}
				if region != 7 && region != 1 {
					r.dev.WriteRegion(region, off, b)
				}
			}
		}
	}
	if v := r.ReadReg(emu.RegVersion); v != emu.Version {
		t.Errorf("VERSION %d", v)
	}
	r.WriteReg(emu.RegVersion, 5)
	if v := r.ReadReg(emu.RegVersion); v != emu.Version {
		t.Errorf("VERSION writable: %d", v)
	}
	if mac := r.ReadReg(emu.RegMACL); mac != 0x01565000 {
		t.Errorf("MACL %#x", mac)
	}
	if _, err := r.MustCmd(emu.CmdQueryPort, emutest.NewBody(24).U8(16, 1)); err != nil {
		t.Fatal(err)
	}
}

// TestResetFreesEverything: CTL=RESET and DEVICE_RESET drop all objects; the
// driver can probe again, repeatedly.
func TestResetFreesEverything(t *testing.T) {
	r := probed(t, nil)
	for round := 0; round < 20; round++ {
		if _, _, _, _, err := r.KernelGSI(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if round%2 == 0 {
			r.WriteReg(emu.RegCtl, emu.CtlReset)
			if r.ReadReg(emu.RegErr) != 0 {
				t.Fatal("RESET failed")
			}
		} else {
			r.dev.Reset()
		}
		r.WriteReg(emu.RegRequest, 0)
		if r.ReadReg(emu.RegErr) == 0 {
			t.Fatal("command accepted after reset")
		}
		if err := r.Probe(); err != nil {
			t.Fatalf("re-probe %d: %v", round, err)
		}
	}
}

// TestDoorbellIsolation: doorbells for unknown handles, destroyed objects or
// another context's objects do nothing.
func TestDoorbellIsolation(t *testing.T) {
	r := probed(t, nil)
	resp, _ := r.MustCmd(emu.CmdCreateUC, emutest.NewBody(24).U64(16, r.BAR2>>12+1))
	ctx := le.Uint32(resp[16:])
	resp, _ = r.MustCmd(emu.CmdCreatePD, emutest.NewBody(24).U32(16, ctx))
	pd := le.Uint32(resp[16:])
	cq, _ := r.CreateCQ(ctx, 16)
	cq.UAR = 1
	qp, err := r.CreateQP(emutest.QPSpec{Ctx: ctx, PD: pd, SendCQ: cq, RecvCQ: cq, Type: emu.QPTypeUD,
		SendWR: 4, RecvWR: 4, SendSGE: 1, RecvSGE: 1, UAR: 2})
	if err != nil {
		t.Fatal(err)
	}
	// Into ERR so that a doorbell would flush and produce CQEs.
	if err := qp.Modify(emu.AttrState, emu.QPAttr{State: emu.StateErr}); err != nil {
		t.Fatal(err)
	}
	qp.PostSend(uverbs.SendWQE{WRID: 7, Opcode: uverbs.OpSend}) // rung on page 2: not the QP's page
	r.Doorbell(0, 0, qp.Handle|1<<30)                           // kernel page
	r.Doorbell(1, 0, 0xFFFFFF|1<<30)                            // unknown handle
	r.dev.Sync()
	if _, ok := cq.Poll(); ok {
		t.Fatal("foreign doorbell processed")
	}
	r.Doorbell(1, 0, qp.Handle|1<<30)
	r.dev.Sync()
	e, ok := cq.Poll()
	if !ok || e.Status != uverbs.WCWRFlushErr || e.WRID != 7 {
		t.Fatalf("flush CQE %+v ok=%v", e, ok)
	}
}
