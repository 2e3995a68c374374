#include "collectives/plan.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include "util/error.h"

namespace strata {

const char* opKindName(OpKind k) {
  switch (k) {
    case OpKind::kSend: return "send";
    case OpKind::kRecv: return "recv";
    case OpKind::kRecvReduce: return "recvReduce";
    case OpKind::kRecvReduceSend: return "recvReduceSend";
    case OpKind::kRecvReduceCopySend: return "recvReduceCopySend";
    case OpKind::kRecvCopySend: return "recvCopySend";
    case OpKind::kCopy: return "copy";
    case OpKind::kReduceLocal: return "reduceLocal";
    case OpKind::kCopySend: return "copySend";
    case OpKind::kNop: return "nop";
  }
  return "invalid";
}

namespace {

bool validKind(OpKind k) { return static_cast<unsigned>(k) <= static_cast<unsigned>(OpKind::kNop); }

std::string regionString(const Region& r) { return strprintf("[buf %d +%zu x%zu]", r.buf, r.offset, r.count); }

}  // namespace

bool usesSrc(OpKind k) {
  return k == OpKind::kSend || k == OpKind::kRecvReduce || k == OpKind::kRecvReduceSend ||
         k == OpKind::kRecvReduceCopySend || k == OpKind::kCopy || k == OpKind::kReduceLocal || k == OpKind::kCopySend;
}
bool usesDst(OpKind k) {
  return k == OpKind::kRecv || k == OpKind::kRecvReduce || k == OpKind::kRecvReduceCopySend ||
         k == OpKind::kRecvCopySend || k == OpKind::kCopy || k == OpKind::kReduceLocal || k == OpKind::kCopySend;
}

size_t Op::count() const {
  if (kind == OpKind::kNop) return 0;
  return usesDst(kind) ? dst.count : src.count;
}

bool Op::receives() const {
  return kind == OpKind::kRecv || kind == OpKind::kRecvReduce || kind == OpKind::kRecvReduceSend ||
         kind == OpKind::kRecvReduceCopySend || kind == OpKind::kRecvCopySend;
}

bool Op::sends() const {
  return kind == OpKind::kSend || kind == OpKind::kRecvReduceSend || kind == OpKind::kRecvReduceCopySend ||
         kind == OpKind::kRecvCopySend || kind == OpKind::kCopySend;
}

size_t Plan::numOps() const {
  size_t n = 0;
  for (const auto& lane : lanes) n += lane.size();
  return n;
}

std::string Plan::toString() const {
  std::string out = strprintf("plan %s rank %d/%d scratch %zu, %zu lane(s), %zu op(s)\n", algorithm.c_str(), rank,
                              nranks, scratchElems, lanes.size(), numOps());
  for (size_t l = 0; l < lanes.size(); ++l) {
    for (size_t i = 0; i < lanes[l].size(); ++i) {
      const Op& op = lanes[l][i];
      out += strprintf("  lane %zu op %zu: %s", l, i, opKindName(op.kind));
      if (op.receives()) out += strprintf(" from %d", op.recvPeer);
      if (op.sends()) out += strprintf(" to %d", op.sendPeer);
      if (op.channel != 0) out += strprintf(" channel %u", op.channel);
      if (usesSrc(op.kind)) out += " src " + regionString(op.src);
      if (usesDst(op.kind)) out += " dst " + regionString(op.dst);
      if (op.hasDependency()) out += strprintf(" after lane %d op %u", op.afterLane, op.afterOps - 1);
      out += "\n";
    }
  }
  return out;
}

int planChannels(const Plan& plan) {
  int n = 1;
  for (const auto& lane : plan.lanes)
    for (const Op& op : lane) n = std::max(n, op.channel + 1);
  return n;
}

bool hasDependencies(const Plan& plan) {
  for (const auto& lane : plan.lanes)
    for (const Op& op : lane)
      if (op.hasDependency()) return true;
  return false;
}

namespace {

// Runs the lanes with nothing but their order and their dependencies (as if every message arrived at once):
// a lane that cannot finish is stuck on a cycle. Each pass moves at least one op, so this ends.
void checkDependencyCycles(const Plan& plan) {
  std::vector<size_t> pos(plan.lanes.size(), 0);
  auto ready = [&](const Op& op) {
    return !op.hasDependency() || pos[static_cast<size_t>(op.afterLane)] >= op.afterOps;
  };
  for (bool moved = true; moved;) {
    moved = false;
    for (size_t l = 0; l < plan.lanes.size(); ++l) {
      while (pos[l] < plan.lanes[l].size() && ready(plan.lanes[l][pos[l]])) {
        ++pos[l];
        moved = true;
      }
    }
  }
  std::string stuck;
  for (size_t l = 0; l < plan.lanes.size(); ++l) {
    if (pos[l] >= plan.lanes[l].size()) continue;
    const Op& op = plan.lanes[l][pos[l]];
    stuck += strprintf("%slane %zu op %zu waits for lane %d op %u", stuck.empty() ? "" : "; ", l, pos[l], op.afterLane,
                       op.afterOps - 1);
  }
  if (!stuck.empty())
    throw InternalError(strprintf("plan %s rank %d/%d: deadlock, its cross-lane dependencies form a cycle: %s",
                                  plan.algorithm.c_str(), plan.rank, plan.nranks, stuck.c_str()));
}

}  // namespace

void validatePlan(const Plan& plan) {
  if (plan.nranks < 1 || plan.rank < 0 || plan.rank >= plan.nranks)
    throw InternalError(
        strprintf("plan %s: rank %d out of range for %d rank(s)", plan.algorithm.c_str(), plan.rank, plan.nranks));
  // (peer, sends?, channel) -> the lane that owns that direction of that connection.
  std::map<std::tuple<int, bool, int>, size_t> owner;
  for (size_t l = 0; l < plan.lanes.size(); ++l) {
    for (size_t i = 0; i < plan.lanes[l].size(); ++i) {
      const Op& op = plan.lanes[l][i];
      auto fail = [&](const std::string& what) {
        throw InternalError(strprintf("plan %s rank %d/%d lane %zu op %zu (%s): %s", plan.algorithm.c_str(), plan.rank,
                                      plan.nranks, l, i, opKindName(op.kind), what.c_str()));
      };
      if (!validKind(op.kind)) fail(strprintf("invalid op kind %u", static_cast<unsigned>(op.kind)));
      auto checkPeer = [&](int peer, bool sends) {
        if (peer < 0 || peer >= plan.nranks || peer == plan.rank)
          fail(strprintf("%s peer %d is not another rank of %d", sends ? "send" : "receive", peer, plan.nranks));
        auto [it, inserted] = owner.emplace(std::make_tuple(peer, sends, int{op.channel}), l);
        if (!inserted && it->second != l)
          fail(strprintf("lanes %zu and %zu both %s rank %d on channel %u", it->second, l,
                         sends ? "send to" : "receive from", peer, op.channel));
      };
      if (op.channel >= kMaxPlanChannels) fail(strprintf("channel %u is not below %d", op.channel, kMaxPlanChannels));
      if (op.receives()) checkPeer(op.recvPeer, false);
      if (op.sends()) checkPeer(op.sendPeer, true);
      auto checkRegion = [&](const Region& r, const char* name) {
        if (r.buf < 0) fail(strprintf("%s region names buffer %d", name, r.buf));
        if (r.offset + r.count < r.offset) fail(strprintf("%s region %s overflows", name, regionString(r).c_str()));
      };
      if (usesSrc(op.kind)) checkRegion(op.src, "source");
      if (usesDst(op.kind)) checkRegion(op.dst, "destination");
      if (usesSrc(op.kind) && usesDst(op.kind) && op.src.count != op.dst.count)
        fail(strprintf("source has %zu elements but destination %zu", op.src.count, op.dst.count));
      if (op.count() == 0 && op.kind != OpKind::kNop) fail("empty op (generators omit ops of 0 elements)");
      if (op.hasDependency()) {
        const size_t after = static_cast<size_t>(op.afterLane);
        if (after >= plan.lanes.size() || after == l)
          fail(strprintf("depends on lane %d, not another lane of %zu", op.afterLane, plan.lanes.size()));
        if (op.afterOps == 0 || op.afterOps > plan.lanes[after].size())
          fail(strprintf("depends on the first %u op(s) of lane %zu, which has %zu", op.afterOps, after,
                         plan.lanes[after].size()));
      } else if (op.afterOps != 0) {
        fail(strprintf("waits for %u op(s) of no lane", op.afterOps));
      }
    }
  }
  checkDependencyCycles(plan);
}

}  // namespace strata
