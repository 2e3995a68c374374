// What the root service does with each message, and the job's control plane once every rank is in: relaying
// messages between ranks, broadcasting failures, goodbyes, and noticing ranks that disconnect or die. See
// root_service.h.
#include <chrono>
#include <string>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "bootstrap/root_service.h"
#include "util/error.h"
#include "util/log.h"

namespace strata {
namespace bootstrap_root {

using namespace bootstrap_io;
using namespace bootstrap_wire;

namespace {
// A list of ranks in a wait message: a count, then that many u32s (the reader throws past the frame's end).
std::vector<int> readRanks(WireReader& r) {
  const uint32_t n = r.u32();
  if (n > 4096) throw RemoteError(strprintf("a wait message lists %u ranks", n));
  std::vector<int> ranks(n);
  for (auto& v : ranks) v = static_cast<int>(r.u32());
  return ranks;
}
}  // namespace

void RootService::handleFrame(Conn& c, MsgType type, const uint8_t* p, size_t len) {
  switch (c.state) {
    case State::kAuthenticating:
      if (type != MsgType::kHello) {
        refuse(c, strprintf("sent message type %u before authenticating", static_cast<uint32_t>(type)));
        return;
      }
      handleHello(c, p, len);
      return;
    case State::kWaiting:
      protocolError(c, strprintf("sent message type %u before the rendezvous completed", static_cast<uint32_t>(type)));
      return;
    case State::kActive: break;
    case State::kClosing: return;
  }
  switch (type) {
    case MsgType::kRelay: relay(c, p, len); return;
    case MsgType::kReportFailure: {
      WireReader r(p, len);
      std::string reason = r.str();
      const uint32_t epoch = r.remaining() >= 4 ? r.u32() : 0;
      const uint64_t commId = r.remaining() >= 8 ? r.u64() : 0;
      broadcastFailure(strprintf("%s reported a failure: %s", c.who().c_str(), reason.c_str()), c.rank, epoch, -1,
                       commId);
      return;
    }
    case MsgType::kWaitState: {
      WireReader r(p, len);
      c.waitWhat = r.str();
      c.waitingOn = readRanks(r);
      c.waitSince = Clock::now();
      return;
    }
    case MsgType::kWaitQuery: {
      WireReader r(p, len);
      const uint64_t query = r.u64();
      WireWriter w;
      w.u64(query).str(explainWaits(readRanks(r)));
      queue(c, MsgType::kWaitAnswer, w.data());
      return;
    }
    case MsgType::kGoodbye:
      STRATA_INFO(kLogBootstrap, "bootstrap root %s: %s said goodbye", name_.c_str(), c.who().c_str());
      c.goodbye = true;
      // The last goodbye ends the id, before the closing below releases that rank: a new init with this id
      // in this process must already find it used (rootEndedHere).
      if (complete_ && !anyRemoteActive()) noteEnded();
      // Before closing: the closing releases the leaving rank, whose process may then exit at once (a
      // forked worker ends with _exit(), skipping the grace period the registry gives at exit()).
      if (isLocal(c) && !anyLocalActive()) announceRootLeaving(c);
      closeNow(c);
      return;
    default: protocolError(c, strprintf("sent unexpected message type %u", static_cast<uint32_t>(type)));
  }
}

std::string RootService::explainWaits(const std::vector<int>& peers) const {
  // Breadth first from the asked ranks: each waiting rank leads to the ranks it waits on; the chain ends at
  // ranks that are not waiting (stopped, or busy outside Strata) or that are gone. A bounded account.
  constexpr size_t kMaxItems = 8;
  std::vector<int> frontier = peers;
  std::vector<bool> seen(rankConn_.size(), false);
  std::vector<std::string> items;
  bool cycle = false;
  const auto now = Clock::now();
  while (!frontier.empty() && items.size() < kMaxItems) {
    std::vector<int> next;
    for (int r : frontier) {
      if (r < 0 || static_cast<size_t>(r) >= rankConn_.size() || items.size() >= kMaxItems) continue;
      if (seen[static_cast<size_t>(r)]) {
        const Conn* c = rankConn_[static_cast<size_t>(r)];
        if (c && !c->waitingOn.empty()) cycle = true;
        continue;
      }
      seen[static_cast<size_t>(r)] = true;
      const Conn* c = rankConn_[static_cast<size_t>(r)];
      if (!c || c->dead) {
        items.push_back(strprintf("rank %d has disconnected from the bootstrap root", r));
      } else if (c->goodbye) {
        items.push_back(c->who() + " has destroyed its communicators");
      } else if (!c->waitingOn.empty()) {
        std::string on;
        for (int q : c->waitingOn) {
          on += (on.empty() ? "" : ", ") + std::to_string(q);
          next.push_back(q);
        }
        const long long ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - c->waitSince).count();
        items.push_back(strprintf("%s is itself waiting (for %lld ms, in %s) on rank%s %s", c->who().c_str(), ms,
                                  c->waitWhat.c_str(), c->waitingOn.size() > 1 ? "s" : "", on.c_str()));
      } else {
        items.push_back(c->who() +
                        " is not waiting in Strata: it is stopped, or busy outside Strata (it has not reached "
                        "this call)");
      }
    }
    frontier = std::move(next);
  }
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : "; ") + item;
  if (cycle) out += "; the waits form a cycle (ranks calling collectives or sends in different orders?)";
  return out;
}

void RootService::relay(Conn& c, const uint8_t* p, size_t len) {
  WireReader r(p, len);
  r.u64();  // commId: opaque to the root
  r.u32();  // from: replaced below by the authenticated rank of the sender
  const uint32_t to = r.u32();
  std::vector<uint8_t> payload(p, p + len);
  const uint32_t from = static_cast<uint32_t>(c.rank);
  for (int i = 0; i < 4; ++i) payload[8 + static_cast<size_t>(i)] = static_cast<uint8_t>(from >> (8 * i));
  Conn* dst = to < rankConn_.size() ? rankConn_[to] : nullptr;
  if (!dst || dst->dead || dst->state != State::kActive || dst->goodbye) {
    // The destination left; if it died, the sender hears about it through a FAILURE.
    STRATA_TRACE(kLogBootstrap, "bootstrap root %s: dropping a message from rank %u to rank %u (gone)", name_.c_str(),
                 from, to);
    return;
  }
  queue(*dst, MsgType::kRelay, payload);
}

bool RootService::anyLocalActive() const {
  for (const Conn* c : rankConn_) {
    if (c && !c->dead && c->state == State::kActive && !c->goodbye && isLocal(*c)) return true;
  }
  return false;
}

void RootService::announceRootLeaving(const Conn& last) {
  if (!complete_) return;
  WireWriter w;
  w.str(
      strprintf("the bootstrap root ran in the process of %s, which destroyed its communicators", last.who().c_str()));
  for (Conn* c : rankConn_) {
    if (!c || c->dead || c->state != State::kActive || c->goodbye || isLocal(*c)) continue;
    queue(*c, MsgType::kRootLeaving, w.data());
  }
}

void RootService::broadcastFailure(const std::string& msg, int exceptRank, uint32_t epoch, int deadRank,
                                   uint64_t commId) {
  STRATA_WARN(kLogBootstrap, "bootstrap root %s: %s", name_.c_str(), msg.c_str());
  WireWriter w;
  w.str(msg).u32(epoch).u32(static_cast<uint32_t>(deadRank + 1)).u64(commId);
  for (Conn* c : rankConn_) {
    if (!c || c->dead || c->state != State::kActive || c->goodbye || c->rank == exceptRank) continue;
    queue(*c, MsgType::kFailure, w.data());
  }
}

void RootService::disconnected(Conn& c, const std::string& why) {
  switch (c.state) {
    case State::kAuthenticating:
    case State::kClosing: closeNow(c); return;
    case State::kWaiting: {
      std::string who = c.who();
      closeNow(c);
      fail(strprintf("%s disconnected (%s) before all %d ranks arrived", who.c_str(), why.c_str(), expected_));
      return;
    }
    case State::kActive: {
      std::string who = c.who();
      int rank = c.rank;
      bool orderly = c.goodbye;
      closeNow(c);
      if (!orderly) {
        broadcastFailure(strprintf("%s died or disconnected from the bootstrap root without saying goodbye (%s)",
                                   who.c_str(), why.c_str()),
                         rank, 0, rank, 0);
      }
      return;
    }
  }
}

void RootService::protocolError(Conn& c, const std::string& what) {
  if (c.state == State::kAuthenticating) {
    refuse(c, what);
    return;
  }
  STRATA_WARN(kLogBootstrap, "bootstrap root %s: protocol error from %s: %s", name_.c_str(), c.who().c_str(),
              what.c_str());
  disconnected(c, "protocol error: " + what);
}

}  // namespace bootstrap_root
}  // namespace strata
