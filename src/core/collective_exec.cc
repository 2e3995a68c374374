#include "core/collective_exec.h"

#include <algorithm>
#include <array>

#include "collectives/p2p_group.h"
#include "core/any_source.h"
#include "kernels/reduce.h"
#include "util/error.h"
#include "util/log.h"

namespace strata {
namespace {

// Every link (ConnectionTable: channel x nranks + peer) a plan talks over, ascending (the order connections are set
// up in).
std::vector<int> planPeers(const Plan& plan) {
  std::vector<int> peers;
  for (const auto& lane : plan.lanes)
    for (const Op& op : lane) {
      if (op.recvPeer >= 0) peers.push_back(op.channel * plan.nranks + op.recvPeer);
      if (op.sendPeer >= 0) peers.push_back(op.channel * plan.nranks + op.sendPeer);
    }
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  return peers;
}

}  // namespace

CollectiveExecutor::CollectiveExecutor(int rank, int nranks, std::vector<int> hostOf, size_t pieceBytes,
                                       size_t chunkBytes, const Selector& selector, const RedOpTable& ops,
                                       ConnectionTable& conns, Progress& progress, FlightRecorder& recorder)
    : rank_(rank),
      nranks_(nranks),
      hostOf_(std::move(hostOf)),
      pieceBytes_(pieceBytes),
      chunkBytes_(chunkBytes),
      selector_(selector),
      ops_(ops),
      conns_(conns),
      progress_(progress),
      recorder_(recorder),
      sendsTo_(static_cast<size_t>(nranks), 0),
      recvsFrom_(static_cast<size_t>(nranks), 0) {}

void CollectiveExecutor::execute(std::span<const CollCall> calls) {
  if (calls.size() == 1 && !isP2P(calls[0].kind)) {  // a blocking collective: the common case
    runCollective(calls[0]);
    return;
  }
  std::vector<CollCall> p2p;
  for (const CollCall& c : calls) {
    if (!isAnySource(c)) continue;
    if (calls.size() > 1)
      throw InvalidUsage(
          strprintf("rank %d: a receive from any source must be alone in its group (this one has %zu "
                    "calls): which peer it takes is known only once a message has arrived",
                    rank_, calls.size()));
    runRecvAny(c);
    return;
  }
  for (const CollCall& c : calls) {
    if (isP2P(c.kind)) p2p.push_back(c);
    else runCollective(c);
  }
  if (!p2p.empty()) runP2P(p2p);
}

void CollectiveExecutor::runCollective(const CollCall& call) {
  const uint64_t seq = seq_.load(std::memory_order_relaxed) + 1;
  seq_.store(seq, std::memory_order_relaxed);
  const size_t esize = dtypeSize(call.dtype);
  // NCCL's Avg and PreMulSum: a kernel plus pre-scaling or post-division.
  const EffectiveOp eff = isReducing(call.kind) ? ops_.effective(call.op, call.dtype, nranks_) : EffectiveOp{};

  CollArgs args = makeCollArgs(call.kind, nranks_, rank_, call.count, chunkElems(call.dtype), call.root, call.peer);

  std::array<void*, kBuffersPerColl> buffers{};
  buffers[kBufSend] = const_cast<void*>(call.sendbuff);
  buffers[kBufRecv] = call.recvbuff;
  if (eff.preScale && call.sendbuff) {
    // Pre-multiplied inputs go through a private copy: the user's send buffer stays untouched.
    size_t sendElems = 0, recvElems = 0;
    callBufferElems(call, nranks_, rank_, &sendElems, &recvElems);
    if (preScaled_.size() < sendElems * esize) preScaled_.resize(sendElems * esize);
    if (dtypeIsFloat(call.dtype)) scaleBy(preScaled_.data(), call.sendbuff, sendElems, call.dtype, eff.preMul);
    else multiplyBy(preScaled_.data(), call.sendbuff, sendElems, call.dtype, eff.preMulInt);
    buffers[kBufSend] = preScaled_.data();
    args.inPlace = false;
  } else {
    args.inPlace = callInPlace(call, rank_, esize);
  }

  const PlanKey key{static_cast<int>(call.kind), call.root,  call.peer,
                    args.inPlace ? 1 : 0,        call.count, args.chunkElems,
                    static_cast<int>(esize)};
  // Training loops repeat the same call: the last plan is checked before the map.
  CachedPlan* cached = lastPlan_ && lastPlanKey_ == key ? lastPlan_ : nullptr;
  if (!cached) {
    auto it = planCache_.find(key);
    if (it == planCache_.end()) {
      if (planCache_.size() > 256) planCache_.clear();
      auto fresh = std::make_unique<CachedPlan>();
      args.hostOf = hostOf_;
      fresh->plan =
          selector_.makePlan(args, selector_.choose(call.kind, callBytes(call, nranks_), args.inPlace).algorithm);
      fresh->peers = planPeers(fresh->plan);
      if (SendRefs::worthAnalysing(fresh->plan, esize, pieceBytes_)) {
        // In place, the send buffer is part of the receive buffer: a send from it races with writes there.
        std::array<BufferAlias, 1> alias{};
        size_t nAlias = 0;
        if (args.inPlace) {
          const auto delta = static_cast<const char*>(call.sendbuff) - static_cast<const char*>(call.recvbuff);
          alias[nAlias++] =
              BufferAlias{kBufSend, kBufRecv, static_cast<int64_t>(delta / static_cast<ptrdiff_t>(esize))};
        }
        fresh->refs = SendRefs(fresh->plan, std::span<const BufferAlias>(alias.data(), nAlias));
        // A reference the peer reduces gains nothing (see SendRefs): its plan says which those are.
        fresh->refs.dropReducedByPeers(fresh->plan, [&](int peer) {
          CollArgs theirs = args;
          theirs.rank = peer;
          return selector_.makePlan(theirs, fresh->plan.algorithm);
        });
      }
      it = planCache_.emplace(key, std::move(fresh)).first;
    }
    cached = it->second.get();
    lastPlan_ = cached;
    lastPlanKey_ = key;
  }
  const OpLabel what{rank_, call.kind, nullptr, seq, call.count, call.dtype, cached->plan.algorithm.c_str(), 0};
  STRATA_TRACE(kLogColl, "%s", what.str().c_str());
  const MsgStamp stamp = collStamp(call, static_cast<uint32_t>(seq));
  FlightScope flight(recorder_, recorder_.start(seq, call.kind, call.dtype, call.op, call.count,
                                                isRooted(call.kind) ? call.root : -1, -1, what.algorithm));
  runPlan(cached->plan, cached->peers, buffers, call.dtype, eff.kind, what, PlanStamps{{&stamp, 1}, {&stamp, 1}},
          &cached->runner, &cached->refs);

  if (eff.postDiv != 1) {
    size_t sendElems = 0, recvElems = 0;
    callBufferElems(call, nranks_, rank_, &sendElems, &recvElems);
    if (recvElems) divideBy(call.recvbuff, call.recvbuff, recvElems, call.dtype, eff.postDiv);
  }
  flight.done();
}

void CollectiveExecutor::runP2P(std::span<const CollCall> calls) {
  const uint64_t group = groups_.load(std::memory_order_relaxed) + 1;
  groups_.store(group, std::memory_order_relaxed);
  const OpLabel what{rank_, CollKind::kSend, "send/recv group", group, 0, strataUint8, "p2p", calls.size()};
  // Mixed element sizes in one group run in byte units.
  strataDataType_t dtype = calls.front().dtype;
  for (const CollCall& c : calls)
    if (dtypeSize(c.dtype) != dtypeSize(dtype)) dtype = strataUint8;
  const size_t esize = dtypeSize(dtype);
  std::vector<P2PCall> members;
  std::vector<void*> buffers;  // kBuffersPerColl per call, as p2pGroupPlan lays them out
  std::vector<std::vector<char>> staged;
  // Call k's stamps: what its messages carry (a send) or what it expects (a receive). The n-th send to a peer
  // meets that peer's n-th receive from this rank, as NCCL matches them.
  std::vector<MsgStamp> sendStamps(calls.size()), expectStamps(calls.size());
  members.reserve(calls.size());
  buffers.reserve(calls.size() * kBuffersPerColl);
  for (const CollCall& c : calls) {
    const bool send = c.kind == CollKind::kSend;
    const size_t k = members.size();
    const uint64_t bytes = c.count * dtypeSize(c.dtype);
    if (send) sendStamps[k] = p2pStamp(++sendsTo_[static_cast<size_t>(c.peer)], bytes);
    else expectStamps[k] = p2pStamp(++recvsFrom_[static_cast<size_t>(c.peer)], bytes);
    members.push_back(P2PCall{send, c.peer, c.count * dtypeSize(c.dtype) / esize});
    void* sendbuff = const_cast<void*>(c.sendbuff);
    // A send whose memory a receive of the same group overwrites would race with it: it goes from a private copy
    // taken before anything is received.
    if (send && c.count > 0 && sendOverlapsARecv(c, calls)) {
      const char* src = static_cast<const char*>(c.sendbuff);
      staged.emplace_back(src, src + c.count * dtypeSize(c.dtype));
      sendbuff = staged.back().data();
    }
    buffers.push_back(sendbuff);
    buffers.push_back(c.recvbuff);
    buffers.push_back(nullptr);  // no scratch
  }
  const Plan plan = p2pGroupPlan(rank_, nranks_, members, esize);
  if (plan.lanes.empty()) return;
  FlightScope flight(recorder_, recorder_.start(what.seq, CollKind::kSend, dtype, strataSum, calls.size(), -1,
                                                calls.front().peer, "p2p"));
  // Sends copy (no references): a send that fits the connection completes before its receive is posted, which
  // programs that send before they receive in separate groups rely on; a reference would hold it until then.
  runPlan(plan, planPeers(plan), buffers, dtype, ReduceKind::kSum, what, PlanStamps{sendStamps, expectStamps},
          /*cachedRunner=*/nullptr, /*refs=*/nullptr);
  flight.done();
}

void CollectiveExecutor::runRecvAny(const CollCall& call) {
  const OpLabel what{
      rank_, CollKind::kRecv, "receive from any source", groups_.load() + 1, call.count, call.dtype, "p2p", 1};
  AnySourceProbe probe(rank_, nranks_, conns_, recvsFrom_, (lastAnySource_ + 1) % nranks_);
  progress_.drive(probe, what);
  const int src = probe.source();
  const uint64_t bytes = call.count * dtypeSize(call.dtype);
  if (probe.stamp().lo != bytes)
    throw InvalidUsage(
        strprintf("rank %d: receive from any source of %llu bytes (count %zu, %s) matched rank %d's %s "
                  "to this rank: the sizes of a send and its receive must match",
                  rank_, static_cast<unsigned long long>(bytes), call.count, dtypeName(call.dtype), src,
                  describeStamp(probe.stamp()).c_str()));
  lastAnySource_ = src;
  CollCall fromSrc = call;
  fromSrc.peer = src;
  fromSrc.source = nullptr;
  runP2P(std::span<const CollCall>(&fromSrc, 1));
  *call.source = src;
}

void CollectiveExecutor::runPlan(const Plan& plan, const std::vector<int>& peers, std::span<void*> buffers,
                                 strataDataType_t dtype, ReduceKind op, const OpLabel& what, PlanStamps stamps,
                                 std::unique_ptr<PlanRunner>* cachedRunner, const SendRefs* refs) {
  conns_.ensure(peers);
  if (plan.scratchElems) {
    if (buffers.size() <= static_cast<size_t>(kBufScratch))
      throw InternalError(
          strprintf("rank %d: %s: the plan needs scratch but has no scratch buffer slot", rank_, what.str().c_str()));
    const size_t bytes = plan.scratchElems * dtypeSize(dtype);
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    buffers[kBufScratch] = scratch_.data();
  }
  std::unique_ptr<PlanRunner> local;
  std::unique_ptr<PlanRunner>& slot = cachedRunner ? *cachedRunner : local;
  if (slot) {
    slot->rearm(buffers, dtype, op, stamps);
  } else {
    slot = std::make_unique<PlanRunner>(
        plan, buffers, dtype, op, pieceBytes_, [this](int peer, int channel) { return conns_.get(peer, channel); },
        stamps);
    slot->allowSendRefs(refs, kMinRefBytes);  // refs, like the plan, live in the cache entry with the runner
  }
  PlanRunner& runner = *slot;
  try {
    progress_.drive(runner, what);
  } catch (const StampMismatch& m) {
    // The ranks disagree about the call: each one that receives a message of another call ends up here, and the
    // communicator's failure report (CommImpl::fail) carries this text to the others.
    throw InvalidUsage(
        strprintf("%s: rank %d is running another call: this rank expects a message of %s, rank %d "
                  "sent one of %s",
                  what.str().c_str(), m.peer, describeStamp(m.expected).c_str(), m.peer, describeStamp(m.got).c_str()));
  }
  // A blocking call returns only once its messages have left this process: a peer must never wait on bytes
  // parked in our staging buffers while we compute. Every receiver of this plan is in this plan, so this cannot
  // wait in a cycle.
  FlushWait flush(conns_, nranks_);
  if (!flush.done()) progress_.drive(flush, what, " (flushing sends)");
}

}  // namespace strata
