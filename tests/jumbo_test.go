package tests

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestE2EJumbo: hcaemu run --mtu 9000 gives the guests' vmxnet3s 9000-byte
// frames and the HCAs' ports an active MTU of 4096, the same as soft-RoCE
// works out over the same vmxnet3. Guest 0 on vmw_pvrdma0 and guest 1 on
// rxe0 run ibv_rc_pingpong -c at PMTU 4096, ibv_ud_pingpong with 4000-byte
// datagrams (more than a 1500-byte segment carries) and ib_write_bw; the
// capture holds full 4096-byte packets from both, every ICRC right.
func TestE2EJumbo(t *testing.T) {
	needE2E(t)
	pcap := filepath.Join(t.TempDir(), "jumbo.pcap")
	script := guestRetry + `echo "MTU $(cat /sys/class/net/eth0/mtu)"
echo "PORT $(ibv_devinfo -d $HCAEMU_RDMA_DEV | grep active_mtu)"
run ibv_rc_pingpong -d $HCAEMU_RDMA_DEV -g 1 -m 4096 -c -n 20 -s 30000
run ibv_ud_pingpong -d $HCAEMU_RDMA_DEV -g 1 -n 20 -s 4000
run ib_write_bw -d $HCAEMU_RDMA_DEV -x 1 -F -s 65536 -n 200
exit $failed
`
	out, code := hcaemuRun(t, "--guests", "2", "--rxe", "1", "--mtu", "9000", "--timeout", "15m", "--pcap", pcap, "--", script)
	for k := range 2 {
		mustContain(t, out, k, `MTU 9000`, `PORT\s+active_mtu:\s+4096 \(5\)`,
			regexp.QuoteMeta("RESULT 0 ibv_rc_pingpong"), regexp.QuoteMeta("RESULT 0 ibv_ud_pingpong"), regexp.QuoteMeta("RESULT 0 ib_write_bw"))
	}
	if code != 0 {
		t.Errorf("hcaemu run exited %d", code)
	}
	// Frames of a 4096-byte payload: Ethernet 14, IPv4 20, UDP 8, BTH 12,
	// the payload and the ICRC.
	lua, err := filepath.Abs("../emu/roce/testdata/roce_icrc.lua")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("tshark", "-n", "-X", "lua_script:"+lua, "-r", pcap, "-Y", "udp.dstport == 4791",
		"-T", "fields", "-E", "separator=/t", "-e", "ip.src", "-e", "frame.len", "-e", "roce_icrc.ok")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("tshark: %v\n%s", err, stderr.String())
	}
	full := map[string]int{}
	bad := 0
	for l := range strings.SplitSeq(strings.TrimSpace(stdout.String()), "\n") {
		f := strings.Split(l, "\t")
		if len(f) < 3 {
			continue
		}
		if f[2] != "1" {
			bad++
		}
		if f[1] == "4154" {
			full[f[0]]++
		}
	}
	if full["10.0.0.1"] == 0 || full["10.0.0.2"] == 0 || bad > 0 {
		t.Errorf("4096-byte packets by sender %v, %d bad ICRCs", full, bad)
	}
}
