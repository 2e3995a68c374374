// The cost model: an alpha-beta model of every algorithm of a collective over the link classes of the
// topology, evaluated per call size. Pure functions of their inputs, so every rank of a communicator (same
// inputs) makes the same choice, and tools can ask what the selector would do for a topology file without
// running anything. The policy around it (STRATA_ALGO, the decision cache) is the Selector (selector.h).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "collectives/algorithms.h"
#include "topology/topology.h"

namespace strata {

/// What the cost model knows about a communicator.
struct TuningInputs {
  int nranks = 1;
  std::vector<int> hostOf;         // host index of every rank (0..H-1); empty: one host
  LinkFigures intra{0.6, 8.0};     // rank to rank on one host (shm, or NVLink between GPUs)
  LinkFigures inter{15.0, 1.25};   // one flow between hosts (one NIC, or TCP)
  int nicsPerHost = 1;             // flows between hosts that run at full speed at once, per host
  double reduceGBps = 20;          // local reduction throughput (output bytes per second)
  double copyGBps = 20;            // local copy throughput
  double messageUs = 0.3;          // fixed cost of one message besides link latency (executor, FIFO)
  size_t chunkBytes = 512 * 1024;  // pipeline chunk of the ring-like plans
  // The device executor (src/device/): each of its `lanes` parallel copies of a plan (channels, one thread block
  // each) moves data at most at laneGBps, so a connection carries at most lanes x laneGBps; and it reduces as it
  // moves (recvReduceSend), so a ring's reduction overlaps its transfer instead of adding to it. lanes 0: a host
  // executor (no cap, reduction after the transfer).
  int lanes = 0;
  double laneGBps = 0;
  bool fusedReduce = false;
};

/// Inputs for a communicator with this topology and these settings.
TuningInputs tuningInputs(const Topology& topo, size_t chunkBytes);

/// What the device executor's prediction assumes beyond the topology file (strata-topo --device prints them).
struct DeviceFigures {
  int channels = 8;          // channels per call (STRATA_GPU_CHANNELS, or deviceChannelCap)
  int maxChannels = 32;      // the most the executor runs (device/dev_plan.h kMaxDevChannels)
  double laneGBps = 11.6;    // one channel (thread block): NCCL's ring peak on H100, ~370 GB/s, over its 32 channels
  double memoryGBps = 4800;  // the GPU's memory bandwidth (H200: 4.8 TB/s); reductions read 2 and write 1 byte per byte
  size_t chunkBytes = size_t{4} << 20;  // the executor's plan chunk at 8 channels (channels x 512 KiB)
};

/// NCCL's ring busbw over the line rate on NVLink 4 (about 370 of 450 GB/s; perf/RESULTS.md, issue 15).
inline constexpr double kRingEfficiency = 370.0 / 450.0;
/// Channels a device executor call takes when nothing was told, with no GPU in the topology (discovery found none).
inline constexpr int kDefaultDeviceChannels = 8;

/// The most channels a device executor call takes on `topo` when STRATA_GPU_CHANNELS does not say (0): enough
/// channels of `f.laneGBps` each to carry the slowest GPU-to-GPU link of its hosts at kRingEfficiency, between 1 and
/// f.maxChannels. A GPU's link is its NVLink bandwidth where it reaches every other GPU of its host over NVLink
/// (NVSwitch hosts), else PCIe's (kPcieBandwidthGBps): 32 on H100/H200 NVSwitch hosts (450 GB/s), 22 on A100 (300),
/// 2 on PCIe Gen4. kDefaultDeviceChannels when no host of `topo` has a GPU. The same on every rank (the topology is).
int deviceChannelCap(const Topology& topo, const DeviceFigures& f);

/// Whether every GPU of every host of `topo` reaches every other GPU of its host over NVLink (and there is a GPU):
/// where STRATA_GPU_LL128=auto turns the executor's LL128 protocol on, as NCCL enables LL128 on NVLink only (its
/// lines rely on a warp's 128-byte stores arriving together).
bool allGpusOnNvlink(const Topology& topo);

/// Inputs for the device executor on this topology's GPU ranks (intra-host links as the file states them).
TuningInputs deviceTuningInputs(const Topology& topo, const DeviceFigures& figures);

struct Prediction {
  std::string algorithm;
  double us = 0;  // predicted time of one call
};

/// True for the collectives with a choice to make: more than one algorithm. The selector predicts no time for the
/// others (a collective with one algorithm runs it whatever it costs).
bool modelCompares(CollKind kind);

/// Predicted time of every algorithm of `kind` for a call whose full buffer (nccl-tests' "size": the
/// all-reduce buffer, the reduce-scatter input, the all-gather output, the all-to-all send buffer) is `bytes`
/// long, fastest first. Algorithms that do not apply to the layout (AlgorithmRecord::applies: hierarchical on one
/// host) are left out; every record that applies is priced by its cost shape.
std::vector<Prediction> predictAll(CollKind kind, size_t bytes, const TuningInputs& in);
/// The model's time of a call made of `phases` (a loaded plan program's shape, plan_program.h).
double priceUs(const std::vector<Phase>& phases, const TuningInputs& in);

/// An algorithm's shape as the model prices it, summed over its phases: the counts tests/unit/test_cost_model.cc
/// takes from the generated plans too, to catch a generator and the model drifting apart. NaN: a count the
/// algorithm's formula does not use.
struct ShapeCounts {
  int steps = 0;            // message hops on the critical path: the steps of the latency term
  double pathBytes = 0;     // bytes of the messages along the critical path (one chunk each)
  double sentBytes = 0;     // bytes the busiest rank sends
  double reducedBytes = 0;  // bytes the busiest rank reduces
  double messages = 0;      // messages the busiest rank sends, in chunks of TuningInputs::chunkBytes
  double hostOutBytes = 0;  // bytes that leave the busiest host (0 on one host)
};

/// The counts behind predictAll's figure for `algorithm`; false where predictAll has none (one rank, an algorithm
/// that does not apply to the layout). Throws InvalidArgument for an unknown algorithm.
bool shapeCounts(CollKind kind, const std::string& algorithm, size_t bytes, const TuningInputs& in,
                 ShapeCounts* counts);

}  // namespace strata
