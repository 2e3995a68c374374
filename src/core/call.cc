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

size_t callBytes(const CollCall& c, int nranks) {
  const size_t bytes = c.count * dtypeSize(c.dtype);
  const bool perRank =
      c.kind == CollKind::kReduceScatter || c.kind == CollKind::kAllGather || c.kind == CollKind::kAllToAll;
  return perRank ? bytes * static_cast<size_t>(nranks) : bytes;
}

}  // namespace strata
