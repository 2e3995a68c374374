// The topology model's questions: which ranks share a host, how two ranks reach each other, and what that
// link costs.
#include "topology/topology.h"

#include <algorithm>

#include "util/error.h"

namespace strata {
namespace {

void checkRank(const Topology& t, int r, const char* what) {
  if (r < 0 || r >= t.nranks())
    throw InvalidArgument(strprintf("Topology::%s: rank %d out of range [0, %d)", what, r, t.nranks()));
}

const Gpu* gpuOf(const Topology& t, const RankPlace& p) {
  const auto& gpus = t.hosts[static_cast<size_t>(p.host)].gpus;
  return p.gpu >= 0 && p.gpu < static_cast<int>(gpus.size()) ? &gpus[static_cast<size_t>(p.gpu)] : nullptr;
}

}  // namespace

const char* linkClassName(LinkClass c) {
  switch (c) {
    case LinkClass::kSelf: return "self";
    case LinkClass::kShm: return "shm";
    case LinkClass::kNvlink: return "nvlink";
    case LinkClass::kPcie: return "pcie";
    case LinkClass::kNet: return "net";
  }
  return "?";
}

std::vector<int> Topology::ranksOfHost(int h) const {
  std::vector<int> out;
  for (int r = 0; r < nranks(); ++r)
    if (ranks[static_cast<size_t>(r)].host == h) out.push_back(r);
  return out;
}

LinkClass Topology::linkClass(int a, int b) const {
  checkRank(*this, a, "linkClass");
  checkRank(*this, b, "linkClass");
  if (a == b) return LinkClass::kSelf;
  const RankPlace& pa = ranks[static_cast<size_t>(a)];
  const RankPlace& pb = ranks[static_cast<size_t>(b)];
  if (pa.host != pb.host) return LinkClass::kNet;
  const Gpu* ga = gpuOf(*this, pa);
  const Gpu* gb = gpuOf(*this, pb);
  if (!ga || !gb) return LinkClass::kShm;
  // Two ranks on one GPU also land here: no GPU-to-GPU link joins them, and PCIe's figures are the
  // conservative choice.
  const auto& peers = ga->nvlinkPeers;
  if (std::find(peers.begin(), peers.end(), pb.gpu) != peers.end()) return LinkClass::kNvlink;
  return LinkClass::kPcie;
}

LinkFigures Topology::link(int a, int b) const {
  const LinkClass c = linkClass(a, b);
  const RankPlace& pa = ranks[static_cast<size_t>(a)];
  const RankPlace& pb = ranks[static_cast<size_t>(b)];
  const HostTopology& ha = hosts[static_cast<size_t>(pa.host)];
  switch (c) {
    case LinkClass::kSelf: return {};
    case LinkClass::kShm: return ha.shm;
    case LinkClass::kPcie: return {kPcieLatencyUs, kPcieBandwidthGBps};
    case LinkClass::kNvlink: {
      // A file may give one GPU's NVLink bandwidth and not the other's: take the known one.
      const double x = gpuOf(*this, pa)->nvlinkGBps, y = gpuOf(*this, pb)->nvlinkGBps;
      const double bw = x > 0 && y > 0 ? std::min(x, y) : std::max(x, y);
      return {kNvlinkLatencyUs, bw};
    }
    case LinkClass::kNet: {
      // The slower end sets the pace: the larger latency, the smaller bandwidth.
      const LinkFigures& x = ha.net;
      const LinkFigures& y = hosts[static_cast<size_t>(pb.host)].net;
      return {std::max(x.latencyUs, y.latencyUs), std::min(x.bandwidthGBps, y.bandwidthGBps)};
    }
  }
  return {};
}

LinkFigures netFigures(const std::vector<Nic>& nics, bool rdmaTransport) {
  const Nic* best = nullptr;
  for (const Nic& n : nics)
    if (!best || n.gbps > best->gbps || (n.gbps == best->gbps && n.rdma && !best->rdma)) best = &n;
  const double gbps = best && best->gbps > 0 ? best->gbps : kUnknownNicGbps;
  const bool rdma = best && best->rdma && rdmaTransport;
  return {rdma ? kRdmaLatencyUs : kTcpLatencyUs, gbps / 8};
}

}  // namespace strata
