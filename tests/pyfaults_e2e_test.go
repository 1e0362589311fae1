package tests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// pyFaultsPlan is the plan of TestE2EPyFaults: the first RC SEND reaching
// hca0 is answered with an RNR NAK, and hca1's first RDMA READ completion
// moves its QP to ERR with QP_FATAL. The blackout rule is added live, from
// inside guest 1.
const pyFaultsPlan = `{"seed": 2028, "rules": [
  {"name": "rnr", "match": {"device": "hca0", "classes": ["send"]},
   "action": {"kind": "rnr_nak", "timer": 1}, "schedule": {"times": 1}},
  {"name": "fatal", "match": {"device": "hca1", "point": "completion", "wr_opcodes": ["rdma_read"]},
   "action": {"kind": "qp_error", "event": "QP_FATAL"}, "schedule": {"times": 1}}
]}`

// TestE2EPyFaults runs the fault-injection checks the stock tools cannot
// reach, with a pyverbs program in each of two Debian guests
// (testdata/pyfaults/faults.py) that owns its RC QPs and sets what the
// tools hard-code, in one boot:
//
//   - RNR NAKs with rnr_retry 0: the requester's SEND completes with
//     IBV_WC_RNR_RETRY_EXC_ERR (13) and its QP is in ERR; the responder had
//     a receive posted (so the NAK is the rule's, not a real RNR) and it
//     was never consumed;
//   - QP_FATAL seen by the QP's owner (the kernel delivers a QP's events
//     only to the process owning it, so ibv_asyncwatch cannot): after the
//     rule fires at the READ's completion, ibv_get_async_event returns
//     IBV_EVENT_QP_FATAL (1) and the QP is in ERR (6);
//   - live control from inside a guest: guest 1 adds a drop-everything
//     rule through its virtio-serial port (hcaemu-faults) in the middle of
//     200 SENDs of 64 KiB with timeout 19 (2.1 s) and retry_cnt 7, keeps
//     it 2 s from the first drop and removes it; every SEND completes with
//     success and guest 0 finds every byte of every message right.
func TestE2EPyFaults(t *testing.T) {
	needE2E(t)
	share := shared(t, filepath.Join("pyfaults", "faults.py"))
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(plan, []byte(pyFaultsPlan), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "faults.log")
	script := `python3 -u /x/faults.py 2>&1
st=$?
echo "PYF-EXIT $st"
exit $st
`
	t0 := time.Now()
	out, code := hcaemuRun(t, "--guests", "2", "--image", "debian", "--packages", conformancePackages,
		"--share", share+":/x", "--faults", plan, "--faults-log", logPath, "--timeout", "9m", "--", script)
	t.Logf("hcaemu run took %s", time.Since(t0).Round(time.Second))
	if code != 0 {
		t.Errorf("hcaemu run exited %d", code)
	}
	// IBV_WC_RNR_RETRY_EXC_ERR is 13, IBV_QPS_ERR 6, IBV_EVENT_QP_FATAL 1.
	mustContain(t, out, 1,
		`(?m)^PYF rnr status 13 wr_id 7 qp-state 6$`,
		`(?m)^PYF fatal events (\d+,)*1 qp-state 6$`,
		`(?m)^PYF blackout add 0 add: blackout $`,
		`(?m)^PYF blackout job BLACKOUT started$`,
		`(?m)^PYF blackout job BLACKOUT removed 0$`,
		`(?m)^PYF blackout sent 200 statuses 0:200 `,
		`(?m)^PYF END$`, `(?m)^PYF-EXIT 0$`)
	mustContain(t, out, 0,
		`(?m)^PYF rnr receiver-completions 0 peer-status 13$`,
		`(?m)^PYF blackout received 200 bad 0$`,
		`(?m)^PYF END$`, `(?m)^PYF-EXIT 0$`)
	g1 := strings.Join(guestLines(out, 1), "\n")
	if m := regexp.MustCompile(`BLACKOUT dropped-before-rm (\d+)`).FindStringSubmatch(g1); m == nil {
		t.Error("guest 1 did not count the blackout's drops")
	} else if n, _ := strconv.Atoi(m[1]); n < 1 {
		t.Errorf("the blackout dropped %d frames in 2 s", n)
	} else {
		t.Logf("the blackout dropped %d frames in 2 s", n)
	}

	// The host's log: rnr and fatal fired once each, at the points and
	// devices the plan names; the blackout at least once.
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	fired := map[string]int{}
	for _, text := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var line struct {
			Rule, Event, Device, Point string
		}
		if err := json.Unmarshal([]byte(text), &line); err != nil {
			t.Fatalf("fault log line %q: %v", text, err)
		}
		if line.Event != "" {
			continue
		}
		fired[line.Rule]++
		switch {
		case line.Rule == "rnr" && (line.Device != "hca0" || line.Point != "responder"),
			line.Rule == "fatal" && (line.Device != "hca1" || line.Point != "completion"):
			t.Errorf("fault log: %s", text)
		}
	}
	t.Logf("fault log firings: %v", fired)
	if fired["rnr"] != 1 || fired["fatal"] != 1 || fired["blackout"] < 1 {
		t.Errorf("fault log firings %v: want rnr 1, fatal 1, blackout ≥ 1", fired)
	}
}

// shared returns a new directory for a run's --share holding the files of
// testdata named (by their base name).
func shared(t *testing.T, names ...string) string {
	t.Helper()
	share := t.TempDir()
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(share, filepath.Base(name)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return share
}
