#include "core/any_source.h"

#include "core/call.h"
#include "util/error.h"

namespace strata {

AnySourceProbe::AnySourceProbe(int rank, int nranks, ConnectionTable& conns, const std::vector<uint32_t>& recvsFrom,
                               int startPeer)
    : rank_(rank),
      nranks_(nranks),
      conns_(conns),
      recvsFrom_(recvsFrom),
      start_(startPeer),
      closed_(static_cast<size_t>(nranks), 0) {}

bool AnySourceProbe::progress() {
  bool moved = false;
  int open = 0;
  for (int i = 0; i < nranks_; ++i) {
    const int p = (start_ + i) % nranks_;
    if (p == rank_ || closed_[static_cast<size_t>(p)]) continue;
    ++open;
    Connection* c = conns_.get(p);
    if (!c) {
      // Its first send to this rank sets up the connection: join the set-up the peer is already in (it waits for
      // this rank's half), so this never blocks on a peer that is not connecting.
      if (!conns_.connectRequested(p)) continue;
      conns_.ensure({p});
      c = conns_.get(p);
      moved = true;
    }
    MsgStamp s;
    switch (c->peekStamp(&s)) {
      case Connection::Head::kEmpty: break;
      case Connection::Head::kClosed:
        closed_[static_cast<size_t>(p)] = 1;
        --open;
        moved = true;
        break;
      case Connection::Head::kArrived:
        // The peer's next send to this rank, whatever its size (the receive then checks the size); anything else
        // (a collective's message, the peer is ahead) stays where it is.
        if (s.hi == p2pStamp(recvsFrom_[static_cast<size_t>(p)] + 1, 0).hi) {
          source_ = p;
          stamp_ = s;
          return true;
        }
        break;
    }
  }
  if (open == 0)
    throw RemoteError(
        strprintf("rank %d: receive from any source: every other rank of the %d-rank communicator has "
                  "closed its connection to this rank, so no send can arrive any more",
                  rank_, nranks_));
  return moved;
}

std::string AnySourceProbe::describeStall() const {
  std::string who;
  for (int p = 0; p < nranks_; ++p)
    if (p != rank_ && !closed_[static_cast<size_t>(p)]) who += strprintf("%s%d", who.empty() ? "" : ", ", p);
  return strprintf("a send to rank %d from any of ranks %s (receive from any source)", rank_, who.c_str());
}

std::vector<int> AnySourceProbe::stalledPeers() const {
  // The peers a stalled probe can block on and check: those with an open connection (the others have not sent).
  std::vector<int> peers;
  for (int p = 0; p < nranks_; ++p)
    if (p != rank_ && !closed_[static_cast<size_t>(p)] && conns_.get(p)) peers.push_back(p);
  return peers;
}

}  // namespace strata
