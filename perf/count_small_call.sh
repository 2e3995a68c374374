#!/usr/bin/env bash
# Instructions per blocking 1-rank all-reduce of 8 B (the small-call path without communication), counted by
# callgrind inside strataAllReduce over ITERS calls: repeatable to the instruction, unlike a timing here.
# usage: perf/count_small_call.sh [BUILD_DIR] [ITERS]
set -euo pipefail
build=${1:-build}
iters=${2:-10000}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
valgrind --tool=callgrind --toggle-collect=strataAllReduce --callgrind-out-file="$out" \
  "$build/bin/strata_small_call_loop" "$iters" >/dev/null 2>&1
total=$(awk '/^summary:/ {print $2}' "$out")
echo "instructions per 1-rank all-reduce of 8 B: $((total / iters)) ($total in $iters calls, callgrind)"
