package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/emutest"
	"github.com/hcaemu/hcaemu/emu/fault"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
)

// TestTraceCommand: "hcaemu trace" over a control socket streams the
// selected QP's events as JSON lines (a state change here), only that QP's;
// the devices have no tracer before and after; bad selections get a
// one-line error; a guest's socket is refused.
func TestTraceCommand(t *testing.T) {
	h, ctl, sock := controlled(t)
	run := func(args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		code := traceMain(append([]string{"--control", sock}, args...), &out, &errOut)
		return out.String(), errOut.String(), code
	}
	if _, e, code := run("--all"); code != 1 || !strings.Contains(e, "trace: this process has no devices to trace") {
		t.Errorf("before SetTracer: exit %d, %q", code, e)
	}
	ctl.SetTracer(h.trace.open)

	drv, dev := probed(t, h, "hca0")
	defer dev.Close()
	pd, err := drv.CreatePD(0)
	if err != nil {
		t.Fatal(err)
	}
	cq, err := drv.CreateCQ(0, 16)
	if err != nil {
		t.Fatal(err)
	}
	spec := emutest.QPSpec{PD: pd, SendCQ: cq, RecvCQ: cq, Type: abi.QPTypeRC, SendWR: 8, RecvWR: 8, SendSGE: 1, RecvSGE: 1}
	other, err := drv.CreateQP(spec)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := drv.CreateQP(spec)
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"--qp", "hca0"}, 2, `--qp "hca0": want DEVICE:QPN`},
		{[]string{"--qp", "hca0:zz"}, 2, `QPN "zz" is not a QP number`},
		{[]string{"--qp", "hca0:0"}, 2, `QPN "0" is not a QP number`},
		{[]string{"--device", "hca0:1"}, 2, `a device name (hca0)`},
		{[]string{}, 2, "give one of --qp DEVICE:QPN, --device DEVICE, --all"},
		{[]string{"--all", "--device", "hca0"}, 2, "give one of"},
		{[]string{"--device", "hca9"}, 1, `no device "hca9"`},
		{[]string{"--all", "--count", "-1"}, 2, "not a count"},
	} {
		if _, e, code := run(tc.args...); code != tc.code || !strings.Contains(e, tc.err) || strings.Count(e, "\n") != 1 {
			t.Errorf("trace %q: exit %d, %q; want %d, %q on one line", tc.args, code, e, tc.code, tc.err)
		}
	}
	if rsp, err := controlCommand(sock, fault.Request{Op: "trace", What: "all", Name: "x"}); err != nil || rsp.OK {
		t.Errorf("trace with a name: %+v, %v", rsp, err)
	}

	// Trace the second QP; move both to INIT: only its change is heard.
	type result struct {
		out, err string
		code     int
	}
	done := make(chan result, 1)
	go func() {
		o, e, code := run("--qp", "hca0:"+itoa(qp.QPN), "--count", "1")
		done <- result{o, e, code}
	}()
	deadline := time.Now().Add(time.Minute)
	for !h.trace.active() {
		if time.Now().After(deadline) {
			t.Fatal("the trace client never subscribed")
		}
		time.Sleep(time.Millisecond)
	}
	init := abi.QPAttr{State: abi.QPStateInit, PortNum: 1}
	mask := uint32(abi.AttrState | abi.AttrPKeyIndex | abi.AttrPort | abi.AttrAccessFlags)
	if err := other.Modify(mask, init); err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(mask, init); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.code != 0 {
		t.Fatalf("trace: exit %d, %q", res.code, res.err)
	}
	var ev struct {
		Time                    time.Time
		Device, Event, From, To string
		QPN                     uint32
	}
	if err := json.Unmarshal([]byte(res.out), &ev); err != nil || strings.Count(res.out, "\n") != 1 {
		t.Fatalf("trace printed %q: %v", res.out, err)
	}
	if ev.Device != "hca0" || ev.QPN != qp.QPN || ev.Event != "state" || ev.From != "RESET" || ev.To != "INIT" || ev.Time.IsZero() {
		t.Errorf("trace event %+v; want hca0 QP %#x state RESET→INIT", ev, qp.QPN)
	}
	// The client left: the device is untraced again.
	for h.trace.active() {
		if time.Now().After(deadline) {
			t.Fatal("the trace client is still subscribed after it left")
		}
		time.Sleep(time.Millisecond)
	}
}
