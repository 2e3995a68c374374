#include "collectives/send_refs.h"

#include <algorithm>
#include <exception>
#include <map>

namespace strata {
namespace {

// A region in one address space: aliased buffers map onto the buffer they are part of.
struct Span {
  int buf;
  int64_t begin, end;  // elements
};

Span spanOf(const Region& r, std::span<const BufferAlias> aliases) {
  Span s{r.buf, static_cast<int64_t>(r.offset), static_cast<int64_t>(r.offset + r.count)};
  for (const BufferAlias& a : aliases) {
    if (a.buf == r.buf) {
      s.buf = a.same;
      s.begin += a.offset;
      s.end += a.offset;
      break;
    }
  }
  return s;
}

// Written memory as disjoint intervals per buffer.
class WrittenSet {
 public:
  void add(const Span& s) {
    if (s.begin >= s.end) return;
    auto& m = bufs_[s.buf];
    int64_t b = s.begin, e = s.end;
    auto it = m.upper_bound(b);
    if (it != m.begin() && std::prev(it)->second >= b) --it;
    while (it != m.end() && it->first <= e) {
      b = std::min(b, it->first);
      e = std::max(e, it->second);
      it = m.erase(it);
    }
    m.emplace(b, e);
  }
  bool overlaps(const Span& s) const {
    if (s.begin >= s.end) return false;
    auto found = bufs_.find(s.buf);
    if (found == bufs_.end()) return false;
    const auto& m = found->second;
    auto it = m.upper_bound(s.begin);  // first interval starting after s.begin
    if (it != m.end() && it->first < s.end) return true;
    return it != m.begin() && std::prev(it)->second > s.begin;
  }

 private:
  std::map<int, std::map<int64_t, int64_t>> bufs_;  // buffer -> begin -> end
};

// The memory an op writes locally, if any. A copy onto itself writes nothing.
bool writtenBy(const Op& op, std::span<const BufferAlias> aliases, Span* out) {
  if (!usesDst(op.kind) || op.dst.count == 0) return false;
  *out = spanOf(op.dst, aliases);
  if (op.kind == OpKind::kCopy || op.kind == OpKind::kCopySend) {
    const Span src = spanOf(op.src, aliases);
    if (src.buf == out->buf && src.begin == out->begin && src.end == out->end) return false;
  }
  return true;
}

}  // namespace

SendRefs::SendRefs(const Plan& plan, std::span<const BufferAlias> aliases) {
  std::vector<WrittenSet> byLane(plan.lanes.size());
  for (size_t l = 0; l < plan.lanes.size(); ++l) {
    for (const Op& op : plan.lanes[l]) {
      Span w;
      if (writtenBy(op, aliases, &w)) byLane[l].add(w);
    }
  }
  for (size_t l = 0; l < plan.lanes.size(); ++l) {
    const std::vector<Op>& ops = plan.lanes[l];
    WrittenSet later;  // what ops after the current one in this lane write
    for (size_t i = ops.size(); i-- > 0;) {
      const Op& op = ops[i];
      // A forward sends the destination it has just written (received, or reduced into).
      // Not kRecvReduceCopySend: its reduced piece is hot in this core's cache, so copying it into the FIFO costs
      // less than the peer's process_vm_readv pinning its pages (2-rank all-reduce measured 0.88-0.92x with it).
      const bool forwards = op.kind == OpKind::kRecvCopySend;
      const bool candidate = forwards || op.kind == OpKind::kSend || op.kind == OpKind::kCopySend;
      if (candidate && op.count() > 0) {
        const Span sent = spanOf(forwards ? op.dst : op.src, aliases);
        bool safe = !later.overlaps(sent);
        Span own;
        // kCopySend writes its destination in the same pass, after the reference went out.
        if (safe && op.kind == OpKind::kCopySend && writtenBy(op, aliases, &own)) {
          WrittenSet self;
          self.add(own);
          safe = !self.overlaps(sent);
        }
        for (size_t other = 0; safe && other < byLane.size(); ++other)
          if (other != l && byLane[other].overlaps(sent)) safe = false;
        if (safe) ops_.push_back(&op);
      }
      Span w;
      if (writtenBy(op, aliases, &w)) later.add(w);
    }
  }
  std::sort(ops_.begin(), ops_.end());
}

void SendRefs::dropReducedByPeers(const Plan& plan, const std::function<Plan(int)>& peerPlan) {
  if (ops_.empty()) return;
  std::vector<const Op*> keep;
  std::vector<int> peers;
  for (const Op* op : ops_) peers.push_back(op->sendPeer);
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  for (int p : peers) {
    Plan theirs;
    try {
      theirs = peerPlan(p);
    } catch (const std::exception&) {
      continue;  // no plan to compare with: sends to p keep copying
    }
    // The stream from this rank to p, as p's ops cut it: [begin, end) in elements, and whether p reduces it.
    struct Piece {
      size_t end;
      bool reduces;
    };
    std::vector<Piece> received;
    size_t at = 0;
    for (const std::vector<Op>& lane : theirs.lanes) {
      for (const Op& op : lane) {
        if (!op.receives() || op.recvPeer != plan.rank) continue;
        at += op.count();
        const bool reduces = op.kind == OpKind::kRecvReduce || op.kind == OpKind::kRecvReduceSend ||
                             op.kind == OpKind::kRecvReduceCopySend;
        received.push_back({at, reduces});
      }
    }
    size_t sent = 0, j = 0;
    for (const std::vector<Op>& lane : plan.lanes) {
      for (const Op& op : lane) {
        if (!op.sends() || op.sendPeer != p) continue;
        const size_t begin = sent, end = sent + op.count();
        sent = end;
        while (j < received.size() && received[j].end <= begin) ++j;
        bool reduced = j == received.size();  // the plans disagree: keep copying
        for (size_t k = j; k < received.size() && !reduced; ++k) {
          reduced = received[k].reduces;
          if (received[k].end >= end) break;
        }
        if (!reduced && allows(&op)) keep.push_back(&op);
      }
    }
  }
  std::sort(keep.begin(), keep.end());
  ops_ = std::move(keep);
}

bool SendRefs::worthAnalysing(const Plan& plan, size_t elemSize, size_t pieceBytes) {
  if (pieceBytes < kMinRefBytes) return false;
  for (const std::vector<Op>& lane : plan.lanes)
    for (const Op& op : lane)
      if (op.sends() && op.count() * elemSize >= kMinRefBytes) return true;
  return false;
}

bool SendRefs::allows(const Op* op) const { return std::binary_search(ops_.begin(), ops_.end(), op); }

}  // namespace strata
