// The UCX connection's setup: the handshake before the data path (ucx_connection.cc), and connectUcx.
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
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/peer_exchange.h"
#include "transport/connect_check.h"
#include "transport/hello_mac.h"
#include "transport/ucx/ucx_connection.h"
#include "util/config.h"
#include "util/error.h"
#include "util/log.h"
#include "util/sys.h"

namespace strata {
namespace ucx {
namespace {

constexpr uint64_t kSetupMagic = 0x5354524155435831ull;  // "STRAUCX1"
constexpr uint64_t kHelloMagic = 0x5354524155435848ull;  // "STRAUCXH"
constexpr size_t kNonceBytes = kHelloChallengeBytes;

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

template <size_t N>
void copyString(char (&dst)[N], const std::string& src) {
  std::memset(dst, 0, N);
  std::memcpy(dst, src.data(), std::min(src.size(), N - 1));
}
template <size_t N>
std::string fromField(const char (&src)[N]) {
  return std::string(src, strnlen(src, N));
}

}  // namespace

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

}  // namespace ucx

std::unique_ptr<Connection> connectUcx(PeerExchange& exchange, const Config& config, int peer, uint32_t tag) {
  using namespace ucx;
  checkConnectRequest(exchange, config, peer, "ucx");
  const int me = exchange.rank();
  auto conn = std::make_unique<UcxConnection>(Worker::acquire(), me, peer, config);
  conn->setup(exchange, config, tag);
  STRATA_INFO(kLogNet, "rank %d <-> rank %d: ucx connection, %d slots of %zu bytes", me, peer, config.nslots,
              config.pieceBytes);
  return conn;
}

}  // namespace strata
