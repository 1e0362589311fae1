package pvrdma_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/emutest"
	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/fault"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	uverbs "github.com/hcaemu/hcaemu/uverbs/pvrdma"
)

// faultPair is two HCAs (hca1 at 10.0.0.1, hca2 at 10.0.0.2) whose device
// hooks and fabric follow one plan, and the plan's log.
func faultPair(t *testing.T, plan string) (a, b *host, inj *fault.Injector, log *bytes.Buffer) {
	t.Helper()
	p, err := fault.DecodePlan(strings.NewReader(plan))
	if err != nil {
		t.Fatal(err)
	}
	seed := uint64(7)
	log = &bytes.Buffer{}
	inj, err = fault.NewInjector(p, fault.Options{Seed: &seed, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inj.Close() })
	sw := fabric.NewSwitch(inj.Decorator())
	a = newHostHook(t, sw, 1, 64<<20, inj.Device("hca1"))
	b = newHostHook(t, sw, 2, 64<<20, inj.Device("hca2"))
	return a, b, inj, log
}

// waitEvent waits (bounded) for async event (typ, info) on h.
func waitEvent(t *testing.T, h *host, typ, info uint32) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		h.dev.Sync()
		if hasEvent(h.AsyncEvents(), typ, info) {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("no async event %d info %d", typ, info)
}

// qpState queries a QP's state.
func qpState(t *testing.T, h *host, q *emutest.QP) uint32 {
	t.Helper()
	h.dev.Sync()
	a, err := q.Query()
	if err != nil {
		t.Fatal(err)
	}
	return a.State
}

// TestFaultResponder: each transport action makes the responder answer with
// exactly the NAK or RNR NAK it names, and the requester completes with the
// status the IBTA ties to it; class-C NAKs leave the responder QP in ERR
// with its async event. ACK suppression makes the requester retransmit.
func TestFaultResponder(t *testing.T) {
	checkGoroutines(t)
	for _, tc := range []struct {
		name     string
		action   string
		times    int
		rnrRetry uint8
		want     uint32 // sender's status
		event    uint32 // responder's async event (0: none, QP stays RTS)
		recv     bool   // the message is delivered
		sends    uint64 // SEND frames from hca1 on the wire
	}{
		{"psn_sequence_error", `{"kind":"nak","code":"psn_sequence_error"}`, 1, 7, uverbs.WCSuccess, 0, true, 2},
		{"invalid_request", `{"kind":"nak","code":"invalid_request"}`, 0, 7, uverbs.WCRemInvReqErr, abi.EventQPReqErr, false, 1},
		{"remote_access_error", `{"kind":"nak","code":"remote_access_error"}`, 0, 7, uverbs.WCRemAccessErr, abi.EventQPAccessErr, false, 1},
		{"remote_operational_error", `{"kind":"nak","code":"remote_operational_error"}`, 0, 7, uverbs.WCRemOpErr, abi.EventQPFatal, false, 1},
		{"rnr then success", `{"kind":"rnr_nak","timer":1}`, 1, 7, uverbs.WCSuccess, 0, true, 2},
		{"rnr with rnr_retry 0", `{"kind":"rnr_nak","timer":1}`, 0, 0, 13 /* IBV_WC_RNR_RETRY_EXC_ERR */, 0, false, 1},
		{"suppress_ack", `{"kind":"suppress_ack"}`, 0, 7, uverbs.WCSuccess, 0, true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := fmt.Sprintf(`{"rules":[
				{"name":"resp","match":{"device":"hca2","classes":["send"]},"action":%s,"schedule":{"times":%d}},
				{"name":"sends","match":{"peer":"10.0.0.2","classes":["send"]},"action":{"kind":"drop"},"schedule":{"probability":0}}]}`,
				tc.action, tc.times)
			a, b, inj, log := faultPair(t, plan)
			src, lkA, _ := a.mr(t, 4096, allAccess)
			dst, lkB, _ := b.mr(t, 4096, allAccess)
			o := defaultRC()
			// No retransmission timer (0: infinite) but where the case
			// needs one: a timer that fires before a loaded machine
			// delivers the NAK would send the SEND twice.
			o.rnrRetry, o.timeout = tc.rnrRetry, 0
			if tc.action == `{"kind":"suppress_ack"}` {
				o.timeout = 10 // 4 ms
			}
			qa, qb := pairRC(t, a, b, o, defaultRC())
			fill(a.RAM.Mem[src:src+1000], 5)
			qb.PostRecv(uverbs.RecvWQE{WRID: 1, SGE: []uverbs.SGE{{Addr: dst, Length: 4096, LKey: lkB}}})
			qa.PostSend(send(uverbs.OpSend, 2, 0, uverbs.SGE{Addr: src, Length: 1000, LKey: lkA}))
			if e := poll(t, a.cq, a, b); e.Status != tc.want || e.WRID != 2 {
				t.Fatalf("SEND completion %+v, want status %d", e, tc.want)
			}
			if tc.recv {
				if e := poll(t, b.cq, a, b); e.Status != 0 || e.ByteLen != 1000 || !bytes.Equal(a.RAM.Mem[src:src+1000], b.RAM.Mem[dst:dst+1000]) {
					t.Fatalf("RECV %+v", e)
				}
			}
			if tc.event != 0 {
				waitEvent(t, b, tc.event, qb.Handle)
				if s := qpState(t, b, qb); s != abi.QPStateErr {
					t.Fatalf("responder QP state %d, want ERR", s)
				}
				// The flushed receive.
				if e := poll(t, b.cq, a, b); e.Status != uverbs.WCWRFlushErr {
					t.Fatalf("responder CQE %+v, want WR_FLUSH_ERR", e)
				}
			} else if s := qpState(t, b, qb); s != abi.QPStateRTS {
				t.Fatalf("responder QP state %d, want RTS", s)
			}
			noCQE(t, b.cq, a, b)
			st := inj.Stats()
			wantFired := uint64(tc.times)
			if tc.times == 0 {
				wantFired = 1 // the requester stops at the first answer
				if tc.action == `{"kind":"suppress_ack"}` {
					wantFired = 1 // the retransmission is a duplicate: the responder ACKs it unasked
				}
			}
			sendsOK := st.Rules[1].Matched == tc.sends
			if tc.action == `{"kind":"suppress_ack"}` {
				// The timer may fire again before the ACK of the
				// retransmission arrives: at least one resend.
				sendsOK = st.Rules[1].Matched >= tc.sends
			}
			if st.Rules[0].Fired != wantFired || !sendsOK {
				t.Fatalf("fired %d (want %d), SEND frames %d (want %d)", st.Rules[0].Fired, wantFired, st.Rules[1].Matched, tc.sends)
			}
			if n := strings.Count(log.String(), `"point":"responder"`); uint64(n) != wantFired {
				t.Fatalf("%d responder firings logged, want %d:\n%s", n, wantFired, log)
			}
		})
	}
}

// TestFaultCompletion: complete_status, qp_error, cq_error, srq events and
// fail_dma produce exactly the CQE status or async event they name.
func TestFaultCompletion(t *testing.T) {
	checkGoroutines(t)
	for _, tc := range []struct {
		name   string
		rule   string
		status uint32 // the sender's CQE status
		event  uint32 // async event on hca1 (info: the QP's handle, or the CQ's)
		cqErr  bool
		err    bool // the QP ends in ERR
	}{
		{"complete_status", `"match":{"device":"hca1","wr_opcodes":["send"]},"action":{"kind":"complete_status","status":"IBV_WC_REM_ACCESS_ERR"}`, uverbs.WCRemAccessErr, 0, false, true},
		{"complete_status general", `"match":{"device":"hca1","size":{"min":1000,"max":1000}},"action":{"kind":"complete_status","status":"general_err"}`, uverbs.WCGeneralErr, 0, false, true},
		{"qp_error fatal", `"match":{"device":"hca1"},"action":{"kind":"qp_error","event":"QP_FATAL"}`, uverbs.WCSuccess, abi.EventQPFatal, false, true},
		{"qp_error req", `"match":{"device":"hca1"},"action":{"kind":"qp_error","event":"QP_REQ_ERR"}`, uverbs.WCSuccess, abi.EventQPReqErr, false, true},
		{"qp_error access", `"match":{"device":"hca1"},"action":{"kind":"qp_error","event":"QP_ACCESS_ERR"}`, uverbs.WCSuccess, abi.EventQPAccessErr, false, true},
		{"cq_error", `"match":{"device":"hca1"},"action":{"kind":"cq_error"}`, 0, abi.EventCQErr, true, false},
		// A WR whose buffers the device cannot reach fails as one with a
		// bad lkey: LOC_PROT_ERR, and the QP to ERR with QP_ACCESS_ERR.
		{"fail_dma", `"match":{"device":"hca1","wr_opcodes":["send"]},"action":{"kind":"fail_dma"}`, uverbs.WCLocProtErr, abi.EventQPAccessErr, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, inj, _ := faultPair(t, `{"rules":[{"name":"r",`+tc.rule+`,"schedule":{"times":1}}]}`)
			src, lkA, _ := a.mr(t, 4096, allAccess)
			dst, lkB, _ := b.mr(t, 4096, allAccess)
			if strings.Contains(tc.rule, "fail_dma") {
				// The rule matches the key of the SGE too.
				a, b, inj, _ = faultPair(t, fmt.Sprintf(`{"rules":[{"name":"r",%s,"schedule":{"times":1}}]}`,
					strings.Replace(tc.rule, `"wr_opcodes"`, fmt.Sprintf(`"key":%d,"wr_opcodes"`, lkA+0), 1)))
				src, lkA, _ = a.mr(t, 4096, allAccess)
				dst, lkB, _ = b.mr(t, 4096, allAccess)
			}
			qa, qb := pairRC(t, a, b, defaultRC(), defaultRC())
			qb.PostRecv(uverbs.RecvWQE{WRID: 1, SGE: []uverbs.SGE{{Addr: dst, Length: 4096, LKey: lkB}}})
			qa.PostSend(send(uverbs.OpSend, 2, 0, uverbs.SGE{Addr: src, Length: 1000, LKey: lkA}))
			if tc.cqErr {
				waitEvent(t, a, abi.EventCQErr, a.cq.Handle)
				noCQE(t, a.cq, a, b)
			} else if e := poll(t, a.cq, a, b); e.Status != tc.status || e.WRID != 2 {
				t.Fatalf("SEND completion %+v, want status %d", e, tc.status)
			}
			if tc.event != 0 && !tc.cqErr {
				waitEvent(t, a, tc.event, qa.Handle)
			}
			want := uint32(abi.QPStateRTS)
			if tc.err {
				want = abi.QPStateErr
			}
			deadline := time.Now().Add(time.Minute)
			for qpState(t, a, qa) != want && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if s := qpState(t, a, qa); s != want {
				t.Fatalf("QP state %d, want %d", s, want)
			}
			if tc.err {
				// No event for an error CQE alone; the QP_* event for qp_error.
				evs := a.AsyncEvents()
				if tc.event == 0 && len(evs) != 0 {
					t.Fatalf("async events %v, want none", evs)
				}
			}
			if f := inj.Stats().Rules[0].Fired; f != 1 {
				t.Fatalf("fired %d, want 1", f)
			}
		})
	}
}

// TestFaultSRQ: srq_error and srq_limit raise their event on the QP's SRQ.
func TestFaultSRQ(t *testing.T) {
	checkGoroutines(t)
	for _, tc := range []struct {
		kind  string
		event uint32
	}{{"srq_error", abi.EventSRQErr}, {"srq_limit", abi.EventSRQLimitReached}} {
		t.Run(tc.kind, func(t *testing.T) {
			a, b, _, _ := faultPair(t, `{"rules":[{"match":{"device":"hca2","wr_opcodes":["recv"]},"action":{"kind":"`+tc.kind+`"},"schedule":{"times":1}}]}`)
			src, lkA, _ := a.mr(t, 4096, allAccess)
			dst, lkB, _ := b.mr(t, 4096, allAccess)
			srq, err := b.CreateSRQ(b.pd, 8, 2, 0)
			if err != nil {
				t.Fatal(err)
			}
			qa := a.qp(t, abi.QPTypeRC, 16)
			qb, err := b.CreateQP(emutest.QPSpec{PD: b.pd, SendCQ: b.cq, RecvCQ: b.cq, SRQ: srq.Handle, Type: abi.QPTypeRC, SendWR: 16, SendSGE: 2})
			if err != nil {
				t.Fatal(err)
			}
			connect(t, a, qa, b, qb, defaultRC())
			connect(t, b, qb, a, qa, defaultRC())
			srq.PostRecv(uverbs.RecvWQE{WRID: 100, SGE: []uverbs.SGE{{Addr: dst, Length: 1000, LKey: lkB}}})
			qa.PostSend(send(uverbs.OpSend, 1, 0, uverbs.SGE{Addr: src, Length: 900, LKey: lkA}))
			poll(t, a.cq, a, b)
			if e := poll(t, b.cq, a, b); e.Status != 0 || e.WRID != 100 {
				t.Fatalf("SRQ receive %+v", e)
			}
			waitEvent(t, b, tc.event, srq.Handle)
		})
	}
}

// TestFaultCommand: fail_command fails exactly the named command, with the
// errno in ERR and in the response; the others run.
func TestFaultCommand(t *testing.T) {
	checkGoroutines(t)
	_, b, inj, log := faultPair(t, `{"rules":[{"name":"mr","match":{"device":"hca2","commands":["CREATE_MR"]},"action":{"kind":"fail_command","errno":12},"schedule":{"after":1,"times":1}}]}`)
	pages, dir := b.Buffer(1)
	req := abi.CmdCreateMR{Start: pages[0], Length: 4096, PdirDMA: dir, PDHandle: b.pd, AccessFlags: allAccess, NChunks: 1}
	errReg, hdr := b.Cmd(&req, nil)
	if errReg != 12 || hdr.Err != 12 || hdr.Ack != abi.OpCreateMR.Ack() {
		t.Fatalf("CREATE_MR: ERR %d, response %+v; want 12 (ENOMEM)", errReg, hdr)
	}
	if _, err := b.CreatePD(0); err != nil {
		t.Fatalf("CREATE_PD: %v", err)
	}
	if _, err := b.CreateMR(req); err != nil {
		t.Fatalf("second CREATE_MR (times 1): %v", err)
	}
	// The first CREATE_MR is the host's DMA MR (schedule.after 1).
	if st := inj.Stats().Rules[0]; st.Fired != 1 || st.Matched != 3 {
		t.Fatalf("fired %d of %d, want 1 of 3", st.Fired, st.Matched)
	}
	if !strings.Contains(log.String(), `"command":"CREATE_MR"`) {
		t.Fatalf("log:\n%s", log)
	}
}

// TestFaultDeviceEvents: port_down (PORT_ERR, QUERY_PORT DOWN, frames lost,
// then PORT_ACTIVE), gid_change and device_fatal post exactly their events.
func TestFaultDeviceEvents(t *testing.T) {
	checkGoroutines(t)
	t.Run("port flap", func(t *testing.T) {
		a, b, _, _ := faultPair(t, `{"rules":[{"match":{"device":"hca1","commands":["QUERY_PKEY"]},"action":{"kind":"port_down","duration":"50ms"},"schedule":{"times":1}}]}`)
		a.MustCmd(&abi.CmdQueryPKey{PortNum: 1}, &abi.CmdQueryPKeyResp{})
		evs := a.AsyncEvents()
		if !hasEvent(evs, abi.EventPortErr, 1) {
			t.Fatalf("events %v, want PORT_ERR on port 1", evs)
		}
		if attr, err := a.QueryPort(1); err != nil || (attr.State != abi.PortStateDown && a.dev.PortDown()) {
			t.Fatalf("QUERY_PORT while down: %+v %v", attr, err)
		}
		waitEvent(t, a, abi.EventPortActive, 1)
		if attr, err := a.QueryPort(1); err != nil || attr.State != abi.PortStateActive || attr.PhysState != abi.PhysStateLinkUp {
			t.Fatalf("QUERY_PORT after: %+v %v", attr, err)
		}
		_ = b
	})
	t.Run("traffic lost while down", func(t *testing.T) {
		a, b, _, _ := faultPair(t, `{"rules":[{"match":{"device":"hca1","commands":["QUERY_PKEY"]},"action":{"kind":"port_down","duration":"10m"},"schedule":{"times":1}}]}`)
		src, lkA, _ := a.mr(t, 4096, allAccess)
		dst, lkB, _ := b.mr(t, 4096, allAccess)
		o := defaultRC()
		o.retryCnt, o.timeout = 2, 10
		qa, qb := pairRC(t, a, b, o, o)
		a.MustCmd(&abi.CmdQueryPKey{PortNum: 1}, &abi.CmdQueryPKeyResp{})
		if attr, err := a.QueryPort(1); err != nil || attr.State != abi.PortStateDown || attr.PhysState != abi.PhysStateDisabled {
			t.Fatalf("QUERY_PORT while down: %+v %v", attr, err)
		}
		qb.PostRecv(uverbs.RecvWQE{WRID: 1, SGE: []uverbs.SGE{{Addr: dst, Length: 4096, LKey: lkB}}})
		qa.PostSend(send(uverbs.OpSend, 2, 0, uverbs.SGE{Addr: src, Length: 100, LKey: lkA}))
		if e := poll(t, a.cq, a, b); e.Status != uverbs.WCRetryExcErr {
			t.Fatalf("SEND while the port is down: %+v, want RETRY_EXC_ERR", e)
		}
		noCQE(t, b.cq, a, b)
	})
	for _, tc := range []struct {
		kind  string
		event uint32
		info  uint32
	}{{"gid_change", abi.EventGIDChange, 1}, {"device_fatal", abi.EventDeviceFatal, 0}} {
		t.Run(tc.kind, func(t *testing.T) {
			a, b, _, _ := faultPair(t, `{"rules":[{"match":{"device":"hca1","wr_opcodes":["send"]},"action":{"kind":"`+tc.kind+`"},"schedule":{"times":1}}]}`)
			src, lkA, _ := a.mr(t, 4096, allAccess)
			dst, lkB, _ := b.mr(t, 4096, allAccess)
			qa, qb := pairRC(t, a, b, defaultRC(), defaultRC())
			qb.PostRecv(uverbs.RecvWQE{WRID: 1, SGE: []uverbs.SGE{{Addr: dst, Length: 4096, LKey: lkB}}})
			qa.PostSend(send(uverbs.OpSend, 2, 0, uverbs.SGE{Addr: src, Length: 100, LKey: lkA}))
			poll(t, a.cq, a, b)
			waitEvent(t, a, tc.event, tc.info)
		})
	}
}

// TestFaultDeviceDeterministic: a seeded probabilistic device rule fires at
// the same events on every run, and replaying its log fires them again.
func TestFaultDeviceDeterministic(t *testing.T) {
	checkGoroutines(t)
	run := func(plan string) (string, string) {
		_, b, _, log := faultPair(t, plan)
		var got []byte
		for range 40 {
			if _, err := b.QueryPort(1); err != nil {
				got = append(got, 'x')
			} else {
				got = append(got, '.')
			}
		}
		return string(got), log.String()
	}
	plan := `{"rules":[{"name":"p","match":{"device":"hca2","commands":["QUERY_PORT"]},"action":{"kind":"fail_command"},"schedule":{"probability":0.3}}]}`
	first, log := run(plan)
	second, _ := run(plan)
	if first != second || !strings.Contains(first, "x") || !strings.Contains(first, ".") {
		t.Fatalf("runs differ or never/always fired:\n%s\n%s", first, second)
	}
	replay, err := fault.Replay(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	replay.Encode(&buf)
	third, _ := run(buf.String())
	if third != first {
		t.Fatalf("replay fired elsewhere:\n%s\n%s", first, third)
	}
}
