package mlx5

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/ib/subnet"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/mlx5/mlx5test"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/transport"
)

// verbsRAM is guest RAM for a probe, mlx5_ib's probe and the tests' own
// objects (the fake driver never frees).
const verbsRAM = 16 << 20

// ibProbed is a device with mlx5_core's and mlx5_ib's probes done (no
// finding on the way), in hca.StrictWarn mode; a test that switches it to
// hca.StrictFail gets the finding that latches it in the slice.
// probeIB runs mlx5_core's and then mlx5_ib's probe on drv.
func probeIB(t testing.TB, drv *mlx5test.Driver) *mlx5test.IB {
	t.Helper()
	if err := drv.Probe(); err != nil {
		t.Fatal(err)
	}
	ib, err := drv.IBProbe()
	if err != nil {
		t.Fatal(err)
	}
	return ib
}

func ibProbed(t testing.TB, cfg Config) (*Device, *mlx5test.Driver, *mlx5test.IB, *[]hca.Finding) {
	t.Helper()
	var got []hca.Finding
	cfg.Strict = hca.StrictWarn
	cfg.OnFinding = func(f hca.Finding) { got = append(got, f) }
	d, drv := newDevice(t, cfg, verbsRAM)
	ib := probeIB(t, drv)
	if f := d.Findings(); f != [hca.NumFindingKinds]uint64{} {
		t.Fatalf("findings on the driver's good path: %v", f)
	}
	return d, drv, ib, &got
}

// TestIBProbeUnload: mlx5_ib's probe and ib_mad's port setup after
// mlx5_core's, their unload, twice: the vport context as §5.4.1 wants
// it, QP0 and QP1 in RTS, hardware QPNs other than 0 and 1, every object
// gone after, no finding, no command refused.
func TestIBProbeUnload(t *testing.T) {
	sub := subnet.New(subnet.Config{})
	const node = 0x0002c903000a0b00
	d, drv := newDevice(t, Config{Name: "hca0", Strict: hca.StrictFail, Subnet: sub, NodeGUID: node, OnFinding: func(f hca.Finding) {
		t.Errorf("finding on the driver's good path: %v", f)
	}}, verbsRAM)
	for round := range 2 {
		if err := drv.Probe(); err != nil {
			t.Fatalf("probe %d: %v", round, err)
		}
		ib, err := drv.IBProbe()
		if err != nil {
			t.Fatalf("mlx5_ib probe %d: %v", round, err)
		}
		lid, _ := sub.Owner(2) // the first port the SM assigned: LID 2
		if ib.LID != 2 || lid != "hca0" || ib.SMLID != sub.SMLID() || ib.Node != node || ib.PortGUID != node+1 {
			t.Errorf("vport context: LID %d SM LID %d node %#x port %#x", ib.LID, ib.SMLID, ib.Node, ib.PortGUID)
		}
		ctx, err := drv.QueryHCAVportContext()
		if err != nil {
			t.Fatal(err)
		}
		for name, c := range map[string]struct {
			f    ifc.Field
			want uint32
		}{
			"has_smi": {ifc.HCAVportHasSMI, 1}, "grh_required": {ifc.HCAVportGRHRequired, 0},
			"port_physical_state": {ifc.HCAVportPortPhysicalState, 5}, "port_state": {ifc.HCAVportPortState, 4},
			"vport_state": {ifc.HCAVportVportState, 4}, "subnet_timeout": {ifc.HCAVportSubnetTimeout, 18},
		} {
			if got := c.f.Get(ctx); got != c.want {
				t.Errorf("hca_vport_context.%s = %d, want %d", name, got, c.want)
			}
		}
		for _, q := range []*mlx5test.QP{ib.QP0, ib.QP1} {
			st, ts, found := d.QPState(q.QPN)
			if !found || st != ifc.QPStateRTS || ts != transport.StateRTS || q.QPN <= 1 || q.QPN>>24 != 0 {
				t.Errorf("QP %#x (st %#x): state %d (%v), found %v", q.QPN, q.St, st, ts, found)
			}
		}
		if ib.UMRKey.Key>>8 < FirstMkey {
			t.Errorf("mkey index %d below %d", ib.UMRKey.Key>>8, FirstMkey)
		}
		if err := drv.IBUnload(ib); err != nil {
			t.Fatalf("mlx5_ib unload %d: %v", round, err)
		}
		d.core.Lock()
		n := d.fn.obj.count()
		d.core.Unlock()
		if n != 0 {
			t.Errorf("%d objects after the unload", n)
		}
		if err := drv.Unload(); err != nil {
			t.Fatalf("unload %d: %v", round, err)
		}
	}
	if s := d.Stats(); s.Refused != 0 {
		t.Errorf("%d commands refused", s.Refused)
	}
}

// TestQPWalk: an RC QP RESET→INIT→RTR→RTS, QUERY_QP after each step
// showing the state and every field the transitions set, fields of a
// transition's zeroed qpc that it does not carry keeping their values
// (the merge), an optional field taken only with its opt_param_mask bit;
// illegal transitions refused with BAD_QP_STATE; 2RST from RTS and the
// walk again; DESTROY_QP.
func TestQPWalk(t *testing.T) {
	d, drv, ib, _ := ibProbed(t, Config{})
	cq, err := drv.KernelCQ(64)
	if err != nil {
		t.Fatal(err)
	}
	in, q := drv.CreateQPIn(mlx5test.QPArgs{St: ifc.QPStRC, PD: ib.MADPD, SndCQ: cq.CQN, RcvCQ: cq.CQN,
		SRQ: ib.S1.N, XRCD: ib.XRCD1, LogRQ: 4, LogRQStride: 2, LogSQ: 6, UAR: drv.UAR, UserIndex: 0x1234})
	if q, err = drv.CreateQP(in, q); err != nil {
		t.Fatal(err)
	}
	query := func(state uint32) []byte {
		t.Helper()
		qpc, err := drv.QueryQP(q)
		if err != nil {
			t.Fatal(err)
		}
		if s := ifc.QPCState.Get(qpc); s != state {
			t.Fatalf("QUERY_QP state %d, want %d", s, state)
		}
		return qpc
	}
	created := query(ifc.QPStateRST)
	if ifc.QPCUserIndex.Get(created) != 0x1234 || ifc.QPCPD.Get(created) != ib.MADPD || ifc.QPCCQNSnd.Get(created) != cq.CQN {
		t.Errorf("created qpc: user_index %#x pd %d cqn_snd %d", ifc.QPCUserIndex.Get(created), ifc.QPCPD.Get(created), ifc.QPCCQNSnd.Get(created))
	}
	bad := func(op ifc.Opcode) {
		t.Helper()
		if err := drv.ModifyQP(op, q, 0, nil); !isStatus(err, ifc.StatBadQPStateErr) {
			t.Errorf("%v from the wrong state: %v", op, err)
		}
	}
	bad(ifc.OpInit2RTRQP)
	bad(ifc.OpRTR2RTSQP)
	gid := bytes.Repeat([]byte{0xfe}, 16)
	want := map[string]struct {
		f ifc.Field
		v uint32
	}{}
	expect := func(name string, f ifc.Field, v uint32) {
		want[name] = struct {
			f ifc.Field
			v uint32
		}{f, v}
	}
	walk := func() {
		if err := drv.ModifyQP(ifc.OpRst2InitQP, q, 0, func(qpc []byte) {
			ifc.PriPath(ifc.ADSPKeyIndex).Set(qpc, 3)
			ifc.PriPath(ifc.ADSVhcaPortNum).Set(qpc, 1)
			ifc.QPCRRE.Set(qpc, 1)
			ifc.QPCRWE.Set(qpc, 1)
			ifc.QPCAtomicMode.Set(qpc, 3)
			ifc.QPCRAE.Set(qpc, 1)
		}); err != nil {
			t.Fatal(err)
		}
		expect("pkey_index", ifc.PriPath(ifc.ADSPKeyIndex), 3)
		expect("rre", ifc.QPCRRE, 1)
		expect("rae", ifc.QPCRAE, 1)
		expect("atomic_mode", ifc.QPCAtomicMode, 3)
		query(ifc.QPStateINIT)
		bad(ifc.OpRst2InitQP)
		bad(ifc.OpRTR2RTSQP)
		// INIT2RTR with the remote write bit off and OptRWE: RWE taken;
		// RRE and RAE not selected: kept.
		if err := drv.ModifyQP(ifc.OpInit2RTRQP, q, ifc.OptRWE, func(qpc []byte) {
			ifc.PriPath(ifc.ADSRLID).Set(qpc, 0x2a)
			ifc.PriPath(ifc.ADSSL).Set(qpc, 5)
			ifc.PriPath(ifc.ADSVhcaPortNum).Set(qpc, 1)
			ifc.PriPath(ifc.ADSGRH).Set(qpc, 1)
			copy(ifc.PriPath(ifc.ADSRGIDRIP).Bytes(qpc), gid)
			ifc.QPCMTU.Set(qpc, 5)
			ifc.QPCLogMsgMax.Set(qpc, 30)
			ifc.QPCRemoteQPN.Set(qpc, 0xabcdef)
			ifc.QPCNextRcvPSN.Set(qpc, 0x123456)
			ifc.QPCLogRRAMax.Set(qpc, 4)
			ifc.QPCMinRNRNak.Set(qpc, 12)
			ifc.QPCRRE.Set(qpc, 0) // not selected: ignored
		}); err != nil {
			t.Fatal(err)
		}
		expect("rlid", ifc.PriPath(ifc.ADSRLID), 0x2a)
		expect("sl", ifc.PriPath(ifc.ADSSL), 5)
		expect("mtu", ifc.QPCMTU, 5)
		expect("log_msg_max", ifc.QPCLogMsgMax, 30)
		expect("remote_qpn", ifc.QPCRemoteQPN, 0xabcdef)
		expect("next_rcv_psn", ifc.QPCNextRcvPSN, 0x123456)
		expect("log_rra_max", ifc.QPCLogRRAMax, 4)
		expect("min_rnr_nak", ifc.QPCMinRNRNak, 12)
		expect("rwe", ifc.QPCRWE, 0)
		qpc := query(ifc.QPStateRTR)
		if !bytes.Equal(ifc.PriPath(ifc.ADSRGIDRIP).Bytes(qpc), gid) {
			t.Errorf("rgid_rip % x", ifc.PriPath(ifc.ADSRGIDRIP).Bytes(qpc))
		}
		if err := drv.ModifyQP(ifc.OpRTR2RTSQP, q, 0, func(qpc []byte) {
			ifc.QPCNextSendPSN.Set(qpc, 0x654321)
			ifc.PriPath(ifc.ADSAckTimeout).Set(qpc, 14)
			ifc.QPCRetryCount.Set(qpc, 7)
			ifc.QPCRNRRetry.Set(qpc, 6)
			ifc.QPCLogSRAMax.Set(qpc, 3)
			ifc.QPCMinRNRNak.Set(qpc, 1) // RNR_TIMEOUT not selected: kept
		}); err != nil {
			t.Fatal(err)
		}
		expect("next_send_psn", ifc.QPCNextSendPSN, 0x654321)
		expect("ack_timeout", ifc.PriPath(ifc.ADSAckTimeout), 14)
		expect("retry_count", ifc.QPCRetryCount, 7)
		expect("rnr_retry", ifc.QPCRNRRetry, 6)
		expect("log_sra_max", ifc.QPCLogSRAMax, 3)
		qpc = query(ifc.QPStateRTS)
		for name, w := range want {
			if g := w.f.Get(qpc); g != w.v {
				t.Errorf("after RTR2RTS qpc.%s = %#x, want %#x", name, g, w.v)
			}
		}
		if st, ts, _ := d.QPState(q.QPN); st != ifc.QPStateRTS || ts != transport.StateRTS {
			t.Errorf("state %d %v", st, ts)
		}
		bad(ifc.OpRst2InitQP)
		bad(ifc.OpRTR2RTSQP)
	}
	walk()
	if err := drv.ToRST(q); err != nil {
		t.Fatal(err)
	}
	query(ifc.QPStateRST)
	walk()
	// An optional bit the transition does not take for RC.
	if err := drv.ToRST(q); err != nil {
		t.Fatal(err)
	}
	if err := drv.ModifyQP(ifc.OpRst2InitQP, q, ifc.OptQKey, nil); !isStatus(err, ifc.StatBadParamErr) {
		t.Errorf("RST2INIT with OptQKey: %v", err)
	}
	if err := drv.DestroyQP(q); err != nil {
		t.Fatal(err)
	}
	if err := drv.DestroyQP(q); !isStatus(err, ifc.StatBadResErr) {
		t.Errorf("second DESTROY_QP: %v", err)
	}
	// 10 transitions from the wrong state, an opt_param_mask bit, a
	// second DESTROY_QP.
	if f := d.Findings(); f[hca.FindingQPState] != 11 || f[hca.FindingHandle] != 1 {
		t.Errorf("findings %v", f)
	}
}

// TestMkeyRegion: an MTT mkey is an mr.Region with the driver's key
// (index << 8 | mkey_7_0), its page size and its MTT read once; the key
// is compared on all 32 bits; a PA key is the DMA region.
func TestMkeyRegion(t *testing.T) {
	d, drv, ib, _ := ibProbed(t, Config{})
	pages := []uint64{drv.Alloc(1<<16, 1<<16), drv.Alloc(1<<16, 1<<16), drv.Alloc(1<<16, 1<<16)}
	start := uint64(0x7f0000001000) // mid-page: 3 pages of 64 KiB
	in := drv.CreateMkeyIn(mlx5test.MkeyArgs{PD: ib.MADPD, Mode: ifc.MkcAccessModeMTT, Access: 1 | 2 | 4,
		Start: start, Len: 2<<16 + 1, LogPageSize: 16, MTT: pages, Variant: 0x5c, ExplicitVariant: true})
	k, err := drv.CreateMkey(in)
	if err != nil {
		t.Fatal(err)
	}
	orig := append([]uint64(nil), pages...)
	copy(in[ifc.PASOffset:], make([]byte, 8)) // read once: the device keeps its copy
	d.core.Lock()
	r := mr.Lookup(&d.fn.obj, k.Key, false)
	wrong := mr.Lookup(&d.fn.obj, k.Key+1, false)
	dmaR := mr.Lookup(&d.fn.obj, ib.MADKey.Key, false)
	d.core.Unlock()
	switch {
	case r == nil || wrong != nil || k.Key&0xff != 0x5c:
		t.Fatalf("key %#x: region %v, key+1 %v", k.Key, r, wrong)
	case r.PageShift != 16 || r.Start != start || r.Length != 2<<16+1 || len(r.Pages) != 3 || r.Pages[0] == 0:
		t.Errorf("region %+v", r)
	case r.Access != mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead || r.PD != ib.MADPD || r.LKey != r.RKey:
		t.Errorf("region access %#x pd %d", r.Access, r.PD)
	case dmaR == nil || !dmaR.DMA:
		t.Errorf("the PA key %#x: %+v", ib.MADKey.Key, dmaR)
	}
	// Translation from start rounded down to the page: va start+0xe000
	// is byte 0xf000 of page 0.
	var segs []uint64
	err = r.Span(start+0xe000, 0x2000, func(gpa, n, _ uint64) error { segs = append(segs, gpa, n); return nil })
	if want := []uint64{orig[0] + 0xf000, 0x1000, orig[1], 0x1000}; err != nil || !slices.Equal(segs, want) {
		t.Errorf("span %#x: %v, want %#x", segs, err, want)
	}
	if err := drv.DestroyMkey(k); err != nil {
		t.Fatal(err)
	}
	if err := drv.DestroyMkey(k); !isStatus(err, ifc.StatBadResErr) {
		t.Errorf("second DESTROY_MKEY: %v", err)
	}
}

// TestVerbsValidation: each verbs command refuses what it must, with the
// status the driver reads, a finding naming the structure and field, no
// object made or lost, and in strict-fail mode the latch.
func TestVerbsValidation(t *testing.T) {
	type env struct {
		drv *mlx5test.Driver
		ib  *mlx5test.IB
		cq  *mlx5test.CQ
	}
	qpIn := func(e env, edit func(a *mlx5test.QPArgs)) func() []byte {
		return func() []byte {
			a := mlx5test.QPArgs{St: ifc.QPStRC, PD: e.ib.MADPD, SndCQ: e.cq.CQN, RcvCQ: e.cq.CQN, SRQ: e.ib.S1.N,
				XRCD: e.ib.XRCD1, LogRQ: 4, LogRQStride: 2, LogSQ: 4, UAR: e.drv.UAR}
			edit(&a)
			in, _ := e.drv.CreateQPIn(a)
			return in
		}
	}
	editQPC := func(in []byte, edit func(qpc []byte)) []byte { edit(ifc.QPInQPC.Bytes(in)); return in }
	// modIn is a transition op's input for a new RC QP taken to state
	// (RST or INIT), its qpc built by set.
	modIn := func(e env, op ifc.Opcode, state uint32, set func(qpc []byte)) []byte {
		q, err := e.drv.CreateQP(qpIn(e, func(*mlx5test.QPArgs) {})(), &mlx5test.QP{St: ifc.QPStRC})
		if err == nil && state == ifc.QPStateINIT {
			err = e.drv.ModifyQP(ifc.OpRst2InitQP, q, 0, nil)
		}
		if err != nil {
			panic(err)
		}
		in := mboxIn(op, 0, ifc.Linux612ModifyQPInSize)
		ifc.ObjIn.Set(in, q.QPN)
		set(ifc.QPInQPC.Bytes(in))
		return in
	}
	obj := func(op ifc.Opcode, h uint32) []byte {
		in := mboxIn(op, 0, ifc.Linux612CmdSize)
		ifc.ObjIn.Set(in, h)
		return in
	}
	cases := []struct {
		name string
		in   func(e env) []byte
		out  uint32
		st   ifc.Status
		synd uint32
		text string
	}{
		{"dealloc_pd unknown", func(e env) []byte { return obj(ifc.OpDeallocPD, 999) }, 16, ifc.StatBadResErr, SyndUnknown, "dealloc_pd_in.pd=0x3e7: no such PD"},
		{"dealloc_pd busy", func(e env) []byte { return obj(ifc.OpDeallocPD, e.ib.MADPD) }, 16, ifc.StatResBusy, SyndBusy, "dealloc_pd_in.pd="},
		{"dealloc_xrcd busy", func(e env) []byte { return obj(ifc.OpDeallocXRCD, e.ib.XRCD0) }, 16, ifc.StatResBusy, SyndBusy, "dealloc_xrcd_in.xrcd="},
		{"dealloc_xrcd unknown", func(e env) []byte { return obj(ifc.OpDeallocXRCD, 0) }, 16, ifc.StatBadResErr, SyndUnknown, "dealloc_xrcd_in.xrcd=0x0"},
		{"destroy_cq busy", func(e env) []byte { return obj(ifc.OpDestroyCQ, e.ib.MADCQ.CQN) }, 16, ifc.StatResBusy, SyndBusy, "destroy_cq_in.cqn="},
		{"destroy_cq c0 busy (XRC SRQ)", func(e env) []byte { return obj(ifc.OpDestroyCQ, e.ib.C0.CQN) }, 16, ifc.StatResBusy, SyndBusy, "destroy_cq_in.cqn="},
		{"destroy_rmp busy", func(e env) []byte { return obj(ifc.OpDestroyRMP, e.ib.S1.N) }, 16, ifc.StatResBusy, SyndBusy, "destroy_rmp_in.rmpn="},
		{"destroy_rmp of an XRC SRQ", func(e env) []byte { return obj(ifc.OpDestroyRMP, e.ib.S0.N) }, 16, ifc.StatBadResErr, SyndUnknown, "no such RMP"},
		{"destroy_xrc_srq of an RMP", func(e env) []byte { return obj(ifc.OpDestroyXRCSRQ, e.ib.S1.N) }, 16, ifc.StatBadResErr, SyndUnknown, "no such XRC SRQ"},
		{"destroy_mkey unknown", func(e env) []byte { return obj(ifc.OpDestroyMkey, 1) }, 16, ifc.StatBadResErr, SyndUnknown, "destroy_mkey_in.mkey_index=0x1"},
		{"destroy_qp wrong high bits", func(e env) []byte { return obj(ifc.OpDestroyQP, e.ib.QP1.QPN^0x800000) }, 16, ifc.StatBadResErr, SyndUnknown, "destroy_qp_in.qpn="},
		{"query_qp unknown", func(e env) []byte { return obj(ifc.OpQueryQP, 0) }, ifc.Linux612QueryQPOutSize, ifc.StatBadResErr, SyndUnknown, "query_qp_in.qpn=0x0"},
		{"destroy_eq of the completion EQ a CQ uses", func(e env) []byte {
			in := mboxIn(ifc.OpDestroyEQ, 0, 16)
			ifc.DestroyEQInEQNumber.Set(in, uint32(e.drv.CompEQ.EQN))
			return in
		}, 16, ifc.StatResBusy, SyndBusy, "destroy_eq_in.eq_number=2: 3 CQs"},
		{"dealloc_uar an EQ rings through", func(e env) []byte {
			return obj(ifc.OpDeallocUAR, e.drv.UAR) // the kernel's UAR
		}, 16, ifc.StatResBusy, SyndUARBusy, "dealloc_uar_in.uar="},
		{"create_mkey missing PD", func(e env) []byte {
			return e.drv.CreateMkeyIn(mlx5test.MkeyArgs{PD: 4242, Mode: ifc.MkcAccessModePA, Length64: true})
		}, 16, ifc.StatBadParamErr, SyndRef, "create_mkey_in.memory_key_mkey_entry.pd=0x1092: no such PD"},
		{"create_mkey MTT outside guest memory", func(e env) []byte {
			return e.drv.CreateMkeyIn(mlx5test.MkeyArgs{PD: e.ib.MADPD, Mode: ifc.MkcAccessModeMTT, Start: 0x1000, Len: 0x2000, LogPageSize: 12, MTT: []uint64{ramBase, 1 << 40}})
		}, 16, ifc.StatBadParamErr, SyndPAS, "create_mkey_in.klm_pas_mtt.pas[1]=0x10000000000"},
		{"create_mkey MTT misaligned", func(e env) []byte {
			return e.drv.CreateMkeyIn(mlx5test.MkeyArgs{PD: e.ib.MADPD, Mode: ifc.MkcAccessModeMTT, Start: 0, Len: 0x1000, LogPageSize: 13, MTT: []uint64{ramBase + 0x1000}})
		}, 16, ifc.StatBadParamErr, SyndPAS, "not aligned to the 8192-byte page"},
		{"create_mkey MTT short", func(e env) []byte {
			return e.drv.CreateMkeyIn(mlx5test.MkeyArgs{PD: e.ib.MADPD, Mode: ifc.MkcAccessModeMTT, Start: 0x800, Len: 0x2000, LogPageSize: 12, MTT: []uint64{ramBase}})
		}, 16, ifc.StatBadParamErr, SyndPASLen, "translations_octword_size=1, translations_octword_actual_size=1 for the 3 pages"},
		{"create_mkey log_page_size", func(e env) []byte {
			return e.drv.CreateMkeyIn(mlx5test.MkeyArgs{PD: e.ib.MADPD, Mode: ifc.MkcAccessModeMTT, Len: 0x1000, LogPageSize: 11, MTT: []uint64{ramBase}})
		}, 16, ifc.StatBadParamErr, SyndContext, "create_mkey_in.memory_key_mkey_entry.log_page_size=11"},
		{"create_mkey KSM", func(e env) []byte {
			return e.drv.CreateMkeyIn(mlx5test.MkeyArgs{PD: e.ib.MADPD, Mode: ifc.MkcAccessModeKSM})
		}, 16, ifc.StatBadParamErr, SyndContext, "access_mode=3"},
		{"create_cq log_cq_size", func(e env) []byte {
			in, _ := e.drv.CreateCQIn(1, e.drv.CompEQ.EQN, e.drv.UAR)
			ifc.CQCLogCQSize.Set(ifc.CreateCQInCQC.Bytes(in), 23)
			return in
		}, 16, ifc.StatBadParamErr, SyndContext, "create_cq_in.cq_context.log_cq_size=23 > log_max_cq_sz=22"},
		{"create_cq no EQ", func(e env) []byte {
			in, _ := e.drv.CreateCQIn(1, 9, e.drv.UAR)
			return in
		}, 16, ifc.StatBadParamErr, SyndRef, "create_cq_in.cq_context.c_eqn_or_apu_element=0x9: no such EQ"},
		{"create_cq foreign UAR", func(e env) []byte {
			in, _ := e.drv.CreateCQIn(1, e.drv.CompEQ.EQN, e.drv.UAR+5)
			return in
		}, 16, ifc.StatBadParamErr, SyndRef, "create_cq_in.cq_context.uar_page"},
		{"create_cq PAS outside guest memory", func(e env) []byte {
			in, _ := e.drv.CreateCQIn(1, e.drv.CompEQ.EQN, e.drv.UAR)
			be.PutUint64(in[ifc.PASOffset:], 1<<40)
			return in
		}, 16, ifc.StatBadParamErr, SyndPAS, "create_cq_in.pas[0]=0x10000000000"},
		{"create_cq short PAS", func(e env) []byte {
			in, _ := e.drv.CreateCQIn(1000, e.drv.CompEQ.EQN, e.drv.UAR)
			return in[:ifc.PASOffset+8]
		}, 16, ifc.StatBadInpLenErr, SyndPASLen, "create_cq_in: inlen=280 < 400"},
		{"create_cq dbr", func(e env) []byte {
			in, _ := e.drv.CreateCQIn(1, e.drv.CompEQ.EQN, e.drv.UAR)
			ifc.CQCDBRAddr.Set64(ifc.CreateCQInCQC.Bytes(in), ramBase+4)
			return in
		}, 16, ifc.StatBadParamErr, SyndDBR, "create_cq_in.cq_context.dbr_addr=0x100004: not 8-byte aligned"},
		{"create_qp log_page_size", func(e env) []byte {
			in := qpIn(e, func(*mlx5test.QPArgs) {})()
			return editQPC(in, func(qpc []byte) { ifc.QPCLogPageSize.Set(qpc, 19) })
		}, 16, ifc.StatBadParamErr, SyndContext, "create_qp_in.qpc.log_page_size=19 > 18"},
		{"create_qp log_rq_stride", func(e env) []byte {
			return qpIn(e, func(a *mlx5test.QPArgs) { a.LogRQStride = 6; a.LogRQ = 0 })()
		}, 16, ifc.StatBadParamErr, SyndContext, "create_qp_in.qpc.log_rq_stride=6"},
		{"create_qp st", func(e env) []byte {
			return qpIn(e, func(a *mlx5test.QPArgs) { a.St = ifc.QPStDCI })()
		}, 16, ifc.StatBadParamErr, SyndContext, "create_qp_in.qpc.st=0x5"},
		{"create_qp rq_type", func(e env) []byte {
			return qpIn(e, func(a *mlx5test.QPArgs) { a.RQType = ifc.RQTypeCRQ })()
		}, 16, ifc.StatBadParamErr, SyndContext, "create_qp_in.qpc.rq_type=2"},
		{"create_qp missing PD", func(e env) []byte {
			return qpIn(e, func(a *mlx5test.QPArgs) { a.PD = 777 })()
		}, 16, ifc.StatBadParamErr, SyndRef, "create_qp_in.qpc.pd=0x309: no such PD"},
		{"create_qp missing send CQ", func(e env) []byte {
			return qpIn(e, func(a *mlx5test.QPArgs) { a.SndCQ = 0 })()
		}, 16, ifc.StatBadParamErr, SyndRef, "create_qp_in.qpc.cqn_snd=0x0: no such CQ"},
		{"create_qp missing receive CQ", func(e env) []byte {
			return qpIn(e, func(a *mlx5test.QPArgs) { a.RcvCQ = 4000 })()
		}, 16, ifc.StatBadParamErr, SyndRef, "create_qp_in.qpc.cqn_rcv=0xfa0"},
		{"create_qp missing SRQ", func(e env) []byte {
			return qpIn(e, func(a *mlx5test.QPArgs) { a.RQType = ifc.RQTypeSRQ; a.SRQ = 999 })()
		}, 16, ifc.StatBadParamErr, SyndRef, "create_qp_in.qpc.srqn_rmpn_xrqn=0x3e7: no such SRQ"},
		{"create_qp missing XRCD", func(e env) []byte {
			return qpIn(e, func(a *mlx5test.QPArgs) { a.XRCD = 99 })()
		}, 16, ifc.StatBadParamErr, SyndRef, "create_qp_in.qpc.xrcd=0x63: no such XRCD"},
		{"create_qp foreign UAR", func(e env) []byte {
			return qpIn(e, func(a *mlx5test.QPArgs) { a.UAR = 3 })()
		}, 16, ifc.StatBadParamErr, SyndRef, "create_qp_in.qpc.uar_page=0x3"},
		{"create_qp PAS outside guest memory", func(e env) []byte {
			in := qpIn(e, func(*mlx5test.QPArgs) {})()
			be.PutUint64(in[ifc.PASOffset:], 1<<41)
			return in
		}, 16, ifc.StatBadParamErr, SyndPAS, "create_qp_in.pas[0]=0x20000000000"},
		{"create_qp short PAS", func(e env) []byte {
			in := qpIn(e, func(*mlx5test.QPArgs) {})()
			return in[:ifc.PASOffset]
		}, 16, ifc.StatBadInpLenErr, SyndPASLen, "create_qp_in: inlen=272 < 280"},
		{"create_qp dbr", func(e env) []byte {
			in := qpIn(e, func(*mlx5test.QPArgs) {})()
			return editQPC(in, func(qpc []byte) { ifc.QPCDBRAddr.Set64(qpc, 1<<42) })
		}, 16, ifc.StatBadParamErr, SyndDBR, "create_qp_in.qpc.dbr_addr=0x40000000000"},
		{"create_qp input_qpn", func(e env) []byte {
			in := qpIn(e, func(*mlx5test.QPArgs) {})()
			ifc.CreateQPInInputQPN.Set(in, 5)
			return in
		}, 16, ifc.StatBadParamErr, SyndContext, "create_qp_in.input_qpn=0x5"},
		{"create_rmp missing PD", func(e env) []byte {
			in, _ := e.drv.CreateRMPIn(31, 0, 5)
			return in
		}, 16, ifc.StatBadParamErr, SyndRef, "create_rmp_in.ctx.wq.pd=0x1f: no such PD"},
		{"create_rmp log_wq_sz", func(e env) []byte {
			in, _ := e.drv.CreateRMPIn(e.ib.P0, 16, 5)
			return in
		}, 16, ifc.StatBadParamErr, SyndContext, "create_rmp_in.ctx.wq.log_wq_sz=16 > log_max_srq_sz=15"},
		{"create_rmp state", func(e env) []byte {
			in, _ := e.drv.CreateRMPIn(e.ib.P0, 0, 5)
			ifc.RMPCState.Set(ifc.CreateRMPInCtx.Bytes(in), 0)
			return in
		}, 16, ifc.StatBadParamErr, SyndContext, "create_rmp_in.ctx.state=0"},
		{"create_xrc_srq missing XRCD", func(e env) []byte {
			in, _ := e.drv.CreateXRCSRQIn(e.ib.P0, 77, e.ib.C0.CQN, 0, 0, 1)
			return in
		}, 16, ifc.StatBadParamErr, SyndRef, "create_xrc_srq_in.xrc_srq_context_entry.xrcd=0x4d: no such XRCD"},
		{"create_xrc_srq missing CQ", func(e env) []byte {
			in, _ := e.drv.CreateXRCSRQIn(e.ib.P0, e.ib.XRCD0, 77, 0, 0, 1)
			return in
		}, 16, ifc.StatBadParamErr, SyndRef, "create_xrc_srq_in.xrc_srq_context_entry.cqn=0x4d: no such CQ"},
		{"create_xrc_srq db_record_addr", func(e env) []byte {
			in, _ := e.drv.CreateXRCSRQIn(e.ib.P0, e.ib.XRCD0, e.ib.C0.CQN, 0, 0, 1)
			ifc.XRCSRQCDBRAddrH.Set(ifc.CreateXRCSRQInCtx.Bytes(in), 0x100)
			return in
		}, 16, ifc.StatBadParamErr, SyndDBR, "create_xrc_srq_in.xrc_srq_context_entry.db_record_addr=0x100"},
		{"rst2init of a QP in RTS", func(e env) []byte {
			in := mboxIn(ifc.OpRst2InitQP, 0, ifc.Linux612ModifyQPInSize)
			ifc.ObjIn.Set(in, e.ib.QP1.QPN)
			return in
		}, 16, ifc.StatBadQPStateErr, SyndQPState, "in RTS: RST2INIT_QP leaves RST only"},
		{"rst2init dbr_addr outside guest memory", func(e env) []byte {
			return modIn(e, ifc.OpRst2InitQP, ifc.QPStateRST, func(qpc []byte) { ifc.QPCDBRAddr.Set64(qpc, 1<<43) })
		}, 16, ifc.StatBadParamErr, SyndDBR, "rst2init_qp_in.qpc.dbr_addr=0x80000000000"},
		{"init2rtr of a QP in RTS", func(e env) []byte {
			in := mboxIn(ifc.OpInit2RTRQP, 0, ifc.Linux612ModifyQPInSize)
			ifc.ObjIn.Set(in, e.ib.QP1.QPN)
			return in
		}, 16, ifc.StatBadQPStateErr, SyndQPState, "INIT2RTR_QP leaves INIT only"},
		{"init2rtr mtu", func(e env) []byte {
			return modIn(e, ifc.OpInit2RTRQP, ifc.QPStateINIT, func(qpc []byte) {
				ifc.QPCMTU.Set(qpc, 6)
				ifc.PriPath(ifc.ADSVhcaPortNum).Set(qpc, 1)
			})
		}, 16, ifc.StatBadParamErr, SyndContext, "init2rtr_qp_in.qpc.mtu=6: IB MTU 256 (1) to 4096 (5)"},
		{"init2rtr RC without a port", func(e env) []byte {
			return modIn(e, ifc.OpInit2RTRQP, ifc.QPStateINIT, func(qpc []byte) { ifc.QPCMTU.Set(qpc, 5) })
		}, 16, ifc.StatBadParamErr, SyndContext, "init2rtr_qp_in.qpc.primary_address_path.vhca_port_num=0: port 1 only"},
		{"rst2init pkey_index", func(e env) []byte {
			return modIn(e, ifc.OpRst2InitQP, ifc.QPStateRST, func(qpc []byte) { ifc.PriPath(ifc.ADSPKeyIndex).Set(qpc, 128) })
		}, 16, ifc.StatBadParamErr, SyndContext, "rst2init_qp_in.qpc.primary_address_path.pkey_index=128 >= 128 P_Keys"},
		{"query_hca_vport_context other vport", func(e env) []byte {
			in := mboxIn(ifc.OpQueryHCAVportContext, 0, 16)
			ifc.QueryHCAVportContextInOtherVport.Set(in, 1)
			ifc.QueryHCAVportContextInVportNumber.Set(in, 1)
			return in
		}, ifc.Linux612QueryHCAVportCtxOutSz, ifc.StatBadParamErr, SyndVport, "query_hca_vport_context_in.other_vport=1"},
		{"query_hca_vport_context port 2", func(e env) []byte {
			in := mboxIn(ifc.OpQueryHCAVportContext, 0, 16)
			ifc.QueryHCAVportContextInPortNum.Set(in, 2)
			return in
		}, ifc.Linux612QueryHCAVportCtxOutSz, ifc.StatBadParamErr, SyndVport, "port_num=2"},
		{"query_qp short output", func(e env) []byte { return obj(ifc.OpQueryQP, e.ib.QP0.QPN) }, 0xf0, ifc.StatBadOutpLenErr, SyndOutLen, "outlen=240 < sizeof query_qp_out=256"},
		{"create_qp short input", func(e env) []byte { return qpIn(e, func(*mlx5test.QPArgs) {})()[:0xf0] }, 16, ifc.StatBadInpLenErr, SyndInLen, "inlen=240 < sizeof create_qp_in=256"},
		{"create_tis (Ethernet) is not implemented", func(e env) []byte { return mboxIn(ifc.OpCreateTIS, 0, 0x110) }, 0x110, ifc.StatBadOpErr, SyndUnsupportedOpcode, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, drv, ib, got := ibProbed(t, Config{})
			cq, err := drv.KernelCQ(16)
			if err != nil {
				t.Fatal(err)
			}
			e := env{drv, ib, cq}
			in := c.in(e)
			d.core.Lock()
			d.strict.Mode = hca.StrictFail // from here: the finding is reported, the device latched
			n, pinned := d.fn.obj.count(), d.fn.pins.Pinned()
			d.core.Unlock()
			out, err := drv.Exec(in, c.out)
			var ce *mlx5test.CmdError
			if !errors.As(err, &ce) || ce.Status != c.st || ce.Syndrome != c.synd {
				t.Fatalf("%v, want status %v syndrome %#x", err, c.st, c.synd)
			}
			if !allZero(out[8:]) {
				t.Errorf("failed command's output beyond its header: % x", out[:min(len(out), 32)])
			}
			d.core.Lock()
			if d.fn.obj.count() != n || d.fn.pins.Pinned() != pinned {
				t.Errorf("objects %d pinned %d, were %d %d", d.fn.obj.count(), d.fn.pins.Pinned(), n, pinned)
			}
			d.core.Unlock()
			if c.text == "" {
				return
			}
			if len(*got) != 1 || !strings.Contains((*got)[0].Text, c.text) {
				t.Fatalf("findings %v, want one naming %q", *got, c.text)
			}
			if _, err := drv.Exec(mboxIn(ifc.OpQueryISSI, 0, 16), 0x70); !isStatus(err, ifc.StatIntErr) {
				t.Errorf("after the latch: %v", err)
			}
		})
	}
}

// TestVerbsLimits: the tables are bounded by the caps the device reports
// (log_max_qp as SET_HCA_CAP left it): the object beyond is LIM_ERR.
func TestVerbsLimits(t *testing.T) {
	d, drv, _, _ := ibProbed(t, Config{})
	d.core.Lock()
	small := hca.NewTable[refd]("XRCD", 1, 4) // 3 handles: the probe's 2 and one more
	for _, h := range d.fn.obj.xrcds.Handles() {
		if err := small.Put(h, d.fn.obj.xrcds.Get(h)); err != nil {
			t.Fatal(err)
		}
	}
	d.fn.obj.xrcds = small
	limits := map[string]uint32{"PD": d.fn.obj.pds.Limit(), "QP": d.fn.obj.qps.Limit(), "mkey": d.fn.obj.mkeys.Limit(), "CQ": d.fn.obj.cqs.Limit()}
	d.core.Unlock()
	if _, err := drv.AllocXRCD(); err != nil {
		t.Fatal(err)
	}
	if _, err := drv.AllocXRCD(); !isStatus(err, ifc.StatLimErr) {
		t.Errorf("ALLOC_XRCD beyond the table: %v", err)
	}
	for name, want := range map[string]uint32{"PD": 1 << 18, "QP": 1 << 16, "mkey": 1 << 20, "CQ": 1 << 16} {
		if limits[name] != want {
			t.Errorf("%s table limit %d, want %d", name, limits[name], want)
		}
	}
}

// TestTeardownFreesVerbs: TEARDOWN_HCA with verbs objects left frees
// them (a finding), and the next probe starts from empty tables.
func TestTeardownFreesVerbs(t *testing.T) {
	d, drv, _, _ := ibProbed(t, Config{})
	// The command EQ goes with the rest: the command completes by polling.
	drv.CmdEQ, drv.Events = nil, false
	in := mboxIn(ifc.OpTeardownHCA, 0, 16)
	if _, err := drv.Exec(in, 16); err != nil {
		t.Fatal(err)
	}
	if f := d.Findings(); f[hca.FindingHandle] != 1 {
		t.Errorf("findings %v, want the one of the objects TEARDOWN_HCA freed", f)
	}
	d.core.Lock()
	n, pinned := d.fn.obj.count(), d.fn.pins.Pinned()
	d.core.Unlock()
	if n != 0 || pinned != 0 {
		t.Errorf("%d objects, %d pages pinned after TEARDOWN_HCA", n, pinned)
	}
}

func TestTransportState(t *testing.T) {
	for _, tc := range []struct {
		mlx5 uint8 // enum mlx5_qp_state
		want transport.State
	}{
		{0, transport.StateReset}, {1, transport.StateInit}, {2, transport.StateRTR}, {3, transport.StateRTS},
		{4, transport.StateSQE}, {5, transport.StateSQD}, {6, transport.StateErr}, {7, transport.StateSQD},
		{8, transport.StateErr}, {255, transport.StateErr}, // not a state the device keeps
	} {
		if got := transportState(tc.mlx5); got != tc.want {
			t.Errorf("transportState(%d) = %d, want %d", tc.mlx5, got, tc.want)
		}
	}
}

// TestKernelQPKinds: the QPs mlx5_ib creates besides QP0 and QP1, as it
// creates them: an XRC target QP (no SQ, the XRC SRQ s0, no buffer, no
// doorbell record, no UAR), the REG_UMR QP (a zero-length RQ) taken to
// RTS with no path (UD-like transitions), a UD QP with the P_Key and
// Q_Key optional at INIT2RTR; then the objects they name are busy until
// they go.
func TestKernelQPKinds(t *testing.T) {
	d, drv, ib, _ := ibProbed(t, Config{})
	xrcd, err := drv.AllocXRCD()
	if err != nil {
		t.Fatal(err)
	}
	in, tgt := drv.CreateQPIn(mlx5test.QPArgs{St: ifc.QPStXRC, PD: ib.P0, SndCQ: ib.C0.CQN, RcvCQ: ib.C0.CQN,
		RQType: ifc.RQTypeSRQ, SRQ: ib.S0.N, XRCD: xrcd, NoSQ: true})
	if len(in) != ifc.Linux612CreateQPInSize {
		t.Fatalf("XRC TGT create_qp_in of %d bytes: a page list", len(in))
	}
	if tgt, err = drv.CreateQP(in, tgt); err != nil {
		t.Fatal(err)
	}
	umrCQ, err := drv.KernelCQ(128)
	if err != nil {
		t.Fatal(err)
	}
	// Linux 6.12's REG_UMR QP names no PD (create_kernel_qp sets
	// latency_sensitive in its place): a real guest's UMR QP failed on
	// "no such PD" and with it every user MR registration.
	in, umr := drv.CreateQPIn(mlx5test.QPArgs{St: ifc.QPStRegUMR, PD: 0, SndCQ: umrCQ.CQN, RcvCQ: umrCQ.CQN,
		RQType: ifc.RQTypeZeroLen, LogSQ: 9, UAR: drv.UAR})
	if umr, err = drv.CreateQP(in, umr); err != nil {
		t.Fatal(err)
	}
	in, ud := drv.CreateQPIn(mlx5test.QPArgs{St: ifc.QPStUD, PD: ib.MADPD, SndCQ: umrCQ.CQN, RcvCQ: ib.MADCQ.CQN,
		SRQ: ib.S1.N, XRCD: ib.XRCD1, LogRQ: 8, LogRQStride: 1, LogSQ: 8, UAR: drv.UAR})
	if ud, err = drv.CreateQP(in, ud); err != nil {
		t.Fatal(err)
	}
	// mlx5r_umr_qp_rst2rts: INIT with P_Key index 0 and port 1, then RTR
	// and RTS with nothing but the always-written fields.
	if err := drv.ModifyQP(ifc.OpRst2InitQP, umr, 0, func(qpc []byte) { ifc.PriPath(ifc.ADSVhcaPortNum).Set(qpc, 1) }); err != nil {
		t.Fatal(err)
	}
	for _, op := range []ifc.Opcode{ifc.OpInit2RTRQP, ifc.OpRTR2RTSQP} {
		if err := drv.ModifyQP(op, umr, 0, func(qpc []byte) {
			ifc.QPCMTU.Set(qpc, 5)
			ifc.QPCLogMsgMax.Set(qpc, 30)
		}); err != nil {
			t.Fatalf("UMR QP %v: %v", op, err)
		}
	}
	// IPoIB's UD QP: the Q_Key at RST2INIT, then changed at INIT2RTR with
	// its optional bit, the P_Key index left.
	if err := drv.ModifyQP(ifc.OpRst2InitQP, ud, 0, func(qpc []byte) {
		ifc.PriPath(ifc.ADSPKeyIndex).Set(qpc, 2)
		ifc.PriPath(ifc.ADSVhcaPortNum).Set(qpc, 1)
		ifc.QPCQKey.Set(qpc, 0x0b1b)
	}); err != nil {
		t.Fatal(err)
	}
	if err := drv.ModifyQP(ifc.OpInit2RTRQP, ud, ifc.OptQKey, func(qpc []byte) {
		ifc.QPCMTU.Set(qpc, 5)
		ifc.QPCLogMsgMax.Set(qpc, 12)
		ifc.QPCQKey.Set(qpc, 0x1234)
	}); err != nil {
		t.Fatal(err)
	}
	qpc, err := drv.QueryQP(ud)
	if err != nil {
		t.Fatal(err)
	}
	if k, p := ifc.QPCQKey.Get(qpc), ifc.PriPath(ifc.ADSPKeyIndex).Get(qpc); k != 0x1234 || p != 2 || ifc.QPCState.Get(qpc) != ifc.QPStateRTR {
		t.Errorf("UD QP after INIT2RTR: q_key %#x pkey_index %d state %d", k, p, ifc.QPCState.Get(qpc))
	}
	if err := drv.DeallocXRCD(xrcd); !isStatus(err, ifc.StatResBusy) {
		t.Errorf("DEALLOC_XRCD of the XRC TGT QP's domain: %v", err)
	}
	if err := drv.DestroySRQ(ib.S0); !isStatus(err, ifc.StatResBusy) {
		t.Errorf("DESTROY_XRC_SRQ of s0 under the XRC TGT QP: %v", err)
	}
	if err := drv.DestroyCQ(umrCQ); !isStatus(err, ifc.StatResBusy) {
		t.Errorf("DESTROY_CQ of the UMR QP's CQ: %v", err)
	}
	for _, q := range []*mlx5test.QP{tgt, umr, ud} {
		if err := drv.DestroyQP(q); err != nil {
			t.Fatal(err)
		}
	}
	if err := drv.DeallocXRCD(xrcd); err != nil {
		t.Error(err)
	}
	if err := drv.DestroyCQ(umrCQ); err != nil {
		t.Error(err)
	}
	if f := d.Findings(); f[hca.FindingHandle] != 3 || f[hca.FindingCommand] != 0 || f[hca.FindingQPState] != 0 {
		t.Errorf("findings %v, want the 3 busy destroys", f)
	}
}

// TestDeallocUARBeforeObjects: a dying process's UAR page goes before its
// objects (exit_mmap unmaps it, which frees a UAR mlx5_ib allocated on
// demand, before the uverbs file's release destroys the QPs and CQs that
// ring through it): DEALLOC_UAR is taken without a finding, the page is
// free for the next ALLOC_UAR, and the CQ and QP are destroyed as any.
func TestDeallocUARBeforeObjects(t *testing.T) {
	d, drv, ib, findings := ibProbed(t, Config{Name: "hca0", Subnet: subnet.New(subnet.Config{})})
	out, err := drv.Exec(mboxIn(ifc.OpAllocUAR, 0, ifc.AllocUARInSize), ifc.AllocUAROutSize)
	if err != nil {
		t.Fatal(err)
	}
	uar := ifc.AllocUAROutUAR.Get(out)
	cq, err := drv.CreateCQ(drv.CreateCQIn(4, drv.CompEQ.EQN, uar))
	if err != nil {
		t.Fatal(err)
	}
	pd, err := drv.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	in, q := drv.CreateQPIn(mlx5test.QPArgs{St: ifc.QPStRC, PD: pd, SndCQ: cq.CQN, RcvCQ: cq.CQN,
		SRQ: ib.S1.N, XRCD: ib.XRCD1, LogRQ: 4, LogRQStride: 2, LogSQ: 4, UAR: uar})
	if q, err = drv.CreateQP(in, q); err != nil {
		t.Fatal(err)
	}
	dealloc := mboxIn(ifc.OpDeallocUAR, 0, ifc.Linux612CmdSize)
	ifc.ObjIn.Set(dealloc, uar)
	if _, err := drv.Exec(dealloc, 16); err != nil {
		t.Fatalf("DEALLOC_UAR of a UAR a CQ and a QP name: %v", err)
	}
	if len(*findings) != 0 {
		t.Fatalf("findings: %v", *findings)
	}
	if err := drv.DestroyQP(q); err != nil {
		t.Fatal(err)
	}
	if err := drv.DestroyCQ(cq); err != nil {
		t.Fatal(err)
	}
	// The page is free again, and the next ALLOC_UAR may hand it out.
	if out, err = drv.Exec(mboxIn(ifc.OpAllocUAR, 0, ifc.AllocUARInSize), ifc.AllocUAROutSize); err != nil || ifc.AllocUAROutUAR.Get(out) != uar {
		t.Fatalf("ALLOC_UAR after: %v, uar %d, want %d", err, ifc.AllocUAROutUAR.Get(out), uar)
	}
	if len(*findings) != 0 || d.Findings() != [hca.NumFindingKinds]uint64{} {
		t.Fatalf("findings: %v", *findings)
	}
}
