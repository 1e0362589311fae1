#!/bin/bash
# Real RDMA software between two guests over hcaemu (TestE2ERealSoftware),
# in the Debian image with libfabric-bin, ucx-utils and nvme-cli, and the
# nvmet_rdma and nvme_rdma modules (--ulp). Guest 0 serves, guest 1 is the
# client; they take turns through files in the share (/x): guest 0 writes
# /x/STEP.ready once its server listens (seen in /proc/net/tcp, or as the
# kernel's rdma_cm listener), guest 1 writes /x/STEP.done when its client is done.
# Every wait is bounded. Each step prints "STEP <name> <exit status>".
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
# listening PORT: a TCP socket listens on PORT (decimal).
listening() {
	grep -qi "^ *[0-9]*: [0-9A-F]*:$(printf '%04X' "$1") 00000000:0000 0A" /proc/net/tcp
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
# serve NAME PORT COMMAND...: runs a server, tells guest 1 once it listens,
# waits for it (at most 2 minutes).
serve() {
	local name=$1 port=$2
	shift 2
	timeout 120 "$@" > "/tmp/$name.out" 2>&1 &
	local pid=$!
	while_running $pid listening "$port"
	: > "/x/$name.ready"
	wait $pid
	local st=$?
	cat "/tmp/$name.out"
	step "$name" $st
}

# ucx NAME ARGS...: ucx_perftest's client (guest 1); its server (guest 0)
# is "ucxserve NAME". Debian's ucx_perftest does not exit after its test,
# on any transport (docs/software.md): the client's result line ("Final:")
# ends the step, then both are stopped.
ucx() {
	local name=$1
	shift
	waitfor "/x/$name.ready" || return
	ucx_perftest -P 0 "$HCAEMU_SERVER_IP" "$@" > "/tmp/$name.out" 2>&1 &
	local pid=$!
	while_running $pid grep -q '^Final:' "/tmp/$name.out"
	grep -v 'UCX  DIAG' "/tmp/$name.out"
	grep -q '^Final:' "/tmp/$name.out"
	step "$name" $?
	kill -9 $pid 2>/dev/null
	: > "/x/$name.done"
}
ucxserve() {
	local name=$1
	ucx_perftest -P 0 > "/tmp/$name.out" 2>&1 &
	local pid=$!
	while_running $pid listening 13337
	: > "/x/$name.ready"
	waitfor "/x/$name.done"
	kill -9 $pid 2>/dev/null
	wait $pid 2>/dev/null
	grep -v 'UCX  DIAG' "/tmp/$name.out" | grep -v '^\['
}

# libfabric's verbs provider finds RoCE devices by their netdev's name
# (default prefix "ib"); rxm sizes its CQs by the universe size (default
# 256 peers), past the device's max_cqe: the driver refuses the CQ.
export FI_VERBS_IFACE=eth0 FI_UNIVERSE_SIZE=16
# UCX on the RoCE port, RC with UD for wire-up; its UD check of the
# destination GID misreads IPv4 datagrams on non-mlx5 devices.
export UCX_NET_DEVICES=vmw_pvrdma0:1 UCX_TLS=rc_verbs,ud_verbs,self UCX_UD_VERBS_ETH_DGID_CHECK=n
myip=$(ip -4 -o addr show eth0 | sed 's/.*inet \([0-9.]*\).*/\1/')

if [ "$HCAEMU_GUEST" = 0 ]; then
	# NVMe-oF target: a 64 MiB file-backed namespace on port 4420.
	nvme_target "$myip"
	rdma resource show cm_id | grep -q 'LISTEN.*nvmet_rdma.*:4420'
	step nvmet-listen $?
	: > /x/nvme.ready
	waitfor /x/nvme.done
	dmesg | grep -i nvmet

	serve fi-msg 47592 fi_pingpong -p verbs -e msg -I 200 -S 4096 -s "$myip"
	waitfor /x/fi-msg.done
	serve fi-rdm 47592 fi_pingpong -p 'verbs;ofi_rxm' -e rdm -I 200 -S 4096 -s "$myip"
	waitfor /x/fi-rdm.done
	ucxserve ucx-tag-lat
	ucxserve ucx-put-bw
else
	waitfor /x/nvme.ready
	nvme_host "$HCAEMU_SERVER_IP"
	: > /x/nvme.done

	waitfor /x/fi-msg.ready
	fi_pingpong -p verbs -e msg -I 200 -S 4096 "$HCAEMU_SERVER_IP"
	step fi-msg $?
	: > /x/fi-msg.done
	waitfor /x/fi-rdm.ready
	fi_pingpong -p 'verbs;ofi_rxm' -e rdm -I 200 -S 4096 "$HCAEMU_SERVER_IP"
	step fi-rdm $?
	: > /x/fi-rdm.done
	ucx ucx-tag-lat -t tag_lat -n 1000 -s 1024
	ucx ucx-put-bw -t ucp_put_bw -n 500 -s 65536
fi
echo "SOFTWARE-END"
