package pvrdma_test

import (
	"encoding/binary"
	"log/slog"
	"math/bits"
	"strings"
	"testing"

	"github.com/hcaemu/hcaemu/emu/emutest"
	"github.com/hcaemu/hcaemu/emu/pvrdma"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	"github.com/hcaemu/hcaemu/emu/verbstest"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
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
	verbstest.CheckGoroutines(t)
}

type rig struct {
	*emutest.Driver
	dev *pvrdma.Device
}

func newRig(t *testing.T, caps *abi.DeviceCaps) *rig {
	t.Helper()
	checkGoroutines(t)
	drv := emutest.New(64 << 20)
	dev := pvrdma.New(pvrdma.Config{Name: "t", Mem: drv.RAM, MSIX: drv.IRQ.Raise, Log: testLog(t),
		MAC: [6]byte{0x00, 0x50, 0x56, 0x01, 0x02, 0x03}, Caps: caps})
	t.Cleanup(dev.Close)
	drv.Dev = dev
	return &rig{Driver: drv, dev: dev}
}

func probed(t *testing.T, caps *abi.DeviceCaps) *rig {
	t.Helper()
	r := newRig(t, caps)
	if err := r.Probe(); err != nil {
		t.Fatalf("probe: %v", err)
	}
	return r
}

// TestActiveMTU: the port's active MTU is the largest IB MTU whose RoCEv2
// packets fit in the segment's Ethernet MTU, as Linux reckons it for
// soft-RoCE (iboe_get_mtu: 96 bytes of headers at most); QUERY_PORT
// answers it.
func TestActiveMTU(t *testing.T) {
	for _, tc := range []struct {
		mtu  int
		want uint32
	}{
		{0, abi.MTU1024}, {1500, abi.MTU1024}, {1119, abi.MTU512}, {1120, abi.MTU1024},
		{2143, abi.MTU1024}, {2144, abi.MTU2048}, {4191, abi.MTU2048}, {4192, abi.MTU4096},
		{9000, abi.MTU4096}, {65535, abi.MTU4096}, {576, abi.MTU256}, {68, abi.MTU256},
	} {
		if got := pvrdma.ActiveMTU(tc.mtu); got != tc.want {
			t.Errorf("ActiveMTU(%d) = %d, want %d", tc.mtu, got, tc.want)
		}
	}
	drv := probedWithConfig(t, func(cfg *pvrdma.Config) { cfg.MTU = 9000 })
	if port, err := drv.QueryPort(1); err != nil || port.ActiveMTU != abi.MTU4096 {
		t.Fatalf("QUERY_PORT on 9000-byte Ethernet: %v, active_mtu %d", err, port.ActiveMTU)
	}
}

// TestProbe runs the kernel's probe sequence: caps, activation, the IB
// core's registration commands and the MAD layer's GSI QP.
func TestProbe(t *testing.T) {
	r := probed(t, nil)
	caps := r.Caps()
	if got := caps.MaxUAR; got != 512 {
		t.Errorf("max_uar = %d", got)
	}
	if caps.GIDTypes != 2 || caps.PhysPortCnt != 1 || caps.Mode != 0 {
		t.Errorf("gid_types %#x phys_port_cnt %d mode %d", caps.GIDTypes, caps.PhysPortCnt, caps.Mode)
	}
	wantGUID := [8]byte{0x02, 0x50, 0x56, 0xff, 0xfe, 0x01, 0x02, 0x03}
	if caps.NodeGUID != wantGUID {
		t.Errorf("node_guid % x", caps.NodeGUID)
	}
	port, err := r.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	if st, gl, pk := port.State, port.GIDTblLen, port.PKeyTblLen; st != 4 || gl != caps.GIDTblLen || pk != 1 {
		t.Errorf("QUERY_PORT state %d gid_tbl_len %d pkey_tbl_len %d", st, gl, pk)
	}
	if port.ActiveMTU != abi.MTU1024 || port.MaxMTU != abi.MTU4096 {
		t.Errorf("QUERY_PORT active_mtu %d max_mtu %d on 1500-byte Ethernet", port.ActiveMTU, port.MaxMTU)
	}
	var pkey abi.CmdQueryPKeyResp
	err = r.MustCmd(&abi.CmdQueryPKey{PortNum: 1}, &pkey)
	if err != nil || pkey.PKey != 0xFFFF {
		t.Fatalf("QUERY_PKEY: %v %#x", err, pkey.PKey)
	}
	gid := [16]byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x50, 0x56, 0xff, 0xfe, 0x01, 0x02, 0x03}
	if err := r.MustCmd(&abi.CmdCreateBind{MTU: 1024, VLAN: 0xfff, Index: 0, NewGID: gid, GIDType: 2}, nil); err != nil {
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
	var gid [16]byte
	gid[10], gid[11], gid[12], gid[15] = 0xff, 0xff, 10, 1
	if err := r.BindGID(1, gid); err != nil {
		t.Fatal(err)
	}
	ctx, err := r.CreateUC(1)
	if err != nil {
		t.Fatal(err)
	}
	if ctx == 0 {
		t.Fatal("context handle 0")
	}
	pd, _ := r.CreatePD(ctx)
	// A 4096-byte buffer starting mid-page spans two pages.
	pages, dir := r.Buffer(2)
	start := uint64(0x7f0000000800)
	mr, err := r.CreateMR(abi.CmdCreateMR{Start: start, Length: 4096, PdirDMA: dir, PDHandle: pd, AccessFlags: 1, NChunks: 2})
	if err != nil {
		t.Fatal(err)
	}
	mrh := mr.MRHandle
	_ = pages
	cq, err := r.CreateCQ(ctx, 512)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := r.CreateQP(emutest.QPSpec{Ctx: ctx, PD: pd, SendCQ: cq, RecvCQ: cq, Type: abi.QPTypeRC,
		SendWR: 1, RecvWR: 512, SendSGE: 1, RecvSGE: 1, UAR: 1})
	if err != nil {
		t.Fatal(err)
	}
	// The QPN carries the handle in its low bits (random bits above).
	if w := bits.Len32(min(r.Caps().MaxQP, 1<<16) - 1); qp.Handle < 2 || qp.QPN&(1<<w-1) != qp.Handle || qp.QPN >= 0xFFFFFF {
		t.Errorf("RC QP handle %d qpn %d", qp.Handle, qp.QPN)
	}
	init := abi.QPAttr{State: abi.QPStateInit, PortNum: 1, AccessFlags: 0}
	if err := qp.Modify(abi.AttrState|abi.AttrPKeyIndex|abi.AttrPort|abi.AttrAccessFlags, init); err != nil {
		t.Fatal(err)
	}
	rtr := abi.QPAttr{State: abi.QPStateRTR, PathMTU: 3, DestQPN: 0x99, RQPSN: 0x123456, MaxDestRdAtomic: 1, MinRNRTimer: 12}
	rtr.AH.SGIDIndex, rtr.AH.HopLimit, rtr.AH.AHFlags = 1, 1, abi.AHFlagGRH
	if err := qp.Modify(abi.AttrState|abi.AttrAV|abi.AttrPathMTU|abi.AttrDestQPN|abi.AttrRQPSN|abi.AttrMaxDestRdAtomic|abi.AttrMinRNRTimer, rtr); err != nil {
		t.Fatal(err)
	}
	rts := abi.QPAttr{State: abi.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: 0x654321, MaxRdAtomic: 1}
	if err := qp.Modify(abi.AttrState|abi.AttrTimeout|abi.AttrRetryCnt|abi.AttrRNRRetry|abi.AttrSQPSN|abi.AttrMaxQPRdAtomic, rts); err != nil {
		t.Fatal(err)
	}
	a, err := qp.Query()
	if err != nil {
		t.Fatal(err)
	}
	if a.State != abi.QPStateRTS || a.DestQPN != 0x99 || a.RQPSN != 0x123456 || a.SQPSN != 0x654321 || a.PathMTU != 3 || a.Cap.MaxRecvWR != 512 {
		t.Errorf("QUERY_QP: %+v", a)
	}
	for _, req := range []abi.Request{
		&abi.CmdDestroyQP{QPHandle: qp.Handle}, &abi.CmdDestroyCQ{CQHandle: cq.Handle}, &abi.CmdDestroyMR{MRHandle: mrh},
		&abi.CmdDestroyPD{PDHandle: pd}, &abi.CmdDestroyUC{CtxHandle: ctx},
	} {
		if err := r.MustCmd(req, nil); err != nil {
			t.Errorf("destroy: %v", err)
		}
	}
}

// TestBeforeActivation: nothing happens before a DSR is loaded and the
// device activated (CVE-2022-1050).
func TestBeforeActivation(t *testing.T) {
	r := newRig(t, nil)
	r.EnablePCI()
	r.WriteReg(abi.RegRequest, 0)
	if r.ReadReg(abi.RegErr) == 0 {
		t.Error("REQUEST before DSR: ERR = 0")
	}
	r.WriteReg(abi.RegCtl, abi.CtlActivate)
	if r.ReadReg(abi.RegErr) == 0 {
		t.Error("ACTIVATE before DSR: ERR = 0")
	}
	r.WriteReg(abi.RegCtl, abi.CtlUnquiesce)
	if r.ReadReg(abi.RegErr) == 0 {
		t.Error("UNQUIESCE before activation: ERR = 0")
	}
	r.Doorbell(0, 0, 1|1<<30)
	r.Doorbell(0, 4, 1|1<<30)
	if n := r.IRQ.Count[0].Load(); n != 0 {
		t.Errorf("%d interrupts before activation", n)
	}
	// A loaded but not activated device refuses commands too.
	r.LoadDSR(4, 4)
	r.WriteReg(abi.RegRequest, 0)
	if r.ReadReg(abi.RegErr) == 0 {
		t.Error("REQUEST before ACTIVATE: ERR = 0")
	}
	// Bus mastering off: the DSR cannot be read, so no caps.
	r2 := newRig(t, nil)
	r2.LoadDSR(4, 4)
	if r2.Caps().MaxUAR != 0 {
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
			return dsrWith(r, 4, 4, func(dsr *abi.DSR) { dsr.CmdSlotDMA = 0x7fff00000000 })
		}},
		{"ring page table zero entry", func(r *rig) uint64 {
			return dsrWith(r, 4, 4, func(dsr *abi.DSR) {
				tbl := r.Get64(dsr.AsyncRingPages.PdirDMA)
				r.Put64(tbl+8, 0)
			})
		}},
		{"ring page outside RAM", func(r *rig) uint64 {
			return dsrWith(r, 4, 4, func(dsr *abi.DSR) {
				tbl := r.Get64(dsr.CQRingPages.PdirDMA)
				r.Put64(tbl+16, 0x7fff00000000)
			})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, nil)
			r.EnablePCI()
			dsr := c.setup(r)
			r.WriteReg(abi.RegDSRLow, uint32(dsr))
			r.WriteReg(abi.RegDSRHigh, uint32(dsr>>32))
			if dsr+abi.DSRSize <= uint64(len(r.RAM.Mem)) {
				var caps abi.DeviceCaps
				caps.Decode(r.RAM.Mem[dsr+abi.DSRCapsOffset:])
				if caps.MaxUAR != 0 {
					t.Error("caps written for a bad DSR")
				}
			}
			r.WriteReg(abi.RegCtl, abi.CtlActivate)
			if r.ReadReg(abi.RegErr) == 0 {
				t.Error("activated with a bad DSR")
			}
			if err := r.Probe(); err != nil {
				t.Errorf("good probe after a bad DSR: %v", err)
			}
		})
	}
}

// dsrWith builds a DSR with the given ring page counts (rings get 4 real
// pages each) and lets edit change it before it is written.
func dsrWith(r *rig, asyncPages, cqPages uint32, edit func(dsr *abi.DSR)) uint64 {
	addr := r.AllocPages(1)
	_, adir := r.Buffer(4)
	_, cdir := r.Buffer(4)
	dsr := abi.DSR{
		DriverVersion:  abi.VersionQPHandle,
		CmdSlotDMA:     r.AllocPages(1),
		RespSlotDMA:    r.AllocPages(1),
		AsyncRingPages: abi.RingPageInfo{NumPages: asyncPages, PdirDMA: adir},
		CQRingPages:    abi.RingPageInfo{NumPages: cqPages, PdirDMA: cdir},
	}
	if edit != nil {
		edit(&dsr)
	}
	dsr.EncodeDriver(r.RAM.Mem[addr:])
	return addr
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
	ctx1, _ := r.CreateUC(1)
	ctx2, _ := r.CreateUC(2)
	pd1, _ := r.CreatePD(ctx1)
	pfn := func(page uint64) uint64 { return r.BAR2>>12 + page }
	cq2, err := r.CreateCQ(ctx2, 64)
	if err != nil {
		t.Fatal(err)
	}
	_, dir1 := r.Buffer(1)
	_, dir4 := r.Buffer(4)

	type mr = abi.CmdCreateMR
	type cq = abi.CmdCreateCQ
	type srq = abi.CmdCreateSRQ
	type srqAttr = abi.SRQAttr
	cases := []struct {
		name string
		op   abi.Opcode // 0: the request's own
		req  abi.Request
	}{
		{"opcode 21", 21, &abi.CmdCreatePD{}},
		{"opcode max", 0xFFFFFFFF, &abi.CmdCreatePD{}},
		{"RESIZE_CQ", 0, &abi.CmdResizeCQ{CQHandle: kcq.Handle, CQE: 2048}},
		{"QUERY_PORT port 2", 0, &abi.CmdQueryPort{PortNum: 2}},
		{"QUERY_PKEY index 1", 0, &abi.CmdQueryPKey{PortNum: 1, Index: 1}},
		{"CREATE_PD unknown ctx", 0, &abi.CmdCreatePD{CtxHandle: 77}},
		{"DESTROY_PD unknown", 0, &abi.CmdDestroyPD{PDHandle: 999}},
		{"DESTROY_PD in use", 0, &abi.CmdDestroyPD{PDHandle: 1}},
		{"CREATE_MR no PD", 0, &mr{Start: 0x1000, Length: 4096, PdirDMA: dir1, PDHandle: 999, AccessFlags: 1, NChunks: 1}},
		{"CREATE_MR length 0", 0, &mr{Start: 0x1000, PdirDMA: dir1, PDHandle: pd1, AccessFlags: 1, NChunks: 1}},
		{"CREATE_MR nchunks mismatch", 0, &mr{Start: 0x1800, Length: 4096, PdirDMA: dir1, PDHandle: pd1, AccessFlags: 1, NChunks: 1}},
		{"CREATE_MR too long", 0, &mr{Start: 0, Length: 1 << 31, PdirDMA: dir1, PDHandle: pd1, AccessFlags: 1, NChunks: 1 << 19}},
		{"CREATE_MR nchunks huge", 0, &mr{Start: 0, Length: 0xFFFFFFFF000, PdirDMA: dir1, PDHandle: pd1, AccessFlags: 1, NChunks: 0xFFFFFFFF}},
		{"CREATE_MR overflow", 0, &mr{Start: 0xFFFFFFFFFFFFF000, Length: 0x2000, PdirDMA: dir1, PDHandle: pd1, AccessFlags: 1, NChunks: 2}},
		{"CREATE_MR remote write w/o local", 0, &mr{Start: 0x1000, Length: 4096, PdirDMA: dir1, PDHandle: pd1, AccessFlags: 2, NChunks: 1}},
		{"CREATE_MR dir outside RAM", 0, &mr{Start: 0x1000, Length: 4096, PdirDMA: 0x7fff00000000, PDHandle: pd1, AccessFlags: 1, NChunks: 1}},
		{"CREATE_MR DMA on user PD", 0, &mr{PDHandle: pd1, AccessFlags: 1, Flags: abi.MRFlagDMA}},
		{"CREATE_MR FRMR 0 pages", 0, &mr{PDHandle: pd1, Flags: abi.MRFlagFRMR}},
		{"CREATE_MR bad flags", 0, &mr{PDHandle: pd1, Flags: 4}},
		{"CREATE_CQ 0 pages", 0, &cq{PdirDMA: dir1, CQE: 64}},
		{"CREATE_CQ too few pages", 0, &cq{PdirDMA: dir1, CQE: 1024, NChunks: 1}},
		{"CREATE_CQ huge pages", 0, &cq{PdirDMA: dir1, CQE: 64, NChunks: 0xFFFFFFFF}},
		{"CREATE_CQ not pow2", 0, &cq{PdirDMA: dir4, CQE: 100, NChunks: 4}},
		{"CREATE_CQ cqe 0", 0, &cq{PdirDMA: dir4, CQE: 0, NChunks: 4}},
		{"CREATE_CQ too big", 0, &cq{PdirDMA: dir4, CQE: 1 << 20, NChunks: 4}},
		{"CREATE_CQ unknown ctx", 0, &cq{PdirDMA: dir4, CtxHandle: 99, CQE: 16, NChunks: 2}},
		{"DESTROY_CQ in use", 0, &abi.CmdDestroyCQ{CQHandle: kcq.Handle}},
		{"DESTROY_CQ unknown", 0, &abi.CmdDestroyCQ{CQHandle: 4000}},
		{"CREATE_QP foreign CQ", 0, qpReq(dir4, pd1, cq2.Handle, cq2.Handle, 4, 4, 4, 1, 1)},
		{"CREATE_QP kernel CQ on user PD", 0, qpReq(dir4, pd1, kcq.Handle, kcq.Handle, 4, 4, 4, 1, 1)},
		{"CREATE_QP no PD", 0, qpReq(dir4, 999, kcq.Handle, kcq.Handle, 4, 4, 4, 1, 1)},
		{"CREATE_QP second GSI", 0, qpReqType(dir4, 1, kcq.Handle, 4, 4, 1, abi.QPTypeGSI)},
		{"CREATE_QP UC", 0, qpReqType(dir4, 1, kcq.Handle, 4, 4, 1, abi.QPTypeUC)},
		{"CREATE_QP type 9", 0, qpReqType(dir4, 1, kcq.Handle, 4, 4, 1, 9)},
		{"CREATE_QP wr not pow2", 0, qpReqType(dir4, 1, kcq.Handle, 3, 4, 1, abi.QPTypeRC)},
		{"CREATE_QP wr too big", 0, qpReqType(dir4, 1, kcq.Handle, 1<<20, 4, 1, abi.QPTypeRC)},
		{"CREATE_QP sge too big", 0, qpReqType(dir4, 1, kcq.Handle, 4, 4, 64, abi.QPTypeRC)},
		{"CREATE_QP pages too few", 0, qpReqType(dir4, 1, kcq.Handle, 1024, 1024, 1, abi.QPTypeRC)},
		{"CREATE_QP total < send", 0, qpReq(dir4, 1, kcq.Handle, kcq.Handle, 4, 4, 1, 1, 2)},
		{"MODIFY_QP unknown", 0, &abi.CmdModifyQP{QPHandle: 777, AttrMask: abi.AttrState}},
		{"QUERY_QP unknown", 0, &abi.CmdQueryQP{QPHandle: 777}},
		{"DESTROY_QP unknown", 0, &abi.CmdDestroyQP{QPHandle: 777}},
		{"CREATE_UC page 0", 0, &abi.CmdCreateUC{PFN64: pfn(0)}},
		{"CREATE_UC page in use", 0, &abi.CmdCreateUC{PFN64: pfn(1)}},
		{"CREATE_UC not BAR2", 0, &abi.CmdCreateUC{PFN64: 0x12345}},
		{"DESTROY_UC unknown", 0, &abi.CmdDestroyUC{CtxHandle: 300}},
		{"CREATE_BIND index 16", 0, &abi.CmdCreateBind{Index: 16, GIDType: 2}},
		{"CREATE_BIND type 3", 0, &abi.CmdCreateBind{Index: 1, GIDType: 3}},
		{"DESTROY_BIND unbound", 0, &abi.CmdDestroyBind{Index: 5}},
		{"CREATE_SRQ not pow2", 0, &srq{PdirDMA: dir4, PDHandle: pd1, NChunks: 4, Attrs: srqAttr{MaxWR: 3, MaxSGE: 1}}},
		{"CREATE_SRQ too few pages", 0, &srq{PdirDMA: dir4, PDHandle: pd1, NChunks: 2, Attrs: srqAttr{MaxWR: 1024, MaxSGE: 1}}},
		{"CREATE_SRQ type 1", 0, &srq{PdirDMA: dir4, PDHandle: pd1, NChunks: 4, Attrs: srqAttr{MaxWR: 4, MaxSGE: 1}, SRQType: 1}},
		{"MODIFY_SRQ unknown", 0, &abi.CmdModifySRQ{SRQHandle: 5, AttrMask: abi.SRQAttrLimit}},
		{"QUERY_SRQ unknown", 0, &abi.CmdQuerySRQ{SRQHandle: 5}},
		{"DESTROY_SRQ unknown", 0, &abi.CmdDestroySRQ{SRQHandle: 5}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			op := c.req.Opcode()
			if c.op != 0 {
				op = c.op
			}
			e, hdr := r.CmdAs(op, c.req, nil)
			if e == 0 {
				t.Fatalf("ERR = 0, want a failure")
			}
			if op < abi.NumOpcodes && hdr.Err == 0 {
				t.Errorf("response err byte 0")
			}
			if hdr.Ack != op.Ack() {
				t.Errorf("ack %#x, want %#x", hdr.Ack, op.Ack())
			}
			if _, err := r.QueryPort(1); err != nil {
				t.Fatalf("device stopped serving: %v", err)
			}
		})
	}
}

func qpReq(dir uint64, pd, scq, rcq, swr, rwr uint32, total, send uint16, typ uint8) *abi.CmdCreateQP {
	return &abi.CmdCreateQP{PdirDMA: dir, PDHandle: pd, SendCQHandle: scq, RecvCQHandle: rcq, MaxSendWR: swr, MaxRecvWR: rwr,
		MaxSendSGE: 1, MaxRecvSGE: 1, TotalChunks: total, SendChunks: send, QPType: typ}
}

func qpReqType(dir uint64, pd, cq, swr, rwr, sge uint32, typ uint8) *abi.CmdCreateQP {
	return &abi.CmdCreateQP{PdirDMA: dir, PDHandle: pd, SendCQHandle: cq, RecvCQHandle: cq, MaxSendWR: swr, MaxRecvWR: rwr,
		MaxSendSGE: sge, MaxRecvSGE: sge, TotalChunks: 4, SendChunks: 1, QPType: typ}
}

// TestModifyQPTransitions checks the IB state table: legal edges succeed,
// illegal ones fail with the response err byte set and leave the state.
func TestModifyQPTransitions(t *testing.T) {
	r := probed(t, nil)
	r.BindGID(0, [16]byte{0xfe, 0x80})
	pd, _ := r.CreatePD(0)
	cq, _ := r.CreateCQ(0, 64)
	mk := func(typ uint8) *emutest.QP {
		q, err := r.CreateQP(emutest.QPSpec{PD: pd, SendCQ: cq, RecvCQ: cq, Type: typ, SendWR: 4, RecvWR: 4, SendSGE: 1, RecvSGE: 1})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	const (
		rcInit = abi.AttrState | abi.AttrPKeyIndex | abi.AttrPort | abi.AttrAccessFlags
		rcRTR  = abi.AttrState | abi.AttrAV | abi.AttrPathMTU | abi.AttrDestQPN | abi.AttrRQPSN | abi.AttrMaxDestRdAtomic | abi.AttrMinRNRTimer
		rcRTS  = abi.AttrState | abi.AttrSQPSN | abi.AttrTimeout | abi.AttrRetryCnt | abi.AttrRNRRetry | abi.AttrMaxQPRdAtomic
		udInit = abi.AttrState | abi.AttrPKeyIndex | abi.AttrPort | abi.AttrQKey
	)
	st := func(s uint32) abi.QPAttr {
		a := abi.QPAttr{State: s, PortNum: 1, PathMTU: 3}
		a.AH.AHFlags = abi.AHFlagGRH
		return a
	}
	type step struct {
		mask uint32
		a    abi.QPAttr
		ok   bool
	}
	cases := []struct {
		name  string
		typ   uint8
		steps []step
	}{
		{"RC happy path", abi.QPTypeRC, []step{{rcInit, st(1), true}, {rcRTR, st(2), true}, {rcRTS, st(3), true},
			{abi.AttrState, st(4), true}, {abi.AttrState, st(3), true}, {abi.AttrState, st(6), true}, {abi.AttrState, st(0), true}}},
		{"RC RESET->RTS", abi.QPTypeRC, []step{{rcRTS, st(3), false}}},
		{"RC RESET->RTR", abi.QPTypeRC, []step{{rcRTR, st(2), false}}},
		{"RC INIT missing attrs", abi.QPTypeRC, []step{{abi.AttrState, st(1), false}}},
		{"RC INIT with QKEY", abi.QPTypeRC, []step{{rcInit | abi.AttrQKey, st(1), false}}},
		{"RC RTR missing AV", abi.QPTypeRC, []step{{rcInit, st(1), true}, {rcRTR &^ abi.AttrAV, st(2), false}}},
		{"RC RTR unbound sgid", abi.QPTypeRC, []step{{rcInit, st(1), true}, {rcRTR, func() abi.QPAttr { a := st(2); a.AH.SGIDIndex = 5; return a }(), false}}},
		{"RC RTR path_mtu 6", abi.QPTypeRC, []step{{rcInit, st(1), true}, {rcRTR, func() abi.QPAttr { a := st(2); a.PathMTU = 6; return a }(), false}}},
		{"RC INIT->RTS", abi.QPTypeRC, []step{{rcInit, st(1), true}, {rcRTS, st(3), false}}},
		{"RC ERR->RTS", abi.QPTypeRC, []step{{abi.AttrState, st(6), true}, {rcRTS, st(3), false}}},
		{"RC bad state 7", abi.QPTypeRC, []step{{abi.AttrState, st(7), false}}},
		{"RC unknown mask bit", abi.QPTypeRC, []step{{rcInit | 1<<21, st(1), false}}},
		{"RC cur_state mismatch", abi.QPTypeRC, []step{{rcInit | abi.AttrCurState, func() abi.QPAttr { a := st(1); a.CurState = 3; return a }(), false}}},
		{"RC port 2", abi.QPTypeRC, []step{{rcInit, func() abi.QPAttr { a := st(1); a.PortNum = 2; return a }(), false}}},
		{"RC retry_cnt 8", abi.QPTypeRC, []step{{rcInit, st(1), true}, {rcRTR, st(2), true}, {rcRTS, func() abi.QPAttr { a := st(3); a.RetryCnt = 8; return a }(), false}}},
		{"UD happy path", abi.QPTypeUD, []step{{udInit, st(1), true}, {abi.AttrState, st(2), true}, {abi.AttrState | abi.AttrSQPSN, st(3), true}, {abi.AttrState | abi.AttrQKey, st(3), true}}},
		{"UD RTR with AV", abi.QPTypeUD, []step{{udInit, st(1), true}, {abi.AttrState | abi.AttrAV, st(2), false}}},
		{"UD RTS without SQ_PSN", abi.QPTypeUD, []step{{udInit, st(1), true}, {abi.AttrState, st(2), true}, {abi.AttrState, st(3), false}}},
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
				if err == nil && s.mask&abi.AttrState != 0 {
					state = s.a.State
				}
				a, qerr := q.Query()
				if qerr != nil {
					t.Fatal(qerr)
				}
				if got := a.State; got != state {
					t.Fatalf("step %d: state %d, want %d", i, got, state)
				}
			}
		})
	}
}

// TestResourceLimits: one object past each limit fails with ENOMEM and the
// table is not overrun.
func TestResourceLimits(t *testing.T) {
	caps := pvrdma.DefaultCaps()
	caps.MaxPD, caps.MaxCQ, caps.MaxQP, caps.MaxMR, caps.MaxSRQ, caps.MaxUAR = 3, 3, 4, 3, 3, 4
	r := probed(t, &caps)
	for i := 0; i < 3; i++ {
		if _, err := r.CreatePD(0); err != nil {
			t.Fatalf("PD %d: %v", i, err)
		}
	}
	if e, _ := r.Cmd(&abi.CmdCreatePD{}, nil); e != 12 {
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
		if _, err := r.CreateUC(uint32(i)); err != nil {
			t.Fatalf("UC %d: %v", i, err)
		}
	}
	// UAR pages beyond max_uar wrap into BAR2's low bits: page 4 = page 0.
	if e, _ := r.Cmd(&abi.CmdCreateUC{PFN64: r.BAR2>>12 + 4}, nil); e == 0 {
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
	if v := r.ReadReg(abi.RegVersion); v != abi.VersionQPHandle {
		t.Errorf("VERSION %d", v)
	}
	r.WriteReg(abi.RegVersion, 5)
	if v := r.ReadReg(abi.RegVersion); v != abi.VersionQPHandle {
		t.Errorf("VERSION writable: %d", v)
	}
	if mac := r.ReadReg(abi.RegMACL); mac != 0x01565000 {
		t.Errorf("MACL %#x", mac)
	}
	if _, err := r.QueryPort(1); err != nil {
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
			r.WriteReg(abi.RegCtl, abi.CtlReset)
			if r.ReadReg(abi.RegErr) != 0 {
				t.Fatal("RESET failed")
			}
		} else {
			r.dev.Reset()
		}
		r.WriteReg(abi.RegRequest, 0)
		if r.ReadReg(abi.RegErr) == 0 {
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
	ctx, _ := r.CreateUC(1)
	pd, _ := r.CreatePD(ctx)
	cq, _ := r.CreateCQ(ctx, 16)
	cq.UAR = 1
	qp, err := r.CreateQP(emutest.QPSpec{Ctx: ctx, PD: pd, SendCQ: cq, RecvCQ: cq, Type: abi.QPTypeUD,
		SendWR: 4, RecvWR: 4, SendSGE: 1, RecvSGE: 1, UAR: 2})
	if err != nil {
		t.Fatal(err)
	}
	// Into ERR so that a doorbell would flush and produce CQEs.
	if err := qp.Modify(abi.AttrState, abi.QPAttr{State: abi.QPStateErr}); err != nil {
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

// TestConfigMaxQP: Config.MaxQP (hcaemu --max-qp) is the max_qp the driver
// reads.
func TestConfigMaxQP(t *testing.T) {
	drv := probedWithConfig(t, func(cfg *pvrdma.Config) { cfg.MaxQP = 65535 })
	if got := drv.Caps().MaxQP; got != 65535 {
		t.Fatalf("max_qp %d", got)
	}
}

// probedWithConfig is a device, configured as adjust says, that the fake
// driver has probed.
func probedWithConfig(t *testing.T, adjust func(*pvrdma.Config)) *emutest.Driver {
	t.Helper()
	drv := emutest.New(16 << 20)
	cfg := pvrdma.Config{Name: "t", Mem: drv.RAM, MSIX: drv.IRQ.Raise, Log: testLog(t)}
	adjust(&cfg)
	dev := pvrdma.New(cfg)
	t.Cleanup(dev.Close)
	drv.Dev = dev
	if err := drv.Probe(); err != nil {
		t.Fatal(err)
	}
	return drv
}
