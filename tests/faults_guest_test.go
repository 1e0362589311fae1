package tests

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// guestBlackout is the script of TestE2EFaultsGuest. Guest 1, before its
// client starts, adds from inside the guest a rule dropping every frame
// after the first 2000 (so the blackout starts mid-transfer whatever the
// timing: the transfer is 300 messages of 64 frames); a background job
// waits until the rule fires, lets it drop everything for 2 s, reads the
// counters, removes it, and reads an unknown rule's removal back as an
// error. ib_write_bw's QP timeout (-u 19: 2.1 s, 7 retries) outlasts the
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
if [ -z "$HCAEMU_SERVER_IP" ]; then
  # Garbage on the port first: its error reply waits there, unread, and
  # the next command skips it.
  readlink /dev/virtio-ports/org.hcaemu.faults
  echo 'not a command {' > /dev/virtio-ports/org.hcaemu.faults
  hcaemu-faults list
  echo "LIST $?"
else
  hcaemu-faults add '{"name": "blackout", "action": {"kind": "drop"}, "schedule": {"after": 2000}}'
  echo "ADD $?"
  blackout > /tmp/blackout.out 2>&1 &
  bg=$!
fi
try 18701 ib_write_bw -x 1 -F -s 65536 -n 300 -u 19
if [ -n "$HCAEMU_SERVER_IP" ]; then
  wait $bg
  cat /tmp/blackout.out
fi
exit 0
`

// TestE2EFaultsGuest: a script inside a guest drives the fault plan
// through its virtio-serial port: it blacks the fabric out for 2 s in the
// middle of an RDMA transfer, the transfer completes, and the rule's
// counters, read back in the guest, show the frames it dropped. The other
// guest's port works too, after garbage written to it.
func TestE2EFaultsGuest(t *testing.T) {
	needE2E(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "faults.log")
	out, code := hcaemuRun(t, "--guests", "2", "--timeout", "8m", "--faults-log", log, "--", guestBlackout)
	if code != 0 {
		t.Errorf("hcaemu run exited %d", code)
	}
	for k := range 2 {
		mustContain(t, out, k, regexp.QuoteMeta("RESULT 0 ib_write_bw -x 1 -F -s 65536 -n 300 -u 19"))
	}
	mustContain(t, out, 0, `(?m)^\.\./vport[0-9]+p[0-9]+$`, `(?m)^\[\]$`, "(?m)^LIST 0$")
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

// replayPlan duplicates each RDMA CM message (a MAD on QP1) with
// probability 1/2. The CM's messages are the guests' reproducible traffic:
// QP1's PSNs start at 0 at every boot, while the tools draw their own QPs'
// PSNs from the clock and their PID. A duplicate changes nothing but the
// CM's answer to it, so the same seed meets the same messages in the same
// order.
const replayPlan = `{"seed": 7, "rules": [
  {"name": "dupcm", "match": {"classes": ["cm"]}, "action": {"kind": "duplicate"}, "schedule": {"probability": 0.5}}
]}`

// replayScript connects once over rdma_cm (guest 1 starts once guest 0's
// rping listens) and checks the data.
const replayScript = `if [ -z "$HCAEMU_SERVER_IP" ]; then
  timeout -t 200s rping -s -V -C 10 -S 4096 -a 10.0.0.1 -p 18702
else
  rping -c -V -C 10 -S 4096 -a 10.0.0.1 -p 18702
fi
echo "RPING $?"
`

// firings returns the firings of a fault log, without their time; with
// names false, without the rule's name either.
func firings(t *testing.T, path string, names bool) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, text := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var line map[string]any
		if err := json.Unmarshal([]byte(text), &line); err != nil {
			t.Fatalf("%s: line %q: %v", path, text, err)
		}
		if line["event"] != nil {
			continue
		}
		delete(line, "time")
		if !names {
			delete(line, "rule")
		}
		norm, _ := json.Marshal(line)
		out = append(out, string(norm))
	}
	return out
}

// TestE2EFaultsReplay: two runs of the same plan and seed fire the same
// faults (the logs agree but for the time), and the log turned into a plan
// by "hcaemu faults replay" fires them again in a third run.
func TestE2EFaultsReplay(t *testing.T) {
	needE2E(t)
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(plan, []byte(replayPlan), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) string {
		t.Helper()
		log := filepath.Join(dir, name+".log")
		out, code := hcaemuRun(t, append([]string{"--guests", "2", "--timeout", "5m", "--faults-log", log}, append(args, "--", replayScript)...)...)
		if code != 0 {
			t.Fatalf("run %s: hcaemu run exited %d", name, code)
		}
		for k := range 2 {
			mustContain(t, out, k, "(?m)^RPING 0$")
		}
		return log
	}
	first := run("first", "--faults", plan, "--faults-seed", "11")
	second := run("second", "--faults", plan, "--faults-seed", "11")
	want := firings(t, first, true)
	t.Logf("the first run fired:\n%s", strings.Join(want, "\n"))
	if len(want) == 0 {
		t.Fatal("the plan fired nothing")
	}
	if got := firings(t, second, true); !slices.Equal(got, want) {
		t.Errorf("the second run with the same plan and seed fired:\n%s\nthe first:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	replay := filepath.Join(dir, "replay.json")
	cmd := exec.Command(hcaemuBin, "faults", "replay", first)
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("hcaemu faults replay: %v", err)
	}
	if err := os.WriteFile(replay, b, 0o644); err != nil {
		t.Fatal(err)
	}
	third := run("replayed", "--faults", replay)
	if got, want := firings(t, third, false), firings(t, first, false); !slices.Equal(got, want) {
		t.Errorf("the replayed log fired:\n%s\nthe logged run:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestE2EFaultsGuestReboot: a guest's port survives its reboot, with an
// unread reply and half a line left on it by the first boot.
func TestE2EFaultsGuestReboot(t *testing.T) {
	needE2E(t)
	script := `echo "BOOT $HCAEMU_BOOT"
hcaemu-faults add "{\"name\": \"boot$HCAEMU_BOOT\", \"match\": {\"qpn\": 99}, \"action\": {\"kind\": \"drop\"}}"
echo "ADD $?"
if [ "$HCAEMU_BOOT" = 1 ]; then
  echo '{"op":"list"}' > /dev/virtio-ports/org.hcaemu.faults
  echo -n '{"op":"cle' > /dev/virtio-ports/org.hcaemu.faults
  shutdown reboot
  sleep 120
fi
hcaemu-faults list
echo "LIST $?"
`
	out, code := hcaemuRun(t, "--reboots", "--timeout", "5m", "--", script)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	mustContain(t, out, 0, "(?m)^BOOT 2$", "(?m)^add: boot1$", "(?m)^add: boot2$", `(?m)^    "name": "boot1",$`, `(?m)^    "name": "boot2",$`, "(?m)^LIST 0$")
	if n := strings.Count(strings.Join(guestLines(out, 0), "\n"), "ADD 0"); n != 2 {
		t.Errorf("%d adds succeeded, want 2", n)
	}
}
