// The connection table of a communicator: one transport connection per (peer, channel), created the first time a
// plan needs it, by the transport the pair's placement calls for. Built-in plans use channel 0 only; plans loaded
// from files (MSCCL's thread blocks) may run several connections to one peer, one per channel.
//
// A link names one connection: link = channel x nranks + peer, so channel 0's link is the peer itself.
#pragma once

#include <poll.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/plan_runner.h"
#include "transport/transport.h"

namespace strata {

class PeerExchange;
struct Config;

/// Creates the connection to one peer (collective between the pair; see transport.h).
using TransportFactory =
    std::function<std::unique_ptr<Connection>(PeerExchange&, const Config&, int peer, uint32_t tag)>;

/// The transports by name: "shm", "tcp", "ucx".
const std::map<std::string, TransportFactory>& transportFactories();

class ConnectionTable {
 public:
  /// `sameHost[p]`: peer p runs on this rank's host (decides shm against STRATA_NET).
  ConnectionTable(int rank, const Config& config, PeerExchange& exchange, std::vector<bool> sameHost);

  /// Connects every link in `links` (ascending; a peer is its channel 0's link) that has no connection yet, in
  /// ascending order (see the .cc).
  void ensure(const std::vector<int>& links);
  /// The connection to `peer` on `channel`, or nullptr if none was made yet.
  Connection* get(int peer, int channel = 0) const {
    const size_t link = static_cast<size_t>(channel) * sameHost_.size() + static_cast<size_t>(peer);
    return link < conns_.size() ? conns_[link].get() : nullptr;
  }
  /// 1 + the highest channel any connection was made on.
  int channels() const { return std::max<int>(1, static_cast<int>(conns_.size() / sameHost_.size())); }
  /// True when `peer` (no connection yet) has started to set one up with this rank: its half of the set-up waits in
  /// the bootstrap, so ensure({peer}) completes without waiting on anyone else. Never blocks.
  bool connectRequested(int peer) const;
  /// Progresses every connection; true if any moved bytes.
  bool progressAll();
  /// Every connection has handed its committed messages to the transport.
  bool allFlushed() const {
    for (auto& c : conns_)  // inline: every blocking call asks once
      if (c && !c->flushed()) return false;
    return true;
  }
  /// Appends the descriptors to block on for these peers and for every link with unsent bytes; false if some
  /// of those links cannot be polled (shm).
  bool addPollFds(const std::vector<int>& peers, std::vector<pollfd>& fds) const;
  /// Gives committed messages until `deadlineNs` (CLOCK_MONOTONIC) to leave, then closes every connection.
  void closeAll(int64_t deadlineNs);

 private:
  std::string transportFor(int peer) const;

  const int rank_;
  const Config& config_;
  PeerExchange& exchange_;
  std::vector<bool> sameHost_;
  std::vector<std::unique_ptr<Connection>> conns_;  // index: link (channel x nranks + peer)
};

/// Waits until every connection of the table has handed its committed messages to the transport.
class FlushWait : public Waitable {
 public:
  explicit FlushWait(ConnectionTable& conns, int nranks) : conns_(conns), nranks_(nranks) {}
  bool progress() override { return conns_.progressAll(); }
  bool done() const override { return conns_.allFlushed(); }
  std::string describeStall() const override;
  std::vector<int> stalledPeers() const override;

 private:
  ConnectionTable& conns_;
  int nranks_;
};

}  // namespace strata
