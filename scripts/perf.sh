#!/bin/sh
# perf.sh: perftest between two guests over hcaemu's emulated PVRDMA
# (vmw_pvrdma0) and, for comparison, over Linux soft-RoCE (rxe0 on the
# guests' vmxnet3 eth0), in the same two guests (`hcaemu run --guests 2`,
# then with --rxe all).
#
#   scripts/perf.sh [-k] [-x] [-o LOG]
#
#   -k      keep going: print what was measured even if a test failed
#   -x      soft-RoCE only (with HCAEMU_NET=stream: over a QEMU stream
#           netdev between the two guests instead of hcaemu's segment)
#   -o LOG  where the raw output of the run goes (default: a temp file)
#
# Environment:
#   HCAEMU        the hcaemu binary (default /tmp/hcaemu; built from this
#                 tree with `go build` if it does not exist)
#   HCAEMU_ARGS   extra arguments for `hcaemu run` (e.g. --memory 2G)
#   PERF_SCALE    multiply every iteration count by this (default 1)
#
# Tests (RC, IPv4 RoCE v2 GID index 1, -F):
#   ib_write_bw  -s 4096 / 65536 / 1048576
#   ib_send_lat  -s 2
#   ib_write_lat -s 2
#   ib_read_lat  -s 2
# Guest 0 runs the servers; guest 1 the clients, which retry (bounded) until
# the server listens. Under TCG (no KVM) absolute numbers are low: compare
# the columns, not the machines.
set -eu

keep=0
log=""
runs="pv rxe"
while getopts kxo: opt; do
	case "$opt" in
	k) keep=1 ;;
	x) runs="rxe" ;;
	o) log="$OPTARG" ;;
	*) sed -n '2,25p' "$0" >&2; exit 2 ;;
	esac
done

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${HCAEMU:-/tmp/hcaemu}
if [ ! -x "$bin" ]; then
	echo "perf.sh: building $bin" >&2
	(cd "$root" && go build -o "$bin" ./cmd/hcaemu)
fi
if [ -z "$log" ]; then
	log=$(mktemp /tmp/hcaemu-perf.XXXXXX.log)
fi
scale=${PERF_SCALE:-1}

# The guest side. It runs under u-root's gosh (POSIX sh syntax, u-root
# tools). Each test prints "PERF <dev> <label>" first; guest 1's result line
# follows perftest's "#bytes" header.
guest_script='
S="$HCAEMU_SERVER_IP"
fail=0
pt() {
	label="$1"; shift
	echo "PERF $dev $label"
	if [ -z "$S" ]; then
		"$@" || { echo "PERF-FAIL $dev $label"; fail=1; }
		return 0
	fi
	n=0
	until "$@" "$S"; do
		n=$((n+1))
		if [ $n -ge 60 ]; then echo "PERF-FAIL $dev $label"; fail=1; return 0; fi
		sleep 0.5
	done
}
suite() {
	dev="$1"; bw4k="$2"; bw64k="$3"; bw1m="$4"; lat="$5"
	o="-d $dev -x 1 -F"
	pt write_bw_4KiB  ib_write_bw  $o -s 4096    -n $bw4k
	pt write_bw_64KiB ib_write_bw  $o -s 65536   -n $bw64k
	pt write_bw_1MiB  ib_write_bw  $o -s 1048576 -n $bw1m
	pt send_lat_2B    ib_send_lat  $o -s 2       -n $lat
	pt write_lat_2B   ib_write_lat $o -s 2       -n $lat
	pt read_lat_2B    ib_read_lat  $o -s 2       -n $lat
}
if [ "$HCAEMU_RDMA_DEV" = rxe0 ]; then
	suite rxe0 @RX4K@ @RX64K@ @RX1M@ @RXLAT@
else
	suite vmw_pvrdma0 @PV4K@ @PV64K@ @PV1M@ @PVLAT@
fi
exit $fail
'
# Iteration counts: soft-RoCE under TCG moves a few MB/s, so it gets fewer.
it() { echo $(( $1 * scale > 20 ? $1 * scale : 20 )); }
guest_script=$(printf '%s' "$guest_script" | sed \
	-e "s/@PV4K@/$(it 5000)/" -e "s/@PV64K@/$(it 2000)/" -e "s/@PV1M@/$(it 200)/" -e "s/@PVLAT@/$(it 1000)/" \
	-e "s/@RX4K@/$(it 1000)/" -e "s/@RX64K@/$(it 200)/" -e "s/@RX1M@/$(it 20)/" -e "s/@RXLAT@/$(it 200)/")

# Two runs of the same two guests: on hcaemu, then on soft-RoCE (--rxe all:
# rxe0 over eth0 and no emulated HCA, whose port would otherwise take the
# RoCEv2 frames for the guests' addresses off the segment).
echo "perf.sh: $bin run --guests 2 ($runs); raw output in $log" >&2
: >"$log"
status=0
for run in $runs; do
	rxe=""
	[ "$run" = rxe ] && rxe="--rxe all"
	st=0
	# shellcheck disable=SC2086
	"$bin" run --guests 2 --timeout 10m $rxe ${HCAEMU_ARGS:-} -- "$guest_script" >>"$log" 2>&1 || st=$?
	if [ "$st" -ne 0 ]; then
		status=$st
		echo "perf.sh: hcaemu run $rxe exited $st (see $log)" >&2
		grep 'PERF-FAIL' "$log" >&2 || tail -n 20 "$log" >&2
		[ "$keep" = 1 ] || exit "$status"
	fi
done

# Guest 1 (the client) prints the results. For each "PERF dev label"
# marker, take the first numeric line after perftest's "#bytes" header:
#   bw:  #bytes #iters BW_peak BW_average[MiB/s] MsgRate[Mpps]
#   lat: #bytes #iters t_min t_max t_typical t_avg t_stdev p99 p99.9 [usec]
awk '
/^\[g1\] PERF-FAIL / { fail[$3 " " $4] = 1; next }
/^\[g1\] PERF / { dev = $3; label = $4; hdr = 0; next }
/^\[g1\] +#bytes/ { hdr = 1; next }
/^\[g1\] +[0-9]/ && hdr && dev != "" {
	k = dev " " label
	if (label ~ /_bw_/) v[k] = sprintf("%.2f MiB/s (%.4f Mpps)", $5, $6)
	else v[k] = sprintf("typ %.1f min %.1f avg %.1f p99 %.1f us", $6, $4, $7, $9)
	hdr = 0
	if (!(label in seen)) { seen[label] = 1; order[++n] = label }
}
END {
	printf "%-16s  %-42s  %-42s  %s\n", "test", "hcaemu (vmw_pvrdma0)", "soft-RoCE (rxe0)", "ratio"
	for (i = 1; i <= n; i++) {
		l = order[i]; a = v["vmw_pvrdma0 " l]; b = v["rxe0 " l]
		if (a == "") a = (fail["vmw_pvrdma0 " l] ? "FAILED" : "-")
		if (b == "") b = (fail["rxe0 " l] ? "FAILED" : "-")
		split(a, x, " "); split(b, y, " ")
		r = "-"
		if (l ~ /_bw_/ && y[1] + 0 > 0) r = sprintf("%.1fx", x[1] / y[1])
		if (l ~ /_lat_/ && x[2] + 0 > 0) r = sprintf("%.1fx", y[2] / x[2])
		printf "%-16s  %-42s  %-42s  %s\n", l, a, b, r
	}
}' "$log"
exit "$status"
