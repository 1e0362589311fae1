package pvrdma_test

import (
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hcaemu/hcaemu/emu/emutest"
	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/pvrdma"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// strictHost is a probed host whose device runs in the given strict mode
// and logs into a buffer the test reads; found collects OnFinding's
// reports.
type strictHost struct {
	*host
	log   *syncBuffer
	mu    sync.Mutex
	found []hca.Finding
}

func newStrictHost(t *testing.T, sw *fabric.Switch, k int, mode hca.StrictMode, adjust ...func(*pvrdma.Config)) *strictHost {
	t.Helper()
	sh := &strictHost{log: &syncBuffer{}}
	sh.host = newHostConfig(t, sw, k, 16<<20, func(cfg *pvrdma.Config) {
		for _, fn := range adjust {
			fn(cfg)
		}
		cfg.Log = slog.New(slog.NewTextHandler(sh.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
		cfg.Strict = mode
		cfg.OnFinding = func(f hca.Finding) {
			sh.mu.Lock()
			sh.found = append(sh.found, f)
			sh.mu.Unlock()
		}
	})
	return sh
}

func (sh *strictHost) reports() []hca.Finding {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return append([]hca.Finding(nil), sh.found...)
}

// rts brings a UD QP to RTS (UD needs no peer).
func rtsUD(t *testing.T, q *emutest.QP) {
	t.Helper()
	for _, m := range []struct {
		mask uint32
		attr abi.QPAttr
	}{
		{abi.AttrState | abi.AttrPKeyIndex | abi.AttrPort | abi.AttrQKey, abi.QPAttr{State: abi.QPStateInit, PortNum: 1, QKey: 1}},
		{abi.AttrState, abi.QPAttr{State: abi.QPStateRTR}},
		{abi.AttrState | abi.AttrSQPSN, abi.QPAttr{State: abi.QPStateRTS}},
	} {
		if err := q.Modify(m.mask, m.attr); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStrictFindings runs one driver mistake per case through the fake
// driver on a device in warn mode, and checks the finding's kind, counter
// and exact text (object, field, value, what was allowed, and what the
// driver got), and what the driver sees: ERR, a CQE's status, an async
// event. Each case would pass without strict mode except for the finding:
// the device's answer is the same in every mode.
func TestStrictFindings(t *testing.T) {
	checkGoroutines(t)
	cases := []struct {
		name string
		kind hca.FindingKind
		// do makes the mistake and checks what the driver sees.
		do   func(t *testing.T, h *strictHost)
		want string // the finding's text (a substring of the log line)
	}{
		{"command field out of range", hca.FindingCommand, func(t *testing.T, h *strictHost) {
			_, dir := h.Buffer(2)
			if e, _ := h.Cmd(&abi.CmdCreateCQ{PdirDMA: dir, CQE: 3, NChunks: 2}, nil); e != 22 {
				t.Errorf("ERR %d, want 22", e)
			}
		}, "pvrdma_cmd_create_cq.cqe=3: not a power of two in 1..16384: CREATE_CQ failed: ERR=22 EINVAL"},
		{"unknown command opcode", hca.FindingCommand, func(t *testing.T, h *strictHost) {
			var slot [abi.CmdReqSize]byte
			slot[8] = 0x7f // pvrdma_cmd_hdr.cmd
			if e, _ := h.CmdRaw(slot[:]); e != 22 {
				t.Errorf("ERR %d, want 22", e)
			}
		}, "pvrdma_cmd_hdr.cmd=0x7f: not a command opcode"},
		{"handle of no object", hca.FindingHandle, func(t *testing.T, h *strictHost) {
			_, dir := h.Buffer(4)
			if e, _ := h.Cmd(&abi.CmdCreateQP{PdirDMA: dir, PDHandle: 999, SendCQHandle: h.cq.Handle, RecvCQHandle: h.cq.Handle,
				MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1, TotalChunks: 3, SendChunks: 1, QPType: abi.QPTypeRC}, nil); e != 22 {
				t.Errorf("ERR %d, want 22", e)
			}
		}, "pvrdma_cmd_create_qp.pd_handle=999: no such PD: CREATE_QP failed: ERR=22 EINVAL"},
		{"object of another context", hca.FindingHandle, func(t *testing.T, h *strictHost) {
			uc, err := h.CreateUC(1)
			if err != nil {
				t.Fatal(err)
			}
			upd, err := h.CreatePD(uc)
			if err != nil {
				t.Fatal(err)
			}
			_, dir := h.Buffer(4)
			// h.cq is the kernel's (context 0); the PD is the user context's.
			if e, _ := h.Cmd(&abi.CmdCreateQP{PdirDMA: dir, PDHandle: upd, SendCQHandle: h.cq.Handle, RecvCQHandle: h.cq.Handle,
				MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1, TotalChunks: 3, SendChunks: 1, QPType: abi.QPTypeRC}, nil); e != 22 {
				t.Errorf("ERR %d, want 22", e)
			}
		}, "a CQ of another context than PD"},
		{"page directory outside guest RAM", hca.FindingPageDir, func(t *testing.T, h *strictHost) {
			if e, _ := h.Cmd(&abi.CmdCreateCQ{PdirDMA: 1 << 40, CQE: 64, NChunks: 2}, nil); e != 22 {
				t.Errorf("ERR %d, want 22", e)
			}
		}, "CQ pdir_dma=0x10000000000 (2 pages)"},
		{"short page list", hca.FindingPageDir, func(t *testing.T, h *strictHost) {
			_, dir := h.Buffer(1)
			if e, _ := h.Cmd(&abi.CmdCreateCQ{PdirDMA: dir, CQE: 4096, NChunks: 1}, nil); e != 22 {
				t.Errorf("ERR %d, want 22", e)
			}
		}, "pvrdma_cmd_create_cq.nchunks=1: a CQ of 4096 entries needs "},
		{"illegal QP transition", hca.FindingQPState, func(t *testing.T, h *strictHost) {
			q := h.qp(t, abi.QPTypeRC, 4)
			if err := q.Modify(abi.AttrState, abi.QPAttr{State: abi.QPStateRTS}); err == nil {
				t.Error("RESET -> RTS accepted")
			}
		}, "pvrdma_cmd_modify_qp.attrs.qp_state=RTS: illegal transition RESET -> RTS: MODIFY_QP failed: ERR=22 EINVAL"},
		{"attribute mask lacks required", hca.FindingQPState, func(t *testing.T, h *strictHost) {
			q := h.qp(t, abi.QPTypeRC, 4)
			if err := q.Modify(abi.AttrState, abi.QPAttr{State: abi.QPStateInit}); err == nil {
				t.Error("RESET -> INIT without PORT, PKEY_INDEX, ACCESS_FLAGS accepted")
			}
		}, "pvrdma_cmd_modify_qp.attr_mask=0x1: RESET -> INIT lacks required attributes"},
		{"attribute out of range", hca.FindingCommand, func(t *testing.T, h *strictHost) {
			q := h.qp(t, abi.QPTypeRC, 4)
			if err := q.Modify(abi.AttrState|abi.AttrPKeyIndex|abi.AttrPort|abi.AttrAccessFlags,
				abi.QPAttr{State: abi.QPStateInit, PortNum: 1, AccessFlags: 1 << 12}); err == nil {
				t.Error("unknown access flag accepted")
			}
		}, "pvrdma_cmd_modify_qp.attrs.qp_access_flags=0x1000: unknown bits"},
		{"send doorbell in RESET", hca.FindingDoorbell, func(t *testing.T, h *strictHost) {
			q := h.qp(t, abi.QPTypeRC, 4)
			q.RingSend()
		}, "send doorbell (PVRDMA_UAR_QP_SEND) in RESET: post_send needs RTS (or SQD, ERR): ignored"},
		{"doorbell of no QP", hca.FindingDoorbell, func(t *testing.T, h *strictHost) {
			h.Doorbell(0, 0, 77|1<<30)
		}, "UAR page 0: QP doorbell for handle 77: no such QP: ignored"},
		{"WQE with too many SGEs", hca.FindingWQE, func(t *testing.T, h *strictHost) {
			q := h.qp(t, abi.QPTypeUD, 4)
			rtsUD(t, q)
			w := send(uverbs.OpSend, 5, 0, uverbs.SGE{Addr: 4096, Length: 8, LKey: h.lkey})
			w.NumSGE = 9
			q.PostSend(w)
			if e := poll(t, h.cq, h.host); e.Status != uverbs.WCLocLenErr || e.WRID != 5 {
				t.Errorf("CQE %+v, want LOC_LEN_ERR for WR 5", e)
			}
		}, "sq[0] pvrdma_sq_wqe_hdr.num_sge=9 > max_send_sge=4: completed with LOC_LEN_ERR"},
		{"WQE with an opcode the QP cannot carry", hca.FindingWQE, func(t *testing.T, h *strictHost) {
			q := h.qp(t, abi.QPTypeUD, 4)
			rtsUD(t, q)
			q.PostSend(send(uverbs.OpRDMAWrite, 6, 0, uverbs.SGE{Addr: 4096, Length: 8, LKey: h.lkey}))
			if e := poll(t, h.cq, h.host); e.Status != uverbs.WCLocQPOpErr || e.WRID != 6 {
				t.Errorf("CQE %+v, want LOC_QP_OP_ERR for WR 6", e)
			}
		}, "sq[0] pvrdma_sq_wqe_hdr.opcode=0 (RDMA_WRITE) on a UD QP: only SEND and SEND_WITH_IMM: completed with LOC_QP_OP_ERR"},
		{"WQE with no such opcode", hca.FindingWQE, func(t *testing.T, h *strictHost) {
			q := h.qp(t, abi.QPTypeUD, 4)
			rtsUD(t, q)
			q.PostSend(send(200, 7, 0, uverbs.SGE{Addr: 4096, Length: 8, LKey: h.lkey}))
			if e := poll(t, h.cq, h.host); e.Status != uverbs.WCLocQPOpErr || e.WRID != 7 {
				t.Errorf("CQE %+v, want LOC_QP_OP_ERR for WR 7", e)
			}
		}, "sq[0] pvrdma_sq_wqe_hdr.opcode=200: not a PVRDMA_WR opcode: completed with LOC_QP_OP_ERR"},
		{"producer index beyond the ring", hca.FindingRingIndex, func(t *testing.T, h *strictHost) {
			q := h.qp(t, abi.QPTypeUD, 4)
			rtsUD(t, q)
			q.SetSQProd(1000)
			h.dev.Sync()
			if !hasEvent(h.AsyncEvents(), abi.EventQPFatal, q.Handle) {
				t.Error("no QP_FATAL")
			}
		}, "sq pvrdma_ring.prod_tail: "},
		{"CQ overrun", hca.FindingCQOverrun, func(t *testing.T, h *strictHost) {
			cq, err := h.CreateCQ(0, 1)
			if err != nil {
				t.Fatal(err)
			}
			q, err := h.CreateQP(emutest.QPSpec{PD: h.pd, SendCQ: cq, RecvCQ: cq, Type: abi.QPTypeUD, SendWR: 4, RecvWR: 4, SendSGE: 1, RecvSGE: 1})
			if err != nil {
				t.Fatal(err)
			}
			rtsUD(t, q)
			av := uverbs.AV{GIDIndex: 1, DGID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 15: 9}}
			for i := 0; i < 2; i++ { // two CQEs into one entry, never polled
				w := send(uverbs.OpSend, uint64(i), 0, uverbs.SGE{Addr: 4096, Length: 8, LKey: h.lkey})
				w.SetUD(5, 1, av)
				q.PostSend(w)
			}
			h.dev.Sync()
			if !hasEvent(h.AsyncEvents(), abi.EventCQErr, cq.Handle) {
				t.Error("no CQ_ERR")
			}
		}, "full (1 entries, prod_tail=1, cons_head=0): the consumer did not poll, or the CQ is smaller than its queues: CQ_ERR, the CQ takes no more"},
		{"register written 2 bytes wide", hca.FindingRegister, func(t *testing.T, h *strictHost) {
			if err := h.dev.WriteRegion(1, abi.RegIMR, []byte{0, 0}); err != nil {
				t.Fatal(err)
			}
		}, "BAR1 register 0x1c written 2 bytes wide: registers are 32-bit: ignored"},
		{"unknown CTL value", hca.FindingRegister, func(t *testing.T, h *strictHost) {
			h.WriteReg(abi.RegCtl, 9)
			if e := h.ReadReg(abi.RegErr); e != 22 {
				t.Errorf("ERR %d, want 22", e)
			}
		}, "CTL=0x9: not ACTIVATE, UNQUIESCE or RESET: ERR=22 EINVAL"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sw := fabric.NewSwitch()
			h := newStrictHost(t, sw, 1, hca.StrictWarn)
			before := h.dev.Findings()
			c.do(t, h)
			h.dev.Sync()
			after := h.dev.Findings()
			for k := hca.FindingKind(0); k < hca.NumFindingKinds; k++ {
				want := before[k]
				if k == c.kind {
					want++
				}
				if after[k] < want || (k != c.kind && after[k] != before[k]) {
					t.Errorf("%s findings %d -> %d", k, before[k], after[k])
				}
			}
			log := h.log.String()
			if !strings.Contains(log, "driver mistake: "+c.kind.String()) || !strings.Contains(log, c.want) {
				t.Errorf("no %s finding %q in the log:\n%s", c.kind, c.want, log)
			}
			if r := h.reports(); len(r) != 0 {
				t.Errorf("warn mode reported %v", r)
			}
		})
	}
}

// TestStrictNotMistakes: what is not the driver's fault (a full table, an
// address another port holds, an injected fault) is no finding.
func TestStrictNotMistakes(t *testing.T) {
	checkGoroutines(t)
	sw := fabric.NewSwitch()
	a := newStrictHost(t, sw, 1, hca.StrictFail)
	b := newStrictHost(t, sw, 2, hca.StrictFail)
	// b binds a's IPv4 GID: EADDRINUSE.
	g := a.ip.As16()
	g[10], g[11] = 0xff, 0xff
	if err := b.BindGID(6, g); err == nil {
		t.Fatal("a GID another port owns was bound")
	}
	// PDs until the table is full: ENOMEM.
	for i := 0; ; i++ {
		if _, err := a.CreatePD(0); err != nil {
			break
		}
		if i > 1<<16 {
			t.Fatal("the PD table never filled")
		}
	}
	// A fault plan fails CREATE_PD with EINVAL: the driver's command was fine.
	hook := &failCreatePD{}
	c := newStrictHost(t, sw, 3, hca.StrictFail, func(cfg *pvrdma.Config) { cfg.Faults = hook })
	hook.armed.Store(true)
	if _, err := c.CreatePD(0); err == nil {
		t.Fatal("the injected failure did not fail CREATE_PD")
	}
	for _, h := range []*strictHost{a, b, c} {
		if f := h.dev.Findings(); f != ([hca.NumFindingKinds]uint64{}) {
			t.Errorf("findings %v", f)
		}
		if r := h.reports(); len(r) != 0 {
			t.Errorf("reported %v", r)
		}
	}
}

// failCreatePD is a fault hook that, once armed, fails every CREATE_PD
// with EINVAL.
type failCreatePD struct{ armed atomic.Bool }

func (f *failCreatePD) Fault(ev *hca.FaultEvent) hca.FaultAction {
	if f.armed.Load() && ev.Point == hca.FaultAtCommand && ev.Command.Op == uint32(abi.OpCreatePD) && ev.Command.Name == "CREATE_PD" {
		return hca.FaultAction{Kind: hca.FaultFailCommand, Errno: 22}
	}
	return hca.FaultAction{}
}

// TestStrictFail: the first finding latches the device (DEVICE_FATAL, every
// later command fails with EIO) and is reported once; later findings are
// still counted. Off mode counts and logs nothing at Warn.
func TestStrictFail(t *testing.T) {
	checkGoroutines(t)
	sw := fabric.NewSwitch()
	h := newStrictHost(t, sw, 1, hca.StrictFail)
	_, dir := h.Buffer(2)
	if e, _ := h.Cmd(&abi.CmdCreateCQ{PdirDMA: dir, CQE: 3, NChunks: 2}, nil); e != 22 {
		t.Fatalf("the mistake's own answer: ERR %d, want 22", e)
	}
	r := h.reports()
	if len(r) != 1 || r[0].Kind != hca.FindingCommand || r[0].Device != "hca1" ||
		!strings.HasPrefix(r[0].Text, "pvrdma_cmd_create_cq.cqe=3: ") {
		t.Fatalf("reports %v", r)
	}
	if !hasEvent(h.AsyncEvents(), abi.EventDeviceFatal, 0) {
		t.Error("no DEVICE_FATAL")
	}
	if _, err := h.CreatePD(0); err == nil {
		t.Error("a command succeeded after the latch")
	}
	if e := h.ReadReg(abi.RegErr); e != 5 {
		t.Errorf("ERR %d after the latch, want 5 (EIO)", e)
	}
	h.Doorbell(0, 0, 77|1<<30) // a second mistake
	if got := h.dev.Findings(); got[hca.FindingCommand] != 1 || got[hca.FindingDoorbell] != 1 {
		t.Errorf("findings %v", got)
	}
	if r := h.reports(); len(r) != 1 {
		t.Errorf("reported %d times, want once", len(r))
	}

	off := newStrictHost(t, sw, 2, hca.StrictOff)
	off.Doorbell(0, 0, 77|1<<30)
	if got := off.dev.Findings(); got[hca.FindingDoorbell] != 1 {
		t.Errorf("off mode: findings %v", got)
	}
	if strings.Contains(off.log.String(), "level=WARN msg=\"driver mistake") {
		t.Errorf("off mode warned:\n%s", off.log.String())
	}
}

func TestParseStrictMode(t *testing.T) {
	for _, c := range []struct {
		in   string
		want hca.StrictMode
		ok   bool
	}{{"warn", hca.StrictWarn, true}, {"off", hca.StrictOff, true}, {"fail", hca.StrictFail, true}, {"", 0, false}, {"FAIL", 0, false}} {
		got, err := hca.ParseStrictMode(c.in)
		if (err == nil) != c.ok || (c.ok && got != c.want) {
			t.Errorf("ParseStrictMode(%q) = %v, %v", c.in, got, err)
		}
		if c.ok && got.String() != c.in {
			t.Errorf("%v.String() = %q", got, got.String())
		}
	}
}
