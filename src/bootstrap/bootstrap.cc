// Bootstrap views: rank arithmetic over the shared BootstrapNetwork, point-to-point with deadlines, and
// the small collectives (allGather, barrier, split) built on it.
#include "bootstrap/bootstrap.h"

#include <sys/socket.h>

#include <algorithm>
#include <numeric>

#include "bootstrap/network.h"
#include "bootstrap/wire.h"
#include "util/config.h"
#include "util/error.h"
#include "util/log.h"

namespace strata {
namespace {

using bootstrap_io::Deadline;
using bootstrap_wire::WireReader;
using bootstrap_wire::WireWriter;

// User tags are 32-bit; collectives put their sequence number above them, so the two never collide.
constexpr uint64_t kCollTagBase = uint64_t(1) << 32;
// A bootstrap wait longer than this is published to the root (publishWait); a timeout asks the root to explain
// the peer's own wait for at most kExplainWaitMs.
constexpr int64_t kPublishWaitMs = 20;
constexpr int64_t kExplainWaitMs = 1000;

uint64_t hashWords(const std::array<uint8_t, 16>& key, const char* domain, std::initializer_list<uint64_t> words) {
  WireWriter w;
  w.str(domain);
  for (uint64_t v : words) w.u64(v);
  return sipHash24(key, w.data().data(), w.data().size());
}

}  // namespace

std::shared_ptr<Bootstrap> Bootstrap::connect(const Config& config, const UniqueIdInfo& id, int rank, int nranks) {
  if (rootEndedHere(id.nonce)) {
    throw InvalidUsage(strprintf(
        "bootstrap rank %d of %d: this unique id was already used: the communicator made with it has been "
        "destroyed, and its root service (in this process) ended with it. A unique id makes one communicator: "
        "call strataGetUniqueId for a new one (or strataCommSplit an existing communicator)",
        rank, nranks));
  }
  auto net = BootstrapNetwork::connect(config, id, rank, nranks);
  // Same on every rank, different for every unique id (the nonce and secret are per id).
  const uint64_t commId = hashWords(id.secret, "strata-world-comm", {id.nonce});
  std::vector<int> world(static_cast<size_t>(nranks));
  std::iota(world.begin(), world.end(), 0);
  return std::make_shared<Bootstrap>(std::move(net), commId, std::move(world), rank);
}

Bootstrap::Bootstrap(std::shared_ptr<BootstrapNetwork> net, uint64_t commId, std::vector<int> worldRanks, int rank,
                     uint32_t epoch)
    : net_(std::move(net)), commId_(commId), worldRanks_(std::move(worldRanks)), rank_(rank) {
  timeoutMs_.store(net_->config().timeoutMs);
  scope_.commId = commId_;
  scope_.epoch = epoch;
  if (epoch > 0) {
    scope_.worldRanks = worldRanks_;
    std::sort(scope_.worldRanks.begin(), scope_.worldRanks.end());
  }
}

Bootstrap::~Bootstrap() {
  if (handlerId_) net_->removeFailureHandler(handlerId_);
}

void Bootstrap::cancel(const std::string& reason) {
  std::call_once(cancelOnce_, [&] {
    cancelReason_ = reason;
    cancelled_.store(true, std::memory_order_release);
  });
  net_->wakeReceivers();
}

void Bootstrap::throwIfCancelled() const {
  if (cancelled_.load(std::memory_order_acquire)) {
    throw RemoteError(strprintf("rank %d: connection set-up aborted: %s", rank_, cancelReason_.c_str()));
  }
}

const std::array<uint8_t, 16>& Bootstrap::secret() const { return net_->secret(); }

std::string Bootstrap::localAddress() const { return net_->localAddress(); }

std::string Bootstrap::peerAddress(int rank) const {
  checkPeer(rank, "peerAddress");
  return net_->peer(worldRank(rank)).address;
}

std::string Bootstrap::peerDescription(int rank) const {
  checkPeer(rank, "peerDescription");
  const auto& p = net_->peer(worldRank(rank));
  return strprintf("host %s, pid %u", p.host.c_str(), p.pid);
}

void Bootstrap::checkPeer(int peer, const char* op) const {
  if (peer < 0 || peer >= size()) {
    throw InvalidArgument(strprintf("bootstrap %s on rank %d: peer %d out of range [0, %d)", op, rank_, peer, size()));
  }
}

void Bootstrap::send(int peer, uint32_t tag, const void* data, size_t len) { sendTagged(peer, tag, data, len); }

void Bootstrap::publishWait(const std::vector<int>& peers, const std::string& what) {
  std::vector<int> world;
  for (int p : peers)
    if (p >= 0 && p < size()) world.push_back(worldRank(p));
  net_->publishWait(world, what);
}

std::string Bootstrap::explainWait(const std::vector<int>& peers) {
  std::vector<int> world;
  for (int p : peers)
    if (p >= 0 && p < size()) world.push_back(worldRank(p));
  return net_->explainWait(world, kExplainWaitMs);
}

std::vector<uint8_t> Bootstrap::recv(int peer, uint32_t tag) {
  return recvTagged(peer, tag, strprintf("recv(tag %u)", tag).c_str());
}

bool Bootstrap::hasMessage(int peer, uint32_t tag) const {
  if (peer < 0 || peer >= size()) return false;
  return net_->hasMessage(commId_, worldRank(peer), tag);
}

void Bootstrap::sendTagged(int peer, uint64_t tag, const void* data, size_t len) {
  checkPeer(peer, "send");
  if (!data && len) throw InvalidArgument(strprintf("bootstrap send on rank %d: null data of %zu bytes", rank_, len));
  net_->send(commId_, worldRank(peer), tag, data, len);
}

std::vector<uint8_t> Bootstrap::recvTagged(int peer, uint64_t tag, const char* what) {
  checkPeer(peer, "recv");
  std::vector<uint8_t> out;
  const int64_t ms = timeoutMs_.load();
  const Deadline deadline = Deadline::in(ms);
  // A wait that lasts tells the root, so that a peer timing out on this rank can learn that this rank is
  // itself waiting, and on whom.
  BootstrapNetwork::RecvStatus st = net_->recv(
      commId_, worldRank(peer), tag, deadline.earlier(Deadline::in(kPublishWaitMs)), out, &cancelled_, &scope_);
  if (st == BootstrapNetwork::RecvStatus::kTimeout && !deadline.expired()) {
    publishWait({peer}, strprintf("bootstrap %s of rank %d", what, rank_));
    st = net_->recv(commId_, worldRank(peer), tag, deadline, out, &cancelled_, &scope_);
    publishWait({}, "");
  }
  switch (st) {
    case BootstrapNetwork::RecvStatus::kOk: return out;
    case BootstrapNetwork::RecvStatus::kCancelled:
      throw RemoteError(strprintf("bootstrap %s on rank %d (world rank %d) waiting for peer %d aborted: %s", what,
                                  rank_, worldRank(rank_), peer, cancelReason_.c_str()));
    case BootstrapNetwork::RecvStatus::kTimeout: {
      const std::string chain = explainWait({peer});
      throw TimeoutError(strprintf(
          "bootstrap %s on rank %d (world rank %d) timed out after %lld ms waiting for "
          "peer %d (world %s) [comm 0x%016llx]%s%s",
          what, rank_, worldRank(rank_), static_cast<long long>(ms), peer, net_->describe(worldRank(peer)).c_str(),
          static_cast<unsigned long long>(commId_), chain.empty() ? "" : ": ", chain.c_str()));
    }
    case BootstrapNetwork::RecvStatus::kFailed: break;
  }
  throw RemoteError(strprintf("bootstrap %s on rank %d (world rank %d) from peer %d (world rank %d) aborted: %s", what,
                              rank_, worldRank(rank_), peer, worldRank(peer), net_->failure(&scope_).c_str()));
}

std::vector<std::vector<uint8_t>> Bootstrap::allGather(const void* data, size_t len) {
  if (!data && len)
    throw InvalidArgument(strprintf("bootstrap allGather on rank %d: null data of %zu bytes", rank_, len));
  const uint32_t seq = collSeq_++;
  const uint64_t tag = kCollTagBase | seq;
  const int n = size();
  const auto* bytes = static_cast<const uint8_t*>(data);
  std::vector<std::vector<uint8_t>> all(static_cast<size_t>(n));
  all[static_cast<size_t>(rank_)].assign(bytes, bytes + len);
  if (n == 1) return all;
  const std::string what = strprintf("allGather #%u", seq);

  // Gather at rank 0 of the view, which sends the concatenation back: 2(n-1) messages through the
  // root instead of n(n-1) for all-to-all; bootstrap payloads are small, so the extra hop is cheap.
  if (rank_ == 0) {
    for (int p = 1; p < n; ++p) all[static_cast<size_t>(p)] = recvTagged(p, tag, what.c_str());
    WireWriter w;
    w.u32(static_cast<uint32_t>(n));
    for (const auto& v : all) w.u32(static_cast<uint32_t>(v.size())).bytes(v.data(), v.size());
    for (int p = 1; p < n; ++p) sendTagged(p, tag, w.data().data(), w.data().size());
  } else {
    sendTagged(0, tag, data, len);
    const std::vector<uint8_t> packed = recvTagged(0, tag, what.c_str());
    WireReader r(packed);
    if (r.u32() != static_cast<uint32_t>(n)) {
      throw RemoteError(
          strprintf("bootstrap %s on rank %d: rank 0 returned a table of the wrong size", what.c_str(), rank_));
    }
    for (int p = 0; p < n; ++p) {
      const uint32_t l = r.u32();
      std::vector<uint8_t> v(l);
      r.bytes(v.data(), l);
      if (p != rank_) all[static_cast<size_t>(p)] = std::move(v);
    }
  }
  return all;
}

void Bootstrap::barrier() { (void)allGather(nullptr, 0); }

std::shared_ptr<Bootstrap> Bootstrap::split(int color, int key) {
  const uint32_t seq = collSeq_;  // the allGather below takes this number: the same on every rank
  WireWriter w;
  w.u32(static_cast<uint32_t>(color)).u32(static_cast<uint32_t>(key));
  const auto all = allGather(w.data().data(), w.data().size());
  if (color < 0) return nullptr;

  struct Member {
    int key, oldRank;
  };
  std::vector<Member> members;
  for (int r = 0; r < size(); ++r) {
    WireReader rd(all[static_cast<size_t>(r)]);
    const int c = static_cast<int>(rd.u32());
    const int k = static_cast<int>(rd.u32());
    if (c == color) members.push_back({k, r});
  }
  std::sort(members.begin(), members.end(),
            [](const Member& a, const Member& b) { return a.key != b.key ? a.key < b.key : a.oldRank < b.oldRank; });
  std::vector<int> world;
  int newRank = -1;
  for (const auto& m : members) {
    if (m.oldRank == rank_) newRank = static_cast<int>(world.size());
    world.push_back(worldRank(m.oldRank));
  }
  const uint64_t id = hashWords(net_->secret(), "strata-split-comm",
                                {commId_, seq, static_cast<uint64_t>(static_cast<uint32_t>(color))});
  STRATA_INFO(kLogBootstrap, "bootstrap split #%u on rank %d: color %d key %d -> rank %d of %zu", seq, rank_, color,
              key, newRank, world.size());
  auto view = std::make_shared<Bootstrap>(net_, id, std::move(world), newRank, scope_.epoch);
  view->setTimeoutMs(timeoutMs_.load());
  return view;
}

std::shared_ptr<Bootstrap> Bootstrap::shrink(const std::vector<int>& excludedIn) {
  std::vector<int> excluded = excludedIn;
  std::sort(excluded.begin(), excluded.end());
  excluded.erase(std::unique(excluded.begin(), excluded.end()), excluded.end());
  for (int r : excluded) {
    if (r < 0 || r >= size())
      throw InvalidArgument(strprintf("shrink on rank %d: excluded rank %d is out of range [0, %d)", rank_, r, size()));
  }
  if (std::binary_search(excluded.begin(), excluded.end(), rank_))
    throw InvalidArgument(
        strprintf("shrink on rank %d: this rank is in its own exclude list (an excluded rank does "
                  "not call shrink)",
                  rank_));
  std::vector<int> world;
  int newRank = -1;
  for (int r = 0; r < size(); ++r) {
    if (std::binary_search(excluded.begin(), excluded.end(), r)) continue;
    if (r == rank_) newRank = static_cast<int>(world.size());
    world.push_back(worldRank(r));
  }
  // The new view's id must be the same on its members, which may have made different shrinks of this view
  // before (a rank left out of one, alive, takes part in the next): it counts the shrinks with this same list,
  // which every member of the new view has all made.
  WireWriter listBytes;
  listBytes.u32(static_cast<uint32_t>(excluded.size()));
  for (int r : excluded) listBytes.u32(static_cast<uint32_t>(r));
  const uint64_t listHash = sipHash24(net_->secret(), listBytes.data().data(), listBytes.data().size());
  const uint32_t seq = shrinksWith_[listHash]++;
  const uint64_t id =
      hashWords(net_->secret(), "strata-shrink-comm", {commId_, listHash, seq, scope_.epoch + uint64_t{1}});
  auto view = std::make_shared<Bootstrap>(net_, id, world, newRank, scope_.epoch + 1);
  view->setTimeoutMs(timeoutMs_.load());
  STRATA_INFO(kLogBootstrap,
              "bootstrap shrink on rank %d: %zu excluded (shrink #%u with this list) -> rank %d of %d, "
              "epoch %u",
              rank_, excluded.size(), seq, newRank, view->size(), view->epoch());

  // Every remaining rank must have excluded the same ranks: one that kept a rank the others dropped would wait on
  // it, one that dropped a rank the others kept would be waited on. Rank 0 of the new view compares every list
  // with its own and answers each member, through an exchange whose id does not depend on the list (so that
  // ranks with different lists meet): messages between two ranks there are taken in the order they were sent, one
  // per shrink each way. Members that disagree about rank 0 itself do not meet: they hear of the failure rank 0
  // reports (it is of the new epoch), or time out naming whom they waited on.
  auto listText = [](const std::vector<int>& ranks) {
    std::string t;
    for (int r : ranks) t += (t.empty() ? "" : ",") + std::to_string(r);
    return "{" + t + "}";
  };
  Bootstrap agree(net_, hashWords(net_->secret(), "strata-shrink-agreement", {commId_}), world, newRank,
                  scope_.epoch + 1);
  const uint64_t tag = kCollTagBase;
  const char* what = "shrink agreement";
  WireWriter mine;
  mine.u32(seq).bytes(listBytes.data().data(), listBytes.data().size());
  if (agree.rank_ != 0) {
    agree.sendTagged(0, tag, mine.data().data(), mine.data().size());
    const std::vector<uint8_t> answer = agree.recvTagged(0, tag, what);
    WireReader rd(answer);
    if (rd.u32() == 1) return view;
    throw InvalidUsage(rd.str());
  }
  std::string mismatch;
  for (int p = 1; p < agree.size(); ++p) {
    const std::vector<uint8_t> got = agree.recvTagged(p, tag, what);
    WireReader rd(got);
    const uint32_t theirSeq = rd.u32();
    std::vector<int> theirs(std::min<uint32_t>(rd.u32(), static_cast<uint32_t>(got.size() / 4)));
    for (int& r : theirs) r = static_cast<int>(rd.u32());
    if ((theirs == excluded && theirSeq == seq) || !mismatch.empty()) continue;
    int theirRank = -1;  // in this view
    for (int r = 0; r < size(); ++r)
      if (worldRank(r) == agree.worldRank(p)) theirRank = r;
    mismatch = theirs != excluded
                   ? strprintf(
                         "shrink: rank %d of the communicator being shrunk excluded ranks %s, rank %d excluded "
                         "%s: every remaining rank must pass the same exclude list",
                         rank_, listText(excluded).c_str(), theirRank, listText(theirs).c_str())
                   : strprintf(
                         "shrink: rank %d of the communicator being shrunk makes its shrink #%u excluding %s, "
                         "rank %d its shrink #%u with that list: every remaining rank must make every shrink",
                         rank_, seq + 1, listText(excluded).c_str(), theirRank, theirSeq + 1);
  }
  WireWriter answer;
  answer.u32(mismatch.empty() ? 1 : 0).str(mismatch);
  for (int p = 1; p < agree.size(); ++p) agree.sendTagged(p, tag, answer.data().data(), answer.data().size());
  if (!mismatch.empty()) {
    view->reportFailure(mismatch);
    throw InvalidUsage(mismatch);
  }
  return view;
}

void Bootstrap::setFailureHandler(std::function<void(const std::string&)> handler) {
  if (handlerId_) net_->removeFailureHandler(handlerId_);
  handlerId_ = handler ? net_->addFailureHandler(std::move(handler), scope_) : 0;
}

void Bootstrap::reportFailure(const std::string& reason) { net_->reportFailure(reason, scope_.epoch); }

void Bootstrap::reportRevoke(const std::string& reason) { net_->reportFailure(reason, scope_.epoch, commId_); }

std::string Bootstrap::failure() const { return net_->failure(&scope_); }

std::shared_ptr<Bootstrap> connectFromEnv(const Config& config, const EnvLaunch& env) {
  if (env.size < 1 || env.rank < 0 || env.rank >= env.size) {
    throw InvalidArgument(
        strprintf("connectFromEnv: rank %d of %d (from %s) is out of range", env.rank, env.size, env.source.c_str()));
  }
  if (env.source == "single process") {
    STRATA_INFO(kLogInit, "no launcher environment (RANK/WORLD_SIZE, OMPI_COMM_WORLD_*, SLURM_PROCID): a world of one");
    const UniqueIdInfo id = startRootService(config, "127.0.0.1", 0, randomSecret(), 1);
    return Bootstrap::connect(config, id, 0, 1);
  }
  const UniqueIdInfo id = uniqueIdForEnv(env);
  if (env.rank == 0) {
    if (env.secretDerived) {
      // Printed whatever STRATA_DEBUG says: it is about who can join the job.
      logWrite(LogLevel::kWarn, kLogBootstrap, __FILE__, __LINE__,
               "STRATA_SECRET is not set: the job's secret is derived from the %s job's identity (job id, root "
               "address and port, world size), which anyone who knows them can compute, and the bootstrap root "
               "listens on every interface, port %u. Set STRATA_SECRET to the same 32 random hex digits on every "
               "rank (strata-run does this for you); see the README's security model",
               env.source.c_str(), static_cast<unsigned>(id.port));
    }
    // Every interface: MASTER_ADDR may name this host by an address other than the one routes pick.
    startRootService(config, id.family == AF_INET6 ? "::" : "0.0.0.0", id.port, id.secret, env.size);
  }
  return Bootstrap::connect(config, id, env.rank, env.size);
}

}  // namespace strata
