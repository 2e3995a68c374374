#include "device/cpu_exec.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstddef>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "device/host_policy.h"
#include "device/proto.h"
#include "util/error.h"

namespace strata {

using devproto::ConnCtrl;
using devproto::Failure;

// Per rank: abort word, stop word, failure record, then per channel send and receive steps for every peer.
struct CpuDeviceWorld::RankBlock {
  alignas(128) uint32_t abort;
  alignas(128) uint32_t stop;
  alignas(128) Failure failure;
  alignas(128) uint64_t steps[1];  // per channel, 2 * nranks: send steps, then receive steps
};

CpuDeviceWorld::CpuDeviceWorld(int nranks, const devproto::ProtoConfig& cfg, int channels)
    : nranks_(nranks), cfg_(cfg), channels_(channels) {
  if (nranks < 1) throw InvalidArgument("device world: nranks " + std::to_string(nranks));
  if (channels < 1 || channels > kMaxDevChannels)
    throw InvalidArgument("device world: channels " + std::to_string(channels));
  if (cfg.pieceBytes == 0 || cfg.pieceBytes % 16 || cfg.llMaxBytes % 16 || cfg.llMaxBytes > cfg.pieceBytes ||
      cfg.nslots == 0)
    throw InvalidArgument(
        "device world: pieceBytes must be a positive multiple of 16, llMaxBytes a multiple of 16 "
        "at most pieceBytes, nslots positive");
  connBytes_ = devproto::connMemBytes(cfg);
  const size_t n = static_cast<size_t>(nranks), ch = static_cast<size_t>(channels);
  rankBytes_ = (offsetof(RankBlock, steps) + 2 * sizeof(uint64_t) * n * ch + 127) / 128 * 128;
  bytes_ = ch * n * n * connBytes_ + n * rankBytes_;
  void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) STRATA_THROW_SYS("device world: mmap of " + std::to_string(bytes_) + " bytes");
  base_ = static_cast<char*>(p);  // zero-filled: every head, tail, step, flag and word starts at 0
}

CpuDeviceWorld::~CpuDeviceWorld() { munmap(base_, bytes_); }

void* CpuDeviceWorld::connMem(int from, int to, int channel) const {
  const size_t n = static_cast<size_t>(nranks_);
  return base_ +
         ((static_cast<size_t>(channel) * n + static_cast<size_t>(to)) * n + static_cast<size_t>(from)) * connBytes_;
}

CpuDeviceWorld::RankBlock* CpuDeviceWorld::block(int r) const {
  const size_t n = static_cast<size_t>(nranks_);
  return reinterpret_cast<RankBlock*>(base_ + static_cast<size_t>(channels_) * n * n * connBytes_ +
                                      static_cast<size_t>(r) * rankBytes_);
}

uint64_t* CpuDeviceWorld::sendSteps(int r, int channel) const { return block(r)->steps + 2 * channel * nranks_; }
uint64_t* CpuDeviceWorld::recvSteps(int r, int channel) const { return block(r)->steps + (2 * channel + 1) * nranks_; }
uint32_t* CpuDeviceWorld::abortWord(int r) const { return &block(r)->abort; }
uint32_t* CpuDeviceWorld::stopWord(int r) const { return &block(r)->stop; }
Failure* CpuDeviceWorld::failure(int r) const { return &block(r)->failure; }

uint32_t runRankOnCpu(CpuDeviceWorld& world, int rank, const DevPlan& plan, const CpuCall& call) {
  if (plan.nranks != world.nranks() || plan.rank != rank)
    throw InvalidArgument("device plan of rank " + std::to_string(plan.rank) + "/" + std::to_string(plan.nranks) +
                          " run as rank " + std::to_string(rank) + "/" + std::to_string(world.nranks()));
  if (plan.channels > world.channels())
    throw InvalidArgument("device plan of " + std::to_string(plan.channels) + " channels in a world of " +
                          std::to_string(world.channels()));
  const int n = world.nranks();
  // Per channel, the FIFO pointer tables of every peer.
  const size_t un = static_cast<size_t>(n);
  std::vector<void*> recvMem(un * static_cast<size_t>(plan.channels)), sendMem(recvMem.size());
  for (int c = 0; c < plan.channels; ++c) {
    for (int p = 0; p < n; ++p) {
      recvMem[static_cast<size_t>(c) * un + static_cast<size_t>(p)] = world.connMem(p, rank, c);
      sendMem[static_cast<size_t>(c) * un + static_cast<size_t>(p)] = world.connMem(rank, p, c);
    }
  }
  // A new call: nothing failed yet. (The previous call's lanes have all returned.)
  devproto::HostPolicy::storeRelaxed(world.stopWord(rank), 0u);
  *world.failure(rank) = Failure{};
  const uint64_t deadline = call.timeoutNs ? devproto::HostPolicy::nowNs() + call.timeoutNs : 0;

  const int lanes = plan.lanes();
  uint32_t lanesDone = 0;  // the runner's "device memory" for the last-lane count of integer Avg
  std::vector<uint32_t> laneOps(plan.hasWaits() ? static_cast<size_t>(lanes) : 0, 0);  // cross-lane waits
  std::vector<devproto::LaneArgs> args(static_cast<size_t>(lanes));
  for (int l = 0; l < lanes; ++l) {
    devproto::LaneArgs& a = args[static_cast<size_t>(l)];
    a.ops = plan.ops.data() + plan.laneBegin[static_cast<size_t>(l)];
    a.nops = plan.laneBegin[static_cast<size_t>(l) + 1] - plan.laneBegin[static_cast<size_t>(l)];
    a.lane = l;
    for (int b = 0; b < 3; ++b) a.bufs[b] = call.bufs[b];
    a.bufTable = call.bufTable;
    const int ch = plan.channelOf(l);
    a.recvMem = recvMem.data() + static_cast<size_t>(ch) * un;
    a.sendMem = sendMem.data() + static_cast<size_t>(ch) * un;
    a.sendStep = world.sendSteps(rank, ch);
    a.recvStep = world.recvSteps(rank, ch);
    a.cfg = world.config();
    a.dtype = call.dtype;
    a.op = call.op;
    a.preMul = call.preMul;
    a.preMulInt = call.preMulInt;
    a.postDiv = call.postDiv;
    a.recvElems = call.recvElems;
    a.lanesDone = &lanesDone;
    a.nlanes = static_cast<uint32_t>(lanes);
    a.laneOps = laneOps.empty() ? nullptr : laneOps.data();
    a.abortWord = world.abortWord(rank);
    a.stopWord = world.stopWord(rank);
    a.deadlineNs = deadline;
    a.failure = world.failure(rank);
  }
  const uint32_t per = call.threadsPerLane == 0 ? 1 : call.threadsPerLane;
  std::vector<uint32_t> codes(static_cast<size_t>(lanes), 0);
  if (lanes == 1 && per == 1) {
    codes[0] = devproto::runLane(devproto::HostPolicy{}, args[0]);
  } else {
    std::vector<std::unique_ptr<devproto::HostGroup>> groups;
    for (int l = 0; l < lanes; ++l) groups.push_back(per > 1 ? std::make_unique<devproto::HostGroup>(per) : nullptr);
    std::vector<std::thread> threads;
    for (int l = 0; l < lanes; ++l) {
      for (uint32_t t = 0; t < per; ++t) {
        threads.emplace_back([&, l, t] {
          const devproto::HostPolicy policy{groups[static_cast<size_t>(l)].get(), t};
          const uint32_t code = devproto::runLane(policy, args[static_cast<size_t>(l)]);
          if (t == 0) codes[static_cast<size_t>(l)] = code;
        });
      }
    }
    for (auto& t : threads) t.join();
  }
  for (uint32_t c : codes)
    if (c != devproto::kFailNone) return devproto::HostPolicy::loadRelaxed(&world.failure(rank)->code);
  return devproto::kFailNone;
}

}  // namespace strata
