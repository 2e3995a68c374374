// The cost model behind the selector: it prices phases; what phases an algorithm is made of is the algorithm's own
// cost shape (its record, algorithm_record.h; the phases, cost_shape.h).
//
// A phase states its shape as plain numbers: steps on the critical path, bytes one rank sends per step, messages
// per step, bytes reduced. Its time is the sum of three terms:
//   latency:  steps on the critical path x (link latency + per-message cost)
//   volume:   bytes through the busiest link (or host NIC) / its bandwidth
//   compute:  bytes this rank reduces / reduction throughput
// Pipelined plans (ring, tree, chains, hierarchical rings) overlap chunks, so their volume term counts each link's
// total bytes once; each chunk still costs one message on every hop. Links between hosts are shared: when several
// flows leave one host at once (ring crossings, rails), each gets the host's network bandwidth divided by the flows,
// capped by one NIC's.
//
// Why the counts are stated by the shapes and not read off the generated plans: a plan describes one rank, and the
// critical path and the busiest rank need the plans of all n ranks (O(n^2) ops for a ring at one chunk, times the
// chunk count for the message counts). predictAll prices every algorithm of a collective on every rank at each new
// call size, so reading plans would cost milliseconds to seconds at a few thousand ranks where this formula costs
// microseconds. Instead tests/unit/test_cost_model.cc builds the real plans of every algorithm at n = 1..33 over
// several host layouts, takes the same counts from them (shapeCounts), and fails when a generator or its shape
// changes without the other.
#include "collectives/cost_model.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "collectives/cost_shape.h"
#include "collectives/host_layout.h"
#include "collectives/rhd_pattern.h"
#include "util/error.h"

namespace strata {
namespace {

using Pattern = Phase::Pattern;

struct Model {
  const TuningInputs& in;
  HostLayout lay;
  explicit Model(const TuningInputs& inputs) : in(inputs), lay(inputs.nranks, inputs.hostOf, "cost model") {}

  double bw(const LinkFigures& l) const { return std::max(l.bandwidthGBps, 1e-6) * 1e3; }  // bytes per us
  // Rank to rank on one host: the link, capped by what the device executor's lanes move (TuningInputs::lanes).
  double intraBw() const {
    const double link = bw(in.intra);
    return in.lanes > 0 && in.laneGBps > 0 ? std::min(link, in.lanes * in.laneGBps * 1e3) : link;
  }
  // Bandwidth of one of `flows` concurrent flows leaving one host.
  double netFlowBw(int flows) const {
    const double share = static_cast<double>(std::max(1, in.nicsPerHost)) / std::max(1, flows);
    return bw(in.inter) * std::min(1.0, share);
  }
  double chunks(double bytes) const { return std::max(1.0, std::ceil(bytes / static_cast<double>(in.chunkBytes))); }
  double reduceUs(double bytes) const { return bytes / (in.reduceGBps * 1e3); }
  double copyUs(double bytes) const { return bytes / (in.copyGBps * 1e3); }

  // Links of `members` (in order; a ring closes back to the first, a chain does not) that leave a host, and the
  // most that leave any one host.
  int crossings(const std::vector<int>& members, bool ring, int* worst) const {
    const int m = static_cast<int>(members.size());
    std::map<int, int> crossingsPerHost;
    int crossings = 0;
    for (int i = 0; i < (ring ? m : m - 1); ++i) {
      const int a = members[static_cast<size_t>(i)], b = members[static_cast<size_t>((i + 1) % m)];
      if (lay.crossesHosts(a, b)) {
        ++crossings;
        ++crossingsPerHost[lay.hostOf(a)];
      }
    }
    *worst = 0;
    for (auto& [h, c] : crossingsPerHost) *worst = std::max(*worst, c);
    return crossings;
  }
  // Exchanges of the recursive halving or doubling step with mask `mask` that leave the busiest host.
  int rhdFlows(const RhdPattern& g, int mask) const {
    std::map<int, int> flows;  // flows leaving each host in this step
    for (int v = 0; v < g.p; ++v)
      if (lay.crossesHosts(g.real(v), g.real(v ^ mask))) ++flows[lay.hostOf(g.real(v))];
    int worst = 0;
    for (auto& [h, c] : flows) worst = std::max(worst, c);
    return worst;
  }

  // The phases of `record` for a call of `bytes`; an InternalError if it has none (every record must have a shape:
  // one without would never be chosen, and no test of the selector would notice).
  std::vector<Phase> shapeOf(const AlgorithmRecord& record, double bytes) const {
    std::vector<Phase> phases;
    if (record.costShape) phases = record.costShape(ShapeBuilder(lay, in.chunkBytes), bytes);
    if (phases.empty())
      throw InternalError(strprintf("cost model: %s algorithm '%s' has no cost shape for %d rank(s) on %d host(s)",
                                    collName(record.kind), record.name, lay.nranks(), lay.nhosts()));
    return phases;
  }

  // ---- the time of one phase ----

  double phaseUs(const Phase& ph) const {
    switch (ph.pattern) {
      case Pattern::kRing: {
        if (ph.steps == 0) return 0;
        int worst = 0;
        const int crossings = this->crossings(ph.members, true, &worst);
        const LinkFigures& link = crossings ? in.inter : in.intra;
        const double rate = crossings ? std::min(intraBw(), netFlowBw(worst)) : intraBw();
        const double msgs = ph.steps * ph.stepMessages(static_cast<double>(in.chunkBytes));
        const double volume = ph.steps * ph.stepBytes / rate;
        if (in.fusedReduce)
          return ph.steps * link.latencyUs + msgs * in.messageUs + std::max(volume, reduceUs(ph.reduceBytes));
        return ph.steps * link.latencyUs + msgs * in.messageUs + volume + reduceUs(ph.reduceBytes);
      }
      case Pattern::kDirect: {
        // Every rank sends to each of the others at once (one-shot's exchange, two-shot's halves).
        const int n = lay.nranks();
        double t =
            in.intra.latencyUs + ph.fanout * chunks(ph.stepBytes) * in.messageUs + ph.fanout * ph.stepBytes / intraBw();
        if (lay.nhosts() > 1) {
          // Each host sends local x remote x bytes through its NICs; every pair crossing is a flow. Each of
          // a rank's remote messages costs the network stack a full message latency on this rank's CPU.
          const double local = lay.maxPerHost();
          const double hostBytes = local * (n - local) * ph.stepBytes;
          const double hostBw = bw(in.inter) * std::max(1, in.nicsPerHost);
          t = std::max(t, (n - local) * in.inter.latencyUs + hostBytes / hostBw);
        }
        return (t + reduceUs(ph.reduceBytes / ph.steps)) * ph.steps;
      }
      case Pattern::kHalving:
      case Pattern::kDoubling: {
        // log2(p) exchanges of halving sizes, plus the pair steps for n != 2^k.
        const bool reduce = ph.reduceBytes > 0;
        const double total = ph.stepBytes;
        double t = 0, bytes = total;
        for (int mask = ph.rhd.p / 2; mask >= 1; mask /= 2) {
          bytes /= 2;
          const int worst = rhdFlows(ph.rhd, mask);
          const LinkFigures& link = worst ? in.inter : in.intra;
          const double rate = worst ? std::min(intraBw(), netFlowBw(worst)) : intraBw();
          t += link.latencyUs + chunks(bytes) * in.messageUs + bytes / rate + (reduce ? reduceUs(bytes) : 0);
        }
        if (ph.rhd.pairs > 0) {
          bool crosses = false;
          for (int i = 0; i < ph.rhd.pairs; ++i) crosses |= lay.crossesHosts(2 * i, 2 * i + 1);
          const LinkFigures& link = crosses ? in.inter : in.intra;
          t += link.latencyUs + chunks(total) * in.messageUs + total / (crosses ? netFlowBw(ph.rhd.pairs) : intraBw());
        }
        return t;
      }
      case Pattern::kTree: {
        const bool crosses = lay.nhosts() > 1;
        const LinkFigures& link = crosses ? in.inter : in.intra;
        const double rate = crosses ? std::min(intraBw(), netFlowBw(2)) : intraBw();
        // Each stream of S/2 goes in chunks of half a chunk (both trees share connections): chunks(S) each.
        return ph.steps * (link.latencyUs + in.messageUs + ph.stepBytes / rate) +
               ph.fanout * chunks(2 * ph.streamBytes) * in.messageUs + ph.fanout * ph.streamBytes / rate +
               reduceUs(ph.reduceBytes);
      }
      case Pattern::kRail: {
        const double railRate = netFlowBw(ph.flows);
        return ph.steps * (in.inter.latencyUs) +
               ph.steps * ph.stepMessages(static_cast<double>(in.chunkBytes)) * in.messageUs +
               ph.steps * ph.stepBytes / railRate + (ph.reduceBytes > 0 ? reduceUs(ph.reduceBytes) : 0);
      }
      case Pattern::kChain: {
        // Every byte crosses every hop, a chunk behind the hop before: the last chunk leaves the first hop after
        // all S bytes and reaches the end (steps - 1) chunks later.
        if (ph.steps == 0) return 0;
        int worst = 0;
        const int crossings = this->crossings(ph.members, false, &worst);
        const LinkFigures& link = crossings ? in.inter : in.intra;
        const double rate = crossings ? std::min(intraBw(), netFlowBw(worst)) : intraBw();
        const double chunk = std::min(ph.stepBytes, static_cast<double>(in.chunkBytes));
        const double msgs = ph.steps - 1 + chunks(ph.stepBytes);
        const double volume = (ph.stepBytes + (ph.steps - 1) * chunk) / rate;
        const double reduce = reduceUs(ph.reduceBytes);
        return ph.steps * link.latencyUs + msgs * in.messageUs +
               (in.fusedReduce ? std::max(volume, reduce) : volume + reduce);
      }
      case Pattern::kRounds: {
        // Latency-bound: each round waits for the last; priced as crossing hosts when there are several.
        const bool crosses = lay.nhosts() > 1;
        const LinkFigures& link = crosses ? in.inter : in.intra;
        return ph.steps * (link.latencyUs + in.messageUs + ph.stepBytes / (crosses ? netFlowBw(1) : intraBw()));
      }
      case Pattern::kHandoff: return in.intra.latencyUs;
      case Pattern::kCopy: return copyUs(ph.stepBytes);
    }
    return 0;
  }

  // Phases run one after another, except pipelined ones (pieces > 1): those overlap, so they take as long as the
  // slowest of them plus the others' share of one piece (filling and draining the pipeline).
  double timeUs(const std::vector<Phase>& phases) const {
    double t = 0, piped = 0, slowest = 0;
    int pieces = 1;
    for (const Phase& ph : phases) {
      const double us = phaseUs(ph);
      if (ph.pieces > 1) {
        piped += us;
        slowest = std::max(slowest, us);
        pieces = ph.pieces;
      } else {
        t += us;
      }
    }
    return t + slowest + (piped - slowest) / pieces;
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

namespace {
// Whether GPU g of host h reaches every other GPU of h over NVLink.
bool nvlinkToAll(const HostTopology& h, const Gpu& g) {
  return g.nvlinkGBps > 0 && g.nvlinkPeers.size() + 1 >= h.gpus.size();
}
}  // namespace

bool allGpusOnNvlink(const Topology& topo) {
  bool any = false;
  for (const HostTopology& h : topo.hosts) {
    for (const Gpu& g : h.gpus) {
      if (!nvlinkToAll(h, g)) return false;
      any = true;
    }
  }
  return any;
}

int deviceChannelCap(const Topology& topo, const DeviceFigures& f) {
  double slowest = 0;
  for (const HostTopology& h : topo.hosts) {
    for (const Gpu& g : h.gpus) {
      const double gbps = nvlinkToAll(h, g) ? g.nvlinkGBps : kPcieBandwidthGBps;
      slowest = slowest == 0 ? gbps : std::min(slowest, gbps);
    }
  }
  if (slowest == 0) return std::min(kDefaultDeviceChannels, f.maxChannels);
  const int need = static_cast<int>(std::ceil(slowest * kRingEfficiency / std::max(1e-9, f.laneGBps) - 1e-9));
  return std::clamp(need, 1, f.maxChannels);
}

TuningInputs deviceTuningInputs(const Topology& topo, const DeviceFigures& f) {
  TuningInputs in = tuningInputs(topo, f.chunkBytes);
  in.lanes = f.channels;
  in.laneGBps = f.laneGBps;
  in.fusedReduce = true;
  in.reduceGBps = f.memoryGBps / 3;  // per output byte: two inputs read, one output written
  in.copyGBps = f.memoryGBps / 2;
  return in;
}

bool modelCompares(CollKind kind) { return algorithmRecords(kind).size() > 1; }

std::vector<Prediction> predictAll(CollKind kind, size_t size, const TuningInputs& in) {
  if (in.nranks <= 1) return {Prediction{defaultAlgorithm(kind).name, 0}};  // a local copy
  const Model m(in);
  std::vector<Prediction> out;
  for (const AlgorithmRecord* record : algorithmRecords(kind)) {
    if (!record->applies(m.lay, size)) continue;
    out.push_back(Prediction{record->name, m.timeUs(m.shapeOf(*record, static_cast<double>(size)))});
  }
  std::stable_sort(out.begin(), out.end(), [](const Prediction& a, const Prediction& b) { return a.us < b.us; });
  return out;
}

double priceUs(const std::vector<Phase>& phases, const TuningInputs& in) {
  if (in.nranks <= 1 || phases.empty()) return 0;
  const Model m(in);
  return m.timeUs(phases);
}

bool shapeCounts(CollKind kind, const std::string& algorithm, size_t size, const TuningInputs& in,
                 ShapeCounts* counts) {
  *counts = ShapeCounts{};
  if (in.nranks <= 1) return false;
  const AlgorithmRecord& record = algorithmOf(kind, algorithm);
  const Model m(in);
  if (!record.applies(m.lay, size)) return false;
  const std::vector<Phase> phases = m.shapeOf(record, static_cast<double>(size));
  const double unpriced = std::nan("");
  const int n = m.lay.nranks();
  ShapeCounts& c = *counts;
  for (const Phase& ph : phases) {
    c.steps += ph.steps;
    switch (ph.pattern) {
      case Pattern::kRing: {
        int worst = 0;
        m.crossings(ph.members, true, &worst);
        c.pathBytes += ph.steps * ph.stepBytes;
        c.sentBytes += ph.steps * ph.stepBytes;
        c.messages += ph.steps * ph.stepMessages(static_cast<double>(in.chunkBytes));
        c.hostOutBytes += worst * ph.steps * ph.stepBytes;
        break;
      }
      case Pattern::kDirect: {
        const int local = m.lay.maxPerHost();
        c.pathBytes += ph.steps * ph.stepBytes;
        c.sentBytes += ph.steps * ph.fanout * ph.stepBytes;
        c.messages += ph.steps * ph.fanout * m.chunks(ph.stepBytes);
        c.hostOutBytes += m.lay.nhosts() > 1 ? ph.steps * static_cast<double>(local) * (n - local) * ph.stepBytes : 0;
        break;
      }
      case Pattern::kHalving:
      case Pattern::kDoubling: {
        // The formula prices the steps along the path, not what any one rank sends.
        double bytes = ph.stepBytes;
        for (int mask = ph.rhd.p / 2; mask >= 1; mask /= 2) {
          bytes /= 2;
          c.pathBytes += bytes;
          c.messages += m.chunks(bytes);
        }
        if (ph.rhd.pairs > 0) {
          c.pathBytes += ph.stepBytes;
          c.messages += m.chunks(ph.stepBytes);
        }
        c.sentBytes = c.hostOutBytes = unpriced;
        break;
      }
      case Pattern::kTree:
        c.pathBytes += ph.steps * ph.stepBytes;
        c.sentBytes += ph.fanout * ph.streamBytes;
        c.messages += ph.fanout * m.chunks(2 * ph.streamBytes);
        c.hostOutBytes = unpriced;
        break;
      case Pattern::kRail:
        c.pathBytes += ph.steps * ph.stepBytes;
        c.sentBytes += ph.steps * ph.stepBytes;
        c.messages += ph.steps * ph.stepMessages(static_cast<double>(in.chunkBytes));
        c.hostOutBytes += ph.flows * ph.steps * ph.stepBytes;
        break;
      case Pattern::kChain: {
        // The busiest rank sends all S once (in chunks); the first element crosses every hop.
        int worst = 0;
        m.crossings(ph.members, false, &worst);
        c.pathBytes += ph.steps * ph.stepBytes;
        c.sentBytes += ph.steps > 0 ? ph.stepBytes : 0;
        c.messages += ph.steps > 0 ? m.chunks(ph.stepBytes) : 0;
        c.hostOutBytes += worst * ph.stepBytes;
        break;
      }
      case Pattern::kRounds:
        // One message a round per rank; which rounds leave a host is not priced (latency only).
        c.pathBytes += ph.steps * ph.stepBytes;
        c.sentBytes += ph.steps * ph.stepBytes;
        c.messages += ph.steps;
        c.hostOutBytes = unpriced;
        break;
      case Pattern::kHandoff:
      case Pattern::kCopy: break;
    }
    c.reducedBytes += ph.reduceBytes;
  }
  return true;
}

}  // namespace strata
