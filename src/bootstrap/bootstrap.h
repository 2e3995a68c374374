// Bootstrap: rendezvous of the ranks of a communicator and the control plane that stays up afterwards.
//
// A root service (a thread in the process that made the unique id, or in rank 0 when starting from the
// environment) accepts one TCP connection per rank. A connection must answer a challenge with a MAC keyed
// by the unique id's secret, or it is refused. The root then relays small messages between ranks (used
// to set up transports), and watches its connections: when a rank's process dies (its socket closes
// without a goodbye) or a rank reports a fatal error, the root tells every other rank, so survivors
// fail fast with a message naming the culprit instead of waiting for a deadline.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bootstrap/failure_scope.h"
#include "bootstrap/peer_exchange.h"
#include "bootstrap/siphash.h"
#include "bootstrap/unique_id.h"
#include "strata/strata.h"

namespace strata {

struct Config;
class BootstrapNetwork;

/// Starts a root service listening on `bindAddr:port` (port 0 = ephemeral; bindAddr empty = the address
/// ranks should use, picked from STRATA_SOCKET_IFNAME or the default route) and returns its id.
/// The service lives in a background thread of this process until every rank has said goodbye.
/// bindAddr may also be a wildcard ("0.0.0.0", "::"): the service then listens on every interface and the
/// returned id carries the advertised address picked as for an empty bindAddr. nranksHint <= 0 means
/// unknown (the first rank to arrive decides). The id's nonce is random. Throws SysError if the port
/// cannot be bound (EADDRINUSE names the address and port).
UniqueIdInfo startRootService(const Config& config, const std::string& bindAddr, uint16_t port,
                              const std::array<uint8_t, 16>& secret, int nranksHint);

/// True if a root service of this process served the unique id with this nonce, has ended (every rank of its
/// communicator left), and none serves it now: connecting with that id again cannot succeed. Only ids of
/// ephemeral-port roots (strataGetUniqueId) are tracked.
bool rootEndedHere(uint64_t nonce);

/// What strataCommInitFromEnv found in the environment.
struct EnvLaunch {
  int rank = -1, size = -1, localRank = -1, localSize = -1;
  std::string rootAddr;  // where the root listens
  uint16_t rootPort = 0;
  std::array<uint8_t, 16> secret{};
  std::string source;          // "torchrun", "openmpi", "slurm", "strata-run", "single process"
  bool secretDerived = false;  // no STRATA_SECRET: the secret is a function of the job's identity
};
/// Reads torchrun/strata-run (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
/// Open MPI (OMPI_COMM_WORLD_*) or Slurm (SLURM_PROCID, SLURM_NTASKS, ...). The secret is STRATA_SECRET
/// (32 hex digits) if set, else derived from the job's identity. With none of these variables set, one
/// process is a world of one ("single process": rank 0 of 1, its root on loopback with a random secret).
/// Throws InvalidArgument naming what is missing or malformed.
/// Under torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE=True) the agent already listens on
/// MASTER_PORT, so the root uses MASTER_PORT + 1. With Open MPI or Slurm and no MASTER_PORT, the port is
/// derived from the job id into [20000, 59999]. A derived secret only keeps jobs apart; it is not secret
/// from someone who knows the job id: set STRATA_SECRET (strata-run does) where that matters.
EnvLaunch discoverEnvLaunch();

/// The secret of a job launched without a unique id: STRATA_SECRET (32 hex digits) if set, else derived from
/// `identity`, a string every rank of the job computes the same (a derived secret only keeps jobs apart).
std::array<uint8_t, 16> jobSecret(const std::string& identity);

/// The unique id every rank of an environment launch computes identically from `env`: the root
/// address resolved with getaddrinfo (IPv4 preferred), env.rootPort, env.secret, and a nonce derived
/// from the secret. Rank 0 must run the root service for it before connecting:
///   startRootService(config, family == AF_INET6 ? "::" : "0.0.0.0", id.port, id.secret, env.size)
/// which is what connectFromEnv (below) does. Throws InvalidArgument if rootAddr does not resolve.
UniqueIdInfo uniqueIdForEnv(const EnvLaunch& env);

/// First host name of a Slurm node list: "node[01-04,07],gpu3" -> "node01", "a[1-2]-b[3-4]" -> "a1-b3".
/// Throws InvalidArgument on an empty or malformed list.
std::string firstHostOfNodelist(const std::string& nodelist);
/// Task count of node `nodeIndex` in a SLURM_TASKS_PER_NODE value like "2(x3),1". Throws InvalidArgument.
int tasksOnNode(const std::string& tasksPerNode, int nodeIndex);

/// One communicator's view of the control plane: rank arithmetic plus point-to-point and collective
/// exchanges of small messages, all with deadlines from Config::timeoutMs.
/// send/recv are thread-safe. allGather/barrier/split must be called in the same order on every rank of
/// the view, one at a time per view (their tags come from a per-view sequence number).
class Bootstrap : public PeerExchange {
 public:
  /// Connects to the root named by `id` as `rank` of `nranks` and waits for all ranks (collective).
  static std::shared_ptr<Bootstrap> connect(const Config& config, const UniqueIdInfo& id, int rank, int nranks);
  ~Bootstrap() override;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(worldRanks_.size()); }
  /// Identifier shared by all ranks of this communicator (distinct for every split).
  uint64_t commId() const override { return commId_; }
  /// The secret of the unique id; transports use it to authenticate their own connections.
  const std::array<uint8_t, 16>& secret() const override;
  /// The address (numeric string) this rank advertises for transport listeners.
  std::string localAddress() const override;

  /// Sends a small message to `peer` (a rank of this communicator). Never blocks on the peer.
  void send(int peer, uint32_t tag, const void* data, size_t len) override;
  /// Receives the next message from `peer` with `tag`; waits up to the deadline; throws RemoteError if
  /// the control plane reports a failure and TimeoutError on deadline.
  std::vector<uint8_t> recv(int peer, uint32_t tag) override;
  /// True when recv(peer, tag) would return at once (a message is waiting); never blocks, consumes nothing.
  bool hasMessage(int peer, uint32_t tag) const override;
  /// Every rank's `data` (may differ in length), in rank order.
  std::vector<std::vector<uint8_t>> allGather(const void* data, size_t len);
  void barrier();

  /// A new view over the ranks with the same color, ordered by (key, rank). Collective over this view.
  /// Returns nullptr for color < 0.
  std::shared_ptr<Bootstrap> split(int color, int key);
  /// A new view over every rank of this one but `excluded` (ranks of this view), in the same order, one shrink
  /// epoch later (FailureScope: the failures of this view's epoch do not end it). Collective over the ranks
  /// that remain, which must pass the same list (checked: a rank that passed another list fails, and so do the
  /// others of the new view); this view's own exchanges are not used, so it works after this view failed.
  /// Throws InvalidArgument for a bad list (out of range, this rank in it).
  std::shared_ptr<Bootstrap> shrink(const std::vector<int>& excluded);
  /// The deadline of this view's waits, in ms: the network's Config::timeoutMs, or the parent view's for a split or
  /// shrink, until the communicator made on the view sets its own (strataConfig_t.timeoutMs).
  void setTimeoutMs(int64_t ms) { timeoutMs_.store(ms); }
  /// The shrink epoch of this view (0 for the world and its splits).
  uint32_t epoch() const { return scope_.epoch; }

  /// Registers a callback run (from the bootstrap thread) when any rank of the job fails or reports an
  /// abort (as far as this view's FailureScope covers it); the argument says which rank and why. Replaces the
  /// previous one for this view; nullptr removes it. Runs once, for the first failure only; if that failure is
  /// already recorded, it runs at
  /// once on the calling thread (so do not call this while holding a lock the handler takes). It must
  /// not destroy the last Bootstrap of the process, nor wait on a recv(): the bootstrap thread is the
  /// one that would wake it.
  void setFailureHandler(std::function<void(const std::string&)> handler);
  /// Tells every rank of the job about a fatal error on this rank (best effort). Also records it here,
  /// so this rank's pending and later waits fail too; this rank's own handlers are not run.
  void reportFailure(const std::string& reason);
  /// Tells the other ranks of this view that this communicator is revoked (strataCommRevoke): their waits in
  /// it end with `reason`; nothing else of the job is affected. Also records it here.
  void reportRevoke(const std::string& reason);
  /// Non-empty once a failure this view hears of (FailureScope) has been reported anywhere in the job.
  std::string failure() const;
  /// Ends every wait of this view, now and later, with RemoteError naming `reason` (strataCommAbort: a call
  /// blocked in a split or a connection set-up must return). Other views of the job are not affected.
  void cancel(const std::string& reason);
  void throwIfCancelled() const override;

  /// The address (numeric string) rank `rank` of this view advertises (its localAddress()).
  std::string peerAddress(int rank) const;
  /// "host H, pid P" of rank `rank` of this view, for error messages.
  std::string peerDescription(int rank) const;

  /// Tells the root that this rank has been waiting a while on `peers` (ranks of this view) in `what`; empty
  /// peers: not waiting any more. The root follows these to name who is at the end of a chain of waits.
  void publishWait(const std::vector<int>& peers, const std::string& what);
  /// The root's account of what `peers` are themselves waiting on, down to the ranks that are not waiting
  /// ("" if it does not know or does not answer in time). For timeout messages.
  std::string explainWait(const std::vector<int>& peers);

  /// Rank of this communicator -> rank in the job's bootstrap network.
  int worldRank(int rank) const { return worldRanks_[static_cast<size_t>(rank)]; }

  Bootstrap(std::shared_ptr<BootstrapNetwork> net, uint64_t commId, std::vector<int> worldRanks, int rank,
            uint32_t epoch = 0);

 private:
  std::shared_ptr<BootstrapNetwork> net_;
  uint64_t commId_;
  std::vector<int> worldRanks_;  // index: rank in this view; value: rank in the network
  int rank_;
  std::atomic<int64_t> timeoutMs_{0};         // setTimeoutMs
  uint32_t collSeq_ = 0;                      // sequence of allGather/barrier/split calls, part of their tags
  std::map<uint64_t, uint32_t> shrinksWith_;  // shrinks of this view so far by exclude list (its hash)
  FailureScope scope_;                        // which of the job's failures end this view's waits
  uint64_t handlerId_ = 0;
  std::once_flag cancelOnce_;
  std::string cancelReason_;  // written once, before cancelled_ is set
  std::atomic<bool> cancelled_{false};

  // Point-to-point on an explicit 64-bit tag: user tags are < 2^32, collectives use kCollTagBase | seq,
  // so no user tag can ever match a collective's message.
  void sendTagged(int peer, uint64_t tag, const void* data, size_t len);
  std::vector<uint8_t> recvTagged(int peer, uint64_t tag, const char* what);
  void checkPeer(int peer, const char* op) const;
};

/// Environment launch in one call: rank 0 starts the root service (binding every interface on the
/// port uniqueIdForEnv gives), then every rank connects. Collective over all env.size ranks.
std::shared_ptr<Bootstrap> connectFromEnv(const Config& config, const EnvLaunch& env);

}  // namespace strata
