package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/dma"
	"github.com/hcaemu/hcaemu/emu/fault"
	"github.com/hcaemu/hcaemu/emu/mlx5"
	"github.com/hcaemu/hcaemu/emu/mlx5/mlx5test"
	"github.com/hcaemu/hcaemu/qemu"
	"github.com/hcaemu/hcaemu/vfio"
)

// probedMLX5 connects a fake mlx5_core and mlx5_ib to a new ConnectX of h
// called name and probes it.
func probedMLX5(t *testing.T, h *hcas, name string) (*mlx5test.Driver, vfio.Device) {
	t.Helper()
	h.model = qemu.ModelMLX5
	mem := dma.NewFlat(1<<32, 32<<20)
	dev, err := h.factory(name, h.model, [6]byte{0, 0x50, 0x56, 0, 0, 1})(vfio.Host{Mem: mem})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dev.Close)
	drv := mlx5test.New(dev, mem)
	if err := drv.Probe(); err != nil {
		t.Fatal(err)
	}
	if _, err := drv.IBProbe(); err != nil {
		t.Fatal(err)
	}
	return drv, dev
}

// TestObserveMLX5: an emulated ConnectX is a live device as a PVRDMA one
// is: hcaemu inspect shows its port (LID, state), EQs and QPs (QP0, QP1
// in RTS with the port's LID), --json has the sections; the metrics have
// its counters, its model's own and the subnet's; hcaemu trace streams
// its commands.
func TestObserveMLX5(t *testing.T) {
	h, ctl, sock := controlled(t)
	ctl.SetInspector(h.inspect)
	ctl.SetTracer(h.trace.open)
	drv, dev := probedMLX5(t, h, "hca0")
	run := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := inspectMain(append([]string{"--control", sock}, args...), &out, &errOut); code != 0 {
			t.Fatalf("inspect %v: exit %d, %s", args, code, errOut.String())
		}
		return out.String()
	}
	o := run()
	t.Logf("hcaemu inspect:\n%s", o)
	for _, want := range []string{`(?m)^hca0 \(mlx5\)$`, `function +initialized`, `port 1 +state ACTIVE \(LinkUp\) +lid 2 sm_lid 1`,
		`(?m)^  eq 0 .*commands$`, `qp 0x[0-9a-f]+ +QP1 RTS .*lid 2`, `mkey 0x[0-9a-f]+ +pa`} {
		if !regexp.MustCompile(want).MatchString(o) {
			t.Errorf("inspect lacks %q", want)
		}
	}
	if o := run("eqs"); !strings.Contains(o, "eq 1") || strings.Contains(o, "qp ") {
		t.Errorf("inspect eqs:\n%s", o)
	}
	var devs []struct {
		Device, Model string
		QPs           []mlx5.QPState
	}
	if err := json.Unmarshal([]byte(run("--json", "qps")), &devs); err != nil || len(devs) != 1 || devs[0].Model != "mlx5" || len(devs[0].QPs) < 2 {
		t.Errorf("inspect --json qps: %v %+v", err, devs)
	}

	// The metrics.
	m, err := listenMetrics("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	m.serve(io.Discard, func() *hcas { return h }, nil)
	rsp, err := http.Get("http://" + m.l.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rsp.Body)
	rsp.Body.Close()
	for _, want := range []string{`hcaemu_commands_total{command="CREATE_QP",device="hca0",errno="0"} [1-9]`,
		`hcaemu_mlx5_commands_total{device="hca0"} [1-9]`, `hcaemu_subnet_packets_total{outcome="forwarded"} [0-9]`,
		`hcaemu_subnet_sa_mads_total{outcome="answered"}`, `hcaemu_port_frames_total{device="hca0",dir="in"}`,
		`hcaemu_subnet_direct_packets_total{kind="lent"} [0-9]`} {
		if !regexp.MustCompile(want).Match(b) {
			t.Errorf("metrics lack %q", want)
		}
	}

	// hcaemu trace: a command seen as it runs.
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	json.NewEncoder(conn).Encode(fault.Request{Op: "trace", What: "hca0"})
	r := bufio.NewReader(conn)
	if l, err := r.ReadString('\n'); err != nil || !strings.Contains(l, `"ok":true`) {
		t.Fatalf("trace: %q %v", l, err)
	}
	done := make(chan error, 1)
	go func() {
		for range 100 {
			time.Sleep(10 * time.Millisecond)
			if _, err := drv.AllocPD(); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	l, err := r.ReadString('\n')
	if err != nil || !strings.Contains(l, `"event":"command"`) || !strings.Contains(l, `"command":"ALLOC_PD"`) || !strings.Contains(l, `"device":"hca0"`) {
		t.Errorf("trace event %q, %v", l, err)
	}
	conn.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	dev.Close()
	if o := run(); !strings.Contains(o, "no devices") {
		t.Errorf("after Close:\n%s", o)
	}
}
