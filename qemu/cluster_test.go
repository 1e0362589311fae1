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
if echo "$app" | grep -q 'hcaemu.wait=1'; then
	echo HCAEMU-WAIT
	read go
	echo "$go"
fi
echo "started $g" >> "$FAKE_LOG"
echo HCAEMU-STARTED
tail -c 200 "$initrd" | grep -q 'echo from-cmd' && echo "cmd present"
echo "hello from $g"
printf "no newline"
echo "HCAEMU-EXIT $g"
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
	if !strings.HasPrefix(string(l), "started 0\n") || strings.Count(string(l), "started") != 3 {
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
