#!/bin/bash
# Real RDMA software between two guests on the emulated ConnectX-4
# (--device mlx5, TestE2EMLX5Software), in the Debian image with ucx-utils,
# gdb, libfabric-bin and qperf. Guest 0 serves, guest 1 is the client;
# they take turns through files in the share (/x): guest 0 writes
# /x/STEP.ready once its server listens (seen in /proc/net/tcp or tcp6;
# the next server starts while the previous one serves). Guest 1 waits
# for that, runs its client, then writes /x/g1.STEP and waits for
# /x/STEP.ok: the test reads the HCAs' counters between two steps (what
# each step moved through them). Every wait is bounded. Each side prints
# "STEP <name> <exit status>" per step, and "T <name> <event> <seconds>"
# lines (start, listen, end; client, done) the test logs as step times.
#
# First, NVMe-oF/RDMA (nvmeof.sh): the target in guest 0 on its IPoIB
# address, the host in guest 1 (16 MiB written and read back through
# nvme-rdma's fast registrations).
#
# Last, guest 1 alone: devlink health on its mlx5_core (the fw and
# fw_fatal reporters), a firmware fatal error (device_fatal through
# hcaemu-faults) recovered by "devlink health recover", then a second one
# recovered by the reporter itself (auto_recover), and an RC pingpong on
# the recovered HCA.
set -u
step() { echo "STEP $1 $2"; }
. /x/nvmeof.sh
# waitfor FILE: at most 5 minutes.
waitfor() {
	local i=0
	while [ ! -e "$1" ]; do
		i=$((i + 1))
		if [ $i -ge 3000 ]; then
			echo "TIMEOUT waiting for $1"
			return 1
		fi
		sleep 0.1
	done
}
# bounded CONDITION: polls the shell command CONDITION, at most 2 minutes.
bounded() {
	local i=0
	until eval "$1"; do
		i=$((i + 1))
		if [ $i -ge 1200 ]; then
			echo "TIMEOUT waiting for: $1"
			return 1
		fi
		sleep 0.1
	done
}
# listening PORT: a TCP socket listens on PORT (decimal), IPv4 or IPv6
# (qperf's).
listening() {
	grep -qi "^ *[0-9]*: [0-9A-F]*:$(printf '%04X' "$1") 0*:0000 0A" /proc/net/tcp /proc/net/tcp6
}
# while_running PID COMMAND...: waits until COMMAND succeeds, PID ends, or
# 2 minutes pass.
while_running() {
	local pid=$1 i=0
	shift
	until "$@"; do
		i=$((i + 1))
		if [ $i -ge 1200 ] || ! kill -0 "$pid" 2>/dev/null; then
			return 1
		fi
		sleep 0.1
	done
}
# start NAME PORT COMMAND...: guest 0 starts a server (at most 2
# minutes) and tells guest 1 once it listens on TCP PORT; finish NAME
# waits for its end. A server can start while the previous one serves.
declare -A pids
start() {
	local name=$1 port=$2
	shift 2
	echo "T $name start $(date +%s.%N)"
	timeout -s KILL 120 "$@" > "/tmp/$name.out" 2>&1 &
	pids[$name]=$!
	while_running ${pids[$name]} listening "$port"
	echo "T $name listen $(date +%s.%N)"
	: > "/x/$name.ready"
}
finish() {
	local name=$1
	wait ${pids[$name]}
	local st=$?
	echo "T $name end $(date +%s.%N)"
	filter "/tmp/$name.out"
	step "$name" $st
}
# client NAME COMMAND...: guest 1 runs a client once guest 0's server
# listens (at most 2 minutes), then lets the test read the counters.
client() {
	local name=$1
	shift
	waitfor "/x/$name.ready" || return
	echo "T $name client $(date +%s.%N)"
	timeout -s KILL 120 "$@" > "/tmp/$name.out" 2>&1
	local st=$?
	echo "T $name done $(date +%s.%N)"
	filter "/tmp/$name.out"
	step "$name" $st
	: > "/x/g1.$name"
	waitfor "/x/$name.ok"
}
# filter FILE: a tool's output without UCX's per-thread progress lines.
filter() { grep -v -e '^\[thread' -e 'UCX  DIAG' "$1"; }

# UCX on mlx5_0's port only (UCX_TLS never has self, shared memory or
# TCP): every message goes through the HCA. libfabric's verbs provider
# finds the IB device by its netdev (ib0); rdma_cm on IPoIB addresses.
export UCX_NET_DEVICES=mlx5_0:1 FI_VERBS_IFACE=ib0
myib=$(ip -4 -o addr show ib0 | sed 's/.*inet \([0-9.]*\).*/\1/')
srv=${HCAEMU_SERVER_IPOIB:-}

# The steps, in guest 0 servers (each started while the previous one
# serves: UCX's start-up under TCG takes seconds), in guest 1 their
# clients, one after the other. ucx_perftest's out-of-band exchange is TCP
# over eth0; fi_pingpong's and qperf's over ib0 (rdma_cm resolves the
# same address).
ucxserve() { start "$1" "$3" env UCX_TLS="$2" ucx_perftest -P 0 -p "$3"; }
ucx() {
	local name=$1 tls=$2 port=$3
	shift 3
	client "$name" env UCX_TLS="$tls" ucx_perftest -P 0 -p "$port" "$HCAEMU_SERVER_IP" "$@"
}
fiserve() { start "$1" 47592 fi_pingpong -p "$2" -e "$3" -I 200 -S 4096 -s "$myib"; }
fipp() { client "$1" fi_pingpong -p "$2" -e "$3" -I 200 -S 4096 "$srv"; }
# qperf: its listener (TCP 19765) on ib0's address, the tests' QPs
# connected by rdma_cm (-cm1); -vvs prints the bytes each side moved.
if [ "$HCAEMU_GUEST" = 0 ]; then
	nvme_target "$myib"
	step nvme $?
	: > /x/nvme.ready
	ucxserve ucx-lat-rc rc_mlx5,ud_mlx5 13337
	ucxserve ucx-lat-ud ud_mlx5 13338
	finish ucx-lat-rc
	ucxserve ucx-put-bw rc_mlx5,ud_mlx5 13340
	finish ucx-lat-ud
	ucxserve ucx-tag-bw rc_mlx5,ud_mlx5 13341
	finish ucx-put-bw
	fiserve fi-msg verbs msg
	finish ucx-tag-bw
	finish fi-msg
	fiserve fi-rdm 'verbs;ofi_rxm' rdm
	start qperf 19765 qperf
	finish fi-rdm
	finish qperf
else
	: > /x/g1.begin
	waitfor /x/begin.ok
	client nvme bash -c '. /x/nvmeof.sh; step() { echo "STEP $1 $2"; }; nvme_host "$1"' nvme "$srv"
	ucx ucx-lat-rc rc_mlx5,ud_mlx5 13337 -t tag_lat -n 1000
	ucx ucx-lat-ud ud_mlx5 13338 -t tag_lat -n 1000
	ucx ucx-put-bw rc_mlx5,ud_mlx5 13340 -t ucp_put_bw -s 65536 -n 200
	ucx ucx-tag-bw rc_mlx5,ud_mlx5 13341 -t tag_bw -s 65536 -n 200
	fipp fi-msg verbs msg
	fipp fi-rdm 'verbs;ofi_rxm' rdm
	client qperf qperf -cm1 -vvs "$srv" rc_bw rc_lat ud_lat ud_bw quit
fi

if [ "$HCAEMU_GUEST" = 0 ]; then
	# Its HCA lives until the test has read the counters of the last step.
	waitfor /x/qperf.ok
	# While guest 1 checks devlink health: UCX over the verbs transports,
	# one process talking to itself through the HCA (loopback by LID).
	echo "T ucx-lat-verbs-lo start $(date +%s.%N)"
	UCX_TLS=rc_verbs,ud_verbs timeout -s KILL 120 ucx_perftest -P 0 -l -t tag_lat -n 1000 > /tmp/lo.out 2>&1
	st=$?
	echo "T ucx-lat-verbs-lo end $(date +%s.%N)"
	filter /tmp/lo.out
	step ucx-lat-verbs-lo $st
	echo "SOFTWARE-END"
	exit 0
fi

# devlink health of mlx5_core's function (pci/0000:00:04.1).
dl=$(devlink dev show | head -n 1)
echo "DEVLINK $dl"
echo "HEALTH BEGIN"
devlink health show "$dl"
echo "HEALTH END"
fatal() {
	hcaemu-faults add '{"name": "'"$1"'", "match": {"device": "hca1", "commands": ["CREATE_CQ"]}, "action": {"kind": "device_fatal"}, "schedule": {"times": 1}}'
	# No server: it makes its CQ (the fault), fails to connect and exits.
	ibv_rc_pingpong -d mlx5_0 -p 18700 127.0.0.1 > /dev/null 2>&1
}
fw_fatal() { devlink health show "$dl" reporter fw_fatal | grep -o 'state .*'; }
# First fatal error, recovered by hand: with auto_recover off the
# reporter keeps the error and the device its syndrome.
devlink health set "$dl" reporter fw_fatal auto_recover false
step devlink-set $?
fatal fatal1
bounded 'fw_fatal | grep -q "^state error error 1 recover 0"'
echo "FATAL1: $(fw_fatal)"
echo "DIAGNOSE1: $(devlink health diagnose "$dl" reporter fw)"
# The fatal reporter's dump is mlx5's crdump, read through the PCI
# vendor-specific capability the device does not have.
echo "DUMP1: $(devlink health dump show "$dl" reporter fw_fatal 2>&1)"
devlink health recover "$dl" reporter fw_fatal
step devlink-recover $?
echo "RECOVERED1: $(fw_fatal)"
bounded 'ibv_devinfo -d mlx5_0 2>/dev/null | grep -q PORT_ACTIVE'
echo "DIAGNOSE2: $(devlink health diagnose "$dl" reporter fw)"
# Second fatal error, recovered by the reporter (no grace period after
# the first recovery).
devlink health set "$dl" reporter fw_fatal auto_recover true grace_period 0
step devlink-auto $?
fatal fatal2
bounded 'fw_fatal | grep -q "^state healthy error 2 recover 2"'
echo "RECOVERED2: $(fw_fatal)"
bounded 'ibv_devinfo -d mlx5_0 2>/dev/null | grep -q PORT_ACTIVE'
echo "HEALTH BEGIN"
devlink health show "$dl"
echo "HEALTH END"
echo "RECOVERY: $(dmesg | grep -c 'health recovery succeeded')"
# The recovered HCA carries RC traffic (one guest, loopback by LID).
ibv_rc_pingpong -d mlx5_0 -p 18701 -n 20 > /tmp/lo.srv 2>&1 &
i=0
while true; do
	ibv_rc_pingpong -d mlx5_0 -p 18701 -n 20 127.0.0.1 > /tmp/lo.cli 2>&1
	st=$?
	if [ $st -ne 0 ] && grep -q "Couldn't connect" /tmp/lo.cli && [ $i -lt 240 ]; then
		i=$((i + 1))
		sleep 0.5
		continue
	fi
	break
done
wait
cat /tmp/lo.cli
step loopback $st
echo "SOFTWARE-END"
