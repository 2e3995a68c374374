// The cost model behind the selector.
//
// Each algorithm's time is the sum of three terms:
//   latency:  steps on the critical path x (link latency + per-message cost)
//   volume:   bytes through the busiest link (or host NIC) / its bandwidth
//   compute:  bytes this rank reduces / reduction throughput
// Pipelined plans (ring, tree, hierarchical rings) overlap chunks, so their volume term counts each link's
// total bytes once; each chunk still costs one message on every hop. Links between hosts are shared: when
// several flows leave one host at once (ring crossings, rails), each gets the host's network bandwidth
// divided by the flows, capped by one NIC's.
#include "collectives/cost_model.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "collectives/host_layout.h"

namespace strata {
namespace {

struct Model {
  const TuningInputs& in;
  HostLayout lay;
  explicit Model(const TuningInputs& inputs) : in(inputs), lay(inputs.nranks, inputs.hostOf, "cost model") {}

  double bw(const LinkFigures& l) const { return std::max(l.bandwidthGBps, 1e-6) * 1e3; }  // bytes per us
  // Bandwidth of one of `flows` concurrent flows leaving one host.
  double netFlowBw(int flows) const {
    const double share = static_cast<double>(std::max(1, in.nicsPerHost)) / std::max(1, flows);
    return bw(in.inter) * std::min(1.0, share);
  }
  double chunks(double bytes) const { return std::max(1.0, std::ceil(bytes / static_cast<double>(in.chunkBytes))); }
  double reduceUs(double bytes) const { return bytes / (in.reduceGBps * 1e3); }
  double copyUs(double bytes) const { return bytes / (in.copyGBps * 1e3); }

  // A ring over `members` (ring order) moving `stepBytes` per step for `steps` steps.
  double ring(const std::vector<int>& members, int steps, double stepBytes, double reduceBytes) const {
    const int m = static_cast<int>(members.size());
    if (m <= 1 || steps == 0) return 0;
    std::map<int, int> crossingsPerHost;
    int crossings = 0;
    for (int i = 0; i < m; ++i) {
      const int a = members[static_cast<size_t>(i)], b = members[static_cast<size_t>((i + 1) % m)];
      if (lay.crossesHosts(a, b)) {
        ++crossings;
        ++crossingsPerHost[lay.hostOf(a)];
      }
    }
    int worst = 0;
    for (auto& [h, c] : crossingsPerHost) worst = std::max(worst, c);
    const LinkFigures& link = crossings ? in.inter : in.intra;
    const double rate = crossings ? std::min(bw(in.intra), netFlowBw(worst)) : bw(in.intra);
    const double msgs = steps * chunks(stepBytes);
    return steps * link.latencyUs + msgs * in.messageUs + steps * stepBytes / rate + reduceUs(reduceBytes);
  }

  std::vector<int> allRanks() const {
    std::vector<int> v(static_cast<size_t>(lay.nranks()));
    for (int i = 0; i < lay.nranks(); ++i) v[static_cast<size_t>(i)] = i;
    return v;
  }

  // Every rank sends `bytes` to each of the others at once (one-shot's exchange, two-shot's halves).
  double direct(double bytes, double reduceBytes) const {
    const int n = lay.nranks();
    double t = in.intra.latencyUs + (n - 1) * chunks(bytes) * in.messageUs + (n - 1) * bytes / bw(in.intra);
    if (lay.nhosts() > 1) {
      // Each host sends local x remote x bytes through its NICs; every pair crossing is a flow. Each of
      // a rank's remote messages costs the network stack a full message latency on this rank's CPU.
      const double local = lay.maxPerHost();
      const double hostBytes = local * (n - local) * bytes;
      const double hostBw = bw(in.inter) * std::max(1, in.nicsPerHost);
      t = std::max(t, (n - local) * in.inter.latencyUs + hostBytes / hostBw);
    }
    return t + reduceUs(reduceBytes);
  }

  // Recursive halving or doubling: log2(p) exchanges of halving sizes, plus the pair steps for n != 2^k.
  double rhdPhase(double total, bool reduce) const {
    const int n = lay.nranks();
    int p = 1;
    while (p * 2 <= n) p *= 2;
    const int rem = n - p;
    auto real = [&](int v) { return v < rem ? 2 * v + 1 : v + rem; };
    double t = 0, bytes = total;
    for (int mask = p / 2; mask >= 1; mask /= 2) {
      bytes /= 2;
      std::map<int, int> flows;  // flows leaving each host in this step
      for (int v = 0; v < p; ++v)
        if (lay.crossesHosts(real(v), real(v ^ mask))) ++flows[lay.hostOf(real(v))];
      int worst = 0;
      for (auto& [h, c] : flows) worst = std::max(worst, c);
      const LinkFigures& link = worst ? in.inter : in.intra;
      const double rate = worst ? std::min(bw(in.intra), netFlowBw(worst)) : bw(in.intra);
      t += link.latencyUs + chunks(bytes) * in.messageUs + bytes / rate + (reduce ? reduceUs(bytes) : 0);
    }
    if (rem > 0) {
      bool crosses = false;
      for (int i = 0; i < rem; ++i) crosses |= lay.crossesHosts(2 * i, 2 * i + 1);
      const LinkFigures& link = crosses ? in.inter : in.intra;
      t += link.latencyUs + chunks(total) * in.messageUs + total / (crosses ? netFlowBw(rem) : bw(in.intra));
    }
    return t;
  }

  double tree(double bytes) const {
    const int n = lay.nranks();
    const double depth = std::ceil(std::log2(n + 1.0));
    const bool crosses = lay.nhosts() > 1;
    const LinkFigures& link = crosses ? in.inter : in.intra;
    const double rate = crosses ? std::min(bw(in.intra), netFlowBw(2)) : bw(in.intra);
    const double chunk = std::min(bytes / 2, static_cast<double>(in.chunkBytes) / 2);
    // Up and down the tree: the first chunk crosses 2 x depth hops; then the busiest node (inner in one
    // tree, leaf in the other) receives and sends 2 S: S/2 from each child and from its parent, S/2 to
    // its parent and to each child, plus a leaf's S/2 each way in the other tree.
    return 2 * depth * (link.latencyUs + in.messageUs + chunk / rate) + 4 * chunks(bytes) * in.messageUs +
           2 * bytes / rate + reduceUs(bytes);
  }

  // Hierarchical: ring inside each host, rails between hosts, ring inside each host.
  double hier(CollKind kind, double bytes) const {
    const int L = lay.maxPerHost(), H = lay.nhosts(), R = lay.minPerHost();
    // Ranks of a largest host, in order: the intra-host rings all look alike.
    std::vector<int> host;
    for (const std::vector<int>& ranks : lay.hosts())
      if (static_cast<int>(ranks.size()) == L) host = ranks;
    const double intraStep = bytes / L;
    const double railBytes = bytes / R;
    const double railRate = netFlowBw(R);
    const double interStep = railBytes / H;
    auto interRing = [&](int steps, bool reduce) {
      return steps * (in.inter.latencyUs) + steps * chunks(interStep) * in.messageUs + steps * interStep / railRate +
             (reduce ? reduceUs((H - 1) * interStep) : 0);
    };
    switch (kind) {
      case CollKind::kAllReduce:
        return ring(host, L - 1, intraStep, (L - 1) * intraStep) + interRing(2 * (H - 1), true) +
               ring(host, L - 1, intraStep, 0);
      case CollKind::kReduceScatter:
        return ring(host, L - 1, intraStep, (L - 1) * intraStep) + interRing(H - 1, true) + in.intra.latencyUs +
               copyUs(bytes / lay.nranks());
      default:  // all-gather
        return in.intra.latencyUs + copyUs(bytes / lay.nranks()) + interRing(H - 1, false) +
               ring(host, L - 1, intraStep, 0);
    }
  }
};

}  // namespace

TuningInputs tuningInputs(const Topology& topo, size_t chunkBytes) {
  TuningInputs in;
  in.nranks = topo.nranks();
  in.chunkBytes = chunkBytes;
  for (const RankPlace& p : topo.ranks) in.hostOf.push_back(p.host);
  if (topo.nhosts() > 0) {
    // The slowest host sets the pace of every collective.
    LinkFigures intra{0, 1e9}, inter{0, 1e9};
    int nics = 1 << 30;
    for (int h = 0; h < topo.nhosts(); ++h) {
      const HostTopology& host = topo.hosts[static_cast<size_t>(h)];
      // GPU ranks use their GPUs' link class (NVLink, PCIe); CPU ranks host memory.
      const std::vector<int> ranks = topo.ranksOfHost(h);
      const LinkFigures local = ranks.size() > 1 ? topo.link(ranks[0], ranks[1]) : host.shm;
      intra.latencyUs = std::max(intra.latencyUs, local.latencyUs);
      intra.bandwidthGBps = std::min(intra.bandwidthGBps, local.bandwidthGBps);
      inter.latencyUs = std::max(inter.latencyUs, host.net.latencyUs);
      inter.bandwidthGBps = std::min(inter.bandwidthGBps, host.net.bandwidthGBps);
      int hostNics = 0;
      for (const Nic& nic : host.nics) hostNics += nic.rdma ? 1 : 0;
      nics = std::min(nics, std::max(1, hostNics));
      // Ranks beyond the host's cores share them: every wait and message costs a scheduler round.
      if (host.cores > 0 && static_cast<int>(ranks.size()) > host.cores) {
        const double over = static_cast<double>(ranks.size()) / host.cores;
        in.messageUs *= over;
        intra.latencyUs *= over;
      }
    }
    if (intra.bandwidthGBps > 0 && intra.bandwidthGBps < 1e9) in.intra = intra;
    if (inter.bandwidthGBps > 0 && inter.bandwidthGBps < 1e9) in.inter = inter;
    in.nicsPerHost = nics;
  }
  return in;
}

std::vector<Prediction> predictAll(CollKind kind, size_t size, const TuningInputs& in) {
  if (in.nranks <= 1) return {Prediction{algorithmsFor(kind).front(), 0}};  // a local copy
  const Model m(in);
  const double S = static_cast<double>(size);
  const int n = m.lay.nranks();
  std::vector<Prediction> out;
  auto add = [&](const char* name, double us) { out.push_back(Prediction{name, us}); };
  const std::vector<int> all = m.allRanks();
  const double seg = S / n;
  switch (kind) {
    case CollKind::kAllReduce:
      add("ring", m.ring(all, 2 * (n - 1), seg, (n - 1) * seg));
      add("oneshot", m.direct(S, (n - 1) * S));
      add("twoshot", m.direct(seg, (n - 1) * seg) * 2);
      add("rhd", m.rhdPhase(S, true) + m.rhdPhase(S, false));
      add("tree", m.tree(S));
      if (m.lay.nhosts() > 1) add("hier", m.hier(kind, S));
      break;
    case CollKind::kReduceScatter:
      add("ring", m.ring(all, n - 1, seg, (n - 1) * seg));
      add("rhd", m.rhdPhase(S, true) + m.copyUs(seg));
      if (m.lay.nhosts() > 1) add("hier", m.hier(kind, S));
      break;
    case CollKind::kAllGather:
      add("ring", m.ring(all, n - 1, seg, 0));
      add("rhd", m.rhdPhase(S, false));
      if (m.lay.nhosts() > 1) add("hier", m.hier(kind, S));
      break;
    default:
      for (const std::string& name : algorithmsFor(kind)) out.push_back(Prediction{name, 0});
      return out;
  }
  std::stable_sort(out.begin(), out.end(), [](const Prediction& a, const Prediction& b) { return a.us < b.us; });
  return out;
}

}  // namespace strata
