#!/bin/sh
# faults-bw.sh: ib_write_bw throughput between two guests while the fabric
# loses a given share of all RC frames (data and ACKs alike), one
# `hcaemu run --faults` per loss rate.
#
#   scripts/faults-bw.sh [LOSS%...]      (default: 0 1 5 10)
#
# Environment:
#   HCAEMU      the hcaemu binary (default /tmp/hcaemu; built from this tree
#               with `go build` if it does not exist)
#   BW_ARGS     ib_write_bw arguments (default: -s 65536 -D 10)
#   FAULTS_SEED the plan's seed (default 1)
#
# Prints one line per rate: loss, average Gb/s, frames lost (the rule's
# counter). Under TCG (no KVM) absolute numbers are low: compare the rows.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${HCAEMU:-/tmp/hcaemu}
if [ ! -x "$bin" ]; then
	echo "faults-bw.sh: building $bin" >&2
	(cd "$root" && go build -o "$bin" ./cmd/hcaemu)
fi
bwargs=${BW_ARGS:--s 65536 -D 10}
seed=${FAULTS_SEED:-1}
rates=${*:-0 1 5 10}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

script='if [ -z "$HCAEMU_SERVER_IP" ]; then
  ib_write_bw -x 1 -F --report_gbits '"$bwargs"'
else
  i=0
  until out=$(ib_write_bw -x 1 -F --report_gbits '"$bwargs"' $HCAEMU_SERVER_IP 2>&1); do
    i=$((i+1)); [ $i -ge 60 ] && break; sleep 0.5
  done
  echo "$out"
fi'

printf '%-6s %-12s %s\n' "loss%" "Gb/s" "frames lost"
for rate in $rates; do
	p=$(awk "BEGIN { printf \"%.4f\", $rate / 100 }")
	cat >"$tmp/plan.json" <<PLAN
{"seed": $seed, "rules": [{"name": "loss", "match": {"transport": "rc"}, "action": {"kind": "drop"}, "schedule": {"probability": $p}}]}
PLAN
	"$bin" run --guests 2 --timeout 5m --faults "$tmp/plan.json" -- "$script" >"$tmp/out" 2>&1 || true
	# The client's result line: #bytes #iterations BW-peak BW-average MsgRate.
	bw=$(awk '/^\[g1\] +[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+/ { v = $5 } END { print v }' "$tmp/out")
	lost=$(sed -n 's/.*rule loss: fired \([0-9]*\) of.*/\1/p' "$tmp/out")
	printf '%-6s %-12s %s\n' "$rate" "${bw:-failed}" "${lost:-?}"
	if [ -z "$bw" ]; then
		sed 's/^/    /' "$tmp/out" | tail -20 >&2
	fi
done
