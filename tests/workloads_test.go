package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cpuHogs starts n CPU-bound processes for the rest of the test: the README
// examples must pass on a loaded machine.
func cpuHogs(t *testing.T, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		hog := exec.Command("sh", "-c", "while :; do :; done")
		if err := hog.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			hog.Process.Kill()
			hog.Wait()
		})
	}
}

// repeats is how often TestE2EReadmeExamples runs each example:
// $HCAEMU_E2E_REPEAT, else 3.
func repeats(t *testing.T) int {
	t.Helper()
	s := os.Getenv("HCAEMU_E2E_REPEAT")
	if s == "" {
		return 3
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("HCAEMU_E2E_REPEAT=%q: want a positive number", s)
	}
	return n
}

// The README's two-guest examples, as written there (no retry loops: guest
// 1 starts once guest 0 listens), pass every time with two CPU hogs beside
// them. HCAEMU_E2E_REPEAT=20 is the full check.
func TestE2EReadmeExamples(t *testing.T) {
	needE2E(t)
	cpuHogs(t, 2)
	pcap := filepath.Join(t.TempDir(), "rc.pcap")
	examples := []struct {
		args     []string
		patterns []string // in both guests' output
	}{
		{[]string{"--guests", "2", "--pcap", pcap, "--", "ibv_rc_pingpong -g 1 -c -s 9000 -n 50 $HCAEMU_SERVER_IP"},
			[]string{`900000 bytes in [0-9.]+ seconds`, `50 iters in [0-9.]+ seconds`}},
		{[]string{"--guests", "2", "--", "ib_write_bw -x 1 -F $HCAEMU_SERVER_IP"},
			[]string{`#bytes\s+#iterations\s+BW peak`, `65536\s+5000\s+[0-9.]+`}},
		// "Against a second implementation: soft-RoCE".
		{[]string{"--guests", "2", "--rxe", "1", "--pcap", filepath.Join(t.TempDir(), "mixed.pcap"), "--",
			"ibv_rc_pingpong -d $HCAEMU_RDMA_DEV -g 1 -c -n 50 $HCAEMU_SERVER_IP"},
			[]string{`409600 bytes in [0-9.]+ seconds`, `50 iters in [0-9.]+ seconds`}},
	}
	n := repeats(t)
	failures := 0
	for i := 0; i < n; i++ {
		for _, ex := range examples {
			t0 := time.Now()
			out, code := hcaemuRun(t, ex.args...)
			ok := code == 0
			for k := 0; k < 2 && ok; k++ {
				for _, p := range ex.patterns {
					if !matches(p, guestLines(out, k)) {
						ok = false
					}
				}
			}
			t.Logf("run %d: %s: exit %d, %s", i+1, ex.args[len(ex.args)-1], code, time.Since(t0).Round(time.Second))
			if !ok {
				failures++
				t.Errorf("run %d of %q failed (exit %d)", i+1, ex.args, code)
			}
		}
	}
	t.Logf("%d of %d runs failed", failures, n*len(examples))
	if fi, err := os.Stat(pcap); err != nil || fi.Size() == 0 {
		t.Errorf("no capture in %s (%v)", pcap, err)
	}
}

// matches reports whether a line matches the regular expression p.
func matches(p string, lines []string) bool {
	return regexp.MustCompile(p).MatchString(strings.Join(lines, "\n"))
}

// When guest 0's command fails before it is ready, the others are stopped
// at once with a message saying so, not at the timeout.
func TestE2EGuest0FailureStopsOthers(t *testing.T) {
	needE2E(t)
	t0 := time.Now()
	out, code := hcaemuRun(t, "--guests", "2", "--timeout", "10m", "--",
		`if [ -z "$HCAEMU_SERVER_IP" ]; then echo server broke; exit 4; fi; echo client must not start; sleep 600`)
	if code == 0 {
		t.Errorf("exit 0")
	}
	for _, want := range []string{
		"[g0] server broke\n",
		"hcaemu: guest 1: killed: guest 0's command failed (exit status 4) before it was ready\n",
		"hcaemu run: guest 0: command exited with status 4\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out, "client must not start") {
		t.Errorf("guest 1 started its command")
	}
	if d := time.Since(t0); d > 5*time.Minute {
		t.Errorf("took %s", d)
	}
}

// --share both ways (the host's script runs in the guests, their results
// come back), --smp, --ready marker with hcaemu-ready, and a command
// printing marker-like lines, in one boot of two guests.
func TestE2EShareSMPMarker(t *testing.T) {
	needE2E(t)
	in, results := t.TempDir(), t.TempDir()
	script := `#!/bbin/gosh
echo "guest $HCAEMU_GUEST: $(cat /proc/cpuinfo | grep -c ^processor) cpus"
echo HCAEMU-EXIT 0
echo HCAEMU-EXIT 0123456789abcdef 9
if [ -z "$HCAEMU_SERVER_IP" ]; then
	echo from-guest-0 > /results/g0.txt
	hcaemu-ready
	# Wait (bounded) for guest 1's answer: it starts only after hcaemu-ready.
	for i in $(seq 1 600); do
		if [ -e /results/g1.done ]; then break; fi
		sleep 0.2
	done
	cat /results/g1.txt
	exit 0
fi
echo "g1 sees: $(cat /results/g0.txt)" > /results/g1.txt
# Then a second file: guest 0 polls for this one, so it never reads
# g1.txt while it exists but is still empty.
echo done > /results/g1.done
exit 3
`
	if err := os.WriteFile(filepath.Join(in, "job.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	out, code := hcaemuRun(t, "--guests", "2", "--smp", "2", "--ready", "marker", "--timeout", "10m",
		"--share", in, "--share", results+":/results", "--", "/mnt/host/job.sh")
	// Guest 1's status is 3, guest 0's 0: the forged markers are output.
	if code != 1 || strings.Contains(out, "hcaemu run: guest 0:") ||
		!strings.Contains(out, "hcaemu run: guest 1: command exited with status 3\n") {
		t.Errorf("exit %d, want 1 with guest 1's status 3 and guest 0's 0", code)
	}
	for k := 0; k < 2; k++ {
		mustContain(t, out, k, `guest [01]: 2 cpus`, `HCAEMU-EXIT 0\n`, `HCAEMU-EXIT 0123456789abcdef 9`)
	}
	mustContain(t, out, 0, `g1 sees: from-guest-0`)
	for name, want := range map[string]string{"g0.txt": "from-guest-0\n", "g1.txt": "g1 sees: from-guest-0\n"} {
		b, err := os.ReadFile(filepath.Join(results, name))
		if err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", name, b, err, want)
		}
	}
}
