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
// The IB capture holds the pingpongs' RC packets between the two ports'
// LIDs, as tshark's infiniband dissector reads them (LRH and BTH), and
// the plan's rule (every 200th RC packet to or from LID 2 dropped) fired:
// RC recovered from that loss on the IB subnet.
func checkMLX5Capture(t *testing.T, out, dir, pcap string) {
	t.Helper()
	for _, p := range []string{
		`hcaemu: faults: seed 1, 1 rules`,
		`hcaemu: faults: rule ibloss: fired [1-9][0-9]* of [0-9]+ matches`,
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
		if linkType != 252 {
			continue
		}
		// LRH DLID, SLID and the BTH opcode of every packet: RC SENDs
		// in 1024-byte packets (opcode 0, SEND_FIRST) and ACKs (17) both
		// ways between the two guests' LIDs (2 and 3), and the loopback's
		// packets from a port to itself.
		fields, err := exec.Command("tshark", "-r", file, "-T", "fields", "-e", "infiniband.lrh.dlid",
			"-e", "infiniband.lrh.slid", "-e", "infiniband.bth.opcode").Output()
		if err != nil {
			t.Errorf("tshark -T fields: %v", err)
			continue
		}
		seen := map[string]int{}
		for _, l := range strings.Split(strings.TrimSpace(string(fields)), "\n") {
			seen[l]++
		}
		loop := 0
		for k, n := range seen {
			if f := strings.Split(k, "\t"); len(f) == 3 && f[0] == f[1] {
				loop += n
			}
		}
		for _, want := range []string{"3\t2\t0", "2\t3\t0", "3\t2\t17", "2\t3\t17"} {
			if seen[want] == 0 || loop == 0 {
				t.Errorf("%s: no packet with DLID, SLID, BTH opcode %q, or none looped back (tshark read %v)", filepath.Base(file), want, seen)
			}
		}
	}
}
