// DeviceEngine: a communicator's collectives on CUDA device buffers, with NCCL's stream semantics. A call
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
#include <vector>

#include "core/call.h"
#include "core/host_side.h"
#include "kernels/cuda/cuda_api.h"

namespace strata {

class DeviceEngine {
 public:
  DeviceEngine(HostSide& host, CudaApi& api);
  /// Waits (up to the communicator's deadline) until the GPU is done with the engine's memory, then frees it.
  ~DeviceEngine();
  DeviceEngine(const DeviceEngine&) = delete;
  DeviceEngine& operator=(const DeviceEngine&) = delete;

  /// Enqueues one group of calls (all on one stream) and returns. Errors in the arguments or in CUDA calls
  /// throw; errors of the collective itself become the communicator's asynchronous error.
  void enqueue(std::span<const CollCall> calls, void* stream);

  /// Called by the communicator's destroy while the communicator still works: waits until the GPU has finished this
  /// communicator's work, then, if CUDA IPC buffers are shared, a host barrier: after it no peer reads this
  /// rank's buffers, so they can be freed. Without it (abort, a failed peer) the destructor leaks them rather
  /// than free memory a peer's kernel may still read. This makes destroy collective once the IPC path was used.
  void quiesce();

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
    void* done = nullptr;      // event after the slot's last copy back
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
  /// Collective, at the first single device all-reduce: checks that every rank has the same STRATA_GPU_* settings
  /// (the path, rounds and chunks of an all-reduce follow from them). Throws InvalidUsage naming each setting that
  /// differs, with this rank's value and a differing rank's, then and at every later device all-reduce.
  void agreeSettings();
  /// Logs, once per communicator and reason, why a device all-reduce goes through host memory instead of CUDA IPC:
  /// a WARN where the user would expect the direct path, an INFO where the staging is by design or by setting.
  void noteStaged(std::span<const CollCall> calls);
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

  // Settings agreement (agreeSettings), at the first single device all-reduce.
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
};

}  // namespace strata
