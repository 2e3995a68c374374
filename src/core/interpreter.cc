#include "core/interpreter.h"

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
                    strataDataType_t dtype, ReduceKind op, const InterpreterOptions& options) {
  const size_t n = plans.size();
  if (buffers.size() != n) throw InternalError("interpretPlans: one buffer list per rank expected");
  // queues[a * n + b] carries messages from a to b.
  std::vector<MemoryQueue> queues(n * n);
  for (auto& q : queues) q.slots = static_cast<size_t>(options.nslots);
  std::vector<std::vector<std::unique_ptr<MemoryConnection>>> conns(n);
  std::vector<std::unique_ptr<PlanRunner>> runners;
  for (size_t r = 0; r < n; ++r) {
    conns[r].resize(n);
    runners.push_back(std::make_unique<PlanRunner>(
        plans[r], buffers[r], dtype, op, options.pieceBytes, [&, r](int peer) -> Connection* {
          if (peer < 0 || static_cast<size_t>(peer) >= n || static_cast<size_t>(peer) == r)
            throw InternalError(strprintf("rank %zu's plan names invalid peer %d", r, peer));
          auto& c = conns[r][static_cast<size_t>(peer)];
          if (!c)
            c = std::make_unique<MemoryConnection>(static_cast<int>(r), peer,
                                                   &queues[r * n + static_cast<size_t>(peer)],
                                                   &queues[static_cast<size_t>(peer) * n + r]);
          return c.get();
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
      for (size_t r = 0; r < n; ++r)
        if (!runners[r]->done()) msg += strprintf("\n  rank %zu: %s", r, runners[r]->describeStall().c_str());
      throw InternalError(msg);
    }
  }
  for (size_t a = 0; a < n; ++a)
    for (size_t b = 0; b < n; ++b)
      if (!queues[a * n + b].messages.empty())
        throw InternalError(strprintf("interpreter: rank %zu sent %zu message(s) that rank %zu never received", a,
                                      queues[a * n + b].messages.size(), b));
}

}  // namespace strata
