#include "engine/device_engine.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "engine/device_engine_detail.h"
#include "engine/device_ipc.h"
#include "kernels/cuda_loader.h"
#include "util/config.h"
#include "util/error.h"
#include "util/log.h"
#include "util/tsan.h"

namespace strata {

using namespace device_detail;

namespace {

// Every setting that a device call's path depends on: directKind and enqueue (direct or staged, one-shot or
// two-shot, round size) and enqueueStaged (chunks). Ranks that differ would wait for flags no peer raises, or run
// different host calls. STRATA_TIMEOUT_MS is not here: it sets only this rank's own deadlines.
// A setting is compared as a number; a word setting (STRATA_GPU_LL128) by its index in `words`, and shown as the word.
struct DeviceSetting {
  const char* name;
  size_t Config::*field;                // a number, or
  std::string Config::*word = nullptr;  // a word of `words`
  const char* const* words = nullptr;
  uint64_t read(const Config& c) const {
    if (!word) return c.*field;
    uint64_t i = 0;
    while (words[i] && c.*word != words[i]) ++i;
    return i;
  }
  std::string show(uint64_t v) const {
    if (!word) return std::to_string(v);
    for (uint64_t i = 0; words[i]; ++i)
      if (i == v) return words[i];
    return "?";
  }
};
constexpr const char* kLL128Words[] = {"auto", "on", "off", nullptr};
constexpr const char* kProtoWords[] = {"auto", "simple", "ll", "ll128", nullptr};
const DeviceSetting kDeviceSettings[] = {
    {"STRATA_GPU_DIRECT_BYTES", &Config::gpuDirectMaxBytes},
    {"STRATA_GPU_ONESHOT_BYTES", &Config::gpuOneShotMaxBytes},
    {"STRATA_GPU_STAGE_CHUNK_BYTES", &Config::gpuStageChunkBytes},
    {"STRATA_GPU_EXECUTOR", &Config::gpuExecutor},
    {"STRATA_GPU_CHANNELS", &Config::gpuChannels},
    {"STRATA_GPU_LL128", nullptr, &Config::gpuLL128, kLL128Words},
    {"STRATA_GPU_PROTO", nullptr, &Config::gpuProto, kProtoWords},
};
constexpr size_t kNumDeviceSettings = sizeof(kDeviceSettings) / sizeof(kDeviceSettings[0]);

}  // namespace

void DeviceEngine::Slot::inputsArrived(void* arg) {
  Slot* s = static_cast<Slot*>(arg);
  {
    std::lock_guard<std::mutex> lk(s->mutex);
    ++s->arrived;
  }
  s->cv.notify_all();
}

std::unique_ptr<DeviceSide> makeDeviceEngine(HostSide& host) { return std::make_unique<DeviceEngine>(host, cudaApi()); }

DeviceEngine::DeviceEngine(HostSide& host, CudaApi& api) : host_(host), api_(api) {
  directMaxBytes_ = host_.config().gpuDirectMaxBytes;
  oneShotMaxBytes_ = host_.config().gpuOneShotMaxBytes;
  std::vector<int> perLeader(static_cast<size_t>(host_.size()), 0);
  for (int r = 0; r < host_.size(); ++r) ++perLeader[static_cast<size_t>(host_.hostLeader(r))];
  hierHosts_ = static_cast<int>(std::count_if(perLeader.begin(), perLeader.end(), [](int c) { return c > 0; }));
  hierHostRanks_ = host_.size() / hierHosts_;
  for (int c : perLeader)
    if (c != 0 && c != hierHostRanks_) hierHostRanks_ = 0;
}

void DeviceEngine::quiesce() {
  std::lock_guard<std::mutex> lk(mutex_);
  if (quiesced_) return;
  if (!chainEvent_) {  // no device call got as far as the GPU
    quiesced_ = true;
    return;
  }
  DeviceGuard guard(api_, device_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(host_.config().timeoutMs);
  while (api_.eventQuery(chainEvent_) == kCudaErrorNotReady) {
    if (std::chrono::steady_clock::now() > deadline)
      throw TimeoutError(strprintf("rank %d: device work not finished at communicator destruction", host_.rank()));
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (directState_ == DirectState::kOn || execState_ == ExecState::kOn) {
    // Every rank's GPU is past its last read (and write) of our buffers once every rank got here. ThreadSanitizer
    // (thread ranks over the fake CudaApi, where a mapping has its owner's address) does not follow the barrier's
    // sockets: each rank releases on the peers' buffers it mapped before it, and acquires on its own after it.
    const int me = host_.rank();
    auto key = [](const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); };
    for (size_t r = 0; r < execPeerMem_.size(); ++r)
      if (static_cast<int>(r) != me && execPeerMem_[r]) tsanRelease(key(execPeerMem_[r]));
    for (size_t r = 0; r < peerBase_.size(); ++r)
      if (static_cast<int>(r) != me && peerBase_[r]) tsanRelease(key(peerBase_[r]));
    host_.barrier();
    if (execMem_) tsanAcquire(key(execMem_));
    if (ipcBase_) tsanAcquire(key(ipcBase_));
  }
  // The sub-communicators of hierarchical calls, their work done (it came before chainEvent_): collectively, in the
  // same order on every rank.
  std::shared_ptr<HostSide> local, cross;
  {
    std::lock_guard<std::mutex> sl(subMu_);
    local = hierLocal_;
    cross = hierCross_;
  }
  if (local) local->destroy();
  if (cross) cross->destroy();
  {
    std::lock_guard<std::mutex> sl(subMu_);
    hierLocal_.reset();
    hierCross_.reset();
  }
  quiesced_ = true;
}

DeviceEngine::~DeviceEngine() {
  // The GPU may still be copying out of a slot or reading a peer's flags: wait for it, within the deadline,
  // and leak what it still holds rather than free memory in use. After strataCommAbort the wait is short: a
  // stream stuck on a peer that will never arrive must not hold the abort for the whole deadline.
  // Sub-communicators not destroyed by quiesce (an abort, a failure): torn down without waiting for their peers.
  abortSubgroups();
  if (!chainEvent_ && slots_.empty() && !ipcBase_ && !execMem_ && !execCtlHost_ && !outStream_) return;
  DeviceGuard guard(api_, device_);
  const int64_t waitMs =
      host_.failure().aborted() ? std::min<int64_t>(host_.config().timeoutMs, 1000) : host_.config().timeoutMs;
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
  freeExec(idle);
  if (!idle) {
    STRATA_WARN(kLogColl, "rank %d: device work still pending at communicator destruction; its memory is leaked",
                host_.rank());
    // The slots too, not only their pinned memory: a stream may still run Slot::inputsArrived on one (a host
    // function enqueued with its address) or wait on its flag.
    for (auto& s : slots_) (void)s.release();
    return;
  }
  for (auto& s : slots_) {
    api_.eventDestroy(s->done);
    api_.eventDestroy(s->outDone);
    api_.hostFree(s->host);
    api_.hostFree(s->flagHost);
  }
  if (outStream_) api_.streamDestroy(outStream_);
  if (hierStream_) api_.streamDestroy(hierStream_);
  for (void* ev : {hierLocalDone_, hierCrossDone_[0], hierCrossDone_[1]})
    if (ev) api_.eventDestroy(ev);
  unmapPeerBuffers(api_, peerBase_, host_.rank());
  freeExportedBuffer(api_, ipcBase_, quiesced_ || directState_ != DirectState::kOn, host_.rank(), "CUDA IPC buffer",
                     "read it");
  if (chainEvent_) api_.eventDestroy(chainEvent_);
}

void DeviceEngine::check(int err, const char* what) const {
  if (err != 0)
    throw CudaError(
        strprintf("rank %d: %s failed: %s (CUDA error %d)", host_.rank(), what, api_.errorString(err), err));
}

void DeviceEngine::agreeSettings() {
  if (!settingsAgreed_) {
    // Every rank reaches its first device collective at the same call, whatever its settings say, so the
    // exchange itself never depends on them.
    const int n = host_.size(), me = host_.rank();
    uint64_t mine[kNumDeviceSettings];
    for (size_t i = 0; i < kNumDeviceSettings; ++i) mine[i] = kDeviceSettings[i].read(host_.config());
    std::vector<uint64_t> all(static_cast<size_t>(n) * kNumDeviceSettings);
    host_.allGather(mine, all.data(), sizeof(mine));
    settingsAgreed_ = true;
    std::string differ;
    for (size_t i = 0; i < kNumDeviceSettings; ++i) {
      for (int r = 0; r < n; ++r) {
        const uint64_t theirs = all[static_cast<size_t>(r) * kNumDeviceSettings + i];
        if (theirs == mine[i]) continue;
        differ +=
            strprintf("%srank %d has %s=%s but rank %d has %s", differ.empty() ? "" : "; ", me, kDeviceSettings[i].name,
                      kDeviceSettings[i].show(mine[i]).c_str(), r, kDeviceSettings[i].show(theirs).c_str());
        break;
      }
    }
    if (!differ.empty())
      settingsError_ = differ +
                       ": every rank of a communicator needs the same STRATA_GPU_* settings (a device all-reduce "
                       "takes its path, rounds and chunks from them)";
  }
  if (!settingsError_.empty()) throw InvalidUsage(settingsError_);
}

void DeviceEngine::joinChain(void* stream) {
  if (chained_ && stream != lastStream_) check(api_.streamWaitEvent(stream, chainEvent_), "cudaStreamWaitEvent");
}

void DeviceEngine::enqueue(std::span<const CollCall> calls, void* stream) {
  if (calls.empty()) return;
  std::lock_guard<std::mutex> lk(mutex_);
  for (const CollCall& c : calls)
    if (c.stream != stream)
      throw InvalidUsage(strprintf("rank %d: the calls of one group must use one CUDA stream", host_.rank()));
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
    throw InvalidUsage(
        strprintf("rank %d: device call on device %d, but this communicator's device work is on "
                  "device %d; use one device per rank and communicator",
                  host_.rank(), device, device_));
  }
  DeviceGuard guard(api_, device);
  bool capturing = false;
  check(api_.streamIsCapturing(stream, &capturing), "cudaStreamIsCapturing");
  if (capturing) {
    // Not chained: the graph orders its replays on the stream it is launched on (DESIGN.md, "The device executor").
    enqueueCaptured(calls, stream);
    return;
  }
  // Sends and receives take the executor whenever it is on, whatever else the group holds (p2pRefusal): the
  // group's collectives run first, then one kernel for its sends and receives.
  const bool p2pExec =
      std::any_of(calls.begin(), calls.end(), [](const CollCall& c) { return isP2P(c.kind); }) && p2pRefusal().empty();
  std::vector<CollCall> colls, p2p;
  if (p2pExec)
    for (const CollCall& c : calls) (isP2P(c.kind) ? p2p : colls).push_back(c);
  const std::span<const CollCall> rest = p2pExec ? std::span<const CollCall>(colls) : calls;
  // The sends and receives are lowered before anything is enqueued: what refuses them (a peer out of range, sends to
  // self without their receives) refuses the whole group and leaves the stream as it was.
  size_t p2pUnit = 1;
  const DevPlan p2pPlan = p2pExec ? lowerExecP2P(p2p, &p2pUnit) : DevPlan{};
  // Before anything is enqueued: a mismatch fails the call on every rank and leaves the stream as it was. Every
  // call that holds a collective checks (collectively, the first time: every rank's group holds the same
  // collectives), as its path may follow from the settings.
  if (host_.size() > 1 && std::any_of(rest.begin(), rest.end(), [](const CollCall& c) { return !isP2P(c.kind); }))
    agreeSettings();
  if (!chainEvent_) check(api_.eventCreate(&chainEvent_), "cudaEventCreate");  // on device_ (the guard)
  joinChain(stream);
  if (!rest.empty()) enqueueCalls(rest, stream, device);
  if (p2pExec) enqueueExecP2P(p2p, p2pPlan, p2pUnit, stream, /*captured=*/false);
  check(api_.eventRecord(chainEvent_, stream), "cudaEventRecord");
  lastStream_ = stream;
  chained_ = true;
}

void DeviceEngine::enqueueCalls(std::span<const CollCall> calls, void* stream, int device) {
  if (calls.size() == 1 && soloCopy(calls[0], stream)) return;
  // Across hosts only: on one host the refusal's message would be built for nothing on every call.
  if (calls.size() == 1 && !host_.oneHost() && hierRefusal(calls[0]).empty()) {
    if (hierState_ == HierState::kUnset) setupHier();
    if (hierState_ == HierState::kOn) {
      enqueueHier(calls[0], stream);
      return;
    }
  }
  if (execRefusal(calls).empty()) {
    if (execState_ == ExecState::kUnset) setupExec(device);
    if (execState_ == ExecState::kOn) {
      // A group: one kernel per collective, in issue order (a collective of 0 elements moves nothing).
      for (const CollCall& c : calls)
        if (c.count > 0) enqueueExec(c, stream, /*captured=*/false);
      return;
    }
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
                    host_.rank(), device, directDevice_));
    if (api_.pointerDevice(c.sendbuff) != device || api_.pointerDevice(c.recvbuff) != device)
      throw InvalidArgument(
          strprintf("rank %d: all-reduce with a CUDA stream needs sendbuff and recvbuff in device "
                    "memory of device %d (sendbuff %p, recvbuff %p)",
                    host_.rank(), device, c.sendbuff, c.recvbuff));
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
    noteStaged(calls);
    enqueueStaged(calls, stream);
  }
}

// On one rank every collective is a copy of the send buffer into the receive buffer (Avg divides by 1), or
// nothing (in place, a barrier): one device copy instead of a round trip through host memory. PreMulSum scales,
// and send/recv to self pair calls of a group: those are staged.
bool DeviceEngine::soloCopy(const CollCall& c, void* stream) {
  if (host_.size() != 1 || isP2P(c.kind)) return false;
  if (static_cast<int>(c.op) >= strataNumOps && isReducing(c.kind)) return false;
  size_t sendElems = 0, recvElems = 0;
  callBufferElems(c, host_.size(), host_.rank(), &sendElems, &recvElems);
  const size_t bytes = std::min(sendElems, recvElems) * dtypeSize(c.dtype);
  if (bytes > 0 && c.sendbuff != c.recvbuff)
    check(api_.memcpyAsync(c.recvbuff, c.sendbuff, bytes, stream), "cudaMemcpyAsync (one rank)");
  return true;
}

}  // namespace strata
