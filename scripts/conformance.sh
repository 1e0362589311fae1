#!/usr/bin/env bash
# Runs rdma-core's own test suite (pyverbs, run_tests.py from Debian's
# python3-pyverbs) in one guest on the Debian image, against the emulated
# HCA (vmw_pvrdma0) and soft-RoCE (rxe0 over eth0) in the same guest, and
# writes the side-by-side table of docs/conformance.md to the file given
# (default: conformance-table.md). Not part of scripts/test: it runs the
# suite twice (the e2e test TestE2EConformancePyverbs runs it once, on
# vmw_pvrdma0 only).
#
#   scripts/conformance.sh [TABLE.md]
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-conformance-table.md}")
HCAEMU_E2E=1 HCAEMU_CONFORMANCE_RXE=1 HCAEMU_CONFORMANCE_TABLE="$out" \
	go test -count=1 -timeout 90m -v -run '^TestE2EConformancePyverbs$' ./tests
echo "table written to $out" >&2
