// The direct path of the device engine: all-reduce between the ranks of one host over CUDA IPC.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/device_engine.h"
#include "core/device_engine_detail.h"
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
  host_.allGather(&mine, all.data(), sizeof(Info));
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
  host_.allGather(&mineOk, oks.data(), sizeof(int32_t));
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
