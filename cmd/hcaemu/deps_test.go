package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestNoProvisioningStackLinked: the hcaemu binary (serve, run, qemu-args)
// links nothing of the initramfs builder's stack; provisioning builds and
// runs that as a separate tool (qemu/guestmod/hcaemu-initramfs).
func TestNoProvisioningStackLinked(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 || !slices.Contains(deps, "github.com/hcaemu/hcaemu/vfio") {
		t.Fatalf("go list -deps gave %d packages", len(deps))
	}
	for _, dep := range deps {
		for _, banned := range []string{"github.com/u-root/", "mkuimage", "gobusybox"} {
			if strings.Contains(dep, banned) {
				t.Errorf("hcaemu links %s", dep)
			}
		}
	}
}
