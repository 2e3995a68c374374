// DeviceEngine's executor path (STRATA_GPU_EXECUTOR=1): a device collective between ranks of one host runs as one
// kernel per call over per-peer FIFOs in CUDA IPC memory, with the protocol of src/device/ (DESIGN.md, "The device
// executor"). Nothing of the call runs on the host: the stream launches the kernel, and a host function after it
// only reads whether a lane stopped.
//
// Memory of each rank:
//   execMem_      device, exported by CUDA IPC: n ConnMems, index p holding the FIFO of rank p -> this rank
//   execLocal_    device, private: send steps[n], receive steps[n] (advanced by the kernels only), lanes-done
//   execCtlHost_  mapped host memory: the abort word, set by FailureState when the communicator fails or aborts
//   slots         mapped host memory, one per call in flight: the call's failure record and stop word, its
//                 LaneArgs, its FIFO pointer tables and its lowered ops; reused once the call's event completed
#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "collectives/algorithms.h"
#include "engine/device_engine.h"
#include "engine/device_engine_detail.h"
#include "engine/device_ipc.h"
#include "util/config.h"
#include "util/dtype.h"
#include "util/error.h"
#include "util/log.h"

namespace strata {

using namespace device_detail;

namespace {

// Offsets inside a slot (bytes).
constexpr size_t kSlotFailure = 0;                         // devproto::Failure
constexpr size_t kSlotStop = 128;                          // uint32_t
constexpr size_t kSlotLanes = 256;                         // LaneArgs[lanes], then recvMem[n], sendMem[n], then the ops
                                                           // (all of it copied to the slot's device memory, args)
constexpr int kExecThreads = 256;                          // threads per block (lane)
constexpr size_t kExecBytesPerChannel = size_t{64} << 10;  // a call takes a channel per 64 KiB (STRATA_GPU_CHANNELS)
// In execLocal_: the last-lane counter of integer Avg, the lanes' completed ops (cross-lane waits), then the steps.
constexpr size_t kLocalLanesDone = 0;
constexpr size_t kLocalLaneOps = 128;
constexpr size_t kLocalSteps = kLocalLaneOps + sizeof(uint32_t) * kMaxDevLanes;

size_t align16(size_t x) { return (x + 15) / 16 * 16; }

}  // namespace

std::string DeviceEngine::execRefusal(std::span<const CollCall> calls) const {
  if (host_.config().gpuExecutor != 1)
    return "the device executor is off (STRATA_GPU_EXECUTOR=0; STRATA_GPU_EXECUTOR=1, the default, turns it on)";
  if (execState_ == ExecState::kOff) return "the device executor could not be set up on this communicator";
  const int n = host_.size();
  if (n < 2) return "on one rank only copies are captured, and this call is staged (PreMulSum, or send/recv to self)";
  if (n > kMaxDevLanes) return strprintf("the device executor serves at most %d ranks", kMaxDevLanes);
  if (!host_.oneHost())
    return "the communicator spans hosts, and a call across hosts runs its cross-host phase on the host (the shard "
           "staged through host memory and sent by the communicator's worker, call by call), which a CUDA graph "
           "cannot replay";
  // A group of collectives runs as one kernel per collective, in issue order: every rank's group holds the same
  // collectives in the same order (NCCL's rule), so every rank takes the same path for each.
  bool any = false;
  for (const CollCall& c : calls) {
    switch (c.kind) {
      case CollKind::kAllReduce:
      case CollKind::kReduceScatter:
      case CollKind::kAllGather:
      case CollKind::kBroadcast:
      case CollKind::kReduce:
      case CollKind::kAllToAll: break;
      default: return strprintf("%s does not run in the device executor yet", collName(c.kind));
    }
    // Every op runs in the kernel: Avg and PreMulSum pre-multiply what they read from the send buffer, and an
    // in-place call of theirs first copies its input aside (enqueueExec), so every rank takes this path whatever it
    // passes.
    any = any || c.count > 0;
  }
  if (!any) return "a call of 0 elements has nothing to run";
  return {};
}

void DeviceEngine::setupExec(int device) {
  const int n = host_.size(), me = host_.rank();
  execCfg_ = devproto::ProtoConfig{};
  const std::string& proto = host_.config().gpuProto;
  if (proto == "simple") {
    execCfg_.llMaxBytes = 0;
  } else if (proto == "ll") {
    execCfg_.llMaxBytes = execCfg_.pieceBytes;  // an LL op is one piece (the plans' slot rule)
  } else if (proto == "ll128") {
    execCfg_.llMaxBytes = 0;
    execCfg_.ll128MaxBytes = UINT32_MAX;
  } else if (host_.gpuLL128()) {
    execCfg_.ll128MaxBytes = devproto::kDefaultLL128MaxBytes;
  }
  execConnBytes_ = devproto::connMemBytes(execCfg_);
  execChannels_ = std::clamp(host_.gpuChannelCap(), 1, kMaxDevChannels);
  // Per channel, n FIFOs (index p: rank p -> this rank) and a send and a receive step per peer.
  const size_t slots = static_cast<size_t>(n) * static_cast<size_t>(execChannels_);
  const size_t regionBytes = execConnBytes_ * slots;
  const size_t localBytes = kLocalSteps + 2 * sizeof(uint64_t) * slots;
  struct Info {
    unsigned char handle[kCudaIpcHandleBytes];
    int32_t ok;
    int32_t device;
    uint32_t pieceBytes, nslots, llMaxBytes, ll128MaxBytes, channels;
  };
  Info mine{};
  std::string why;
  int e = 0;
  const char* step = "";
  auto attempt = [&](const char* name, auto call) {
    if (e != 0) return;
    step = name;
    e = call();
  };
  void* setupStream = nullptr;
  attempt("cudaMalloc", [&] { return api_.deviceMalloc(&execMem_, regionBytes); });
  attempt("cudaMalloc", [&] { return api_.deviceMalloc(&execLocal_, localBytes); });
  attempt("cudaHostAlloc", [&] { return api_.hostAllocMapped(&execCtlHost_, &execCtlDev_, 128); });
  attempt("cudaStreamCreate", [&] { return api_.streamCreate(&setupStream); });
  attempt("cudaMemsetAsync", [&] { return api_.memsetAsync(execMem_, 0, regionBytes, setupStream); });
  attempt("cudaMemsetAsync", [&] { return api_.memsetAsync(execLocal_, 0, localBytes, setupStream); });
  attempt("cudaStreamSynchronize", [&] { return api_.streamSynchronize(setupStream); });
  if (setupStream) api_.streamDestroy(setupStream);
  attempt("cudaIpcGetMemHandle", [&] { return api_.ipcGetMemHandle(mine.handle, execMem_); });
  if (e != 0)
    why = strprintf("%s for the device executor's %zu bytes of FIFOs on device %d failed: %s (CUDA error %d)", step,
                    regionBytes, device, api_.errorString(e), e);
  if (execCtlHost_) std::memset(execCtlHost_, 0, 128);
  mine.ok = why.empty() ? 1 : 0;
  mine.device = device;
  mine.pieceBytes = execCfg_.pieceBytes;
  mine.nslots = execCfg_.nslots;
  mine.llMaxBytes = execCfg_.llMaxBytes;
  mine.ll128MaxBytes = execCfg_.ll128MaxBytes;
  mine.channels = static_cast<uint32_t>(execChannels_);
  std::vector<Info> all(static_cast<size_t>(n));
  host_.allGather(&mine, all.data(), sizeof(Info));
  for (int r = 0; r < n && why.empty(); ++r) {
    const Info& p = all[static_cast<size_t>(r)];
    if (p.ok != 1) why = strprintf("rank %d could not set up its device executor FIFOs (its log says why)", r);
    else if (p.pieceBytes != mine.pieceBytes || p.nslots != mine.nslots || p.llMaxBytes != mine.llMaxBytes ||
             p.ll128MaxBytes != mine.ll128MaxBytes || p.channels != mine.channels)
      why = strprintf("rank %d's FIFO settings differ from rank %d's (a build of other sources?)", r, me);
  }
  if (why.empty()) {
    auto whyNotOpened = [&](int r, int e) {
      return strprintf("cudaIpcOpenMemHandle of rank %d's executor FIFOs failed: %s (CUDA error %d)", r,
                       api_.errorString(e), e);
    };
    why = mapPeerBuffers(
        api_, n, me, execMem_, [&](int r) -> const void* { return all[static_cast<size_t>(r)].handle; }, whyNotOpened,
        &execPeerMem_);
  }
  why = agreeOnSuccess(host_, std::move(why), "map its peers' executor FIFOs");
  if (why.empty()) {
    execState_ = ExecState::kOn;
    host_.failure().watch(static_cast<uint32_t*>(execCtlHost_));
    STRATA_INFO(kLogNet,
                "rank %d: device executor on (%d ranks, up to %d channels, %zu bytes of FIFOs per rank, LL up to %u "
                "bytes, LL128 up to %u bytes)",
                me, n, execChannels_, regionBytes, execCfg_.llMaxBytes, execCfg_.ll128MaxBytes);
    return;
  }
  execState_ = ExecState::kOff;
  // The likely cause, by the step that failed.
  const char* likely = "a peer rank failed its own set-up (its log names the CUDA call)";
  if (why.find("cudaIpc") != std::string::npos)
    likely =
        "these GPUs cannot map each other's memory (no peer access between them, ranks in separate containers "
        "or PID namespaces, or MIG instances)";
  else if (why.find("cudaMalloc") != std::string::npos || why.find("cudaHostAlloc") != std::string::npos)
    likely = "too little free device or pinned host memory";
  else if (why.find("settings differ") != std::string::npos) likely = "the ranks run different builds of Strata";
  STRATA_WARN(kLogNet,
              "rank %d: device executor off (%s); likely cause: %s; device collectives on this communicator take the "
              "direct and staged paths (STRATA_GPU_EXECUTOR=0 chooses them without trying the executor)",
              me, why.c_str(), likely);
  unmapPeerBuffers(api_, execPeerMem_, me);
  execPeerMem_.clear();
}

DeviceEngine::ExecSlot& DeviceEngine::freeExecSlot(size_t bytes, bool captured) {
  if (captured) {
    // A captured call's slot is read by every replay of its graph: it is never reused, and lives until destroy.
    auto s = std::make_unique<ExecSlot>();
    s->engine = this;
    check(api_.hostAllocMapped(&s->host, &s->dev, bytes), "cudaHostAlloc");
    s->bytes = bytes;
    s->used = true;
    execCaptured_.push_back(std::move(s));
    return *execCaptured_.back();
  }
  // The oldest slot whose call has finished, else a new one (at most 64 in flight; then wait for the oldest).
  ExecSlot* slot = nullptr;
  for (auto& s : execSlots_) {
    if (!s->used || api_.eventQuery(s->done) == 0) {
      slot = s.get();
      break;
    }
  }
  if (!slot && execSlots_.size() >= 64) {
    slot = execSlots_.front().get();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(host_.config().timeoutMs);
    while (api_.eventQuery(slot->done) == kCudaErrorNotReady) {
      host_.failure().throwIfFailed();
      if (std::chrono::steady_clock::now() > deadline)
        throw TimeoutError(strprintf("rank %d: no device executor slot freed within the deadline", host_.rank()));
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  if (!slot) {
    auto s = std::make_unique<ExecSlot>();
    s->engine = this;
    check(api_.eventCreate(&s->done), "cudaEventCreate");
    slot = s.get();
    execSlots_.push_back(std::move(s));
  }
  if (slot->bytes < bytes) {
    if (slot->host) api_.hostFree(slot->host);
    slot->host = slot->dev = nullptr;
    slot->bytes = 0;
    const size_t want = std::max(bytes, size_t{64} << 10);
    check(api_.hostAllocMapped(&slot->host, &slot->dev, want), "cudaHostAlloc");
    slot->bytes = want;
  }
  // Move the slot to the back: the front is the oldest in flight.
  auto it = std::find_if(execSlots_.begin(), execSlots_.end(), [&](const auto& s) { return s.get() == slot; });
  std::unique_ptr<ExecSlot> keep = std::move(*it);
  execSlots_.erase(it);
  execSlots_.push_back(std::move(keep));
  return *slot;
}

void DeviceEngine::execFinished(void* arg) {
  auto* slot = static_cast<ExecSlot*>(arg);
  const auto* f = reinterpret_cast<const devproto::Failure*>(static_cast<char*>(slot->host) + kSlotFailure);
  const uint32_t code = std::atomic_ref<const uint32_t>(f->code).load(std::memory_order_acquire);
  if (code == devproto::kFailNone) return;
  DeviceEngine& e = *slot->engine;
  if (code == devproto::kFailMismatch) {
    e.host_.recordFailure(
        strataInvalidUsage,
        strprintf("rank %d: %s in the device executor: rank %d's message has %llu bytes, but the recv it meets expects "
                  "%llu (the n-th send to a rank meets that rank's n-th recv from the sender, as NCCL matches them)",
                  e.host_.rank(), slot->what.c_str(), f->peer, static_cast<unsigned long long>(f->got),
                  static_cast<unsigned long long>(f->expected)));
    return;
  }
  const char* waited = f->waitingFor == 0   ? "a free FIFO slot"
                       : f->waitingFor == 1 ? "data"
                       : f->waitingFor == 2 ? "LL data"
                       : f->waitingFor == 3 ? "a send/recv header"
                       : f->waitingFor == 5 ? "LL128 data"
                                            : "an earlier op";
  const std::string from =
      f->waitingFor == 4 ? strprintf("of its lane %d", f->peer) : strprintf("from rank %d", f->peer);
  const std::string msg = strprintf("rank %d: %s in the device executor %s (lane %d, op %d, waiting for %s %s)",
                                    e.host_.rank(), slot->what.c_str(),
                                    code == devproto::kFailTimedOut ? "timed out (STRATA_TIMEOUT_MS)"
                                                                    : "stopped: the communicator failed or was aborted",
                                    f->lane, f->op, waited, from.c_str());
  e.host_.recordFailure(code == devproto::kFailTimedOut ? strataTimeout : strataRemoteError, msg);
}

// Grows a device buffer of the executor to `bytes`; the old one may still be in use by calls in flight (or by a
// captured graph), so it is freed at destroy.
void DeviceEngine::growExecBuffer(void** buf, size_t* have, size_t bytes) {
  if (bytes <= *have) return;
  if (*buf) execRetired_.push_back(*buf);
  *buf = nullptr;
  *have = 0;
  check(api_.deviceMalloc(buf, bytes), "cudaMalloc");
  *have = bytes;
}

void DeviceEngine::enqueueCaptured(std::span<const CollCall> calls, void* stream) {
  const int me = host_.rank();
  // A collective of 0 elements moves nothing on any path: captured, it adds nothing to the graph (as with NCCL).
  if (calls.size() == 1 && calls[0].count == 0 && !isP2P(calls[0].kind)) return;
  // One rank: the call is a device copy (or nothing), which a graph captures as it is.
  if (calls.size() == 1 && soloCopy(calls[0], stream)) return;
  std::vector<CollCall> colls, p2p;
  for (const CollCall& c : calls) (isP2P(c.kind) ? p2p : colls).push_back(c);
  std::string why = colls.empty() ? std::string() : execRefusal(colls);
  if (why.empty() && !p2p.empty()) why = p2pRefusal();
  if (!why.empty())
    throw InvalidUsage(
        strprintf("rank %d: this call cannot be captured into a CUDA graph: %s. Only collectives that "
                  "run in the device executor can be captured (their state lives on the device); "
                  "run this one outside the capture",
                  me, why.c_str()));
  if (host_.size() > 1 && !colls.empty()) agreeSettings();
  if (execState_ == ExecState::kUnset)
    throw InvalidUsage(strprintf(
        "rank %d: a communicator's first device collective sets up its device executor (memory, CUDA IPC), which a "
        "CUDA graph cannot capture: run one collective outside the capture first (a warm-up iteration)",
        me));
  // Slots, scratch and input copies are allocated here and reused by every replay: allocations are not stream work,
  // so this thread's capture mode is relaxed around them (as CUDA asks of libraries that allocate while capturing).
  int mode = 2;  // cudaStreamCaptureModeRelaxed
  check(api_.exchangeCaptureMode(&mode), "cudaThreadExchangeStreamCaptureMode");
  try {
    // The sends and receives are lowered first: what refuses them refuses the group before anything is captured.
    size_t unit = 1;
    const DevPlan p2pPlan = p2p.empty() ? DevPlan{} : lowerExecP2P(p2p, &unit);
    for (const CollCall& c : colls)
      if (c.count > 0) enqueueExec(c, stream, /*captured=*/true);
    if (!p2p.empty()) enqueueExecP2P(p2p, p2pPlan, unit, stream, /*captured=*/true);
  } catch (...) {
    api_.exchangeCaptureMode(&mode);
    throw;
  }
  check(api_.exchangeCaptureMode(&mode), "cudaThreadExchangeStreamCaptureMode");
}

void DeviceEngine::enqueueExec(const CollCall& c, void* stream, bool captured) {
  const int n = host_.size(), me = host_.rank();
  const size_t esize = dtypeSize(c.dtype);
  const EffectiveOp eff = isReducing(c.kind) ? host_.effectiveOp(c.op, c.dtype) : EffectiveOp{};
  // The kernel pre-multiplies every element it reads from the send buffer. In place, a plan may read an element
  // of the send buffer after writing it through the receive buffer, so the input is copied aside first and the call
  // runs out of place from the copy (one device copy of the input, at memory speed).
  const void* input = c.sendbuff;
  bool inPlace = callInPlace(c, me, esize);
  if (inPlace && eff.preScale) {
    size_t sendElems = 0, recvElems = 0;
    callBufferElems(c, n, me, &sendElems, &recvElems);
    growExecBuffer(&execInput_, &execInputBytes_, sendElems * esize);
    check(api_.memcpyAsync(execInput_, c.sendbuff, sendElems * esize, stream), "cudaMemcpyAsync (executor input)");
    input = execInput_;
    inPlace = false;
  }
  // Channels: the same count on every rank, from the algorithm and the call's size. Each channel runs the plan on
  // its part of every op, so the plan's chunks grow with the channels: each channel's part keeps the FIFO's
  // half-capacity rule.
  // A loaded plan program (STRATA_PLANS) that STRATA_ALGO forces runs where it serves the call and its channels
  // (its thread blocks, and the tail's) fit the executor's: on those channels, one plan, nothing cut further.
  const LoadedProgram* program = execProgram(c, n, inPlace);
  const std::string algo = program ? program->program->name : execAlgorithm(c.kind);
  const int channels = program ? 1 : channelsFor(c.kind, algo, n, callBytes(c, n), execChannels_, kExecBytesPerChannel);
  const size_t chunk =
      std::max<size_t>(1, static_cast<size_t>(channels) * execCfg_.nslots * execCfg_.pieceBytes / 2 / esize);
  const std::vector<uint64_t> key{
      static_cast<uint64_t>(c.kind),  static_cast<uint64_t>(c.root), inPlace ? 1u : 0u, c.count, chunk, esize,
      static_cast<uint64_t>(channels)};
  ExecPlanEntry* entry = nullptr;
  for (auto& [k, v] : execPlans_)
    if (k == key) entry = v.get();
  if (!entry) {
    if (execPlans_.size() > 64) {
      // A kernel in flight (or a captured graph) may still read the evicted plan's ops: they are freed at destroy.
      if (execPlans_.front().second->devOps) execRetired_.push_back(execPlans_.front().second->devOps);
      execPlans_.erase(execPlans_.begin());
    }
    auto fresh = std::make_unique<ExecPlanEntry>();
    fresh->plan = host_.selector().makePlan(makeCollArgs(c.kind, n, me, c.count, chunk, c.root, c.peer, inPlace), algo);
    LowerOptions lo;
    lo.channels = channels;
    lo.inPlace = inPlace;
    if (inPlace)  // the send buffer's element 0 as an element of the receive buffer (NCCL's in-place layouts)
      lo.sendAt = (static_cast<const char*>(c.sendbuff) - static_cast<const char*>(c.recvbuff)) /
                  static_cast<std::ptrdiff_t>(esize);
    fresh->dev = lowerPlan(fresh->plan, lo);
    entry = fresh.get();
    execPlans_.emplace_back(key, std::move(fresh));
  }
  const size_t recvElems = [&] {
    size_t s = 0, r = 0;
    callBufferElems(c, n, me, &s, &r);
    return r;
  }();
  growExecBuffer(&execScratch_, &execScratchBytes_, entry->dev.scratchElems * esize);
  // The plan's ops go to device memory once, by a copy on the stream ahead of the plan's first kernel, and every later
  // call of the plan uses them. While capturing, that copy would become a graph node reading host memory the cache
  // may free, so a plan first seen then has its ops copied with the launch's arguments (launchExec), as a send/recv
  // group's are: either way the kernel reads them from device memory.
  if (!entry->devOps && !entry->dev.ops.empty() && !captured) {
    const size_t opsBytes = sizeof(devproto::DevOp) * entry->dev.ops.size();
    check(api_.deviceMalloc(&entry->devOps, opsBytes), "cudaMalloc (executor plan ops)");
    check(api_.memcpyAsync(entry->devOps, entry->dev.ops.data(), opsBytes, stream), "cudaMemcpyAsync (plan ops)");
  }
  ExecLaunch l;
  l.bufs[kBufSend] = const_cast<void*>(input);
  l.bufs[kBufRecv] = c.recvbuff;
  l.bufs[kBufScratch] = execScratch_;
  l.dtype = c.dtype;
  l.eff = eff;
  l.recvElems = recvElems;
  l.devOps = static_cast<const devproto::DevOp*>(entry->devOps);
  launchExec(entry->dev, l, strprintf("%s of %zu elements", collName(c.kind), c.count), stream, captured);
}

void DeviceEngine::launchExec(const DevPlan& dp, const ExecLaunch& l, const std::string& what, void* stream,
                              bool captured) {
  const int n = host_.size(), me = host_.rank();
  const int lanes = dp.lanes();
  if (lanes == 0) return;
  const bool waits = dp.hasWaits();
  const size_t lanesBytes = align16(sizeof(devproto::LaneArgs) * static_cast<size_t>(lanes));
  const size_t un = static_cast<size_t>(n), uch = static_cast<size_t>(execChannels_);
  const size_t tableBytes = align16(sizeof(void*) * un * uch);
  const size_t opsBytes = l.devOps ? 0 : align16(sizeof(devproto::DevOp) * dp.ops.size());
  const size_t bufTableBytes = sizeof(void*) * l.bufTable.size();
  const size_t offRecv = kSlotLanes + lanesBytes, offSend = offRecv + tableBytes, offOps = offSend + tableBytes;
  const size_t offBufs = offOps + opsBytes;
  ExecSlot& slot = freeExecSlot(offBufs + bufTableBytes, captured);
  char* h = static_cast<char*>(slot.host);
  char* d = static_cast<char*>(slot.dev);
  // The kernel's arguments: written here into the slot, copied on the stream to the slot's device memory and read
  // there. at(off) is the device copy of h + off (off >= kSlotLanes).
  const size_t argsBytes = offBufs + bufTableBytes - kSlotLanes;
  if (slot.argsBytes < argsBytes) {
    if (slot.args) api_.deviceFree(slot.args);  // its last call has finished (freeExecSlot), or it is new
    slot.args = nullptr;
    slot.argsBytes = 0;
    const size_t want = captured ? argsBytes : std::max(argsBytes, size_t{16} << 10);
    check(api_.deviceMalloc(&slot.args, want), "cudaMalloc (executor launch arguments)");
    slot.argsBytes = want;
  }
  auto at = [&](size_t off) { return static_cast<char*>(slot.args) + (off - kSlotLanes); };
  std::memset(h, 0, kSlotLanes);  // failure record and stop word
  auto** recvMem = reinterpret_cast<void**>(h + offRecv);
  auto** sendMem = reinterpret_cast<void**>(h + offSend);
  for (size_t ch = 0; ch < static_cast<size_t>(dp.channels); ++ch) {
    for (size_t p = 0; p < un; ++p) {
      recvMem[ch * un + p] = execPeerMem_[static_cast<size_t>(me)] + (ch * un + p) * execConnBytes_;
      sendMem[ch * un + p] = execPeerMem_[p] + (ch * un + static_cast<size_t>(me)) * execConnBytes_;
    }
  }
  if (!dp.ops.empty() && !l.devOps) std::memcpy(h + offOps, dp.ops.data(), sizeof(devproto::DevOp) * dp.ops.size());
  const auto* ops = l.devOps ? l.devOps : reinterpret_cast<const devproto::DevOp*>(at(offOps));
  if (bufTableBytes) std::memcpy(h + offBufs, l.bufTable.data(), bufTableBytes);
  char* local = static_cast<char*>(execLocal_);
  for (int lane = 0; lane < lanes; ++lane) {
    devproto::LaneArgs a{};
    const size_t ul = static_cast<size_t>(lane);
    a.ops = ops + dp.laneBegin[ul];
    a.nops = dp.laneBegin[ul + 1] - dp.laneBegin[ul];
    a.lane = lane;
    for (int b = 0; b < kBuffersPerColl; ++b) a.bufs[b] = l.bufs[b];
    a.bufTable = bufTableBytes ? reinterpret_cast<void* const*>(at(offBufs)) : nullptr;
    const size_t ch = static_cast<size_t>(dp.channelOf(lane));
    a.recvMem = reinterpret_cast<void* const*>(at(offRecv)) + ch * un;
    a.sendMem = reinterpret_cast<void* const*>(at(offSend)) + ch * un;
    a.sendStep = reinterpret_cast<uint64_t*>(local + kLocalSteps) + ch * un;
    a.recvStep = reinterpret_cast<uint64_t*>(local + kLocalSteps) + uch * un + ch * un;
    a.cfg = execCfg_;
    a.dtype = l.dtype;
    a.op = l.eff.kind;
    a.preMul = l.eff.preMul;
    a.preMulInt = l.eff.preMulInt;
    a.postDiv = l.eff.postDiv;
    a.recvElems = l.recvElems;
    a.lanesDone = reinterpret_cast<uint32_t*>(local + kLocalLanesDone);
    a.nlanes = static_cast<uint32_t>(lanes);
    a.laneOps = waits ? reinterpret_cast<uint32_t*>(local + kLocalLaneOps) : nullptr;
    a.abortWord = static_cast<const uint32_t*>(execCtlDev_);
    a.stopWord = reinterpret_cast<uint32_t*>(d + kSlotStop);
    a.deadlineNs = 0;
    a.timeoutNs = static_cast<uint64_t>(host_.config().timeoutMs) * 1000000u;
    a.failure = reinterpret_cast<devproto::Failure*>(d + kSlotFailure);
    std::memcpy(h + kSlotLanes + sizeof(a) * ul, &a, sizeof(a));
  }
  slot.what = strprintf("%s (call %llu)", what.c_str(), static_cast<unsigned long long>(++execCalls_));
  slot.used = true;
  // Cross-lane waits count each lane's completed ops from 0: zeroed on the stream before the kernel (a captured call
  // captures the memset too, so every replay starts from 0).
  if (waits)
    check(api_.memsetAsync(local + kLocalLaneOps, 0, sizeof(uint32_t) * static_cast<size_t>(lanes), stream),
          "cudaMemsetAsync");
  check(api_.memcpyAsync(slot.args, h + kSlotLanes, argsBytes, stream), "cudaMemcpyAsync (executor launch arguments)");
  check(api_.launchExecutor(slot.args, lanes, kExecThreads, static_cast<int>(l.dtype), static_cast<int>(l.eff.kind),
                            stream),
        "the device executor's kernel launch");
  check(api_.launchHostFunc(stream, &DeviceEngine::execFinished, &slot), "cudaLaunchHostFunc");
  if (!captured) check(api_.eventRecord(slot.done, stream), "cudaEventRecord");
}

std::string DeviceEngine::p2pRefusal() const {
  if (host_.config().gpuExecutor != 1)
    return "the device executor is off (STRATA_GPU_EXECUTOR=0; STRATA_GPU_EXECUTOR=1, the default, turns it on)";
  if (execState_ == ExecState::kOff) return "the device executor could not be set up on this communicator";
  if (execState_ == ExecState::kUnset)
    return "the device executor is set up by the communicator's first device collective (send/recv alone cannot: "
           "not every rank takes part), and none has run yet";
  return {};
}

DevPlan DeviceEngine::lowerExecP2P(std::span<const CollCall> calls, size_t* unit) const {
  // The element the kernel moves: the widest of 8, 4, 2, 1 bytes that divides every call's bytes and address. Every
  // split of a message is made in bytes (lowerP2P), so the two ends of a message need not agree on it.
  size_t u = 8;
  auto fit = [&](uint64_t v) {
    while (u > 1 && v % u != 0) u /= 2;
  };
  std::vector<DevP2PCall> members;
  for (const CollCall& c : calls) {
    const uint64_t bytes = c.count * dtypeSize(c.dtype);
    fit(bytes);
    fit(reinterpret_cast<uintptr_t>(c.kind == CollKind::kSend ? c.sendbuff : c.recvbuff));
    members.push_back(DevP2PCall{c.kind == CollKind::kSend, c.peer, bytes});
  }
  *unit = u;
  return lowerP2P(host_.rank(), host_.size(), members, u, execChannels_, kExecBytesPerChannel);
}

void DeviceEngine::enqueueExecP2P(std::span<const CollCall> calls, const DevPlan& dp, size_t unit, void* stream,
                                  bool captured) {
  if (dp.lanes() == 0) return;
  std::vector<size_t> aside(calls.size(), SIZE_MAX);  // offset in execInput_ of a send copied aside
  size_t asideBytes = 0;
  for (size_t i = 0; i < calls.size(); ++i) {
    const CollCall& c = calls[i];
    const bool send = c.kind == CollKind::kSend;
    const uint64_t bytes = c.count * dtypeSize(c.dtype);
    // A send whose memory a receive of the same group writes would race with it in the kernel: it goes from a device
    // copy taken first, on the stream, as the host path copies it aside.
    if (send && bytes > 0 && sendOverlapsARecv(c, calls)) {
      aside[i] = asideBytes;
      asideBytes += align16(bytes);
    }
  }
  if (asideBytes) growExecBuffer(&execInput_, &execInputBytes_, asideBytes);
  ExecLaunch l;
  l.bufTable.assign(calls.size() * kBuffersPerColl, nullptr);
  for (size_t i = 0; i < calls.size(); ++i) {
    const CollCall& c = calls[i];
    void* sendbuff = const_cast<void*>(c.sendbuff);
    if (aside[i] != SIZE_MAX) {
      sendbuff = static_cast<char*>(execInput_) + aside[i];
      check(api_.memcpyAsync(sendbuff, c.sendbuff, c.count * dtypeSize(c.dtype), stream),
            "cudaMemcpyAsync (a send overlapping a receive)");
    }
    l.bufTable[i * kBuffersPerColl + kBufSend] = sendbuff;
    l.bufTable[i * kBuffersPerColl + kBufRecv] = c.recvbuff;
  }
  l.dtype = unit == 8 ? strataUint64 : unit == 4 ? strataUint32 : unit == 2 ? strataFloat16 : strataUint8;
  const std::string what =
      calls.size() == 1 ? strprintf("%s of %zu bytes %s rank %d", calls[0].kind == CollKind::kSend ? "send" : "recv",
                                    calls[0].count * dtypeSize(calls[0].dtype),
                                    calls[0].kind == CollKind::kSend ? "to" : "from", calls[0].peer)
                        : strprintf("send/recv group of %zu calls", calls.size());
  launchExec(dp, l, what, stream, captured);
}

void DeviceEngine::freeExec(bool idle) {
  if (execCtlHost_) host_.failure().unwatch(static_cast<uint32_t*>(execCtlHost_));
  const int me = host_.rank();
  unmapPeerBuffers(api_, execPeerMem_, me);
  if (!idle) {
    // A kernel may still run: leak what it may touch (the slots, the FIFOs, the scratch and input copies), as the
    // other paths do.
    for (auto& s : execSlots_) (void)s.release();
    for (auto& s : execCaptured_) (void)s.release();
    STRATA_WARN(kLogColl, "rank %d: device executor work still pending at destruction; its memory is leaked", me);
    return;
  }
  for (auto& s : execSlots_) {
    api_.eventDestroy(s->done);
    if (s->host) api_.hostFree(s->host);
    if (s->args) api_.deviceFree(s->args);
  }
  execSlots_.clear();
  // Captured calls' slots: a graph that still holds them must not be launched after the communicator is destroyed
  // (as with NCCL).
  for (auto& s : execCaptured_) {
    api_.hostFree(s->host);
    if (s->args) api_.deviceFree(s->args);
  }
  execCaptured_.clear();
  for (void* p : execRetired_) api_.deviceFree(p);
  for (auto& [key, entry] : execPlans_)
    if (entry->devOps) api_.deviceFree(entry->devOps);
  if (execScratch_) api_.deviceFree(execScratch_);
  if (execInput_) api_.deviceFree(execInput_);
  if (hierScratch_) api_.deviceFree(hierScratch_);
  if (execLocal_) api_.deviceFree(execLocal_);
  if (execCtlHost_) api_.hostFree(execCtlHost_);
  freeExportedBuffer(api_, execMem_, quiesced_ || execState_ != ExecState::kOn, me, "device executor FIFOs",
                     "write them");
}

}  // namespace strata
