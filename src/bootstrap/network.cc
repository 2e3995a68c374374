#include "bootstrap/network.h"

#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "bootstrap/siphash.h"
#include "bootstrap/wire.h"
#include "util/error.h"
#include "util/log.h"

namespace strata {
namespace {

// True if pid has exited: no such process, or a zombie not yet reaped by its parent (its sockets are
// already closed, which is how we noticed).
bool processGone(pid_t pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "r");
  if (!f) return true;
  char buf[512] = {0};
  size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = 0;
  const char* close = std::strrchr(buf, ')');  // the state follows "pid (comm) "
  return close && close[1] == ' ' && (close[2] == 'Z' || close[2] == 'X');
}

}  // namespace

namespace {

using namespace bootstrap_io;
using namespace bootstrap_wire;

// How long the goodbye and the root's closing of the connection may take at destruction.
constexpr int64_t kGoodbyeMaxMs = 10000;
// Wait-chain diagnosis (publishWait, explainWait): small frames to the root, never worth a long block.
constexpr int64_t kWaitIoMs = 200;
// The mailbox the root's answers arrive in: no communicator has this id (ids are hashes).
constexpr uint64_t kWaitAnswerCommId = ~uint64_t{0};

std::string localHostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

/// Reads one frame. kEof if the connection closed; throws RemoteError for an oversized frame.
IoStatus readFrame(int fd, Deadline deadline, MsgType& type, std::vector<uint8_t>& payload) {
  uint8_t hdr[kFrameHeaderBytes];
  IoStatus st = readFull(fd, hdr, sizeof(hdr), deadline);
  if (st != IoStatus::kOk) return st;
  WireReader r(hdr, sizeof(hdr));
  type = static_cast<MsgType>(r.u32());
  const uint32_t len = r.u32();
  if (len > kMaxFrame)
    throw RemoteError(strprintf("bootstrap: received a frame of %u bytes (limit %zu)", len, kMaxFrame));
  payload.resize(len);
  return len ? readFull(fd, payload.data(), len, deadline) : IoStatus::kOk;
}

}  // namespace

BootstrapNetwork::BootstrapNetwork(const Config& config, const UniqueIdInfo& id, int rank)
    : config_(config),
      secret_(id.secret),
      rank_(rank),
      rootAddr_(sockAddrFromRaw(id.family, id.addr, id.port)),
      rootListening_(id.rootListening) {}

std::shared_ptr<BootstrapNetwork> BootstrapNetwork::connect(const Config& config, const UniqueIdInfo& id, int rank,
                                                            int nranks) {
  if (nranks < 1) throw InvalidArgument(strprintf("Bootstrap::connect: nranks=%d, must be >= 1", nranks));
  if (rank < 0 || rank >= nranks) {
    throw InvalidArgument(strprintf("Bootstrap::connect: rank %d out of range [0, %d)", rank, nranks));
  }
  if (id.port == 0) throw InvalidArgument(strprintf("Bootstrap::connect (rank %d): the unique id's port is 0", rank));
  if (config.timeoutMs < 1) {
    throw InvalidArgument(strprintf("Bootstrap::connect (rank %d): timeoutMs=%lld, must be >= 1", rank,
                                    static_cast<long long>(config.timeoutMs)));
  }
  std::shared_ptr<BootstrapNetwork> net(new BootstrapNetwork(config, id, rank));
  net->handshake(nranks, Deadline::in(config.timeoutMs));
  net->receiver_ = std::thread([raw = net.get()] { raw->receiverLoop(); });
  return net;
}

void BootstrapNetwork::handshake(int nranks, Deadline deadline) {
  const std::string who = strprintf("bootstrap rank %d of %d", rank_, nranks);
  const std::string root = rootAddr_.str();
  // An unknown interface name is a configuration error: report it before waiting on the network.
  if (!config_.socketIfname.empty()) localAddress_ = interfaceAddress(config_.socketIfname);

  fd_ = connectWithRetry(rootAddr_, deadline, who, rootListening_);

  MsgType type;
  std::vector<uint8_t> payload;
  IoStatus st = readFrame(fd_.get(), deadline, type, payload);
  if (st == IoStatus::kTimeout) {
    throw TimeoutError(strprintf("%s: no challenge from the bootstrap root %s within %lld ms", who.c_str(),
                                 root.c_str(), static_cast<long long>(config_.timeoutMs)));
  }
  if (st == IoStatus::kEof) {
    throw RemoteError(who + ": the bootstrap root " + root + " closed the connection before its challenge");
  }
  WireReader cr(payload);
  if (type != MsgType::kChallenge || payload.size() != 4 + kChallengeBytes || cr.u32() != kProtocolMagic) {
    throw RemoteError(who + ": " + root + " is not a Strata bootstrap root of this version (bad challenge)");
  }
  uint8_t challenge[kChallengeBytes];
  cr.bytes(challenge, kChallengeBytes);

  // Without STRATA_SOCKET_IFNAME, advertise the address of the interface that reaches the root: the
  // other ranks reach the root too, so they most likely reach this address.
  if (localAddress_.empty()) localAddress_ = localAddressOf(fd_.get()).host();

  WireWriter mac;
  mac.bytes(challenge, kChallengeBytes).u32(static_cast<uint32_t>(rank_)).u32(static_cast<uint32_t>(nranks));
  WireWriter hello;
  hello.u32(static_cast<uint32_t>(rank_))
      .u32(static_cast<uint32_t>(nranks))
      .u64(sipHash24(secret_, mac.data().data(), mac.data().size()))
      .u32(static_cast<uint32_t>(getpid()))
      .str(localHostName())
      .str(localAddress_);
  const auto helloFrame = makeFrame(MsgType::kHello, hello.data());
  st = writeFull(fd_.get(), helloFrame.data(), helloFrame.size(), deadline);
  if (st == IoStatus::kTimeout) throw TimeoutError(who + ": timed out sending its hello to the bootstrap root " + root);
  // kEof here is handled by the read below, which gives the better message.

  st = readFrame(fd_.get(), deadline, type, payload);
  if (st == IoStatus::kTimeout) {
    throw TimeoutError(
        strprintf("%s: timed out after %lld ms waiting at the bootstrap root %s for all %d ranks to "
                  "arrive (did every rank start, with the same unique id?)",
                  who.c_str(), static_cast<long long>(config_.timeoutMs), root.c_str(), nranks));
  }
  if (st == IoStatus::kEof) {
    throw RemoteError(who + ": the bootstrap root " + root +
                      " closed the connection during authentication: this process's unique id secret does not "
                      "match the root's (a stale or foreign unique id?), or the root has stopped");
  }
  WireReader tr(payload);
  if (type == MsgType::kError) {
    throw RemoteError(who + ": the bootstrap root " + root + " refused the rendezvous: " + tr.str());
  }
  if (type != MsgType::kTable) {
    throw RemoteError(strprintf("%s: unexpected message type %u from the bootstrap root %s", who.c_str(),
                                static_cast<uint32_t>(type), root.c_str()));
  }
  const uint32_t n = tr.u32();
  if (n != static_cast<uint32_t>(nranks)) {
    throw RemoteError(strprintf("%s: the bootstrap root's table has %u ranks", who.c_str(), n));
  }
  peers_.resize(n);
  for (auto& p : peers_) {
    p.address = tr.str();
    p.host = tr.str();
    p.pid = tr.u32();
  }
  STRATA_INFO(kLogBootstrap, "%s: rendezvous complete via %s, advertising %s", who.c_str(), root.c_str(),
              localAddress_.c_str());
}

BootstrapNetwork::~BootstrapNetwork() {
  if (!receiver_.joinable()) return;  // the handshake failed; Fd closes the socket
  bool lost;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
    lost = rootLost_;
  }
  const Deadline d = Deadline::in(std::min<int64_t>(config_.timeoutMs, kGoodbyeMaxMs));
  if (!lost) {
    // GOODBYE tells the root this rank leaves on purpose; without it, the close reads as a crash.
    try {
      std::lock_guard<std::mutex> lock(sendMu_);
      const auto frame = makeFrame(MsgType::kGoodbye, {});
      (void)writeFull(fd_.get(), frame.data(), frame.size(), d);
    } catch (const std::exception& e) {
      STRATA_INFO(kLogBootstrap, "bootstrap rank %d: goodbye not sent: %s", rank_, e.what());
    }
  }
  // Half-close and let the root close its side, so the goodbye is read before any reset could destroy it.
  ::shutdown(fd_.get(), SHUT_WR);
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_until(lock, d.at, [this] { return receiverDone_; });
  }
  ::shutdown(fd_.get(), SHUT_RDWR);  // wakes the receiver if the root did not close in time
  if (receiver_.get_id() == std::this_thread::get_id()) {
    receiver_.detach();  // the last view died inside a failure handler; the thread ends by itself
  } else {
    receiver_.join();
  }
}

std::string BootstrapNetwork::describe(int worldRank) const {
  const auto& p = peer(worldRank);
  return strprintf("rank %d (host %s, pid %u)", worldRank, p.host.c_str(), p.pid);
}

void BootstrapNetwork::receiverLoop() {
  std::string why = "connection closed";
  for (;;) {
    MsgType type;
    std::vector<uint8_t> payload;
    try {
      // No deadline: this thread waits for as long as the job runs; the destructor's shutdown() ends it.
      if (readFrame(fd_.get(), Deadline::never(), type, payload) != IoStatus::kOk) break;
      WireReader r(payload);
      switch (type) {
        case MsgType::kRelay: {
          const uint64_t commId = r.u64();
          const int from = static_cast<int>(r.u32());
          r.u32();  // to: this rank
          const uint64_t tag = r.u64();
          deliver(commId, from, tag, r.rest());
          break;
        }
        case MsgType::kFailure: {
          BootstrapFailure f;
          f.text = r.str();
          if (r.remaining() >= 16) {
            f.epoch = r.u32();
            f.deadWorld = static_cast<int>(r.u32()) - 1;
            f.commId = r.u64();
          }
          if (f.deadWorld >= worldSize()) f.deadWorld = -1;
          recordFailure(std::move(f), true);
          break;
        }
        case MsgType::kError: recordFailure(BootstrapFailure{r.str(), 0, -1, true}, true); break;
        case MsgType::kWaitAnswer: {
          const uint64_t query = r.u64();
          std::string text = r.str();
          deliver(kWaitAnswerCommId, rank_, query, std::vector<uint8_t>(text.begin(), text.end()));
          break;
        }
        case MsgType::kRootLeaving: {
          std::string why = r.str();
          STRATA_INFO(kLogBootstrap, "bootstrap rank %d: %s; the root may go away with it", rank_, why.c_str());
          std::lock_guard<std::mutex> lock(mu_);
          rootLeaving_ = std::move(why);
          break;
        }
        default:
          STRATA_WARN(kLogBootstrap, "bootstrap rank %d: ignoring unexpected message type %u from the root", rank_,
                      static_cast<uint32_t>(type));
      }
    } catch (const std::exception& e) {
      why = e.what();
      break;
    }
  }
  bool expected;
  std::string leaving;
  {
    std::lock_guard<std::mutex> lock(mu_);
    expected = closing_;
    leaving = rootLeaving_;
    rootLost_ = true;
  }
  if (!expected && !leaving.empty()) {
    // An orderly end of the root's process: work in flight among the remaining ranks goes on (it no longer
    // involves the departed ranks, whose operations had completed), so no handler aborts it. Only what
    // needs the root from now on (communicator creation, split, failure reports) fails, with this reason.
    const std::string reason = strprintf(
        "bootstrap root gone: %s and then exited (%s); creating or splitting communicators on this network is no "
        "longer possible",
        leaving.c_str(), why.c_str());
    STRATA_INFO(kLogBootstrap, "bootstrap rank %d: %s", rank_, reason.c_str());
    recordFailure(BootstrapFailure{reason, 0, -1, true}, false);
  } else if (!expected) {
    // The root usually lives in rank 0's process. A rank on this host whose process is gone is the likely
    // culprit: name it, so the message says which rank died and not only that the root is unreachable.
    // A dying process closes its sockets a moment before it is marked exited: look for up to half a second.
    std::string culprit;
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    for (int attempt = 0; attempt < 50 && culprit.empty(); ++attempt) {
      if (attempt) usleep(10000);
      for (size_t r = 0; r < peers_.size(); ++r) {
        const BootstrapPeer& p = peers_[r];
        if (p.host == host && p.pid != 0 && static_cast<pid_t>(p.pid) != getpid() &&
            processGone(static_cast<pid_t>(p.pid))) {
          culprit +=
              strprintf("%srank %zu (host %s, pid %u) died", culprit.empty() ? "" : ", ", r, p.host.c_str(), p.pid);
        }
      }
    }
    recordFailure(BootstrapFailure{strprintf("%s%sbootstrap root unreachable: rank %d lost its connection to the root "
                                             "at %s (%s); the root's process probably died",
                                             culprit.c_str(), culprit.empty() ? "" : "; ", rank_,
                                             rootAddr_.str().c_str(), why.c_str()),
                                   0, -1, true},
                  true);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    receiverDone_ = true;
  }
  cv_.notify_all();
}

void BootstrapNetwork::deliver(uint64_t commId, int from, uint64_t tag, std::vector<uint8_t> data) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    mailboxes_[MailboxKey{commId, from, tag}].push_back(std::move(data));
  }
  cv_.notify_all();
}

void BootstrapNetwork::writeFrame(const std::vector<uint8_t>& frame, Deadline deadline) {
  std::lock_guard<std::mutex> lock(sendMu_);
  IoStatus st = writeFull(fd_.get(), frame.data(), frame.size(), deadline);
  if (st == IoStatus::kEof) {
    {
      std::lock_guard<std::mutex> l(mu_);
      rootLost_ = true;
    }
    throw RemoteError(strprintf("bootstrap rank %d: bootstrap root unreachable: the connection to %s is closed", rank_,
                                rootAddr_.str().c_str()));
  }
  if (st == IoStatus::kTimeout) {
    throw TimeoutError(strprintf("bootstrap rank %d: sending to the bootstrap root %s timed out after %lld ms", rank_,
                                 rootAddr_.str().c_str(), static_cast<long long>(config_.timeoutMs)));
  }
}

void BootstrapNetwork::send(uint64_t commId, int toWorld, uint64_t tag, const void* data, size_t len) {
  if (len > kMaxFrame - 64) {
    throw InvalidArgument(strprintf("bootstrap rank %d: message of %zu bytes to rank %d exceeds the limit of %zu",
                                    rank_, len, toWorld, kMaxFrame - 64));
  }
  if (toWorld == rank_) {
    const auto* b = static_cast<const uint8_t*>(data);
    deliver(commId, rank_, tag, std::vector<uint8_t>(b, b + len));
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (rootLost_) {
      const BootstrapFailure* f = firstFailure(nullptr);
      throw RemoteError(strprintf("bootstrap rank %d: cannot send to %s: the bootstrap root is unreachable%s%s", rank_,
                                  describe(toWorld).c_str(), f ? ": " : "", f ? f->text.c_str() : ""));
    }
  }
  WireWriter w;
  w.u64(commId).u32(static_cast<uint32_t>(rank_)).u32(static_cast<uint32_t>(toWorld)).u64(tag).bytes(data, len);
  writeFrame(makeFrame(MsgType::kRelay, w.data()), Deadline::in(config_.timeoutMs));
}

BootstrapNetwork::RecvStatus BootstrapNetwork::recv(uint64_t commId, int fromWorld, uint64_t tag, Deadline deadline,
                                                    std::vector<uint8_t>& out, const std::atomic<bool>* cancelled,
                                                    const FailureScope* scope) {
  std::unique_lock<std::mutex> lock(mu_);
  const MailboxKey key{commId, fromWorld, tag};
  for (;;) {
    auto it = mailboxes_.find(key);
    if (it != mailboxes_.end() && !it->second.empty()) {
      out = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) mailboxes_.erase(it);
      return RecvStatus::kOk;
    }
    if (firstFailure(scope)) return RecvStatus::kFailed;
    if (cancelled && cancelled->load(std::memory_order_acquire)) return RecvStatus::kCancelled;
    if (deadline.expired()) return RecvStatus::kTimeout;
    if (deadline.isNever()) {
      cv_.wait(lock);
    } else {
      cv_.wait_until(lock, deadline.at);
    }
  }
}

bool BootstrapNetwork::hasMessage(uint64_t commId, int fromWorld, uint64_t tag) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = mailboxes_.find(MailboxKey{commId, fromWorld, tag});
  return it != mailboxes_.end() && !it->second.empty();
}

void BootstrapNetwork::wakeReceivers() {
  { std::lock_guard<std::mutex> lock(mu_); }  // a recv between its flag check and its wait holds mu_
  cv_.notify_all();
}

bool FailureScope::covers(const BootstrapFailure& f) const {
  if (f.everyView) return true;
  if (f.commId) return f.commId == commId;
  if (epoch == 0) return true;
  if (f.deadWorld >= 0) return std::binary_search(worldRanks.begin(), worldRanks.end(), f.deadWorld);
  return f.epoch >= epoch;
}

const BootstrapFailure* BootstrapNetwork::firstFailure(const FailureScope* scope) const {
  for (const BootstrapFailure& f : failures_)
    if (!scope || scope->covers(f)) return &f;
  return nullptr;
}

uint64_t BootstrapNetwork::addFailureHandler(std::function<void(const std::string&)> handler, FailureScope scope) {
  uint64_t id;
  std::string already;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = nextHandlerId_++;
    // If a failure it covers is already recorded, the receiver will not run this handler for it: run it here,
    // so that a failure between connect() and registration is not lost.
    const BootstrapFailure* f = firstFailure(&scope);
    if (f) already = f->text;
    handlers_[id] = Handler{handler, std::move(scope), f != nullptr};
  }
  if (!already.empty() && handler) handler(already);
  return id;
}

void BootstrapNetwork::removeFailureHandler(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  handlers_.erase(id);
}

void BootstrapNetwork::recordFailure(BootstrapFailure failure, bool runHandlers) {
  // Failures are few (deaths, reports, the root's loss, revokes); the bound keeps a job that revokes communicators
  // for days from growing this.
  constexpr size_t kMaxFailures = 1024;
  if (failure.text.empty()) failure.text = "unspecified failure";
  std::vector<std::function<void(const std::string&)>> toRun;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failures_.size() >= kMaxFailures) {
      // Make room: a revoke's record first (its communicator has long stopped: its handler ran and its calls
      // fail on its own state), else the oldest that is not about every view.
      auto victim = std::find_if(failures_.begin(), failures_.end(), [](const auto& f) { return f.commId != 0; });
      if (victim == failures_.end())
        victim = std::find_if(failures_.begin(), failures_.end(), [](const auto& f) { return !f.everyView; });
      if (victim != failures_.end()) failures_.erase(victim);
    }
    failures_.push_back(failure);
    for (auto& [id, h] : handlers_) {
      if (h.ran || !h.scope.covers(failure)) continue;
      h.ran = true;  // also when not run here (a report of this rank's own): the owner knows
      if (runHandlers) toRun.push_back(h.run);
    }
  }
  cv_.notify_all();
  STRATA_WARN(kLogBootstrap, "bootstrap rank %d: failure: %s", rank_, failure.text.c_str());
  // Outside the lock: a handler may call back into the bootstrap (failure(), reportFailure()).
  for (auto& h : toRun) {
    try {
      if (h) h(failure.text);
    } catch (const std::exception& e) {
      STRATA_WARN(kLogBootstrap, "bootstrap rank %d: a failure handler threw: %s", rank_, e.what());
    } catch (...) {
      STRATA_WARN(kLogBootstrap, "bootstrap rank %d: a failure handler threw", rank_);
    }
  }
}

void BootstrapNetwork::reportFailure(const std::string& reason, uint32_t epoch, uint64_t commId) {
  // Local handlers are not run: the reporting code already knows, and may be the handler's owner.
  recordFailure(BootstrapFailure{reason, epoch, -1, false, commId}, false);
  bool lost;
  {
    std::lock_guard<std::mutex> lock(mu_);
    lost = rootLost_;
  }
  if (lost) return;
  try {
    WireWriter w;
    w.str(reason).u32(epoch).u64(commId);
    writeFrame(makeFrame(MsgType::kReportFailure, w.data()),
               Deadline::in(std::min<int64_t>(config_.timeoutMs, kGoodbyeMaxMs)));
  } catch (const std::exception& e) {
    STRATA_WARN(kLogBootstrap, "bootstrap rank %d: could not report the failure to the root: %s", rank_, e.what());
  }
}

namespace {
void writeRanks(WireWriter& w, const std::vector<int>& ranks) {
  w.u32(static_cast<uint32_t>(ranks.size()));
  for (int r : ranks) w.u32(static_cast<uint32_t>(r));
}
}  // namespace

void BootstrapNetwork::publishWait(const std::vector<int>& worldPeers, const std::string& what) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (rootLost_) return;
  }
  try {
    WireWriter w;
    w.str(what.size() > 512 ? what.substr(0, 512) : what);
    writeRanks(w, worldPeers);
    writeFrame(makeFrame(MsgType::kWaitState, w.data()), Deadline::in(kWaitIoMs));
  } catch (const std::exception& e) {
    STRATA_INFO(kLogBootstrap, "bootstrap rank %d: could not tell the root what it waits on: %s", rank_, e.what());
  }
}

std::string BootstrapNetwork::explainWait(const std::vector<int>& worldPeers, int64_t timeoutMs) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (rootLost_) return "";
  }
  const uint64_t query = nextWaitQuery_.fetch_add(1);
  try {
    WireWriter w;
    w.u64(query);
    writeRanks(w, worldPeers);
    writeFrame(makeFrame(MsgType::kWaitQuery, w.data()), Deadline::in(kWaitIoMs));
  } catch (const std::exception&) {
    return "";
  }
  std::vector<uint8_t> out;
  if (recv(kWaitAnswerCommId, rank_, query, Deadline::in(timeoutMs), out) != RecvStatus::kOk) return "";
  return std::string(out.begin(), out.end());
}

std::string BootstrapNetwork::failure(const FailureScope* scope) const {
  std::lock_guard<std::mutex> lock(mu_);
  const BootstrapFailure* f = firstFailure(scope);
  return f ? f->text : std::string();
}

}  // namespace strata
