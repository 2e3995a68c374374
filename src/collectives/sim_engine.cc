// The simulator's engine (sim.h): the plans of the simulated ranks, cut in the executor's pieces, run as events
// over the cluster's resources.
//
// Each lane of each simulated rank is a process that takes its ops' pieces one after another. A piece starts when
// its lane's previous piece is done, its op's cross-lane dependency is met (first piece only), its message has
// arrived (receiving ops) and the connection has a free slot (sending ops). It then costs the rank's engine its
// local work (served in order with the rank's other lanes), after which its message is consumed (freeing the
// sender's slot) and its outgoing message joins its connection's queue; the queue feeds the links one message at a
// time, as the sender's side takes each. Every resource is a server in arrival order at its own rate, and events are
// handled in time order, so each server sees its pieces in the order they reach it; pieces that reach it at the
// same instant share it.
#include "collectives/sim_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <queue>
#include <unordered_map>

#include "util/error.h"

namespace strata {
namespace {

constexpr double kUnknown = -1;  // a time not known yet

// An op as the engine needs it: what it does, on which connections, how many elements.
struct SimOp {
  OpKind kind = OpKind::kCopy;
  int recvConn = -1;  // index into SimEngine::Impl::conns_
  int sendConn = -1;
  size_t elems = 0;
  int afterLane = -1;
  uint32_t afterOps = 0;
};

bool reduces(OpKind k) {
  return k == OpKind::kRecvReduce || k == OpKind::kRecvReduceSend || k == OpKind::kRecvReduceCopySend ||
         k == OpKind::kReduceLocal;
}
bool copies(OpKind k) { return k == OpKind::kCopy || k == OpKind::kCopySend || k == OpKind::kRecvCopySend; }

struct Lane {
  int rep = 0;   // the simulated rank (0..s-1)
  int cpu = -1;  // the engine it runs on: its rank's, or its own (a loaded program's thread block on the device)
  std::vector<SimOp> ops;
  size_t op = 0;                                   // the op being worked on
  size_t piece = 0;                                // its next piece
  std::vector<double> doneAt;                      // per op: when it completed (kUnknown before)
  std::vector<std::pair<size_t, int>> depWaiters;  // (op index, lane id) waiting for that op to complete
};

// One connection (sender -> receiver) of the simulated ranks, under symmetry the class of connections that shift
// onto it: its sender and its receiver are both simulated ranks' lanes.
struct Conn {
  std::vector<int> path;  // resources crossed
  double latencyUs = 0;
  std::vector<double> arrive;    // per message: when it has arrived
  std::vector<double> consumed;  // per message: when the receiver consumed it (its slot is free again)
  int recvWaiter = -1;           // lane waiting for the next message to arrive
  int sendWaiter = -1;           // lane waiting for a free slot
  size_t issued = 0;             // messages its sender has produced (arrive.size() of them have entered the links)
  std::vector<double> queued;    // bytes of the messages waiting for the connection's own side (index: issued - 1..)
  size_t queueHead = 0;
  double txFreeAt = 0;   // when the first resource of the path has taken the last message that entered
  bool inBatch = false;  // its oldest queued message is entering the links at this instant
};

struct Resource {
  double usPerByte = 0;
  double freeAt = 0;
};

struct Event {
  enum Kind : uint8_t {
    kStep,      // lane `id` tries to start its next piece
    kFinish,    // lane `id`'s piece has done its local work
    kTransmit,  // connection `id`'s next queued message enters the links
  };
  double t;
  uint64_t seq;
  int id;
  Kind kind;
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

}  // namespace

class SimEngine::Impl {
 public:
  Impl(const SimCluster& c, const SimCall& call, int n, std::vector<int> hostOf, int period)
      : c_(c), call_(call), n_(n), s_(period), hostOf_(std::move(hostOf)) {
    L_ = c.ranksPerHost;
    localOf_.resize(static_cast<size_t>(n));
    std::vector<int> seen;
    for (int r = 0; r < n; ++r) {
      const int h = hostOf_[static_cast<size_t>(r)];
      if (static_cast<int>(seen.size()) <= h) seen.resize(static_cast<size_t>(h) + 1, 0);
      localOf_[static_cast<size_t>(r)] = seen[static_cast<size_t>(h)]++;
    }
    const int coarsen = std::max(1, call.coarsen);
    pieceElems_ = std::max<size_t>(1, c.messageBytes() * static_cast<size_t>(coarsen) / call.elemSize);
    over_ = c.cores > 0 && c.ranksPerHost > c.cores ? static_cast<double>(c.ranksPerHost) / c.cores : 1.0;
    // The call's working set on a host: every rank's send and receive buffers.
    const double bytes = static_cast<double>(call.bytes);
    double perRank = 2 * bytes;
    if (call.kind == CollKind::kReduceScatter || call.kind == CollKind::kAllGather) perRank = bytes + bytes / n;
    memoryGBps_ = c.memoryGBpsAt(perRank * c.ranksPerHost);
    reps_.resize(static_cast<size_t>(s_));
  }

  // Adds simulated rank `rep`'s plan.
  void addPlan(const Plan& plan) {
    const int rep = plan.rank;
    RepState& st = reps_[static_cast<size_t>(rep)];
    st.cpu = resourceIndex(key(kCpu, rep, 0), 1.0);  // rate unused: the engine's work is in us
    // Shared memory: the host's memory, which every op's traffic crosses (sim.h, SimCluster::intra).
    if (c_.intra == SimCluster::Intra::kShm && memoryGBps_ > 0)
      st.memory = resourceIndex(key(kMemory, static_cast<uint64_t>(canonHost(host(rep))), 0), memoryGBps_);
    st.firstLane = static_cast<int>(lanes_.size());
    // A loaded program on the device executor: each lane is a thread block of its own, with its own engine.
    const bool ownEngines = c_.executor == SimCluster::Executor::kDevice && call_.program;
    for (const std::vector<Op>& ops : plan.lanes) {
      Lane& lane = lanes_.emplace_back();
      lane.rep = rep;
      lane.cpu = ownEngines ? resourceIndex(key(kCpu, rep, lanes_.size()), 1.0) : st.cpu;
      lane.ops.reserve(ops.size());
      for (const Op& op : ops) {
        SimOp s;
        s.kind = op.kind;
        s.elems = op.count();
        s.afterLane = op.afterLane;
        s.afterOps = op.afterOps;
        if (op.receives()) s.recvConn = connIndex(op.recvPeer, rep, op.channel);
        if (op.sends()) s.sendConn = connIndex(rep, op.sendPeer, op.channel);
        lane.ops.push_back(s);
      }
      lane.doneAt.assign(lane.ops.size(), kUnknown);
    }
  }

  SimResult run() {
    for (int id = 0; id < static_cast<int>(lanes_.size()); ++id) schedule(0, id, Event::kStep);
    for (;;) {
      // Messages that entered the links at one instant are served together once that instant is over.
      if (!batch_.empty() && (events_.empty() || events_.top().t > batchTime_)) {
        flushBatch();
        continue;
      }
      if (events_.empty()) break;
      const Event e = events_.top();
      events_.pop();
      ++events;
      switch (e.kind) {
        case Event::kStep: step(e.id, e.t); break;
        case Event::kFinish: finishPiece(e.id, e.t); break;
        case Event::kTransmit: transmit(e.id, e.t); break;
      }
    }
    SimResult r;
    for (size_t id = 0; id < lanes_.size(); ++id) {
      const Lane& lane = lanes_[id];
      if (lane.op < lane.ops.size())
        throw InternalError(strprintf(
            "strata-sim: %s %s on %d ranks: rank %d's lane %zu is stuck at op %zu of %zu "
            "(the plans deadlock in the simulation)",
            collName(call_.kind), call_.algorithm.c_str(), n_, lane.rep,
            id - static_cast<size_t>(reps_[static_cast<size_t>(lane.rep)].firstLane), lane.op, lane.ops.size()));
      const double done = lane.doneAt.empty() ? 0 : lane.doneAt.back();
      r.us = std::max(r.us, done);
      std::vector<std::vector<double>>& perRank = r.laneUs;
      if (perRank.size() <= static_cast<size_t>(lane.rep)) perRank.resize(static_cast<size_t>(lane.rep) + 1);
      perRank[static_cast<size_t>(lane.rep)].push_back(done);
    }
    r.pieces = pieces;
    r.events = events;
    return r;
  }

  uint64_t events = 0;
  uint64_t pieces = 0;

 private:
  enum ResourceKind : uint64_t { kCpu, kTxPort, kRxPort, kPair, kMemory, kNicTx, kNicRx, kLeafUp, kLeafDown, kCap };
  static uint64_t key(ResourceKind k, uint64_t a, uint64_t b) {
    return (static_cast<uint64_t>(k) << 56) | (a << 28) | b;
  }

  struct RepState {
    int cpu = -1;
    int memory = -1;
    int firstLane = 0;
  };

  // ---- the symmetry: every rank, host and leaf maps onto its representative among the simulated ones ----
  int canonRank(int r) const { return r % s_; }
  // With one host the period may be shorter than a host (s < L): every rank is on host 0.
  int canonHost(int h) const { return s_ == n_ || s_ < L_ ? h : h % (s_ / L_); }
  int canonLeaf(int l) const { return s_ == n_ ? l : l % std::max(1, s_ / (L_ * std::max(1, c_.hostsPerLeaf))); }
  int host(int r) const { return hostOf_[static_cast<size_t>(r)]; }

  int resourceIndex(uint64_t k, double gbps) {
    auto [it, fresh] = resourceIds_.emplace(k, static_cast<int>(resources_.size()));
    if (fresh) {
      resources_.push_back(Resource{1.0 / (gbps * 1e3), 0});
      batchBytes_.push_back(0);
    }
    return it->second;
  }

  // The connection class of a -> b: the sender shifted to its representative.
  // The connection a -> b of `channel` (Op::channel: a plan's channels are connections of their own).
  int connIndex(int a, int b, int channel) {
    const int shift = a - canonRank(a);
    const int ca = canonRank(a), cb = ((b - shift) % n_ + n_) % n_;
    const uint64_t k =
        (static_cast<uint64_t>(channel) << 58) | (static_cast<uint64_t>(ca) << 29) | static_cast<uint64_t>(cb);
    auto [it, fresh] = connIds_.emplace(k, static_cast<int>(conns_.size()));
    if (fresh) {
      Conn& conn = conns_.emplace_back();
      buildPath(ca, cb, &conn);
      if (c_.executor == SimCluster::Executor::kDevice && c_.channelGBps > 0)
        conn.path.push_back(
            resourceIndex(key(kCap, static_cast<uint64_t>(it->second), 0), c_.channelGBps * std::max(1, c_.channels)));
    }
    return it->second;
  }

  void buildPath(int a, int b, Conn* conn) {
    const int ha = host(a), hb = host(b);
    if (ha == hb) {
      const double rate = c_.intraGBps * c_.intraEfficiency;
      conn->latencyUs = c_.intraLatencyUs;
      if (c_.intra == SimCluster::Intra::kPairwise) {
        conn->path.push_back(resourceIndex(key(kPair, static_cast<uint64_t>(a), static_cast<uint64_t>(b)), rate));
        return;
      }
      // Shared memory: the ports are what one core copies, shared with the other ranks on its core.
      const double port = c_.intra == SimCluster::Intra::kShm ? rate / over_ : rate;
      conn->path.push_back(resourceIndex(key(kTxPort, static_cast<uint64_t>(canonRank(a)), 0), port));
      conn->path.push_back(resourceIndex(key(kRxPort, static_cast<uint64_t>(canonRank(b)), 0), port));
      return;
    }
    const int nicA = localOf_[static_cast<size_t>(a)] % c_.nics, nicB = localOf_[static_cast<size_t>(b)] % c_.nics;
    const double nicRate = c_.nicGBps * c_.netEfficiency;
    conn->path.push_back(
        resourceIndex(key(kNicTx, static_cast<uint64_t>(canonHost(ha)), static_cast<uint64_t>(nicA)), nicRate));
    conn->path.push_back(
        resourceIndex(key(kNicRx, static_cast<uint64_t>(canonHost(hb)), static_cast<uint64_t>(nicB)), nicRate));
    const bool rail = c_.fabric == SimCluster::Fabric::kRail;
    int hops = 1;
    if (c_.hostsPerLeaf > 0) {
      const int la = ha / c_.hostsPerLeaf, lb = hb / c_.hostsPerLeaf;
      if (la != lb || (rail && nicA != nicB)) {
        // Through the spine: the source leaf's uplinks and the destination leaf's downlinks.
        hops = 3;
        const double perLeaf = c_.hostsPerLeaf * nicRate * (rail ? 1 : c_.nics) / c_.oversubscription;
        conn->path.push_back(resourceIndex(
            key(kLeafUp, static_cast<uint64_t>(canonLeaf(la)), static_cast<uint64_t>(rail ? nicA : 0)), perLeaf));
        conn->path.push_back(resourceIndex(
            key(kLeafDown, static_cast<uint64_t>(canonLeaf(lb)), static_cast<uint64_t>(rail ? nicB : 0)), perLeaf));
      }
    }
    conn->latencyUs = c_.netLatencyUs + hops * c_.switchLatencyUs;
  }

  void schedule(double t, int id, Event::Kind kind) { events_.push(Event{t, seq_++, id, kind}); }

  size_t piecesOf(const SimOp& op) const { return (op.elems + pieceElems_ - 1) / pieceElems_; }
  size_t pieceElems(const SimOp& op, size_t piece) const {
    return std::min(pieceElems_, op.elems - piece * pieceElems_);
  }

  // Starts lane `id`'s next piece at `now` if it can; otherwise registers what it waits for.
  void step(int id, double now) {
    Lane& lane = lanes_[static_cast<size_t>(id)];
    if (lane.op >= lane.ops.size()) return;
    const SimOp& op = lane.ops[lane.op];
    if (lane.piece == 0 && op.afterLane >= 0 && op.afterOps > 0) {
      const int depId = reps_[static_cast<size_t>(lane.rep)].firstLane + op.afterLane;
      Lane& dep = lanes_[static_cast<size_t>(depId)];
      const double d = dep.doneAt[op.afterOps - 1];
      if (d == kUnknown) {
        dep.depWaiters.emplace_back(op.afterOps - 1, id);
        return;
      }
      if (d > now) return schedule(d, id, Event::kStep);
    }
    if (op.recvConn >= 0) {
      Conn& conn = conns_[static_cast<size_t>(op.recvConn)];
      const size_t m = conn.consumed.size();
      if (m >= conn.arrive.size()) {
        conn.recvWaiter = id;
        return;
      }
      if (conn.arrive[m] > now) return schedule(conn.arrive[m], id, Event::kStep);
    }
    if (op.sendConn >= 0) {
      Conn& conn = conns_[static_cast<size_t>(op.sendConn)];
      const size_t m = conn.issued;
      if (m >= static_cast<size_t>(c_.nslots)) {
        const size_t k = m - static_cast<size_t>(c_.nslots);
        if (k >= conn.consumed.size()) {
          conn.sendWaiter = id;
          return;
        }
        if (conn.consumed[k] > now) return schedule(conn.consumed[k], id, Event::kStep);
      }
    }
    // The engine's work for this piece, after the rank's earlier work.
    const double bytes = static_cast<double>(pieceElems(op, lane.piece) * call_.elemSize);
    double work = 0;
    if (op.recvConn >= 0) work += c_.messageUs;
    if (op.sendConn >= 0) work += c_.messageUs;
    if (reduces(op.kind)) work += bytes / (c_.reduceGBps * 1e3);
    if (copies(op.kind)) work += bytes / (c_.copyGBps * 1e3);
    work *= over_;
    const RepState& rs = reps_[static_cast<size_t>(lane.rep)];
    Resource& cpu = resources_[static_cast<size_t>(lane.cpu)];
    double end = std::max(now, cpu.freeAt) + work;
    cpu.freeAt = end;
    if (rs.memory >= 0) {
      // Its reads and writes: the source and the destination in full, the incoming and outgoing slots in part.
      const double touches =
          usesSrc(op.kind) + usesDst(op.kind) + c_.slotMemoryShare * ((op.recvConn >= 0) + (op.sendConn >= 0));
      Resource& mem = resources_[static_cast<size_t>(rs.memory)];
      mem.freeAt = std::max(now, mem.freeAt) + touches * bytes * mem.usPerByte;
      end = std::max(end, mem.freeAt);
    }
    if (end > now) return schedule(end, id, Event::kFinish);
    finishPiece(id, now);
  }

  // Lane `id`'s current piece has done its local work at `t`: its message is consumed, its outgoing message
  // is handed to the connection, and the lane moves on.
  void finishPiece(int id, double t) {
    Lane& lane = lanes_[static_cast<size_t>(id)];
    const SimOp& op = lane.ops[lane.op];
    if (op.recvConn >= 0) {
      Conn& conn = conns_[static_cast<size_t>(op.recvConn)];
      conn.consumed.push_back(t);
      if (conn.sendWaiter >= 0) {
        schedule(t, conn.sendWaiter, Event::kStep);
        conn.sendWaiter = -1;
      }
    }
    if (op.sendConn >= 0) {
      Conn& conn = conns_[static_cast<size_t>(op.sendConn)];
      ++conn.issued;
      conn.queued.push_back(static_cast<double>(pieceElems(op, lane.piece) * call_.elemSize));
      // A connection's messages enter the links one after another, each once the one before has left the
      // sender's side (its first resource: its port, its NIC, its link). So k senders into one shared resource
      // take turns piece by piece instead of one queueing all its pieces at once.
      if (!conn.inBatch && conn.queued.size() - conn.queueHead == 1) {
        if (conn.txFreeAt <= t) {
          transmit(op.sendConn, t);
        } else {
          schedule(conn.txFreeAt, op.sendConn, Event::kTransmit);
        }
      }
    }
    if (++lane.piece >= piecesOf(op)) {
      lane.doneAt[lane.op] = t;
      for (auto it = lane.depWaiters.begin(); it != lane.depWaiters.end();) {
        if (it->first == lane.op) {
          schedule(t, it->second, Event::kStep);
          it = lane.depWaiters.erase(it);
        } else {
          ++it;
        }
      }
      ++lane.op;
      lane.piece = 0;
    }
    step(id, t);
  }

  // Connection `c`'s oldest queued message enters the links at `t` (the instant being handled): it joins the
  // messages entering at the same instant.
  void transmit(int c, double t) {
    conns_[static_cast<size_t>(c)].inBatch = true;
    batch_.push_back(c);
    batchTime_ = t;
  }

  // Serves the messages that entered the links at batchTime_. Every resource serves what reaches it in arrival
  // order at its rate; messages that reach it at the same instant share it equally (they all take the sum of their
  // bytes), so no order among them matters: a symmetric simulation then meets the same times as a full one. A
  // message has arrived when the slowest resource of its path has served it, plus the path's latency.
  void flushBatch() {
    const double t = batchTime_;
    for (int c : batch_) {
      const Conn& conn = conns_[static_cast<size_t>(c)];
      const double bytes = conn.queued[conn.queueHead];
      for (int r : conn.path) {
        if (batchBytes_[static_cast<size_t>(r)] == 0) touched_.push_back(r);
        batchBytes_[static_cast<size_t>(r)] += bytes;
      }
    }
    for (int r : touched_) {
      Resource& res = resources_[static_cast<size_t>(r)];
      res.freeAt = std::max(t, res.freeAt) + batchBytes_[static_cast<size_t>(r)] * res.usPerByte;
      batchBytes_[static_cast<size_t>(r)] = 0;
    }
    touched_.clear();
    for (int c : batch_) {
      Conn& conn = conns_[static_cast<size_t>(c)];
      conn.inBatch = false;
      ++conn.queueHead;
      double done = t;
      for (int r : conn.path) done = std::max(done, resources_[static_cast<size_t>(r)].freeAt);
      conn.txFreeAt = resources_[static_cast<size_t>(conn.path.front())].freeAt;
      const double arrival = done + conn.latencyUs;
      conn.arrive.push_back(arrival);
      ++pieces;
      if (conn.recvWaiter >= 0) {
        schedule(arrival, conn.recvWaiter, Event::kStep);
        conn.recvWaiter = -1;
      }
      if (conn.queueHead < conn.queued.size()) {
        schedule(std::max(t, conn.txFreeAt), c, Event::kTransmit);
      } else {
        conn.queued.clear();
        conn.queueHead = 0;
      }
    }
    batch_.clear();
  }

  const SimCluster& c_;
  const SimCall& call_;
  const int n_, s_;
  int L_ = 1;
  std::vector<int> hostOf_, localOf_;
  size_t pieceElems_ = 1;
  double over_ = 1;
  double memoryGBps_ = 0;  // the host memory's rate at this call's working set
  std::vector<RepState> reps_;
  std::vector<Lane> lanes_;
  std::vector<Conn> conns_;
  std::unordered_map<uint64_t, int> connIds_;
  std::vector<Resource> resources_;
  std::unordered_map<uint64_t, int> resourceIds_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::vector<int> batch_;  // connections whose message enters the links at batchTime_
  double batchTime_ = 0;
  std::vector<double> batchBytes_;  // per resource: bytes of the batch crossing it (0 outside flushBatch)
  std::vector<int> touched_;
  uint64_t seq_ = 0;
};

SimEngine::SimEngine(const SimCluster& cluster, const SimCall& call, int n, std::vector<int> hostOf, int period)
    : impl_(std::make_unique<Impl>(cluster, call, n, std::move(hostOf), period)) {}
SimEngine::~SimEngine() = default;
void SimEngine::addPlan(const Plan& plan) { impl_->addPlan(plan); }
SimResult SimEngine::run() { return impl_->run(); }

}  // namespace strata
