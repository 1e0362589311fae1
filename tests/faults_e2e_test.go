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

// faultsPlan is the plan of TestE2EFaults. Every step of the guest script
// is told apart by its message size, so one boot serves them all:
//   - RC data packets of 1000..1024 bytes (the port's MTU is 1024: every
//     full packet of a large message) are lost (5 %), duplicated (1 %) and
//     reordered (1 %): ibv_rc_pingpong -c -s 4096 and ib_write_bw;
//   - the 11th RC SEND_ONLY of 777 bytes has its first payload byte
//     corrupted under a valid ICRC: ibv_rc_pingpong -c -s 777;
//   - RC packets of 555 bytes to hca0 (the server's QP) are all dropped
//     after the 20th: ibv_rc_pingpong -s 555 runs out of retries.
const faultsPlan = `{"seed": 2026, "rules": [
  {"name": "loss", "match": {"transport": "rc", "classes": ["send", "write", "read_response"], "size": {"min": 1000, "max": 1024}},
   "action": {"kind": "drop"}, "schedule": {"probability": 0.05}},
  {"name": "dup", "match": {"transport": "rc", "classes": ["send", "write", "read_response"], "size": {"min": 1000, "max": 1024}},
   "action": {"kind": "duplicate"}, "schedule": {"probability": 0.01}},
  {"name": "reorder", "match": {"transport": "rc", "classes": ["send", "write", "read_response"], "size": {"min": 1000, "max": 1024}},
   "action": {"kind": "reorder", "frames": 2}, "schedule": {"probability": 0.01}},
  {"name": "corrupt", "match": {"transport": "rc", "opcodes": ["RC_SEND_ONLY"], "size": {"min": 777, "max": 777}},
   "action": {"kind": "corrupt_payload", "offset": 0}, "schedule": {"after": 10, "times": 1}},
  {"name": "cut", "match": {"device": "hca0", "direction": "rx", "transport": "rc", "size": {"min": 555, "max": 555}},
   "action": {"kind": "drop"}, "schedule": {"after": 20}}
]}`

// guestWait defines shell functions for guest scripts, which run under
// u-root's gosh (it sets no $!, and its kill takes no signal 0):
// bounded CONDITION polls the shell command CONDITION every 0.1 s, at most
// 120 s; pidsof NAME prints the PIDs of the processes named NAME; running
// PID tells whether PID is alive (neither gone nor a zombie).
const guestWait = `bounded() { i=0; until eval "$1"; do i=$((i+1)); if [ $i -ge 1200 ]; then echo "TIMEOUT waiting for: $1"; return 1; fi; sleep 0.1; done; }
pidsof() { for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = "$1" ] && echo ${p#/proc/}; done; }
running() { grep -q "^State:\s*[RSDT]" /proc/$1/status 2>/dev/null; }
`

// guestTry defines try PORT CMD...: guest 0 runs CMD -p PORT once (under
// a time limit: a server whose client failed waits forever); the others
// append -p PORT and the server's IP and retry only while the server is not
// listening yet. Each prints its output, then RESULT <status> <cmd>.
const guestTry = `try() {
  port=$1; shift
  if [ -z "$HCAEMU_SERVER_IP" ]; then
    timeout -t 120s "$@" -p $port 2>&1
    st=$?
  else
    i=0
    while true; do
      out=$("$@" -p $port $HCAEMU_SERVER_IP 2>&1)
      st=$?
      case "$out" in
        *"Couldn't connect"*|*"Unable to perform socket connection"*|*"Couldn't read"*)
          i=$((i+1)); if [ $i -lt 120 ]; then sleep 0.5; continue; fi ;;
      esac
      break
    done
    echo "$out"
  fi
  echo "RESULT $st $*"
}
`

// TestE2EFaults boots two guests once under a fault plan and checks that
// RC recovers from loss, duplication and reordering with correct data,
// that a payload corrupted under a valid ICRC is caught by the
// application's own check, and that a QP whose frames are all dropped
// reports the retry counter exceeded.
func TestE2EFaults(t *testing.T) {
	needE2E(t)
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(plan, []byte(faultsPlan), 0o644); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "faults.log")
	// The last step's server never hears from its client (the plan cuts
	// every frame to it): guest 0 runs it in the background and stops it
	// once guest 1 has connected to the next port, which it does only
	// after its client gave up. (Waiting for it in the foreground cost
	// the server's whole time limit, 120 s, every run.)
	script := guestTry + guestWait + `
try 18601 ibv_rc_pingpong -g 1 -c -n 300 -s 4096
try 18602 ib_write_bw -x 1 -F -s 65536 -n 500
try 18603 ibv_rc_pingpong -g 1 -c -n 50 -s 777
if [ -z "$HCAEMU_SERVER_IP" ]; then
  ibv_rc_pingpong -g 1 -n 100 -s 555 -p 18604 > /tmp/cut.out 2>&1 &
else
  try 18604 ibv_rc_pingpong -g 1 -n 100 -s 555
fi
try 18605 ibv_rc_pingpong -g 1 -n 5 -s 100
if [ -z "$HCAEMU_SERVER_IP" ]; then
  for p in $(pidsof ibv_rc_pingpong); do kill $p; done
  cat /tmp/cut.out
fi
exit 0
`
	out, code := hcaemuRun(t, "--guests", "2", "--timeout", "8m", "--faults", plan, "--faults-log", log,
		"--control", filepath.Join(dir, "ctl.sock"), "--", script)
	if code != 0 {
		t.Errorf("hcaemu run exited %d", code)
	}
	if !strings.Contains(out, "hcaemu: faults: seed 2026, 5 rules, control socket "+filepath.Join(dir, "ctl.sock")) {
		t.Error("the run did not print the seed and the control socket")
	}
	for k := range 2 {
		// Loss, duplication and reordering: both tools finish, the
		// pingpong's data check passes.
		mustContain(t, out, k, regexp.QuoteMeta("RESULT 0 ibv_rc_pingpong -g 1 -c -n 300 -s 4096"),
			regexp.QuoteMeta("RESULT 0 ib_write_bw -x 1 -F -s 65536 -n 500"),
			regexp.QuoteMeta("RESULT 0 ibv_rc_pingpong -g 1 -n 5 -s 100"))
	}
	// Silent corruption: the side that received the corrupted message,
	// and only it, finds it (ibv_rc_pingpong -c reports a bad page and
	// carries on: its exit status stays 0).
	both := strings.Join(append(guestLines(out, 0), guestLines(out, 1)...), "\n")
	if n := strings.Count(both, "invalid data in page 0"); n != 1 {
		t.Errorf("ibv_rc_pingpong -c reported %d corrupted messages, want 1", n)
	}
	// All frames to the server's QP dropped: the client runs out of
	// retries.
	mustContain(t, out, 1, `Failed status transport retry counter exceeded \(12\)`,
		`RESULT [1-9][0-9]* ibv_rc_pingpong -g 1 -n 100 -s 555`)

	fired := map[string]int{}
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
		if line.Event == "" {
			fired[line.Rule]++
		}
	}
	t.Logf("firings per rule: %v", fired)
	for rule, least := range map[string]int{"loss": 500, "dup": 50, "reorder": 50, "corrupt": 1, "cut": 8} {
		if fired[rule] < least {
			t.Errorf("rule %s fired %d times, want at least %d", rule, fired[rule], least)
		}
	}
	if fired["corrupt"] != 1 {
		t.Errorf("rule corrupt fired %d times, want 1", fired["corrupt"])
	}
	// The counters printed at exit agree with the log.
	for rule, n := range fired {
		if !regexp.MustCompile(`hcaemu: faults: rule ` + rule + `: fired ` + itoa(n) + ` `).MatchString(out) {
			t.Errorf("the counters printed at exit do not say rule %s fired %d times", rule, n)
		}
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
