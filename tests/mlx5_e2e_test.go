package tests

import (
	"regexp"
	"strings"
	"testing"
)

// TestE2EMLX5Probe boots a guest with --device mlx5 and checks what the
// unmodified mlx5_core makes of the emulated ConnectX today (issue 25,
// stage 0 of ../shared/spec/mlx5.md): it binds the 15b3:1013 function,
// reads the initialization segment (the firmware version), sends its first
// command through the command queue and gets the device's answer back as
// the driver reads it (ENABLE_HCA: bad operation, with the device's
// syndrome), then fails its probe cleanly: no hang, no IOMMU fault, no
// timeout, and the guest's init says so. As the model grows, this test's
// expectations move to the next stage's milestone.
func TestE2EMLX5Probe(t *testing.T) {
	needE2E(t)
	out, code := hcaemuRun(t, "--device", "mlx5", "--timeout", "5m", "--", "echo COMMAND-RAN")
	if code == 0 {
		t.Errorf("hcaemu run exited 0: the guest's init found an mlx5_0")
	}
	for _, p := range []string{
		`mlx5_core 0000:00:[0-9a-f]{2}\.1: firmware version: 16\.35\.1010`,
		`ENABLE_HCA\(0x104\) op_mod\(0x0\) failed, status bad operation\(0x2\), syndrome \(0x4d580002\), err\(-22\)`,
		`mlx5_core 0000:00:[0-9a-f]{2}\.1: probe with driver mlx5_core failed with error -22`,
		`HCAEMU-FAIL no mlx5_0: mlx5_core has not bound PCI function`,
	} {
		if !regexp.MustCompile(p).MatchString(out) {
			t.Errorf("output lacks %q", p)
		}
	}
	for _, bad := range []string{"COMMAND-RAN", "timeout", "DMAR", "IOMMU", "Oops", "BUG:", "call trace"} {
		if strings.Contains(strings.ToLower(out), strings.ToLower(bad)) {
			t.Errorf("output has %q", bad)
		}
	}
}
