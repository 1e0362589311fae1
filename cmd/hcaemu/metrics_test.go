package main

import (
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/fault"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
)

// TestMetrics: --metrics serves the live devices' counters and the fault
// rules' in Prometheus text format, read at scrape time: a command's
// outcome counted by errno, port and per-QP series, a rule's firings; a
// device whose connection ended leaves; a bad address is refused at once.
func TestMetrics(t *testing.T) {
	h, _, _ := controlled(t)
	plan, err := fault.DecodePlan(strings.NewReader(`{"rules": [{"name": "loss", "action": {"kind": "drop"}, "schedule": {"probability": 0.5}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	inj, err := fault.NewInjector(plan, fault.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := listenMetrics("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	var banner strings.Builder
	m.serve(&banner, func() *hcas { return h }, &faultSetup{inj: inj})
	if !strings.HasPrefix(banner.String(), "hcaemu: metrics at http://127.0.0.1:") {
		t.Errorf("banner %q", banner.String())
	}
	scrape := func() string {
		t.Helper()
		rsp, err := http.Get("http://" + m.l.Addr().String() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer rsp.Body.Close()
		b, err := io.ReadAll(rsp.Body)
		if err != nil || rsp.StatusCode != 200 {
			t.Fatalf("scrape: %d, %v", rsp.StatusCode, err)
		}
		return string(b)
	}
	if out := scrape(); !strings.Contains(out, `hcaemu_fault_fired_total{rule="loss"} 0`) || strings.Contains(out, "hcaemu_port_frames_total") {
		t.Errorf("before any device:\n%s", out)
	}

	// A guest's NIC sending from another guest's MAC: refused, counted.
	drop := func(f []byte) bool { fabric.Release(f); return true }
	mac8, mac9 := [6]byte{0x52, 0x54, 0, 0, 0, 8}, [6]byte{0x52, 0x54, 0, 0, 0, 9}
	nic9, _ := h.sw.AttachNIC("g9", mac9, drop)
	h.sw.AttachNIC("g8", mac8, drop)
	nic9.Send(fabric.Clone(append(append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, mac8[:]...), 0x08, 0x06)))
	if out := scrape(); !strings.Contains(out, `hcaemu_segment_frames_total{outcome="spoofed"} 1`) {
		t.Errorf("after a spoofed frame:\n%s", out)
	}

	drv, dev := probed(t, h, "hca0")
	_, _, qp, err := drv.CreateRCQP(8)
	if err != nil {
		t.Fatal(err)
	}
	drv.MustCmd(&abi.CmdDestroyQP{QPHandle: 999}, &abi.CmdDestroyQPResp{}) // EINVAL
	out := scrape()
	qpn := "0x" + strconv.FormatUint(uint64(qp.QPN), 16)
	for _, want := range []string{
		`# TYPE hcaemu_port_frames_total counter`,
		`hcaemu_port_frames_total{device="hca0",dir="in"} 0`,
		`hcaemu_port_dropped_frames_total{device="hca0",reason="bad_icrc"} 0`,
		`hcaemu_commands_total{command="CREATE_PD",device="hca0",errno="0"} 1`,
		`hcaemu_commands_total{command="DESTROY_QP",device="hca0",errno="22"} 1`,
		`hcaemu_qp_packets_total{device="hca0",dir="sent",qpn="` + qpn + `"} 0`,
		`hcaemu_qp_naks_total{device="hca0",dir="received",qpn="` + qpn + `",syndrome="psn_sequence"} 0`,
		`hcaemu_device_payload_bytes_total{device="hca0",dir="received"} 0`,
		`hcaemu_strict_findings_total{device="hca0",kind="handle"} 1`,
		`hcaemu_fault_matched_total{rule="loss"} 0`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("scrape lacks %q", want)
		}
	}
	if n := len(regexp.MustCompile(`(?m)^# HELP hcaemu_`).FindAllString(out, -1)); n < 15 {
		t.Errorf("%d HELP lines", n)
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", out)
	}
	dev.Close()
	if out := scrape(); strings.Contains(out, `device="hca0"`) {
		t.Errorf("a closed device is still served")
	}

	if _, err := listenMetrics("127.0.0.1:99999"); err == nil || !strings.HasPrefix(err.Error(), "--metrics: ") {
		t.Errorf("bad address: %v", err)
	}
}
