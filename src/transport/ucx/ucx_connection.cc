// UCX transport: UCP tagged messages over the process's worker (see ucx_worker.h), one endpoint per peer.
//
// Setup (both ranks run the same steps, so neither waits on the other's role):
//   1. each rank sends the peer, through the bootstrap's authenticated exchange, its worker address, its
//      settings, a random 64-bit receive key and a random nonce; both check that the settings agree (if not,
//      both fail with InvalidUsage);
//   2. each creates an endpoint to the peer's worker (peer-failure handling on: a dead peer fails the
//      endpoint instead of hanging it), posts its receives and sends a hello whose MAC, keyed by the job
//      secret, answers the peer's nonce;
//   3. each checks the peer's hello and tells the peer its verdict through the exchange, so both fail together.
// UCP has no authentication of its own, so the secret guards the data path indirectly: messages are matched
// only by exact 64-bit tags derived from the receiver's random key, which only the bootstrap delivered.
//
// Data path (every call non-blocking): message number s of a direction carries tag recvKey + s, so each
// posted receive can only match its own message, whatever the arrival order. The receiver keeps a ring of
// nslots slots of pieceBytes with a receive posted in every free slot; tryRecvPeek returns the next slot once
// its receive completed. The sender fills a ring of nslots staging slots; sendCommit posts ucp_tag_send_nbx
// from the slot, which is free again once that request completes (eager: handed to the UCX transport;
// rendezvous: the receiver took it). flushed() is true once every send request completed. (Not an endpoint
// flush: over tcp, UCX's flush waits for the peer's worker to answer, which a peer that already returned from
// its collective does not do until its next call.)
// Tag key - 1 carries the hello; key - 2 the goodbye a closing rank sends with its message count, so the peer
// can tell "closed after sending everything" from "more is coming".
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "bootstrap/peer_exchange.h"
#include "transport/staging_buffer.h"
#include "transport/transport.h"
#include "transport/ucx/ucx_api.h"
#include "transport/ucx/ucx_worker.h"
#include "util/config.h"
#include "util/error.h"
#include "util/log.h"
#include "util/sys.h"

namespace strata {
namespace ucx {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kSetupMagic = 0x5354524155435831ull;  // "STRAUCX1"
constexpr uint64_t kHelloMagic = 0x5354524155435848ull;  // "STRAUCXH"
constexpr uint64_t kFullMask = ~uint64_t{0};
constexpr uint64_t kHelloTagOffset = 1;    // tag = key - 1
constexpr uint64_t kGoodbyeTagOffset = 2;  // tag = key - 2
constexpr int kCloseMs = 2000;
constexpr size_t kNonceBytes = 16;

enum Verdict : uint8_t { kVerdictFailed = 0, kVerdictOk = 1, kVerdictInvalidUsage = 2 };

// What each rank sends the other through the bootstrap (host byte order: ranks of one job share an ABI),
// followed by its packed worker address.
struct SetupMsg {
  uint64_t magic;
  uint64_t commId;
  int32_t fromRank;
  int32_t toRank;
  uint32_t tag;
  uint32_t nslots;
  uint64_t pieceBytes;
  uint64_t recvKey;            // the peer tags its messages to us recvKey + seq
  uint8_t nonce[kNonceBytes];  // the peer's hello must answer this
  char bootId[40];             // /proc/sys/kernel/random/boot_id: same host?
  uint64_t pidNs;              // pid namespace: are pids comparable?
  int32_t pid;
  uint32_t addrLen;
  char host[64];  // the advertised address, for messages
};
static_assert(sizeof(SetupMsg) == 184, "SetupMsg must have no padding");

// The first UCX message in each direction.
struct Hello {
  uint64_t magic;
  uint64_t commId;
  int32_t fromRank;
  int32_t toRank;
  uint32_t tag;
  uint32_t zero;
  uint64_t mac;  // SipHash-2-4 under the job secret over the receiver's nonce and every field above
};
static_assert(sizeof(Hello) == 40, "Hello must have no padding");

uint64_t helloMac(const std::array<uint8_t, 16>& secret, const uint8_t (&nonce)[kNonceBytes], const Hello& h) {
  uint8_t buf[kNonceBytes + offsetof(Hello, mac)];
  std::memcpy(buf, nonce, kNonceBytes);
  std::memcpy(buf + kNonceBytes, &h, offsetof(Hello, mac));
  return sipHash24(secret, buf, sizeof(buf));
}

template <size_t N>
void copyString(char (&dst)[N], const std::string& src) {
  std::memset(dst, 0, N);
  std::memcpy(dst, src.data(), std::min(src.size(), N - 1));
}
template <size_t N>
std::string fromField(const char (&src)[N]) {
  return std::string(src, strnlen(src, N));
}

class UcxConnection final : public Connection {
 public:
  UcxConnection(std::shared_ptr<Worker> worker, int me, int peer, const Config& config)
      : api_(api()),
        me_(me),
        peer_(peer),
        pieceBytes_(config.pieceBytes),
        stride_((config.pieceBytes + 63) / 64 * 64),
        nslots_(static_cast<uint64_t>(config.nslots)),
        sendBuf_(allocStagingBuffer(stride_ * nslots_, "UCX")),
        recvBuf_(allocStagingBuffer(stride_ * nslots_, "UCX")),
        sendReq_(nslots_, nullptr),
        recvReq_(nslots_, nullptr),
        recvLen_(nslots_, 0),
        recvDone_(nslots_, 0),
        worker_(std::move(worker)),
        mu_(worker_->mutex()),
        wh_(worker_->handle()),
        ep_state_(std::make_unique<EndpointState>()) {
    ep_state_->me = me;
    ep_state_->peer = peer;
  }

  ~UcxConnection() override { close(); }

  void setup(PeerExchange& exchange, const Config& config, uint32_t tag);

  void* trySendReserve(size_t bytes) override {
    if (bytes > pieceBytes_) {
      throw InternalError(strprintf("rank %d: a %zu-byte message to rank %d exceeds STRATA_PIECE_BYTES=%zu", me_, bytes,
                                    peer_, pieceBytes_));
    }
    if (sendHead_ - sendTail_ >= nslots_) {
      std::lock_guard<std::mutex> lk(mu_);
      advanceSends();
      if (sendHead_ - sendTail_ >= nslots_) {
        worker_->progress();
        advanceSends();
        if (sendHead_ - sendTail_ >= nslots_) return nullptr;
      }
    }
    reserved_ = true;
    return sendPayload(sendHead_ % nslots_);
  }

  void sendCommit(size_t bytes) override {
    if (!reserved_ || bytes > pieceBytes_) {
      throw InternalError(
          strprintf("rank %d: sendCommit(%zu) to rank %d without a matching trySendReserve", me_, bytes, peer_));
    }
    reserved_ = false;
    const uint64_t slot = sendHead_ % nslots_;
    std::lock_guard<std::mutex> lk(mu_);
    void* r = api_.tag_send_nbx(ep_, sendPayload(slot), bytes, sendKey_ + sendHead_, &hostParam_);
    if (UCS_PTR_IS_ERR(r)) throwFailed("sending", UCS_PTR_STATUS(r));
    sendReq_[slot] = r;  // null: already complete (UCX copied it)
    ++sendHead_;
  }

  const void* tryRecvPeek(size_t bytes) override {
    const uint64_t slot = recvHead_ % nslots_;
    if (!recvDone_[slot]) {
      std::lock_guard<std::mutex> lk(mu_);
      if (!awaitRecv(slot)) return nullptr;
    }
    if (recvLen_[slot] != bytes) {
      throw InvalidUsage(
          strprintf("rank %d expected a %zu-byte message from rank %d but got %zu bytes: the ranks "
                    "called different collectives or counts",
                    me_, bytes, peer_, recvLen_[slot]));
    }
    return recvPayload(slot);
  }

  void recvRelease() override {
    const uint64_t slot = recvHead_ % nslots_;
    if (!recvDone_[slot]) {
      throw InternalError(strprintf("rank %d: recvRelease from rank %d without a message", me_, peer_));
    }
    recvDone_[slot] = 0;
    ++recvHead_;
    std::lock_guard<std::mutex> lk(mu_);
    postRecv(recvHead_ + nslots_ - 1);
  }

  bool progress() override {
    std::lock_guard<std::mutex> lk(mu_);
    const bool moved = worker_->progress() != 0;
    advanceSends();
    return moved;
  }

  bool flushed() override {
    if (sendTail_ == sendHead_) return true;
    std::lock_guard<std::mutex> lk(mu_);
    advanceSends();
    if (sendTail_ != sendHead_) {
      worker_->progress();
      advanceSends();
    }
    return sendTail_ == sendHead_;
  }

  void checkPeer() override {
    std::lock_guard<std::mutex> lk(mu_);
    worker_->progress();
    advanceSends();
    const uint64_t slot = recvHead_ % nslots_;
    const bool waitingRecv = !recvDone_[slot] && !testRecv(slot);
    const bool waitingSend = sendTail_ != sendHead_;
    if (waitingRecv && recvPeerGone(true)) {
      worker_->drain();
      if (!testRecv(slot)) throwGone();
    }
    if (waitingSend && (peerClosed() || ep_state_->failed || peerExited())) throwGone();
  }

  int peer() const override { return peer_; }
  const char* kind() const override { return "ucx"; }

 private:
  char* sendPayload(uint64_t slot) { return sendBuf_.get() + slot * stride_; }
  char* recvPayload(uint64_t slot) { return recvBuf_.get() + slot * stride_; }

  // Runs inside ucp_worker_progress, on whichever thread progresses the worker (holding its mutex), and
  // possibly after the connection is gone: it only writes the endpoint's own state.
  static void onEpError(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* st = static_cast<EndpointState*>(arg);
    st->failed = true;
    st->status = status;
    STRATA_INFO(kLogNet, "rank %d: UCX endpoint to rank %d failed: %s", st->me, st->peer, api().status_string(status));
  }

  // The next message's receive has completed (true), or not yet (false); throws if it cannot come any more.
  // Caller holds mu_.
  bool awaitRecv(uint64_t slot) {
    if (testRecv(slot)) return true;
    worker_->progress();
    if (testRecv(slot)) return true;
    if (!recvPeerGone(false)) return false;
    // Take in whatever the peer managed to send before it went.
    worker_->drain();
    if (!testRecv(slot)) throwGone();
    return true;
  }

  void postRecv(uint64_t seq) {
    const uint64_t slot = seq % nslots_;
    void* r = api_.tag_recv_nbx(wh_, recvPayload(slot), pieceBytes_, recvKey_ + seq, kFullMask, &recvParam_);
    if (UCS_PTR_IS_ERR(r)) throwFailed("posting a receive", UCS_PTR_STATUS(r));
    recvReq_[slot] = r;
    recvDone_[slot] = 0;
  }

  // True once the receive of `slot` has completed (its length recorded); throws if it failed.
  bool testRecv(uint64_t slot) {
    if (recvDone_[slot]) return true;
    void* r = recvReq_[slot];
    if (!r) throw InternalError(strprintf("rank %d: no receive posted for rank %d", me_, peer_));
    ucp_tag_recv_info_t info{};
    const ucs_status_t st = api_.tag_recv_request_test(r, &info);
    if (st == UCS_INPROGRESS) return false;
    api_.request_free(r);
    recvReq_[slot] = nullptr;
    if (st == UCS_ERR_MESSAGE_TRUNCATED) {
      throw InvalidUsage(strprintf("rank %d got a message of more than STRATA_PIECE_BYTES=%zu bytes from rank %d", me_,
                                   pieceBytes_, peer_));
    }
    if (st != UCS_OK) throwFailed("receiving", st);
    recvLen_[slot] = info.length;
    recvDone_[slot] = 1;
    return true;
  }

  // Frees the requests of every completed send, in order. Throws if one failed.
  void advanceSends() {
    while (sendTail_ != sendHead_) {
      void*& r = sendReq_[sendTail_ % nslots_];
      if (r) {
        const ucs_status_t st = api_.request_check_status(r);
        if (st == UCS_INPROGRESS) return;
        api_.request_free(r);
        r = nullptr;
        if (st != UCS_OK) throwFailed("sending", st);
      }
      ++sendTail_;
    }
  }

  // True once the peer's goodbye arrived (peerSent_ then holds how many messages it sent).
  bool peerClosed() {
    if (goodbyeDone_) return true;
    if (!goodbyeReq_) return false;
    ucp_tag_recv_info_t info{};
    const ucs_status_t st = api_.tag_recv_request_test(goodbyeReq_, &info);
    if (st == UCS_INPROGRESS) return false;
    api_.request_free(goodbyeReq_);
    goodbyeReq_ = nullptr;
    if (st == UCS_OK && info.length == sizeof(goodbyeIn_)) {
      goodbyeDone_ = true;
      peerSent_ = goodbyeIn_;
      return true;
    }
    return false;  // cancelled or malformed: rely on the endpoint's and the pid's state
  }

  bool peerExited() const { return peerWatch_.exited(); }

  // Whether the next message can no longer come: the peer closed after sending fewer messages, or it failed
  // (endpoint error, or its process is gone) without saying goodbye.
  bool recvPeerGone(bool checkPid) {
    if (peerClosed()) return recvHead_ >= peerSent_;
    if (ep_state_->failed || (checkPid && peerExited())) {
      worker_->drain();  // a goodbye may be just behind the failure
      if (peerClosed()) return recvHead_ >= peerSent_;
      return true;
    }
    return false;
  }

  [[noreturn]] void throwGone() {
    if (peerClosed()) {
      throw RemoteError(
          strprintf("rank %d closed its ucx connection to rank %d (%s) after %llu messages while rank %d still "
                    "needed one: the ranks ran different collectives, or rank %d was destroyed early",
                    peer_, me_, peerAddr_.c_str(), static_cast<unsigned long long>(peerSent_), me_, peer_));
    }
    if (peerExited()) {
      throw RemoteError(strprintf("rank %d (pid %d) on this host exited (seen by rank %d over ucx)", peer_,
                                  static_cast<int>(peerPid_), me_));
    }
    if (ep_state_->failed) {
      throw RemoteError(strprintf("rank %d: ucx connection to rank %d (%s) failed: %s: peer exited?", me_, peer_,
                                  peerAddr_.c_str(), api_.status_string(ep_state_->status)));
    }
    throw RemoteError(strprintf("rank %d: ucx connection to rank %d (%s) is gone", me_, peer_, peerAddr_.c_str()));
  }

  [[noreturn]] void throwFailed(const char* what, ucs_status_t st) {
    if (st == UCS_ERR_CANCELED && ep_state_->failed) st = ep_state_->status;
    throw RemoteError(strprintf("rank %d: %s over the ucx connection to rank %d (%s) failed: %s: peer exited?", me_,
                                what, peer_, peerAddr_.c_str(), api_.status_string(st)));
  }

  // Waits for a request until `deadline`, progressing the worker; takes mu_ for each round, so other
  // threads' connections move too. Returns its status (UCS_INPROGRESS if it did not finish) and frees it
  // if it finished.
  ucs_status_t waitRequest(void*& r, Clock::time_point deadline) {
    if (!r) return UCS_OK;
    if (UCS_PTR_IS_ERR(r)) {
      const ucs_status_t st = UCS_PTR_STATUS(r);
      r = nullptr;
      return st;
    }
    while (true) {
      unsigned moved = 0;
      {
        std::lock_guard<std::mutex> lk(mu_);
        const ucs_status_t st = api_.request_check_status(r);
        if (st != UCS_INPROGRESS) {
          api_.request_free(r);
          r = nullptr;
          return st;
        }
        if (Clock::now() >= deadline) return st;
        moved = worker_->progress();
      }
      if (moved == 0) std::this_thread::yield();
    }
  }

  void close();
  void exchangeVerdict(PeerExchange& exchange, uint32_t tag, Verdict mine, const std::string& why);

  const Api& api_;
  int me_, peer_;
  std::string peerAddr_ = "?";
  size_t pieceBytes_, stride_;
  uint64_t nslots_;
  // The buffers outlive worker_ (members are destroyed in reverse order): the worker goes first when this
  // is its last connection.
  StagingBuffer sendBuf_, recvBuf_;
  std::vector<void*> sendReq_, recvReq_;
  std::vector<size_t> recvLen_;
  std::vector<uint8_t> recvDone_;
  std::shared_ptr<Worker> worker_;
  std::mutex& mu_;
  ucp_worker_h wh_;
  ucp_ep_h ep_ = nullptr;
  // Written by the endpoint's error callback; handed to the worker when the endpoint closes.
  std::unique_ptr<EndpointState> ep_state_;
  bool established_ = false;

  uint64_t sendKey_ = 0, recvKey_ = 0;
  uint64_t sendHead_ = 0;  // messages committed
  uint64_t sendTail_ = 0;  // messages whose staging slot is free again
  bool reserved_ = false;
  uint64_t recvHead_ = 0;  // next message to deliver

  Hello helloIn_{};
  void* helloReq_ = nullptr;
  uint64_t goodbyeIn_ = 0;
  void* goodbyeReq_ = nullptr;
  bool goodbyeDone_ = false;
  uint64_t peerSent_ = 0;

  pid_t peerPid_ = 0;
  ProcessExitWatch peerWatch_;  // watches nothing unless the peer's pids are comparable with ours

  // Host memory only for now: our own staging rings. Device buffers (the GPU issue) will pass their
  // memory type here.
  ucp_request_param_t hostParam_ = [] {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    p.memory_type = UCS_MEMORY_TYPE_HOST;
    return p;
  }();
  // Receives always return a request (their length is read from it when they complete).
  ucp_request_param_t recvParam_ = [] {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_MEMORY_TYPE | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    p.memory_type = UCS_MEMORY_TYPE_HOST;
    return p;
  }();
};

void UcxConnection::exchangeVerdict(PeerExchange& exchange, uint32_t tag, Verdict mine, const std::string& why) {
  std::vector<uint8_t> v{mine};
  v.insert(v.end(), why.begin(), why.end());
  exchange.send(peer_, tag, v.data(), v.size());
  if (mine != kVerdictOk) return;
  std::vector<uint8_t> theirs = exchange.recv(peer_, tag);
  if (theirs.empty() || theirs[0] != kVerdictOk) {
    const std::string reason = theirs.size() > 1 ? std::string(theirs.begin() + 1, theirs.end()) : "no reason given";
    if (!theirs.empty() && theirs[0] == kVerdictInvalidUsage) throw InvalidUsage(reason);
    throw RemoteError(strprintf("rank %d: rank %d refused the ucx connection: %s", me_, peer_, reason.c_str()));
  }
}

void UcxConnection::setup(PeerExchange& exchange, const Config& config, uint32_t tag) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(std::max<int64_t>(1, config.timeoutMs));
  const std::vector<uint8_t>& address = worker_->address();

  // 1. Settings, keys and addresses, both ways through the bootstrap (never holding mu_ while waiting on
  // it: ranks that are threads of this process share the worker).
  SetupMsg mine{};
  mine.magic = kSetupMagic;
  mine.commId = exchange.commId();
  mine.fromRank = me_;
  mine.toRank = peer_;
  mine.tag = tag;
  mine.nslots = static_cast<uint32_t>(nslots_);
  mine.pieceBytes = pieceBytes_;
  fillRandom(&recvKey_, sizeof(recvKey_));  // tags wrap modulo 2^64 alike on both sides
  mine.recvKey = recvKey_;
  fillRandom(mine.nonce, sizeof(mine.nonce));
  copyString(mine.bootId, bootId().value_or(""));
  mine.pidNs = pidNamespaceId();
  mine.pid = static_cast<int32_t>(getpid());
  mine.addrLen = static_cast<uint32_t>(address.size());
  copyString(mine.host, exchange.localAddress());
  std::vector<uint8_t> out(sizeof(mine) + address.size());
  std::memcpy(out.data(), &mine, sizeof(mine));
  std::memcpy(out.data() + sizeof(mine), address.data(), address.size());
  exchange.send(peer_, tag, out.data(), out.size());

  const std::vector<uint8_t> in = exchange.recv(peer_, tag);
  SetupMsg theirs{};
  if (in.size() >= sizeof(theirs)) std::memcpy(&theirs, in.data(), sizeof(theirs));
  if (in.size() < sizeof(theirs) || theirs.magic != kSetupMagic || in.size() != sizeof(theirs) + theirs.addrLen) {
    throw RemoteError(
        strprintf("rank %d: malformed ucx setup message from rank %d (%zu bytes): is rank %d using "
                  "another transport or Strata version?",
                  me_, peer_, in.size(), peer_));
  }
  if (theirs.commId != mine.commId || theirs.fromRank != peer_ || theirs.toRank != me_ || theirs.tag != tag) {
    throw RemoteError(
        strprintf("rank %d: ucx setup message from rank %d is for communicator %016llx rank %d -> %d "
                  "tag %u, expected %016llx %d -> %d tag %u",
                  me_, peer_, static_cast<unsigned long long>(theirs.commId), theirs.fromRank, theirs.toRank,
                  theirs.tag, static_cast<unsigned long long>(mine.commId), peer_, me_, tag));
  }
  if (theirs.nslots != mine.nslots || theirs.pieceBytes != mine.pieceBytes) {
    throw InvalidUsage(
        strprintf("rank %d has STRATA_NSLOTS=%u STRATA_PIECE_BYTES=%llu but rank %d has %u and %llu: "
                  "every rank needs the same settings",
                  me_, mine.nslots, static_cast<unsigned long long>(mine.pieceBytes), peer_, theirs.nslots,
                  static_cast<unsigned long long>(theirs.pieceBytes)));
  }
  sendKey_ = theirs.recvKey;
  peerAddr_ = fromField(theirs.host);
  peerPid_ = static_cast<pid_t>(theirs.pid);
  // Liveness of a peer on this host, as the shm transport does it: UCX's keepalive would take many seconds.
  const bool pidComparable = !fromField(mine.bootId).empty() && fromField(theirs.bootId) == fromField(mine.bootId) &&
                             theirs.pidNs != 0 && theirs.pidNs == mine.pidNs;
  if (pidComparable) peerWatch_ = ProcessExitWatch(peerPid_);

  // 2. The endpoint, our receives, the hello.
  Hello hello{};
  hello.magic = kHelloMagic;
  hello.commId = mine.commId;
  hello.fromRank = me_;
  hello.toRank = peer_;
  hello.tag = tag;
  hello.mac = helloMac(exchange.secret(), theirs.nonce, hello);
  static_assert(sizeof(hello) <= sizeof(EndpointState::hello));
  std::memcpy(ep_state_->hello, &hello, sizeof(hello));  // UCX may read it until the endpoint is closed
  void* sendReq = nullptr;
  {
    std::lock_guard<std::mutex> lk(mu_);
    ucp_ep_params_t ep{};
    ep.field_mask =
        UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(in.data() + sizeof(theirs));
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &UcxConnection::onEpError;
    ep.err_handler.arg = ep_state_.get();
    ucs_status_t st = api_.ep_create(wh_, &ep, &ep_);
    if (st != UCS_OK) {
      ep_ = nullptr;
      const char* tls = std::getenv("UCX_TLS");
      throw Error(strataSystemError,
                  strprintf("rank %d: creating the ucx endpoint to rank %d (%s) failed: %s (UCX_TLS=%s: is there a "
                            "transport with peer-failure handling that reaches it?)",
                            me_, peer_, peerAddr_.c_str(), api_.status_string(st), tls ? tls : "unset"));
    }
    helloReq_ = api_.tag_recv_nbx(wh_, &helloIn_, sizeof(helloIn_), recvKey_ - kHelloTagOffset, kFullMask, &recvParam_);
    if (UCS_PTR_IS_ERR(helloReq_)) {
      st = UCS_PTR_STATUS(helloReq_);
      helloReq_ = nullptr;
      throwFailed("posting the hello receive", st);
    }
    goodbyeReq_ =
        api_.tag_recv_nbx(wh_, &goodbyeIn_, sizeof(goodbyeIn_), recvKey_ - kGoodbyeTagOffset, kFullMask, &recvParam_);
    if (UCS_PTR_IS_ERR(goodbyeReq_)) {
      st = UCS_PTR_STATUS(goodbyeReq_);
      goodbyeReq_ = nullptr;
      throwFailed("posting the goodbye receive", st);
    }
    for (uint64_t s = 0; s < nslots_; ++s) postRecv(s);
    sendReq = api_.tag_send_nbx(ep_, ep_state_->hello, sizeof(hello), sendKey_ - kHelloTagOffset, &hostParam_);
    if (UCS_PTR_IS_ERR(sendReq)) throwFailed("sending the hello", UCS_PTR_STATUS(sendReq));
  }

  // 3. Wait for both hellos (ours must be out before the verdict: the peer waits for it), check theirs.
  ucs_status_t sendSt = UCS_INPROGRESS, recvSt = UCS_INPROGRESS;
  ucp_tag_recv_info_t info{};
  bool failed = false;
  while (true) {
    unsigned moved = 0;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (sendReq) {
        sendSt = api_.request_check_status(sendReq);
        if (sendSt != UCS_INPROGRESS) {
          api_.request_free(sendReq);
          sendReq = nullptr;
        }
      } else if (sendSt == UCS_INPROGRESS) {
        sendSt = UCS_OK;  // completed at once
      }
      if (helloReq_) {
        recvSt = api_.tag_recv_request_test(helloReq_, &info);
        if (recvSt != UCS_INPROGRESS) {
          api_.request_free(helloReq_);
          helloReq_ = nullptr;
        }
      }
      failed = ep_state_->failed;
      if ((sendSt != UCS_INPROGRESS && recvSt != UCS_INPROGRESS) || failed || Clock::now() >= deadline) break;
      moved = worker_->progress();
    }
    if (moved == 0) std::this_thread::yield();
  }
  if (sendReq) {
    std::lock_guard<std::mutex> lk(mu_);
    api_.request_free(sendReq);  // UCX releases it when done; the payload lives in ep_state_
  }
  std::string problem;
  Verdict verdict = kVerdictFailed;
  if (failed) {
    problem = strprintf("the endpoint failed: %s", api_.status_string(ep_state_->status));
  } else if (sendSt == UCS_INPROGRESS || recvSt == UCS_INPROGRESS) {
    problem = strprintf("no hello %s within STRATA_TIMEOUT_MS=%lld", recvSt == UCS_INPROGRESS ? "arrived" : "left",
                        static_cast<long long>(config.timeoutMs));
  } else if (sendSt != UCS_OK || recvSt != UCS_OK) {
    problem = strprintf("the hello failed: %s", api_.status_string(sendSt != UCS_OK ? sendSt : recvSt));
  } else if (info.length != sizeof(Hello) || helloIn_.magic != kHelloMagic) {
    problem = "the hello is not a Strata ucx hello";
  } else if (helloMac(exchange.secret(), mine.nonce, helloIn_) != helloIn_.mac) {
    problem = "the hello has a wrong MAC (not started with this job's unique id / secret)";
  } else if (helloIn_.commId != mine.commId || helloIn_.fromRank != peer_ || helloIn_.toRank != me_ ||
             helloIn_.tag != tag) {
    problem = "the hello is for another connection";
  } else {
    verdict = kVerdictOk;
  }
  if (verdict != kVerdictOk) {
    const std::string why = strprintf("rank %d refused the ucx connection from rank %d (%s): %s", me_, peer_,
                                      peerAddr_.c_str(), problem.c_str());
    exchangeVerdict(exchange, tag, verdict, why);
    throw RemoteError(why);
  }
  exchangeVerdict(exchange, tag, kVerdictOk, "");
  established_ = true;
}

void UcxConnection::close() {
  const auto deadline = Clock::now() + std::chrono::milliseconds(kCloseMs);
  bool sentAll = false;
  if (ep_) {
    try {
      if (established_ && !ep_state_->failed && !peerExited()) {
        // Let what was committed go out, for a short while (not to a peer that is gone).
        while (!flushed() && Clock::now() < deadline && !peerExited()) std::this_thread::yield();
        sentAll = sendTail_ == sendHead_;
      }
    } catch (const std::exception& e) {
      STRATA_INFO(kLogNet, "rank %d: dropping unsent messages to rank %d on close: %s", me_, peer_, e.what());
    }
    std::lock_guard<std::mutex> lk(mu_);
    if (sentAll) {
      // Say how many messages there were, so the peer tells an orderly close from a failure.
      ep_state_->goodbye = sendHead_;
      void* r = api_.tag_send_nbx(ep_, &ep_state_->goodbye, sizeof(ep_state_->goodbye), sendKey_ - kGoodbyeTagOffset,
                                  &hostParam_);
      if (UCS_PTR_IS_ERR(r)) {
        sentAll = false;
      } else if (r) {
        api_.request_free(r);  // the closing endpoint flushes it; its payload lives in ep_state_
      }
    }
    // An orderly close flushes the endpoint (the goodbye included); after a failure, or with messages
    // stuck, it is released at once. Either way the worker finishes it: nothing here waits for the peer.
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = sentAll && !ep_state_->failed ? 0 : UCP_EP_CLOSE_FLAG_FORCE;
    void* r = api_.ep_close_nbx(ep_, &p);
    if (r && !UCS_PTR_IS_ERR(r)) worker_->retire(r, std::move(ep_state_));
    ep_ = nullptr;
    // Receives still posted: cancel them (an unmatched receive cancels at once).
    for (void* q : recvReq_)
      if (q && api_.request_check_status(q) == UCS_INPROGRESS) api_.request_cancel(wh_, q);
    for (void* q : {helloReq_, goodbyeReq_})
      if (q && api_.request_check_status(q) == UCS_INPROGRESS) api_.request_cancel(wh_, q);
  }
  // Every request on our buffers must be finished before they go.
  bool buffersFree = true;
  for (auto* list : {&sendReq_, &recvReq_}) {
    for (auto& q : *list) {
      if (q && waitRequest(q, deadline) == UCS_INPROGRESS) {
        std::lock_guard<std::mutex> lk(mu_);
        api_.request_free(q);
        q = nullptr;
        buffersFree = false;
        worker_->abandonRequest();
      }
    }
  }
  for (void** q : {&helloReq_, &goodbyeReq_}) {
    if (*q && waitRequest(*q, deadline) == UCS_INPROGRESS) {
      // They land in members of this object: nothing to leak them into. A tiny control receive that is
      // neither matched nor cancellable does not happen; say so if it ever does.
      STRATA_WARN(kLogNet, "rank %d: a ucx control receive from rank %d did not cancel", me_, peer_);
      std::lock_guard<std::mutex> lk(mu_);
      api_.request_free(*q);
      *q = nullptr;
      worker_->abandonRequest();
    }
  }
  if (!buffersFree) {
    // UCX still owns a request on these buffers: leak them rather than let it write into freed memory.
    STRATA_WARN(kLogNet, "rank %d: ucx requests to/from rank %d still pending at close; leaking their buffers", me_,
                peer_);
    (void)sendBuf_.release();
    (void)recvBuf_.release();
  }
  peerWatch_.reset();
}

}  // namespace
}  // namespace ucx

std::unique_ptr<Connection> connectUcx(PeerExchange& exchange, const Config& config, int peer, uint32_t tag) {
  using namespace ucx;
  const int me = exchange.rank();
  if (peer < 0 || peer >= exchange.size() || peer == me) {
    throw InvalidArgument(strprintf("rank %d: no ucx connection possible to rank %d of %d", me, peer, exchange.size()));
  }
  if (config.pieceBytes == 0 || config.pieceBytes > (size_t{1} << 36) || config.nslots < 1 ||
      config.nslots > (1 << 16)) {
    throw InvalidArgument(
        strprintf("rank %d: ucx needs 0 < STRATA_PIECE_BYTES <= 2^36 and 1 <= STRATA_NSLOTS <= 65536, got %zu and %d",
                  me, config.pieceBytes, config.nslots));
  }
  auto conn = std::make_unique<UcxConnection>(Worker::acquire(), me, peer, config);
  conn->setup(exchange, config, tag);
  STRATA_INFO(kLogNet, "rank %d <-> rank %d: ucx connection, %d slots of %zu bytes", me, peer, config.nslots,
              config.pieceBytes);
  return conn;
}

}  // namespace strata
