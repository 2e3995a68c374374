#include "grad_sync.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#ifdef STRAIN_HAVE_OVERLAP
#include "strata/overlap.hpp"
#endif

namespace strain {

namespace {
using Clock = std::chrono::steady_clock;
double msSince(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

/// The baseline: gradients accumulate in one flat buffer; after backward a single all-reduce (average), or a
/// reduce-scatter (average) under ZeRO, over the whole buffer.
class PlainGradSync : public GradSync {
 public:
  PlainGradSync(strata::Communicator* dp, bool zero) : dp_(dp), zero_(zero) {
    n_ = dp ? dp->size() : 1;
    r_ = dp ? dp->rank() : 0;
  }
  void layout(const std::vector<std::string>&, const std::vector<size_t>& numels) override {
    size_t off = 0;
    for (size_t n : numels) {
      offsets_.push_back(off);
      off += n;
    }
    total_ = (off + n_ - 1) / n_ * n_;  // padded so the buffer splits evenly into DP shards
    buf_.assign(total_, 0.f);
  }
  size_t offset(int p) const override { return offsets_[p]; }
  size_t totalElems() const override { return total_; }
  float* gradBuffer() override { return buf_.data(); }
  void beginStep() override {
    std::memset(buf_.data(), 0, buf_.size() * sizeof(float));
    stats_ = {};
  }
  void gradReady(int) override {}
  void finish() override {
    if (n_ == 1) return;
    auto t0 = Clock::now();
    size_t chunk = total_ / n_;
    if (zero_) dp_->reduceScatter(buf_.data(), buf_.data() + r_ * chunk, chunk, strataFloat32, strataAvg);
    else dp_->allReduce(buf_.data(), buf_.data(), total_, strataFloat32, strataAvg);
    stats_.commMs = stats_.exposedMs = msSince(t0);
  }
  std::vector<std::pair<size_t, size_t>> ownedRanges() const override {
    if (!zero_ || n_ == 1) return {{0, total_}};
    size_t chunk = total_ / n_;
    return {{r_ * chunk, chunk}};
  }
  void allGatherParams(float* params) override {
    if (!zero_ || n_ == 1) return;
    auto t0 = Clock::now();
    size_t chunk = total_ / n_;
    dp_->allGather(params + r_ * chunk, params, chunk, strataFloat32);
    double ms = msSince(t0);
    stats_.commMs += ms;
    stats_.exposedMs += ms;
  }
  SyncStats stats() const override { return stats_; }

 private:
  strata::Communicator* dp_;
  bool zero_;
  size_t n_, r_, total_ = 0;
  std::vector<size_t> offsets_;
  std::vector<float> buf_;
  SyncStats stats_;
};

#ifdef STRAIN_HAVE_OVERLAP
/// Through strata::OverlapScheduler: buckets launch during backward as gradReady() completes them.
class OverlapGradSync : public GradSync {
 public:
  OverlapGradSync(strata::Communicator& dp, bool zero, bool overlap, size_t bucketCapBytes) : zero_(zero) {
    strata::OverlapOptions o;
    o.bucketCapBytes = bucketCapBytes;
    o.firstBucketBytes = std::min(o.firstBucketBytes, bucketCapBytes);
    o.mode = zero ? strata::OverlapOptions::Mode::kReduceScatter : strata::OverlapOptions::Mode::kAllReduceAverage;
    o.overlap = overlap;
    sched_ = std::make_unique<strata::OverlapScheduler>(dp, o);
  }
  void layout(const std::vector<std::string>& names, const std::vector<size_t>& numels) override {
    for (size_t i = 0; i < names.size(); ++i) sched_->addParameter(names[i], numels[i]);
    sched_->beginStep();  // lays out the buffer
  }
  size_t offset(int p) const override { return size_t(sched_->grad(p) - sched_->gradBuffer()); }
  size_t totalElems() const override { return sched_->gradElems(); }
  float* gradBuffer() override { return sched_->gradBuffer(); }
  void beginStep() override {
    if (!first_) sched_->beginStep();
    first_ = false;
    std::memset(sched_->gradBuffer(), 0, sched_->gradElems() * sizeof(float));
  }
  void gradReady(int p) override { sched_->gradReady(p); }
  void finish() override { sched_->finish(); }
  std::vector<std::pair<size_t, size_t>> ownedRanges() const override {
    std::vector<std::pair<size_t, size_t>> r;
    if (!zeroMode()) return {{0, sched_->gradElems()}};
    for (int b = 0; b < sched_->numBuckets(); ++b) r.push_back({sched_->shardOffset(b), sched_->shardElems(b)});
    return r;
  }
  void allGatherParams(float* params) override {
    if (!zeroMode()) return;
    sched_->allGatherParams(params);
    sched_->waitParams();
  }
  SyncStats stats() const override {
    auto s = sched_->stats();
    return {s.commUs / 1000.0, s.exposedCommUs / 1000.0, s.overlapPercent};
  }
  bool writeTrace(const std::string& path) override {
    sched_->writeTraceAllRanks(path);
    return true;
  }

 private:
  bool zeroMode() const { return zero_; }
  bool zero_;
  std::unique_ptr<strata::OverlapScheduler> sched_;
  bool first_ = true;
};
#endif
}  // namespace

bool haveOverlapScheduler() {
#ifdef STRAIN_HAVE_OVERLAP
  return true;
#else
  return false;
#endif
}

std::unique_ptr<GradSync> makeGradSync(strata::Communicator* dp, bool zero, bool overlap, size_t bucketCapBytes) {
#ifdef STRAIN_HAVE_OVERLAP
  if (dp) return std::make_unique<OverlapGradSync>(*dp, zero, overlap, bucketCapBytes);
#endif
  (void)overlap;
  (void)bucketCapBytes;
  return std::make_unique<PlainGradSync>(dp, zero);
}

}  // namespace strain
