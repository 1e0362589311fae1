package mlx5

import (
	"encoding/binary"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/ib/mad"
	"github.com/hcaemu/hcaemu/emu/ib/subnet"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/mlx5/mlx5test"
	"github.com/hcaemu/hcaemu/emu/roce"
	"github.com/hcaemu/hcaemu/emu/transport"
	uverbs "github.com/hcaemu/hcaemu/uverbs/mlx5"
)

// fakeHook answers the device's fault points with act, once armed, at
// point (any point when 0), once.
type fakeHook struct {
	mu    sync.Mutex
	point hca.FaultPoint
	act   hca.FaultAction
	armed bool
	seen  []hca.FaultEvent
}

func (h *fakeHook) Fault(ev *hca.FaultEvent) hca.FaultAction {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.armed || (h.point != 0 && ev.Point != h.point) {
		return hca.FaultAction{}
	}
	h.armed = false
	h.seen = append(h.seen, *ev)
	return h.act
}

// arm makes the next event at point fire act.
func (h *fakeHook) arm(point hca.FaultPoint, act hca.FaultAction) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.point, h.act, h.armed = point, act, true
}

func (h *fakeHook) fired() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.armed
}

// faultPair is two devices on one subnet with a connected RC QP each; a's
// device asks hook.
func faultPair(t *testing.T, hook *fakeHook) (*rcEnd, *rcEnd) {
	t.Helper()
	sub := subnet.New(subnet.Config{})
	d, drv, ib, _ := ibProbed(t, Config{Name: "hca0", Subnet: sub, NodeGUID: 0x0002c90300000100, Faults: hook})
	a := addRCEnd(t, d, drv, ib)
	b := newRCEnd(t, "hca1", sub, 0x0002c90300000200)
	a.connect(t, b.lid, b.wq.Q.QPN)
	b.connect(t, a.lid, a.wq.Q.QPN)
	return a, b
}

// asyncEQEs drains e's device's async EQ.
func (e *rcEnd) asyncEQEs() [][]byte {
	e.d.Sync()
	e.d.core.Lock()
	defer e.d.core.Unlock()
	var out [][]byte
	for b := e.drv.NextEQE(e.drv.AsyncEQ); b != nil; b = e.drv.NextEQE(e.drv.AsyncEQ) {
		out = append(out, append([]byte(nil), b...))
	}
	return out
}

// sendOne posts a signaled SEND of 100 bytes from a to b (b's receive
// posted).
func sendOne(a, b *rcEnd) uint16 {
	b.drv.PostRecv(b.wq, b.seg(8192, 4096))
	return a.drv.PostSend(a.wq, &uverbs.SendWQE{Ctrl: uverbs.CtrlSeg{Opcode: uverbs.OpcodeSend, FMCESE: signaled},
		Data: []uverbs.DataSeg{a.seg(0, 100)}})
}

// TestFaultFailCommand: fail_command answers the command with the status
// mlx5_core turns back into the plan's errno and SyndFaultInjected,
// without a finding; the next command runs.
func TestFaultFailCommand(t *testing.T) {
	for _, c := range []struct {
		errno  syscall.Errno
		status ifc.Status
	}{
		{syscall.EINVAL, ifc.StatBadParamErr}, {syscall.EIO, ifc.StatIntErr}, {syscall.EBUSY, ifc.StatResBusy},
		{syscall.ENOMEM, ifc.StatLimErr}, {syscall.EAGAIN, ifc.StatNoResErr}, {syscall.EPERM, ifc.StatIntErr},
	} {
		hook := &fakeHook{}
		d, drv, _, findings := ibProbed(t, Config{Name: "hca0", Faults: hook})
		hook.arm(hca.FaultAtCommand, hca.FaultAction{Kind: hca.FaultFailCommand, Errno: uint32(c.errno)})
		_, err := drv.AllocPD()
		var ce *mlx5test.CmdError
		if !errors.As(err, &ce) || ce.Status != c.status || ce.Syndrome != SyndFaultInjected || ce.Op != ifc.OpAllocPD {
			t.Errorf("errno %d: ALLOC_PD: %v, want status %s syndrome %#x", c.errno, err, c.status, SyndFaultInjected)
		}
		if statusErrno(c.status) != uint32(c.errno) && c.errno != syscall.EPERM {
			t.Errorf("status %s: the driver's errno %d, want %d", c.status, statusErrno(c.status), c.errno)
		}
		if len(hook.seen) != 1 || hook.seen[0].Command.Name != "ALLOC_PD" {
			t.Errorf("hook saw %+v", hook.seen)
		}
		if _, err := drv.AllocPD(); err != nil || len(*findings) != 0 || d.Findings() != [hca.NumFindingKinds]uint64{} {
			t.Errorf("after the fault: %v, findings %v", err, *findings)
		}
	}
}

// TestSyndromesEveryStatus: every ibv_wc_status a complete_status may give
// is written with a syndrome the provider turns back into it, or into
// IBV_WC_GENERAL_ERR where mlx5dv.h has none.
func TestSyndromesEveryStatus(t *testing.T) {
	const generalErr = 21
	want := map[uint32]uint32{3: generalErr, 14: generalErr, 15: generalErr, 17: generalErr, 18: generalErr,
		19: generalErr, 20: generalErr}
	for s := uint32(1); s <= generalErr; s++ {
		w, ok := want[s]
		if !ok {
			w = s
		}
		if got := uverbs.WCStatus(syndromeOf(transport.Status(s))); got != w {
			t.Errorf("status %d (%s): syndrome %#x, the provider reports %d, want %d", s, hca.WCStatusName(s),
				syndromeOf(transport.Status(s)), got, w)
		}
	}
}

// TestFaultCompleteStatus: complete_status writes an error CQE with the
// status's syndrome and moves the QP to ERR without an event; the next
// WQE is flushed.
func TestFaultCompleteStatus(t *testing.T) {
	for _, status := range []uint32{uint32(transport.StatusRemAccess), 8 /* LOC_ACCESS_ERR */, 19 /* FATAL_ERR */} {
		hook := &fakeHook{}
		a, b := faultPair(t, hook)
		hook.arm(hca.FaultAtCompletion, hca.FaultAction{Kind: hca.FaultCompleteStatus, Status: status})
		idx := sendOne(a, b)
		cqe := a.poll(t)
		e := uverbs.DecodeErrCQE(cqe)
		if cqe[uverbs.OpOwnOffset]>>4 != uverbs.CQEReqErr || e.Syndrome != syndromeOf(transport.Status(status)) || e.WQECounter != idx {
			t.Fatalf("status %d: CQE %+v", status, e)
		}
		if len(hook.seen) != 1 || hook.seen[0].WROpcode != "send" || hook.seen[0].QPN != a.wq.Q.QPN {
			t.Errorf("hook saw %+v", hook.seen)
		}
		sendOne(a, b)
		if e := uverbs.DecodeErrCQE(a.poll(t)); e.Syndrome != uverbs.SyndromeWRFlushErr {
			t.Errorf("status %d: next WQE %+v, want a flush", status, e)
		}
		if st, _, _ := a.d.QPState(a.wq.Q.QPN); st != ifc.QPStateERR {
			t.Errorf("status %d: QP in %s, want ERR", status, stateNames[st])
		}
		if evs := a.asyncEQEs(); len(evs) != 0 {
			t.Errorf("status %d: async EQEs % x", status, evs)
		}
	}
}

// TestFaultAsyncEvents: qp_error, cq_error, srq_error, srq_limit and
// gid_change post the EQEs of spec §6.9 on the async EQ, with the object
// they name where mlx5_core reads it.
func TestFaultAsyncEvents(t *testing.T) {
	for _, c := range []struct {
		name    string
		act     hca.FaultAction
		typ     uint8
		sub     uint8
		numAt   int // where the object's number is (0: none)
		num     func(a *rcEnd) uint32
		qpToERR bool
	}{
		{"qp_fatal", hca.FaultAction{Kind: hca.FaultQPError, Event: hca.EventQPFatal}, ifc.EventWQCatasError, 0, eqeQPNumber, qpnOf, true},
		{"qp_req_err", hca.FaultAction{Kind: hca.FaultQPError, Event: hca.EventQPReqErr}, ifc.EventWQInvalReqError, 0, eqeQPNumber, qpnOf, true},
		{"qp_access_err", hca.FaultAction{Kind: hca.FaultQPError, Event: hca.EventQPAccessErr}, ifc.EventWQAccessError, 0, eqeQPNumber, qpnOf, true},
		{"cq_error", hca.FaultAction{Kind: hca.FaultCQError}, eventCQError, 0, eqeCQErrCQN, func(a *rcEnd) uint32 { return a.cq.CQN }, false},
		{"gid_change", hca.FaultAction{Kind: hca.FaultGIDChange}, ifc.EventPortChange, portChangeGUID, 0, nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			hook := &fakeHook{}
			a, b := faultPair(t, hook)
			hook.arm(hca.FaultAtDMA, c.act)
			sendOne(a, b)
			a.d.Sync()
			time.Sleep(10 * time.Millisecond)
			evs := a.asyncEQEs()
			if len(evs) != 1 || evs[0][ifc.EQEType] != c.typ || evs[0][ifc.EQESubType] != c.sub {
				t.Fatalf("async EQEs % x, want one of type %#x", evs, c.typ)
			}
			if c.numAt != 0 {
				if n := binary.BigEndian.Uint32(evs[0][c.numAt:]) & 0xffffff; n != c.num(a) {
					t.Errorf("EQE names %#x, want %#x", n, c.num(a))
				}
			}
			if c.typ == ifc.EventPortChange && evs[0][eqePortChangePort] != 1<<4 {
				t.Errorf("PORT_CHANGE port byte %#x", evs[0][eqePortChangePort])
			}
			st, _, _ := a.d.QPState(a.wq.Q.QPN)
			if (st == ifc.QPStateERR) != c.qpToERR {
				t.Errorf("QP in %s", stateNames[st])
			}
			if c.typ == eventCQError {
				if _, ok := a.pollOnce(); ok {
					t.Error("a broken CQ took a CQE")
				}
				if st := a.d.Inspect(); len(st.CQs) == 0 || !cqBroken(st.CQs, a.cq.CQN) {
					t.Errorf("inspect does not show CQ %#x broken: %+v", a.cq.CQN, st.CQs)
				}
			}
		})
	}
}

func qpnOf(a *rcEnd) uint32 { return a.wq.Q.QPN }

func cqBroken(cqs []CQState, cqn uint32) bool {
	for _, c := range cqs {
		if c.CQN == cqn {
			return c.Broken
		}
	}
	return false
}

// TestFaultPortFlap: port_down posts PORT_CHANGE DOWN, the SMA's PortInfo
// and the vport context say DOWN/Disabled, packets are lost both ways
// (RC retries), and after the duration PORT_CHANGE ACTIVE brings the port
// back: the SEND completes.
func TestFaultPortFlap(t *testing.T) {
	hook := &fakeHook{}
	a, b := faultPair(t, hook)
	hook.arm(hca.FaultAtCommand, hca.FaultAction{Kind: hca.FaultPortDown, Duration: 300 * time.Millisecond})
	if _, err := a.drv.AllocPD(); err != nil { // the command that fires it runs
		t.Fatal(err)
	}
	evs := a.asyncEQEs()
	if len(evs) != 1 || evs[0][ifc.EQEType] != ifc.EventPortChange || evs[0][ifc.EQESubType] != portChangeDown {
		t.Fatalf("async EQEs % x, want PORT_CHANGE DOWN", evs)
	}
	if !a.d.PortDown() {
		t.Fatal("port not down")
	}
	ctx, err := a.drv.QueryHCAVportContext()
	if err != nil {
		t.Fatal(err)
	}
	if s, p := ifc.HCAVportPortState.Get(ctx), ifc.HCAVportPortPhysicalState.Get(ctx); s != mad.PortStateDown || p != physStateDisabled {
		t.Errorf("vport context while down: state %d phys %d", s, p)
	}
	a.d.core.Lock()
	sma := a.d.port.PortState
	a.d.core.Unlock()
	if sma != mad.PortStateDown {
		t.Errorf("SMA PortState %d while down", sma)
	}
	if st := a.d.Inspect(); st.Port.State != "DOWN" {
		t.Errorf("inspect port %+v", st.Port)
	}
	sendOne(a, b) // lost until the port is up: RC retries
	cqe := a.poll(t)
	if cqe[uverbs.OpOwnOffset]>>4 != uverbs.CQEReq {
		t.Fatalf("SEND across the flap: %+v", uverbs.DecodeErrCQE(cqe))
	}
	evs = a.asyncEQEs()
	if len(evs) != 1 || evs[0][ifc.EQEType] != ifc.EventPortChange || evs[0][ifc.EQESubType] != portChangeActive {
		t.Fatalf("async EQEs % x, want PORT_CHANGE ACTIVE", evs)
	}
	ctx, _ = a.drv.QueryHCAVportContext()
	if s := ifc.HCAVportPortState.Get(ctx); s != mad.PortStateActive || a.d.PortDown() {
		t.Errorf("after the flap: vport state %d", s)
	}
	if cs, _ := a.d.CoreStats(); cs.Port.PortDown == 0 || cs.QPs.Timeouts == 0 {
		t.Errorf("no packet lost to the flap or no timeout: %+v %+v", cs.Port, cs.QPs)
	}
	b.poll(t)
}

// TestFaultDeviceFatal: device_fatal sets the health syndrome with the
// reset-request bit (the driver's fatal sensor) and fails later commands
// with INT_ERR; a reset clears it.
func TestFaultDeviceFatal(t *testing.T) {
	hook := &fakeHook{}
	d, drv, _, _ := ibProbed(t, Config{Name: "hca0", Faults: hook})
	hook.arm(hca.FaultAtCommand, hca.FaultAction{Kind: hca.FaultDeviceFatal})
	drv.AllocPD()
	synd := drv.Read32(ifc.HealthIriscIndex) >> 16 & 0xff
	rfr := drv.Read32(ifc.HealthRFRSeverity) >> 24
	if synd == 0 || rfr&ifc.HealthRFR == 0 {
		t.Errorf("health buffer: synd %#x rfr_severity %#x, want both set", synd, rfr)
	}
	var ce *mlx5test.CmdError
	if _, err := drv.AllocPD(); !errors.As(err, &ce) || ce.Status != ifc.StatIntErr {
		t.Errorf("command after device_fatal: %v", err)
	}
	if st := d.Inspect(); !st.Fatal || st.HealthSyndrome == 0 {
		t.Errorf("inspect: fatal %v syndrome %#x", st.Fatal, st.HealthSyndrome)
	}
	d.Reset()
	if drv.Read32(ifc.HealthRFRSeverity) != 0 || drv.Read32(ifc.HealthIriscIndex) != 0 {
		t.Error("the health buffer still reports after a reset")
	}
}

// TestFaultDeviceFatalRecovery: the driver's recovery from device_fatal
// as mlx5_core's health work runs it: the fatal sensor (syndrome with
// rfr), the firmware reset it asks for (SW_RESET written to
// nic_interface, the init segment saying the firmware takes one), the
// NIC interface DISABLED after it, the health counter moving
// (wait_vital), and a full probe of the function again (mlx5_load_one):
// the objects from before the reset are gone, new ones are made.
func TestFaultDeviceFatalRecovery(t *testing.T) {
	hook := &fakeHook{}
	d, drv, _, _ := ibProbed(t, Config{Name: "hca0", Faults: hook})
	before, err := drv.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	hook.arm(hca.FaultAtCommand, hca.FaultAction{Kind: hca.FaultDeviceFatal})
	drv.AllocPD()
	if drv.Read32(ifc.HealthRFRSeverity)>>24&ifc.HealthRFR == 0 {
		t.Fatal("no rfr after device_fatal")
	}
	if drv.Read32(ifc.InitSegInitializing)&ifc.FWResetSupportedBit == 0 {
		t.Fatal("the init segment does not offer a firmware reset")
	}
	addr := drv.Read32(ifc.InitSegCmdqAddrLSz)
	drv.Write32(ifc.InitSegCmdqAddrLSz, addr&^ifc.NICIfcMask|ifc.NICIfcSWReset<<ifc.NICIfcShift)
	if nic := drv.Read32(ifc.InitSegCmdqAddrLSz) & ifc.NICIfcMask >> ifc.NICIfcShift; nic != ifc.NICIfcDisabled {
		t.Fatalf("nic_interface %d after SW_RESET, want DISABLED (%d)", nic, ifc.NICIfcDisabled)
	}
	if drv.Read32(ifc.HealthIriscIndex) != 0 || drv.Read32(ifc.HealthRFRSeverity) != 0 {
		t.Fatal("the health buffer still reports after the firmware reset")
	}
	// The recovery may ring a UAR of the old life before it probes again:
	// not a driver mistake.
	found := d.Findings()[hca.FindingDoorbell]
	drv.Write32(uint64(drv.UAR)<<12+ifc.UAREQDoorbellArm, 0)
	if d.Findings()[hca.FindingDoorbell] != found {
		t.Error("a doorbell between the firmware reset and the next probe was a finding")
	}
	if c1, c2 := drv.Read32(ifc.InitSegHealthCounter), drv.Read32(ifc.InitSegHealthCounter); c1 == 0 || c1 == c2 {
		t.Fatalf("health counter %#x then %#x: wait_vital wants it moving", c1, c2)
	}
	if err := drv.Probe(); err != nil {
		t.Fatalf("probe after the firmware reset: %v", err)
	}
	if _, err := drv.IBProbe(); err != nil {
		t.Fatalf("mlx5_ib's probe after the firmware reset: %v", err)
	}
	if st := d.Inspect(); st.Fatal {
		t.Error("inspect still says fatal")
	}
	var ce *mlx5test.CmdError
	if err := drv.DeallocPD(before); !errors.As(err, &ce) || ce.Status != ifc.StatBadResErr {
		t.Errorf("the PD from before the reset: %v, want it gone (BAD_RES)", err)
	}
}

// TestFaultTransport: the actions at the data path's points: fail_dma
// fails the WR with LOC_PROT_ERR; the responder's nak, rnr_nak and
// suppress_ack reach the requester on the other device as a remote
// access error, a late success (RNR retried) and a late success (the ACK
// kept back: the request resent and acknowledged as a duplicate).
func TestFaultTransport(t *testing.T) {
	for _, c := range []struct {
		name  string
		point hca.FaultPoint
		act   hca.FaultAction
		// fromB: b sends to a (a's responder asked); else a sends.
		fromB bool
		synd  uint8 // 0: success
	}{
		{"fail_dma", hca.FaultAtDMA, hca.FaultAction{Kind: hca.FaultFailDMA}, false, uverbs.SyndromeLocalProtErr},
		{"nak", hca.FaultAtResponder, hca.FaultAction{Kind: hca.FaultNAK, NAK: roce.NAKRemoteAccessError}, true, uverbs.SyndromeRemoteAccessErr},
		{"rnr_nak", hca.FaultAtResponder, hca.FaultAction{Kind: hca.FaultRNRNAK, RNRTimer: 1}, true, 0},
		{"suppress_ack", hca.FaultAtResponder, hca.FaultAction{Kind: hca.FaultSuppressACK}, true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			hook := &fakeHook{}
			a, b := faultPair(t, hook)
			hook.arm(c.point, c.act)
			src, dst := a, b
			if c.fromB {
				src, dst = b, a
			}
			sendOne(src, dst)
			cqe := src.poll(t)
			switch {
			case c.synd == 0 && cqe[uverbs.OpOwnOffset]>>4 != uverbs.CQEReq:
				t.Fatalf("CQE %+v, want success", uverbs.DecodeErrCQE(cqe))
			case c.synd != 0 && uverbs.DecodeErrCQE(cqe).Syndrome != c.synd:
				t.Fatalf("CQE %+v, want syndrome %#x", uverbs.DecodeErrCQE(cqe), c.synd)
			}
			if !hook.fired() {
				t.Error("the hook was not asked")
			}
		})
	}
}

// TestFaultSRQEvents: srq_error and srq_limit post SRQ_CATAS_ERROR and
// SRQ_RQ_LIMIT with the SRQN for a QP whose receives go to an SRQ (the
// limit disarmed), nothing for a QP with its own RQ.
func TestFaultSRQEvents(t *testing.T) {
	d, drv, ib, _ := ibProbed(t, Config{Name: "hca0"})
	cq, err := drv.KernelCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	in, q := drv.CreateQPIn(mlx5test.QPArgs{St: ifc.QPStRC, PD: ib.P0, SndCQ: cq.CQN, RcvCQ: cq.CQN,
		RQType: ifc.RQTypeSRQ, SRQ: ib.S0.N, XRCD: ib.XRCD1, LogSQ: 4, UAR: drv.UAR})
	if q, err = drv.CreateQP(in, q); err != nil {
		t.Fatal(err)
	}
	own := &rcEnd{d: d, drv: drv}
	for _, c := range []struct {
		act hca.FaultActionKind
		typ uint8
	}{{hca.FaultSRQError, eventSRQCatas}, {hca.FaultSRQLimit, eventSRQRQLimit}} {
		d.core.Lock()
		d.deviceFault(hca.FaultAction{Kind: c.act}, d.qpByQPN(q.QPN), nil)
		d.core.Unlock()
		evs := own.asyncEQEs()
		if len(evs) != 1 || evs[0][ifc.EQEType] != c.typ || binary.BigEndian.Uint32(evs[0][eqeQPNumber:])&0xffffff != ib.S0.N {
			t.Errorf("action %d: async EQEs % x, want type %#x for SRQ %#x", c.act, evs, c.typ, ib.S0.N)
		}
	}
	for _, s := range d.Inspect().SRQs {
		if s.SRQN == ib.S0.N && s.Limit != 0 {
			t.Errorf("SRQ limit %d after srq_limit", s.Limit)
		}
	}
	// A QP with its own RQ: no SRQ event.
	own2 := addRCEnd(t, d, drv, ib)
	d.core.Lock()
	d.deviceFault(hca.FaultAction{Kind: hca.FaultSRQError}, d.qpByQPN(own2.wq.Q.QPN), nil)
	d.core.Unlock()
	if evs := own.asyncEQEs(); len(evs) != 0 {
		t.Errorf("SRQ event for a QP with its own RQ: % x", evs)
	}
}
