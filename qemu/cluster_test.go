package qemu

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeQEMU stands in for qemu-system-x86_64: it behaves like the guest init
// (markers on stdout, waiting for the go line on stdin when told to) and logs
// to $FAKE_LOG when each guest starts its command.
const fakeQEMU = `#!/bin/sh
while [ $# -gt 0 ]; do
	case "$1" in
	-append) app=$2; shift;;
	-initrd) initrd=$2; shift;;
	esac
	shift
done
g=$(echo "$app" | sed -n 's/.*hcaemu.guest=\([0-9]*\).*/\1/p')
echo "SeaBIOS noise"
case "$FAKE_MODE" in
crash) echo "qemu: something broke" >&2; exit 1;;
hang) sleep 30; exit 0;;
esac
echo HCAEMU-WAIT
read go nonce boot ready
echo "$go $nonce $boot $ready"
echo "started $g $ready" >> "$FAKE_LOG"
echo "HCAEMU-STARTED $nonce"
tail -c 200 "$initrd" | grep -q 'echo from-cmd' && echo "cmd present"
echo "hello from $g"
status=$g
case "$FAKE_MODE.$g" in
listen.0)
	# The server takes a while to listen.
	sleep 1
	echo "ready 0" >> "$FAKE_LOG"
	echo "HCAEMU-READY $nonce"
	;;
marker.0)
	sleep 1
	echo "ready 0" >> "$FAKE_LOG"
	echo "HCAEMU-READY"
	;;
fail0.0) echo "qemu: vfio-user: request timed out" >&2; echo "HCAEMU-EXIT $nonce 3"; exit 0;;
fail0late.0)
	echo "HCAEMU-READY $nonce"
	while ! grep -q "started 1" "$FAKE_LOG"; do sleep 0.1; done
	echo "HCAEMU-EXIT $nonce 3"; exit 0;;
fail0late.*) sleep 30; exit 0;;
forge.*)
	echo "HCAEMU-EXIT 0"
	echo "HCAEMU-EXIT 0123456789abcdef 0"
	echo "HCAEMU-STARTED"
	echo "HCAEMU-WAIT"
	# Guest 1 fails (guest 0 failing would stop it).
	status=$((7 * g))
	;;
esac
printf "no newline"
echo "HCAEMU-EXIT $nonce $status"
echo "reboot: Power down"
`

func fakeEnv(t *testing.T, mode string) (*Env, string) {
	t.Helper()
	dir := t.TempDir()
	q := filepath.Join(dir, "qemu")
	if err := os.WriteFile(q, []byte(fakeQEMU), 0o755); err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(dir, "base.cpio")
	os.WriteFile(base, []byte("070701base"), 0o644)
	log := filepath.Join(dir, "log")
	t.Setenv("FAKE_LOG", log)
	t.Setenv("FAKE_MODE", mode)
	return &Env{CacheDir: dir, QEMU: q, Kernel: "/nonexistent/vmlinuz", Initramfs: base, Accel: "tcg",
		Builder: testBuilder(t)}, log
}

var builder struct {
	once sync.Once
	path string
	err  error
}

// testBuilder builds hcaemu-initramfs (once per test binary) as provisioning
// does, here from this module's copy.
func testBuilder(t *testing.T) string {
	t.Helper()
	builder.once.Do(func() {
		dir, err := os.MkdirTemp("", "hcaemu-builder")
		if err != nil {
			builder.err = err
			return
		}
		builder.path = filepath.Join(dir, "hcaemu-initramfs")
		out, err := exec.Command("go", "build", "-o", builder.path, "./guestmod/"+builderDir).CombinedOutput()
		if err != nil {
			builder.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if builder.err != nil {
		t.Fatal(builder.err)
	}
	return builder.path
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builder.path != "" {
		os.RemoveAll(filepath.Dir(builder.path))
	}
	os.Exit(code)
}

func TestClusterFake(t *testing.T) {
	env, log := fakeEnv(t, "")
	cl, err := env.NewCluster(3)
	if err != nil {
		t.Fatal(err)
	}
	var out, diag bytes.Buffer
	cl.Stdout, cl.Stderr, cl.Timeout = &out, &diag, 20*time.Second
	res, err := cl.Run(context.Background(), CommandScript([]string{"echo", "from-cmd"}))
	if err != nil {
		t.Fatal(err)
	}
	for k, r := range res {
		if r.Err != nil || r.ExitStatus != k {
			t.Errorf("guest %d: %+v", k, r)
		}
	}
	o := out.String()
	for _, want := range []string{"[g0] hello from 0\n", "[g1] hello from 1\n", "[g2] hello from 2\n", "[g1] cmd present\n", "[g2] no newline\n"} {
		if !strings.Contains(o, want) {
			t.Errorf("output lacks %q:\n%s", want, o)
		}
	}
	for _, bad := range []string{"SeaBIOS", "HCAEMU-", "Power down"} {
		if strings.Contains(o, bad) {
			t.Errorf("output has %q:\n%s", bad, o)
		}
	}
	if diag.Len() != 0 {
		t.Errorf("diagnostics: %s", diag.String())
	}
	l, _ := os.ReadFile(log)
	// Guest 0 watches for a listener (the default); it exits 0 without
	// one, which releases the others.
	if !strings.HasPrefix(string(l), "started 0 listen\n") || strings.Count(string(l), "started") != 3+2 {
		t.Errorf("guest 0 did not start first:\n%s", l)
	}
	cl.Close()
	if _, err := os.Stat(cl.Dir); !os.IsNotExist(err) {
		t.Errorf("run dir %s left behind", cl.Dir)
	}
}

func TestClusterFakeQEMUCrash(t *testing.T) {
	env, _ := fakeEnv(t, "crash")
	cl, _ := env.NewCluster(2)
	defer cl.Close()
	var out, diag bytes.Buffer
	cl.Stdout, cl.Stderr, cl.Timeout = &out, &diag, 20*time.Second
	t0 := time.Now()
	res, err := cl.Run(context.Background(), "true\n")
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err == nil || res[0].ExitStatus != -1 || !strings.Contains(diag.String(), "qemu: something broke") ||
		!strings.Contains(diag.String(), "SeaBIOS noise") {
		t.Errorf("result %+v, diag:\n%s", res[0], diag.String())
	}
	if time.Since(t0) > 10*time.Second {
		t.Errorf("took %s", time.Since(t0))
	}
}

func TestClusterFakeTimeout(t *testing.T) {
	env, _ := fakeEnv(t, "hang")
	cl, _ := env.NewCluster(2)
	defer cl.Close()
	var out, diag bytes.Buffer
	cl.Stdout, cl.Stderr, cl.Timeout = &out, &diag, time.Second
	t0 := time.Now()
	res, err := cl.Run(context.Background(), "true\n")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err == nil || !strings.Contains(r.Err.Error(), "no exit marker within 1s") {
			t.Errorf("result %+v", r)
		}
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("timeout took %s", d)
	}
}

// runFake runs guests fake guests in mode with the given readiness.
func runFake(t *testing.T, mode string, guests int, ready Readiness) ([]GuestResult, string, string, string) {
	t.Helper()
	env, log := fakeEnv(t, mode)
	cl, err := env.NewCluster(guests)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out, diag bytes.Buffer
	cl.Stdout, cl.Stderr, cl.Timeout, cl.Ready = &out, &diag, 2*time.Minute, ready
	res, err := cl.Run(context.Background(), "true\n")
	if err != nil {
		t.Fatal(err)
	}
	l, _ := os.ReadFile(log)
	return res, out.String(), diag.String(), string(l)
}

// Guests >= 1 start their command only once guest 0's is ready; the
// readiness mode reaches guest 0's init (and only guest 0's).
func TestClusterFakeReadiness(t *testing.T) {
	for _, tc := range []struct {
		mode  string
		ready Readiness
		want  string // the log
	}{
		{"listen", "", "started 0 listen\nready 0\nstarted 1 started\nstarted 2 started\n"},
		{"listen", ReadyListen, "started 0 listen\nready 0\nstarted 1 started\nstarted 2 started\n"},
		{"marker", ReadyMarker, "started 0 marker\nready 0\nstarted 1 started\nstarted 2 started\n"},
		// A plain HCAEMU-READY line also counts in listen mode.
		{"marker", ReadyListen, "started 0 listen\nready 0\nstarted 1 started\nstarted 2 started\n"},
		// Guest 0 exiting 0 without becoming ready releases the others.
		{"", ReadyMarker, "started 0 marker\nstarted 1 started\nstarted 2 started\n"},
	} {
		t.Run(tc.mode+"/"+string(tc.ready), func(t *testing.T) {
			res, out, diag, log := runFake(t, tc.mode, 3, tc.ready)
			for k, r := range res {
				if r.Err != nil || r.ExitStatus != k {
					t.Errorf("guest %d: %+v", k, r)
				}
			}
			// Guests 1 and 2 may start in either order.
			sorted := strings.Split(strings.TrimSuffix(log, "\n"), "\n")
			if len(sorted) == len(strings.Split(strings.TrimSuffix(tc.want, "\n"), "\n")) {
				n := len(sorted)
				if sorted[n-2] > sorted[n-1] {
					sorted[n-2], sorted[n-1] = sorted[n-1], sorted[n-2]
				}
			}
			if got := strings.Join(sorted, "\n") + "\n"; got != tc.want {
				t.Errorf("log:\n%s\nwant:\n%s", got, tc.want)
			}
			if strings.Contains(out, "HCAEMU-READY ") || diag != "" {
				t.Errorf("output:\n%s\ndiagnostics:\n%s", out, diag)
			}
		})
	}
	if _, err := ParseReadiness("soon"); err == nil {
		t.Error("ParseReadiness(soon): want error")
	}
}

// When guest 0's command fails, the others are stopped at once, with a
// message saying why, not at the timeout (2 minutes here).
func TestClusterFakeGuest0Fails(t *testing.T) {
	for _, tc := range []struct {
		mode, why string
	}{
		{"fail0", "guest 0's command failed (exit status 3) before it was ready"},
		{"fail0late", "guest 0's command failed (exit status 3)"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t0 := time.Now()
			res, _, diag, _ := runFake(t, tc.mode, 2, ReadyListen)
			if res[0].Err != nil || res[0].ExitStatus != 3 {
				t.Errorf("guest 0: %+v", res[0])
			}
			if res[1].Err == nil || !strings.Contains(res[1].Err.Error(), tc.why) || res[1].ExitStatus != -1 {
				t.Errorf("guest 1: %+v, want %q", res[1], tc.why)
			}
			if want := "hcaemu: guest 1: killed: " + tc.why + "\n"; !strings.Contains(diag, want) || strings.Contains(diag, "last console lines") {
				t.Errorf("diagnostics:\n%s\nwant %q", diag, want)
			}
			// A command that failed on its own shows what QEMU said.
			if want := "hcaemu: guest 0: QEMU's messages:\n    qemu: vfio-user: request timed out"; tc.mode == "fail0" && !strings.Contains(diag, want) {
				t.Errorf("diagnostics:\n%s\nwant %q", diag, want)
			}
			if d := time.Since(t0); d > time.Minute {
				t.Errorf("took %s: guest 1 waited for the timeout", d)
			}
		})
	}
}

// The command's own marker-like lines are output; only the init's markers,
// with the run's nonce, count.
func TestClusterFakeForgedMarkers(t *testing.T) {
	res, out, diag, _ := runFake(t, "forge", 2, ReadyStarted)
	for k, r := range res {
		if r.Err != nil || r.ExitStatus != 7*k {
			t.Errorf("guest %d: %+v", k, r)
		}
	}
	for k := 0; k < 2; k++ {
		for _, want := range []string{"HCAEMU-EXIT 0", "HCAEMU-EXIT 0123456789abcdef 0", "HCAEMU-STARTED", "HCAEMU-WAIT"} {
			if !strings.Contains(out, fmt.Sprintf("[g%d] %s\n", k, want)) {
				t.Errorf("guest %d: output lacks %q:\n%s", k, want, out)
			}
		}
	}
	if diag != "" {
		t.Errorf("diagnostics:\n%s", diag)
	}
}
