// The UCX connection's data path and its close; the setup that comes first is ucx_setup.cc.
//
// Data path (every call non-blocking): message number s of a direction carries tag recvKey + s, so each
// posted receive can only match its own message, whatever the arrival order. The receiver keeps a ring of
// nslots slots of pieceBytes with a receive posted in every free slot; tryRecvPeek returns the next slot once
// its receive completed and its stamp (the 16 bytes after the payload) matches the call that reads it. The sender fills
// a ring of nslots staging slots; sendCommit posts ucp_tag_send_nbx from the slot, which is free again once that
// request completes (eager: handed to the UCX transport; rendezvous: the receiver took it). flushed() is true once
// every send request completed. (Not an endpoint flush: over tcp, UCX's flush waits for the peer's worker to answer,
// which a peer that already returned from its collective does not do until its next call.)
#include "transport/ucx/ucx_connection.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "util/config.h"
#include "util/error.h"
#include "util/log.h"

namespace strata {
namespace ucx {
namespace {

constexpr int kCloseMs = 2000;

}  // namespace

UcxConnection::UcxConnection(std::shared_ptr<Worker> worker, int me, int peer, const Config& config)
    : api_(api()),
      me_(me),
      peer_(peer),
      pieceBytes_(config.pieceBytes),
      stride_((config.pieceBytes + kStampBytes + 63) / 64 * 64),
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

void* UcxConnection::trySendReserve(size_t bytes) {
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

void UcxConnection::sendCommit(size_t bytes, const MsgStamp& stamp) {
  if (!reserved_ || bytes > pieceBytes_) {
    throw InternalError(
        strprintf("rank %d: sendCommit(%zu) to rank %d without a matching trySendReserve", me_, bytes, peer_));
  }
  reserved_ = false;
  const uint64_t slot = sendHead_ % nslots_;
  std::lock_guard<std::mutex> lk(mu_);
  std::memcpy(sendPayload(slot) + bytes, &stamp, kStampBytes);
  void* r = api_.tag_send_nbx(ep_, sendPayload(slot), bytes + kStampBytes, sendKey_ + sendHead_, &hostParam_);
  if (UCS_PTR_IS_ERR(r)) throwFailed("sending", UCS_PTR_STATUS(r));
  sendReq_[slot] = r;  // null: already complete (UCX copied it)
  ++sendHead_;
}

const void* UcxConnection::tryRecvPeek(size_t bytes, const MsgStamp& expected) {
  const uint64_t slot = recvHead_ % nslots_;
  if (!recvDone_[slot]) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!awaitRecv(slot)) return nullptr;
  }
  const size_t got = recvLen_[slot] - kStampBytes;  // testRecv refused messages shorter than a stamp
  MsgStamp stamp;
  std::memcpy(&stamp, recvPayload(slot) + got, kStampBytes);
  if (stamp != expected) [[unlikely]]
    throw StampMismatch(me_, peer_, expected, stamp);
  if (got != bytes) {
    throw InvalidUsage(
        strprintf("rank %d expected a %zu-byte message from rank %d but got %zu bytes: the ranks run the same call "
                  "with different plans (is STRATA_ALGO, STRATA_PIECE_BYTES or STRATA_NSLOTS set differently?)",
                  me_, bytes, peer_, got));
  }
  return recvPayload(slot);
}

Connection::Head UcxConnection::peekStamp(MsgStamp* stamp) {
  const uint64_t slot = recvHead_ % nslots_;
  if (!recvDone_[slot]) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!testRecv(slot)) {
      worker_->progress();
      if (!testRecv(slot)) {
        // A peer that said goodbye after sending everything this side took has simply finished.
        if (peerClosed() && recvHead_ >= peerSent_) return Head::kClosed;
        if (!recvPeerGone(false)) return Head::kEmpty;
        worker_->drain();  // whatever it managed to send before it went
        if (!testRecv(slot)) throwGone();
      }
    }
  }
  std::memcpy(stamp, recvPayload(slot) + recvLen_[slot] - kStampBytes, kStampBytes);
  return Head::kArrived;
}

void UcxConnection::recvRelease() {
  const uint64_t slot = recvHead_ % nslots_;
  if (!recvDone_[slot]) {
    throw InternalError(strprintf("rank %d: recvRelease from rank %d without a message", me_, peer_));
  }
  recvDone_[slot] = 0;
  ++recvHead_;
  std::lock_guard<std::mutex> lk(mu_);
  postRecv(recvHead_ + nslots_ - 1);
}

bool UcxConnection::progress() {
  std::lock_guard<std::mutex> lk(mu_);
  const bool moved = worker_->progress() != 0;
  advanceSends();
  return moved;
}

bool UcxConnection::flushed() {
  if (sendTail_ == sendHead_) return true;
  std::lock_guard<std::mutex> lk(mu_);
  advanceSends();
  if (sendTail_ != sendHead_) {
    worker_->progress();
    advanceSends();
  }
  return sendTail_ == sendHead_;
}

void UcxConnection::checkPeer() {
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

void UcxConnection::onEpError(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* st = static_cast<EndpointState*>(arg);
  st->failed = true;
  st->status = status;
  STRATA_INFO(kLogNet, "rank %d: UCX endpoint to rank %d failed: %s", st->me, st->peer, api().status_string(status));
}

[[noreturn]] void UcxConnection::throwGone() {
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

[[noreturn]] void UcxConnection::throwFailed(const char* what, ucs_status_t st) {
  if (st == UCS_ERR_CANCELED && ep_state_->failed) st = ep_state_->status;
  throw RemoteError(strprintf("rank %d: %s over the ucx connection to rank %d (%s) failed: %s: peer exited?", me_, what,
                              peer_, peerAddr_.c_str(), api_.status_string(st)));
}

ucs_status_t UcxConnection::waitRequest(void*& r, Clock::time_point deadline) {
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
    // Receives still posted: cancel them (an unmatched receive cancels at once).
    for (void* q : recvReq_)
      if (q && api_.request_check_status(q) == UCS_INPROGRESS) api_.request_cancel(wh_, q);
    for (void* q : {helloReq_, goodbyeReq_})
      if (q && api_.request_check_status(q) == UCS_INPROGRESS) api_.request_cancel(wh_, q);
  }
  // Every request on our buffers must be finished before they go, and before the endpoint closes: UCX 1.13 aborts
  // when an endpoint is closed under a rendezvous it has not finished (ucp_ep_destroy_base asserts on its list of
  // requests), which is what a peer that gave up on the same call leaves behind. A failed endpoint's requests are
  // cancelled by the worker soon, so they are waited for; against a live peer only briefly.
  const bool failed = ep_state_ && ep_state_->failed;
  const auto settle = failed ? deadline : std::min(deadline, Clock::now() + std::chrono::milliseconds(20));
  std::vector<void*> unfinished;
  for (auto* list : {&sendReq_, &recvReq_}) {
    for (auto& q : *list) {
      if (q && waitRequest(q, settle) == UCS_INPROGRESS) unfinished.push_back(std::exchange(q, nullptr));
    }
  }
  const bool buffersFree = unfinished.empty();
  if (ep_) {
    std::lock_guard<std::mutex> lk(mu_);
    // An orderly close flushes the endpoint (the goodbye included); after a failure, or with messages
    // stuck, it is released at once. Either way the worker finishes it: nothing here waits for the peer.
    const unsigned flags = sentAll && !ep_state_->failed ? 0 : UCP_EP_CLOSE_FLAG_FORCE;
    if (unfinished.empty()) {
      worker_->drain();
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = flags;
      void* r = api_.ep_close_nbx(ep_, &p);
      if (r && !UCS_PTR_IS_ERR(r)) worker_->retire(r, std::move(ep_state_));
    } else {
      STRATA_INFO(kLogNet,
                  "rank %d: %zu ucx request(s) with rank %d unfinished at close; the endpoint closes when "
                  "they finish",
                  me_, unfinished.size(), peer_);
      worker_->deferClose(ep_, std::move(unfinished), std::move(ep_state_));
    }
    ep_ = nullptr;
  } else if (!unfinished.empty()) {
    std::lock_guard<std::mutex> lk(mu_);
    for (void* q : unfinished) api_.request_free(q);
    worker_->abandonRequest();
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
    STRATA_INFO(kLogNet, "rank %d: ucx requests to/from rank %d still pending at close; leaking their buffers", me_,
                peer_);
    (void)sendBuf_.release();
    (void)recvBuf_.release();
  }
  peerWatch_.reset();
}

}  // namespace ucx
}  // namespace strata
