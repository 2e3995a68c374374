// The cost model behind the selector.
//
// Each algorithm is a list of phases (shapeOf): rings, direct exchanges, recursive halving or doubling
// steps, a double binary tree, rings between hosts. A phase states its shape as plain numbers: steps on the
// critical path, bytes one rank sends per step, messages per step, bytes reduced. Its time is the sum of
// three terms:
//   latency:  steps on the critical path x (link latency + per-message cost)
//   volume:   bytes through the busiest link (or host NIC) / its bandwidth
//   compute:  bytes this rank reduces / reduction throughput
// Pipelined plans (ring, tree, hierarchical rings) overlap chunks, so their volume term counts each link's
// total bytes once; each chunk still costs one message on every hop. Links between hosts are shared: when
// several flows leave one host at once (ring crossings, rails), each gets the host's network bandwidth
// divided by the flows, capped by one NIC's.
//
// Why the counts are stated here and not read off the generated plans: a plan describes one rank, and the
// critical path and the busiest rank need the plans of all n ranks (O(n^2) ops for a ring at one chunk,
// times the chunk count for the message counts). predictAll prices every algorithm of a collective on every
// rank at each new call size, so reading plans would cost milliseconds to seconds at a few thousand ranks
// where this formula costs microseconds. Instead tests/unit/test_cost_model.cc builds the real plans of
// every algorithm at n = 1..33 over several host layouts, takes the same counts from them (shapeCounts), and
// fails when a generator or a phase here changes its shape without the other.
#include "collectives/cost_model.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "collectives/generators.h"
#include "collectives/host_layout.h"
#include "collectives/rhd_pattern.h"

namespace strata {
namespace {

// One phase of an algorithm: the unit the time formula prices, with its shape in the fields the pattern
// reads. shapeOf lists every algorithm's phases; phaseUs prices one; shapeCounts sums their counts up.
struct Phase {
  enum class Pattern {
    kRing,      // `steps` ring steps over `members`, each rank sending `stepBytes` per step
    kDirect,    // `steps` rounds in which every rank sends `stepBytes` to each of `fanout` peers at once (each
                // round priced alike: `reduceBytes` / `steps` reduced in each)
    kHalving,   // recursive halving of `stepBytes` over `rhd`'s virtual ranks, after a pair step of it
    kDoubling,  // recursive doubling up to `stepBytes` over `rhd`'s virtual ranks, then a pair step of it
    kTree,      // double binary tree: `steps` hops of the first `stepBytes` chunk, then the busiest rank's
                // `fanout` streams of `streamBytes` each (up and down, in its two trees)
    kRail,      // `steps` ring steps between hosts, each rank sending `stepBytes`, `flows` rings per host
    kHandoff,   // one intra-host step that hands finished blocks to their owners (priced as latency)
    kCopy,      // a local copy of `stepBytes`
  };
  Pattern pattern = Pattern::kCopy;
  int steps = 0;             // steps on the critical path
  double stepBytes = 0;      // bytes of one step's message (kHalving, kDoubling: of the data halved)
  int fanout = 1;            // messages (or streams) a rank sends per step
  double streamBytes = 0;    // kTree: bytes of one stream
  double reduceBytes = 0;    // bytes a rank reduces over the phase
  std::vector<int> members;  // kRing: the ring's ranks, in order
  int flows = 1;             // kRail: rings leaving each host at once
  RhdPattern rhd{1};         // kHalving, kDoubling: the virtual ranks and pairs
  /// kRing, kRail: the plan is pipelined in `pieces` pieces (the hierarchical all-reduce): each step's message is
  /// cut per piece, and the phases with pieces > 1 overlap (timeUs).
  int pieces = 1;
  /// Messages of one step: its bytes cut per piece, each piece in chunks.
  double stepMessages(double chunkBytes) const {
    return pieces * std::max(1.0, std::ceil(stepBytes / pieces / chunkBytes));
  }
};
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

  std::vector<int> allRanks() const {
    std::vector<int> v(static_cast<size_t>(lay.nranks()));
    for (int i = 0; i < lay.nranks(); ++i) v[static_cast<size_t>(i)] = i;
    return v;
  }
  // Ranks of a largest host, in order: the intra-host rings of a hierarchical plan all look alike.
  std::vector<int> largestHost() const {
    std::vector<int> host;
    for (const std::vector<int>& ranks : lay.hosts())
      if (static_cast<int>(ranks.size()) == lay.maxPerHost()) host = ranks;
    return host;
  }
  // Ring links of `members` (ring order) that leave a host, and the most that leave any one host.
  int ringCrossings(const std::vector<int>& members, int* worst) const {
    const int m = static_cast<int>(members.size());
    std::map<int, int> crossingsPerHost;
    int crossings = 0;
    for (int i = 0; i < m; ++i) {
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

  // ---- the shape of every algorithm the model compares ----

  // The phases of `algorithm` for a call of `bytes`; empty if the model does not price it here.
  std::vector<Phase> shapeOf(CollKind kind, const std::string& algorithm, double bytes) const {
    const int n = lay.nranks();
    const double seg = bytes / n;
    auto ring = [&](std::vector<int> members, int steps, double stepBytes, double reduceBytes) {
      Phase ph;
      ph.pattern = Pattern::kRing;
      ph.members = std::move(members);
      ph.steps = static_cast<int>(ph.members.size()) > 1 ? steps : 0;
      ph.stepBytes = stepBytes;
      ph.reduceBytes = reduceBytes;
      return ph;
    };
    auto direct = [&](int rounds, double stepBytes, double reduceBytes) {
      Phase ph;
      ph.pattern = Pattern::kDirect;
      ph.steps = rounds;
      ph.stepBytes = stepBytes;
      ph.fanout = n - 1;
      ph.reduceBytes = reduceBytes;
      return ph;
    };
    auto rhd = [&](Pattern pattern, bool reduce) {
      Phase ph;
      ph.pattern = pattern;
      ph.rhd = RhdPattern(n);
      ph.steps = ph.rhd.exchanges() + (ph.rhd.pairs > 0 ? 1 : 0);
      ph.stepBytes = bytes;
      ph.reduceBytes = reduce ? bytes - bytes / ph.rhd.p : 0;  // the halving steps' sizes
      return ph;
    };
    auto simple = [&](Pattern pattern, int steps, double stepBytes) {
      Phase ph;
      ph.pattern = pattern;
      ph.steps = steps;
      ph.stepBytes = stepBytes;
      return ph;
    };
    const bool hier = algorithm == "hier" && lay.nhosts() > 1;
    // Hierarchical: a ring inside each host, one ring per rail between hosts, a ring inside each host. Every
    // intra-host ring is priced as one over a largest host (L ranks) with the data in L blocks; a rail ring
    // carries 1/R of the data (R rails) in H blocks.
    const int L = lay.maxPerHost(), H = lay.nhosts(), R = lay.minPerHost();
    const double intraStep = bytes / L, interStep = bytes / R / H;
    auto rail = [&](int steps, bool reduce) {
      Phase ph = simple(Pattern::kRail, steps, interStep);
      ph.flows = R;
      ph.reduceBytes = reduce ? (H - 1) * interStep : 0;
      return ph;
    };
    switch (kind) {
      case CollKind::kAllReduce:
        if (algorithm == "ring") return {ring(allRanks(), 2 * (n - 1), seg, (n - 1) * seg)};
        if (algorithm == "oneshot") return {direct(1, bytes, (n - 1) * bytes)};
        // Both rounds are priced alike, the all-gather's receives as if they reduced too.
        if (algorithm == "twoshot") return {direct(2, seg, 2 * ((n - 1) * seg))};
        if (algorithm == "rhd") return {rhd(Pattern::kHalving, true), rhd(Pattern::kDoubling, false)};
        if (algorithm == "tree") {
          Phase ph = simple(Pattern::kTree, 2 * static_cast<int>(std::ceil(std::log2(n + 1.0))),
                            std::min(bytes / 2, static_cast<double>(in.chunkBytes) / 2));
          // The busiest rank, inner in one tree and a leaf in the other, receives and sends 2 S: S/2 from
          // each child and from its parent, S/2 to its parent and to each child, plus a leaf's S/2 each way
          // in the other tree. Four streams of S/2 leave it.
          ph.fanout = 4;
          ph.streamBytes = bytes / 2;
          ph.reduceBytes = bytes;
          return {ph};
        }
        if (hier) {
          // Pipelined by piece (hier.cc): the three phases overlap.
          std::vector<Phase> phases = {ring(largestHost(), L - 1, intraStep, (L - 1) * intraStep),
                                       rail(2 * (H - 1), true), ring(largestHost(), L - 1, intraStep, 0)};
          const int pieces = static_cast<int>(hierAllReducePieces(static_cast<size_t>(bytes), R, H, in.chunkBytes));
          for (Phase& ph : phases) ph.pieces = pieces;
          return phases;
        }
        break;
      case CollKind::kReduceScatter:
        if (algorithm == "ring") return {ring(allRanks(), n - 1, seg, (n - 1) * seg)};
        if (algorithm == "rhd") return {rhd(Pattern::kHalving, true), simple(Pattern::kCopy, 0, seg)};
        if (hier)
          return {ring(largestHost(), L - 1, intraStep, (L - 1) * intraStep), rail(H - 1, true),
                  simple(Pattern::kHandoff, 1, 0), simple(Pattern::kCopy, 0, seg)};
        break;
      case CollKind::kAllGather:
        if (algorithm == "ring") return {ring(allRanks(), n - 1, seg, 0)};
        if (algorithm == "rhd") return {rhd(Pattern::kDoubling, false)};
        if (hier)
          return {simple(Pattern::kHandoff, 1, 0), simple(Pattern::kCopy, 0, seg), rail(H - 1, false),
                  ring(largestHost(), L - 1, intraStep, 0)};
        break;
      default: break;
    }
    return {};
  }

  // ---- the time of one phase ----

  double phaseUs(const Phase& ph) const {
    switch (ph.pattern) {
      case Pattern::kRing: {
        if (ph.steps == 0) return 0;
        int worst = 0;
        const int crossings = ringCrossings(ph.members, &worst);
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

TuningInputs deviceTuningInputs(const Topology& topo, const DeviceFigures& f) {
  TuningInputs in = tuningInputs(topo, f.chunkBytes);
  in.lanes = f.channels;
  in.laneGBps = f.laneGBps;
  in.fusedReduce = true;
  in.reduceGBps = f.memoryGBps / 3;  // per output byte: two inputs read, one output written
  in.copyGBps = f.memoryGBps / 2;
  return in;
}

std::vector<Prediction> predictAll(CollKind kind, size_t size, const TuningInputs& in) {
  if (in.nranks <= 1) return {Prediction{algorithmsFor(kind).front(), 0}};  // a local copy
  if (!modelCompares(kind)) {
    std::vector<Prediction> out;
    for (const std::string& name : algorithmsFor(kind)) out.push_back(Prediction{name, 0});
    return out;
  }
  const Model m(in);
  std::vector<Prediction> out;
  for (const std::string& name : algorithmsFor(kind)) {
    const std::vector<Phase> phases = m.shapeOf(kind, name, static_cast<double>(size));
    if (!phases.empty()) out.push_back(Prediction{name, m.timeUs(phases)});
  }
  std::stable_sort(out.begin(), out.end(), [](const Prediction& a, const Prediction& b) { return a.us < b.us; });
  return out;
}

bool shapeCounts(CollKind kind, const std::string& algorithm, size_t size, const TuningInputs& in,
                 ShapeCounts* counts) {
  *counts = ShapeCounts{};
  if (in.nranks <= 1 || !modelCompares(kind)) return false;
  const Model m(in);
  const std::vector<Phase> phases = m.shapeOf(kind, algorithm, static_cast<double>(size));
  if (phases.empty()) return false;
  const double unpriced = std::nan("");
  const int n = m.lay.nranks();
  ShapeCounts& c = *counts;
  for (const Phase& ph : phases) {
    c.steps += ph.steps;
    switch (ph.pattern) {
      case Pattern::kRing: {
        int worst = 0;
        m.ringCrossings(ph.members, &worst);
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
      case Pattern::kHandoff:
      case Pattern::kCopy: break;
    }
    c.reducedBytes += ph.reduceBytes;
  }
  return true;
}

}  // namespace strata
