// The overlap scheduler (include/strata/overlap.hpp): bucket assignment and layout on a 1-rank
// communicator, reduce-scatter padding and shards with ranks as threads, usage errors, stats and the trace.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kernels/reduce.h"
#include "strata/overlap.hpp"

namespace {

using strata::OverlapOptions;
using strata::OverlapScheduler;

strata::Communicator oneRank() { return strata::Communicator(1, strata::Communicator::uniqueId(), 0); }

OverlapOptions opts(size_t first, size_t cap, OverlapOptions::Mode mode = OverlapOptions::Mode::kAllReduceAverage) {
  OverlapOptions o;
  o.firstBucketBytes = first;
  o.bucketCapBytes = cap;
  o.mode = mode;
  return o;
}

TEST(Overlap, BucketsInReverseOrderFirstSmallThenCap) {
  auto comm = oneRank();
  // 100 floats = 400 bytes per parameter; first bucket 800 B (2 params), later 1200 B (3 params).
  OverlapScheduler s(comm, opts(800, 1200));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(s.addParameter("p" + std::to_string(i), 100), i);
  ASSERT_EQ(s.numBuckets(), 3);
  EXPECT_EQ(s.bucketParams(0), (std::vector<int>{7, 6}));
  EXPECT_EQ(s.bucketParams(1), (std::vector<int>{5, 4, 3}));
  EXPECT_EQ(s.bucketParams(2), (std::vector<int>{2, 1, 0}));
  EXPECT_EQ(s.bucketOffset(0), 0u);
  EXPECT_EQ(s.bucketElems(0), 200u);
  EXPECT_EQ(s.bucketOffset(1), 200u);
  EXPECT_EQ(s.bucketElems(1), 300u);
  EXPECT_EQ(s.bucketOffset(2), 500u);
  EXPECT_EQ(s.bucketElems(2), 300u);
  EXPECT_EQ(s.gradElems(), 800u);
  // Flat layout in reverse registration order: each bucket contiguous, each gradient a view into it.
  s.beginStep();
  EXPECT_EQ(s.grad(7), s.gradBuffer());
  EXPECT_EQ(s.grad(6), s.gradBuffer() + 100);
  EXPECT_EQ(s.grad(0), s.gradBuffer() + 700);
  for (int p = 0; p < 8; ++p) {
    const int b = s.paramBucket(p);
    const size_t off = static_cast<size_t>(s.grad(p) - s.gradBuffer());
    EXPECT_GE(off, s.bucketOffset(b));
    EXPECT_LE(off + 100, s.bucketOffset(b) + s.bucketElems(b));
  }
  // Registration is closed once the layout is fixed.
  EXPECT_THROW(s.addParameter("late", 1), strata::Exception);
}

TEST(Overlap, OversizedParameterGetsItsOwnBucket) {
  auto comm = oneRank();
  OverlapScheduler s(comm, opts(400, 1000));
  s.addParameter("a", 10);      // 40 B
  s.addParameter("big", 1000);  // 4000 B > cap
  s.addParameter("b", 10);
  s.addParameter("c", 10);
  // Reverse: c, b (80 B, fit in 400), big alone, a.
  ASSERT_EQ(s.numBuckets(), 3);
  EXPECT_EQ(s.bucketParams(0), (std::vector<int>{3, 2}));
  EXPECT_EQ(s.bucketParams(1), (std::vector<int>{1}));
  EXPECT_EQ(s.bucketParams(2), (std::vector<int>{0}));
  EXPECT_EQ(s.bucketElems(1), 1000u);
}

TEST(Overlap, DefaultsAreOneAndTwentyFiveMiB) {
  OverlapOptions o;
  EXPECT_EQ(o.firstBucketBytes, size_t{1} << 20);
  EXPECT_EQ(o.bucketCapBytes, size_t{25} << 20);
  auto comm = oneRank();
  OverlapScheduler s(comm);
  // 8 parameters of 1 MiB (262144 floats): the first bucket holds one, the later ones up to 25.
  for (int i = 0; i < 30; ++i) s.addParameter("w" + std::to_string(i), 262144);
  ASSERT_EQ(s.numBuckets(), 3);
  EXPECT_EQ(s.bucketParams(0).size(), 1u);
  EXPECT_EQ(s.bucketParams(1).size(), 25u);
  EXPECT_EQ(s.bucketParams(2).size(), 4u);
}

TEST(Overlap, LaunchOrderIsBucketOrderAndAverageOnOneRank) {
  auto comm = oneRank();
  OverlapScheduler s(comm, opts(400, 400));
  for (int i = 0; i < 4; ++i) s.addParameter("p" + std::to_string(i), 100);  // one per bucket
  ASSERT_EQ(s.numBuckets(), 4);
  for (int step = 0; step < 2; ++step) {
    s.beginStep();
    for (size_t i = 0; i < s.gradElems(); ++i) s.gradBuffer()[i] = static_cast<float>(i + step);
    // Bucket 0 holds p3; marking p0..p2 first launches nothing until p3 is ready, then all in order.
    s.gradReady(0);
    s.gradReady(1);
    s.gradReady(2);
    EXPECT_TRUE(s.launchOrder().empty());
    s.gradReady(3);
    EXPECT_EQ(s.launchOrder(), (std::vector<int>{0, 1, 2, 3}));
    s.finish();
    for (size_t i = 0; i < s.gradElems(); ++i) ASSERT_EQ(s.gradBuffer()[i], static_cast<float>(i + step));
    auto st = s.stats();
    EXPECT_EQ(st.buckets, 4);
    EXPECT_GE(st.computeUs, 0);
    EXPECT_GE(st.commUs, 0);
    EXPECT_GE(st.exposedCommUs, 0);
    EXPECT_LE(st.exposedCommUs, st.commUs + 1e-9);
    EXPECT_GE(st.overlapPercent, 0);
    EXPECT_LE(st.overlapPercent, 100);
  }
}

TEST(Overlap, NoOverlapModeLaunchesInFinish) {
  auto comm = oneRank();
  auto o = opts(400, 400);
  o.overlap = false;
  OverlapScheduler s(comm, o);
  for (int i = 0; i < 3; ++i) s.addParameter("p" + std::to_string(i), 100);
  s.beginStep();
  for (int p = 2; p >= 0; --p) s.gradReady(p);
  EXPECT_TRUE(s.launchOrder().empty());
  s.finish();
  EXPECT_EQ(s.launchOrder(), (std::vector<int>{0, 1, 2}));
}

TEST(Overlap, UsageErrors) {
  auto comm = oneRank();
  OverlapScheduler s(comm, opts(400, 400));
  s.addParameter("p0", 100);
  s.addParameter("p1", 100);
  s.addParameter("h.2.mlp.w1", 100);
  EXPECT_THROW(s.gradReady(0), strata::Exception);  // outside a step
  s.beginStep();
  try {
    s.gradReady(7);
    FAIL() << "no throw";
  } catch (const strata::Exception& e) {
    EXPECT_EQ(e.code(), strataInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
  EXPECT_THROW(s.gradReady(-1), strata::Exception);
  s.gradReady(0);
  EXPECT_THROW(s.gradReady(0), strata::Exception);  // twice
  // finish() with h.2.mlp.w1 (bucket 0) and p1 never marked ready: names the bucket and the parameters.
  try {
    s.finish();
    FAIL() << "no throw";
  } catch (const strata::Exception& e) {
    EXPECT_EQ(e.code(), strataInvalidUsage);
    const std::string m = e.what();
    EXPECT_NE(m.find("bucket 0"), std::string::npos) << m;
    EXPECT_NE(m.find("h.2.mlp.w1"), std::string::npos) << m;
  }
  EXPECT_TRUE(s.launchOrder().empty());  // nothing partial went out
  s.gradReady(1);
  s.gradReady(2);
  s.finish();
  EXPECT_THROW(s.bucketElems(3), strata::Exception);
  EXPECT_THROW(s.allGatherParams(s.gradBuffer()), strata::Exception);  // all-reduce mode
}

TEST(Overlap, TraceHasComputeAndCommLanes) {
  auto comm = oneRank();
  OverlapScheduler s(comm, opts(400, 400));
  s.addParameter("p0", 100);
  s.addParameter("p1", 100);
  s.beginStep();
  s.gradReady(1);
  s.gradReady(0);
  s.finish();
  const std::string path = ::testing::TempDir() + "/strata_overlap_trace.json";
  s.writeTrace(path);
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string t = ss.str();
  EXPECT_EQ(t.front(), '[');
  EXPECT_NE(t.find("\"tid\":0"), std::string::npos);
  EXPECT_NE(t.find("\"tid\":1"), std::string::npos);
  EXPECT_NE(t.find("all_reduce bucket 1"), std::string::npos) << t;
  EXPECT_NE(t.find("\"ph\":\"X\""), std::string::npos);
  std::remove(path.c_str());
}

// Reduce-scatter mode on 3 ranks (threads): buckets padded to a multiple of 3, padding zero, each rank's
// shard the average, and allGatherParams() restoring full buckets.
TEST(Overlap, ReduceScatterPaddingShardsAndAllGather) {
  const int n = 3;
  const auto id = strata::Communicator::uniqueId();
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        strata::Communicator comm(n, id, r);
        OverlapScheduler s(comm, opts(40, 40, OverlapOptions::Mode::kReduceScatter));
        s.addParameter("a", 7);
        s.addParameter("b", 5);
        s.addParameter("c", 10);  // bucket 0: c (10 -> 12), bucket 1: b (5 -> 6), bucket 2: a (7 -> 9)
        auto fail = [&](const std::string& m) { errors[r] += m + "; "; };
        if (s.numBuckets() != 3) fail("numBuckets " + std::to_string(s.numBuckets()));
        const size_t want[] = {12, 6, 9};
        size_t off = 0;
        for (int b = 0; b < 3; ++b) {
          if (s.bucketElems(b) != want[b]) fail("bucket elems");
          if (s.bucketOffset(b) != off) fail("bucket offset");
          if (s.shardElems(b) != want[b] / n) fail("shard elems");
          if (s.shardOffset(b) != off + r * want[b] / n) fail("shard offset");
          off += want[b];
        }
        if (s.gradElems() != 27) fail("gradElems");
        for (int step = 0; step < 2; ++step) {
          s.beginStep();
          for (int p = 0; p < 3; ++p) {
            const size_t pn = p == 0 ? 7 : p == 1 ? 5 : 10;
            for (size_t i = 0; i < pn; ++i) s.grad(p)[i] = static_cast<float>(3 * (r + 1) * (i + 1) + step);
          }
          s.gradReady(1);
          s.gradReady(0);
          s.gradReady(2);
          s.finish();
          // Expected average: 3*(i+1)*(1+2+3)/3 + step = 6*(i+1) + step, in the parameter's own positions.
          std::vector<float> expect(s.gradElems(), 0.0f);
          for (int p = 0; p < 3; ++p) {
            const size_t pn = p == 0 ? 7 : p == 1 ? 5 : 10;
            const size_t po = static_cast<size_t>(s.grad(p) - s.gradBuffer());
            for (size_t i = 0; i < pn; ++i) expect[po + i] = static_cast<float>(6 * (i + 1) + step);
          }
          for (int b = 0; b < 3; ++b)
            for (size_t i = s.shardOffset(b); i < s.shardOffset(b) + s.shardElems(b); ++i)
              if (s.gradBuffer()[i] != expect[i]) fail("shard value at " + std::to_string(i));
          // "Updated parameters": the shard values; all-gather rebuilds every bucket on every rank.
          std::vector<float> params(s.gradElems(), -1.0f);
          for (int b = 0; b < 3; ++b)
            for (size_t i = s.shardOffset(b); i < s.shardOffset(b) + s.shardElems(b); ++i)
              params[i] = s.gradBuffer()[i];
          s.allGatherParams(params.data());
          s.waitParams();
          if (params != expect) fail("all-gathered params differ");
        }
      } catch (const std::exception& e) {
        errors[r] += e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

}  // namespace

namespace {

// On one rank a compressed step is a round trip through the wire type: the scheduler's bf16 conversion
// (branch-free, vectorized) must match the reference conversion in kernels/reduce.h bit for bit.
TEST(Overlap, CompressedRoundTripMatchesReferenceConversion) {
  auto comm = oneRank();
  for (strataDataType_t wire : {strataBfloat16, strataFloat16}) {
    auto o = opts(1 << 12, 1 << 14);
    o.wireType = wire;
    OverlapScheduler s(comm, o);
    s.addParameter("w", 5000);
    s.addParameter("b", 1234);
    std::vector<float> in(s.gradElems());
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-3e4f, 3e4f);
    for (size_t i = 0; i < in.size(); ++i) {
      uint32_t bits = static_cast<uint32_t>(rng());
      float f;
      std::memcpy(&f, &bits, 4);
      in[i] = i % 3 == 0 ? f : u(rng);  // every bit pattern (NaN, inf, subnormal) and ordinary values
    }
    in[0] = 1.0f + std::ldexp(1.0f, -8);  // bf16 ties: to even
    in[1] = 1.0f + 3 * std::ldexp(1.0f, -8);
    in[2] = std::numeric_limits<float>::infinity();
    in[3] = -std::numeric_limits<float>::quiet_NaN();
    s.beginStep();
    std::copy(in.begin(), in.end(), s.gradBuffer());
    s.gradReady(0);
    s.gradReady(1);
    s.finish();
    for (size_t i = 0; i < in.size(); ++i) {
      const float want = wire == strataBfloat16 ? strata::bf16ToFloat(strata::floatToBf16(in[i]))
                                                : strata::halfToFloat(strata::floatToHalf(in[i]));
      const float got = s.gradBuffer()[i];
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(got)) << i;
      } else {
        ASSERT_EQ(got, want) << "element " << i << " input " << in[i];
      }
    }
  }
}

}  // namespace
