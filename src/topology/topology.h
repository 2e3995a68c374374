// The topology model: hosts -> NUMA domains -> devices (cores, GPUs, NICs), link classes between ranks
// with bandwidth/latency figures, and where each rank sits. Every rank of a communicator holds the same
// Topology (built from every rank's discovery through the bootstrap, or loaded from STRATA_TOPO_FILE), so
// every rank makes the same algorithm choices.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

struct Config;
class Bootstrap;

/// How two ranks reach each other.
enum class LinkClass : uint8_t {
  kSelf,    // the same rank
  kShm,     // same host, through host memory
  kNvlink,  // same host, GPUs joined by NVLink
  kPcie,    // same host, GPUs through PCIe
  kNet,     // different hosts
};
const char* linkClassName(LinkClass c);  // "self", "shm", "nvlink", "pcie", "net"

/// Alpha-beta figures of one link class: a message of b bytes takes latencyUs + b / (bandwidthGBps * 1e3) us.
struct LinkFigures {
  double latencyUs = 0;
  double bandwidthGBps = 0;  // per direction, GB/s (1e9 bytes per second)
  double timeUs(double bytes) const { return latencyUs + (bandwidthGBps > 0 ? bytes / (bandwidthGBps * 1e3) : 0); }
};

struct NumaDomain {
  int id = 0;
  std::vector<int> cpus;     // OS cpu indices
  uint64_t memoryBytes = 0;  // 0 when unknown
};

struct Nic {
  std::string name;       // verbs device ("mlx5_0") or netdev ("eth0") when no RDMA device exists
  int port = 1;
  std::string linkLayer;  // "InfiniBand", "Ethernet"
  double gbps = 0;        // link speed, Gbit/s
  int numa = -1;          // NUMA domain the NIC hangs off, -1 unknown
  std::string pciBusId;   // "0000:17:00.0", empty when unknown
  std::string netdev;     // Linux interface of the port, when it has one
  bool rdma = false;      // true for a verbs device
};

struct Gpu {
  int index = 0;           // CUDA device index on its host
  std::string name;        // "NVIDIA H200"
  std::string pciBusId;
  int numa = -1;
  std::vector<int> nvlinkPeers;  // indices of GPUs of the same host reachable over NVLink
  double nvlinkGBps = 0;         // aggregate NVLink bandwidth of this GPU, GB/s per direction (0: none)
};

struct HostTopology {
  std::string hostId;    // hostIdentity(): ranks with equal ids share the host
  std::string hostname;
  int cores = 0;         // CPUs this host offers
  std::vector<NumaDomain> numa;
  std::vector<Nic> nics;
  std::vector<Gpu> gpus;
  LinkFigures shm;       // rank to rank on this host through host memory
  LinkFigures net;       // this host's share of the network (its fastest NIC, or TCP's figure)
};

/// Where one rank runs.
struct RankPlace {
  int host = 0;       // index into Topology::hosts
  int localRank = 0;  // order among the ranks of its host (by global rank)
  int numa = -1;
  int gpu = -1;       // device index on its host, -1 none
  int nic = -1;       // index into its host's nics of the nearest NIC, -1 none
};

struct Topology {
  std::vector<HostTopology> hosts;  // in order of the lowest rank on each
  std::vector<RankPlace> ranks;     // index: rank

  int nranks() const { return static_cast<int>(ranks.size()); }
  int nhosts() const { return static_cast<int>(hosts.size()); }
  /// Global ranks on host h, ascending.
  std::vector<int> ranksOfHost(int h) const;
  LinkClass linkClass(int a, int b) const;
  /// Figures of the link between ranks a and b (the slower end's for kNet).
  LinkFigures link(int a, int b) const;

  /// Human-readable description (strata-topo's default output).
  std::string toText() const;
  /// JSON that fromJson reads back unchanged (strata-topo --json, STRATA_TOPO_FILE).
  std::string toJson() const;
  /// Throws InvalidArgument naming `origin` and what is wrong.
  static Topology fromJson(const std::string& text, const std::string& origin);
};

/// Discovers the local host: hwloc for NUMA/cores/PCIe, libibverbs for RDMA NICs, the CUDA runtime and
/// NVML (loaded at run time; absent means no GPUs) for GPUs and NVLink, sysfs for netdev speeds.
HostTopology discoverHost(const Config& config);

/// The communicator's topology, identical on every rank: each rank discovers its host (or reads
/// STRATA_TOPO_FILE), the descriptions travel through the bootstrap, ranks are placed on hosts by
/// hostIds (index: rank), and each rank gets its NUMA domain, GPU and nearest NIC.
Topology buildTopology(const Config& config, Bootstrap& bootstrap, const std::vector<std::string>& hostIds);

}  // namespace strata
