// The overlap scheduler (include/strata/overlap.hpp) across real processes, run under strata-run.
//   overlap_test [--tests avg,rs,compress]   averages exact, bucket order identical across ranks even when
//                                            gradients become ready in a different order on every rank,
//                                            reduce-scatter shards + allGatherParams, bf16/f16 on the wire
//   overlap_test --tests timeout             rank 1 never marks one gradient ready and never calls finish():
//                                            the other ranks' finish() must throw naming the bucket, not hang
// Exit status 0 when every check passed; failures are printed per rank. OVERLAP_TEST_KEEP_TRACE=FILE keeps
// the all-rank trace of the avg test in FILE.
#include "strata/overlap.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

int gRank = 0, gSize = 1;
long gFailures = 0;

void fail(const std::string& what) {
  if (gFailures++ < 20) std::fprintf(stderr, "rank %d: FAIL %s\n", gRank, what.c_str());
}

// The same parameter list on every rank: mixed sizes, one larger than the bucket cap.
std::vector<size_t> paramSizes() {
  std::mt19937 rng(42);
  std::vector<size_t> sizes;
  for (int i = 0; i < 24; ++i) sizes.push_back(1 + rng() % 30000);
  sizes.insert(sizes.begin() + 5, 150000);  // 600 KB > the 256 KiB cap
  return sizes;
}

// Integer-valued gradient of rank r: sums over ranks are exact in float32.
float gradValue(int r, int step, int p, size_t i) {
  const uint64_t h = (static_cast<uint64_t>(r) * 1000003u + static_cast<uint64_t>(p) * 7919u + i * 31u +
                      static_cast<uint64_t>(step) * 104729u) %
                     101u;
  return static_cast<float>(static_cast<int>(h) - 50);
}
float expectedAvg(int step, int p, size_t i) {
  float sum = 0;
  for (int r = 0; r < gSize; ++r) sum += gradValue(r, step, p, i);
  return sum / static_cast<float>(gSize);
}

strata::OverlapOptions smallBuckets(strata::OverlapOptions::Mode mode) {
  strata::OverlapOptions o;
  o.mode = mode;
  o.firstBucketBytes = 16 << 10;
  o.bucketCapBytes = 256 << 10;
  o.timeoutMs = 60000;
  return o;
}

void registerAll(strata::OverlapScheduler& s, const std::vector<size_t>& sizes) {
  for (size_t p = 0; p < sizes.size(); ++p) s.addParameter("layer" + std::to_string(p) + ".w", sizes[p]);
}

// Marks every gradient ready in an order of this rank's own, pausing now and then so that buckets are in
// flight while "backward" goes on.
// With `parent`, every 7th gradient also runs a blocking all-reduce on the caller's communicator (as a
// tensor-parallel layer would inside backward): the buckets, on the scheduler's private communicator, must
// not get in its way.
void scrambledBackward(strata::OverlapScheduler& s, size_t nparams, int step, strata::Communicator* parent = nullptr) {
  std::vector<int> order(nparams);
  for (size_t p = 0; p < nparams; ++p) order[p] = static_cast<int>(nparams - 1 - p);
  std::mt19937 rng(1000 + 17 * gRank + step);
  if (gRank % 2 == 1) std::shuffle(order.begin(), order.end(), rng);  // odd ranks: random order
  else if (step % 2 == 1) std::reverse(order.begin(), order.end());   // even ranks: reverse or forward
  for (size_t k = 0; k < order.size(); ++k) {
    s.gradReady(order[k]);
    if (k % 5 == 4) std::this_thread::sleep_for(std::chrono::microseconds(300));
    if (parent && k % 7 == 6) {
      int32_t mine = gRank + static_cast<int32_t>(k), sum = 0;
      parent->allReduce(&mine, &sum, 1);
      if (sum != gSize * (gSize - 1) / 2 + gSize * static_cast<int32_t>(k)) fail("parent all-reduce during backward");
    }
  }
}

// Checks that every rank launched the same buckets in the same order: 0, 1, ..., B-1.
void checkLaunchOrder(strata::Communicator& comm, strata::OverlapScheduler& s, const char* what) {
  const std::vector<int>& mine = s.launchOrder();
  const int nb = s.numBuckets();
  if (static_cast<int>(mine.size()) != nb)
    fail(std::string(what) + ": launched " + std::to_string(mine.size()) + " of " + std::to_string(nb) + " buckets");
  for (int b = 0; b < static_cast<int>(mine.size()); ++b)
    if (mine[b] != b)
      fail(std::string(what) + ": launch " + std::to_string(b) + " was bucket " + std::to_string(mine[b]));
  std::vector<int32_t> local(nb, -1), all(static_cast<size_t>(nb) * gSize);
  for (int b = 0; b < nb && b < static_cast<int>(mine.size()); ++b) local[b] = mine[b];
  comm.allGather(local.data(), all.data(), nb, strataInt32);
  for (int r = 1; r < gSize; ++r)
    for (int b = 0; b < nb; ++b)
      if (all[static_cast<size_t>(r) * nb + b] != all[b])
        fail(std::string(what) + ": rank " + std::to_string(r) + " launch order differs from rank 0");
}

void testAverage(strata::Communicator& comm) {
  const auto sizes = paramSizes();
  strata::OverlapScheduler s(comm, smallBuckets(strata::OverlapOptions::Mode::kAllReduceAverage));
  registerAll(s, sizes);
  if (s.numBuckets() < 4) fail("avg: expected several buckets, got " + std::to_string(s.numBuckets()));
  for (int step = 0; step < 3; ++step) {
    s.beginStep();
    for (size_t p = 0; p < sizes.size(); ++p)
      for (size_t i = 0; i < sizes[p]; ++i)
        s.grad(static_cast<int>(p))[i] = gradValue(gRank, step, static_cast<int>(p), i);
    scrambledBackward(s, sizes.size(), step, &comm);
    s.finish();
    long wrong = 0;
    for (size_t p = 0; p < sizes.size(); ++p)
      for (size_t i = 0; i < sizes[p]; ++i)
        if (s.grad(static_cast<int>(p))[i] != expectedAvg(step, static_cast<int>(p), i) && wrong++ < 3)
          fail("avg step " + std::to_string(step) + " param " + std::to_string(p) + "[" + std::to_string(i) +
               "] = " + std::to_string(s.grad(static_cast<int>(p))[i]) + ", want " +
               std::to_string(expectedAvg(step, static_cast<int>(p), i)));
    checkLaunchOrder(comm, s, "avg");
    const auto st = s.stats();
    if (st.buckets != s.numBuckets() || st.commUs <= 0 || st.exposedCommUs < 0 || st.exposedCommUs > st.commUs ||
        st.overlapPercent < 0 || st.overlapPercent > 100)
      fail("avg: implausible stats");
    if (gRank == 0)
      std::printf("avg step %d: %d buckets, compute %.0f us, comm %.0f us, exposed %.0f us, overlap %.1f%%\n", step,
                  st.buckets, st.computeUs, st.commUs, st.exposedCommUs, st.overlapPercent);
  }
  // The trace: a JSON array with compute and comm lanes for this rank.
  char path[64];
  std::snprintf(path, sizeof path, "/tmp/strata_overlap_trace_%d_%d.json", static_cast<int>(getpid()), gRank);
  s.writeTrace(path);
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string t = ss.str();
  if (t.empty() || t.front() != '[' || t.find("\"pid\":" + std::to_string(gRank)) == std::string::npos ||
      t.find("\"tid\":1") == std::string::npos)
    fail("trace malformed");
  std::remove(path);
  // One file with every rank's lanes, written by rank 0 (the parent, strata-run, names it for every rank).
  std::snprintf(path, sizeof path, "/tmp/strata_overlap_trace_all_%d.json", static_cast<int>(getppid()));
  s.writeTraceAllRanks(path);
  if (gRank == 0) {
    std::ifstream fa(path);
    std::stringstream sa;
    sa << fa.rdbuf();
    const std::string all = sa.str();
    if (all.size() < 4 || all.front() != '[' || all.substr(all.size() - 2) != "]\n") fail("all-rank trace malformed");
    for (int r = 0; r < gSize; ++r)
      if (all.find("\"name\":\"rank " + std::to_string(r) + "\"") == std::string::npos)
        fail("all-rank trace lacks rank " + std::to_string(r));
    if (const char* keep = std::getenv("OVERLAP_TEST_KEEP_TRACE"); keep && *keep)
      std::rename(path, keep);  // for a look in Perfetto / chrome://tracing
    else std::remove(path);
  }
}

void testReduceScatter(strata::Communicator& comm) {
  const auto sizes = paramSizes();
  auto o = smallBuckets(strata::OverlapOptions::Mode::kReduceScatter);
  o.ownCommunicator = false;  // the buckets on `comm` itself, which carries nothing else during a step
  strata::OverlapScheduler s(comm, o);
  registerAll(s, sizes);
  std::vector<float> params(s.gradElems());
  for (int step = 0; step < 2; ++step) {
    s.beginStep();
    for (size_t p = 0; p < sizes.size(); ++p)
      for (size_t i = 0; i < sizes[p]; ++i)
        s.grad(static_cast<int>(p))[i] = gradValue(gRank, step, static_cast<int>(p), i);
    scrambledBackward(s, sizes.size(), step);
    s.finish();
    checkLaunchOrder(comm, s, "rs");
    // Expected full buffer: averages at the parameters' positions, zero padding.
    std::vector<float> expect(s.gradElems(), 0.0f);
    for (size_t p = 0; p < sizes.size(); ++p) {
      const size_t po = static_cast<size_t>(s.grad(static_cast<int>(p)) - s.gradBuffer());
      for (size_t i = 0; i < sizes[p]; ++i) expect[po + i] = expectedAvg(step, static_cast<int>(p), i);
    }
    long wrong = 0;
    for (int b = 0; b < s.numBuckets(); ++b) {
      if (s.bucketElems(b) % gSize != 0) fail("rs: bucket " + std::to_string(b) + " not padded to nranks");
      if (s.shardElems(b) * gSize != s.bucketElems(b)) fail("rs: shard size");
      if (s.shardOffset(b) != s.bucketOffset(b) + gRank * s.shardElems(b)) fail("rs: shard offset");
      for (size_t i = s.shardOffset(b); i < s.shardOffset(b) + s.shardElems(b); ++i)
        if (s.gradBuffer()[i] != expect[i] && wrong++ < 3)
          fail("rs step " + std::to_string(step) + " shard element " + std::to_string(i) + " = " +
               std::to_string(s.gradBuffer()[i]) + ", want " + std::to_string(expect[i]));
    }
    // Optimizer step on the owned shards ("param = 2*grad + step"), then all-gather the updated parameters
    // while the "next forward" starts.
    std::fill(params.begin(), params.end(), -777.0f);
    for (int b = 0; b < s.numBuckets(); ++b)
      for (size_t i = s.shardOffset(b); i < s.shardOffset(b) + s.shardElems(b); ++i)
        params[i] = 2 * s.gradBuffer()[i] + static_cast<float>(step);
    s.allGatherParams(params.data());
    s.waitParams();
    wrong = 0;
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i] != 2 * expect[i] + static_cast<float>(step) && wrong++ < 3)
        fail("rs all-gather element " + std::to_string(i) + " = " + std::to_string(params[i]));
  }
}

void testCompressed(strata::Communicator& comm, strataDataType_t wire, strata::OverlapOptions::Mode mode) {
  const char* name = wire == strataBfloat16 ? "bf16" : "f16";
  const auto sizes = paramSizes();
  auto o = smallBuckets(mode);
  o.wireType = wire;
  strata::OverlapScheduler s(comm, o);
  registerAll(s, sizes);
  // Values in [-1, 1] on a 1/1024 grid: the exact average is known on every rank.
  auto val = [](int r, int p, size_t i) { return (gradValue(r, 0, p, i) * 20.0f + static_cast<float>(r)) / 1024.0f; };
  s.beginStep();
  for (size_t p = 0; p < sizes.size(); ++p)
    for (size_t i = 0; i < sizes[p]; ++i) s.grad(static_cast<int>(p))[i] = val(gRank, static_cast<int>(p), i);
  scrambledBackward(s, sizes.size(), 0);
  s.finish();
  // Error bound: each input rounded to the wire type and each of the n-1 pairwise partial sums rounded
  // again (|partial| <= n): at most (2n - 1) roundings of half an ulp at magnitude n, then divided by n.
  const double ulpAtOne = wire == strataBfloat16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -10);
  const double tol = (2.0 * gSize - 1) * 0.5 * ulpAtOne + 1e-6;
  double maxErr = 0;
  for (size_t p = 0; p < sizes.size(); ++p) {
    const int b = s.paramBucket(static_cast<int>(p));
    const size_t po = static_cast<size_t>(s.grad(static_cast<int>(p)) - s.gradBuffer());
    for (size_t i = 0; i < sizes[p]; ++i) {
      if (mode == strata::OverlapOptions::Mode::kReduceScatter &&
          (po + i < s.shardOffset(b) || po + i >= s.shardOffset(b) + s.shardElems(b)))
        continue;
      double want = 0;
      for (int r = 0; r < gSize; ++r) want += val(r, static_cast<int>(p), i);
      want /= gSize;
      maxErr = std::max(maxErr, std::fabs(s.grad(static_cast<int>(p))[i] - want));
    }
  }
  if (!(maxErr <= tol))
    fail(std::string(name) + ": max error " + std::to_string(maxErr) + " > tolerance " + std::to_string(tol));
  if (gRank == 0)
    std::printf("%s %s: max abs error %.3g (tolerance %.3g)\n", name,
                mode == strata::OverlapOptions::Mode::kReduceScatter ? "reduce-scatter" : "all-reduce", maxErr, tol);
  checkLaunchOrder(comm, s, name);
}

// Rank 1 never marks one gradient ready and never calls finish(); every other rank's finish() must throw a
// strata::Exception naming the bucket within about timeoutMs. Destroying the schedulers then aborts their
// private communicators, and the caller's communicator still works (a barrier on it).
int testTimeout(strata::Communicator& comm) {
  const auto sizes = paramSizes();
  auto o = smallBuckets(strata::OverlapOptions::Mode::kAllReduceAverage);
  o.timeoutMs = 2000;
  auto s = std::make_unique<strata::OverlapScheduler>(comm, o);
  registerAll(*s, sizes);
  const int missing = 10;  // in a middle bucket: the buckets before it go out and complete on every rank
  const int missingBucket = s->paramBucket(missing);
  s->beginStep();
  for (int p = static_cast<int>(sizes.size()) - 1; p >= 0; --p)
    if (!(gRank == 1 && p == missing)) s->gradReady(p);
  if (gRank == 1) {
    // Hangs on purpose: no finish(). Wait until the peers have timed out, then leave.
    std::this_thread::sleep_for(std::chrono::milliseconds(o.timeoutMs + 2000));
    s.reset();
    comm.barrier();
    std::printf("rank 1: left without marking %s ready\n", "layer10.w");
    return 0;
  }
  const auto t0 = std::chrono::steady_clock::now();
  try {
    s->finish();
    fail("timeout: finish() returned although rank 1 never marked layer10.w ready");
  } catch (const strata::Exception& e) {
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const std::string m = e.what();
    std::printf("rank %d: finish() threw after %.0f ms: %s\n", gRank, ms, m.c_str());
    if (e.code() != strataTimeout) fail("timeout: code " + std::to_string(e.code()) + ", want strataTimeout");
    if (m.find("bucket " + std::to_string(missingBucket)) == std::string::npos)
      fail("timeout: message does not name bucket " + std::to_string(missingBucket));
    if (m.find("layer10.w") == std::string::npos) fail("timeout: message does not name the bucket's parameters");
    if (ms < 1500 || ms > 10000) fail("timeout: took " + std::to_string(ms) + " ms for a 2000 ms timeout");
  }
  // The bucket is still in flight: the destructor aborts the scheduler's private communicator. The
  // caller's communicator is untouched and still works.
  s.reset();
  comm.barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string tests = "avg,rs,compress";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--tests") == 0 && i + 1 < argc) tests = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--tests avg,rs,compress,timeout]\n", argv[0]);
      return 2;
    }
  }
  auto has = [&](const char* t) { return ("," + tests + ",").find("," + std::string(t) + ",") != std::string::npos; };
  try {
    auto comm = strata::Communicator::fromEnv();
    gRank = comm.rank();
    gSize = comm.size();
    if (has("timeout")) {
      if (gSize < 2) {
        std::fprintf(stderr, "the timeout test needs 2 or more ranks\n");
        return 2;
      }
      testTimeout(comm);
    } else {
      if (has("avg")) testAverage(comm);
      if (has("rs")) testReduceScatter(comm);
      if (has("compress")) {
        testCompressed(comm, strataBfloat16, strata::OverlapOptions::Mode::kAllReduceAverage);
        testCompressed(comm, strataFloat16, strata::OverlapOptions::Mode::kAllReduceAverage);
        testCompressed(comm, strataBfloat16, strata::OverlapOptions::Mode::kReduceScatter);
      }
      comm.barrier();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: exception: %s\n", gRank, e.what());
    return 1;
  }
  if (gFailures) {
    std::fprintf(stderr, "rank %d: %ld failures\n", gRank, gFailures);
    return 1;
  }
  if (gRank == 0) std::printf("overlap_test (%s) on %d ranks: OK\n", tests.c_str(), gSize);
  return 0;
}
