package tests

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/pvrdma"
)

// inspectDevice is one device of "hcaemu inspect --json devices".
type inspectDevice struct {
	Device  string
	Devices *pvrdma.State
}

// TestE2EInspectLive: "hcaemu inspect" against a live two-guest run shows,
// on each HCA, the RC QP of a running ibv_rc_pingpong in RTS with its peer
// (the other guest's address and QPN) and PSNs that moved, and the MRs it
// registered. The guests keep their pingpong running until the test has
// looked (a file on the share), so nothing depends on timing.
func TestE2EInspectLive(t *testing.T) {
	needE2E(t)
	share := t.TempDir()
	control := filepath.Join(t.TempDir(), "control.sock")
	script := `wait_done() { i=0; while [ ! -e /x/done ]; do i=$((i+1)); if [ $i -ge 6000 ]; then echo "TIMEOUT waiting for /x/done"; return 1; fi; sleep 0.1; done; }
ibv_rc_pingpong -g 1 -n 100000000 -s 1024 $HCAEMU_SERVER_IP > /tmp/pp.out 2>&1 &
pid=$!
wait_done
st=$?
kill $pid
echo "INSPECTED $st"
exit $st
`
	cmd := exec.Command(hcaemuBin, "run", "--guests", "2", "--share", share+":/x", "--control", control, "--timeout", "15m", "--", script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		os.WriteFile(filepath.Join(share, "done"), nil, 0o644)
		if cmd.ProcessState == nil {
			<-done
		}
		t.Logf("hcaemu run output:\n%s", out.String())
	}()

	// Poll (bounded) until both HCAs show the pingpong's QP in RTS with
	// traffic acknowledged: a few packets after the connection is up.
	var last []byte
	var devs []inspectDevice
	deadline := time.Now().Add(10 * time.Minute)
	for ok := false; !ok; {
		if time.Now().After(deadline) {
			t.Fatalf("no RC QP with traffic on both HCAs; last answer:\n%s", last)
		}
		select {
		case err := <-done:
			t.Fatalf("hcaemu run ended before the test looked: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
		o, err := exec.Command(hcaemuBin, "inspect", "--control", control, "--json").CombinedOutput()
		if err != nil {
			last = o
			continue // not listening yet, or the devices are not up
		}
		last = o
		devs = nil
		if err := json.Unmarshal(o, &devs); err != nil {
			t.Fatalf("inspect --json: %v\n%s", err, o)
		}
		ok = len(devs) == 2
		for _, d := range devs {
			ok = ok && rcQPWithTraffic(d.Devices) != nil
		}
	}
	for k, d := range devs {
		peer := devs[1-k].Devices
		qp := rcQPWithTraffic(d.Devices)
		peerQP := rcQPWithTraffic(peer)
		wantPeer := "::ffff:10.0.0." + string(rune('2'-k))
		if qp.Peer != wantPeer || qp.DestQPN != peerQP.QPN || qp.PathMTU != 1024 {
			t.Errorf("%s: QP %#x peer %s QPN %#x MTU %d; want peer %s QPN %#x", d.Device, qp.QPN, qp.Peer, qp.DestQPN, qp.PathMTU, wantPeer, peerQP.QPN)
		}
		var mr bool
		for _, m := range d.Devices.MRs {
			mr = mr || (m.Kind == "user" && m.Length >= 1024 && strings.Contains(m.Access, "LOCAL_WRITE"))
		}
		if !mr {
			t.Errorf("%s: no user MR of the pingpong in %+v", d.Device, d.Devices.MRs)
		}
	}
	text, err := exec.Command(hcaemuBin, "inspect", "--control", control, "qps").CombinedOutput()
	if err != nil || !strings.Contains(string(text), "RC RTS") || !strings.Contains(string(text), "next_psn") {
		t.Errorf("inspect qps: %v\n%s", err, text)
	}
	t.Logf("hcaemu inspect qps:\n%s", text)

	// hcaemu trace on guest 0's pingpong QP, while it runs: 60 events,
	// all of that QP, telling its story (work requests, packets both ways
	// with PSNs, completions).
	qp0 := rcQPWithTraffic(devs[0].Devices)
	sel := devs[0].Device + ":" + "0x" + strconv.FormatUint(uint64(qp0.QPN), 16)
	tr, err := exec.Command(hcaemuBin, "trace", "--control", control, "--qp", sel, "--count", "60").Output()
	if err != nil {
		t.Fatalf("hcaemu trace --qp %s: %v\n%s", sel, err, tr)
	}
	lines := strings.Split(strings.TrimSpace(string(tr)), "\n")
	t.Logf("hcaemu trace --qp %s --count 60 (first 12):\n%s", sel, strings.Join(lines[:min(12, len(lines))], "\n"))
	kinds := map[string]int{}
	for _, l := range lines {
		var ev struct {
			Device, Event, Status string
			QPN                   uint32
			PSN                   *uint32
		}
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("trace line %q: %v", l, err)
		}
		if ev.Event == "lost" {
			continue
		}
		if ev.Device != devs[0].Device || ev.QPN != qp0.QPN {
			t.Errorf("trace of %s printed another QP's event: %s", sel, l)
		}
		if (ev.Event == "tx" || ev.Event == "rx") && ev.PSN == nil {
			t.Errorf("packet event without a PSN: %s", l)
		}
		if ev.Event == "cqe" && ev.Status != "SUCCESS" {
			t.Errorf("pingpong completion failed: %s", l)
		}
		kinds[ev.Event]++
	}
	if len(lines) != 60 || kinds["tx"] == 0 || kinds["rx"] == 0 || kinds["cqe"] == 0 || kinds["wqe"] == 0 {
		t.Errorf("trace: %d lines, events %v; want 60 with wqe, tx, rx and cqe", len(lines), kinds)
	}
	if err := os.WriteFile(filepath.Join(share, "done"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("hcaemu run: %v", err)
	}
	for k := 0; k < 2; k++ {
		mustContain(t, out.String(), k, `INSPECTED 0`)
	}
}

// rcQPWithTraffic returns the device's RC QP in RTS whose requester and
// responder both moved past their first PSN, or nil.
func rcQPWithTraffic(st *pvrdma.State) *pvrdma.QPState {
	if st == nil {
		return nil
	}
	for i := range st.QPs {
		q := &st.QPs[i]
		if q.Type == "RC" && q.State == "RTS" && q.RC != nil && q.RC.UnackedPSN != q.SQPSN && q.RC.ExpectedPSN != q.RQPSN {
			return q
		}
	}
	return nil
}
