// The compute/communication overlap scheduler (include/strata/overlap.hpp). A consumer of the public C++
// API: every collective goes out through strata::Communicator::*Async and is tracked by a strata::Work.
//
// Layout: parameters are walked in reverse registration order and packed into buckets (the first up to
// firstBucketBytes, later ones up to bucketCapBytes; a parameter larger than the limit gets a bucket of its
// own). The flat gradient buffer holds the buckets one after another, each contiguous, so a bucket's
// collective runs in place on a view of the buffer. In reduce-scatter mode each bucket is padded (zeros) to
// a multiple of nranks elements; rank r owns [offset + r*elems/n, offset + (r+1)*elems/n).
//
// Launch rule: bucket b goes out when all its parameters are ready and buckets 0..b-1 have gone out, so every
// rank issues the same collectives in the same order whatever order its gradients become ready in.
// Averaging is a sum followed by a division by n when the completion is observed (not strataAvg's
// pre-multiplication), so integer-valued gradients average exactly and every rank gets the same bits.
#include "strata/overlap.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "util/dtype_codec.h"
#include "util/json_escape.h"

namespace strata {

namespace {

using Clock = std::chrono::steady_clock;

double usSince(Clock::time_point base, Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(t - base).count();
}

}  // namespace

struct OverlapScheduler::Impl {
  struct Param {
    std::string name;
    size_t numel = 0;
    size_t offset = 0;  // in the flat buffer
    int bucket = -1;
    bool ready = false;
  };
  struct Bucket {
    std::vector<int> params;  // reverse registration order
    size_t offset = 0;
    size_t elems = 0;      // padded in reduce-scatter mode
    size_t dataElems = 0;  // without padding
    int pending = 0;       // parameters not yet ready this step
    bool launched = false;
    bool complete = false;
    Work work;
    Clock::time_point launchT, completeT;
  };
  struct TraceEvent {
    std::string name;
    int tid;
    Clock::time_point begin, end;
  };

  Communicator own;    // the scheduler's private communicator (OverlapOptions::ownCommunicator)
  Communicator& comm;  // `own`, or the caller's
  OverlapOptions opt;
  int rank = 0, nranks = 1;
  std::vector<Param> params;
  std::vector<Bucket> buckets;
  bool laidOut = false;
  std::vector<float> flat;
  std::vector<uint16_t> staging;  // wire-format copy of the gradients (compression only)
  std::vector<int> launchOrder;

  // Per step.
  bool inStep = false;
  bool failed = false;  // a timeout left collectives in flight: the scheduler cannot be used again
  int nextLaunch = 0;
  int readyCount = 0;
  Clock::time_point stepBegin, lastReady, finishBegin, finishEnd;
  OverlapStats last;

  // all-gather of parameters
  std::vector<Work> paramWorks;
  std::vector<Clock::time_point> paramLaunchT;

  // Trace events of every step, up to kMaxTraceEvents (then further ones are counted, not kept).
  static constexpr size_t kMaxTraceEvents = size_t{1} << 20;
  std::vector<TraceEvent> trace;
  size_t traceDropped = 0;
  void addTrace(std::string name, int tid, Clock::time_point b, Clock::time_point e) {
    if (trace.size() < kMaxTraceEvents) trace.push_back({std::move(name), tid, b, e});
    else ++traceDropped;
  }
  Clock::time_point epoch = Clock::now();
  double wallEpochUs =
      std::chrono::duration<double, std::micro>(std::chrono::system_clock::now().time_since_epoch()).count();

  Impl(Communicator& c, OverlapOptions o)
      : own(o.ownCommunicator ? c.split(0, c.rank()) : Communicator()), comm(o.ownCommunicator ? own : c), opt(o) {
    rank = comm.rank();
    nranks = comm.size();
    if (opt.wireType != strataFloat32 && opt.wireType != strataBfloat16 && opt.wireType != strataFloat16)
      throw Exception(strataInvalidArgument, "overlap: wireType must be float32, bfloat16 or float16");
    if (opt.firstBucketBytes == 0 || opt.bucketCapBytes == 0)
      throw Exception(strataInvalidArgument, "overlap: bucket sizes must be positive");
  }

  bool rsMode() const { return opt.mode == OverlapOptions::Mode::kReduceScatter; }
  bool compressed() const { return opt.wireType != strataFloat32; }

  void layout() {
    if (laidOut) return;
    laidOut = true;
    const size_t n = static_cast<size_t>(nranks);
    size_t off = 0;
    Bucket cur;
    size_t curBytes = 0;
    auto close = [&] {
      cur.dataElems = 0;
      for (int p : cur.params) cur.dataElems += params[p].numel;
      cur.elems = rsMode() ? (cur.dataElems + n - 1) / n * n : cur.dataElems;
      cur.offset = off;
      size_t po = off;
      for (int p : cur.params) {
        params[p].offset = po;
        params[p].bucket = static_cast<int>(buckets.size());
        po += params[p].numel;
      }
      off += cur.elems;
      buckets.push_back(std::move(cur));
      cur = Bucket();
      curBytes = 0;
    };
    for (int p = static_cast<int>(params.size()) - 1; p >= 0; --p) {
      const size_t bytes = params[p].numel * sizeof(float);
      const size_t limit = buckets.empty() ? opt.firstBucketBytes : opt.bucketCapBytes;
      if (!cur.params.empty() && curBytes + bytes > limit) close();
      cur.params.push_back(p);
      curBytes += bytes;
    }
    if (!cur.params.empty()) close();
    flat.assign(off, 0.0f);
    if (compressed()) staging.assign(off, 0);
  }

  void checkIndex(int p, const char* what) const {
    if (p < 0 || static_cast<size_t>(p) >= params.size())
      throw Exception(strataInvalidArgument, std::string("overlap: ") + what + ": parameter index " +
                                                 std::to_string(p) + " out of range (" + std::to_string(params.size()) +
                                                 " registered)");
  }
  void checkBucket(int b) {
    layout();
    if (b < 0 || static_cast<size_t>(b) >= buckets.size())
      throw Exception(strataInvalidArgument, "overlap: bucket index " + std::to_string(b) + " out of range (" +
                                                 std::to_string(buckets.size()) + " buckets)");
  }
  void checkUsable() const {
    if (failed)
      throw Exception(strataInvalidUsage,
                      "overlap: a previous finish() failed with collectives in flight; the scheduler (and its "
                      "communicator) must be abandoned");
  }

  std::string names(const std::vector<int>& ps, size_t maxNames = 8) const {
    std::string s;
    for (size_t i = 0; i < ps.size(); ++i) {
      if (i == maxNames) {
        s += ", ... (" + std::to_string(ps.size() - maxNames) + " more)";
        break;
      }
      if (i) s += ", ";
      s += params[ps[i]].name;
    }
    return s;
  }
  std::vector<int> notReady(const Bucket& b) const {
    std::vector<int> out;
    for (int p : b.params)
      if (!params[p].ready) out.push_back(p);
    return out;
  }
  std::string bucketName(int b) const {
    return "bucket " + std::to_string(b) + " (params: " + names(buckets[b].params) + ")";
  }

  size_t shardElems(int b) const { return rsMode() ? buckets[b].elems / nranks : buckets[b].elems; }
  size_t shardOffset(int b) const {
    return rsMode() ? buckets[b].offset + static_cast<size_t>(rank) * shardElems(b) : buckets[b].offset;
  }

  void launch(int bi) {
    Bucket& b = buckets[bi];
    float* g = flat.data() + b.offset;
    const size_t n = b.elems;
    const size_t shard = shardElems(bi), mine = static_cast<size_t>(rank) * shard;
    b.launchT = Clock::now();
    try {
      if (!compressed()) {
        b.work = rsMode() ? comm.reduceScatterAsync(g, g + mine, shard, strataFloat32, strataSum)
                          : comm.allReduceAsync(g, g, n, strataFloat32, strataSum);
      } else {
        // f16 is pre-scaled by 1/n (its range is small: the sum of n gradients could overflow); bf16 has
        // float32's range and is divided after the sum.
        uint16_t* s = staging.data() + b.offset;
        if (opt.wireType == strataFloat16) {
          const float inv = 1.0f / static_cast<float>(nranks);
          for (size_t i = 0; i < n; ++i) s[i] = static_cast<uint16_t>(dtype_codec::Half::encode(g[i] * inv));
        } else {
          for (size_t i = 0; i < n; ++i) s[i] = dtype_codec::Bf16::encode(g[i]);
        }
        b.work = rsMode() ? comm.reduceScatterAsync(s, s + mine, shard, opt.wireType, strataSum)
                          : comm.allReduceAsync(s, s, n, opt.wireType, strataSum);
      }
    } catch (const Exception& e) {
      // This rank's collectives no longer match its peers': the scheduler cannot go on.
      failed = true;
      throw Exception(e.code(), "overlap: launching " + bucketName(bi) + " failed: " + e.what());
    }
    b.launched = true;
    launchOrder.push_back(bi);
  }

  // The result of bucket b is in place: average (and widen from the wire type).
  void complete(int bi, Clock::time_point t) {
    Bucket& b = buckets[bi];
    b.complete = true;
    b.completeT = t;
    const size_t off = shardOffset(bi), n = shardElems(bi);
    float* g = flat.data() + off;
    const float div = static_cast<float>(nranks);
    if (!compressed()) {
      if (nranks > 1)
        for (size_t i = 0; i < n; ++i) g[i] /= div;
    } else if (opt.wireType == strataFloat16) {
      const uint16_t* s = staging.data() + off;
      for (size_t i = 0; i < n; ++i) g[i] = dtype_codec::Half::decode(s[i]);
    } else {
      const uint16_t* s = staging.data() + off;
      for (size_t i = 0; i < n; ++i) g[i] = dtype_codec::Bf16::decode(s[i]) / div;
    }
    addTrace(std::string(rsMode() ? "reduce_scatter" : "all_reduce") + " bucket " + std::to_string(bi) + " (" +
                 std::to_string(b.elems * (compressed() ? 2 : sizeof(float))) + " B)",
             1, b.launchT, t);
  }

  // Records completions (in issue order: a communicator runs its work in order).
  void poll() {
    for (size_t bi = 0; bi < buckets.size(); ++bi) {
      Bucket& b = buckets[bi];
      if (!b.launched) break;
      if (b.complete) continue;
      bool done;
      try {
        done = b.work.test();
      } catch (const Exception& e) {
        failed = true;
        throw Exception(e.code(), "overlap: " + bucketName(static_cast<int>(bi)) + " failed: " + e.what());
      }
      if (!done) break;
      complete(static_cast<int>(bi), Clock::now());
    }
  }

  void launchReady() {
    while (nextLaunch < static_cast<int>(buckets.size()) && buckets[nextLaunch].pending == 0) launch(nextLaunch++);
  }

  // Whether some collective may still write into our buffers (failed work has stopped).
  static bool running(Work& w) {
    try {
      return !w.test();
    } catch (const Exception&) {
      return false;
    }
  }
  bool anyInFlight() {
    for (auto& b : buckets)
      if (b.launched && !b.complete && running(b.work)) return true;
    for (auto& w : paramWorks)
      if (running(w)) return true;
    return false;
  }

  void beginStep() {
    checkUsable();
    layout();
    if (inStep) throw Exception(strataInvalidUsage, "overlap: beginStep() called twice without finish()");
    for (auto& p : params) p.ready = false;
    for (auto& b : buckets) {
      b.pending = static_cast<int>(b.params.size());
      b.launched = b.complete = false;
      b.work = Work();
      // Re-zero the padding: an in-place reduce-scatter may leave partial sums in the blocks it does not own.
      std::fill(flat.begin() + static_cast<std::ptrdiff_t>(b.offset + b.dataElems),
                flat.begin() + static_cast<std::ptrdiff_t>(b.offset + b.elems), 0.0f);
    }
    launchOrder.clear();
    nextLaunch = 0;
    readyCount = 0;
    inStep = true;
    stepBegin = lastReady = Clock::now();
  }

  void gradReady(int p) {
    checkUsable();
    checkIndex(p, "gradReady");
    if (!inStep) throw Exception(strataInvalidUsage, "overlap: gradReady() outside beginStep()/finish()");
    Param& pr = params[p];
    if (pr.ready) throw Exception(strataInvalidUsage, "overlap: gradReady(" + pr.name + ") called twice in one step");
    pr.ready = true;
    ++readyCount;
    lastReady = Clock::now();
    --buckets[pr.bucket].pending;
    poll();
    if (opt.overlap) launchReady();
  }

  void finish() {
    checkUsable();
    if (!inStep) throw Exception(strataInvalidUsage, "overlap: finish() without beginStep()");
    finishBegin = Clock::now();
    // Every gradient of this rank must be ready; otherwise launching would leave the ranks' collectives
    // mismatched. Nothing partial is launched.
    for (size_t bi = 0; bi < buckets.size(); ++bi) {
      std::vector<int> missing = notReady(buckets[bi]);
      if (!missing.empty())
        throw Exception(strataInvalidUsage,
                        "overlap: finish() with " + bucketName(static_cast<int>(bi)) +
                            " incomplete on this rank; parameters never marked ready: " + names(missing));
    }
    if (readyCount == 0) lastReady = finishBegin;
    launchReady();
    const auto deadline = finishBegin + std::chrono::milliseconds(opt.timeoutMs < 0 ? 0 : opt.timeoutMs);
    for (size_t bi = 0; bi < buckets.size(); ++bi) {
      Bucket& b = buckets[bi];
      if (b.complete) continue;
      int64_t waitMs = -1;
      if (opt.timeoutMs >= 0) {
        waitMs = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (waitMs < 0) waitMs = 0;
      }
      bool done;
      try {
        done = b.work.wait(waitMs);
      } catch (const Exception& e) {
        failed = true;
        throw Exception(e.code(), "overlap: " + bucketName(static_cast<int>(bi)) + " failed: " + e.what());
      }
      if (!done) {
        failed = true;
        std::vector<int> missing = notReady(b);
        throw Exception(strataTimeout,
                        "overlap: " + bucketName(static_cast<int>(bi)) + " not complete after " +
                            std::to_string(opt.timeoutMs) + " ms; parameters never marked ready on this rank: " +
                            (missing.empty() ? std::string("none (a peer has not marked all its gradients ready "
                                                           "or has not reached finish())")
                                             : names(missing)));
      }
      complete(static_cast<int>(bi), Clock::now());
    }
    finishEnd = Clock::now();
    inStep = false;
    computeStats();
  }

  void computeStats() {
    OverlapStats s;
    s.buckets = static_cast<int>(buckets.size());
    s.computeUs = usSince(stepBegin, lastReady);
    // Union of [launch, complete] intervals; buckets launch and complete in order, but merge generally.
    std::vector<std::pair<Clock::time_point, Clock::time_point>> iv;
    for (auto& b : buckets) iv.push_back({b.launchT, b.completeT});
    std::sort(iv.begin(), iv.end());
    double total = 0;
    for (size_t i = 0; i < iv.size();) {
      auto lo = iv[i].first, hi = iv[i].second;
      size_t j = i + 1;
      while (j < iv.size() && iv[j].first <= hi) hi = std::max(hi, iv[j++].second);
      total += usSince(lo, hi);
      i = j;
    }
    s.commUs = total;
    // Exposed: what finish() waited for after the last gradient, but never more than the communication.
    s.exposedCommUs = buckets.empty() ? 0.0 : std::min(usSince(finishBegin, finishEnd), s.commUs);
    s.overlapPercent = s.commUs > 0 ? 100.0 * (s.commUs - s.exposedCommUs) / s.commUs : 0.0;
    s.overlapPercent = std::clamp(s.overlapPercent, 0.0, 100.0);
    last = s;
    addTrace("backward (compute)", 0, stepBegin, lastReady);
    addTrace("finish (exposed wait)", 0, finishBegin, finishEnd);
  }

  void allGatherParams(float* p) {
    checkUsable();
    layout();
    if (!rsMode()) throw Exception(strataInvalidUsage, "overlap: allGatherParams() is for reduce-scatter mode");
    if (!p) throw Exception(strataInvalidArgument, "overlap: allGatherParams(nullptr)");
    if (!paramWorks.empty())
      throw Exception(strataInvalidUsage, "overlap: allGatherParams() twice without waitParams()");
    for (size_t bi = 0; bi < buckets.size(); ++bi) {
      const size_t n = shardElems(static_cast<int>(bi));
      float* base = p + buckets[bi].offset;
      paramLaunchT.push_back(Clock::now());
      paramWorks.push_back(comm.allGatherAsync(base + static_cast<size_t>(rank) * n, base, n, strataFloat32));
    }
  }

  void waitParams() {
    checkUsable();
    for (size_t bi = 0; bi < paramWorks.size(); ++bi) {
      bool done;
      try {
        done = paramWorks[bi].wait(opt.timeoutMs);
      } catch (const Exception& e) {
        failed = true;
        throw Exception(e.code(),
                        "overlap: all-gather of " + bucketName(static_cast<int>(bi)) + " failed: " + e.what());
      }
      if (!done) {
        failed = true;
        throw Exception(strataTimeout, "overlap: all-gather of " + bucketName(static_cast<int>(bi)) +
                                           " not complete after " + std::to_string(opt.timeoutMs) + " ms");
      }
      addTrace("all_gather bucket " + std::to_string(bi), 1, paramLaunchT[bi], Clock::now());
    }
    paramWorks.clear();
    paramLaunchT.clear();
  }

  // This rank's events as JSON objects, one per line, each followed by ",\n" except the last.
  std::string traceEvents() const {
    std::string out;
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}},\n"
                  "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"compute\"}},\n"
                  "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"args\":{\"name\":\"comm\"}}",
                  rank, rank, rank, rank);
    out += buf;
    for (const auto& e : trace) {
      std::snprintf(buf, sizeof buf, ",\n{\"name\":%s,\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d}",
                    jsonString(e.name).c_str(), wallEpochUs + usSince(epoch, e.begin), usSince(e.begin, e.end), rank,
                    e.tid);
      out += buf;
    }
    return out;
  }

  static void writeFile(const std::string& path, const std::string& body) {
    FILE* f = std::fopen(path.c_str(), "w");
    if (!f) throw Exception(strataSystemError, "overlap: cannot write trace " + path + ": " + std::strerror(errno));
    const bool ok = std::fwrite(body.data(), 1, body.size(), f) == body.size();
    if (std::fclose(f) != 0 || !ok) throw Exception(strataSystemError, "overlap: error writing trace " + path);
  }

  void writeTrace(const std::string& path) const { writeFile(path, "[\n" + traceEvents() + "\n]\n"); }

  // Collective: every rank's events gathered to rank 0, which writes one file with a lane pair per rank.
  void writeTraceAllRanks(const std::string& path) {
    const std::string mine = traceEvents();
    std::vector<uint64_t> lens(static_cast<size_t>(nranks));
    const uint64_t myLen = mine.size();
    comm.allGather(&myLen, lens.data(), 1, strataUint64);
    const uint64_t maxLen = *std::max_element(lens.begin(), lens.end());
    std::vector<char> send(maxLen, ' '), all(maxLen * static_cast<size_t>(nranks));
    std::memcpy(send.data(), mine.data(), mine.size());
    comm.allGather(send.data(), all.data(), maxLen, strataUint8);
    if (rank != 0) return;
    std::string body = "[\n";
    for (int r = 0; r < nranks; ++r) {
      if (r) body += ",\n";
      body.append(all.data() + static_cast<size_t>(r) * maxLen, lens[r]);
    }
    body += "\n]\n";
    writeFile(path, body);
  }
};

OverlapScheduler::OverlapScheduler(Communicator& comm, OverlapOptions options) : impl_(new Impl(comm, options)) {}

OverlapScheduler::~OverlapScheduler() {
  // Collectives still in flight (finish() timed out, or was never called) write into our buffers. With a
  // private communicator, abort it: that stops the work, and the buffers can go. On the caller's
  // communicator, leak them rather than free memory its worker may still touch.
  bool inFlight = impl_->anyInFlight();
  if (inFlight && impl_->own) {
    impl_->own.abort();
    inFlight = false;
  }
  if (!inFlight) delete impl_;
}

int OverlapScheduler::addParameter(const std::string& name, size_t numel) {
  if (impl_->laidOut)
    throw Exception(strataInvalidUsage, "overlap: addParameter(" + name +
                                            ") after the layout was fixed "
                                            "(first beginStep() or layout query)");
  impl_->params.push_back({name, numel, 0, -1, false});
  return static_cast<int>(impl_->params.size()) - 1;
}

float* OverlapScheduler::grad(int p) {
  impl_->checkIndex(p, "grad");
  impl_->layout();
  return impl_->flat.data() + impl_->params[p].offset;
}
float* OverlapScheduler::gradBuffer() {
  impl_->layout();
  return impl_->flat.data();
}
size_t OverlapScheduler::gradElems() const {
  impl_->layout();
  return impl_->flat.size();
}
int OverlapScheduler::numBuckets() const {
  impl_->layout();
  return static_cast<int>(impl_->buckets.size());
}
const std::vector<int>& OverlapScheduler::bucketParams(int b) const {
  impl_->checkBucket(b);
  return impl_->buckets[b].params;
}
size_t OverlapScheduler::bucketOffset(int b) const {
  impl_->checkBucket(b);
  return impl_->buckets[b].offset;
}
size_t OverlapScheduler::bucketElems(int b) const {
  impl_->checkBucket(b);
  return impl_->buckets[b].elems;
}
size_t OverlapScheduler::shardOffset(int b) const {
  impl_->checkBucket(b);
  return impl_->shardOffset(b);
}
size_t OverlapScheduler::shardElems(int b) const {
  impl_->checkBucket(b);
  return impl_->shardElems(b);
}
void OverlapScheduler::beginStep() { impl_->beginStep(); }
void OverlapScheduler::gradReady(int p) { impl_->gradReady(p); }
void OverlapScheduler::finish() { impl_->finish(); }
OverlapStats OverlapScheduler::stats() const { return impl_->last; }
void OverlapScheduler::allGatherParams(float* params) { impl_->allGatherParams(params); }
void OverlapScheduler::waitParams() { impl_->waitParams(); }
void OverlapScheduler::writeTrace(const std::string& path) const { impl_->writeTrace(path); }
void OverlapScheduler::writeTraceAllRanks(const std::string& path) { impl_->writeTraceAllRanks(path); }
const std::vector<int>& OverlapScheduler::launchOrder() const { return impl_->launchOrder; }
int OverlapScheduler::paramBucket(int p) const {
  impl_->checkIndex(p, "paramBucket");
  impl_->layout();
  return impl_->params[p].bucket;
}

}  // namespace strata
