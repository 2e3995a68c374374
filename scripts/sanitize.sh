#!/usr/bin/env bash
# The sanitizer jobs (run by .ci/run after `make test`, and by hand):
#   bash scripts/sanitize.sh asan [BUILD_DIR]   ASan + UBSan (gcc): every unit test, then a multi-process subset
#   bash scripts/sanitize.sh tsan [BUILD_DIR]   ThreadSanitizer (gcc): the unit tests whose ranks or callers
#                                                are threads of one process (TSAN_TESTS below)
# Any report fails the job: UBSan does not recover, ASan and TSan stop at the first error (halt_on_error=1).
# CUDA and MPI are left out of these builds: the CUDA code cannot run here (its host logic is covered through
# the fake CudaApi, which is built), and MPI is only a benchmark baseline.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:?usage: sanitize.sh asan|tsan [BUILD_DIR]}
build=${2:-build-$kind}
jobs=$(nproc)

# The multi-process subset for ASan: every collective over shm and tcp at 2 and 3 ranks, a killed rank, a
# flooded root, a shrink after a killed rank (ctest names in tests/multiproc/CMakeLists.txt).
ASAN_CTESTS='^(coll_shm_n2|coll_shm_n3|coll_tcp_n2|coll_tcp_n3|fault_kill_rank1_shm|fault_kill_rank1_tcp|flood_root_shm|root_rank_exits_early_shm|shrink_after_kill_rank2)$'
# Threads of one process: abort, destroy and revoke from other threads, shrink, ranks as threads and async work
# (CApi), the transports and desync detection with each rank a thread, the bootstrap, the overlap scheduler, and the device
# engine over the fake CudaApi. UCX is left out: its library is not instrumented.
# Ranks that are threads talk through shared memory each maps at its own address, and hand out fake CUDA IPC
# handles through sockets: the shm transport and the fake CudaApi tell TSan of that order (util/tsan.h).
# Left out (ASan and make test run them):
# - the bootstrap tests that fork() a rank process, which starts threads in the child: TSan cannot follow a process
#   that forks while threads run (earlier tests leave root services running), and dies there.
# The destroy barrier of the device engine (DeviceEngine::quiesce) orders a peer's last read of a rank's fake IPC
# memory before its free through sockets; the engine tells TSan of it (util/tsan.h), so those tests run too.
TSAN_TESTS='Abort.*:Shrink.*:Revoke.*:CApi.*:Transports/*:ShmTransport.*:TcpTransport.*:Overlap.*:Bootstrap.*:Sizes/BootstrapRanks.*:DeviceEngine.*'
TSAN_TESTS+='-Bootstrap.DeadRankIsReportedToSurvivors:Bootstrap.LostRootIsAFailure'
TSAN_TESTS+=':Bootstrap.RootProcessLeavingOnPurposeIsNotAFailure'
TSAN_TESTS+=':*/ucx'  # the UCX variants of the transport tests: libucp is not instrumented (it crashes under TSan)

case "$kind" in
  asan)
    cc=gcc cxx=g++
    flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
    export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:abort_on_error=0
    export LSAN_OPTIONS=suppressions=$PWD/scripts/lsan.supp:print_suppressions=0
    export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
    targets="strata_unit_tests strata_device_cpu_tests strata-run strata_coll_test strata_fault_test"
    ;;
  tsan)
    cc=gcc cxx=g++  # clang 14 lacks C++20 aggregate deduction (util/config.cc)
    flags="-fsanitize=thread -fno-omit-frame-pointer"
    export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
    targets="strata_unit_tests strata_device_cpu_tests"
    ;;
  *) echo "sanitize.sh: unknown job '$kind' (asan or tsan)" >&2; exit 2 ;;
esac

start=$(date +%s)
# -g1: line tables only, enough for the reports' stack traces (file:line), at a fraction of full debug information's
# compile and link time.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_WERROR=OFF -DSTRATA_LAYER_CHECK=OFF \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DSTRATA_WITH_CUDA=OFF -DSTRATA_WITH_MPI=OFF -DCMAKE_C_COMPILER=$cc -DCMAKE_CXX_COMPILER=$cxx \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" \
  -DCMAKE_SHARED_LINKER_FLAGS="$flags" > "$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
# shellcheck disable=SC2086
cmake --build "$build" -j "$jobs" --target $targets
echo "sanitize.sh $kind: built in $(( $(date +%s) - start )) s"

unit=$build/bin/strata_unit_tests
# The device protocol on CPU threads and forked processes (tests/device_cpu), every test, 10,000 random calls:
# under TSan this is the protocol's race check (its ranks share one mapping, so TSan sees every address).
"$build/bin/strata_device_cpu_tests" --gtest_brief=1
if [[ $kind == asan ]]; then
  # LeakSanitizer's exit-time tracer sometimes crashes ("Tracer caught signal 11 ... LeakSanitizer has encountered a
  # fatal error") while threads of the process are still ending: that is no leak report and no finding, so the run
  # is repeated once then, and only then. A leak report ("detected memory leaks") or a failing test fails the job.
  if ! "$unit" --gtest_brief=1 2>&1 | tee "$build.unit.log"; then
    if grep -q "LeakSanitizer has encountered a fatal error" "$build.unit.log" &&
      ! grep -q "detected memory leaks" "$build.unit.log" && ! grep -q "FAILED" "$build.unit.log"; then
      echo "sanitize.sh asan: LeakSanitizer's tracer crashed at exit (not a leak report); running the unit tests again"
      "$unit" --gtest_brief=1
    else
      exit 1
    fi
  fi
  (cd "$build" && ctest --output-on-failure --timeout 900 -R "$ASAN_CTESTS")
else
  "$unit" --gtest_brief=1 --gtest_filter="$TSAN_TESTS"
fi
echo "sanitize.sh $kind: passed in $(( $(date +%s) - start )) s"
