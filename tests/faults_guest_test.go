package tests

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// guestBlackout is the script of TestE2EFaultsGuest. Guest 1, before its
// client starts, adds from inside the guest a rule dropping every frame
// after the first 2000 (so the blackout starts mid-transfer whatever the
// timing: the transfer is 300 messages of 64 frames); a background job
// waits until the rule fires, lets it drop everything for 2 s, reads the
// counters, removes it, and reads an unknown rule's removal back as an
// error. ib_write_bw's QP timeout (-u 18: 1.07 s, 7 retries) outlasts the
// blackout, so the client retransmits and finishes.
const guestBlackout = guestTry + `
blackout() {
  i=0
  while true; do
    out=$(hcaemu-faults stats)
    case "$out" in
      *'"fired": 0,'*) ;;
      *) break ;;
    esac
    i=$((i+1))
    if [ $i -ge 3000 ]; then echo "BLACKOUT never fired"; return 1; fi
    sleep 0.1
  done
  echo "BLACKOUT started"
  sleep 2
  echo "STATS-BEGIN"
  hcaemu-faults stats
  echo "STATS-END"
  hcaemu-faults rm blackout
  echo "RM $?"
  hcaemu-faults rm blackout
  echo "RM-AGAIN $?"
}
if [ -n "$HCAEMU_SERVER_IP" ]; then
  hcaemu-faults add '{"name": "blackout", "action": {"kind": "drop"}, "schedule": {"after": 2000}}'
  echo "ADD $?"
  blackout > /tmp/blackout.out 2>&1 &
  bg=$!
fi
try 18701 ib_write_bw -x 1 -F -s 65536 -n 300 -u 18
if [ -n "$HCAEMU_SERVER_IP" ]; then
  wait $bg
  cat /tmp/blackout.out
fi
exit 0
`

// TestE2EFaultsGuest: a script inside a guest drives the fault plan
// through its virtio-serial port: it blacks the fabric out for 2 s in the
// middle of an RDMA transfer, the transfer completes, and the rule's
// counters, read back in the guest, show the frames it dropped.
func TestE2EFaultsGuest(t *testing.T) {
	needE2E(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "faults.log")
	out, code := hcaemuRun(t, "--guests", "2", "--timeout", "8m", "--faults-log", log, "--", guestBlackout)
	if code != 0 {
		t.Errorf("hcaemu run exited %d", code)
	}
	for k := range 2 {
		mustContain(t, out, k, regexp.QuoteMeta("RESULT 0 ib_write_bw -x 1 -F -s 65536 -n 300 -u 18"))
	}
	mustContain(t, out, 1, "(?m)^ADD 0$", "(?m)^add: blackout$", "(?m)^BLACKOUT started$", "(?m)^RM 0$", "(?m)^rm: blackout$",
		`(?m)^hcaemu-faults: rm: .*no such rule`, "(?m)^RM-AGAIN 1$")

	// The counters the guest read after 2 s of blackout.
	var stats struct {
		Fired uint64
		Rules []struct {
			Name           string
			Matched, Fired uint64
		}
	}
	lines := guestLines(out, 1)
	begin, end := -1, -1
	for i, l := range lines {
		switch l {
		case "STATS-BEGIN":
			begin = i
		case "STATS-END":
			end = i
		}
	}
	if begin < 0 || end < begin {
		t.Fatal("guest 1 printed no stats")
	}
	if err := json.Unmarshal([]byte(strings.Join(lines[begin+1:end], "\n")), &stats); err != nil {
		t.Fatalf("the stats guest 1 read: %v", err)
	}
	if len(stats.Rules) != 1 || stats.Rules[0].Name != "blackout" || stats.Rules[0].Fired < 1 || stats.Rules[0].Matched != stats.Rules[0].Fired+2000 {
		t.Errorf("the stats guest 1 read: %+v; want rule blackout that fired at least once, on every match after 2000", stats)
	}
	t.Logf("the blackout dropped %d frames in 2 s", stats.Rules[0].Fired)

	// The host's fault log has those firings (and those between the
	// guest's stats and rm); the rule is gone at exit.
	fired := 0
	f, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var line struct{ Rule, Event string }
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("fault log line %q: %v", sc.Text(), err)
		}
		if line.Event == "" && line.Rule == "blackout" {
			fired++
		}
	}
	if uint64(fired) < stats.Rules[0].Fired {
		t.Errorf("the fault log has %d firings of blackout, the guest counted %d", fired, stats.Rules[0].Fired)
	}
	if strings.Contains(out, "hcaemu: faults: rule blackout:") {
		t.Error("the rule the guest removed is still there at exit")
	}
}
