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

// checkMLX5Capture checks TestE2EMLX5Probe's --pcap and --faults: the
// plan's rules are counted at exit; PATH is a pcap of the Ethernet
// segment and PATH's .ib file one of link type 252 that tshark reads.
// (Today the driver stops before it sends a packet on the subnet: its MADs
// are answered by the port's SMA, so the IB capture is checked for its
// header and for tshark reading it; the unit tests in cmd/hcaemu and
// emu/fault check packets.)
func checkMLX5Capture(t *testing.T, out, dir, pcap string) {
	t.Helper()
	for _, p := range []string{
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
