// The direct path of the device engine: all-reduce between the ranks of one host over CUDA IPC.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "engine/device_engine.h"
#include "engine/device_engine_detail.h"
#include "engine/device_ipc.h"
#include "util/config.h"
#include "util/error.h"
#include "util/log.h"

namespace strata {

using namespace device_detail;

// Layout of every rank's exported allocation: two parities x (input region + result region), each
// directMaxBytes, then the flags: [phase 0: arrival][phase 1: slice reduced] x nranks 32-bit words. Call e
// (counted from 1 on every rank) uses parity e & 1. A rank writes its parity-p regions at call e only after
// every peer raised its phase-0 flag for call e-1, which each did after its own call e-2 had finished reading
// them (stream order), so two parities are enough.

DeviceEngine::Direct DeviceEngine::directKind(const CollCall& c) const {
  if (c.kind != CollKind::kAllReduce || host_.size() < 2 || host_.size() > kCudaMaxReduceSources) return Direct::kNone;
  if (!host_.oneHost() || directMaxBytes_ == 0 || directState_ == DirectState::kOff) return Direct::kNone;
  // Avg and PreMulSum pre-scale their inputs; the host path implements that rounding.
  if (static_cast<int>(c.op) >= static_cast<int>(strataAvg)) return Direct::kNone;
  const size_t bytes = c.count * dtypeSize(c.dtype);
  if (bytes == 0) return Direct::kNone;
  // Larger than the IPC regions: two-shot rounds of at most directMaxBytes each (enqueue cuts them).
  return bytes <= oneShotMaxBytes_ && bytes <= directMaxBytes_ ? Direct::kOneShot : Direct::kTwoShot;
}

void DeviceEngine::setupDirect(int device) {
  // Collective: every rank reaches its first eligible all-reduce at the same call. The exchange runs as a
  // host all-gather on this communicator (which first lets earlier queued work finish).
  const int n = host_.size(), me = host_.rank();
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
  std::string why;  // why this rank cannot take part: the CUDA call that failed and its error
  if (device < 0) why = "no device for this rank's buffers";
  if (why.empty()) {
    // Zeroed on a private stream: the legacy default stream would also wait for the caller's blocking streams.
    void* setupStream = nullptr;
    int e = 0;
    const char* step = "";  // the CUDA call that failed
    auto attempt = [&](const char* name, auto call) {
      if (e != 0) return;
      step = name;
      e = call();
    };
    attempt("cudaMalloc", [&] { return api_.deviceMalloc(&ipcBase_, total); });
    attempt("cudaStreamCreate", [&] { return api_.streamCreate(&setupStream); });
    attempt("cudaMemsetAsync", [&] { return api_.memsetAsync(ipcBase_, 0, total, setupStream); });
    attempt("cudaStreamSynchronize", [&] { return api_.streamSynchronize(setupStream); });
    if (setupStream) api_.streamDestroy(setupStream);
    attempt("cudaIpcGetMemHandle", [&] { return api_.ipcGetMemHandle(mine.handle, ipcBase_); });
    if (e != 0)
      why = strprintf("%s for this rank's %zu-byte CUDA IPC buffer on device %d failed: %s (CUDA error %d)", step,
                      total, device, api_.errorString(e), e);
  }
  mine.ok = why.empty() ? 1 : 0;
  mine.device = device;
  mine.pid = getpid();
  std::vector<Info> all(static_cast<size_t>(n));
  host_.allGather(&mine, all.data(), sizeof(Info));
  for (int r = 0; r < n && why.empty(); ++r)
    if (all[static_cast<size_t>(r)].ok != 1)
      why = strprintf("rank %d could not export its CUDA IPC buffer (its log says why)", r);
  if (why.empty()) {
    // CUDA IPC cannot open a buffer of its own process (ranks as threads), and processes in separate containers
    // need a shared IPC namespace: say which case this is.
    auto whyNotOpened = [&](int r, int e) {
      const Info& peer = all[static_cast<size_t>(r)];
      const std::string where =
          peer.pid == mine.pid
              ? strprintf(
                    "rank %d is in this process (pid %lld), and CUDA IPC cannot open a buffer exported by the same "
                    "process",
                    r, static_cast<long long>(peer.pid))
              : strprintf(
                    "rank %d: device %d, pid %lld; this rank: device %d, pid %lld; ranks in separate containers "
                    "need a shared IPC namespace (docker --ipc=host)",
                    r, peer.device, static_cast<long long>(peer.pid), device, static_cast<long long>(mine.pid));
      return strprintf("cudaIpcOpenMemHandle of rank %d's buffer failed: %s (CUDA error %d); %s", r,
                       api_.errorString(e), e, where.c_str());
    };
    why = mapPeerBuffers(
        api_, n, me, ipcBase_, [&](int r) -> const void* { return all[static_cast<size_t>(r)].handle; }, whyNotOpened,
        &peerBase_);
  }
  // Every rank must take the same path: agree on success.
  why = agreeOnSuccess(host_, std::move(why), "open its peers' CUDA IPC buffers (its log says why)");
  if (why.empty()) {
    directState_ = DirectState::kOn;
    directDevice_ = device;
    STRATA_INFO(kLogNet,
                "rank %d: CUDA IPC direct all-reduce on device %d (%zu bytes per rank, up to %zu bytes "
                "per call)",
                me, device, total, directMaxBytes_);
    return;
  }
  directState_ = DirectState::kOff;
  directOffReason_ = why;
  // Not what the user asked for, and much slower: a warning, once (set-up runs once per communicator).
  STRATA_WARN(kLogNet,
              "rank %d: CUDA IPC direct path off (%s); device all-reduces on this communicator are staged through "
              "host memory, which is much slower",
              me, directOffReason_.c_str());
  unmapPeerBuffers(api_, peerBase_, me);
  peerBase_.clear();
  if (ipcBase_) api_.deviceFree(ipcBase_);
  ipcBase_ = nullptr;
}

void DeviceEngine::noteStaged(std::span<const CollCall> calls) {
  const auto ar = std::find_if(calls.begin(), calls.end(),
                               [](const CollCall& c) { return c.kind == CollKind::kAllReduce && c.count > 0; });
  const int n = host_.size(), me = host_.rank();
  // IPC set-up failure was logged when it happened; one rank only copies.
  if (ar == calls.end() || n < 2 || directState_ == DirectState::kOff) return;
  struct Reason {
    uint32_t bit;   // stagedNoted_
    bool expected;  // staged by design or by setting: INFO, not WARN
    std::string why;
  } reason;
  if (!host_.oneHost()) {
    reason = {1, true, "the ranks are on several hosts"};
  } else if (directMaxBytes_ == 0) {
    reason = {2, true, "STRATA_GPU_DIRECT_BYTES=0"};
  } else if (n > kCudaMaxReduceSources) {
    reason = {4, false, strprintf("%d ranks on one host; the CUDA IPC path serves 2 to %d", n, kCudaMaxReduceSources)};
  } else if (calls.size() > 1) {
    reason = {8, false,
              strprintf("an all-reduce in a group of %zu calls; the CUDA IPC path takes an all-reduce issued on its "
                        "own",
                        calls.size())};
  } else if (static_cast<int>(ar->op) >= static_cast<int>(strataAvg)) {
    reason = {
        16, false,
        strprintf("op %s; the CUDA IPC path does sum, prod, max and min", ar->op == strataAvg ? "avg" : "PreMulSum")};
  } else {
    return;
  }
  if (stagedNoted_ & reason.bit) return;
  stagedNoted_ |= reason.bit;
  if (reason.expected)
    STRATA_INFO(kLogColl, "rank %d: device all-reduces are staged through host memory (%s)", me, reason.why.c_str());
  else
    STRATA_WARN(kLogColl,
                "rank %d: device all-reduce staged through host memory, not CUDA IPC (%s), which is much slower; "
                "logged once per communicator",
                me, reason.why.c_str());
}

void DeviceEngine::enqueueDirect(const CollCall& c, Direct kind, void* stream) {
  const int n = host_.size(), me = host_.rank();
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

}  // namespace strata
