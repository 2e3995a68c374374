// A loaded program's structural checks and its plans (plan_program.h).
#include "collectives/plan_program.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include "collectives/algorithms.h"
#include "util/error.h"

namespace strata {

namespace {

bool perRankBlocks(CollKind k) {
  return k == CollKind::kAllGather || k == CollKind::kReduceScatter || k == CollKind::kAllToAll;
}

const char* bufName(int buf) {
  switch (buf) {
    case kBufSend: return "input";
    case kBufRecv: return "output";
    case kBufScratch: return "scratch";
  }
  return "?";
}

}  // namespace

int PlanProgram::blocks(int buf) const {
  switch (kind) {
    case CollKind::kAllGather: return buf == kBufRecv ? nranks : 1;
    case CollKind::kReduceScatter: return buf == kBufSend ? nranks : 1;
    case CollKind::kAllToAll: return buf == kBufScratch ? 1 : nranks;
    default: return 1;
  }
}

int PlanProgram::chunksPerBlock() const {
  const int b = perRankBlocks(kind) ? nranks : 1;
  return std::max(1, chunksPerLoop / std::max(1, b));
}

int PlanProgram::channels() const {
  int n = 1;
  for (const ProgramRank& r : ranks)
    for (const ProgramLane& l : r.lanes)
      for (const ProgramStep& s : l.steps) n = std::max(n, s.channel + 1);
  return n;
}

std::string PlanProgram::where(int rank, int lane, int step) const {
  const bool msccl = format == "msccl";
  std::string out = strprintf("%s %d", msccl ? "gpu" : "rank", rank);
  if (lane >= 0 && rank >= 0 && static_cast<size_t>(rank) < ranks.size() &&
      static_cast<size_t>(lane) < ranks[static_cast<size_t>(rank)].lanes.size())
    out += strprintf(" %s %d", msccl ? "tb" : "lane",
                     ranks[static_cast<size_t>(rank)].lanes[static_cast<size_t>(lane)].id);
  if (step >= 0) out += strprintf(" step %d", step);
  return out;
}

void checkProgram(const PlanProgram& p) {
  auto fail = [&](const std::string& what) { throw InvalidArgument(p.file + ": " + what); };
  if (p.nranks < 1) fail(strprintf("%d ranks", p.nranks));
  if (static_cast<int>(p.ranks.size()) != p.nranks)
    fail(strprintf("ngpus is %d but the file describes %zu gpu(s)", p.nranks, p.ranks.size()));
  if (p.chunksPerLoop < 1) fail(strprintf("nchunksperloop %d must be at least 1", p.chunksPerLoop));
  if (perRankBlocks(p.kind) && p.chunksPerLoop % p.nranks != 0)
    fail(strprintf("nchunksperloop %d of %s is not a multiple of the %d ranks", p.chunksPerLoop, collName(p.kind),
                   p.nranks));
  if (!p.inPlace && !p.outOfPlace) fail("serves neither in-place nor out-of-place calls");
  if (p.minBytes > p.maxBytes)
    fail(strprintf("minBytes %llu is above maxBytes %llu", static_cast<unsigned long long>(p.minBytes),
                   static_cast<unsigned long long>(p.maxBytes)));
  const int k = p.chunksPerBlock();
  for (int r = 0; r < p.nranks; ++r) {
    const ProgramRank& rank = p.ranks[static_cast<size_t>(r)];
    const int chunks[3] = {p.blocks(kBufSend) * k, p.blocks(kBufRecv) * k, rank.scratchChunks};
    if (rank.scratchChunks < 0) fail(p.where(r, -1, -1) + strprintf(": %d scratch chunks", rank.scratchChunks));
    for (size_t l = 0; l < rank.lanes.size(); ++l) {
      const ProgramLane& lane = rank.lanes[l];
      const int li = static_cast<int>(l);
      for (size_t t = 0; t < lane.steps.size(); ++t) {
        const ProgramStep& s = lane.steps[t];
        const std::string at = p.where(r, li, static_cast<int>(t)) + " (" + opKindName(s.kind) + "): ";
        Op probe;
        probe.kind = s.kind;
        if (s.channel < 0 || s.channel >= kMaxPlanChannels)
          fail(at + strprintf("channel %d is not in 0..%d", s.channel, kMaxPlanChannels - 1));
        auto checkPeer = [&](int peer, const char* what) {
          if (peer < 0)
            fail(at + strprintf("%s, but its %s has no %s peer", what, p.format == "msccl" ? "tb" : "lane",
                                what[0] == 's' ? "send" : "receive"));
          if (peer >= p.nranks || peer == r)
            fail(at + strprintf("%s peer %d is not another rank of %d", what[0] == 's' ? "send" : "receive", peer,
                                p.nranks));
        };
        if (probe.sends()) checkPeer(s.sendPeer, "sends");
        if (probe.receives()) checkPeer(s.recvPeer, "receives");
        auto checkRegion = [&](const ChunkRegion& c, const char* name) {
          if (c.buf < kBufSend || c.buf > kBufScratch) fail(at + strprintf("%s buffer %d", name, c.buf));
          if (c.count < 1) fail(at + strprintf("%s count %d must be at least 1", name, c.count));
          const int have = chunks[c.buf];
          if (c.offset < 0 || c.offset > have - c.count)
            fail(at + strprintf("%s chunks %d..%d are outside the %s buffer's %d chunk(s)", name, c.offset,
                                c.offset + c.count - 1, bufName(c.buf), have));
        };
        if (usesSrc(s.kind)) checkRegion(s.src, "source");
        if (usesDst(s.kind)) checkRegion(s.dst, "destination");
        if (usesSrc(s.kind) && usesDst(s.kind) && s.src.count != s.dst.count)
          fail(at + strprintf("source has %d chunk(s) but destination %d", s.src.count, s.dst.count));
        if (s.afterLane >= 0) {
          if (static_cast<size_t>(s.afterLane) >= rank.lanes.size() || s.afterLane == li)
            fail(at + "depends on a missing tb (or on its own)");
          const ProgramLane& dep = rank.lanes[static_cast<size_t>(s.afterLane)];
          if (s.afterStep < 0 || static_cast<size_t>(s.afterStep) >= dep.steps.size())
            fail(at + strprintf("depends on step %d of %s, which has %zu step(s)", s.afterStep,
                                p.where(r, s.afterLane, -1).c_str(), dep.steps.size()));
          if (p.format == "msccl" && !dep.steps[static_cast<size_t>(s.afterStep)].hasDep)
            fail(at + strprintf("depends on %s, which lacks hasdep=\"1\" (MSCCL's executor would never signal it)",
                                p.where(r, s.afterLane, s.afterStep).c_str()));
        }
      }
    }
    // Dependency cycles: run the lanes with nothing but their order and their waits; a lane that cannot finish is
    // on a cycle.
    std::vector<size_t> pos(rank.lanes.size(), 0);
    for (bool moved = true; moved;) {
      moved = false;
      for (size_t l = 0; l < rank.lanes.size(); ++l) {
        const auto& steps = rank.lanes[l].steps;
        while (pos[l] < steps.size()) {
          const ProgramStep& s = steps[pos[l]];
          if (s.afterLane >= 0 && pos[static_cast<size_t>(s.afterLane)] <= static_cast<size_t>(s.afterStep)) break;
          ++pos[l];
          moved = true;
        }
      }
    }
    std::string stuck;
    for (size_t l = 0; l < rank.lanes.size(); ++l) {
      if (pos[l] >= rank.lanes[l].steps.size()) continue;
      const ProgramStep& s = rank.lanes[l].steps[pos[l]];
      stuck += (stuck.empty() ? "" : "; ") + p.where(r, static_cast<int>(l), static_cast<int>(pos[l])) + " waits for " +
               p.where(r, s.afterLane, s.afterStep);
    }
    if (!stuck.empty()) fail("its dependencies form a cycle (a deadlock on every run): " + stuck);
  }
  // Every connection (a -> b on a channel) is one lane's at each end, and its sends and receives pair up in order
  // with equal chunk counts.
  struct End {
    int lane = -1;
    std::vector<std::pair<int, int>> steps;  // (step, chunks)
  };
  std::map<std::tuple<int, int, int>, End> sends, recvs;  // (a, b, channel)
  for (int r = 0; r < p.nranks; ++r) {
    const ProgramRank& rank = p.ranks[static_cast<size_t>(r)];
    for (size_t l = 0; l < rank.lanes.size(); ++l) {
      for (size_t t = 0; t < rank.lanes[l].steps.size(); ++t) {
        const ProgramStep& s = rank.lanes[l].steps[t];
        Op probe;
        probe.kind = s.kind;
        const int chunks = usesSrc(s.kind) ? s.src.count : s.dst.count;
        auto add = [&](std::map<std::tuple<int, int, int>, End>& m, int a, int b, const char* verb) {
          End& e = m[{a, b, s.channel}];
          if (e.lane >= 0 && e.lane != static_cast<int>(l))
            fail(strprintf("%s and %s both %s rank %d on channel %d (one connection per peer and channel)",
                           p.where(r, e.lane, -1).c_str(), p.where(r, static_cast<int>(l), -1).c_str(), verb,
                           r == a ? b : a, s.channel));
          e.lane = static_cast<int>(l);
          e.steps.emplace_back(static_cast<int>(t), chunks);
        };
        if (probe.sends()) add(sends, r, s.sendPeer, "send to");
        if (probe.receives()) add(recvs, s.recvPeer, r, "receive from");
      }
    }
  }
  for (const auto& [key, out] : sends) {
    const auto [a, b, ch] = key;
    auto it = recvs.find(key);
    const End none;
    const End& in = it == recvs.end() ? none : it->second;
    for (size_t i = 0; i < out.steps.size(); ++i) {
      const auto [step, chunks] = out.steps[i];
      if (i >= in.steps.size())
        fail(
            strprintf("%s sends %d chunk(s) to rank %d on channel %d, which rank %d never receives (it receives "
                      "%zu message(s) from rank %d on that channel, this is send %zu)",
                      p.where(a, out.lane, step).c_str(), chunks, b, ch, b, in.steps.size(), a, i + 1));
      const auto [rstep, rchunks] = in.steps[i];
      if (rchunks != chunks)
        fail(strprintf("%s sends %d chunk(s) to rank %d on channel %d, but the receive it pairs with (%s) takes %d",
                       p.where(a, out.lane, step).c_str(), chunks, b, ch, p.where(b, in.lane, rstep).c_str(), rchunks));
    }
  }
  for (const auto& [key, in] : recvs) {
    const auto [a, b, ch] = key;
    auto it = sends.find(key);
    const size_t sent = it == sends.end() ? 0 : it->second.steps.size();
    if (in.steps.size() > sent) {
      const auto [step, chunks] = in.steps[sent];
      fail(
          strprintf("%s receives %d chunk(s) from rank %d on channel %d, which rank %d never sends (it sends %zu "
                    "message(s) to rank %d on that channel)",
                    p.where(b, in.lane, step).c_str(), chunks, a, ch, a, sent, b));
    }
  }
}

bool programServes(const PlanProgram& p, int nranks, size_t bytes, bool inPlace, std::string* why, int root) {
  auto no = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  if (nranks != p.nranks) return no(strprintf("it is for %d ranks, not %d", p.nranks, nranks));
  if ((p.kind == CollKind::kBroadcast || p.kind == CollKind::kReduce) && root != 0)
    return no(strprintf("it describes root 0, not root %d", root));
  if (inPlace && !p.inPlace) return no("it serves out-of-place calls only");
  if (!inPlace && !p.outOfPlace) return no("it serves in-place calls only");
  if (bytes < p.minBytes || bytes > p.maxBytes)
    return no(strprintf("%zu bytes is outside its minBytes..maxBytes (%llu..%llu)", bytes,
                        static_cast<unsigned long long>(p.minBytes), static_cast<unsigned long long>(p.maxBytes)));
  return true;
}

namespace {

// Elements of chunk `j` of buffer `buf` start here, for chunks of q elements and blocks of `count` elements.
size_t chunkStart(const PlanProgram& p, int buf, int j, size_t count, size_t q) {
  if (buf == kBufScratch) return static_cast<size_t>(j) * q;
  const size_t k = static_cast<size_t>(p.chunksPerBlock());
  return static_cast<size_t>(j) / k * count + static_cast<size_t>(j) % k * q;
}

}  // namespace

Plan planOf(const PlanProgram& p, const CollArgs& args, std::vector<std::vector<OpOrigin>>* origins) {
  if (args.kind != p.kind || args.nranks != p.nranks || args.rank < 0 || args.rank >= p.nranks)
    throw InternalError(
        strprintf("%s: planOf for %s on rank %d of %d", p.file.c_str(), collName(args.kind), args.rank, args.nranks));
  const ProgramRank& me = p.ranks[static_cast<size_t>(args.rank)];
  const size_t k = static_cast<size_t>(p.chunksPerBlock());
  const size_t count = args.count, q = count / k, rem = count % k;
  // A slice is a quarter of the pipeline chunk: one piece at the executor's defaults (a chunk is half the
  // connection's capacity), so a step of c chunks holds c of the connection's slots, as MSCCL's executor sizes its
  // slices to a fraction of its FIFO.
  const size_t slice = std::min(q, std::max<size_t>(1, args.chunkElems / 4));
  const size_t loops = q == 0 ? 0 : (q + slice - 1) / slice;
  // A step of several chunks stays one op where its chunks are one region (a single loop and no tail); otherwise
  // it is an op per chunk. The rule depends only on the call, so both ends of every message split alike.
  const bool merge = loops == 1 && rem == 0;
  const size_t nl = me.lanes.size();
  // Ops per step and per lane in one loop, and the inclusive count up to each step: where a dependency points.
  std::vector<std::vector<size_t>> through(nl);
  std::vector<size_t> perLoop(nl, 0);
  for (size_t l = 0; l < nl; ++l) {
    for (const ProgramStep& s : me.lanes[l].steps) {
      const int chunks = usesSrc(s.kind) ? s.src.count : usesDst(s.kind) ? s.dst.count : 1;
      perLoop[l] += s.kind == OpKind::kNop || merge ? 1 : static_cast<size_t>(chunks);
      through[l].push_back(perLoop[l]);
    }
  }
  Plan plan;
  plan.rank = args.rank;
  plan.nranks = args.nranks;
  plan.algorithm = p.name;
  plan.scratchElems = static_cast<size_t>(me.scratchChunks) * q;
  plan.lanes.resize(nl);
  if (origins) origins->assign(nl, {});
  for (size_t loop = 0; loop < loops; ++loop) {
    const size_t at = loop * slice, n = std::min(slice, q - at);
    for (size_t l = 0; l < nl; ++l) {
      for (size_t t = 0; t < me.lanes[l].steps.size(); ++t) {
        const ProgramStep& s = me.lanes[l].steps[t];
        Op op;
        op.kind = s.kind;
        op.sendPeer = op.sends() ? s.sendPeer : -1;
        op.recvPeer = op.receives() ? s.recvPeer : -1;
        op.channel = static_cast<uint8_t>(s.channel);
        const int chunks = usesSrc(s.kind) ? s.src.count : usesDst(s.kind) ? s.dst.count : 1;
        const int parts = s.kind == OpKind::kNop || merge ? 1 : chunks;
        for (int c = 0; c < parts; ++c) {
          Op part = op;
          auto region = [&](const ChunkRegion& r) {
            Region out;
            out.buf = r.buf;
            out.offset = chunkStart(p, r.buf, r.offset + c, count, q) + at;
            out.count = merge ? static_cast<size_t>(r.count) * q : n;
            return out;
          };
          if (usesSrc(s.kind)) part.src = region(s.src);
          if (usesDst(s.kind)) part.dst = region(s.dst);
          // The wait goes on the step's first op; it names the last op of the step waited for, in this loop.
          if (c == 0 && s.afterLane >= 0) {
            const size_t d = static_cast<size_t>(s.afterLane);
            part.afterLane = s.afterLane;
            part.afterOps = static_cast<uint32_t>(loop * perLoop[d] + through[d][static_cast<size_t>(s.afterStep)]);
          }
          plan.lanes[l].push_back(part);
          if (origins) (*origins)[l].push_back(OpOrigin{static_cast<int>(l), static_cast<int>(t), loop});
        }
      }
    }
  }
  if (rem == 0) return plan;
  // The tail: the last rem elements of every block, by the default built-in algorithm on a connection of its own.
  CollArgs tail = args;
  tail.count = rem;
  tail.hostOf.clear();
  Plan extra = makePlan(tail, defaultAlgorithm(p.kind).name);
  const size_t mainLanes = plan.lanes.size(), mainScratch = plan.scratchElems;
  auto remap = [&](Region& r) {
    if (r.buf == kBufScratch) {
      r.offset += mainScratch;
      return;
    }
    const size_t block = r.offset / rem, within = r.offset % rem;
    if (r.count > 0 && (r.offset + r.count - 1) / rem != block)
      throw InternalError(
          strprintf("%s: the tail's %s plan has a region across blocks", p.file.c_str(), extra.algorithm.c_str()));
    r.offset = block * count + k * q + within;
  };
  for (auto& lane : extra.lanes) {
    for (Op& op : lane) {
      if (usesSrc(op.kind)) remap(op.src);
      if (usesDst(op.kind)) remap(op.dst);
      op.channel = static_cast<uint8_t>(p.channels());
      if (op.afterLane >= 0) op.afterLane += static_cast<int>(mainLanes);
    }
    if (origins) origins->emplace_back(lane.size(), OpOrigin{});
    plan.lanes.push_back(std::move(lane));
  }
  plan.scratchElems = mainScratch + extra.scratchElems;
  return plan;
}

std::vector<std::vector<std::vector<int>>> stepLevels(const PlanProgram& p, int* longest) {
  std::vector<std::vector<std::vector<int>>> level(static_cast<size_t>(p.nranks));
  size_t total = 0;
  for (int r = 0; r < p.nranks; ++r)
    for (const ProgramLane& l : p.ranks[static_cast<size_t>(r)].lanes) {
      level[static_cast<size_t>(r)].emplace_back(l.steps.size(), 0);
      total += l.steps.size();
    }
  // Relaxation: each pass lifts every step to its predecessors' level + 1; an acyclic program settles within one pass
  // per step on its longest path.
  int most = 0;
  for (size_t pass = 0;; ++pass) {
    if (pass > total + 1)
      throw InvalidArgument(p.file + ": its steps wait on each other in a cycle (through messages and dependencies)");
    bool changed = false;
    // The k-th send on a connection (a, b, channel) pairs with the k-th receive.
    std::map<std::tuple<int, int, int>, std::vector<int>> sent;
    for (int r = 0; r < p.nranks; ++r) {
      const auto& lanes = p.ranks[static_cast<size_t>(r)].lanes;
      for (size_t l = 0; l < lanes.size(); ++l)
        for (size_t t = 0; t < lanes[l].steps.size(); ++t) {
          const ProgramStep& s = lanes[l].steps[t];
          Op probe;
          probe.kind = s.kind;
          if (probe.sends()) sent[{r, s.sendPeer, s.channel}].push_back(level[static_cast<size_t>(r)][l][t]);
        }
    }
    for (int r = 0; r < p.nranks; ++r) {
      const auto& lanes = p.ranks[static_cast<size_t>(r)].lanes;
      auto& mine = level[static_cast<size_t>(r)];
      std::map<std::tuple<int, int, int>, size_t> received;
      for (size_t l = 0; l < lanes.size(); ++l) {
        for (size_t t = 0; t < lanes[l].steps.size(); ++t) {
          const ProgramStep& s = lanes[l].steps[t];
          int at = t > 0 ? mine[l][t - 1] + 1 : 1;
          if (s.afterLane >= 0)
            at = std::max(at, mine[static_cast<size_t>(s.afterLane)][static_cast<size_t>(s.afterStep)] + 1);
          Op probe;
          probe.kind = s.kind;
          if (probe.receives()) {
            const auto key = std::make_tuple(s.recvPeer, r, s.channel);
            const size_t k = received[key]++;
            const auto& from = sent[key];
            if (k < from.size()) at = std::max(at, from[k] + 1);
          }
          if (at > mine[l][t]) {
            mine[l][t] = at;
            changed = true;
          }
          most = std::max(most, mine[l][t]);
        }
      }
    }
    if (!changed) break;
  }
  if (longest) *longest = most;
  return level;
}

ProgramFigures programFigures(const PlanProgram& p) {
  ProgramFigures f;
  stepLevels(p, &f.criticalSteps);
  f.criticalSteps = std::max(1, f.criticalSteps);
  for (const ProgramRank& rank : p.ranks) {
    double sent = 0, reduced = 0;
    std::vector<int> peers;
    for (const ProgramLane& lane : rank.lanes)
      for (const ProgramStep& s : lane.steps) {
        Op probe;
        probe.kind = s.kind;
        const int chunks = usesSrc(s.kind) ? s.src.count : s.dst.count;
        if (probe.sends()) {
          sent += chunks;
          if (std::find(peers.begin(), peers.end(), s.sendPeer) == peers.end()) peers.push_back(s.sendPeer);
        }
        if (s.kind == OpKind::kRecvReduce || s.kind == OpKind::kRecvReduceSend ||
            s.kind == OpKind::kRecvReduceCopySend || s.kind == OpKind::kReduceLocal)
          reduced += chunks;
      }
    f.sentChunks = std::max(f.sentChunks, sent);
    f.reducedChunks = std::max(f.reducedChunks, reduced);
    f.sendPeers = std::max(f.sendPeers, static_cast<int>(peers.size()));
  }
  return f;
}

std::vector<Phase> programShape(const PlanProgram& p, const ProgramFigures& f, double bytes) {
  const double chunkBytes = bytes / std::max(1, p.chunksPerLoop);
  Phase ph;
  ph.pattern = Phase::Pattern::kDirect;
  ph.steps = f.criticalSteps;
  ph.fanout = std::max(1, f.sendPeers);
  ph.stepBytes = f.sentChunks * chunkBytes / ph.steps / ph.fanout;
  ph.reduceBytes = f.reducedChunks * chunkBytes;
  return {ph};
}

PlanProgram dumpProgram(CollKind kind, const std::string& algorithm, int nranks, size_t count,
                        const std::vector<int>& hostOf) {
  const AlgorithmRecord& record = algorithmOf(kind, algorithm);
  if (nranks < 2) throw InvalidArgument("dump: needs 2 ranks or more");
  if (count < 1) throw InvalidArgument("dump: needs a count of 1 or more");
  PlanProgram p;
  p.file = strprintf("%s %s n=%d", collName(kind), record.name, nranks);
  p.format = "strata-plan";
  p.name = record.name;
  p.kind = kind;
  p.nranks = nranks;
  // The plans are the out-of-place call's (an algorithm may plan an in-place call differently).
  p.inPlace = false;
  p.outOfPlace = true;
  const int blocks = perRankBlocks(kind) ? nranks : 1;
  if (count > static_cast<size_t>(INT32_MAX / blocks)) throw InvalidArgument("dump: count too large");
  p.chunksPerLoop = static_cast<int>(count) * blocks;
  p.ranks.resize(static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) {
    // Pipeline chunks of the whole buffer: every op in one piece, one element per chunk of the program.
    CollArgs args = makeCollArgs(kind, nranks, r, count, count * static_cast<size_t>(blocks));
    args.hostOf = hostOf;
    const Plan plan = makePlan(args, record.name);
    ProgramRank& rank = p.ranks[static_cast<size_t>(r)];
    rank.scratchChunks = static_cast<int>(plan.scratchElems);
    for (size_t l = 0; l < plan.lanes.size(); ++l) {
      ProgramLane& lane = rank.lanes.emplace_back();
      lane.id = static_cast<int>(l);
      for (const Op& op : plan.lanes[l]) {
        ProgramStep s;
        s.kind = op.kind;
        s.sendPeer = op.sendPeer;
        s.recvPeer = op.recvPeer;
        s.channel = op.channel;
        auto chunkRegion = [](const Region& r) {
          return ChunkRegion{r.buf, static_cast<int>(r.offset), static_cast<int>(r.count)};
        };
        if (usesSrc(op.kind)) s.src = chunkRegion(op.src);
        if (usesDst(op.kind)) s.dst = chunkRegion(op.dst);
        if (op.afterLane >= 0) {
          s.afterLane = op.afterLane;
          s.afterStep = static_cast<int>(op.afterOps) - 1;
        }
        lane.steps.push_back(s);
      }
    }
  }
  for (ProgramRank& rank : p.ranks)
    for (ProgramLane& lane : rank.lanes)
      for (ProgramStep& s : lane.steps)
        if (s.afterLane >= 0)
          rank.lanes[static_cast<size_t>(s.afterLane)].steps[static_cast<size_t>(s.afterStep)].hasDep = true;
  checkProgram(p);
  return p;
}

std::shared_ptr<const PlanProgram> parseProgram(const std::string& text, const std::string& origin) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) throw InvalidArgument(origin + ": empty file");
  if (text[first] == '<') return parseMscclXml(text, origin);
  if (text[first] == '{') return parseStrataPlan(text, origin);
  throw InvalidArgument(origin + ": neither an MSCCL XML algorithm ('<algo ...>') nor a Strata plan file ('{...}')");
}

std::shared_ptr<const PlanProgram> loadProgram(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidArgument(path + ": cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().size() > (64u << 20)) throw InvalidArgument(path + ": larger than 64 MiB");
  return parseProgram(text.str(), path);
}

}  // namespace strata
