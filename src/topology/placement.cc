// Where each rank runs on its host: GPU, NUMA domain and NIC. Pure arithmetic over the host descriptions,
// so every rank that holds the same descriptions computes the same placement.
#include <map>

#include "topology/topology.h"
#include "util/error.h"

namespace strata {
namespace {

// The NICs a rank on `numa` should use: RDMA NICs if the host has any (TCP-only interfaces next to them
// are usually management networks), and of those the ones on the rank's NUMA domain if there are some.
std::vector<int> nicCandidates(const HostTopology& host, int numa) {
  bool anyRdma = false;
  for (const Nic& n : host.nics) anyRdma |= n.rdma;
  std::vector<int> usable, local;
  for (int i = 0; i < static_cast<int>(host.nics.size()); ++i) {
    const Nic& n = host.nics[static_cast<size_t>(i)];
    if (anyRdma && !n.rdma) continue;
    usable.push_back(i);
    if (numa >= 0 && n.numa == numa) local.push_back(i);
  }
  return local.empty() ? usable : local;
}

}  // namespace

std::vector<RankPlace> placeRanks(const std::vector<HostTopology>& hosts, const std::vector<int>& hostOfRank) {
  std::vector<RankPlace> places(hostOfRank.size());
  std::vector<int> localCount(hosts.size(), 0);
  // Ranks so far per (host, NUMA domain): deals NICs round-robin among the ranks that share candidates.
  std::map<std::pair<int, int>, int> numaCount;
  for (size_t r = 0; r < hostOfRank.size(); ++r) {
    const int h = hostOfRank[r];
    if (h < 0 || h >= static_cast<int>(hosts.size()))
      throw InvalidArgument(
          strprintf("placeRanks: rank %zu is on host %d, but there are %zu hosts", r, h, hosts.size()));
    const HostTopology& host = hosts[static_cast<size_t>(h)];
    RankPlace& p = places[r];
    p.host = h;
    p.localRank = localCount[static_cast<size_t>(h)]++;
    if (!host.gpus.empty()) {
      p.gpu = p.localRank % static_cast<int>(host.gpus.size());
      p.numa = host.gpus[static_cast<size_t>(p.gpu)].numa;
    }
    // No GPU, or a GPU whose domain is unknown: spread the host's ranks over its domains.
    if (p.numa < 0 && !host.numa.empty()) p.numa = host.numa[static_cast<size_t>(p.localRank) % host.numa.size()].id;
    const std::vector<int> nics = nicCandidates(host, p.numa);
    const int k = numaCount[{h, p.numa}]++;
    if (!nics.empty()) p.nic = nics[static_cast<size_t>(k) % nics.size()];
  }
  return places;
}

}  // namespace strata
