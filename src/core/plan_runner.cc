#include "core/plan_runner.h"

#include <algorithm>
#include <cstring>

#include "util/error.h"

namespace strata {

PlanRunner::PlanRunner(const Plan& plan, std::span<void* const> buffers, strataDataType_t dtype, ReduceKind op,
                       size_t pieceBytes, std::function<Connection*(int, int)> connFor, PlanStamps stamps)
    : plan_(plan),
      buffers_(buffers),
      dtype_(dtype),
      elemSize_(dtypeSize(dtype)),
      op_(op),
      pieceElems_(std::max<size_t>(1, pieceBytes / std::max<size_t>(1, dtypeSize(dtype)))),
      connFor_(std::move(connFor)),
      stamps_(stamps),
      nConns_(static_cast<size_t>(std::max(plan.nranks, 0)) * static_cast<size_t>(planChannels(plan))),
      nranks_(static_cast<size_t>(std::max(plan.nranks, 0))),
      nLanes_(plan.lanes.size()),
      lanesLeft_(plan.lanes.size()) {
  if (nConns_ <= kInlinePeers) {
    conns_ = connInline_.data();
    std::fill_n(conns_, nConns_, nullptr);
  } else {
    connHeap_.assign(nConns_, nullptr);
    conns_ = connHeap_.data();
  }
  if (nLanes_ <= kInlineLanes) {
    lanes_ = laneInline_.data();
  } else {
    laneHeap_.resize(nLanes_);
    lanes_ = laneHeap_.data();
  }
  if (elemSize_ == 0) throw InternalError("PlanRunner: invalid dtype");
  // Lanes with no ops are done from the start.
  for (size_t l = 0; l < plan_.lanes.size(); ++l)
    if (plan_.lanes[l].empty()) --lanesLeft_;
}

void PlanRunner::rearm(std::span<void* const> buffers, strataDataType_t dtype, ReduceKind op, PlanStamps stamps) {
  if (dtypeSize(dtype) != elemSize_) throw InternalError("PlanRunner::rearm: another element size");
  buffers_ = buffers;
  dtype_ = dtype;
  op_ = op;
  stamps_ = stamps;
  std::fill_n(conns_, nConns_, nullptr);
  lanesLeft_ = nLanes_;
  for (size_t l = 0; l < nLanes_; ++l) {
    lanes_[l] = LaneState{};
    if (plan_.lanes[l].empty()) --lanesLeft_;
  }
}

Connection* PlanRunner::conn(int peer, int channel) {
  Connection*& c = conns_[static_cast<size_t>(channel) * nranks_ + static_cast<size_t>(peer)];
  if (!c) c = connFor_(peer, channel);
  return c;
}

char* PlanRunner::addr(const Region& r, size_t at) const {
  void* base = static_cast<size_t>(r.buf) < buffers_.size() ? buffers_[static_cast<size_t>(r.buf)] : nullptr;
  if (!base) throw InternalError(strprintf("plan touches buffer %d, which was not provided", r.buf));
  return static_cast<char*>(base) + (r.offset + at) * elemSize_;
}

const MsgStamp& PlanRunner::stampOf(std::span<const MsgStamp> stamps, const Op& op) {
  static const MsgStamp kNone{};
  if (stamps.size() == 1) return stamps[0];  // one call: every collective
  if (stamps.empty()) return kNone;
  // Both regions of an op belong to one call; kSend and kRecvReduceSend have no destination region.
  const bool hasDst = op.kind != OpKind::kSend && op.kind != OpKind::kRecvReduceSend;
  const size_t call = static_cast<size_t>(hasDst ? op.dst.buf : op.src.buf) / kBuffersPerColl;
  return stamps[std::min(call, stamps.size() - 1)];
}

bool PlanRunner::runPiece(const Op& op, size_t at, size_t n) {
  const size_t bytes = n * elemSize_;
  switch (op.kind) {
    case OpKind::kSend: {
      Connection* c = conn(op.sendPeer, op.channel);
      void* out = c->trySendReserve(bytes);
      if (!out) return false;
      if (sendsRef(op, bytes, c)) {
        c->sendCommitRef(addr(op.src, at), bytes, stampOf(stamps_.send, op));
        return true;
      }
      std::memcpy(out, addr(op.src, at), bytes);
      c->sendCommit(bytes, stampOf(stamps_.send, op));
      return true;
    }
    case OpKind::kRecv: {
      Connection* c = conn(op.recvPeer, op.channel);
      char* dst = addr(op.dst, at);
      const void* in = c->tryRecvPeekInto(dst, bytes, stampOf(stamps_.expect, op));
      if (!in) return false;
      if (in != dst) std::memcpy(dst, in, bytes);
      c->recvRelease();
      return true;
    }
    case OpKind::kRecvReduce: {
      Connection* c = conn(op.recvPeer, op.channel);
      const void* in = c->tryRecvPeek(bytes, stampOf(stamps_.expect, op));
      if (!in) return false;
      reduce2(addr(op.dst, at), in, addr(op.src, at), n, dtype_, op_);
      c->recvRelease();
      return true;
    }
    case OpKind::kRecvReduceSend:
    case OpKind::kRecvReduceCopySend:
    case OpKind::kRecvCopySend: {
      Connection* rc = conn(op.recvPeer, op.channel);
      Connection* sc = conn(op.sendPeer, op.channel);
      // A forward receives into its destination first (one copy when the message is a reference), then sends
      // from there.
      char* fwd = op.kind == OpKind::kRecvCopySend ? addr(op.dst, at) : nullptr;
      const void* in = fwd ? rc->tryRecvPeekInto(fwd, bytes, stampOf(stamps_.expect, op))
                           : rc->tryRecvPeek(bytes, stampOf(stamps_.expect, op));
      if (!in) return false;
      void* out = sc->trySendReserve(bytes);
      if (!out) return false;  // the peeked message stays first in line; we come back for it
      if (op.kind == OpKind::kRecvReduceSend) {
        // Fused: reduce straight into the next peer's buffer, no local write.
        reduce2(out, in, addr(op.src, at), n, dtype_, op_);
      } else if (op.kind == OpKind::kRecvReduceCopySend) {
        char* dst = addr(op.dst, at);
        reduce2(dst, in, addr(op.src, at), n, dtype_, op_);
        if (sendsRef(op, bytes, sc)) {
          // The next rank reads the reduced piece from dst (all-reduce's gather half at two ranks).
          sc->sendCommitRef(dst, bytes, stampOf(stamps_.send, op));
          rc->recvRelease();
          return true;
        }
        std::memcpy(out, dst, bytes);
      } else if (sendsRef(op, bytes, sc)) {
        if (in != fwd) std::memcpy(fwd, in, bytes);
        sc->sendCommitRef(fwd, bytes, stampOf(stamps_.send, op));
        rc->recvRelease();
        return true;
      } else {
        std::memcpy(out, in, bytes);
        if (in != fwd) std::memcpy(fwd, in, bytes);
      }
      sc->sendCommit(bytes, stampOf(stamps_.send, op));
      rc->recvRelease();
      return true;
    }
    case OpKind::kCopySend: {
      // The local copy reads the piece from cache right after the send pulled it from memory.
      Connection* c = conn(op.sendPeer, op.channel);
      void* out = c->trySendReserve(bytes);
      if (!out) return false;
      const char* src = addr(op.src, at);
      char* dst = addr(op.dst, at);
      if (sendsRef(op, bytes, c)) {
        c->sendCommitRef(src, bytes, stampOf(stamps_.send, op));
        if (dst != src) std::memcpy(dst, src, bytes);
        return true;
      }
      std::memcpy(out, src, bytes);
      if (dst != src) std::memcpy(dst, src, bytes);
      c->sendCommit(bytes, stampOf(stamps_.send, op));
      return true;
    }
    case OpKind::kCopy: {
      char* dst = addr(op.dst, at);
      const char* src = addr(op.src, at);
      if (dst != src) std::memmove(dst, src, bytes);
      return true;
    }
    case OpKind::kReduceLocal: {
      char* dst = addr(op.dst, at);
      reduce2(dst, dst, addr(op.src, at), n, dtype_, op_);
      return true;
    }
    case OpKind::kNop: return true;  // no elements: advanceLane never gets here
  }
  throw InternalError("PlanRunner: unknown op kind");
}

bool PlanRunner::advanceLane(size_t l) {
  LaneState& st = lanes_[l];
  const std::vector<Op>& ops = plan_.lanes[l];
  bool moved = false;
  while (st.op < ops.size()) {
    const Op& op = ops[st.op];
    // A cross-lane dependency: wait (this lane only) until the other lane has completed the op it names.
    if (st.piece == 0 && !dependencyMet(op)) return moved;
    const size_t total = op.count();
    const bool local = op.kind == OpKind::kCopy || op.kind == OpKind::kReduceLocal;
    if (total > st.piece) {
      // Local work goes piece by piece like communication, so a long copy in its own lane overlaps the
      // other lanes' transfers instead of stalling them (and the peers waiting on them).
      const size_t left = total - st.piece;
      const size_t n = std::min(local ? pieceElems_ * 4 : pieceElems_, left);
      if (!runPiece(op, st.piece, n)) return moved;
      moved = true;
      st.piece += n;
    }
    if (st.piece >= total) {
      ++st.op;
      st.piece = 0;
      moved = true;  // a nop moves no element, but the lanes waiting for it may go on
    } else if (local) {
      return true;  // yield to the other lanes between local pieces
    }
  }
  --lanesLeft_;
  return true;
}

bool PlanRunner::progress() {
  bool moved = false;
  for (size_t p = 0; p < nConns_; ++p)
    if (conns_[p]) moved |= conns_[p]->progress();
  for (size_t l = 0; l < nLanes_; ++l)
    if (lanes_[l].op < plan_.lanes[l].size()) moved |= advanceLane(l);
  return moved;
}

std::vector<int> PlanRunner::stalledPeers() const {
  std::vector<int> peers;
  for (size_t l = 0; l < nLanes_; ++l) {
    if (lanes_[l].op >= plan_.lanes[l].size()) continue;
    const Op& op = plan_.lanes[l][lanes_[l].op];
    if (lanes_[l].piece == 0 && !dependencyMet(op)) continue;  // waits on this rank, not on a peer
    if (op.recvPeer >= 0) peers.push_back(op.recvPeer);
    if (op.sendPeer >= 0) peers.push_back(op.sendPeer);
  }
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  return peers;
}

std::string PlanRunner::describeStall() const {
  std::string out;
  for (size_t l = 0; l < nLanes_; ++l) {
    if (lanes_[l].op >= plan_.lanes[l].size()) continue;
    const Op& op = plan_.lanes[l][lanes_[l].op];
    if (!out.empty()) out += "; ";
    out += strprintf("lane %zu op %zu/%zu %s", l, lanes_[l].op, plan_.lanes[l].size(), opKindName(op.kind));
    if (op.recvPeer >= 0) out += strprintf(" from rank %d", op.recvPeer);
    if (op.sendPeer >= 0) out += strprintf(" to rank %d", op.sendPeer);
    if (op.channel != 0) out += strprintf(" on channel %u", op.channel);
    if (lanes_[l].piece == 0 && !dependencyMet(op))
      out += strprintf(" waiting for lane %d to finish op %u", op.afterLane, op.afterOps - 1);
    out += strprintf(" (%zu/%zu elements done)", lanes_[l].piece, op.count());
  }
  return out;
}

}  // namespace strata
