// What the root service does with each message, and the job's control plane once every rank is in: relaying
// messages between ranks, broadcasting failures, goodbyes, and noticing ranks that disconnect or die. See
// root_service.h.
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
      broadcastFailure(strprintf("%s reported a failure: %s", c.who().c_str(), reason.c_str()), c.rank);
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

void RootService::broadcastFailure(const std::string& msg, int exceptRank) {
  STRATA_WARN(kLogBootstrap, "bootstrap root %s: %s", name_.c_str(), msg.c_str());
  WireWriter w;
  w.str(msg);
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
                         rank);
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
