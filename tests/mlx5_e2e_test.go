package tests

import (
	"regexp"
	"strings"
	"testing"
)

// TestE2EMLX5Probe boots a guest with --device mlx5 and checks what the
// unmodified mlx5_core and mlx5_ib make of the emulated ConnectX today
// (issue 25; stages of ../shared/spec/mlx5.md §11): mlx5_core binds the
// 15b3:1013 function, reads the initialization segment (the firmware
// version), brings the function up through the command queue (ENABLE_HCA
// to the event queues, commands completed by EQE) and its probe succeeds;
// mlx5_ib's first InfiniBand command, MAD_IFC, is answered "bad operation"
// with the device's syndrome and its probe fails cleanly: no hang, no IOMMU
// fault, no command timeout, and the guest's init says so at once. As the
// model grows, this test's expectations move to the next stage's
// milestone.
func TestE2EMLX5Probe(t *testing.T) {
	needE2E(t)
	out, code := hcaemuRun(t, "--device", "mlx5", "--timeout", "5m", "--", "echo COMMAND-RAN")
	if code == 0 {
		t.Errorf("hcaemu run exited 0: the guest's init found an mlx5_0")
	}
	for _, p := range []string{
		`mlx5_core 0000:00:[0-9a-f]{2}\.1: firmware version: 16\.35\.1010`,
		`MAD_IFC\(0x50d\) op_mod\(0x3\) failed, status bad operation\(0x2\), syndrome \(0x4d580002\)`,
		`probe with driver mlx5_ib\.rdma failed`,
		`HCAEMU-FAIL no mlx5_0: mlx5_ib has not bound mlx5_core\.rdma\.0`,
	} {
		if !regexp.MustCompile(p).MatchString(out) {
			t.Errorf("output lacks %q", p)
		}
	}
	if regexp.MustCompile(`probe with driver mlx5_core failed`).MatchString(out) {
		t.Errorf("mlx5_core's probe failed")
	}
	for _, bad := range []string{"COMMAND-RAN", "timeout", "DMAR", "IOMMU", "Oops", "BUG:", "call trace"} {
		if strings.Contains(strings.ToLower(out), strings.ToLower(bad)) {
			t.Errorf("output has %q", bad)
		}
	}
}
