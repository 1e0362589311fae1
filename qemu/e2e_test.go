package qemu

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// The end-to-end tests provision for real (about 3 GB below $HCAEMU_CACHE or
// /var/cache/hcaemu, 4 minutes the first time, then cached) and boot guests
// with TCG. They need root (or user namespaces) and the Debian mirror
// configured in apt.
func e2eEnv(t *testing.T) *Env {
	t.Helper()
	if os.Getenv("HCAEMU_E2E") != "1" {
		t.Skip("end-to-end test: set HCAEMU_E2E=1 to provision (about 3 GB in $HCAEMU_CACHE or /var/cache/hcaemu, a few minutes the first time) and boot guests")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	t0 := time.Now()
	env, err := Provision(ctx, Options{Log: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Provision: %s (accel %s, kernel %s)", time.Since(t0).Round(time.Millisecond), env.Accel, env.KernelRelease)
	return env
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func runCluster(t *testing.T, env *Env, guests int, timeout time.Duration, script string) ([]GuestResult, string, string) {
	t.Helper()
	return runClusterWith(t, env, guests, timeout, script, func(*Cluster) {})
}

// runClusterWith is runCluster with the cluster set up by set first.
func runClusterWith(t *testing.T, env *Env, guests int, timeout time.Duration, script string, set func(*Cluster)) ([]GuestResult, string, string) {
	t.Helper()
	cl, err := env.NewCluster(guests)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out, diag bytes.Buffer
	cl.Stdout, cl.Stderr, cl.Timeout = &out, &diag, timeout
	set(cl)
	t0 := time.Now()
	res, err := cl.Run(context.Background(), script)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d guests ran in %s\nstdout:\n%s\nstderr:\n%s", guests, time.Since(t0).Round(time.Millisecond), out.String(), diag.String())
	return res, out.String(), diag.String()
}

// Two guests on one segment: guest 1 pings guest 0, then connects to it over
// TCP (guest 0 waits for that connection: no fixed sleeps; guest 1 starts
// once guest 0 listens), and exits with 3.
func TestE2ETwoGuestsPing(t *testing.T) {
	env := e2eEnv(t)
	script := `echo "guest $HCAEMU_GUEST server=$HCAEMU_SERVER_IP"
if [ "$HCAEMU_GUEST" = 0 ]; then
	netcat -l --recv-only 5000 > /dev/null 2>&1 && echo "g0 got a connection"
else
	ping -c 1 $HCAEMU_SERVER_IP > /dev/null && echo "g1 reached $HCAEMU_SERVER_IP" || exit 1
	# No retry: guest 1 starts once guest 0 listens (Cluster.Ready).
	echo hi | netcat --send-only $HCAEMU_SERVER_IP 5000 > /dev/null 2>&1
	exit 3
fi
`
	res, out, _ := runCluster(t, env, 2, 5*time.Minute, script)
	if len(res) != 2 || res[0].Err != nil || res[0].ExitStatus != 0 || res[1].Err != nil || res[1].ExitStatus != 3 {
		t.Fatalf("results %+v, want exit statuses 0 and 3", res)
	}
	for _, want := range []string{"[g0] guest 0 server=\n", "[g1] guest 1 server=10.0.0.1\n", "[g0] g0 got a connection\n", "[g1] g1 reached 10.0.0.1\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out, "HCAEMU-") {
		t.Errorf("markers leaked into the output")
	}
}

// A guest that does not finish is killed at the timeout with a clear message.
func TestE2ETimeout(t *testing.T) {
	env := e2eEnv(t)
	res, _, diag := runCluster(t, env, 1, 20*time.Second, "echo sleeping; sleep 600\n")
	if res[0].Err == nil || res[0].ExitStatus != -1 || !strings.Contains(diag, "no exit marker within 20s") {
		t.Fatalf("result %+v, diag %q", res[0], diag)
	}
}

// QEMU that exits at once (no vfio-user server listening) is reported with
// its messages.
func TestE2EQEMUExitsEarly(t *testing.T) {
	env := e2eEnv(t)
	res, _, diag := runClusterWith(t, env, 1, time.Minute, "true\n", func(cl *Cluster) { cl.Devices = true })
	if res[0].Err == nil || !strings.Contains(diag, "QEMU exited") || !strings.Contains(diag, "vfio-user") {
		t.Fatalf("result %+v, diag %q", res[0], diag)
	}
}

// An mlx5 guest with no mlx5 function (Devices off): its init loads the
// mlx5 modules, finds no Mellanox PCI function and fails at once, naming
// it, with the modules it loaded and the kernel's last lines; the command
// never runs.
func TestE2EMLX5WithoutFunction(t *testing.T) {
	env := e2eEnv(t)
	res, out, diag := runClusterWith(t, env, 1, 5*time.Minute, "echo COMMAND-RAN\n", func(cl *Cluster) { cl.Model = ModelMLX5 })
	if res[0].ExitStatus != -1 || res[0].Err == nil ||
		!strings.Contains(res[0].Err.Error(), "guest boot failed: no mlx5_0: no Mellanox (15b3) PCI function in the guest") {
		t.Errorf("result %+v", res[0])
	}
	if !strings.Contains(diag, "hcaemu-init: mlx5 modules loaded: pci-hyperv-intf mlxfw mlx5_core mlx5_ib ib_ipoib") {
		t.Errorf("the diagnostics lack the loaded modules:\n%s", diag)
	}
	if strings.Contains(out, "COMMAND-RAN") {
		t.Errorf("the command ran:\n%s", out)
	}
}
