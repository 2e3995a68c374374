#!/usr/bin/env bash
# libFuzzer targets (fuzz/*.cc) under ASan + UBSan, built with clang from the sources they exercise:
#   bash scripts/fuzz.sh smoke [BUILD_DIR]            every target over its committed corpus (fuzz/corpus/<name>,
#                                                     regressions included), then FUZZ_SMOKE_SECONDS (default 20)
#                                                     of new inputs each: what `make test` runs (ctest fuzz_smoke)
#   bash scripts/fuzz.sh run NAME SECONDS [BUILD_DIR] one target for longer; new inputs go to build-fuzz/corpus/NAME
#                                                     (copy the interesting ones into fuzz/corpus/NAME)
# A crash leaves crash-* in the current directory: add it to fuzz/corpus/NAME as a regression and fix the bug.
# Targets: unique_id (decodeUniqueId), config (Config::fromEnv, parseAlgoSpec), topology (STRATA_TOPO_FILE's
# JSON), root_wire (the bootstrap root's decoder of strangers' and ranks' messages, over loopback).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:?usage: fuzz.sh smoke [BUILD_DIR] | fuzz.sh run NAME SECONDS [BUILD_DIR]}
case "$mode" in
  smoke) build=${2:-build-fuzz} ;;
  run) name=${2:?target name}; seconds=${3:?seconds}; build=${4:-build-fuzz} ;;
  *) echo "fuzz.sh: unknown mode '$mode'" >&2; exit 2 ;;
esac
TARGETS="unique_id config topology root_wire"
CXX=${FUZZ_CXX:-clang++}
flags="-std=c++20 -O1 -g -fno-omit-frame-pointer -D_GNU_SOURCE -Iinclude -Isrc -fsanitize=address,undefined"
flags+=" -fno-sanitize-recover=undefined"
# The library sources the targets reach: util, bootstrap, topology, and the CUDA loader topology calls.
sources=$(ls src/util/*.cc src/bootstrap/*.cc src/topology/*.cc src/kernels/cuda_loader.cc)

mkdir -p "$build/obj"
objs=()
for src in $sources; do
  obj=$build/obj/$(echo "$src" | tr / _).o
  if [[ ! -f $obj || $src -nt $obj || -n $(find src include -name '*.h' -newer "$obj" -print -quit) ]]; then
    # shellcheck disable=SC2086
    $CXX $flags -fsanitize=fuzzer-no-link -c "$src" -o "$obj" &
    # two compilers at a time: this machine has two cores
    while (( $(jobs -rp | wc -l) >= $(nproc) )); do wait -n; done
  fi
  objs+=("$obj")
done
wait
for t in $TARGETS; do
  if [[ ! -x $build/fuzz_$t || fuzz/fuzz_$t.cc -nt $build/fuzz_$t || ${objs[0]} -nt $build/fuzz_$t ]]; then
    # shellcheck disable=SC2086
    $CXX $flags -fsanitize=fuzzer "fuzz/fuzz_$t.cc" "${objs[@]}" -ldl -lpthread -o "$build/fuzz_$t"
  fi
done

export ASAN_OPTIONS=halt_on_error=1:detect_leaks=0  # root services run on in threads until exit
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export STRATA_TIMEOUT_MS=3000
if [[ $mode == smoke ]]; then
  secs=${FUZZ_SMOKE_SECONDS:-20}
  for t in $TARGETS; do
    echo "=== fuzz_$t: corpus fuzz/corpus/$t, then ${secs}s of new inputs"
    mkdir -p "$build/corpus/$t"
    log=$build/fuzz_$t.log
    rc=0
    "$build/fuzz_$t" -max_total_time="$secs" -timeout=20 -max_len=8192 -print_final_stats=1 \
      -artifact_prefix="$build/" "$build/corpus/$t" "fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
    if [[ $rc != 0 ]]; then
      # the whole report: the sanitizer's or the harness's message and the stack say what failed
      grep -v -E "^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse|INITED)" "$log" | tail -60
      echo "fuzz_$t failed (exit $rc): see $build/crash-* (reproduce: $build/fuzz_$t FILE); full log $log"
      exit 1
    fi
    grep -E "Done|stat::number_of_executed_units" "$log"
  done
else
  mkdir -p "$build/corpus/$name"
  "$build/fuzz_$name" -max_total_time="$seconds" -timeout=20 -max_len=8192 -print_final_stats=1 \
    "$build/corpus/$name" "fuzz/corpus/$name"
fi
