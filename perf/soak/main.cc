// strata_soak: random collectives for as long as asked, every result checked exactly, while the process's
// resources are sampled; at the end the steady state is compared with a warm-up baseline. perf/soak.sh runs it
// under strata-run (5 minutes in CI, hours by hand).
//
// Every rank draws the same sequence of operations from the shared --seed: the collective (all-reduce,
// reduce-scatter, all-gather, broadcast, reduce, all-to-all, a send/recv ring in a group, barrier), the count (0,
// or log-uniform from 1 to --max-count), the dtype (all twelve), the operator (sum, prod, max, min, avg, and a
// PreMulSum made for the call and destroyed after it), the root, in place or not, and how it is issued (blocking,
// in a group, in a group ended asynchronously). Now and then the world is split into random colors or shrunk
// (strataCommShrink, excluding random ranks): a few operations on each part, sometimes a split of a part, then
// destroy, or abort or revoke after a barrier on the world. And now and then the world is re-created: split with
// one color and random keys, the old one destroyed or aborted.
//
// Inputs are a function of (operation, rank, index): small integers chosen per operator so that the expected
// result is exact in every dtype (sums of -2..2, or -1..1 in fp8; products of +-1 with one 2; avg inputs that are
// multiples of the rank count). Each output element, the guard bytes after the output and, out of place, the
// send buffer are checked; a wrong value or a failed call ends the run naming the iteration, the operation and
// the values.
//
// Every --sample-seconds (rank 0 decides for all ranks, and decides when to stop, so no rank is left in a
// collective) each rank samples its RSS, the bytes malloc has handed out (heap), open descriptors, threads and
// mappings of /dev/shm files, and rank 0 the strata-* names in /dev/shm. Baseline: the largest sample of the first
// 20% of the run taken after the warm-up (the first split and the first re-create); final: the largest sample of
// the last 20%; for the heap, the least samples of the same windows (see judge()). The run fails when a metric's
// final exceeds its baseline by more than its slack.
//
// usage: strata_soak [--seconds S] [--seed N] [--sample-seconds S] [--log FILE] [--flight-dir DIR] [--max-count N]
//                    [--rss-slack-mib M] [--heap-slack-mib M] [--fd-slack N] [--thread-slack N] [--shm-slack N]
//                    [--map-slack N]
// FILE gets one JSON line per sample and a summary line; "%r" in it becomes the launcher's rank. On a failure, the
// flight recorders of the live communicators go to DIR.
//
// The program's parts, beside this driver: operations.cc (the random operation mix), check.cc (inputs and the
// check of every result), step.cc (running a step), communicators.cc (splits, shrinks, re-created worlds),
// resources.cc (samples and verdicts), dtypes.cc, options.cc, failure.cc.
#include <malloc.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "comm_view.h"
#include "communicators.h"
#include "dtypes.h"
#include "failure.h"
#include "operations.h"
#include "options.h"
#include "resources.h"
#include "shared_random.h"
#include "step.h"
#include "strata/strata.h"

using namespace soak;

int main(int argc, char** argv) {
  const Options opt = parseOptions(argc, argv);
#if defined(__GLIBC__)
  // A fixed mmap threshold: glibc otherwise raises it to the largest block freed (up to 32 MiB), after which big
  // blocks come from the heap and RSS shows glibc's high-water mark instead of the memory in use.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
#endif
  if (const char* r = std::getenv("RANK")) gLaunchRank = std::atoi(r);
  CommView world;
  world.name = "world 0";
  expectOk(strataCommInitFromEnv(&world.comm), nullptr, "strataCommInitFromEnv");
  expectOk(strataCommCount(world.comm, &world.size), world.comm, "strataCommCount");
  expectOk(strataCommUserRank(world.comm, &world.rank), world.comm, "strataCommUserRank");
  gLaunchRank = world.rank;
  gLiveComms.push_back(world.comm);
  gFlightDir = opt.flightDir;

  FILE* log = nullptr;
  if (!opt.log.empty()) {
    std::string path = opt.log;
    for (size_t p; (p = path.find("%r")) != std::string::npos;) path.replace(p, 2, std::to_string(gLaunchRank));
    log = std::fopen(path.c_str(), "w");
    if (!log) die("cannot write --log %s: %s", path.c_str(), std::strerror(errno));
  }

  // Buffers for the largest operation (n x maxCount elements of 8 bytes), or three slots for the operations of a
  // group (n x maxCount / 4 elements each), touched now so that the first use of a large count later does not look
  // like growth.
  Buffers buf;
  const size_t n = static_cast<size_t>(world.size);
  buf.slotBytes = (n * std::max<size_t>(1, opt.maxCount / 4) * kMaxDtypeSize + kGuardBytes + 63) / 64 * 64;
  const size_t bytes = std::max(n * opt.maxCount * kMaxDtypeSize + kGuardBytes, 3 * buf.slotBytes);
  buf.send.assign(bytes, kSentinel);
  buf.recv.assign(bytes, kSentinel);

  SharedRandom rng(opt.seed);
  Stats st;
  std::vector<Sample> samples;
  int decider = 0;  // the world rank of the launcher's rank 0, which keeps the clock
  const auto start = std::chrono::steady_clock::now();
  double lastSample = -1e9;
  if (gLaunchRank == 0)
    std::printf("strata_soak: %d ranks, %.0f s, seed %llu, counts up to %zu, a sample every %.0f s\n", world.size,
                opt.seconds, static_cast<unsigned long long>(opt.seed), opt.maxCount, opt.sampleSeconds);

  // Every iteration starts with a broadcast from the deciding rank: go on or stop, sample now or not, and its
  // clock, so every rank stops after the same iteration and samples at the same points.
  constexpr int64_t kGoOn = 1, kSampleNow = 2;
  for (gIteration = 0;; ++gIteration) {
    int64_t flags[2] = {0, 0};
    if (world.rank == decider) {
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const bool goOn = t < opt.seconds;
      const bool sampleNow = !goOn || t - lastSample >= opt.sampleSeconds;
      if (sampleNow) lastSample = t;
      flags[0] = (goOn ? kGoOn : 0) | (sampleNow ? kSampleNow : 0);
      flags[1] = static_cast<int64_t>(t * 1000);
    }
    expectOk(strataBroadcast(flags, flags, 2, strataInt64, decider, world.comm, nullptr), world.comm,
             "strataBroadcast of the control flags on " + world.name);
    if (flags[0] & kSampleNow) {
      strataResult_t async = strataSuccess;
      expectOk(strataCommGetAsyncError(world.comm, &async), world.comm, "strataCommGetAsyncError");
      if (async != strataSuccess)
        die("%s has an asynchronous error: %s", world.name.c_str(), strataGetErrorString(async));
      const Sample s =
          takeSample(static_cast<double>(flags[1]) / 1000, gIteration, (st.splits || st.shrinks) && st.recreates);
      samples.push_back(s);
      if (log) {
        std::fprintf(log, "%s\n", sampleJson(s).c_str());
        std::fflush(log);
      }
      if (gLaunchRank == 0) {
        std::printf(
            "sample t=%.0fs iteration %llu%s: rss %.1f MiB, heap %.1f MiB, fds %ld, threads %ld, shm names %ld, "
            "shm maps %ld\n",
            s.t, static_cast<unsigned long long>(s.iteration), s.warm ? "" : " (warm-up)",
            static_cast<double>(s.v[kRss]) / 1024, static_cast<double>(s.v[kHeap]) / 1024, s.v[kFds], s.v[kThreads],
            s.v[kShmNames], s.v[kShmMaps]);
        std::fflush(stdout);
      }
    }
    if (!(flags[0] & kGoOn)) break;
    st.iterations = gIteration + 1;
    if (gIteration == 2 || rng.chance(1.0 / 40)) splitRound(world, decider, rng, opt.maxCount, buf, st);
    if (gIteration == 4 || rng.chance(1.0 / 150)) recreateWorld(world, decider, rng, st);
    runStep(drawStep(rng, opt.maxCount), world, buf, st);
  }

  const double total = samples.back().t;
  Verdict verdicts[kNumMetrics];
  const long slack[kNumMetrics] = {static_cast<long>(opt.rssSlackMib * 1024),
                                   static_cast<long>(opt.heapSlackMib * 1024),
                                   opt.fdSlack,
                                   opt.threadSlack,
                                   opt.shmSlack,
                                   opt.mapSlack};
  bool failed = false;
  const Sample* firstWarm = nullptr;
  for (const Sample& s : samples)
    if (s.warm && !firstWarm) firstWarm = &s;
  if (!firstWarm) {
    std::fprintf(stderr, "strata_soak: rank %d: FAIL: the run ended before the warm-up did (%.1f s)\n", gLaunchRank,
                 total);
    failed = true;
  }
  for (int m = 0; m < kNumMetrics && firstWarm; ++m) {
    Verdict& v = verdicts[m];
    if (samples.front().v[m] < 0) continue;
    v = judge(samples, static_cast<Metric>(m), *firstWarm, slack[m]);
    if (!v.ok) {
      failed = true;
      const char* how = m == kHeap || m == kRss ? "least" : "largest";
      std::fprintf(stderr,
                   "strata_soak: rank %d: FAIL: %s grew from %ld (baseline: the %s sample of the first 20%% after "
                   "warm-up) to %ld (the %s sample of the last 20%%), by %ld, more than the slack of %ld\n",
                   gLaunchRank, kMetricNames[m], v.baseline, how, v.final, how, v.final - v.baseline, slack[m]);
    }
  }

  if (log) {
    std::fprintf(log, "{\"type\":\"summary\",\"rank\":%d,\"seconds\":%.1f,\"iterations\":%llu,\"bytes\":%llu",
                 gLaunchRank, total, static_cast<unsigned long long>(st.iterations),
                 static_cast<unsigned long long>(st.bytes));
    for (int k = 0; k < kNumKinds; ++k)
      std::fprintf(log, ",\"%s\":%llu", kKindNames[k], static_cast<unsigned long long>(st.ops[k]));
    for (int m = 0; m < kNumMetrics; ++m)
      std::fprintf(log, ",\"%s\":{\"first\":%ld,\"last\":%ld,\"max\":%ld,\"baseline\":%ld,\"final\":%ld,\"ok\":%s}",
                   kMetricNames[m], verdicts[m].first, verdicts[m].last, verdicts[m].max, verdicts[m].baseline,
                   verdicts[m].final, verdicts[m].ok ? "true" : "false");
    std::fprintf(log, ",\"failed\":%s}\n", failed ? "true" : "false");
    std::fclose(log);
  }

  // Every rank's figures to every rank: the launcher's rank 0 prints them all, and every rank exits with the
  // same status.
  std::vector<int64_t> mine(kRecordLen), all(kRecordLen * static_cast<size_t>(world.size));
  mine[0] = gLaunchRank;
  mine[1] = failed ? 1 : 0;
  for (int m = 0; m < kNumMetrics; ++m) {
    const Verdict& v = verdicts[m];
    const long f[5] = {v.first, v.last, v.max, v.baseline, v.final};
    for (int j = 0; j < 5; ++j) mine[2 + static_cast<size_t>(m) * 5 + static_cast<size_t>(j)] = f[j];
  }
  expectOk(strataAllGather(mine.data(), all.data(), kRecordLen, strataInt64, world.comm, nullptr), world.comm,
           "strataAllGather of the verdicts");
  bool anyFailed = false;
  for (int r = 0; r < world.size; ++r) anyFailed = anyFailed || all[static_cast<size_t>(r) * kRecordLen + 1] != 0;

  if (gLaunchRank == 0) {
    std::printf("strata_soak: %.1f s, %llu iterations, %.2f GiB through this rank, %zu samples (warm from t=%.0fs)\n",
                total, static_cast<unsigned long long>(st.iterations), static_cast<double>(st.bytes) / (1 << 30),
                samples.size(), firstWarm ? firstWarm->t : -1.0);
    std::printf("operations on rank 0:");
    for (int k = 0; k < kNumKinds; ++k)
      std::printf(" %s %llu", kKindNames[k], static_cast<unsigned long long>(st.ops[k]));
    std::printf("; in groups %llu (async groups %llu), premulsum %llu\n", static_cast<unsigned long long>(st.grouped),
                static_cast<unsigned long long>(st.async), static_cast<unsigned long long>(st.preMulSums));
    std::printf(
        "communicators: %llu splits and %llu shrinks (%llu nested splits, %llu operations on the parts), %llu "
        "re-creates, %llu aborts, %llu revokes\n",
        static_cast<unsigned long long>(st.splits), static_cast<unsigned long long>(st.shrinks),
        static_cast<unsigned long long>(st.nestedSplits), static_cast<unsigned long long>(st.subOps),
        static_cast<unsigned long long>(st.recreates), static_cast<unsigned long long>(st.aborts),
        static_cast<unsigned long long>(st.revokes));
    for (int r = 0; r < world.size; ++r) {
      const int64_t* rec = &all[static_cast<size_t>(r) * kRecordLen];
      std::printf("rank %lld:", static_cast<long long>(rec[0]));
      for (int m = 0; m < kNumMetrics; ++m) {
        const int64_t* f = rec + 2 + m * 5;
        if (f[0] < 0) continue;
        std::printf(" %s first/last/max %lld/%lld/%lld %s %lld final %lld (slack %ld)%s", kMetricNames[m],
                    static_cast<long long>(f[0]), static_cast<long long>(f[1]), static_cast<long long>(f[2]),
                    m == kHeap || m == kRss ? "floors: baseline" : "baseline", static_cast<long long>(f[3]),
                    static_cast<long long>(f[4]), slack[m], f[4] - f[3] > slack[m] ? " GREW" : "");
        if (m + 1 < kNumMetrics) std::printf(";");
      }
      std::printf("\n");
    }
    std::printf("strata_soak: %s\n", anyFailed ? "FAIL" : "PASS");
    std::fflush(stdout);
  }
  release(world, Release::kDestroy, "the end of the run");
  return anyFailed ? 1 : 0;
}
