package tests

import (
	"encoding/json"
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
// meanwhile (the SMA's PortInfo follows) and PORT_ACTIVE after; then it
// unloads mlx5_ib and mlx5_core and loads them again: the port comes back
// ACTIVE; and last, firmware fatal through a device_fatal rule: mlx5_core's
// health recovery resets the firmware and probes again, and an RC
// pingpong runs on the recovered HCA. (devlink health, which this
// initramfs lacks, follows two such errors in TestE2EMLX5Software.)
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
` + mlx5Stage4Script + mlx5LossScript + `
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
  # Unload and reload the drivers in the running guest: mlx5_ib's
  # teardown destroys ib_mad's QP0/QP1 and the UMR QP, mlx5_core's
  # returns the pages and disables the function; the reload probes again.
  timeout -t 60s rmmod mlx5_ib; echo "RMMOD mlx5_ib $?"
  timeout -t 60s rmmod mlx5_core; echo "RMMOD mlx5_core $?"
  insmod /modules/mlx5_core.ko && insmod /modules/mlx5_ib.ko; echo "INSMOD $?"
  bounded 'ibv_devinfo -d mlx5_0 2>/dev/null | grep -q PORT_ACTIVE'
  echo "RELOADED: $(ibv_devinfo -d mlx5_0 | grep state:)"
fi
echo "DMESG BEGIN"
dmesg | grep -i mlx5
dmesg | grep -i ipoib
echo "DMESG END"
if [ -n "$HCAEMU_SERVER_IP" ]; then
  # Firmware fatal (after the kernel log is checked: mlx5_core reports it
  # as errors): the health poll sees the syndrome, asks for the firmware
  # reset and probes the function again.
  hcaemu-faults add '{"name": "fatal", "match": {"device": "hca1", "commands": ["CREATE_CQ"]}, "action": {"kind": "device_fatal"}, "schedule": {"times": 1}}'
  ibv_rc_pingpong -d mlx5_0 -p 18641 127.0.0.1 >/dev/null 2>&1
  bounded 'dmesg | grep -q "recovery (succeeded|failed)"'
  echo "RECOVERY: $(dmesg | grep 'recovery (succeeded|failed)')"
  bounded 'ibv_devinfo -d mlx5_0 2>/dev/null | grep -q PORT_ACTIVE'
  echo "RECOVERED: $(ibv_devinfo -d mlx5_0 | grep state:)"
  lo 18642 ibv_rc_pingpong -d mlx5_0 -n 20
fi
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
		`(?s)ASYNC BEGIN.*IBV_EVENT_PORT_ERR.*IBV_EVENT_PORT_ACTIVE.*ASYNC END`,
		`RMMOD mlx5_ib 0`, `RMMOD mlx5_core 0`, `INSMOD 0`, `RELOADED: \s+state:\s+PORT_ACTIVE \(4\)`)
	for _, rule := range []string{"ibflap", "fatal"} {
		if m := regexp.MustCompile(`hcaemu: faults: rule ` + rule + `: fired ([0-9]+) `).FindStringSubmatch(out); m == nil || m[1] != "1" {
			t.Errorf("rule %s: %v, want fired 1", rule, m)
		}
	}
	mustContain(t, out, 1, `RECOVERY: .*health recovery succeeded`, `RECOVERED: \s+state:\s+PORT_ACTIVE \(4\)`,
		regexp.QuoteMeta("LOOPBACK 0 ibv_rc_pingpong -d mlx5_0 -n 20"))
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
	checkMLX5Loss(t, out)
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
// multicast (mckey: a group made on demand by the SA, a receiver in guest
// 0 and a sender in guest 1, which sends bursts until the receiver has
// had its messages and listens for a barrier pingpong: mckey's progress
// lines are buffered, so the receiver's join cannot be waited for).
// Perftest (mlx5PerftestScript) runs between UD and rdma_cm. Ports
// 18650-18669.
var mlx5Stage4Script = `
try 18650 ibv_ud_pingpong -d mlx5_0 -n 50 -s 1024
if [ -n "$HCAEMU_SERVER_IP" ]; then
  lo 18651 ibv_ud_pingpong -d mlx5_0 -n 20 -s 512
fi
echo "IB0: $(cat /sys/class/net/ib0/operstate)"
` + mlx5PerftestScript + `
if [ -z "$HCAEMU_SERVER_IP" ]; then
  timeout -t 120s rping -s -v -C 5 -a 10.0.1.1 -p 18652; echo "RESULT $? rping-server"
  timeout -t 120s ucmatose -b 10.0.1.1 -p 18653; echo "RESULT $? ucmatose-server"
  timeout -t 120s rdma_server -p 18669; echo "RESULT $? rdma_server"
  timeout -t 120s mckey -m 239.255.1.1 -b 10.0.1.1 -C 5 > /tmp/mckey.out 2>&1; st=$?
  cat /tmp/mckey.out; echo "RESULT $st mckey-recv"
  timeout -t 120s ibv_rc_pingpong -d mlx5_0 -n 1 -p 18654; echo "RESULT $? barrier"
else
  ping -c 3 -w 5000 $HCAEMU_SERVER_IPOIB; echo "RESULT $? ping"
  retry rping -c -v -C 5 -a $HCAEMU_SERVER_IPOIB -p 18652; echo "RESULT $st rping"
  retry ucmatose -s $HCAEMU_SERVER_IPOIB -p 18653; echo "RESULT $st ucmatose"
  retry rdma_client -s $HCAEMU_SERVER_IPOIB -p 18669; echo "RESULT $st rdma_client"
  # Send bursts until guest 0's receiver has had its 5 messages (it then
  # listens for the barrier pingpong): its join may come after ours.
  i=0
  while true; do
    mckey -m 239.255.1.1 -s -b 10.0.1.2 -C 5 > /tmp/mckey.out 2>&1; st=$?
    if ibv_rc_pingpong -d mlx5_0 -n 1 -p 18654 $HCAEMU_SERVER_IP > /tmp/barrier.out 2>&1; then break; fi
    i=$((i+1)); if [ $i -ge 120 ]; then echo "TIMEOUT waiting for the mckey receiver"; break; fi
    sleep 0.5
  done
  cat /tmp/mckey.out; echo "RESULT $st mckey-send"
fi
`

// checkMLX5Stage4 checks what mlx5Stage4Script printed.
func checkMLX5Stage4(t *testing.T, out string) {
	t.Helper()
	for k := range 2 {
		mustContain(t, out, k,
			regexp.QuoteMeta("RESULT 0 ibv_ud_pingpong -d mlx5_0 -n 50 -s 1024"), `102400 bytes in [0-9.]+ seconds`,
			`IB0: up`)
	}
	mustContain(t, out, 0, `RESULT 0 rping-server`, `RESULT 0 ucmatose-server`,
		// rdma_cm's MGID of 239.255.1.1 in its UDP port space (cma_set_mgid:
		// the RDMA CM signature 0x4001 where IPoIB has 0x401b).
		`mckey: joined dgid: ff12:4001:ffff::fff:101 mlid 0xc[0-9a-f]{3}`,
		`(?s)receiving data transfers.*data transfers complete.*return status 0.*RESULT 0 mckey-recv`, `RESULT 0 barrier`)
	for _, l := range guestLines(out, 0) {
		if strings.HasPrefix(l, "SERVER RETRY") {
			t.Logf("guest 0: %s (a perftest -R server that failed or timed out, run again)", l)
		}
	}
	for k := range 2 {
		for _, p := range mlx5Perftests {
			mustContain(t, out, k, regexp.QuoteMeta("RESULT 0 "+p))
		}
	}
	mustContain(t, out, 0, `RESULT 0 rdma_server`)
	mustContain(t, out, 1, `RESULT 0 rdma_client`,
		regexp.QuoteMeta("LOOPBACK 0 ibv_ud_pingpong -d mlx5_0 -n 20 -s 512"),
		`RESULT 0 ping`,
		`ping data: rdma-ping-4`, `RESULT 0 rping`,
		`(?s)cmatose: connecting.*data transfers complete.*RESULT 0 ucmatose`,
		`(?s)mckey: joined dgid.*initiating data transfers.*RESULT 0 mckey-send`)
}

// mlx5PerftestScript runs perftest between the two HCAs: by LID with the
// connection data over TCP, then with rdma_cm (-R) to guest 0's IPoIB
// address (the client retries while the server is not listening: rdma_cm
// has no "Couldn't connect" to tell it from a failure). 200 messages of
// perftest's 64 KiB in the bandwidth tests keep the capture small.
var mlx5PerftestScript = tryIB + `
try 18655 ib_send_bw -d mlx5_0 -F -n 200
try 18656 ib_write_bw -d mlx5_0 -F -n 200
try 18657 ib_read_bw -d mlx5_0 -F -n 200
try 18658 ib_atomic_bw -d mlx5_0 -F -n 200
try 18659 ib_send_lat -d mlx5_0 -F -n 200
try 18660 ib_write_lat -d mlx5_0 -F -n 200
try 18661 ib_read_lat -d mlx5_0 -F -n 200
tryib 18662 ib_send_bw -d mlx5_0 -F -R -s 4096 -n 100
tryib 18663 ib_write_bw -d mlx5_0 -F -R -s 4096 -n 100
tryib 18664 ib_read_bw -d mlx5_0 -F -R -s 4096 -n 100
tryib 18665 ib_atomic_bw -d mlx5_0 -F -R -n 100
tryib 18666 ib_send_lat -d mlx5_0 -F -R -n 100
tryib 18667 ib_write_lat -d mlx5_0 -F -R -n 100
tryib 18668 ib_read_lat -d mlx5_0 -F -R -n 100
`

// mlx5Perftests are the commands of mlx5PerftestScript, as RESULT lines
// name them.
var mlx5Perftests = []string{
	"ib_send_bw -d mlx5_0 -F -n 200", "ib_write_bw -d mlx5_0 -F -n 200", "ib_read_bw -d mlx5_0 -F -n 200",
	"ib_atomic_bw -d mlx5_0 -F -n 200", "ib_send_lat -d mlx5_0 -F -n 200", "ib_write_lat -d mlx5_0 -F -n 200",
	"ib_read_lat -d mlx5_0 -F -n 200",
	"ib_send_bw -d mlx5_0 -F -R -s 4096 -n 100", "ib_write_bw -d mlx5_0 -F -R -s 4096 -n 100",
	"ib_read_bw -d mlx5_0 -F -R -s 4096 -n 100", "ib_atomic_bw -d mlx5_0 -F -R -n 100",
	"ib_send_lat -d mlx5_0 -F -R -n 100", "ib_write_lat -d mlx5_0 -F -R -n 100", "ib_read_lat -d mlx5_0 -F -R -n 100",
}

// tryIB defines retry CMD...: runs CMD until it succeeds, at most 240
// times 0.5 s apart, then prints its output (its status in $st); and
// tryib PORT CMD...: try's rdma_cm form. Guest 0 runs CMD -p PORT under a
// time limit, at most three times while it fails (SERVER RETRY: once, a
// perftest -R server never completed the connection of a client that had
// been retrying against it before it listened; the test logs each retry);
// the others retry CMD -p PORT with guest 0's IPoIB address. Each prints
// its output, then RESULT <status> <cmd>.
const tryIB = `retry() {
  i=0
  while true; do
    out=$("$@" 2>&1); st=$?
    if [ $st -ne 0 ] && [ $i -lt 240 ]; then i=$((i+1)); sleep 0.5; continue; fi
    break
  done
  echo "$out"
}
tryib() {
  port=$1; shift
  if [ -z "$HCAEMU_SERVER_IP" ]; then
    n=0
    while true; do
      timeout -t 60s "$@" -p $port 2>&1
      st=$?
      if [ $st -ne 0 ] && [ $n -lt 2 ]; then n=$((n+1)); echo "SERVER RETRY $*"; continue; fi
      break
    done
  else
    retry "$@" -p $port $HCAEMU_SERVER_IPOIB
  fi
  echo "RESULT $st $*"
}
`

// mlx5LossScript: guest 1 adds, through live fault control, rules that
// lose 5 % of the RC data packets (SEND, WRITE, READ response) and
// duplicate 1 % on the whole subnet, then ibv_rc_pingpong -c (the data
// checked) runs between the HCAs, 500 messages of 16 KiB (four packets
// each at the 4096-byte MTU); guest 1 prints the rules' counters and
// removes them. Port 18670.
const mlx5LossScript = `
if [ -n "$HCAEMU_SERVER_IP" ]; then
  hcaemu-faults add '{"name": "loss5", "match": {"transport": "rc", "classes": ["send", "write", "read_response"]}, "action": {"kind": "drop"}, "schedule": {"probability": 0.05}}'
  hcaemu-faults add '{"name": "dup1", "match": {"transport": "rc", "classes": ["send", "write", "read_response"]}, "action": {"kind": "duplicate"}, "schedule": {"probability": 0.01}}'
fi
try 18670 ibv_rc_pingpong -d mlx5_0 -c -n 500 -s 16384
if [ -n "$HCAEMU_SERVER_IP" ]; then
  echo "STATS BEGIN"
  hcaemu-faults stats
  echo "STATS END"
  hcaemu-faults rm loss5
  hcaemu-faults rm dup1
fi
`

// checkMLX5Loss checks what mlx5LossScript printed: the pingpong's data
// checks passed on both sides and both rules fired.
func checkMLX5Loss(t *testing.T, out string) {
	t.Helper()
	for k := range 2 {
		mustContain(t, out, k, regexp.QuoteMeta("RESULT 0 ibv_rc_pingpong -d mlx5_0 -c -n 500 -s 16384"), `16384000 bytes in [0-9.]+ seconds`)
	}
	g := strings.Join(guestLines(out, 1), "\n")
	i, j := strings.Index(g, "STATS BEGIN"), strings.Index(g, "STATS END")
	if i < 0 || j < i {
		t.Fatal("guest 1 printed no fault counters")
	}
	var st struct {
		Rules []struct {
			Name  string `json:"name"`
			Fired uint64 `json:"fired"`
		} `json:"rules"`
	}
	if err := json.Unmarshal([]byte(g[i+len("STATS BEGIN"):j]), &st); err != nil {
		t.Fatalf("fault counters: %v", err)
	}
	fired := map[string]uint64{}
	for _, r := range st.Rules {
		fired[r.Name] = r.Fired
	}
	if fired["loss5"] == 0 || fired["dup1"] == 0 {
		t.Errorf("loss5 fired %d times, dup1 %d: want both", fired["loss5"], fired["dup1"])
	}
}
