// DeviceEngine across hosts (DESIGN.md, "Across hosts"): a device all-reduce over H hosts of L ranks each runs as the
// hierarchical plan, with its intra-host phases in the device executor and only each rank's 1/L shard through host
// memory to the network and back:
//   1. reduce-scatter among this host's ranks (the executor, on the caller's stream): rank l of its host holds the
//      host's sum of shard l, in its place in recvbuff;
//   2. all-reduce of shard l among the H ranks with local index l, one per host (staged through pinned host memory,
//      on the engine's own stream): every rank holds the global sum of its shard;
//   3. all-gather among this host's ranks (the executor, on the caller's stream), in place.
// Avg of a float type and PreMulSum pre-multiply in phase 1 (by this communicator's scalar) and sum after it.
// Each phase is a call on a sub-communicator (HostSide::subgroup): the host's ranks, and the ranks with this rank's
// place on every host. A large call is cut into pieces that pipeline: while piece k crosses the network, the caller's
// stream reduce-scatters piece k + 1 and then all-gathers piece k - 1; events order the two streams.
#include <algorithm>
#include <tuple>

#include "engine/device_engine.h"
#include "engine/device_engine_detail.h"
#include "util/config.h"
#include "util/dtype.h"
#include "util/error.h"
#include "util/log.h"

namespace strata {

using namespace device_detail;

namespace {

constexpr size_t kHierChunksPerPiece = 4;  // a piece's shard is staged in this many STRATA_GPU_STAGE_CHUNK_BYTES chunks
constexpr size_t kHierMaxPieces = 64;
constexpr size_t kHierOps = 16;  // PreMulSum ops kept on the host's sub-communicator

}  // namespace

std::string DeviceEngine::hierRefusal(const CollCall& c) const {
  if (host_.oneHost()) return "the ranks are on one host";
  if (host_.config().gpuExecutor != 1)
    return "the device executor is off (STRATA_GPU_EXECUTOR=0; STRATA_GPU_EXECUTOR=1, the default, turns it on)";
  if (hierState_ == HierState::kOff) return "the hierarchical device path could not be set up on this communicator";
  if (c.kind != CollKind::kAllReduce && c.kind != CollKind::kReduceScatter && c.kind != CollKind::kAllGather)
    return strprintf("%s across hosts is staged whole", collName(c.kind));
  if (c.count == 0) return "a call of 0 elements has nothing to run";
  // Avg of a float type and PreMulSum pre-multiply each rank's input by this communicator's scalar, which the first
  // phase does (a PreMulSum of the host's sub-communicator). An integer Avg divides the whole sum, which no phase has.
  if (isReducing(c.kind) && host_.effectiveOp(c.op, c.dtype).postDiv != 1)
    return "an integer avg across hosts is staged whole";
  if (hierHostRanks_ < 2)
    return hierHostRanks_ == 0 ? "the hosts have different numbers of ranks" : "one rank per host";
  return {};
}

void DeviceEngine::setupHier() {
  const int me = host_.rank();
  // Both splits are collective over this communicator, in this order on every rank (each reaches its first
  // hierarchical call at the same call). Local index: this rank's place among its host's ranks.
  const int leader = host_.hostLeader(me);
  int localIndex = 0;
  for (int r = 0; r < me; ++r) localIndex += host_.hostLeader(r) == leader ? 1 : 0;
  std::shared_ptr<HostSide> local = host_.subgroup(leader, me);
  std::shared_ptr<HostSide> cross = host_.subgroup(localIndex, me);
  {
    std::lock_guard<std::mutex> lk(subMu_);
    hierLocal_ = std::move(local);
    hierCross_ = std::move(cross);
  }
  std::string why;
  if (!hierLocal_ || !hierCross_ || hierLocal_->size() != hierHostRanks_ || hierCross_->size() != hierHosts_ ||
      !hierLocal_->oneHost())
    why = "the sub-communicators do not have the hosts' shape";
  int e = 0;
  const char* step = "";
  auto attempt = [&](const char* name, auto call) {
    if (e != 0 || !why.empty()) return;
    step = name;
    e = call();
  };
  attempt("cudaStreamCreate", [&] { return api_.streamCreate(&hierStream_); });
  attempt("cudaEventCreate", [&] { return api_.eventCreate(&hierLocalDone_); });
  attempt("cudaEventCreate", [&] { return api_.eventCreate(&hierCrossDone_[0]); });
  attempt("cudaEventCreate", [&] { return api_.eventCreate(&hierCrossDone_[1]); });
  if (e != 0) why = strprintf("%s failed: %s (CUDA error %d)", step, api_.errorString(e), e);
  // Every rank takes the same path: if any rank could not set up, all stage their calls whole.
  const int32_t ok = why.empty() ? 1 : 0;
  std::vector<int32_t> all(static_cast<size_t>(host_.size()));
  host_.allGather(&ok, all.data(), sizeof ok);
  const auto bad = std::find(all.begin(), all.end(), 0);
  if (bad == all.end()) {
    hierState_ = HierState::kOn;
    hierRails_.assign(static_cast<size_t>(hierHostRanks_), {});
    std::vector<int> seen(static_cast<size_t>(host_.size()), 0);  // ranks met so far per host leader
    for (int r = 0; r < host_.size(); ++r)
      hierRails_[static_cast<size_t>(seen[static_cast<size_t>(host_.hostLeader(r))]++)].push_back(r);
    return;
  }
  hierState_ = HierState::kOff;
  if (why.empty())
    why = strprintf("rank %d could not set it up (its log says why)", static_cast<int>(bad - all.begin()));
  STRATA_WARN(kLogColl,
              "rank %d: hierarchical device collectives across hosts off (%s); device all-reduces, reduce-scatters "
              "and all-gathers across hosts are staged whole through host memory, which is slower",
              me, why.c_str());
}

void DeviceEngine::enqueueHier(const CollCall& c, void* stream) {
  const size_t es = dtypeSize(c.dtype);
  const size_t L = static_cast<size_t>(hierHostRanks_);
  const size_t l = static_cast<size_t>(hierLocal_->rank());
  if (!hierNoted_) {
    hierNoted_ = true;
    STRATA_INFO(kLogColl,
                "rank %d: device all-reduces, reduce-scatters and all-gathers across %d hosts run hierarchically: "
                "phases among a host's %zu ranks in the device executor, 1/%zu of the data staged between hosts",
                host_.rank(), hierHosts_, L, L);
  }
  // The ops: the first phase pre-multiplies as this communicator would (Avg: by 1/n, not 1/L); the cross-host phase
  // sums (or takes the max, ...) what it did.
  const EffectiveOp eff = isReducing(c.kind) ? host_.effectiveOp(c.op, c.dtype) : EffectiveOp{};
  const auto crossOp = static_cast<strataRedOp_t>(eff.kind);
  const strataRedOp_t localOp = eff.preScale ? hierLocalPreMul(eff) : crossOp;
  if (c.kind != CollKind::kAllReduce) {
    enqueueHierBlocks(c, stream, localOp, crossOp);
    return;
  }
  // Pieces of a multiple of L elements each, so that each rank's shard of a piece is staged in kHierChunksPerPiece
  // chunks, then the last count mod L elements as a piece of their own; the same on every rank (count, dtype and the
  // agreed settings).
  const size_t chunk = host_.config().gpuStageChunkBytes;
  const size_t whole = c.count / L * L;
  size_t pieces = 1;
  if (chunk > 0)
    pieces = std::clamp<size_t>((whole * es / L + kHierChunksPerPiece * chunk - 1) / (kHierChunksPerPiece * chunk), 1,
                                kHierMaxPieces);
  const size_t per = std::max<size_t>(1, (whole / L + pieces - 1) / pieces) * L;
  std::vector<std::pair<size_t, size_t>> spans;  // [lo, lo + m)
  for (size_t lo = 0; lo < whole; lo += per) spans.emplace_back(lo, std::min(per, whole - lo));
  if (whole < c.count) spans.emplace_back(whole, c.count - whole);

  auto call = [&](const std::shared_ptr<HostSide>& comm, CollKind kind, const void* send, void* recv, size_t count,
                  void* st) {
    CollCall p{kind, send, recv, count, c.dtype, comm == hierLocal_ ? localOp : crossOp, 0, -1};
    p.device = true;
    p.stream = st;
    comm->runDevice(std::span<const CollCall>(&p, 1));
  };
  // The all-gather still to run on the caller's stream for the piece before (after its cross-host phase).
  struct Gather {
    void* shard = nullptr;
    void* out = nullptr;
    size_t count = 0;
  } pending;
  int k = 0;
  for (const auto& [lo, m] : spans) {
    const char* send = static_cast<const char*>(c.sendbuff) + lo * es;
    char* recv = static_cast<char*>(c.recvbuff) + lo * es;
    const size_t q = m / L;
    // A piece of L q elements: the reduce-scatter leaves this rank's shard in its own place in recvbuff (in place
    // when sendbuff is recvbuff: NCCL's convention, recvbuff = sendbuff + rank * recvcount). The last count mod L
    // elements: an all-reduce among the host's ranks, then the same cross-host all-reduce on all of them.
    char* shard = q > 0 ? recv + l * q * es : recv;
    const size_t shardCount = q > 0 ? q : m;
    if (q > 0) {
      call(hierLocal_, CollKind::kReduceScatter, send, shard, q, stream);
    } else {
      call(hierLocal_, CollKind::kAllReduce, send, recv, m, stream);
    }
    check(api_.eventRecord(hierLocalDone_, stream), "cudaEventRecord (hierarchical all-reduce)");
    check(api_.streamWaitEvent(hierStream_, hierLocalDone_), "cudaStreamWaitEvent (hierarchical all-reduce)");
    call(hierCross_, CollKind::kAllReduce, shard, shard, shardCount, hierStream_);
    void* crossDone = hierCrossDone_[k % 2];
    check(api_.eventRecord(crossDone, hierStream_), "cudaEventRecord (hierarchical all-reduce)");
    // The piece before: the caller's stream waits for its cross-host phase, then gathers it. (Piece k + 1 records
    // the event piece k - 1 recorded, after this wait for it was enqueued.)
    if (k > 0) {
      check(api_.streamWaitEvent(stream, hierCrossDone_[(k - 1) % 2]), "cudaStreamWaitEvent (hierarchical all-reduce)");
      if (pending.count > 0) call(hierLocal_, CollKind::kAllGather, pending.shard, pending.out, pending.count, stream);
    }
    pending = q > 0 ? Gather{shard, recv, q} : Gather{};
    ++k;
  }
  check(api_.streamWaitEvent(stream, hierCrossDone_[(k - 1) % 2]), "cudaStreamWaitEvent (hierarchical all-reduce)");
  if (pending.count > 0) call(hierLocal_, CollKind::kAllGather, pending.shard, pending.out, pending.count, stream);
}

strataRedOp_t DeviceEngine::hierLocalPreMul(const EffectiveOp& eff) {
  const auto same = [&](const auto& t) { return std::get<0>(t) == eff.preMul && std::get<1>(t) == eff.preMulInt; };
  auto it = std::find_if(hierOps_.begin(), hierOps_.end(), same);
  if (it != hierOps_.end()) {
    std::rotate(it, it + 1, hierOps_.end());  // most recently used last
  } else {
    if (hierOps_.size() == kHierOps) {
      hierLocal_->destroyRedOp(std::get<2>(hierOps_.front()));
      hierOps_.erase(hierOps_.begin());
    }
    hierOps_.emplace_back(eff.preMul, eff.preMulInt, hierLocal_->createPreMulSum(eff.preMul, eff.preMulInt));
  }
  return std::get<2>(hierOps_.back());
}

// Rank o's block (o's output of a reduce-scatter, o's input of an all-gather) sits at o c in the user's buffer. Rail j
// carries the blocks of its H members (hierRails_[j], in hierCross_'s rank order), so in the scratch the blocks go
// rail by rail: segment j (H c elements) is rail j's blocks in that order. Then
//   reduce-scatter: blocks -> scratch; among the host's ranks (the executor) a reduce-scatter of the L segments, in
//     place, leaves segment l summed over the host at its place; along the rail (staged) a reduce-scatter of it
//     leaves this rank's block summed over every host in recvbuff;
//   all-gather: along the rail (staged) an all-gather of this rank's block fills segment l; among the host's ranks an
//     all-gather of the segments, in place; scratch -> blocks.
// Through host memory go H c elements in and c out (reduce-scatter) or c in and H c out (all-gather), against n c
// and c staged whole. The copies between blocks and scratch are device copies, merged where ranks are consecutive.
void DeviceEngine::enqueueHierBlocks(const CollCall& c, void* stream, strataRedOp_t localOp, strataRedOp_t crossOp) {
  const size_t es = dtypeSize(c.dtype);
  const size_t H = static_cast<size_t>(hierHosts_), L = static_cast<size_t>(hierHostRanks_);
  const size_t l = static_cast<size_t>(hierLocal_->rank());
  const size_t block = c.count * es;
  growExecBuffer(&hierScratch_, &hierScratchBytes_, L * H * block);
  char* scratch = static_cast<char*>(hierScratch_);
  char* segment = scratch + l * H * block;
  // Copies between the user's blocks and the scratch, one per run of consecutive ranks in a rail.
  auto regroup = [&](bool toScratch, char* user) {
    for (size_t j = 0; j < L; ++j) {
      const std::vector<int>& rail = hierRails_[j];
      for (size_t k = 0; k < H;) {
        size_t run = 1;
        while (k + run < H && rail[k + run] == rail[k] + static_cast<int>(run)) ++run;
        char* u = user + static_cast<size_t>(rail[k]) * block;
        char* sc = scratch + (j * H + k) * block;
        check(api_.memcpyAsync(toScratch ? sc : u, toScratch ? u : sc, run * block, stream),
              "cudaMemcpyAsync (hierarchical blocks)");
        k += run;
      }
    }
  };
  auto call = [&](const std::shared_ptr<HostSide>& comm, CollKind kind, const void* send, void* recv, size_t count,
                  strataRedOp_t op) {
    CollCall p{kind, send, recv, count, c.dtype, op, 0, -1};
    p.device = true;
    p.stream = stream;
    comm->runDevice(std::span<const CollCall>(&p, 1));
  };
  if (c.kind == CollKind::kReduceScatter) {
    regroup(true, const_cast<char*>(static_cast<const char*>(c.sendbuff)));
    call(hierLocal_, CollKind::kReduceScatter, scratch, segment, H * c.count, localOp);
    call(hierCross_, CollKind::kReduceScatter, segment, c.recvbuff, c.count, crossOp);
  } else {
    call(hierCross_, CollKind::kAllGather, c.sendbuff, segment, c.count, crossOp);
    call(hierLocal_, CollKind::kAllGather, segment, scratch, H * c.count, localOp);
    regroup(false, static_cast<char*>(c.recvbuff));
  }
}

void DeviceEngine::abortSubgroups() {
  std::vector<std::shared_ptr<HostSide>> subs;
  {
    std::lock_guard<std::mutex> lk(subMu_);
    subs = {hierLocal_, hierCross_};
  }
  for (auto& s : subs)
    if (s) s->abort();
}

}  // namespace strata
