// Validation, algorithm choice and execution of one collective call on a CommImpl.
#include <algorithm>
#include <array>
#include <cstring>

#include "core/communicator.h"
#include "kernels/reduce.h"
#include "util/error.h"
#include "util/log.h"

namespace strata {
namespace {

bool rooted(CollKind k) { return k == CollKind::kBroadcast || k == CollKind::kReduce; }
bool reducing(CollKind k) {
  return k == CollKind::kAllReduce || k == CollKind::kReduceScatter || k == CollKind::kReduce;
}

// Elements of sendbuff and recvbuff a call touches on this rank.
void bufferCounts(const CollCall& c, int n, int rank, size_t* sendElems, size_t* recvElems) {
  const size_t N = static_cast<size_t>(n);
  switch (c.kind) {
    case CollKind::kAllReduce: *sendElems = c.count; *recvElems = c.count; break;
    case CollKind::kReduceScatter: *sendElems = c.count * N; *recvElems = c.count; break;
    case CollKind::kAllGather: *sendElems = c.count; *recvElems = c.count * N; break;
    case CollKind::kBroadcast: *sendElems = rank == c.root ? c.count : 0; *recvElems = c.count; break;
    case CollKind::kReduce: *sendElems = c.count; *recvElems = rank == c.root ? c.count : 0; break;
    case CollKind::kAllToAll: *sendElems = c.count * N; *recvElems = c.count * N; break;
    case CollKind::kSend: *sendElems = c.count; *recvElems = 0; break;
    case CollKind::kRecv: *sendElems = 0; *recvElems = c.count; break;
    case CollKind::kBarrier: *sendElems = 0; *recvElems = 0; break;
  }
}

// True when the call is "in place" as NCCL defines it for this collective.
bool isInPlace(const CollCall& c, int rank, size_t esize) {
  const char* s = static_cast<const char*>(c.sendbuff);
  const char* r = static_cast<const char*>(c.recvbuff);
  if (!s || !r) return false;
  switch (c.kind) {
    case CollKind::kReduceScatter: return r == s + static_cast<size_t>(rank) * c.count * esize;
    case CollKind::kAllGather: return s == r + static_cast<size_t>(rank) * c.count * esize;
    default: return s == r;
  }
}

// Every peer a plan talks to, ascending (the order connections are set up in).
std::vector<int> planPeers(const Plan& plan) {
  std::vector<int> peers;
  for (const auto& lane : plan.lanes)
    for (const Op& op : lane) {
      if (op.recvPeer >= 0) peers.push_back(op.recvPeer);
      if (op.sendPeer >= 0) peers.push_back(op.sendPeer);
    }
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  return peers;
}

}  // namespace

void CommImpl::bufferElems(const CollCall& c, size_t* sendElems, size_t* recvElems) const {
  bufferCounts(c, nranks_, rank_, sendElems, recvElems);
}

void CommImpl::validate(const CollCall& c) const {
  const char* name = collName(c.kind);
  if (!dtypeValid(static_cast<int>(c.dtype)))
    throw InvalidArgument(strprintf("rank %d: %s: invalid datatype %d", rank_, name, static_cast<int>(c.dtype)));
  if (reducing(c.kind)) {
    const int op = static_cast<int>(c.op);
    bool ok = op >= 0 && op < strataNumOps;
    if (!ok && op >= strataNumOps) {
      std::lock_guard<std::mutex> lk(redOpMutex_);
      const size_t i = static_cast<size_t>(op - strataNumOps);
      ok = i < preMulSums_.size() && preMulSums_[i].live;
    }
    if (!ok) throw InvalidArgument(strprintf("rank %d: %s: invalid reduction op %d", rank_, name, op));
  }
  if (rooted(c.kind) && (c.root < 0 || c.root >= nranks_))
    throw InvalidArgument(strprintf("rank %d: %s: root %d is not a rank of this %d-rank communicator", rank_, name,
                                    c.root, nranks_));
  if ((c.kind == CollKind::kSend || c.kind == CollKind::kRecv) && (c.peer < 0 || c.peer >= nranks_))
    throw InvalidArgument(strprintf("rank %d: %s: peer %d is not a rank of this %d-rank communicator", rank_, name,
                                    c.peer, nranks_));
  const size_t esize = dtypeSize(c.dtype);
  size_t totalBytes;  // count x esize x nranks must fit (checked without a division: this runs on every call)
  if (__builtin_mul_overflow(c.count, esize * static_cast<size_t>(nranks_), &totalBytes))
    throw InvalidArgument(strprintf("rank %d: %s: count %zu of %s overflows the address space for %d ranks", rank_,
                                    name, c.count, dtypeName(c.dtype), nranks_));
  size_t sendElems = 0, recvElems = 0;
  bufferCounts(c, nranks_, rank_, &sendElems, &recvElems);
  if (sendElems && !c.sendbuff)
    throw InvalidArgument(strprintf("rank %d: %s: sendbuff is NULL with count %zu", rank_, name, c.count));
  if (recvElems && !c.recvbuff)
    throw InvalidArgument(strprintf("rank %d: %s: recvbuff is NULL with count %zu", rank_, name, c.count));
  // Overlap other than NCCL's in-place layout would silently corrupt results.
  if (sendElems && recvElems && !isInPlace(c, rank_, esize)) {
    const char* s = static_cast<const char*>(c.sendbuff);
    const char* r = static_cast<const char*>(c.recvbuff);
    if (s < r + recvElems * esize && r < s + sendElems * esize)
      throw InvalidArgument(strprintf("rank %d: %s: sendbuff and recvbuff overlap but are not in place", rank_, name));
  }
}

Prediction CommImpl::chooseAlgorithm(const CollCall& c) const { return selector_->choose(c.kind, callBytes(c)); }

size_t CommImpl::callBytes(const CollCall& c) const {
  const size_t bytes = c.count * dtypeSize(c.dtype);
  const bool perRank = c.kind == CollKind::kReduceScatter || c.kind == CollKind::kAllGather || c.kind == CollKind::kAllToAll;
  return perRank ? bytes * static_cast<size_t>(nranks_) : bytes;
}

void CommImpl::executeCollective(const CollCall& call) {
  validate(call);
  const uint64_t seq = ++seq_;
  const size_t esize = dtypeSize(call.dtype);

  // Map the user op onto a kernel plus pre-scaling / post-division (NCCL's Avg and PreMulSum).
  EffectiveOp eff;
  if (reducing(call.kind)) {
    const int op = static_cast<int>(call.op);
    if (op < strataNumOps) {
      if (call.op == strataAvg) {
        if (dtypeIsFloat(call.dtype)) eff.preMul = 1.0 / nranks_;
        else eff.postDiv = static_cast<uint64_t>(nranks_);
      } else {
        eff.kind = static_cast<ReduceKind>(op);
      }
    } else {
      std::lock_guard<std::mutex> lk(redOpMutex_);
      eff.preMul = preMulSums_[static_cast<size_t>(op - strataNumOps)].scalar;
    }
  }

  CollArgs args;
  args.kind = call.kind;
  args.nranks = nranks_;
  args.rank = rank_;
  args.count = call.count;
  args.root = call.root;
  args.peer = call.peer;
  args.chunkElems = chunkElems(call.dtype);

  std::array<void*, kBuffersPerColl> buffers{};
  buffers[kBufSend] = const_cast<void*>(call.sendbuff);
  buffers[kBufRecv] = call.recvbuff;
  if (eff.preMul != 1.0 && call.sendbuff) {
    // Pre-multiplied inputs go through a private copy: the user's send buffer stays untouched.
    size_t sendElems = 0, recvElems = 0;
    bufferCounts(call, nranks_, rank_, &sendElems, &recvElems);
    if (preScaled_.size() < sendElems * esize) preScaled_.resize(sendElems * esize);
    scaleBy(preScaled_.data(), call.sendbuff, sendElems, call.dtype, eff.preMul);
    buffers[kBufSend] = preScaled_.data();
    args.inPlace = false;
  } else {
    args.inPlace = isInPlace(call, rank_, esize);
  }

  // The algorithm is a function of the key (the settings are fixed per communicator), so the selector
  // runs only when a plan is built.
  PlanKey key{static_cast<int>(call.kind), call.root, call.peer, args.inPlace ? 1 : 0, call.count, args.chunkElems,
              static_cast<int>(esize)};
  // Training loops repeat the same call: the last plan is checked before the map.
  CachedPlan* cached = lastPlan_ && lastPlanKey_ == key ? lastPlan_ : nullptr;
  if (!cached) {
    auto it = planCache_.find(key);
    if (it == planCache_.end()) {
      if (planCache_.size() > 256) planCache_.clear();
      auto fresh = std::make_unique<CachedPlan>();
      args.hostOf = hostIndex_;
      fresh->plan = makePlan(args, chooseAlgorithm(call).algorithm);
      fresh->peers = planPeers(fresh->plan);
      it = planCache_.emplace(key, std::move(fresh)).first;
    }
    cached = it->second.get();
    lastPlan_ = cached;
    lastPlanKey_ = key;
  }
  OpLabel what{rank_, collName(call.kind), seq, call.count, call.dtype, cached->plan.algorithm.c_str(), 0};
  STRATA_TRACE(kLogColl, "%s", what.str().c_str());
  executePlan(cached->plan, cached->peers, buffers, call.dtype, eff.kind, what);

  if (eff.postDiv != 1) {
    size_t sendElems = 0, recvElems = 0;
    bufferCounts(call, nranks_, rank_, &sendElems, &recvElems);
    if (recvElems) divideBy(call.recvbuff, call.recvbuff, recvElems, call.dtype, eff.postDiv);
  }
}

void CommImpl::executeP2P(const std::vector<CollCall>& calls) {
  // One plan for the whole group: a lane per (peer, direction) keeps each connection's messages in issue
  // order while different peers proceed concurrently. Sends to self are matched with receives from self
  // in order and become local copies.
  Plan plan;
  plan.rank = rank_;
  plan.nranks = nranks_;
  plan.algorithm = "p2p";
  std::vector<void*> buffers;
  std::map<std::pair<int, int>, size_t> laneOf;  // (peer, 0=send/1=recv) -> lane
  std::vector<size_t> selfSends, selfRecvs;
  const uint64_t seq = ++seq_;
  OpLabel what{rank_, "send/recv group", seq, 0, strataUint8, "p2p", calls.size()};
  strataDataType_t dtype = calls.front().dtype;
  for (size_t i = 0; i < calls.size(); ++i) {
    const CollCall& c = calls[i];
    validate(c);
    if (dtypeSize(c.dtype) != dtypeSize(dtype)) {
      // Mixed element sizes in one group: run this group's ops in byte units.
      dtype = strataUint8;
    }
  }
  const size_t esize = dtypeSize(dtype);
  // A send whose memory a receive of the same group overwrites (nccl-tests' in-place sendrecv) would race
  // with it: such sends go from a private copy taken before anything is received.
  std::vector<std::vector<char>> staged;
  auto overlapsARecv = [&](const CollCall& s) {
    const char* a = static_cast<const char*>(s.sendbuff);
    const size_t an = s.count * dtypeSize(s.dtype);
    for (const CollCall& r : calls) {
      if (r.kind != CollKind::kRecv || r.count == 0) continue;
      const char* b = static_cast<const char*>(r.recvbuff);
      if (a < b + r.count * dtypeSize(r.dtype) && b < a + an) return true;
    }
    return false;
  };
  for (size_t i = 0; i < calls.size(); ++i) {
    const CollCall& c = calls[i];
    const size_t elems = c.count * dtypeSize(c.dtype) / esize;
    const int base = static_cast<int>(buffers.size());
    if (c.kind == CollKind::kSend && c.count > 0 && overlapsARecv(c)) {
      const char* src = static_cast<const char*>(c.sendbuff);
      staged.emplace_back(src, src + c.count * dtypeSize(c.dtype));
      buffers.push_back(staged.back().data());
    } else {
      buffers.push_back(const_cast<void*>(c.sendbuff));
    }
    buffers.push_back(c.recvbuff);
    if (elems == 0) continue;
    if (c.peer == rank_) {
      (c.kind == CollKind::kSend ? selfSends : selfRecvs).push_back(i);
      continue;
    }
    const int dir = c.kind == CollKind::kSend ? 0 : 1;
    auto [it, fresh] = laneOf.emplace(std::make_pair(c.peer, dir), plan.lanes.size());
    if (fresh) plan.lanes.emplace_back();
    Op op;
    if (dir == 0) {
      op.kind = OpKind::kSend;
      op.sendPeer = c.peer;
      op.src = Region{base + kBufSend, 0, elems};
    } else {
      op.kind = OpKind::kRecv;
      op.recvPeer = c.peer;
      op.dst = Region{base + kBufRecv, 0, elems};
    }
    plan.lanes[it->second].push_back(op);
  }
  if (selfSends.size() != selfRecvs.size())
    throw InvalidUsage(strprintf("rank %d: %zu send(s) to self but %zu recv(s) from self in one group", rank_,
                                 selfSends.size(), selfRecvs.size()));
  if (!selfSends.empty()) plan.lanes.emplace_back();
  for (size_t k = 0; k < selfSends.size(); ++k) {
    const CollCall& s = calls[selfSends[k]];
    const CollCall& r = calls[selfRecvs[k]];
    const size_t sb = s.count * dtypeSize(s.dtype), rb = r.count * dtypeSize(r.dtype);
    if (sb != rb)
      throw InvalidUsage(strprintf("rank %d: send to self of %zu bytes matched with recv from self of %zu bytes", rank_,
                                   sb, rb));
    Op op;
    op.kind = OpKind::kCopy;
    op.src = Region{static_cast<int>(2 * selfSends[k]) + kBufSend, 0, sb / esize};
    op.dst = Region{static_cast<int>(2 * selfRecvs[k]) + kBufRecv, 0, sb / esize};
    plan.lanes.back().push_back(op);
  }
  if (plan.lanes.empty()) return;
  // Region buffer indices here are 2 per call (send, recv); executePlan only adds scratch for index 2 when
  // the plan asks for scratch, which p2p plans never do.
  executePlan(plan, planPeers(plan), buffers, dtype, ReduceKind::kSum, what);
}

}  // namespace strata
