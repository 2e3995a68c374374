#include "core/interpreter.h"

#include <algorithm>
#include <deque>
#include <memory>

#include "core/plan_runner.h"
#include "transport/transport.h"
#include "util/error.h"

namespace strata {
namespace {

// One direction of an in-memory link: at most `slots` whole messages.
struct MemoryQueue {
  struct Message {
    std::vector<char> bytes;
    MsgStamp stamp;
  };
  std::deque<Message> messages;
  std::vector<char> staging;
  size_t slots = 1;
};

class MemoryConnection : public Connection {
 public:
  MemoryConnection(int self, int peer, MemoryQueue* out, MemoryQueue* in)
      : self_(self), peer_(peer), out_(out), in_(in) {}
  void* trySendReserve(size_t bytes) override {
    if (out_->messages.size() >= out_->slots) return nullptr;
    out_->staging.resize(bytes);
    return out_->staging.data();
  }
  void sendCommit(size_t bytes, const MsgStamp& stamp) override {
    out_->staging.resize(bytes);
    out_->messages.push_back({std::move(out_->staging), stamp});
    out_->staging = {};
  }
  const void* tryRecvPeek(size_t bytes, const MsgStamp& expected) override {
    if (in_->messages.empty()) return nullptr;
    const auto& m = in_->messages.front();
    if (m.stamp != expected) throw StampMismatch(self_, peer_, expected, m.stamp);
    if (m.bytes.size() != bytes)
      throw InvalidUsage(strprintf("rank %d expected a %zu-byte message from rank %d but got %zu bytes", self_, bytes,
                                   peer_, m.bytes.size()));
    return m.bytes.data();
  }
  void recvRelease() override { in_->messages.pop_front(); }
  Head peekStamp(MsgStamp* stamp) override {
    if (in_->messages.empty()) return Head::kEmpty;
    *stamp = in_->messages.front().stamp;
    return Head::kArrived;
  }
  bool progress() override { return false; }
  bool flushed() override { return true; }
  void checkPeer() override {}
  int peer() const override { return peer_; }
  const char* kind() const override { return "memory"; }

 private:
  int self_, peer_;
  MemoryQueue* out_;
  MemoryQueue* in_;
};

}  // namespace

void interpretPlans(const std::vector<Plan>& plans, const std::vector<std::vector<void*>>& buffers,
                    strataDataType_t dtype, ReduceKind op, const InterpreterOptions& options,
                    const DescribeOp& describeOp) {
  const size_t n = plans.size();
  if (buffers.size() != n) throw InternalError("interpretPlans: one buffer list per rank expected");
  size_t channels = 1;
  for (const Plan& p : plans) channels = std::max(channels, static_cast<size_t>(planChannels(p)));
  // queues[(c * n + a) * n + b] carries messages from a to b on channel c.
  std::vector<MemoryQueue> queues(channels * n * n);
  for (auto& q : queues) q.slots = static_cast<size_t>(options.nslots);
  auto queue = [&](size_t c, size_t a, size_t b) { return &queues[(c * n + a) * n + b]; };
  std::vector<std::vector<std::unique_ptr<MemoryConnection>>> conns(n);
  std::vector<std::unique_ptr<PlanRunner>> runners;
  for (size_t r = 0; r < n; ++r) {
    conns[r].resize(channels * n);
    runners.push_back(std::make_unique<PlanRunner>(
        plans[r], buffers[r], dtype, op, options.pieceBytes, [&, r](int peer, int channel) -> Connection* {
          if (peer < 0 || static_cast<size_t>(peer) >= n || static_cast<size_t>(peer) == r)
            throw InternalError(strprintf("rank %zu's plan names invalid peer %d", r, peer));
          const size_t p = static_cast<size_t>(peer), c = static_cast<size_t>(channel);
          if (c >= channels) throw InternalError(strprintf("rank %zu's plan names channel %zu", r, c));
          auto& conn = conns[r][c * n + p];
          if (!conn)
            conn = std::make_unique<MemoryConnection>(static_cast<int>(r), peer, queue(c, r, p), queue(c, p, r));
          return conn.get();
        }));
  }
  for (;;) {
    bool moved = false, all = true;
    for (size_t r = 0; r < n; ++r) {
      if (runners[r]->done()) continue;
      moved |= runners[r]->progress();
      all &= runners[r]->done();
    }
    if (all) break;
    if (!moved) {
      std::string msg = "interpreter: deadlock, no rank can progress:";
      for (size_t r = 0; r < n; ++r) {
        if (runners[r]->done()) continue;
        if (!describeOp) {
          msg += strprintf("\n  rank %zu: %s", r, runners[r]->describeStall().c_str());
          continue;
        }
        for (size_t l = 0; l < plans[r].lanes.size(); ++l) {
          const size_t at = runners[r]->laneOp(l);
          if (at >= plans[r].lanes[l].size()) continue;
          const Op& op = plans[r].lanes[l][at];
          msg += "\n  " + describeOp(r, l, at) + " (" + opKindName(op.kind) + ")";
          if (runners[r]->laneWaitsForLane(l))
            msg += " waits for " + describeOp(r, static_cast<size_t>(op.afterLane), op.afterOps - 1);
          else if (op.receives()) msg += strprintf(" waits to receive from rank %d", op.recvPeer);
          else if (op.sends()) msg += strprintf(" waits to send to rank %d (its connection is full)", op.sendPeer);
        }
      }
      throw InternalError(msg);
    }
  }
  for (size_t c = 0; c < channels; ++c)
    for (size_t a = 0; a < n; ++a)
      for (size_t b = 0; b < n; ++b)
        if (const size_t left = queue(c, a, b)->messages.size())
          throw InternalError(strprintf("interpreter: rank %zu sent %zu message(s) that rank %zu never received%s", a,
                                        left, b, c ? strprintf(" (channel %zu)", c).c_str() : ""));
}

}  // namespace strata
