// The slice of the bootstrap that transports need to set up a connection: small ordered messages to a
// peer, the job secret and the address to advertise. Tests can implement it in-process.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

class PeerExchange {
 public:
  virtual ~PeerExchange() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Sends a small message to `peer`; never blocks on the peer.
  virtual void send(int peer, uint32_t tag, const void* data, size_t len) = 0;
  /// The next message from `peer` with `tag`; throws TimeoutError/RemoteError instead of hanging.
  virtual std::vector<uint8_t> recv(int peer, uint32_t tag) = 0;
  /// True when a message from `peer` with `tag` has arrived and recv() would return it at once; consumes nothing.
  /// A receive from any source asks it whether a peer is setting up a connection to this rank. Exchanges that serve
  /// only transport tests (no communicator, so no such receive) keep the default, false.
  virtual bool hasMessage(int /*peer*/, uint32_t /*tag*/) const { return false; }
  /// Key for authenticating transport connections (the unique id's secret).
  virtual const std::array<uint8_t, 16>& secret() const = 0;
  /// Numeric address this rank's transport listeners should advertise.
  virtual std::string localAddress() const = 0;
  /// Identifier shared by the ranks of one communicator (distinct per split).
  virtual uint64_t commId() const = 0;
  /// Throws RemoteError once the communicator was aborted (Bootstrap::cancel). A transport calls it in every
  /// wait of its own during set-up (a listener waiting for its peer to connect), so an abort ends them promptly;
  /// waits in recv() end by themselves.
  virtual void throwIfCancelled() const {}
};

}  // namespace strata
