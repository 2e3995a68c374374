// The device protocol on CPU threads: the memory every rank's "device" holds (connection FIFOs, step counters,
// abort and stop words, failure records) in one shared mapping, and a runner that executes one rank's lowered plan
// with one thread per lane (device/host_policy.h). The mapping is MAP_SHARED, so ranks may be threads of one
// process or processes forked after the world is made: shared memory in place of CUDA IPC. This is how the unit
// tests run the very protocol code the GPU kernels run (ctest label device_cpu).
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/dev_plan.h"
#include "device/dev_types.h"
#include "kernels/reduce_kind.h"
#include "strata/strata.h"

namespace strata {

class CpuDeviceWorld {
 public:
  /// `channels`: the most channels a lowered plan may use (each has its own FIFOs and steps per peer).
  CpuDeviceWorld(int nranks, const devproto::ProtoConfig& cfg, int channels = 1);
  ~CpuDeviceWorld();
  CpuDeviceWorld(const CpuDeviceWorld&) = delete;
  CpuDeviceWorld& operator=(const CpuDeviceWorld&) = delete;

  int nranks() const { return nranks_; }
  int channels() const { return channels_; }
  const devproto::ProtoConfig& config() const { return cfg_; }
  /// The FIFO of from -> to on a channel, held by `to`.
  void* connMem(int from, int to, int channel = 0) const;
  /// Rank r's persistent step counters of a channel, one per peer.
  uint64_t* sendSteps(int r, int channel = 0) const;
  uint64_t* recvSteps(int r, int channel = 0) const;
  /// Rank r's abort word (what strataCommAbort or the host's peer watch sets), stop word and failure record.
  uint32_t* abortWord(int r) const;
  uint32_t* stopWord(int r) const;
  devproto::Failure* failure(int r) const;
  /// Bytes mapped.
  size_t bytes() const { return bytes_; }

 private:
  struct RankBlock;
  RankBlock* block(int r) const;
  int nranks_;
  devproto::ProtoConfig cfg_;
  int channels_;
  size_t connBytes_ = 0, rankBytes_ = 0, bytes_ = 0;
  char* base_ = nullptr;
};

struct CpuCall {
  void* bufs[3] = {nullptr, nullptr, nullptr};  // send, recv, scratch
  void* const* bufTable = nullptr;              // a send/recv group's buffers (lowerP2P), in place of bufs
  strataDataType_t dtype = strataFloat32;
  ReduceKind op = ReduceKind::kSum;
  double preMul = 1.0;
  int64_t preMulInt = 1;
  uint64_t postDiv = 1;         // integer Avg: results divided by this (1: none)
  uint64_t recvElems = 0;       // this rank's results (for postDiv)
  uint64_t timeoutNs = 0;       // 0: no deadline
  uint32_t threadsPerLane = 1;  // >1: each lane is a group of threads, as a thread block is on the GPU
};

/// Runs rank `rank`'s part of `plan` on CPU threads, call.threadsPerLane per lane, and returns when every lane has
/// finished or stopped: kFailNone, or the first failure's code (details in *world.failure(rank)).
uint32_t runRankOnCpu(CpuDeviceWorld& world, int rank, const DevPlan& plan, const CpuCall& call);

}  // namespace strata
