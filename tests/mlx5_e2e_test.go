package tests

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestE2EMLX5Probe boots two guests with --device mlx5: stages 1 and 2 of
// ../shared/spec/mlx5.md §11 as the guests see them (issue 25). The
// unmodified mlx5_core probes the emulated ConnectX-4 through its command
// queue (ENABLE_HCA to the event queues, commands completed by EQE),
// mlx5_ib asks the port's SMA through MAD_IFC and makes mlx5_0 with
// ib_mad's QP0 and QP1 and the UMR QP, ib_ipoib makes ib0 and the init
// gives it its address: ibv_devinfo -v shows the ConnectX's identity, the
// port ACTIVE on the InfiniBand link layer with the LID the subnet's SM
// assigned and the SM's LID; rdma link says ACTIVE/LINK_UP. Then the
// stock ibv_rc_pingpong runs between the two HCAs by LID (4 KiB, then
// 64 KiB with completion events) and on one HCA to itself (loopback by
// LID), its data checks passing. No driver error, no command timeout.
// (Unloading mlx5_ib is not checked yet: ib_mad's QP1 receives need UD on
// the wire, stage 3/4.)
//
// The same boot runs with --pcap and a fault plan that drops every 200th
// RC packet to or from LID 2: RC recovers, the rule fired, and PATH's .ib
// file holds the subnet's packets as tshark decodes them
// (checkMLX5Capture). It runs with --strict fail: the drivers break no
// rule the device checks (a finding would stop the run). Then stage 3:
// UC, SRQ and XRC pingpongs (mlx5Stage3Script); stage 4: UD, IPoIB,
// rdma_cm and multicast (mlx5Stage4Script).
//
// Last, guest 1 flaps its port through live fault control (hcaemu-faults:
// a port_down rule on hca1's next CREATE_CQ, which an ibv_rc_pingpong
// with no server makes): ibv_asyncwatch sees IBV_EVENT_PORT_ERR then
// IBV_EVENT_PORT_ACTIVE (PORT_CHANGE EQEs), ibv_devinfo shows PORT_DOWN
// meanwhile (the SMA's PortInfo follows) and PORT_ACTIVE after.
func TestE2EMLX5Probe(t *testing.T) {
	needE2E(t)
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(plan, []byte(`{"seed":1,"rules":[{"name":"ibloss","match":{"peer":"lid:2","transport":"rc"},"action":{"kind":"drop"},"schedule":{"every":200}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	pcap := filepath.Join(dir, "probe.pcap")
	script := guestTry + guestWait + `
if [ -z "$HCAEMU_SERVER_IP" ]; then
  echo "RDMA_DEV=$HCAEMU_RDMA_DEV"
  ibv_devinfo -v
  rdma link
  ip addr show ib0
fi
try 18620 ibv_rc_pingpong -d mlx5_0 -n 100 -s 4096
try 18621 ibv_rc_pingpong -d mlx5_0 -e -n 100 -s 65536
if [ -n "$HCAEMU_SERVER_IP" ]; then
  # One HCA, server and client on the same port (loopback by LID).
  ibv_rc_pingpong -d mlx5_0 -p 18622 -n 50 -s 1024 > /tmp/lo.srv 2>&1 &
  i=0
  while true; do
    lo=$(ibv_rc_pingpong -d mlx5_0 -p 18622 -n 50 -s 1024 127.0.0.1 2>&1); st=$?
    case "$lo" in *"Couldn't connect"*) i=$((i+1)); if [ $i -lt 120 ]; then sleep 0.5; continue; fi ;; esac
    break
  done
  echo "$lo"
  echo "LOOPBACK $st"
  bounded 'grep -q iters /tmp/lo.srv'
  cat /tmp/lo.srv
fi
` + mlx5Stage3Script + `
` + mlx5Stage4Script + `
if [ -n "$HCAEMU_SERVER_IP" ]; then
  ibv_asyncwatch > /tmp/aw.out 2>&1 &
  bounded '[ -n "$(pidsof ibv_asyncwatch)" ]'
  aw=$(pidsof ibv_asyncwatch)
  bounded 'for f in /proc/$aw/fd/*; do readlink $f; done 2>/dev/null | grep -q infinibandevent'
  hcaemu-faults add '{"name": "ibflap", "match": {"device": "hca1", "commands": ["CREATE_CQ"]}, "action": {"kind": "port_down", "duration": "8s"}, "schedule": {"times": 1}}'
  # No server: it makes its CQ (the flap), fails to connect and exits.
  ibv_rc_pingpong -d mlx5_0 -p 18640 127.0.0.1 >/dev/null 2>&1
  echo "FLAPDOWN: $(ibv_devinfo -d mlx5_0 | grep state:)"
  bounded 'ibv_devinfo -d mlx5_0 | grep -q PORT_ACTIVE'
  echo "FLAPUP: $(ibv_devinfo -d mlx5_0 | grep state:)"
  bounded 'grep -q IBV_EVENT_PORT_ACTIVE /tmp/aw.out'
  kill $aw
  echo "ASYNC BEGIN"
  cat /tmp/aw.out
  echo "ASYNC END"
fi
echo "DMESG BEGIN"
dmesg | grep -i -e mlx5 -e ipoib
echo "DMESG END"
`
	out, code := hcaemuRun(t, "--device", "mlx5", "--guests", "2", "--timeout", "9m", "--pcap", pcap, "--faults", plan, "--strict", "fail",
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
	for k := range 2 {
		// Two HCAs by LID: SEND/RECV with data checks, then with
		// completion events and 64 KiB messages.
		mustContain(t, out, k,
			`remote address: LID 0x000[2-9], QPN 0x[0-9a-f]{6}`,
			`819200 bytes in [0-9.]+ seconds`, `100 iters in [0-9.]+ seconds`,
			regexp.QuoteMeta("RESULT 0 ibv_rc_pingpong -d mlx5_0 -n 100 -s 4096"),
			`13107200 bytes in [0-9.]+ seconds`,
			regexp.QuoteMeta("RESULT 0 ibv_rc_pingpong -d mlx5_0 -e -n 100 -s 65536"))
	}
	mustContain(t, out, 1, `LOOPBACK 0`, `(?s)LOOPBACK 0.*102400 bytes in [0-9.]+ seconds`,
		`FLAPDOWN: \s+state:\s+PORT_DOWN \(1\)`, `FLAPUP: \s+state:\s+PORT_ACTIVE \(4\)`,
		`(?s)ASYNC BEGIN.*IBV_EVENT_PORT_ERR.*IBV_EVENT_PORT_ACTIVE.*ASYNC END`)
	if m := regexp.MustCompile(`hcaemu: faults: rule ibflap: fired ([0-9]+) `).FindStringSubmatch(out); m == nil || m[1] != "1" {
		t.Errorf("rule ibflap: %v, want fired 1", m)
	}
	for k := range 2 {
		g := strings.Join(guestLines(out, k), "\n")
		i, j := strings.Index(g, "DMESG BEGIN"), strings.Index(g, "DMESG END")
		if i < 0 || j < i {
			t.Errorf("guest %d: no kernel log in the output", k)
			continue
		}
		for _, l := range strings.Split(g[i:j], "\n") {
			low := strings.ToLower(l)
			if (strings.Contains(low, "fail") || strings.Contains(low, "error") || strings.Contains(low, "timeout")) &&
				!strings.Contains(l, "Failed to get valid vendor specific ID") { // no VSC capability: spec §1.5
				t.Errorf("guest %d: driver error: %s", k, l)
			}
		}
	}
	checkMLX5Stage3(t, out)
	checkMLX5Stage4(t, out)
	checkMLX5Capture(t, out, dir, pcap)
}

// mlx5Stage3Script is stage 3 of the spec's §11 but UD (issue 41), in the
// same boot: the stock ibv_uc_pingpong (UC SEND/RECV), ibv_srq_pingpong
// (16 RC QPs receiving through one SRQ, an RMP) and ibv_xsrq_pingpong
// (XRC initiator and target QPs through XRC SRQs) between the two HCAs by
// LID, with and without completion events, then each on one HCA in
// loopback (ports 18630-18639).
const mlx5Stage3Script = `
lo() {
  port=$1; shift
  "$@" -p $port > /tmp/lo.$port 2>&1 &
  i=0
  while true; do
    out=$("$@" -p $port 127.0.0.1 2>&1); st=$?
    case "$out" in *"Couldn't connect"*|*"Unable to perform socket connection"*) i=$((i+1)); if [ $i -lt 120 ]; then sleep 0.5; continue; fi ;; esac
    break
  done
  echo "$out"
  wait
  cat /tmp/lo.$port
  echo "LOOPBACK $st $*"
}
try 18630 ibv_uc_pingpong -d mlx5_0 -n 100 -s 4096
try 18631 ibv_uc_pingpong -d mlx5_0 -e -n 50 -s 16384
try 18632 ibv_srq_pingpong -d mlx5_0 -n 50 -s 4096
try 18633 ibv_srq_pingpong -d mlx5_0 -e -n 20 -s 4096
try 18634 ibv_xsrq_pingpong -d mlx5_0 -n 50
try 18635 ibv_xsrq_pingpong -d mlx5_0 -e -n 20
if [ -n "$HCAEMU_SERVER_IP" ]; then
  lo 18636 ibv_uc_pingpong -d mlx5_0 -n 50 -s 1024
  lo 18637 ibv_srq_pingpong -d mlx5_0 -n 20 -s 1024
  lo 18638 ibv_xsrq_pingpong -d mlx5_0 -n 20
fi
`

// checkMLX5Stage3 checks what mlx5Stage3Script printed.
func checkMLX5Stage3(t *testing.T, out string) {
	t.Helper()
	for k := range 2 {
		mustContain(t, out, k,
			regexp.QuoteMeta("RESULT 0 ibv_uc_pingpong -d mlx5_0 -n 100 -s 4096"),
			regexp.QuoteMeta("RESULT 0 ibv_uc_pingpong -d mlx5_0 -e -n 50 -s 16384"),
			`409600 bytes in [0-9.]+ seconds`,
			regexp.QuoteMeta("RESULT 0 ibv_srq_pingpong -d mlx5_0 -n 50 -s 4096"),
			regexp.QuoteMeta("RESULT 0 ibv_srq_pingpong -d mlx5_0 -e -n 20 -s 4096"),
			`SRQN [0-9a-f]{6}`, `(?s)SRQN.*success.*RESULT 0 ibv_xsrq_pingpong -d mlx5_0 -n 50`,
			regexp.QuoteMeta("RESULT 0 ibv_xsrq_pingpong -d mlx5_0 -e -n 20"))
	}
	mustContain(t, out, 1,
		regexp.QuoteMeta("LOOPBACK 0 ibv_uc_pingpong -d mlx5_0 -n 50 -s 1024"),
		regexp.QuoteMeta("LOOPBACK 0 ibv_srq_pingpong -d mlx5_0 -n 20 -s 1024"),
		regexp.QuoteMeta("LOOPBACK 0 ibv_xsrq_pingpong -d mlx5_0 -n 20"))
}

// mlx5Stage4Script is stage 4 of the spec's §11 but perftest, in the same
// boot: UD (ibv_ud_pingpong between the HCAs by LID and on one HCA), the
// GSI QP and IPoIB (ib0 joined the broadcast group through the SA and is
// up; ping over it), rdma_cm over IPoIB addresses (rping, ucmatose), and
// multicast (mckey: a group made on demand by the SA, a sender in guest 1
// and a receiver in guest 0, which joins first: guest 1 sends only after
// a barrier pingpong). Ports 18650-18659.
const mlx5Stage4Script = `
try 18650 ibv_ud_pingpong -d mlx5_0 -n 50 -s 1024
if [ -n "$HCAEMU_SERVER_IP" ]; then
  lo 18651 ibv_ud_pingpong -d mlx5_0 -n 20 -s 512
fi
echo "IB0: $(ip link show ib0 | grep -o 'state [A-Z]*')"
if [ -z "$HCAEMU_SERVER_IP" ]; then
  timeout -t 120s rping -s -v -C 5 -a 10.0.1.1 -p 18652; echo "RESULT $? rping-server"
  timeout -t 120s ucmatose -b 10.0.1.1 -P 18653; echo "RESULT $? ucmatose-server"
  mckey -m 239.255.1.1 -b 10.0.1.1 -C 5 > /tmp/mckey.out 2>&1 &
  bounded 'grep -q "receiving data" /tmp/mckey.out'
  try 18654 ibv_rc_pingpong -d mlx5_0 -n 1
  bounded 'grep -q "test complete" /tmp/mckey.out'
  cat /tmp/mckey.out
else
  ping -c 3 -w 5000 $HCAEMU_SERVER_IPOIB; echo "RESULT $? ping"
  i=0
  while true; do
    out=$(rping -c -v -C 5 -a $HCAEMU_SERVER_IPOIB -p 18652 2>&1); st=$?
    if [ $st -ne 0 ] && [ $i -lt 120 ]; then i=$((i+1)); sleep 0.5; continue; fi
    break
  done
  echo "$out"; echo "RESULT $st rping"
  i=0
  while true; do
    out=$(ucmatose -s $HCAEMU_SERVER_IPOIB -P 18653 2>&1); st=$?
    if [ $st -ne 0 ] && [ $i -lt 120 ]; then i=$((i+1)); sleep 0.5; continue; fi
    break
  done
  echo "$out"; echo "RESULT $st ucmatose"
  try 18654 ibv_rc_pingpong -d mlx5_0 -n 1
  mckey -m 239.255.1.1 -s -b 10.0.1.2 -C 5; echo "RESULT $? mckey-send"
fi
`

// checkMLX5Stage4 checks what mlx5Stage4Script printed.
func checkMLX5Stage4(t *testing.T, out string) {
	t.Helper()
	for k := range 2 {
		mustContain(t, out, k,
			regexp.QuoteMeta("RESULT 0 ibv_ud_pingpong -d mlx5_0 -n 50 -s 1024"), `51200 bytes in [0-9.]+ seconds`,
			`IB0: state UP`)
	}
	mustContain(t, out, 0, `RESULT 0 rping-server`, `RESULT 0 ucmatose-server`,
		`mckey: joined dgid: ff12:401b:ffff::efff:101 mlid 0xc[0-9a-f]{3}`, `(?s)receiving data transfers.*data transfers complete.*return status 0`)
	mustContain(t, out, 1,
		regexp.QuoteMeta("LOOPBACK 0 ibv_ud_pingpong -d mlx5_0 -n 20 -s 512"),
		`RESULT 0 ping`,
		`ping data: rdma-ping-4`, `RESULT 0 rping`,
		`(?s)cmatose: connecting.*data transfers complete.*RESULT 0 ucmatose`,
		`(?s)mckey: joined dgid.*initiating data transfers.*RESULT 0 mckey-send`)
}
