package qemu

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// InspectCache reads the versions from the roots' dpkg status and the
// guest directory, and the key only of a complete cache.
func TestInspectCache(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("sid/var/lib/dpkg/status", "Package: perftest\nStatus: install ok installed\nVersion: 25.01.0+0.80-1\n\n"+
		"Package: qemu-system-x86\nVersion: 1:11.1.3+ds-1\nDescription: x\n Version: 0\n\nPackage: ibverbs-utils\nVersion: 65.0-1.1\n")
	write("trixie/var/lib/dpkg/status", "Package: linux-image-6.12.117+deb13-amd64\nVersion: 6.12.117-1\n")
	write("guest/kernel.release", "6.12.117+deb13-amd64\n")
	write("images/0123/packages", "perftest\nqperf\n")
	choice := CacheChoice{Dir: dir, WorkDir: dir}
	t.Setenv("HCAEMU_ACCEL", "tcg")
	info := InspectCache(context.Background(), choice)
	if info.QEMU != "1:11.1.3+ds-1" || info.RDMACore != "65.0-1.1" || info.Perftest != "25.01.0+0.80-1" ||
		info.Kernel != "6.12.117+deb13-amd64" || info.KernelPackage != "linux-image-6.12.117+deb13-amd64 6.12.117-1" ||
		info.Images["0123"] != "perftest,qperf" || info.Accel != "tcg (HCAEMU_ACCEL)" {
		t.Errorf("%+v", info)
	}
	if info.Complete || info.Key != "" {
		t.Errorf("no stamps, yet complete %v key %q", info.Complete, info.Key)
	}
	writeStamps(t, newProvisioner(dir, dir, "", nil))
	info = InspectCache(context.Background(), choice)
	if !info.Complete || len(info.Key) != 16 || strings.Join(info.Steps, ",") != "tools,sid,trixie,modules,initramfs" {
		t.Errorf("complete: %+v", info)
	}
}

// CleanCache refuses while a run holds the runs lock, or a provisioning the
// provisioning lock, and removes the cache otherwise.
func TestCleanCache(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	if err := os.MkdirAll(filepath.Join(dir, "run", "0123"), 0o700); err != nil {
		t.Fatal(err)
	}
	run, err := lockRuns(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := CleanCache(dir); err == nil || !strings.Contains(err.Error(), "an hcaemu run is using it") {
		t.Errorf("with a run: %v", err)
	}
	run.Close()
	unlock, err := lockCache(dir, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := CleanCache(dir); err == nil || !strings.Contains(err.Error(), "an hcaemu is provisioning it") {
		t.Errorf("while provisioning: %v", err)
	}
	unlock()
	if err := CleanCache(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s still there: %v", dir, err)
	}
	if err := CleanCache(dir); err != nil {
		t.Errorf("cleaning nothing: %v", err)
	}
}
