// strata-topo's human-readable description: each host with its devices and link figures, then where every
// rank runs.
#include <algorithm>

#include "topology/cpulist.h"
#include "topology/topology.h"
#include "util/error.h"

namespace strata {
namespace {

std::string numaName(int numa) { return numa < 0 ? "?" : std::to_string(numa); }

std::string figures(const LinkFigures& f) { return strprintf("%g us, %g GB/s", f.latencyUs, f.bandwidthGBps); }

std::string bytes(uint64_t b) {
  if (b == 0) return "memory unknown";
  return strprintf("%.1f GiB", static_cast<double>(b) / (1024.0 * 1024 * 1024));
}

void describeHost(std::string& out, const HostTopology& h, int index) {
  out += strprintf("host %d: %s (id %s)\n", index, h.hostname.c_str(), h.hostId.c_str());
  out += strprintf("  cores: %d\n", h.cores);
  for (const NumaDomain& d : h.numa)
    out += strprintf("  NUMA %d: cpus %s (%zu), %s\n", d.id, formatCpuList(d.cpus).c_str(), d.cpus.size(),
                     bytes(d.memoryBytes).c_str());
  if (h.nics.empty()) out += "  NICs: none\n";
  for (size_t i = 0; i < h.nics.size(); ++i) {
    const Nic& n = h.nics[i];
    out += strprintf("  NIC %zu: %s", i, n.name.c_str());
    if (n.rdma) out += strprintf(" port %d", n.port);
    out += strprintf(", %s%s, %g Gbit/s", n.linkLayer.c_str(), n.rdma ? " RDMA" : "", n.gbps);
    if (n.gbpsAssumed) out += " (speed not reported, assumed)";
    out += ", NUMA " + numaName(n.numa);
    if (!n.pciBusId.empty()) out += ", PCI " + n.pciBusId;
    if (!n.netdev.empty() && n.netdev != n.name) out += ", netdev " + n.netdev;
    out += "\n";
  }
  if (h.gpus.empty()) out += "  GPUs: none\n";
  for (const Gpu& g : h.gpus) {
    out += strprintf("  GPU %d: %s", g.index, g.name.empty() ? "(unnamed)" : g.name.c_str());
    if (!g.pciBusId.empty()) out += ", PCI " + g.pciBusId;
    out += ", NUMA " + numaName(g.numa);
    if (g.nvlinkPeers.empty()) {
      out += ", no NVLink";
    } else {
      std::vector<int> peers = g.nvlinkPeers;
      std::sort(peers.begin(), peers.end());
      out += strprintf(", NVLink %g GB/s to GPU %s", g.nvlinkGBps, formatCpuList(peers).c_str());
    }
    out += "\n";
  }
  out += "  links: shm " + figures(h.shm) + "; net " + figures(h.net) + "\n";
}

}  // namespace

std::string Topology::toText() const {
  std::string out = strprintf("topology: %d host%s, %d rank%s\n", nhosts(), nhosts() == 1 ? "" : "s", nranks(),
                              nranks() == 1 ? "" : "s");
  for (int h = 0; h < nhosts(); ++h) describeHost(out, hosts[static_cast<size_t>(h)], h);
  if (ranks.empty()) {
    out += "ranks: none placed\n";
    return out;
  }
  out += strprintf("%6s %5s %6s %5s %4s  %s\n", "rank", "host", "local", "numa", "gpu", "nic");
  for (int r = 0; r < nranks(); ++r) {
    const RankPlace& p = ranks[static_cast<size_t>(r)];
    const HostTopology& h = hosts[static_cast<size_t>(p.host)];
    const std::string nic =
        p.nic >= 0 && p.nic < static_cast<int>(h.nics.size()) ? h.nics[static_cast<size_t>(p.nic)].name : "-";
    const std::string gpu = p.gpu >= 0 ? std::to_string(p.gpu) : "-";
    out += strprintf("%6d %5d %6d %5s %4s  %s\n", r, p.host, p.localRank, numaName(p.numa).c_str(), gpu.c_str(),
                     nic.c_str());
  }
  return out;
}

}  // namespace strata
