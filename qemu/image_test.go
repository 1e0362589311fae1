package qemu

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParsePackages(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  string
	}{
		{"", nil, ""},
		{"qperf", []string{"qperf"}, ""},
		{"python3-pyverbs, python3,qperf,python3", []string{"python3", "python3-pyverbs", "qperf"}, ""},
		{"libstdc++6,g++-14=14.2.0-19", []string{"g++-14=14.2.0-19", "libstdc++6"}, ""},
		{"Qperf", nil, `"Qperf" is not a Debian package name`},
		{"qperf;reboot", nil, "not a Debian package name"},
		{"-qperf", nil, "not a Debian package name"},
		{"qperf=", nil, "not a Debian package name"},
		{"a b", nil, "not a Debian package name"},
		{strings.Repeat("p,", 30) + strings.Repeat("q", 101), nil, "not a Debian package name"},
	} {
		got, err := ParsePackages(tc.in)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParsePackages(%q) = %q, %v; want error with %q", tc.in, got, err, tc.err)
			}
		case err != nil:
			t.Errorf("ParsePackages(%q): %v", tc.in, err)
		default:
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("ParsePackages(%q) (-want +got):\n%s", tc.in, d)
			}
		}
	}
	many := ""
	for i := 0; i <= maxImagePackages; i++ {
		many += "p" + strings.Repeat("a", i+1) + ","
	}
	if _, err := ParsePackages(many); err == nil {
		t.Errorf("%d packages accepted", maxImagePackages+1)
	}
}

// The image's key is its package set: the order and duplicates of
// --packages and base packages named again do not make another image.
func TestImageKey(t *testing.T) {
	a := imageKey([]string{"qperf", "python3"})
	for _, same := range [][]string{{"python3", "qperf"}, {"python3", "qperf", "iproute2"}} {
		if k := imageKey(same); k != a {
			t.Errorf("imageKey(%q) = %q, want %q", same, k, a)
		}
	}
	if imageKey(nil) == a || imageKey([]string{"qperf"}) == a {
		t.Errorf("different package sets share the key %q", a)
	}
	for _, p := range imageBasePackages {
		if !strings.Contains(imageKey(nil), p) {
			t.Errorf("key %q lacks base package %s", imageKey(nil), p)
		}
	}
}

func TestCustomizeImageAndSize(t *testing.T) {
	tree := t.TempDir()
	if err := os.WriteFile(filepath.Join(tree, "big"), make([]byte, 5000), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := customizeImage(tree); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(tree, "usr/local/bin/hcaemu-ready"))
	if err != nil || string(b) != imageReadyScript {
		t.Errorf("hcaemu-ready: %q, %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(tree, "hcaemu")); err != nil || !fi.IsDir() {
		t.Errorf("no /hcaemu mount point: %v", err)
	}
	// root, big, hcaemu, usr, usr/local, usr/local/bin, hcaemu-ready
	size, n, err := treeSize(tree)
	if err != nil || n != 7 || size != 8192+4096+5*4096 {
		t.Errorf("treeSize = %d, %d, %v; want %d, 7", size, n, err, 8192+4096+5*4096)
	}
}
