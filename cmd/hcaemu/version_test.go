package main

import (
	"bytes"
	"encoding/json"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/hcaemu/hcaemu/qemu"
)

func TestReadBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/hcaemu/hcaemu", Version: "v0.3.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "f4076f8abc"}, {Key: "vcs.time", Value: "2026-11-27T19:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	b := readBuildInfo(bi, true)
	if got, want := b.String(), "hcaemu v0.3.0 f4076f8abc (modified) 2026-11-27T19:00:00Z go1.26.8"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	b = readBuildInfo(&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/hcaemu/hcaemu"}}, true)
	if got, want := b.String(), "hcaemu (devel) go1.26.8 (no VCS revision: built outside a git checkout or with -buildvcs=false)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := readBuildInfo(nil, false).Version; got != "unknown" {
		t.Errorf("no build info: version %q", got)
	}
}

func testReport(complete bool) versionReport {
	c := qemu.CacheInfo{Dir: "/var/cache/hcaemu", WorkDir: "/home/u/.cache/hcaemu", ReadOnly: true,
		QEMU: "1:11.1.3+ds-1", Kernel: "6.12.117+deb13-amd64", KernelPackage: "linux-image-6.12.117+deb13-amd64 6.12.117-1",
		RDMACore: "65.0-1.1", Perftest: "25.01.0+0.80-1", Accel: "tcg (/dev/kvm is not usable: permission denied)",
		Steps: []string{"tools", "sid"}}
	if complete {
		c.Complete, c.Key, c.Steps = true, "e16ac1c1c9fb719f", []string{"tools", "sid", "trixie", "modules", "initramfs"}
	}
	return versionReport{Hcaemu: buildInfo{Module: "github.com/hcaemu/hcaemu", Version: "(devel)", Revision: "f4076f8", GoVersion: "go1.26.8"}, Cache: c}
}

// The text names every version, the cache key and the accelerator, one
// "name: value" line each.
func TestVersionText(t *testing.T) {
	var b bytes.Buffer
	writeVersion(&b, testReport(true))
	want := `hcaemu (devel) f4076f8 go1.26.8
cache:        /var/cache/hcaemu (read-only; runs write in /home/u/.cache/hcaemu)
cache key:    e16ac1c1c9fb719f
qemu:         qemu-system-x86 1:11.1.3+ds-1 (Debian sid root)
guest kernel: 6.12.117+deb13-amd64 (linux-image-6.12.117+deb13-amd64 6.12.117-1)
rdma-core:    65.0-1.1
perftest:     25.01.0+0.80-1
accel:        tcg (/dev/kvm is not usable: permission denied)
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	writeVersion(&b, testReport(false))
	if !strings.Contains(b.String(), "cache key:    none: not provisioned (done: tools,sid;") {
		t.Errorf("incomplete cache:\n%s", b.String())
	}
}

// --json has the same facts under stable names.
func TestVersionJSON(t *testing.T) {
	js, err := json.Marshal(testReport(true))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Hcaemu struct{ Version, Revision string }
		Cache  struct {
			Key, QEMU, Kernel, Accel string
			RDMACore                 string `json:"rdma_core"`
			Perftest                 string
			ReadOnly                 bool `json:"read_only"`
		}
	}
	if err := json.Unmarshal(js, &m); err != nil {
		t.Fatal(err)
	}
	if m.Hcaemu.Revision != "f4076f8" || m.Cache.Key != "e16ac1c1c9fb719f" || m.Cache.QEMU != "1:11.1.3+ds-1" ||
		m.Cache.Kernel != "6.12.117+deb13-amd64" || m.Cache.RDMACore != "65.0-1.1" || m.Cache.Perftest != "25.01.0+0.80-1" ||
		!m.Cache.ReadOnly || !strings.HasPrefix(m.Cache.Accel, "tcg") {
		t.Errorf("json %s", js)
	}
}

// hcaemu version and --version run on an empty cache without provisioning.
func TestVersionCommand(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{"--cache", dir}, {"--cache", dir, "--json"}} {
		var out, errb bytes.Buffer
		if code := versionMain(args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		if !strings.Contains(out.String(), dir) || !strings.Contains(out.String(), "hcaemu") {
			t.Errorf("%v:\n%s", args, out.String())
		}
	}
	var out, errb bytes.Buffer
	if code := versionMain([]string{"extra"}, &out, &errb); code != 2 {
		t.Errorf("extra argument: exit %d", code)
	}
}
