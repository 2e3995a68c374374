// The UCX connection: UCP tagged messages over the process's worker (see ucx_worker.h), one endpoint per peer.
// Internal to src/transport/ucx/. Its two halves: ucx_setup.cc, the handshake that authenticates the peer and
// creates the endpoint (and connectUcx); ucx_connection.cc, the data path and close.
//
// Tag key - 1 carries the hello; key - 2 the goodbye a closing rank sends with its message count, so the peer
// can tell "closed after sending everything" from "more is coming".
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/staging_buffer.h"
#include "transport/transport.h"
#include "transport/ucx/ucx_api.h"
#include "transport/ucx/ucx_worker.h"
#include "util/error.h"
#include "util/sys.h"

namespace strata {
namespace ucx {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kFullMask = ~uint64_t{0};
constexpr uint64_t kHelloTagOffset = 1;    // tag = key - 1
constexpr uint64_t kGoodbyeTagOffset = 2;  // tag = key - 2
// Every data message ends with the stamp of its call (transport.h), after the payload so payloads stay aligned.
constexpr size_t kStampBytes = sizeof(MsgStamp);

enum Verdict : uint8_t { kVerdictFailed = 0, kVerdictOk = 1, kVerdictInvalidUsage = 2 };

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

class UcxConnection final : public Connection {
 public:
  UcxConnection(std::shared_ptr<Worker> worker, int me, int peer, const Config& config);
  ~UcxConnection() override { close(); }

  /// The handshake (ucx_setup.cc): throws when the peer cannot be reached, authenticated or agreed with.
  void setup(PeerExchange& exchange, const Config& config, uint32_t tag);

  void* trySendReserve(size_t bytes) override;
  void sendCommit(size_t bytes, const MsgStamp& stamp) override;
  const void* tryRecvPeek(size_t bytes, const MsgStamp& expected) override;
  void recvRelease() override;
  Head peekStamp(MsgStamp* stamp) override;
  bool progress() override;
  bool flushed() override;
  void checkPeer() override;
  int peer() const override { return peer_; }
  const char* kind() const override { return "ucx"; }

 private:
  char* sendPayload(uint64_t slot) { return sendBuf_.get() + slot * stride_; }
  char* recvPayload(uint64_t slot) { return recvBuf_.get() + slot * stride_; }

  // Runs inside ucp_worker_progress, on whichever thread progresses the worker (holding its mutex), and
  // possibly after the connection is gone: it only writes the endpoint's own state.
  static void onEpError(void* arg, ucp_ep_h, ucs_status_t status);

  // The next message's receive has completed (true), or not yet (false); throws if it cannot come any more.
  // Caller holds mu_.
  bool awaitRecv(uint64_t slot);
  void postRecv(uint64_t seq);

  // True once the receive of `slot` has completed (its length recorded); throws if it failed.
  bool testRecv(uint64_t slot);

  // Frees the requests of every completed send, in order. Throws if one failed.
  void advanceSends();

  // True once the peer's goodbye arrived (peerSent_ then holds how many messages it sent).
  bool peerClosed();
  bool peerExited() const { return peerWatch_.exited(); }

  // Whether the next message can no longer come: the peer closed after sending fewer messages, or it failed
  // (endpoint error, or its process is gone) without saying goodbye.
  bool recvPeerGone(bool checkPid);
  // Cold: error paths, kept out of the data path's code (as the compiler did when this was one file).
  [[noreturn, gnu::cold]] void throwGone();
  [[noreturn, gnu::cold]] void throwFailed(const char* what, ucs_status_t st);

  // Waits for a request until `deadline`, progressing the worker; takes mu_ for each round, so other
  // threads' connections move too. Returns its status (UCS_INPROGRESS if it did not finish) and frees it
  // if it finished.
  ucs_status_t waitRequest(void*& r, Clock::time_point deadline);

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

// The rings' bookkeeping, inline: the data path (ucx_connection.cc) inlines it into each call, and the setup
// (ucx_setup.cc) posts the first receives with postRecv.
inline bool UcxConnection::awaitRecv(uint64_t slot) {
  if (testRecv(slot)) return true;
  worker_->progress();
  if (testRecv(slot)) return true;
  if (!recvPeerGone(false)) return false;
  // Take in whatever the peer managed to send before it went.
  worker_->drain();
  if (!testRecv(slot)) throwGone();
  return true;
}

inline void UcxConnection::postRecv(uint64_t seq) {
  const uint64_t slot = seq % nslots_;
  void* r =
      api_.tag_recv_nbx(wh_, recvPayload(slot), pieceBytes_ + kStampBytes, recvKey_ + seq, kFullMask, &recvParam_);
  if (UCS_PTR_IS_ERR(r)) throwFailed("posting a receive", UCS_PTR_STATUS(r));
  recvReq_[slot] = r;
  recvDone_[slot] = 0;
}

inline bool UcxConnection::testRecv(uint64_t slot) {
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
  if (info.length < kStampBytes) {
    throw RemoteError(strprintf("rank %d got a %zu-byte message from rank %d, shorter than its stamp", me_,
                                static_cast<size_t>(info.length), peer_));
  }
  recvLen_[slot] = info.length;
  recvDone_[slot] = 1;
  return true;
}

inline void UcxConnection::advanceSends() {
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

inline bool UcxConnection::peerClosed() {
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

inline bool UcxConnection::recvPeerGone(bool checkPid) {
  if (peerClosed()) return recvHead_ >= peerSent_;
  if (ep_state_->failed || (checkPid && peerExited())) {
    worker_->drain();  // a goodbye may be just behind the failure
    if (peerClosed()) return recvHead_ >= peerSent_;
    return true;
  }
  return false;
}

}  // namespace ucx
}  // namespace strata
