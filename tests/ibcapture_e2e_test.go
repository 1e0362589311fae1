package tests

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestE2EMLX5CaptureFaults boots a guest with --device mlx5, --pcap and a
// fault plan (issue 25): the run makes its InfiniBand subnet with the
// plan's subnet decorator and a capture in PATH's .ib file, which tshark
// reads as link type 252; PATH stays the Ethernet segment's (the guest's
// IP traffic); the plan's rules are counted at exit. (Today the driver
// stops before it sends a packet on the subnet: its MADs are answered by
// the port's SMA, so the IB capture is checked for its header and for
// tshark reading it; the unit tests in cmd/hcaemu and emu/fault check
// packets.)
func TestE2EMLX5CaptureFaults(t *testing.T) {
	needE2E(t)
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(plan, []byte(`{"seed":1,"rules":[{"name":"ibloss","match":{"peer":"lid:2"},"action":{"kind":"drop"},"schedule":{"probability":0.5}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	pcap := filepath.Join(dir, "probe.pcap")
	out, _ := hcaemuRun(t, "--device", "mlx5", "--timeout", "5m", "--pcap", pcap, "--faults", plan,
		"--faults-log", filepath.Join(dir, "faults.log"), "--", "echo COMMAND-RAN")
	for _, p := range []string{
		`mlx5_core 0000:00:[0-9a-f]{2}\.1: firmware version`,
		`hcaemu: faults: seed 1, 1 rules`,
		`hcaemu: faults: rule ibloss: fired [0-9]+ of [0-9]+ matches`,
	} {
		if !regexp.MustCompile(p).MatchString(out) {
			t.Errorf("output lacks %q", p)
		}
	}
	for file, linkType := range map[string]uint32{pcap: 1, filepath.Join(dir, "probe.ib.pcap"): 252} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Errorf("capture: %v", err)
			continue
		}
		if len(b) < 24 || binary.LittleEndian.Uint32(b[20:]) != linkType {
			t.Errorf("%s: not a pcap of link type %d", file, linkType)
			continue
		}
		if _, err := exec.LookPath("tshark"); err != nil {
			continue
		}
		var stderr strings.Builder
		cmd := exec.Command("tshark", "-r", file)
		cmd.Stderr = &stderr
		res, err := cmd.Output()
		if err != nil {
			t.Errorf("tshark -r %s: %v\n%s", file, err, stderr.String())
		}
		n := 0
		if s := strings.TrimSpace(string(res)); s != "" {
			n = strings.Count(s, "\n") + 1
		}
		t.Logf("%s: %d packets", filepath.Base(file), n)
	}
}
