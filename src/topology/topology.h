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
  friend bool operator==(const LinkFigures&, const LinkFigures&) = default;
};

// The model's default figures, used where discovery measures nothing. Rough on purpose: they rank link
// classes and size pipelines; STRATA_TUNE=probe measures instead, and a topology file can state its own.
/// Same host through host memory (a copy into and out of a shared FIFO).
constexpr double kShmLatencyUs = 0.5;
constexpr double kShmBandwidthGBps = 10;
/// GPU to GPU over NVLink: latency here, bandwidth from Gpu::nvlinkGBps.
constexpr double kNvlinkLatencyUs = 1.0;
/// GPU to GPU through PCIe (a Gen4 x16 link's practical rate).
constexpr double kPcieLatencyUs = 1.5;
constexpr double kPcieBandwidthGBps = 24;
/// Between hosts: RDMA (STRATA_NET=ucx over a verbs NIC) or TCP. Bandwidth is the NIC's speed / 8.
constexpr double kRdmaLatencyUs = 2;
constexpr double kTcpLatencyUs = 15;
/// Speed assumed for a network interface that reports none (virtual NICs, some drivers).
constexpr double kUnknownNicGbps = 10;

struct NumaDomain {
  int id = 0;
  std::vector<int> cpus;     // OS cpu indices
  uint64_t memoryBytes = 0;  // 0 when unknown
  friend bool operator==(const NumaDomain&, const NumaDomain&) = default;
};

struct Nic {
  std::string name;  // verbs device ("mlx5_0") or netdev ("eth0") when no RDMA device exists
  int port = 1;
  std::string linkLayer;     // "InfiniBand", "Ethernet"
  double gbps = 0;           // link speed, Gbit/s
  int numa = -1;             // NUMA domain the NIC hangs off, -1 unknown
  std::string pciBusId;      // "0000:17:00.0", empty when unknown
  std::string netdev;        // Linux interface of the port, when it has one
  bool rdma = false;         // true for a verbs device
  bool gbpsAssumed = false;  // the interface reported no speed; gbps is kUnknownNicGbps
  friend bool operator==(const Nic&, const Nic&) = default;
};

struct Gpu {
  int index = 0;     // CUDA device index on its host
  std::string name;  // "NVIDIA H200"
  std::string pciBusId;
  int numa = -1;
  std::vector<int> nvlinkPeers;  // indices of GPUs of the same host reachable over NVLink
  double nvlinkGBps = 0;         // aggregate NVLink bandwidth of this GPU, GB/s per direction (0: none)
  friend bool operator==(const Gpu&, const Gpu&) = default;
};

struct HostTopology {
  std::string hostId;  // hostIdentity(): ranks with equal ids share the host
  std::string hostname;
  int cores = 0;  // CPUs this host offers
  std::vector<NumaDomain> numa;
  std::vector<Nic> nics;
  std::vector<Gpu> gpus;
  LinkFigures shm;  // rank to rank on this host through host memory
  LinkFigures net;  // this host's share of the network (its fastest NIC, or TCP's figure)
  friend bool operator==(const HostTopology&, const HostTopology&) = default;
};

/// Where one rank runs.
struct RankPlace {
  int host = 0;       // index into Topology::hosts
  int localRank = 0;  // order among the ranks of its host (by global rank)
  int numa = -1;
  int gpu = -1;  // device index on its host, -1 none
  int nic = -1;  // index into its host's nics of the nearest NIC, -1 none
  friend bool operator==(const RankPlace&, const RankPlace&) = default;
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

  friend bool operator==(const Topology&, const Topology&) = default;
};

/// Places ranks on `hosts`: rank r runs on hosts[hostOfRank[r]]. localRank is the order among the host's
/// ranks; gpu = localRank % (number of GPUs), -1 without GPUs; numa = the GPU's domain, else the domains
/// round-robin by localRank; nic = the nearest NIC (RDMA NICs first, then those on the rank's NUMA domain),
/// ties dealt round-robin among the ranks of that domain so every NIC carries a rail. Deterministic.
/// Throws InvalidArgument if a host index is out of range.
std::vector<RankPlace> placeRanks(const std::vector<HostTopology>& hosts, const std::vector<int>& hostOfRank);

/// One host as JSON (the element format of toJson's "hosts"), for sending through the bootstrap.
std::string hostToJson(const HostTopology& host);
/// Reads hostToJson's output; throws InvalidArgument naming `origin` and the field.
HostTopology hostFromJson(const std::string& text, const std::string& origin);

/// Reads a topology file; throws InvalidArgument "<what> <path>: ..." if unreadable or malformed
/// (`what` is how the caller names the file, e.g. "STRATA_TOPO_FILE").
Topology loadTopologyFile(const std::string& path, const std::string& what);

/// Network figures for a host with these NICs: the fastest NIC's speed / 8, with RDMA latency if that NIC
/// is a verbs device and `rdmaTransport` (STRATA_NET=ucx), else TCP latency; no NIC: kUnknownNicGbps.
LinkFigures netFigures(const std::vector<Nic>& nics, bool rdmaTransport);

/// Discovers the local host: hwloc for NUMA domains (sysfs without it), the affinity mask for cores,
/// libibverbs for RDMA NICs, sysfs for PCIe locality and netdev speeds, the CUDA driver and NVML (loaded
/// at run time; absent means no GPUs) for GPUs and NVLink. Never fails for a missing library or device.
HostTopology discoverHost(const Config& config);

/// The communicator's topology, identical on every rank: each rank discovers its host (or reads
/// STRATA_TOPO_FILE), the descriptions travel through the bootstrap, ranks are placed on hosts by
/// hostIds (index: rank), and each rank gets its NUMA domain, GPU and nearest NIC.
Topology buildTopology(const Config& config, Bootstrap& bootstrap, const std::vector<std::string>& hostIds);

}  // namespace strata
