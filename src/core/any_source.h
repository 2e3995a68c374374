// Receives from any source (strataRecvAny, torch's recv without src): the probe that finds which peer's send to
// this rank has arrived first, before the receive runs as an ordinary receive from that peer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/connections.h"
#include "core/plan_runner.h"
#include "transport/transport.h"

namespace strata {

/// Waits until the head message of some peer's connection is that peer's next send to this rank: the send whose
/// stamp (call.h, p2pStamp) has the number `nextRecvSeq(peer)` this rank's next receive from it expects. A message
/// of a collective at the head (the peer is ahead of this rank) is not a candidate, and nothing is consumed. Peers
/// without a connection are candidates once they ask for one (ConnectionTable::connectRequested: their first send
/// to this rank sets it up), so the probe never waits on a peer that does not send. Peers are scanned from the one
/// after the last match, so no sender starves another.
class AnySourceProbe : public Waitable {
 public:
  /// `recvsFrom[p]`: receives from p this rank has completed so far (the next one expects number + 1).
  AnySourceProbe(int rank, int nranks, ConnectionTable& conns, const std::vector<uint32_t>& recvsFrom, int startPeer);

  bool progress() override;
  bool done() const override { return source_ >= 0; }
  std::string describeStall() const override;
  std::vector<int> stalledPeers() const override;

  /// The peer whose send arrived first (once done()), and the stamp of its message.
  int source() const { return source_; }
  const MsgStamp& stamp() const { return stamp_; }

 private:
  const int rank_, nranks_;
  ConnectionTable& conns_;
  const std::vector<uint32_t>& recvsFrom_;
  const int start_;
  std::vector<uint8_t> closed_;  // peers that closed their side in order: nothing more can come from them
  int source_ = -1;
  MsgStamp stamp_{};
};

}  // namespace strata
