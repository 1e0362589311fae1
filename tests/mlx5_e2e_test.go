package tests

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/hcaemu/hcaemu/emu/mlx5"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
)

// TestE2EMLX5Probe boots a guest with --device mlx5 and checks how far the
// unmodified mlx5_core and mlx5_ib get on the emulated ConnectX today
// (issue 25; the stages of ../shared/spec/mlx5.md §11): mlx5_core binds the
// 15b3:1013 function, reads the initialization segment (the firmware
// version), brings the function up through the command queue (ENABLE_HCA
// to the event queues, commands completed by EQE) and its probe succeeds;
// mlx5_ib asks the port's SMA through MAD_IFC (the LID from the subnet's
// SM) and goes on until the first command the device does not implement
// yet, answered "bad operation" with the device's syndrome: its probe
// fails cleanly, no hang, no IOMMU fault, no command timeout, and the
// guest's init says so at once. Every command the driver sent before that
// one succeeded (the first failure is the unimplemented one). When mlx5_0
// comes up, this test moves to the next stage's milestone.
//
// The same boot runs with --pcap and a fault plan: the run makes its
// InfiniBand subnet with the plan's subnet decorator and a capture in
// PATH's .ib file, which tshark reads as link type 252; PATH stays the
// Ethernet segment's (the guest's IP traffic); the plan's rules are
// counted at exit (checkMLX5Capture).
func TestE2EMLX5Probe(t *testing.T) {
	needE2E(t)
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(plan, []byte(`{"seed":1,"rules":[{"name":"ibloss","match":{"peer":"lid:2"},"action":{"kind":"drop"},"schedule":{"probability":0.5}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	pcap := filepath.Join(dir, "probe.pcap")
	out, code := hcaemuRun(t, "--device", "mlx5", "--timeout", "5m", "--pcap", pcap, "--faults", plan,
		"--faults-log", filepath.Join(dir, "faults.log"), "--", "echo COMMAND-RAN")
	checkMLX5Capture(t, out, dir, pcap)
	if code == 0 {
		t.Errorf("hcaemu run exited 0: the guest's init found an mlx5_0")
	}
	for _, p := range []string{
		`mlx5_core 0000:00:[0-9a-f]{2}\.1: firmware version: 16\.35\.1010`,
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
	// The driver's first failed command: BAD_OP of one not implemented.
	m := regexp.MustCompile(`mlx5_cmd_out_err:[0-9]+:\(pid [0-9]+\): ([A-Z0-9_]+)\(0x([0-9a-f]+)\) op_mod\(0x[0-9a-f]+\) failed, status ([a-z ]+)\(0x([0-9a-f]+)\), syndrome \(0x([0-9a-f]+)\)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no failed command in the guest's kernel log")
	}
	op, _ := strconv.ParseUint(m[2], 16, 16)
	if m[3] != "bad operation" || m[5] != "4d580002" || mlx5.Implemented(ifc.Opcode(op)) {
		t.Errorf("the first failed command is %s (%#x): %s, syndrome %s; want BAD_OP of a command the device does not implement", m[1], op, m[3], m[5])
	}
	t.Logf("mlx5_ib stops at %s (%#x), the first command the device does not implement", m[1], op)
	for _, bad := range []string{"COMMAND-RAN", "timeout", "DMAR", "IOMMU", "Oops", "BUG:", "call trace"} {
		if strings.Contains(strings.ToLower(out), strings.ToLower(bad)) {
			t.Errorf("output has %q", bad)
		}
	}
}
