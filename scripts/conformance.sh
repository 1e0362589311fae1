#!/usr/bin/env bash
# Runs rdma-core's own test suite (pyverbs, run_tests.py from Debian's
# python3-pyverbs) in one guest on the Debian image with both emulated HCAs
# (hcaemu run --device pvrdma,mlx5): on vmw_pvrdma0, on soft-RoCE (rxe0
# over eth0) and on mlx5_0, and writes the three-device table of
# docs/conformance.md to the file given (default: conformance-table.md).
# It is the CI gate TestE2EConformancePyverbs with the table written out.
#
#   scripts/conformance.sh [TABLE.md]
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-conformance-table.md}")
HCAEMU_E2E=1 HCAEMU_CONFORMANCE_TABLE="$out" \
	go test -count=1 -timeout 90m -v -run '^TestE2EConformancePyverbs$' ./tests
echo "table written to $out" >&2
