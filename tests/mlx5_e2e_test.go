package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestE2EMLX5Probe boots a guest with --device mlx5: stage 1 of
// ../shared/spec/mlx5.md §11 as the guest sees it (issue 25). The
// unmodified mlx5_core probes the emulated ConnectX-4 through its command
// queue (ENABLE_HCA to the event queues, commands completed by EQE),
// mlx5_ib asks the port's SMA through MAD_IFC and makes mlx5_0 with
// ib_mad's QP0 and QP1, ib_ipoib makes ib0 and the init gives it its
// address: ibv_devinfo -v shows the ConnectX's identity, the port ACTIVE
// on the InfiniBand link layer with the LID the subnet's SM assigned and
// the SM's LID; rdma link says ACTIVE/LINK_UP. No driver error, no
// command timeout. (Unloading mlx5_ib is not checked yet: ib_mad waits for
// the completion of the MADs it posted on QP1, which needs the data path
// and flush completions of stage 2; rmmod hangs until then.)
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
	script := `
echo "RDMA_DEV=$HCAEMU_RDMA_DEV"
ibv_devinfo -v
rdma link
ip addr show ib0
echo "DMESG BEGIN"
dmesg | grep -i -e mlx5 -e ipoib
echo "DMESG END"
`
	out, code := hcaemuRun(t, "--device", "mlx5", "--timeout", "5m", "--pcap", pcap, "--faults", plan,
		"--faults-log", filepath.Join(dir, "faults.log"), "--", script)
	if code != 0 {
		t.Errorf("hcaemu run exited %d", code)
	}
	mustContain(t, out, 0,
		`RDMA_DEV=mlx5_0`,
		`hca_id:\s+mlx5_0`, `transport:\s+InfiniBand \(0\)`, `fw_ver:\s+16\.35\.1010`,
		`vendor_id:\s+0x02c9`, `vendor_part_id:\s+4115`, `phys_port_cnt:\s+1`,
		`state:\s+PORT_ACTIVE \(4\)`, `link_layer:\s+InfiniBand`, `port_lid:\s+[2-9]`, `sm_lid:\s+1\n`,
		`phys_state:\s+LINK_UP \(5\)`, `active_mtu:\s+4096 \(5\)`, `GID\[\s*0\]:\s+fe80:0000:0000:0000:0002:c903:`,
		`link mlx5_0/1 subnet_prefix fe80:0000:0000:0000 lid [2-9] sm_lid 1 lmc 0 state ACTIVE physical_state LINK_UP`,
		`inet 10\.0\.1\.1/24`)
	g0 := strings.Join(guestLines(out, 0), "\n")
	if i, j := strings.Index(g0, "DMESG BEGIN"), strings.Index(g0, "DMESG END"); i >= 0 && j > i {
		for _, l := range strings.Split(g0[i:j], "\n") {
			low := strings.ToLower(l)
			if (strings.Contains(low, "fail") || strings.Contains(low, "error") || strings.Contains(low, "timeout")) &&
				!strings.Contains(l, "Failed to get valid vendor specific ID") { // no VSC capability: spec §1.5
				t.Errorf("driver error: %s", l)
			}
		}
	} else {
		t.Errorf("no kernel log in the output")
	}
	checkMLX5Capture(t, out, dir, pcap)
}
