#include "core/device_engine.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/communicator.h"
#include "util/error.h"
#include "util/log.h"

namespace strata {
namespace {

constexpr int kCudaErrorNotReady = 600;  // cudaErrorNotReady
constexpr size_t kAlign = 256;           // staging ranges and direct-path regions start on 256-byte boundaries

size_t alignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

// Restores the calling thread's current device when an enqueue is done.
class DeviceGuard {
 public:
  DeviceGuard(CudaApi& api, int device) : api_(api) {
    if (api_.getDevice(&saved_) != 0) saved_ = -1;
    if (device >= 0 && device != saved_) api_.setDevice(device);
  }
  ~DeviceGuard() {
    if (saved_ >= 0) api_.setDevice(saved_);
  }

 private:
  CudaApi& api_;
  int saved_ = -1;
};

}  // namespace

// A staging slot: pinned host memory for one group's buffers plus the flag its stream waits on.
struct DeviceEngine::Slot {
  CudaApi* api = nullptr;
  void* host = nullptr;  // staging memory (pinned, mapped)
  void* hostDev = nullptr;
  size_t capacity = 0;
  uint32_t* flag = nullptr;  // host address of the flag the stream waits on
  void* flagDev = nullptr;   // its device address
  void* flagHost = nullptr;  // the allocation holding the flag
  void* done = nullptr;      // event after the slot's last copy back
  uint32_t epoch = 0;        // uses so far; the stream waits for flag >= epoch
  // Set by the stream (host function) once the inputs are in host memory; read by the worker.
  std::mutex mutex;
  std::condition_variable cv;
  uint32_t arrived = 0;    // parts of the current use whose inputs are in host memory
  bool abandoned = false;  // the stream work could not be enqueued; the worker fails the calls
  bool hostDone = true;    // the worker has finished with the slot (flag raised)

  static void inputsArrived(void* arg) {
    Slot* s = static_cast<Slot*>(arg);
    {
      std::lock_guard<std::mutex> lk(s->mutex);
      ++s->arrived;
    }
    s->cv.notify_all();
  }
};

DeviceEngine::DeviceEngine(CommImpl& comm, CudaApi& api) : comm_(comm), api_(api) {
  directMaxBytes_ = comm_.config().gpuDirectMaxBytes;
  oneShotMaxBytes_ = comm_.config().gpuOneShotMaxBytes;
}

void DeviceEngine::quiesce() {
  std::lock_guard<std::mutex> lk(mutex_);
  if (quiesced_) return;
  if (!chainEvent_) {  // no device call got as far as the GPU
    quiesced_ = true;
    return;
  }
  DeviceGuard guard(api_, device_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(comm_.config().timeoutMs);
  while (api_.eventQuery(chainEvent_) == kCudaErrorNotReady) {
    if (std::chrono::steady_clock::now() > deadline)
      throw TimeoutError(strprintf("rank %d: device work not finished at communicator destruction", comm_.rank()));
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (directState_ == DirectState::kOn) {
    // Every rank's GPU is past its last read of our buffers once every rank got here.
    CollCall barrier{CollKind::kBarrier, nullptr, nullptr, 0, strataInt8, strataSum, 0, -1};
    comm_.run(std::span<const CollCall>(&barrier, 1));
  }
  quiesced_ = true;
}

DeviceEngine::~DeviceEngine() {
  // The GPU may still be copying out of a slot or reading a peer's flags: wait for it, within the deadline,
  // and leak what it still holds rather than free memory in use. After strataCommAbort the wait is short: a
  // stream stuck on a peer that will never arrive must not hold the abort for the whole deadline.
  if (!chainEvent_ && slots_.empty() && !ipcBase_) return;
  DeviceGuard guard(api_, device_);
  const int64_t waitMs =
      comm_.aborted() ? std::min<int64_t>(comm_.config().timeoutMs, 1000) : comm_.config().timeoutMs;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(waitMs);
  bool idle = true;
  for (auto& s : slots_) {
    while (api_.eventQuery(s->done) == kCudaErrorNotReady && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (api_.eventQuery(s->done) == kCudaErrorNotReady) idle = false;
  }
  while (chainEvent_ && api_.eventQuery(chainEvent_) == kCudaErrorNotReady &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  if (chainEvent_ && api_.eventQuery(chainEvent_) == kCudaErrorNotReady) idle = false;
  if (!idle) {
    STRATA_WARN(kLogColl, "rank %d: device work still pending at communicator destruction; its memory is leaked",
                comm_.rank());
    // The slots too, not only their pinned memory: a stream may still run Slot::inputsArrived on one (a host
    // function enqueued with its address) or wait on its flag.
    for (auto& s : slots_) (void)s.release();
    return;
  }
  for (auto& s : slots_) {
    api_.eventDestroy(s->done);
    api_.hostFree(s->host);
    api_.hostFree(s->flagHost);
  }
  for (size_t r = 0; r < peerBase_.size(); ++r)
    if (static_cast<int>(r) != comm_.rank() && peerBase_[r]) api_.ipcCloseMemHandle(peerBase_[r]);
  if (ipcBase_) {
    if (quiesced_ || directState_ != DirectState::kOn) {
      api_.deviceFree(ipcBase_);
    } else {
      STRATA_WARN(kLogColl,
                  "rank %d: CUDA IPC buffer left allocated: peers may still read it (communicator aborted "
                  "or a peer failed before destroy)",
                  comm_.rank());
    }
  }
  if (chainEvent_) api_.eventDestroy(chainEvent_);
}

void DeviceEngine::check(int err, const char* what) const {
  if (err != 0)
    throw CudaError(
        strprintf("rank %d: %s failed: %s (CUDA error %d)", comm_.rank(), what, api_.errorString(err), err));
}

void DeviceEngine::joinChain(void* stream) {
  if (chained_ && stream != lastStream_) check(api_.streamWaitEvent(stream, chainEvent_), "cudaStreamWaitEvent");
}

void DeviceEngine::enqueue(std::span<const CollCall> calls, void* stream) {
  if (calls.empty()) return;
  std::lock_guard<std::mutex> lk(mutex_);
  for (const CollCall& c : calls)
    if (c.stream != stream)
      throw InvalidUsage(strprintf("rank %d: the calls of one group must use one CUDA stream", comm_.rank()));
  int device = -1;
  if (stream) {
    check(api_.streamDevice(stream, &device), "cudaStreamGetDevice");
  } else {
    for (const CollCall& c : calls) {
      if (device < 0 && c.sendbuff) device = api_.pointerDevice(c.sendbuff);
      if (device < 0 && c.recvbuff) device = api_.pointerDevice(c.recvbuff);
    }
  }
  // One device per engine: its events (and CUDA IPC buffers) live there, and CUDA refuses to record an event
  // on another device's stream.
  if (device_ < 0) {
    device_ = device;
  } else if (device >= 0 && device != device_) {
    throw InvalidUsage(strprintf("rank %d: device call on device %d, but this communicator's device work is on "
                                 "device %d; use one device per rank and communicator",
                                 comm_.rank(), device, device_));
  }
  DeviceGuard guard(api_, device);
  bool capturing = false;
  check(api_.streamIsCapturing(stream, &capturing), "cudaStreamIsCapturing");
  if (capturing)
    throw InvalidUsage(
        strprintf("rank %d: Strata collectives cannot be captured into a CUDA graph yet (the stream "
                  "is capturing); run them outside the capture",
                  comm_.rank()));
  if (!chainEvent_) check(api_.eventCreate(&chainEvent_), "cudaEventCreate");  // on device_ (the guard)
  joinChain(stream);
  if (calls.size() == 1 && soloCopy(calls[0], stream)) {
    check(api_.eventRecord(chainEvent_, stream), "cudaEventRecord");
    lastStream_ = stream;
    chained_ = true;
    return;
  }
  const Direct kind = calls.size() == 1 ? directKind(calls[0]) : Direct::kNone;
  if (kind != Direct::kNone && directState_ == DirectState::kUnset) setupDirect(device);
  if (kind != Direct::kNone && directState_ == DirectState::kOn) {
    // Every rank takes the direct path for this call, so a buffer it cannot use is an error here, not a
    // silent switch to the staged path (which would leave the peers waiting in their streams).
    const CollCall& c = calls[0];
    if (device != directDevice_)
      throw InvalidUsage(
          strprintf("rank %d: all-reduce on device %d, but this communicator's CUDA IPC buffers are on "
                    "device %d; use one device per rank and communicator",
                    comm_.rank(), device, directDevice_));
    if (api_.pointerDevice(c.sendbuff) != device || api_.pointerDevice(c.recvbuff) != device)
      throw InvalidArgument(
          strprintf("rank %d: all-reduce with a CUDA stream needs sendbuff and recvbuff in device "
                    "memory of device %d (sendbuff %p, recvbuff %p)",
                    comm_.rank(), device, c.sendbuff, c.recvbuff));
    // An all-reduce is element-wise: a large one runs as consecutive two-shot rounds over chunks that fit the
    // regions. Each round copies its chunk of the input before writing its chunk of the output, so in place
    // works too.
    const size_t esize = dtypeSize(c.dtype);
    const size_t perVec = std::max<size_t>(1, 16 / esize);
    const size_t per = std::max(perVec, directMaxBytes_ / esize / perVec * perVec);
    for (size_t lo = 0; lo < c.count; lo += per) {
      CollCall part = c;
      part.sendbuff = static_cast<const char*>(c.sendbuff) + lo * esize;
      part.recvbuff = static_cast<char*>(c.recvbuff) + lo * esize;
      part.count = std::min(per, c.count - lo);
      enqueueDirect(part, part.count == c.count ? kind : Direct::kTwoShot, stream);
    }
  } else {
    enqueueStaged(calls, stream);
  }
  check(api_.eventRecord(chainEvent_, stream), "cudaEventRecord");
  lastStream_ = stream;
  chained_ = true;
}

// On one rank every collective is a copy of the send buffer into the receive buffer (Avg divides by 1), or
// nothing (in place, a barrier): one device copy instead of a round trip through host memory. PreMulSum scales,
// and send/recv to self pair calls of a group: those are staged.
bool DeviceEngine::soloCopy(const CollCall& c, void* stream) {
  if (comm_.size() != 1 || c.kind == CollKind::kSend || c.kind == CollKind::kRecv) return false;
  if (static_cast<int>(c.op) >= strataNumOps &&
      (c.kind == CollKind::kAllReduce || c.kind == CollKind::kReduceScatter || c.kind == CollKind::kReduce))
    return false;
  size_t sendElems = 0, recvElems = 0;
  comm_.bufferElems(c, &sendElems, &recvElems);
  const size_t bytes = std::min(sendElems, recvElems) * dtypeSize(c.dtype);
  if (bytes > 0 && c.sendbuff != c.recvbuff)
    check(api_.memcpyAsync(c.recvbuff, c.sendbuff, bytes, stream), "cudaMemcpyAsync (one rank)");
  return true;
}

// ---- direct path (CUDA IPC) ---------------------------------------------------------------------------------
// Layout of every rank's exported allocation: two parities x (input region + result region), each
// directMaxBytes, then the flags: [phase 0: arrival][phase 1: slice reduced] x nranks 32-bit words. Call e
// (counted from 1 on every rank) uses parity e & 1. A rank writes its parity-p regions at call e only after
// every peer raised its phase-0 flag for call e-1, which each did after its own call e-2 had finished reading
// them (stream order), so two parities are enough.

DeviceEngine::Direct DeviceEngine::directKind(const CollCall& c) const {
  if (c.kind != CollKind::kAllReduce || comm_.size() < 2 || comm_.size() > kCudaMaxReduceSources) return Direct::kNone;
  if (!comm_.oneHost() || directMaxBytes_ == 0 || directState_ == DirectState::kOff) return Direct::kNone;
  // Avg and PreMulSum pre-scale their inputs; the host path implements that rounding.
  if (static_cast<int>(c.op) >= static_cast<int>(strataAvg)) return Direct::kNone;
  const size_t bytes = c.count * dtypeSize(c.dtype);
  if (bytes == 0) return Direct::kNone;
  // Larger than the IPC regions: two-shot rounds of at most directMaxBytes each (enqueue cuts them).
  return bytes <= oneShotMaxBytes_ && bytes <= directMaxBytes_ ? Direct::kOneShot : Direct::kTwoShot;
}

std::string DeviceEngine::pathFor(const CollCall& call) const {
  switch (directKind(call)) {
    case Direct::kOneShot:
      return "direct-oneshot";
    case Direct::kTwoShot:
      return "direct-twoshot";
    case Direct::kNone:
      break;
  }
  return "staged";
}

void DeviceEngine::setupDirect(int device) {
  // Collective: every rank reaches its first eligible all-reduce at the same call. The exchange runs as a
  // host all-gather on this communicator (which first lets earlier queued work finish).
  const int n = comm_.size(), me = comm_.rank();
  const size_t region = alignUp(directMaxBytes_, kAlign);
  const size_t flagsBytes = alignUp(2 * static_cast<size_t>(n) * sizeof(uint32_t), kAlign);
  const size_t total = 4 * region + flagsBytes;
  struct Info {
    uint8_t handle[kCudaIpcHandleBytes];
    int32_t ok;
    int32_t device;
    int64_t pid;
  };
  Info mine{};
  std::string why;
  if (device < 0) why = "no device for this rank's buffers";
  if (why.empty()) {
    // Zeroed on a private stream: the legacy default stream would also wait for the caller's blocking streams.
    void* setupStream = nullptr;
    int e = api_.deviceMalloc(&ipcBase_, total);
    if (e == 0) e = api_.streamCreate(&setupStream);
    if (e == 0) e = api_.memsetAsync(ipcBase_, 0, total, setupStream);
    if (e == 0) e = api_.streamSynchronize(setupStream);
    if (setupStream) api_.streamDestroy(setupStream);
    if (e == 0) e = api_.ipcGetMemHandle(mine.handle, ipcBase_);
    if (e != 0) why = strprintf("allocating and exporting %zu bytes failed: %s", total, api_.errorString(e));
  }
  mine.ok = why.empty() ? 1 : 0;
  mine.device = device;
  mine.pid = getpid();
  std::vector<Info> all(static_cast<size_t>(n));
  CollCall gather{CollKind::kAllGather, &mine, all.data(), sizeof(Info), strataUint8, strataSum, 0, -1};
  comm_.run(std::span<const CollCall>(&gather, 1));
  peerBase_.assign(static_cast<size_t>(n), nullptr);
  bool ok = true;
  for (int r = 0; r < n; ++r) ok &= all[static_cast<size_t>(r)].ok == 1;
  if (!ok && why.empty()) why = "a peer could not export its buffer";
  if (ok) {
    peerBase_[static_cast<size_t>(me)] = static_cast<char*>(ipcBase_);
    for (int r = 0; r < n && why.empty(); ++r) {
      if (r == me) continue;
      void* p = nullptr;
      const int e = api_.ipcOpenMemHandle(&p, all[static_cast<size_t>(r)].handle);
      if (e != 0) {
        why = strprintf("opening rank %d's IPC buffer (its device %d, ours %d) failed: %s", r,
                        all[static_cast<size_t>(r)].device, device, api_.errorString(e));
        break;
      }
      peerBase_[static_cast<size_t>(r)] = static_cast<char*>(p);
    }
  }
  // Every rank must take the same path: agree on success.
  int32_t mineOk = why.empty() ? 1 : 0;
  std::vector<int32_t> oks(static_cast<size_t>(n));
  CollCall agree{CollKind::kAllGather, &mineOk, oks.data(), 1, strataInt32, strataSum, 0, -1};
  comm_.run(std::span<const CollCall>(&agree, 1));
  const bool allOk = std::all_of(oks.begin(), oks.end(), [](int32_t v) { return v == 1; });
  if (allOk) {
    directState_ = DirectState::kOn;
    directDevice_ = device;
    STRATA_INFO(kLogNet,
                "rank %d: CUDA IPC direct all-reduce on device %d (%zu bytes per rank, up to %zu bytes "
                "per call)",
                me, device, total, directMaxBytes_);
    return;
  }
  directState_ = DirectState::kOff;
  directOffReason_ = why.empty() ? "a peer could not set up CUDA IPC" : why;
  STRATA_INFO(kLogNet, "rank %d: CUDA IPC direct path off (%s); device all-reduce is staged through host memory", me,
              directOffReason_.c_str());
  for (int r = 0; r < n; ++r)
    if (r != me && peerBase_[static_cast<size_t>(r)]) api_.ipcCloseMemHandle(peerBase_[static_cast<size_t>(r)]);
  peerBase_.clear();
  if (ipcBase_) api_.deviceFree(ipcBase_);
  ipcBase_ = nullptr;
}

void DeviceEngine::enqueueDirect(const CollCall& c, Direct kind, void* stream) {
  const int n = comm_.size(), me = comm_.rank();
  const size_t esize = dtypeSize(c.dtype);
  const size_t bytes = c.count * esize;
  const size_t region = alignUp(directMaxBytes_, kAlign);
  const uint32_t e = ++epoch_;
  const size_t parity = e & 1;
  auto input = [&](int r) { return peerBase_[static_cast<size_t>(r)] + parity * 2 * region; };
  auto result = [&](int r) { return input(r) + region; };
  auto flag = [&](int r, int phase, int from) {
    return peerBase_[static_cast<size_t>(r)] + 4 * region + (static_cast<size_t>(phase) * n + from) * sizeof(uint32_t);
  };
  const ReduceKind op = static_cast<ReduceKind>(c.op);
  check(api_.memcpyAsync(input(me), c.sendbuff, bytes, stream), "cudaMemcpyAsync (direct input)");
  auto barrier = [&](int phase) {
    for (int r = 0; r < n; ++r)
      if (r != me) check(api_.streamWriteValue(stream, flag(r, phase, me), e), "stream flag write");
    for (int r = 0; r < n; ++r)
      if (r != me) check(api_.streamWaitValue(stream, flag(me, phase, r), e), "stream flag wait");
  };
  barrier(0);
  // Every rank combines the inputs in rank order, so all get bitwise the same result.
  const void* srcs[kCudaMaxReduceSources];
  if (kind == Direct::kOneShot) {
    for (int r = 0; r < n; ++r) srcs[r] = input(r);
    check(api_.reduce(c.recvbuff, srcs, n, c.count, c.dtype, op, stream), "direct one-shot reduce");
    return;
  }
  // Two-shot: rank r reduces slice r (whole 16-byte vectors where possible) into its result region, then
  // every rank copies each slice from its owner.
  const size_t perVec = std::max<size_t>(1, 16 / esize);
  const size_t vecs = (c.count + perVec - 1) / perVec;
  auto sliceBegin = [&](int r) { return std::min(c.count, vecs * static_cast<size_t>(r) / n * perVec); };
  const size_t lo = sliceBegin(me), hi = sliceBegin(me + 1);
  if (hi > lo) {
    for (int r = 0; r < n; ++r) srcs[r] = input(r) + lo * esize;
    check(api_.reduce(result(me) + lo * esize, srcs, n, hi - lo, c.dtype, op, stream), "direct two-shot reduce");
  }
  barrier(1);
  for (int r = 0; r < n; ++r) {
    const size_t a = sliceBegin(r), b = sliceBegin(r + 1);
    if (b > a)
      check(
          api_.memcpyAsync(static_cast<char*>(c.recvbuff) + a * esize, result(r) + a * esize, (b - a) * esize, stream),
          "cudaMemcpyAsync (direct gather)");
  }
}

// ---- staged path ----------------------------------------------------------------------------------------------

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
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(comm_.config().timeoutMs);
    while (!isFree(oldest)) {
      if (std::chrono::steady_clock::now() > deadline)
        throw TimeoutError(strprintf("rank %d: 64 device collectives in flight and none finished within %lld ms",
                                     comm_.rank(), static_cast<long long>(comm_.config().timeoutMs)));
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
    comm_.bufferElems(c, &sendElems, &recvElems);
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
  const size_t chunk = comm_.config().gpuStageChunkBytes;
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
  const int64_t timeoutMs = comm_.config().timeoutMs;
  const int rank = comm_.rank();
  CommImpl* comm = &comm_;
  const uint32_t nparts = static_cast<uint32_t>(parts.size());
  for (uint32_t i = 0; i < nparts; ++i) {
    auto before = [sp, timeoutMs, rank, comm, i] {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
      std::unique_lock<std::mutex> lk(sp->mutex);
      // Woken by the stream; every 10 ms also checks for an abort or a peer's failure.
      while (!sp->cv.wait_for(lk, std::chrono::milliseconds(10), [&] { return sp->arrived > i || sp->abandoned; })) {
        if (comm->asyncError() != strataSuccess)
          throw Error(comm->asyncError(),
                      strprintf("rank %d: device collective abandoned: %s", rank, comm->asyncErrorMessage().c_str()));
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
      comm_.submit(std::move(parts[i].calls), before, after);
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
  // GPU side: every part's inputs to the host, each followed by a signal to the worker; then per part, wait for
  // its flag and copy its outputs back.
  try {
    for (const Part& part : parts) {
      for (const Span& x : part.in)
        check(api_.memcpyAsync(x.host, x.dev, x.bytes, stream), "cudaMemcpyAsync (device to staging)");
      check(api_.launchHostFunc(stream, &Slot::inputsArrived, &slot), "cudaLaunchHostFunc");
    }
    for (uint32_t i = 0; i < nparts; ++i) {
      check(api_.streamWaitValue(stream, slot.flagDev, epochBase + i + 1), "stream flag wait");
      for (const Span& x : parts[i].out)
        check(api_.memcpyAsync(const_cast<char*>(x.dev), x.host, x.bytes, stream),
              "cudaMemcpyAsync (staging to device)");
    }
    check(api_.eventRecord(slot.done, stream), "cudaEventRecord");
  } catch (...) {
    // The slot is not free until whatever was enqueued of this use has run: mark its end (best effort; the
    // worker raises the flags, so the stream does not stay waiting).
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
