package mlx5

import (
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/mlx5/mlx5test"
	"github.com/hcaemu/hcaemu/emu/mr"
)

// verbsModel is the fuzzer's own account of the function's verbs objects
// (spec §6): what exists, what each names, and how many name each. The
// device's answers must agree with it command by command, and its tables
// with it at the end.
type verbsModel struct {
	pds, xrcds, cqs map[uint32]int // handle -> references
	srqs            map[uint32]*mSRQ
	mkeys           map[uint32]mMkey // index -> key, PD
	qps             map[uint32]*mQP  // QPN
	gone            []uint32         // handles and QPNs destroyed: names of nothing
}

type mSRQ struct {
	xrc           bool
	pd, xrcd, cqn uint32
	refs          int
}

type mMkey struct{ key, pd uint32 }

type mQP struct {
	q                        *mlx5test.QP
	st, state                uint32
	pd, snd, rcv, srq, xrcdn uint32
}

// pick turns a program byte into a handle: one of live (sorted) most of
// the time, else a name of nothing (a destroyed one or one out of every
// range).
func (m *verbsModel) pick(b byte, live []uint32) uint32 {
	if b < 0xd0 && len(live) > 0 {
		return live[int(b)%len(live)]
	}
	if b < 0xe8 && len(m.gone) > 0 {
		return m.gone[int(b)%len(m.gone)]
	}
	return 0xf00000 | uint32(b)
}

// domains are the objects without a context, PDs and XRCDs, as the
// fuzzer allocates and deallocates them.
var domains = [2]struct {
	name    string
	objs    func(m *verbsModel) map[uint32]int
	alloc   func(drv *mlx5test.Driver) (uint32, error)
	dealloc func(drv *mlx5test.Driver, h uint32) error
}{
	{"PD", func(m *verbsModel) map[uint32]int { return m.pds }, (*mlx5test.Driver).AllocPD, (*mlx5test.Driver).DeallocPD},
	{"XRCD", func(m *verbsModel) map[uint32]int { return m.xrcds }, (*mlx5test.Driver).AllocXRCD, (*mlx5test.Driver).DeallocXRCD},
}

// expectStatus fails t unless the command that returned err ended with
// status want (OK: no error at all).
func expectStatus(t *testing.T, what string, err error, want ifc.Status) {
	t.Helper()
	got := ifc.StatOK
	var ce *mlx5test.CmdError
	if errors.As(err, &ce) {
		got = ce.Status
	} else if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if got != want {
		t.Fatalf("%s: status %v (%#x), want %v (%#x): %v", what, got, uint8(got), want, uint8(want), err)
	}
}

// destroyWant is the status the model predicts for destroying h of objs
// (handle -> references): BAD_RES for none, RES_BUSY while named.
func destroyWant(objs map[uint32]int, h uint32) ifc.Status {
	refs, live := objs[h]
	switch {
	case !live:
		return ifc.StatBadResErr
	case refs > 0:
		return ifc.StatResBusy
	}
	return ifc.StatOK
}

// keys are a map's keys, sorted: the program's choices must not depend
// on map order.
func keys[V any](m map[uint32]V) []uint32 { return slices.Sorted(maps.Keys(m)) }

// fuzzVerbsRAM holds a probe (1.1 MiB), a completion EQ and a program's
// objects and command chains (at most 128 commands and their teardown).
const fuzzVerbsRAM = 4 << 20

// FuzzVerbs: a program of verbs object commands (alloc/dealloc PD and
// XRCD, create/destroy mkey, CQ, RMP, XRC SRQ and QP, the QP transitions,
// QUERY_QP) on a probed function, each naming live objects, destroyed
// ones or none at all. The oracle is a model of the object tables: every
// command's status is the one the model predicts (BAD_PARAM for a context
// naming nothing, BAD_RES for a command naming nothing, RES_BUSY for a
// destroy of something still named, BAD_QP_STATE for a transition from
// the wrong state), a handle handed out is not one already live, QUERY_QP
// reports the model's state, a new mkey's key resolves on all 32 bits and
// key+1 does not; at the end the device's tables hold exactly the model's
// objects with the model's reference counts, destroying them all in
// dependency order succeeds, and no page-list entry is left pinned but
// the EQs'.
func FuzzVerbs(f *testing.F) {
	f.Add([]byte{0, 0, 2, 0, 4, 0, 6, 0, 0, 8, 0, 0, 0, 0, 9, 0, 10, 0, 11, 0, 12, 0, 1, 0})
	f.Add([]byte{0, 0, 2, 0, 4, 0, 5, 0, 0, 6, 0, 0, 7, 0, 0, 0, 8, 0, 0, 0, 1, 13, 0, 3, 0, 1, 0})
	f.Add([]byte{0, 0, 4, 0, 8, 2, 0, 0, 0, 9, 0, 9, 0, 10, 0, 13, 0, 14, 0, 15, 0})
	f.Add([]byte{1, 0xff, 3, 0xd5, 5, 0xee, 7, 0xf0, 0, 4, 0xd9, 14, 0xe0, 16, 0xff})
	f.Fuzz(func(t *testing.T, prog []byte) {
		if len(prog) > 256 {
			prog = prog[:256]
		}
		mem := dma.NewFlat(ramBase, fuzzVerbsRAM)
		d := New(Config{Mem: mem, Log: quiet, SequentialQPNs: len(prog)%2 == 0})
		defer d.Close()
		drv := mlx5test.New(d, mem)
		if err := drv.Probe(); err != nil {
			t.Fatal(err)
		}
		comp, err := drv.CreateEQ(64, [4]uint64{}, 1)
		if err != nil {
			t.Fatal(err)
		}
		drv.CompEQ = comp
		m := &verbsModel{pds: map[uint32]int{}, xrcds: map[uint32]int{}, cqs: map[uint32]int{},
			srqs: map[uint32]*mSRQ{}, mkeys: map[uint32]mMkey{}, qps: map[uint32]*mQP{}}
		expect := func(what string, err error, want ifc.Status) bool {
			t.Helper()
			expectStatus(t, what, err, want)
			return want == ifc.StatOK
		}
		fresh := func(what string, h uint32, live ...bool) {
			t.Helper()
			for _, l := range live {
				if l {
					t.Fatalf("%s handed out %#x, which is live", what, h)
				}
			}
		}
		for len(prog) >= 2 {
			op, a := prog[0]%17, prog[1]
			prog = prog[2:]
			arg := func() byte { // a further byte of the program, 0 past its end
				if len(prog) == 0 {
					return 0
				}
				b := prog[0]
				prog = prog[1:]
				return b
			}
			switch op {
			case 0, 1, 2, 3: // ALLOC_PD, DEALLOC_PD, ALLOC_XRCD, DEALLOC_XRCD
				dom := domains[op/2]
				objs := dom.objs(m)
				if op%2 == 0 {
					h, err := dom.alloc(drv)
					if expect("ALLOC_"+dom.name, err, ifc.StatOK) {
						_, live := objs[h]
						fresh("ALLOC_"+dom.name, h, live)
						objs[h] = 0
					}
					continue
				}
				h := m.pick(a, keys(objs))
				if expect("DEALLOC_"+dom.name, dom.dealloc(drv, h), destroyWant(objs, h)) {
					delete(objs, h)
					m.gone = append(m.gone, h)
				}
			case 4: // CREATE_MKEY: PA or a one-page MTT
				pd := m.pick(a, keys(m.pds))
				args := mlx5test.MkeyArgs{PD: pd, Mode: ifc.MkcAccessModePA, Length64: true, Access: 1}
				if b := arg(); b&1 != 0 {
					args = mlx5test.MkeyArgs{PD: pd, Mode: ifc.MkcAccessModeMTT, Access: uint32(b>>1) & 0xf,
						Start: uint64(b) << 12, Len: 4096, LogPageSize: 12, MTT: []uint64{ramBase}}
				}
				_, live := m.pds[pd]
				want := map[bool]ifc.Status{true: ifc.StatOK, false: ifc.StatBadParamErr}[live]
				k, err := drv.CreateMkey(drv.CreateMkeyIn(args))
				if expect("CREATE_MKEY", err, want) {
					_, dup := m.mkeys[k.Key>>8]
					fresh("CREATE_MKEY", k.Key>>8, dup, k.Key>>8 < FirstMkey)
					m.mkeys[k.Key>>8] = mMkey{k.Key, pd}
					m.pds[pd]++
					d.core.Lock()
					r, wrong := mr.Lookup(&d.fn.obj, k.Key, false), mr.Lookup(&d.fn.obj, k.Key+1, false)
					d.core.Unlock()
					if r == nil || wrong != nil || r.PD != pd {
						t.Fatalf("key %#x: region %+v, key+1 %+v", k.Key, r, wrong)
					}
				}
			case 5: // DESTROY_MKEY
				h := m.pick(a, keys(m.mkeys))
				k, live := m.mkeys[h]
				want := map[bool]ifc.Status{true: ifc.StatOK, false: ifc.StatBadResErr}[live]
				if expect("DESTROY_MKEY", drv.DestroyMkey(mlx5test.Mkey{Key: h << 8}), want) {
					delete(m.mkeys, h)
					m.pds[k.pd]--
					m.gone = append(m.gone, h)
				}
			case 6: // CREATE_CQ on the completion EQ or another, the kernel's UAR or another
				eqn, uar := drv.CompEQ.EQN, drv.UAR
				want := ifc.StatOK
				if a&0x10 != 0 {
					eqn = 20 + a&7 // no such EQ
					want = ifc.StatBadParamErr
				}
				if a&0x20 != 0 {
					uar += 1 + uint32(a&3)
					want = ifc.StatBadParamErr
				}
				in, c := drv.CreateCQIn(int(a&0xf), eqn, uar)
				c, err := drv.CreateCQ(in, c)
				if expect("CREATE_CQ", err, want) {
					_, live := m.cqs[c.CQN]
					fresh("CREATE_CQ", c.CQN, live)
					m.cqs[c.CQN] = 0
				}
			case 7: // DESTROY_CQ
				h := m.pick(a, keys(m.cqs))
				if expect("DESTROY_CQ", drv.DestroyCQ(&mlx5test.CQ{CQN: h}), destroyWant(m.cqs, h)) {
					delete(m.cqs, h)
					m.gone = append(m.gone, h)
				}
			case 8, 9: // CREATE_RMP, CREATE_XRC_SRQ
				pd := m.pick(a, keys(m.pds))
				s := &mSRQ{xrc: op == 9, pd: pd}
				_, ok := m.pds[pd]
				var in []byte
				var ds *mlx5test.SRQ
				if s.xrc {
					s.xrcd, s.cqn = m.pick(arg(), keys(m.xrcds)), m.pick(arg(), keys(m.cqs))
					_, okX := m.xrcds[s.xrcd]
					_, okC := m.cqs[s.cqn]
					ok = ok && okX && okC
					in, ds = drv.CreateXRCSRQIn(pd, s.xrcd, s.cqn, 2, 1, 7)
				} else {
					in, ds = drv.CreateRMPIn(pd, 2, 5)
				}
				want := map[bool]ifc.Status{true: ifc.StatOK, false: ifc.StatBadParamErr}[ok]
				ds, err := drv.CreateSRQ(in, ds)
				if expect("CREATE_SRQ", err, want) {
					_, live := m.srqs[ds.N]
					fresh("CREATE_SRQ", ds.N, live)
					m.srqs[ds.N] = s
					m.pds[pd]++
					if s.xrc {
						m.xrcds[s.xrcd]++
						m.cqs[s.cqn]++
					}
				}
			case 10: // DESTROY_RMP or DESTROY_XRC_SRQ
				h := m.pick(a, keys(m.srqs))
				xrc := arg()&1 != 0
				s, live := m.srqs[h]
				want := ifc.StatBadResErr
				switch {
				case live && s.xrc == xrc && s.refs > 0:
					want = ifc.StatResBusy
				case live && s.xrc == xrc:
					want = ifc.StatOK
				}
				if expect("DESTROY_SRQ", drv.DestroySRQ(&mlx5test.SRQ{N: h, XRC: xrc}), want) {
					delete(m.srqs, h)
					m.pds[s.pd]--
					if s.xrc {
						m.xrcds[s.xrcd]--
						m.cqs[s.cqn]--
					}
					m.gone = append(m.gone, h)
				}
			case 11: // CREATE_QP
				sts := []uint32{ifc.QPStRC, ifc.QPStUC, ifc.QPStUD, ifc.QPStXRC, ifc.QPStQP1}
				q := &mQP{st: sts[int(a)%len(sts)], pd: m.pick(arg(), keys(m.pds)),
					snd: m.pick(arg(), keys(m.cqs)), rcv: m.pick(arg(), keys(m.cqs))}
				b := arg()
				rqType := uint32(ifc.RQTypeRegular)
				if b&1 != 0 {
					rqType = ifc.RQTypeSRQ
				}
				if b&2 != 0 {
					q.srq = m.pick(arg(), keys(m.srqs))
				}
				if b&4 != 0 {
					q.xrcdn = m.pick(arg(), keys(m.xrcds))
				}
				_, okPD := m.pds[q.pd]
				_, okS := m.cqs[q.snd]
				_, okR := m.cqs[q.rcv]
				_, okSRQ := m.srqs[q.srq]
				_, okX := m.xrcds[q.xrcdn]
				ok := okPD && okS && okR && (okSRQ || q.srq == 0 && rqType != ifc.RQTypeSRQ) && (okX || q.xrcdn == 0)
				want := map[bool]ifc.Status{true: ifc.StatOK, false: ifc.StatBadParamErr}[ok]
				in, dq := drv.CreateQPIn(mlx5test.QPArgs{St: q.st, PD: q.pd, SndCQ: q.snd, RcvCQ: q.rcv, RQType: rqType,
					SRQ: q.srq, XRCD: q.xrcdn, LogRQ: 2, LogRQStride: 1, LogSQ: 2, UAR: drv.UAR})
				dq, err := drv.CreateQP(in, dq)
				if expect("CREATE_QP", err, want) {
					_, live := m.qps[dq.QPN]
					fresh("CREATE_QP", dq.QPN, live, dq.QPN <= 1, dq.QPN >= 1<<24)
					q.q = dq
					m.qps[dq.QPN] = q
					m.pds[q.pd]++
					m.cqs[q.snd]++
					m.cqs[q.rcv]++
					if q.srq != 0 {
						m.srqs[q.srq].refs++
					}
					if q.xrcdn != 0 {
						m.xrcds[q.xrcdn]++
					}
				}
			case 12, 13, 14, 15: // RST2INIT, INIT2RTR, RTR2RTS, 2RST
				qpn := m.pick(a, keys(m.qps))
				q, live := m.qps[qpn]
				dq := &mlx5test.QP{QPN: qpn}
				if live {
					dq = q.q
				}
				ops := []ifc.Opcode{ifc.OpRst2InitQP, ifc.OpInit2RTRQP, ifc.OpRTR2RTSQP, ifc.Op2RstQP}
				from := []int{ifc.QPStateRST, ifc.QPStateINIT, ifc.QPStateRTR, -1}
				to := []uint32{ifc.QPStateINIT, ifc.QPStateRTR, ifc.QPStateRTS, ifc.QPStateRST}
				i := int(op - 12)
				want := ifc.StatBadResErr
				if live {
					want = ifc.StatOK
					if from[i] >= 0 && q.state != uint32(from[i]) {
						want = ifc.StatBadQPStateErr
					}
				}
				var err error
				if i == 3 {
					err = drv.ToRST(dq)
				} else {
					err = drv.ModifyQP(ops[i], dq, 0, func(qpc []byte) {
						ifc.PriPath(ifc.ADSVhcaPortNum).Set(qpc, 1)
						ifc.QPCMTU.Set(qpc, 3)
						ifc.QPCLogMsgMax.Set(qpc, 12)
						ifc.QPCLogRRAMax.Set(qpc, 1)
						ifc.QPCLogSRAMax.Set(qpc, 1)
						ifc.QPCNextSendPSN.Set(qpc, uint32(a))
					})
				}
				if expect(ops[i].String(), err, want) {
					q.state = to[i]
				}
			case 16: // QUERY_QP, then DESTROY_QP if a says so
				qpn := m.pick(a, keys(m.qps))
				q, live := m.qps[qpn]
				want := map[bool]ifc.Status{true: ifc.StatOK, false: ifc.StatBadResErr}[live]
				dq := &mlx5test.QP{QPN: qpn}
				qpc, err := drv.QueryQP(dq)
				if expect("QUERY_QP", err, want) {
					if s := ifc.QPCState.Get(qpc); s != q.state || ifc.QPCSt.Get(qpc) != q.st || ifc.QPCPD.Get(qpc) != q.pd {
						t.Fatalf("QUERY_QP %#x: state %d st %d pd %d, the model says %d %d %d", qpn, s, ifc.QPCSt.Get(qpc), ifc.QPCPD.Get(qpc), q.state, q.st, q.pd)
					}
				}
				if arg()&1 == 0 {
					continue
				}
				if expect("DESTROY_QP", drv.DestroyQP(dq), want) {
					delete(m.qps, qpn)
					m.pds[q.pd]--
					m.cqs[q.snd]--
					m.cqs[q.rcv]--
					if q.srq != 0 {
						m.srqs[q.srq].refs--
					}
					if q.xrcdn != 0 {
						m.xrcds[q.xrcdn]--
					}
					m.gone = append(m.gone, qpn)
				}
			}
		}
		checkVerbsModel(t, d, m)
		// Everything destroyed in dependency order succeeds, and leaves the
		// EQs' page lists alone pinned.
		for _, qpn := range keys(m.qps) {
			if err := drv.DestroyQP(m.qps[qpn].q); err != nil {
				t.Fatalf("DESTROY_QP %#x: %v", qpn, err)
			}
		}
		for _, h := range keys(m.srqs) {
			if err := drv.DestroySRQ(&mlx5test.SRQ{N: h, XRC: m.srqs[h].xrc}); err != nil {
				t.Fatalf("destroy SRQ %d: %v", h, err)
			}
		}
		for _, h := range keys(m.mkeys) {
			if err := drv.DestroyMkey(mlx5test.Mkey{Key: m.mkeys[h].key}); err != nil {
				t.Fatalf("DESTROY_MKEY %d: %v", h, err)
			}
		}
		for _, h := range keys(m.cqs) {
			if err := drv.DestroyCQ(&mlx5test.CQ{CQN: h}); err != nil {
				t.Fatalf("DESTROY_CQ %d: %v", h, err)
			}
		}
		for _, h := range keys(m.pds) {
			if err := drv.DeallocPD(h); err != nil {
				t.Fatalf("DEALLOC_PD %d: %v", h, err)
			}
		}
		for _, h := range keys(m.xrcds) {
			if err := drv.DeallocXRCD(h); err != nil {
				t.Fatalf("DEALLOC_XRCD %d: %v", h, err)
			}
		}
		d.core.Lock()
		defer d.core.Unlock()
		var eqPages uint64
		for _, e := range d.fn.eqs {
			eqPages += uint64(len(e.pas))
		}
		if n := d.fn.obj.count(); n != 0 || d.fn.pins.Pinned() != eqPages {
			t.Fatalf("%d objects and %d pages pinned after destroying all, want 0 and the EQs' %d", n, d.fn.pins.Pinned(), eqPages)
		}
	})
}

// checkVerbsModel compares the device's tables with the model's: the same
// objects, the same reference counts.
func checkVerbsModel(t *testing.T, d *Device, m *verbsModel) {
	t.Helper()
	d.core.Lock()
	defer d.core.Unlock()
	o := &d.fn.obj
	same := func(what string, dev []uint32, model []uint32) {
		t.Helper()
		if !slices.Equal(dev, model) {
			t.Fatalf("%s: the device has %v, the model %v", what, dev, model)
		}
	}
	same("PDs", o.pds.Handles(), keys(m.pds))
	same("XRCDs", o.xrcds.Handles(), keys(m.xrcds))
	same("CQs", o.cqs.Handles(), keys(m.cqs))
	same("SRQs", o.srqs.Handles(), keys(m.srqs))
	same("mkeys", o.mkeys.Handles(), keys(m.mkeys))
	var qpns []uint32
	for _, h := range o.qps.Handles() {
		qpns = append(qpns, o.qps.Get(h).QPN)
	}
	slices.Sort(qpns)
	same("QPs", qpns, keys(m.qps))
	for h, refs := range m.pds {
		if got := o.pds.Get(h).refs; got != refs {
			t.Fatalf("PD %d: %d references, the model counts %d", h, got, refs)
		}
	}
	for h, refs := range m.xrcds {
		if got := o.xrcds.Get(h).refs; got != refs {
			t.Fatalf("XRCD %d: %d references, the model counts %d", h, got, refs)
		}
	}
	for h, refs := range m.cqs {
		if got := o.cqs.Get(h).refs; got != refs {
			t.Fatalf("CQ %d: %d references, the model counts %d", h, got, refs)
		}
	}
	for h, s := range m.srqs {
		if got := o.srqs.Get(h); got.refs != s.refs || got.xrc != s.xrc {
			t.Fatalf("SRQ %d: %d references (xrc %v), the model counts %d (%v)", h, got.refs, got.xrc, s.refs, s.xrc)
		}
	}
	for _, h := range o.qps.Handles() {
		q := o.qps.Get(h)
		if mq := m.qps[q.QPN]; uint32(q.state) != mq.state {
			t.Fatalf("QP %#x in state %d, the model says %d", q.QPN, q.state, mq.state)
		}
	}
}
