#include "core/call.h"

#include "kernels/reduce.h"
#include "util/error.h"

namespace strata {

std::string OpLabel::str() const {
  const char* what = name ? name : collName(kind);
  if (nops) return strprintf("rank %d: %s #%llu (%zu ops)", rank, what, static_cast<unsigned long long>(seq), nops);
  return strprintf("rank %d: %s #%llu (count %zu, %s, %s)", rank, what, static_cast<unsigned long long>(seq), count,
                   dtypeName(dtype), algorithm);
}

namespace {

const char* stampOpName(uint64_t op) {
  static const char* const kNames[] = {"sum", "prod", "max", "min", "avg", "premulsum", "op6", "none"};
  return kNames[op & 7];
}

}  // namespace

std::string describeStamp(const MsgStamp& stamp) {
  const auto seq = static_cast<unsigned>(stamp.hi & 0xffffffffu);
  const auto kind = static_cast<int>(stamp.hi >> 32 & 15);
  const auto dtype = stamp.hi >> 36 & 31;
  const auto op = stamp.hi >> 41 & 7;
  const auto root = static_cast<unsigned>(stamp.hi >> 44 & stamp_bits::kRootMask);
  const auto count = static_cast<unsigned long long>(stamp.lo);
  if (kind >= kNumCollKinds)
    return strprintf("an unknown call (stamp %016llx%016llx)", static_cast<unsigned long long>(stamp.hi), count);
  const auto k = static_cast<CollKind>(kind);
  if (k == CollKind::kSend && dtype == stamp_bits::kDtypeBytes) return strprintf("send #%u of %llu bytes", seq, count);
  std::string out =
      strprintf("#%u %s(count %llu, %s", seq, collName(k), count,
                dtype < strataNumTypes ? dtypeName(static_cast<strataDataType_t>(dtype)) : "invalid type");
  if (op != stamp_bits::kOpNone) out += strprintf(", %s", stampOpName(op));
  if (isRooted(k)) out += strprintf(", root %u", root);
  return out + ")";
}

bool sendOverlapsARecv(const CollCall& send, std::span<const CollCall> group) {
  const char* a = static_cast<const char*>(send.sendbuff);
  const size_t an = send.count * dtypeSize(send.dtype);
  for (const CollCall& r : group) {
    if (r.kind != CollKind::kRecv || r.count == 0) continue;
    const char* b = static_cast<const char*>(r.recvbuff);
    if (a < b + r.count * dtypeSize(r.dtype) && b < a + an) return true;
  }
  return false;
}

size_t callBytes(const CollCall& c, int nranks) {
  const size_t bytes = c.count * dtypeSize(c.dtype);
  const bool perRank =
      c.kind == CollKind::kReduceScatter || c.kind == CollKind::kAllGather || c.kind == CollKind::kAllToAll;
  return perRank ? bytes * static_cast<size_t>(nranks) : bytes;
}

}  // namespace strata
