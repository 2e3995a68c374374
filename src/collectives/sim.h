// The simulator behind strata-sim and STRATA_TUNE=sim: it runs the plans the generators produce (the executor's
// own plans, cut in the executor's pieces) as events over the resources of a described cluster, and predicts the
// time of one call.
//
// What it models, per piece of every op of every rank:
//   - the rank's engine: a fixed cost per message (messageUs) and the local work of the op (reduction at
//     reduceGBps, copies at copyGBps), one piece after another;
//   - the connection's slots: a sender waits for a free slot (the receiver consumed the piece nslots earlier),
//     as the executor's FIFO makes it wait;
//   - the links: every resource a message crosses (the rank's port out and the peer's port in on an NVSwitch or
//     in shared memory, the host's memory, the NIC out and in, the leaf switch's uplinks, a connection's channel
//     cap) serves the pieces that cross it one after another at its rate (line rate x efficiency), pieces that
//     reach it at the same instant sharing it, so k flows through one link get 1/k each; a piece has crossed when
//     the slowest of its resources has served it, plus the path's latency;
//   - cross-lane dependencies (Op::afterLane/afterOps) as the executor honours them.
//
// Symmetry: on a cluster of identical hosts, shifting every rank by s (a whole number of hosts, or of leaf
// switches when the fabric has several) maps the cluster onto itself. When the algorithm's plans shift the same
// way (checked on every simulated rank's plan against the plan s ranks on, and against the last block), rank r+s
// does at every moment what rank r does, so only ranks 0..s-1 are simulated: a message from a rank outside them
// is the one its representative sent on the shifted connection. The result is the full simulation's (the tests
// compare both, to 1e-9), at s/n of its cost.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "collectives/coll_args.h"
#include "collectives/cost_model.h"
#include "collectives/plan.h"
#include "collectives/plan_program.h"

namespace strata {

/// A cluster as strata-sim reads it from a JSON file (clusters/*.json): identical hosts, their links, the fabric
/// between them and the executor's settings. Every figure an assumption rests on is in the file, not in code.
struct SimCluster {
  std::string name;
  std::vector<std::string> notes;  // where the figures come from
  int hosts = 1;                   // default host count (strata-sim --hosts overrides)
  int maxHosts = 0;                // largest host count the fabric takes (0: unlimited)
  int ranksPerHost = 1;            // GPUs, or CPU ranks, per host
  int cores = 0;                   // CPU cores per host that ranks share (0: as many as ranks)

  // Inside a host. kSwitch: every rank has one port each way (NVSwitch; PCIe through a switch); kShm: the same
  // (what one core copies into or out of a FIFO), plus the host's memory, which every op's reads and writes cross
  // (an op's traffic: its message read from a slot, its source read, its destination and its outgoing slot
  // written); kPairwise: every ordered pair of ranks its own link (an idealised cluster for tests).
  enum class Intra { kSwitch, kShm, kPairwise };
  Intra intra = Intra::kSwitch;
  double intraGBps = 10;  // per direction, GB/s (1e9 bytes per second)
  double intraLatencyUs = 0.5;
  double intraEfficiency = 1;  // share of the line rate a transfer reaches (protocol overhead)
  /// kShm: the host's memory bandwidth, bytes read plus written per second, for working sets beyond the caches (0:
  /// not a limit); memoryCurve: the same at smaller working sets, as (working-set bytes, GB/s) points in
  /// ascending order, interpolated on log scales. A call's working set is its buffers on every rank of the host.
  double memoryGBps = 0;
  std::vector<std::pair<double, double>> memoryCurve;
  /// kShm: the share of a FIFO slot's write (sender) and read (receiver) that reaches the memory at that rate; the
  /// slots are few and reused, so their lines mostly move between cores through the caches (0.5: one transfer per
  /// message, half at each end). The user buffers' reads and writes count in full.
  double slotMemoryShare = 0.5;
  /// The memory bandwidth at a working set of `bytes` (memoryGBps beyond the curve's last point).
  double memoryGBpsAt(double bytes) const;

  // Between hosts: each rank uses NIC (local index mod nics).
  int nics = 1;
  double nicGBps = 1.25;  // per NIC and direction, GB/s
  double netLatencyUs = 15;
  double netEfficiency = 1;

  // The fabric. kRail: NIC i of every host on rail i's switches; kFatTree: all NICs of a host on one leaf. Hosts
  // group under leaf switches of hostsPerLeaf (0: one switch for all); flows between leaves cross the leaves'
  // uplinks, which carry (hostsPerLeaf x NIC rate / oversubscription) per rail (kRail) or per leaf (kFatTree).
  enum class Fabric { kRail, kFatTree };
  Fabric fabric = Fabric::kRail;
  int hostsPerLeaf = 0;
  double oversubscription = 1;
  double switchLatencyUs = 0;  // per switch crossed (1 within a leaf, 3 through the spine)

  // The executor. kHost: the CPU executor (pieces of pieceBytes, chunks of nslots x pieceBytes / 2); kDevice: the
  // GPU executor, whose `channels` thread blocks each run the plan on their part of every op (chunks and pieces
  // grow with the channels), each moving at most channelGBps (0: no cap).
  enum class Executor { kHost, kDevice };
  Executor executor = Executor::kHost;
  size_t pieceBytes = 128 * 1024;
  int nslots = 8;
  int channels = 1;
  double channelGBps = 0;
  double messageUs = 0.3;  // fixed cost of one message on the rank's engine
  double reduceGBps = 20;  // output bytes per second of a local reduction
  double copyGBps = 20;    // local copies (kCopy, and the copy half of copy-and-send ops)

  /// Bytes of one message (a piece on every channel) and of one plan chunk.
  size_t messageBytes() const;
  size_t chunkBytes() const;
};

/// "switch", "shm", "pairwise": host.intra.kind as cluster files spell it.
const char* intraKindName(SimCluster::Intra kind);

/// Reads a cluster file; throws InvalidArgument "<origin>: <field>: <what is wrong>", naming the field (a missing
/// required one, a wrong type, a value out of range, or one the format does not have: a typo).
SimCluster clusterFromJson(const std::string& text, const std::string& origin);
SimCluster loadCluster(const std::string& path);
/// The cluster as JSON (clusterFromJson reads it back).
std::string clusterToJson(const SimCluster& cluster);

/// The cluster a communicator's tuning inputs describe (STRATA_TUNE=sim): its hosts, links and executor costs.
SimCluster clusterFromTuning(const TuningInputs& in, size_t pieceBytes, int nslots);

/// One call to simulate.
struct SimCall {
  CollKind kind = CollKind::kAllReduce;
  size_t bytes = 0;     // nccl-tests' size: the all-reduce buffer, the reduce-scatter input, the all-gather output
  size_t elemSize = 4;  // the dtype's size
  std::string algorithm = "ring";
  int hosts = 0;         // 0: the cluster's
  int ranksPerHost = 0;  // 0: the cluster's
  /// Host of every rank (index: rank); empty: hosts x ranksPerHost ranks, filled host by host. Uneven layouts
  /// are simulated in full.
  std::vector<int> hostOf;
  bool symmetry = true;  // false: simulate every rank (tests compare the two)
  int coarsen = 1;       // chunks and pieces this many times larger: fewer events, at a cost in accuracy
  /// A loaded plan program (plan_program.h) to simulate instead of `algorithm`: its plans come from planOf, and on
  /// the device executor each of its channels is one thread block (one connection per peer and channel, each
  /// moving at most channelGBps), as its file's thread blocks are.
  const PlanProgram* program = nullptr;
};

struct SimResult {
  std::string algorithm;
  double us = 0;           // the call's predicted time: the last rank's last op
  int ranks = 0;           // ranks of the call
  int simulatedRanks = 0;  // ranks simulated (ranks when no symmetry applied)
  uint64_t pieces = 0;     // messages simulated
  uint64_t events = 0;
  double wallMs = 0;  // the simulator's own run time
  /// When each lane of each simulated rank finished its last op (index: rank, lane).
  std::vector<std::vector<double>> laneUs;
};

/// Simulates one call. Throws InvalidArgument for an algorithm the collective lacks, a host count beyond the
/// cluster's maxHosts, or an algorithm that does not apply to the layout (its record's `applies`: hier on one host).
SimResult simulate(const SimCluster& cluster, const SimCall& call);
/// Simulates the given plans of every rank (index: rank; hostOf as in SimCall, empty: all on one host), with
/// `elemSize`-byte elements and no symmetry: for plans no generator makes (tests, groups of sends and receives).
SimResult simulatePlans(const SimCluster& cluster, const std::vector<Plan>& plans, size_t elemSize,
                        const std::vector<int>& hostOf);
/// Every algorithm of the call's collective that applies to its layout (AlgorithmRecord::applies), fastest first;
/// call.algorithm is ignored.
std::vector<SimResult> simulateAll(const SimCluster& cluster, const SimCall& call);

}  // namespace strata
