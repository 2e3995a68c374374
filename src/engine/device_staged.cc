// The staged path of the device engine: device buffers through pinned host memory and the host executor.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "engine/device_engine.h"
#include "engine/device_engine_detail.h"
#include "util/config.h"
#include "util/error.h"
#include "util/log.h"

namespace strata {

using namespace device_detail;

DeviceEngine::Slot& DeviceEngine::freeSlot(size_t bytes) {
  auto isFree = [&](Slot& s) {
    {
      std::lock_guard<std::mutex> lk(s.mutex);
      if (!s.hostDone) return false;
    }
    return api_.eventQuery(s.done) == 0;
  };
  for (auto& s : slots_)
    if (s->capacity >= bytes && isFree(*s)) return *s;
  // Too many slots in flight: wait for the oldest instead of growing without bound.
  if (slots_.size() >= 64) {
    Slot& oldest = *slots_.front();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(host_.config().timeoutMs);
    while (!isFree(oldest)) {
      if (std::chrono::steady_clock::now() > deadline)
        throw TimeoutError(strprintf("rank %d: 64 device collectives in flight and none finished within %lld ms",
                                     host_.rank(), static_cast<long long>(host_.config().timeoutMs)));
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (oldest.capacity < bytes) {
      api_.hostFree(oldest.host);
      oldest.host = nullptr;
      oldest.capacity = 0;
      check(api_.hostAllocMapped(&oldest.host, &oldest.hostDev, bytes), "cudaHostAlloc (staging)");
      oldest.capacity = bytes;
    }
    slots_.push_back(std::move(slots_.front()));
    slots_.pop_front();
    return *slots_.back();
  }
  auto s = std::make_unique<Slot>();
  s->api = &api_;
  const size_t cap = std::max<size_t>(alignUp(bytes, 4096), 4096);
  check(api_.hostAllocMapped(&s->host, &s->hostDev, cap), "cudaHostAlloc (staging)");
  s->capacity = cap;
  check(api_.hostAllocMapped(&s->flagHost, &s->flagDev, 64), "cudaHostAlloc (flag)");
  s->flag = static_cast<uint32_t*>(s->flagHost);
  __atomic_store_n(s->flag, 0u, __ATOMIC_RELEASE);
  check(api_.eventCreate(&s->done), "cudaEventCreate");
  check(api_.eventCreate(&s->outDone), "cudaEventCreate");
  slots_.push_back(std::move(s));
  return *slots_.back();
}

void DeviceEngine::enqueueStaged(std::span<const CollCall> calls, void* stream) {
  // Every buffer range the calls touch, merged where they overlap, so in-place layouts stay in place in the
  // host copies. Inputs are copied to the host, outputs back; a range can be both.
  struct Range {
    const char* begin;
    const char* end;
    bool in, out;
    size_t offset;  // in the slot
  };
  std::vector<Range> ranges;
  for (const CollCall& c : calls) {
    size_t sendElems = 0, recvElems = 0;
    callBufferElems(c, host_.size(), host_.rank(), &sendElems, &recvElems);
    const size_t esize = dtypeSize(c.dtype);
    if (sendElems && c.sendbuff) {
      const char* b = static_cast<const char*>(c.sendbuff);
      ranges.push_back(Range{b, b + sendElems * esize, true, false, 0});
    }
    if (recvElems && c.recvbuff) {
      const char* b = static_cast<const char*>(c.recvbuff);
      ranges.push_back(Range{b, b + recvElems * esize, false, true, 0});
    }
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  std::vector<Range> merged;
  for (const Range& r : ranges) {
    if (!merged.empty() && r.begin < merged.back().end) {
      merged.back().end = std::max(merged.back().end, r.end);
      merged.back().in |= r.in;
      merged.back().out |= r.out;
    } else {
      merged.push_back(r);
    }
  }
  size_t total = 0;
  for (Range& r : merged) {
    r.offset = total;
    total += alignUp(static_cast<size_t>(r.end - r.begin), kAlign);
  }
  Slot& slot = freeSlot(std::max<size_t>(total, 1));
  char* host = static_cast<char*>(slot.host);
  auto toHost = [&](const void* p) -> char* {
    if (!p) return nullptr;
    const char* q = static_cast<const char*>(p);
    for (const Range& r : merged)
      if (q >= r.begin && q < r.end) return host + r.offset + (q - r.begin);
    return host + total;  // a zero-length buffer: any address will do, it is never touched
  };
  std::vector<CollCall> hostCalls(calls.begin(), calls.end());
  for (CollCall& c : hostCalls) {
    c.sendbuff = toHost(c.sendbuff);
    c.recvbuff = toHost(c.recvbuff);
    c.device = false;
    c.stream = nullptr;
  }

  // Parts: the group as one part, or a large all-reduce cut into chunks (all-reduce is element-wise, so a
  // chunk is an all-reduce of its own). Each part's inputs go to the host, the worker runs it, its outputs come
  // back, and the parts pipeline: the network moves chunk i while the copy engines move chunks i+1 in and i-1
  // out.
  struct Span {
    const char* dev;  // device address
    char* host;
    size_t bytes;
  };
  struct Part {
    std::vector<CollCall> calls;
    std::vector<Span> in, out;
  };
  std::vector<Part> parts;
  const size_t chunk = host_.config().gpuStageChunkBytes;
  const CollCall& c0 = calls[0];
  const size_t esize = dtypeSize(c0.dtype);
  if (calls.size() == 1 && c0.kind == CollKind::kAllReduce && chunk > 0 && c0.count * esize > 2 * chunk) {
    const size_t per = std::max<size_t>(1, chunk / esize);
    for (size_t lo = 0; lo < c0.count; lo += per) {
      const size_t n = std::min(per, c0.count - lo);
      Part part;
      CollCall hc = hostCalls[0];
      hc.sendbuff = static_cast<const char*>(hc.sendbuff) + lo * esize;
      hc.recvbuff = static_cast<char*>(hc.recvbuff) + lo * esize;
      hc.count = n;
      part.calls.push_back(hc);
      const char* sd = static_cast<const char*>(c0.sendbuff) + lo * esize;
      const char* rd = static_cast<const char*>(c0.recvbuff) + lo * esize;
      part.in.push_back(Span{sd, toHost(sd), n * esize});
      part.out.push_back(Span{rd, toHost(rd), n * esize});
      parts.push_back(std::move(part));
    }
  } else {
    Part part;
    part.calls = std::move(hostCalls);
    for (const Range& r : merged) {
      const Span sp{r.begin, host + r.offset, static_cast<size_t>(r.end - r.begin)};
      if (r.in) part.in.push_back(sp);
      if (r.out) part.out.push_back(sp);
    }
    parts.push_back(std::move(part));
  }

  {
    std::lock_guard<std::mutex> lk(slot.mutex);
    slot.arrived = 0;
    slot.abandoned = false;
    slot.hostDone = false;
  }
  const uint32_t epochBase = slot.epoch;
  slot.epoch += static_cast<uint32_t>(parts.size());
  // Host side first: the communicator's worker runs each part in issue order with every other call on it, once
  // the stream says its inputs are in host memory. (Queued before the stream work so that nothing depends on
  // the stream operations being asynchronous.)
  Slot* sp = &slot;
  const int64_t timeoutMs = host_.config().timeoutMs;
  const int rank = host_.rank();
  const FailureState* failure = &host_.failure();
  const uint32_t nparts = static_cast<uint32_t>(parts.size());
  for (uint32_t i = 0; i < nparts; ++i) {
    auto before = [sp, timeoutMs, rank, failure, i] {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
      std::unique_lock<std::mutex> lk(sp->mutex);
      // Woken by the stream; every 10 ms also checks for an abort or a peer's failure.
      while (!sp->cv.wait_for(lk, std::chrono::milliseconds(10), [&] { return sp->arrived > i || sp->abandoned; })) {
        if (failure->failed())
          throw Error(failure->code(),
                      strprintf("rank %d: device collective abandoned: %s", rank, failure->message().c_str()));
        if (std::chrono::steady_clock::now() > deadline)
          throw TimeoutError(
              strprintf("rank %d: a device collective's inputs did not reach host memory within %lld "
                        "ms (STRATA_TIMEOUT_MS): is its CUDA stream blocked?",
                        rank, static_cast<long long>(timeoutMs)));
      }
      if (sp->abandoned)
        throw CudaError(strprintf("rank %d: device collective abandoned: enqueueing its stream work failed", rank));
    };
    // Raised whatever happened: a failed collective must not leave the stream waiting forever. The error is the
    // communicator's asynchronous error (strataCommGetAsyncError), as in NCCL.
    const bool last = i + 1 == nparts;
    auto after = [sp, flag = epochBase + i + 1, last](strataResult_t) {
      std::lock_guard<std::mutex> lk(sp->mutex);
      __atomic_store_n(sp->flag, flag, __ATOMIC_RELEASE);
      if (last) sp->hostDone = true;
    };
    try {
      host_.submit(std::move(parts[i].calls), before, after);
    } catch (...) {
      {
        std::lock_guard<std::mutex> lk(slot.mutex);
        slot.abandoned = true;  // parts already queued fail at once
      }
      slot.cv.notify_all();
      __atomic_store_n(slot.flag, epochBase + nparts, __ATOMIC_RELEASE);
      std::lock_guard<std::mutex> lk(slot.mutex);
      slot.hostDone = true;
      throw;
    }
  }
  // GPU side: on the caller's stream, every part's inputs to the host, each followed by a signal to the worker; on
  // the engine's copy-out stream, per part, a wait for its flag and its outputs back, so that part i goes out while
  // part i + 1 comes in. The copy-out stream needs no wait for the caller's: a part's flag is raised only after its
  // inputs arrived, so after the caller's stream reached this call. A part's outputs never overlap a later part's
  // inputs (the parts of a chunked all-reduce are disjoint; a group is one part). Then the caller's stream waits for
  // the copy-out stream, so later work on it sees the results.
  try {
    if (!outStream_) check(api_.streamCreate(&outStream_), "cudaStreamCreate (staging copy-out stream)");
    for (const Part& part : parts) {
      for (const Span& x : part.in)
        check(api_.memcpyAsync(x.host, x.dev, x.bytes, stream), "cudaMemcpyAsync (device to staging)");
      check(api_.launchHostFunc(stream, &Slot::inputsArrived, &slot), "cudaLaunchHostFunc");
    }
    for (uint32_t i = 0; i < nparts; ++i) {
      check(api_.streamWaitValue(outStream_, slot.flagDev, epochBase + i + 1), "stream flag wait");
      for (const Span& x : parts[i].out)
        check(api_.memcpyAsync(const_cast<char*>(x.dev), x.host, x.bytes, outStream_),
              "cudaMemcpyAsync (staging to device)");
    }
    check(api_.eventRecord(slot.outDone, outStream_), "cudaEventRecord (staging copy-out stream)");
    check(api_.streamWaitEvent(stream, slot.outDone), "cudaStreamWaitEvent (staging copy-out stream)");
    check(api_.eventRecord(slot.done, stream), "cudaEventRecord");
  } catch (...) {
    // The slot is not free until whatever was enqueued of this use has run, on both streams: mark its end (best
    // effort; the worker raises the flags, so neither stream stays waiting).
    if (outStream_ && api_.eventRecord(slot.outDone, outStream_) == 0) api_.streamWaitEvent(stream, slot.outDone);
    api_.eventRecord(slot.done, stream);
    // The worker must not wait for inputs that will never come.
    {
      std::lock_guard<std::mutex> lk(slot.mutex);
      slot.abandoned = true;
    }
    slot.cv.notify_all();
    throw;
  }
}

}  // namespace strata
