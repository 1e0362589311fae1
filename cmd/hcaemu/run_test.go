package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hcaemu/hcaemu/qemu"
)

// Every bad flag or path of "hcaemu run" is refused before anything is
// provisioned or booted, with one line naming it.
func TestRunFlagErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string // in the one line
	}{
		{[]string{"--guests", "0", "--", "true"}, "--guests"},
		{[]string{"--guests", "9", "--", "true"}, "--guests"},
		{[]string{"--timeout", "0s", "--", "true"}, "--timeout"},
		{[]string{"--memory", "lots", "--", "true"}, "--memory"},
		{[]string{"--ready", "soon", "--", "true"}, `--ready: unknown readiness "soon"`},
		{[]string{"--smp", "0", "--", "true"}, "--smp must be between 1 and 32, not 0"},
		{[]string{"--smp", "33", "--", "true"}, "--smp"},
		{[]string{"--smp", "two", "--", "true"}, "-smp"},
		{[]string{"--share", filepath.Join(dir, "nope"), "--", "true"}, "--share: share \"" + filepath.Join(dir, "nope")},
		{[]string{"--share", file, "--", "true"}, "is not a directory"},
		{[]string{"--share", ":/mnt/x", "--", "true"}, "--share: share \":/mnt/x\": no host directory"},
		{[]string{"--share", dir + ":relative", "--", "true"}, "--share: share"},
		{[]string{"--share", dir + ":/", "--", "true"}, "must be an absolute path other than /"},
		{[]string{"--share", dir + ":/a b", "--", "true"}, "--share"},
		{[]string{"--share", dir, "--share", dir + ":/mnt/host", "--", "true"}, "guest directory /mnt/host is used twice"},
		{[]string{"--pcap", filepath.Join(dir, "nodir", "x.pcap"), "--", "true"}, "--pcap " + filepath.Join(dir, "nodir", "x.pcap")},
		{[]string{"--pcap", filepath.Join(file, "x.pcap"), "--", "true"}, "--pcap"},
		{[]string{"--nope", "--", "true"}, "-nope"},
		{[]string{"--log-level", "loud", "--", "true"}, `--log-level "loud"`},
		{[]string{"--kernel", file, "--", "true"}, "--kernel " + file + ": not an x86 bzImage"},
		{[]string{"--kernel", filepath.Join(dir, "nope"), "--", "true"}, "--kernel " + filepath.Join(dir, "nope")},
		{[]string{"--modules", file, "--", "true"}, "--modules " + file + ": not a directory"},
		{[]string{"--modules", filepath.Join(dir, "nope"), "--", "true"}, "--modules: "},
		{[]string{"--kernel-tree", dir, "--", "true"}, "--kernel-tree: kernel tree " + dir + " has no arch/x86/boot/bzImage"},
		{[]string{"--kernel-tree", dir, "--modules", dir, "--", "true"}, "--kernel-tree replaces --kernel and --modules"},
		{[]string{"--ulp", "nvme_rdma,iwarp", "--", "true"}, `--ulp: "iwarp" is not one of the upper-layer protocols`},
		{[]string{"--guests", "2"}, "no command given"},
		{[]string{"--guests", "2", "--rxe", "2", "--", "true"}, `--rxe: "2" is not a guest (0..1) nor all`},
		{[]string{"--rxe", "one", "--", "true"}, `--rxe: "one" is not a guest`},
		{[]string{"--uplink", "eth0", "--", "true"}, `--uplink: uplink "eth0": want tap:NAME or dev:IFACE`},
		{[]string{"--guest-ip", "10.0.0.254/24", "--guests", "3", "--", "true"}, `--guest-ip: 10.0.0.254/24: guest 1's address 10.0.0.255 is not a host of 10.0.0.0/24`},
		{[]string{"--rxe", "0,", "--", "true"}, `--rxe: "" is not a guest`},
		{[]string{"--image", "ubuntu", "--", "true"}, `--image "ubuntu": the one image is debian`},
		{[]string{"--packages", "qperf", "--", "true"}, "--packages needs --image debian"},
		{[]string{"--image", "debian", "--packages", "qperf,Bad_Name", "--", "true"}, `--packages: "Bad_Name" is not a Debian package name`},
		{[]string{"--image", "debian", "--packages", "a;rm", "--", "true"}, "--packages: "},
		{[]string{"--image", "debian", "--kernel", file, "--", "true"}, "--image runs on the provisioned kernel"},
		{[]string{"--device", "cx7", "--", "true"}, `--device: unknown device model "cx7" (want pvrdma, mlx5 or pvrdma,mlx5)`},
		{[]string{"--device", "pvrdma,cx7", "--", "true"}, `--device: unknown device model "cx7"`},
		{[]string{"--device", "pvrdma,", "--", "true"}, `--device: unknown device model ""`},
		{[]string{"--device", "mlx5,mlx5", "--", "true"}, `--device: device model "mlx5" named twice in "mlx5,mlx5"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			// A cache that cannot be created: were the flags accepted,
			// provisioning would fail with another message.
			args := append([]string{"--cache", file + "/cache"}, tc.args...)
			code := runWith(context.Background(), args, &stdout, &stderr)
			msg := stderr.String()
			if code != 2 {
				t.Errorf("exit %d, want 2 (stderr %q)", code, msg)
			}
			if strings.Count(msg, "\n") != 1 || !strings.HasPrefix(msg, "hcaemu run: ") || !strings.Contains(msg, tc.want) {
				t.Errorf("stderr %q, want one line with %q", msg, tc.want)
			}
		})
	}
}

// Each guest's HCAs per --device: one-model runs keep the names hcaK; with
// both, the PVRDMA function is hcaK and the ConnectX hcaK-mlx5 on the
// second socket.
func TestGuestHCAs(t *testing.T) {
	for _, tc := range []struct {
		model string
		k     int
		want  []guestHCA
	}{
		{"", 0, []guestHCA{{name: "hca0", model: qemu.ModelPVRDMA}}},
		{"pvrdma", 3, []guestHCA{{name: "hca3", model: qemu.ModelPVRDMA}}},
		{"mlx5", 1, []guestHCA{{name: "hca1", model: qemu.ModelMLX5}}},
		{"pvrdma,mlx5", 0, []guestHCA{{name: "hca0", model: qemu.ModelPVRDMA}, {name: "hca0-mlx5", model: qemu.ModelMLX5, second: true}}},
		{"mlx5,pvrdma", 7, []guestHCA{{name: "hca7", model: qemu.ModelPVRDMA}, {name: "hca7-mlx5", model: qemu.ModelMLX5, second: true}}},
	} {
		m, err := deviceModel(tc.model)
		if err != nil {
			t.Fatalf("--device %q: %v", tc.model, err)
		}
		if got := guestHCAs(m, tc.k); !slices.Equal(got, tc.want) {
			t.Errorf("guestHCAs(%q, %d) = %+v, want %+v", m, tc.k, got, tc.want)
		}
	}
}

func TestParseGuestList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
	}{
		{"", nil},
		{"1", []int{1}},
		{"2,0,2", []int{2, 0}},
		{"all", []int{0, 1, 2}},
	} {
		got, err := parseGuestList(tc.in, 3)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("parseGuestList(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestRunFlagsAccepted(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args   []string
		ready  string
		smp    int
		shares int
	}{
		{nil, "listen", 1, 0},
		{[]string{"--ready", "started", "--smp", "4"}, "started", 4, 0},
		{[]string{"--ready", "marker", "--share", dir, "--share", dir + ":/results"}, "marker", 1, 2},
	} {
		var w workloadFlags
		fs := newRunFlagSetForTest()
		w.register(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if err := w.apply(nil); err != nil {
			t.Errorf("%q: %v", tc.args, err)
		}
		if w.ready != tc.ready || w.smp != tc.smp || len(w.shares) != tc.shares {
			t.Errorf("%q: got %+v", tc.args, w)
		}
	}
}

func newRunFlagSetForTest() *flag.FlagSet {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}
