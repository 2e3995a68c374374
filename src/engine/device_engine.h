// DeviceEngine: a communicator's collectives on CUDA device buffers, with NCCL's stream semantics (the DeviceSide of
// core/host_side.h; it reaches its communicator only through HostSide). A call
// enqueues its work on the caller's stream and returns without waiting for the GPU; later work on that stream
// sees the result. Two paths (DESIGN.md, "Memory and devices"):
//   - direct: all-reduce between ranks of one host, over CUDA IPC. Each rank exposes a device buffer and a flag
//     array to its peers; a call copies its input into its buffer, raises its flag in every peer's array,
//     waits in the stream for every peer's flag, and one kernel reduces all ranks' inputs (one-shot), or each
//     rank reduces one slice and gathers the others' (two-shot). Nothing runs on the host.
//   - staged: every other call. The stream copies device inputs into pinned host memory and tells the engine
//     (a host function); the communicator's worker runs the collective on the host copies over the usual
//     transports and raises a host flag the stream waits on; the stream then copies the results back.
// Both paths order their work on one chain across calls (an event joins a new stream to the last one), so
// calls on one communicator complete in issue order even when the caller switches streams.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "collectives/plan.h"
#include "collectives/selector.h"
#include "core/call.h"
#include "core/host_side.h"
#include "device/dev_plan.h"
#include "device/dev_types.h"
#include "kernels/cuda/cuda_api.h"

namespace strata {

class DeviceEngine final : public DeviceSide {
 public:
  DeviceEngine(HostSide& host, CudaApi& api);
  /// Waits (up to the communicator's deadline) until the GPU is done with the engine's memory, then frees it.
  ~DeviceEngine() override;
  DeviceEngine(const DeviceEngine&) = delete;
  DeviceEngine& operator=(const DeviceEngine&) = delete;

  /// Enqueues one group of calls (all on one stream) and returns. Errors in the arguments or in CUDA calls
  /// throw; errors of the collective itself become the communicator's asynchronous error.
  void enqueue(std::span<const CollCall> calls, void* stream) override;

  /// Called by the communicator's destroy while the communicator still works: waits until the GPU has finished this
  /// communicator's work, then, if CUDA IPC buffers are shared, a host barrier: after it no peer reads this
  /// rank's buffers, so they can be freed. Without it (abort, a failed peer) the destructor leaks them rather
  /// than free memory a peer's kernel may still read. This makes destroy collective once the IPC path was used.
  void quiesce() override;
  /// Called by the communicator's abort and revoke, from any thread: aborts the sub-communicators of hierarchical
  /// calls, so a call waiting in one returns.
  void abortSubgroups() override;

 private:
  // A staging slot: pinned host memory for one group's buffers plus the flag its stream waits on.
  struct Slot {
    CudaApi* api = nullptr;
    void* host = nullptr;  // staging memory (pinned, mapped)
    void* hostDev = nullptr;
    size_t capacity = 0;
    uint32_t* flag = nullptr;  // host address of the flag the stream waits on
    void* flagDev = nullptr;   // its device address
    void* flagHost = nullptr;  // the allocation holding the flag
    void* done = nullptr;      // event after the slot's last copy back (on the caller's stream)
    void* outDone = nullptr;   // event after the slot's copies back on the engine's copy-out stream
    uint32_t epoch = 0;        // uses so far; the stream waits for flag >= epoch
    // Set by the stream (host function) once the inputs are in host memory; read by the worker.
    std::mutex mutex;
    std::condition_variable cv;
    uint32_t arrived = 0;    // parts of the current use whose inputs are in host memory
    bool abandoned = false;  // the stream work could not be enqueued; the worker fails the calls
    bool hostDone = true;    // the worker has finished with the slot (flag raised)
    /// The stream's host function after a part's inputs reached host memory.
    static void inputsArrived(void* arg);
  };
  enum class Direct { kNone, kOneShot, kTwoShot };
  Direct directKind(const CollCall& call) const;
  /// Collective, at the first device call holding a collective: checks that every rank has the same STRATA_GPU_*
  /// settings (the path, rounds and chunks of a call follow from them). Throws InvalidUsage naming each setting that
  /// differs, with this rank's value and a differing rank's, then and at every later such call.
  void agreeSettings();
  /// Logs, once per communicator and reason, why a device all-reduce goes through host memory instead of CUDA IPC:
  /// a WARN where the user would expect the direct path, an INFO where the staging is by design or by setting.
  void noteStaged(std::span<const CollCall> calls);
  // ---- across hosts (device_hier.cc) ----
  /// Why this collective does not run hierarchically across hosts (intra-host phases in the executor, each rank's
  /// 1/L shard staged through host memory between hosts), or nothing when it does. The same on every rank.
  std::string hierRefusal(const CollCall& call) const;
  /// Collective, at the first hierarchical call: the host's sub-communicator and the one of the ranks with this
  /// rank's place on every host, the copy stream and its events.
  void setupHier();
  void enqueueHier(const CollCall& call, void* stream);
  /// Reduce-scatter and all-gather: their blocks regrouped by rail in device scratch (copies on the stream), then the
  /// host phase in the executor and the rail's phase staged, on the caller's stream.
  void enqueueHierBlocks(const CollCall& call, void* stream, strataRedOp_t localOp, strataRedOp_t crossOp);
  /// The PreMulSum op of hierLocal_ that pre-multiplies as `eff` does (kept, kHierOps at most).
  strataRedOp_t hierLocalPreMul(const EffectiveOp& eff);
  // ---- device executor (device_exec.cc) ----
  /// Why these collectives do not run in the device executor (STRATA_GPU_EXECUTOR=1, one host, kinds, ...), or
  /// nothing when it does. The same on every rank for the same call.
  std::string execRefusal(std::span<const CollCall> calls) const;
  /// The loaded plan program STRATA_ALGO forces for call c (n ranks, in place or not), where it serves the call and
  /// its channels fit the executor's; else nullptr (the built-ins run), with an INFO line saying why.
  const LoadedProgram* execProgram(const CollCall& c, int n, bool inPlace) const;
  /// STRATA_ALGO's built-in for `k`, else the collective's default.
  std::string execAlgorithm(CollKind k) const;
  /// A call on a capturing stream: the executor's, with a slot of its own, else InvalidUsage saying why.
  void enqueueCaptured(std::span<const CollCall> calls, void* stream);
  /// Collective, at the first eligible call: every rank's FIFO region exported and mapped, the control words.
  void setupExec(int device);
  void enqueueExec(const CollCall& call, void* stream, bool captured);
  /// Why a group's sends and receives do not run in the device executor (it is off, or not set up yet), or nothing
  /// when they do. It follows only from what every rank shares (the settings, the collectives so far), so both ends
  /// of every message take the same path whatever else their groups hold.
  std::string p2pRefusal() const;
  /// A group's sends and receives lowered (device/dev_plan.h, lowerP2P), moving elements of *unit bytes. Throws what
  /// lowerP2P throws.
  DevPlan lowerExecP2P(std::span<const CollCall> calls, size_t* unit) const;
  /// Their plan as one executor kernel.
  void enqueueExecP2P(std::span<const CollCall> calls, const DevPlan& plan, size_t unit, void* stream, bool captured);
  /// What one executor kernel is given besides its lowered plan.
  struct ExecLaunch {
    void* bufs[kBuffersPerColl] = {nullptr, nullptr, nullptr};
    std::vector<void*> bufTable;  // not empty: the ops' buffers (lowerP2P) in place of bufs
    strataDataType_t dtype = strataUint8;
    EffectiveOp eff;
    size_t recvElems = 0;
    const devproto::DevOp* devOps = nullptr;  // the plan's ops in device memory; null: copied into the slot
  };
  /// Fills a slot with the plan's lanes and launches the kernel and its host function on `stream`.
  void launchExec(const DevPlan& dp, const ExecLaunch& l, const std::string& what, void* stream, bool captured);
  void growExecBuffer(void** buf, size_t* have, size_t bytes);
  /// The args memory of one executor call (mapped host memory: its failure record and stop word, LaneArgs, FIFO
  /// pointer tables and lowered ops), reused once the call's event completed.
  struct ExecSlot {
    DeviceEngine* engine = nullptr;
    void* host = nullptr;
    void* dev = nullptr;  // its device address
    size_t bytes = 0;
    // Device memory the launch's part of the slot (LaneArgs, FIFO tables, ops, buffer table) is copied to on the
    // stream before the kernel, which reads it from there, not over PCIe.
    void* args = nullptr;
    size_t argsBytes = 0;
    void* done = nullptr;  // event after the call's kernel and its host function
    bool used = false;
    std::string what;  // the call, for the failure message
  };
  /// Waits until the GPU is done with a slot, grows it to `bytes`; a captured call gets a new slot of its own.
  ExecSlot& freeExecSlot(size_t bytes, bool captured);
  /// Stream host function after an executor kernel: a lane that stopped makes the communicator failed.
  static void execFinished(void* slot);
  void freeExec(bool idle);
  /// Collectives (or a whole group staged): one device copy on one rank, the executor, the direct or the staged path.
  void enqueueCalls(std::span<const CollCall> calls, void* stream, int device);
  void enqueueDirect(const CollCall& call, Direct kind, void* stream);
  void enqueueStaged(std::span<const CollCall> calls, void* stream);
  bool soloCopy(const CollCall& call, void* stream);
  void setupDirect(int device);
  Slot& freeSlot(size_t bytes);
  void joinChain(void* stream);
  void check(int err, const char* what) const;

  HostSide& host_;
  CudaApi& api_;
  std::mutex mutex_;  // one enqueue at a time per communicator

  // The device of every call (fixed by the first one): events can only be recorded on streams of the device
  // they were created on, so the engine's events are created there, under a DeviceGuard, not on whatever device
  // the calling thread happened to have current.
  int device_ = -1;

  // Chain across streams: recorded at the end of every enqueue; a call on another stream waits for it first.
  // Created at the first enqueue, on device_.
  void* chainEvent_ = nullptr;
  void* lastStream_ = nullptr;
  bool chained_ = false;

  // Staged path: pinned host slots, reused once the GPU has copied their results out.
  std::deque<std::unique_ptr<Slot>> slots_;
  // The staged path's copies back to the device run on a stream of the engine's own (on device_), so that while
  // the caller's stream copies part i + 1 in, this one copies part i out: the two directions overlap on the copy
  // engines. The caller's stream waits for it (an event) before its later work.
  void* outStream_ = nullptr;

  // Settings agreement (agreeSettings), at the first device call holding a collective.
  bool settingsAgreed_ = false;
  std::string settingsError_;  // not empty: the ranks' settings differ, and every device all-reduce fails with it

  // Direct path (CUDA IPC), set up collectively at the first eligible call.
  enum class DirectState { kUnset, kOn, kOff } directState_ = DirectState::kUnset;
  std::string directOffReason_;
  uint32_t stagedNoted_ = 0;  // reasons noteStaged has logged (bit per reason): each once per communicator
  int directDevice_ = -1;
  size_t directMaxBytes_ = 0;    // per-call limit of the direct path (one input region)
  size_t oneShotMaxBytes_ = 0;   // up to here one-shot, above it two-shot
  void* ipcBase_ = nullptr;      // this rank's exported allocation
  std::vector<char*> peerBase_;  // every rank's allocation as mapped here (own included)
  uint32_t epoch_ = 0;           // direct calls so far (identical on every rank)
  bool quiesced_ = false;        // quiesce() completed: peers no longer read our IPC buffers

  // Device executor, set up collectively at the first eligible call (DESIGN.md, "The device executor").
  enum class ExecState { kUnset, kOn, kOff } execState_ = ExecState::kUnset;
  devproto::ProtoConfig execCfg_;
  size_t execConnBytes_ = 0;
  int execChannels_ = 1;            // STRATA_GPU_CHANNELS: FIFOs and steps are laid out for this many channels
  void* execMem_ = nullptr;         // device, exported: the FIFOs of every peer -> this rank
  std::vector<char*> execPeerMem_;  // every rank's FIFO region as mapped here (own included)
  void* execLocal_ = nullptr;       // device: send and receive steps per peer, the lanes-done counter
  void* execCtlHost_ = nullptr;     // mapped host memory: the abort word (FailureState::watch)
  void* execCtlDev_ = nullptr;
  void* execScratch_ = nullptr;  // device scratch of the plans (grown; old ones freed at destroy)
  size_t execScratchBytes_ = 0;
  void* execInput_ = nullptr;  // device: an in-place pre-scaled call's input, copied first (grown like the scratch)
  size_t execInputBytes_ = 0;
  std::vector<void*> execRetired_;
  std::deque<std::unique_ptr<ExecSlot>> execSlots_;
  std::vector<std::unique_ptr<ExecSlot>> execCaptured_;  // slots of captured calls: every replay reads them
  struct ExecPlanEntry {
    Plan plan;
    DevPlan dev;
    void* devOps = nullptr;  // dev.ops in device memory, after the plan's first uncaptured call
  };
  std::vector<std::pair<std::vector<uint64_t>, std::unique_ptr<ExecPlanEntry>>> execPlans_;  // key -> plan
  uint64_t execCalls_ = 0;

  // Across hosts (DESIGN.md, "Across hosts"), set up collectively at the first hierarchical call.
  enum class HierState { kUnset, kOn, kOff } hierState_ = HierState::kUnset;
  int hierHosts_ = 1;                            // hosts of the communicator (host identities)
  int hierHostRanks_ = 0;                        // ranks on each host when every host has as many, else 0
  std::mutex subMu_;                             // the sub-communicators, for abortSubgroups (any thread)
  std::shared_ptr<HostSide> hierLocal_;          // this host's ranks: the device executor's phases
  std::shared_ptr<HostSide> hierCross_;          // the ranks with this rank's place on every host: the staged phase
  void* hierStream_ = nullptr;                   // the staged phase's stream (the caller's runs the local phases)
  void* hierLocalDone_ = nullptr;                // recorded on the caller's stream after a piece's reduce-scatter
  void* hierCrossDone_[2] = {nullptr, nullptr};  // recorded on hierStream_ after a piece's cross-host all-reduce
  bool hierNoted_ = false;
  std::vector<std::vector<int>> hierRails_;  // rail j: the ranks with local index j, in rank order (hierCross_'s)
  void* hierScratch_ = nullptr;              // device: a reduce-scatter's or all-gather's blocks by rail (grown)
  size_t hierScratchBytes_ = 0;
  // PreMulSum ops of hierLocal_ for pre-scaled calls (Avg of a float type, PreMulSum): (scalar, integer scalar, op),
  // the most recently used last; at most kHierOps, the oldest destroyed beyond.
  std::vector<std::tuple<double, int64_t, strataRedOp_t>> hierOps_;
};

/// The DeviceSideFactory of the engine (over the process's CudaApi, kernels/cuda_loader.h): what the C API installs
/// with setDeviceSideFactory.
std::unique_ptr<DeviceSide> makeDeviceEngine(HostSide& host);

}  // namespace strata
