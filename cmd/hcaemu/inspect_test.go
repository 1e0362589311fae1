package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/hcaemu/hcaemu/emu/emutest"
	"github.com/hcaemu/hcaemu/emu/fault"
	"github.com/hcaemu/hcaemu/emu/pvrdma"
	"github.com/hcaemu/hcaemu/vfio"
)

// TestInspectCommand: "hcaemu inspect" over a control socket shows the
// objects a driver made on a live device, in text and JSON; a device whose
// connection ended is gone; bad arguments get a one-line error.
func TestInspectCommand(t *testing.T) {
	h, ctl, sock := controlled(t)
	run := func(args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		code := inspectMain(append([]string{"--control", sock}, args...), &out, &errOut)
		return out.String(), errOut.String(), code
	}
	if _, e, code := run("qps"); code != 1 || !strings.Contains(e, "inspect: this process has no devices to inspect") {
		t.Errorf("before SetInspector: exit %d, %q", code, e)
	}
	ctl.SetInspector(h.inspect)
	if o, _, code := run(); code != 0 || !strings.Contains(o, "no devices") {
		t.Errorf("no devices: exit %d, %q", code, o)
	}

	drv, dev := probed(t, h, "hca0")
	if err := drv.BindGID(0, [16]byte{10: 0xff, 11: 0xff, 12: 10, 15: 1}); err != nil {
		t.Fatal(err)
	}
	pd, _, qp, err := drv.CreateRCQP(8)
	if err != nil {
		t.Fatal(err)
	}
	o, e, code := run("qps")
	t.Logf("hcaemu inspect qps:\n%s", o)
	want := regexp.MustCompile(`(?m)^hca0 \(pvrdma\)\n  qp ` + itoa(qp.Handle) + ` +qpn 0x[0-9a-f]+ +RC RESET +pd ` + itoa(pd) + ` +sq 8/0/0 +rq 8/0/0`)
	if code != 0 || !want.MatchString(o) {
		t.Errorf("inspect qps: exit %d, stderr %q, got\n%s", code, e, o)
	}
	o, _, code = run("--json", "devices")
	var devs []struct {
		Device, Model string
		Devices       *pvrdma.State
	}
	if err := json.Unmarshal([]byte(o), &devs); code != 0 || err != nil || len(devs) != 1 || devs[0].Model != "pvrdma" || devs[0].Devices == nil ||
		len(devs[0].Devices.QPs) != 1 || devs[0].Devices.QPs[0].QPN != qp.QPN || len(devs[0].Devices.GIDs) != 1 {
		t.Errorf("inspect --json: exit %d, %v, %s", code, err, o)
	}
	o, _, _ = run("stats")
	if !strings.Contains(o, "qkey_violations 0") {
		t.Errorf("inspect stats:\n%s", o)
	}
	dev.Close()
	if o, _, code := run("qps"); code != 0 || !strings.Contains(o, "no devices") {
		t.Errorf("after Close: exit %d, %q", code, o)
	}
	for _, args := range [][]string{{"bogus"}, {"qps", "mrs"}} {
		if _, e, code := run(args...); code != 2 || strings.Count(e, "\n") != 1 {
			t.Errorf("%v: exit %d, %q", args, code, e)
		}
	}
	var errOut bytes.Buffer
	if code := inspectMain(nil, io.Discard, &errOut); code != 2 || errOut.String() != "hcaemu inspect: give --control SOCK\n" {
		t.Errorf("no --control: exit %d, %q", code, errOut.String())
	}
	// A guest's socket is not served inspect.
	gsock := filepath.Join(t.TempDir(), "guest.sock")
	if err := ctl.ListenGuest(gsock); err != nil {
		t.Fatal(err)
	}
	if rsp, err := controlCommand(gsock, fault.Request{Op: "inspect", What: "qps"}); err != nil || rsp.OK || rsp.Error != "inspect: not served to guests" {
		t.Errorf("guest inspect: %+v, %v", rsp, err)
	}
}

// controlled returns an empty set of HCAs and a control socket (closed at
// the test's end) with no inspector or tracer yet.
func controlled(t *testing.T) (*hcas, *controlSocket, string) {
	t.Helper()
	h, err := newHCAs(slog.New(slog.NewTextHandler(io.Discard, nil)), "", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	inj, err := fault.NewInjector(&fault.Plan{}, fault.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "control.sock")
	ctl, err := listenControl(sock, inj)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctl.Close() })
	return h, ctl, sock
}

// probed connects a fake driver to a new device of h called name, as a
// QEMU connection would, and probes it.
func probed(t *testing.T, h *hcas, name string) (*emutest.Driver, vfio.Device) {
	t.Helper()
	drv := emutest.New(16 << 20)
	dev, err := h.factory(name, h.model, [6]byte{0, 0x50, 0x56, 0, 0, 1})(vfio.Host{Mem: drv.RAM, MSIX: drv.IRQ.Raise})
	if err != nil {
		t.Fatal(err)
	}
	drv.Dev = dev
	if err := drv.Probe(); err != nil {
		t.Fatal(err)
	}
	return drv, dev
}

func itoa(v uint32) string { return strconv.FormatUint(uint64(v), 10) }
