#include "collective.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

namespace strata::perf {
namespace {

const CollSpec kColls[] = {
    {"allreduce", strataCollAllReduce, "strataAllReduce", true, false},
    {"reducescatter", strataCollReduceScatter, "strataReduceScatter", true, false},
    {"allgather", strataCollAllGather, "strataAllGather", false, false},
    {"broadcast", strataCollBroadcast, "strataBroadcast", false, true},
    {"reduce", strataCollReduce, "strataReduce", true, true},
    {"alltoall", strataCollAllToAll, "strataAllToAll", false, false},
    {"sendrecv", std::nullopt, "strataSend/strataRecv", false, false},
};

// splitmix64: a well-mixed 64-bit value per (rank, index), so neighbouring elements and ranks differ.
uint64_t mix(int rank, size_t index) {
  uint64_t z = (static_cast<uint64_t>(rank) << 40) ^ static_cast<uint64_t>(index);
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Largest magnitude every partial result of a reduction may reach and stay exact in the type: integers
// must not overflow, floats must hold every integer up to it (a ring or a tree stores partial sums in the
// type between steps, so each of them must be exact, not only the final one).
double exactBound(const DtypeInfo& t) {
  switch (t.type) {
    case strataInt8: return 127;
    case strataUint8: return 250;
    case strataFloat16: return 2048;
    case strataBfloat16: return 256;
    case strataFloat8e4m3: return 16;
    case strataFloat8e5m2: return 8;
    default: return 1 << 20;
  }
}

// Amplitude of the inputs of a sum/avg/max/min: values in [-A, A] ([0, A] when unsigned).
int64_t sumAmplitude(const DtypeInfo& t) {
  switch (t.type) {
    case strataFloat8e4m3:
    case strataFloat8e5m2: return 1;
    case strataBfloat16: return 2;
    case strataInt8:
    case strataUint8:
    case strataFloat16: return 3;
    default: return 5;
  }
}

// Range of the inputs of collectives that only move data: any value the type holds exactly.
int64_t movementRange(const DtypeInfo& t) {
  switch (t.type) {
    case strataInt8: return 100;
    case strataUint8: return 200;
    case strataFloat8e4m3: return 16;
    case strataFloat8e5m2: return 8;
    case strataFloat16: return 2048;
    case strataBfloat16: return 256;
    case strataFloat32: return 1 << 24;
    default: return int64_t{1} << 30;
  }
}

// The input element `index` of `rank`. Reductions: at most L ranks contribute a non-zero value to any
// element, so |partial sum| <= L x A <= exactBound; products are +-1 or +-2 with at most four 2s per
// element, so |partial product| <= 16.
double inputValue(const CheckContext& ctx, int rank, size_t index) {
  const DtypeInfo& t = *ctx.type;
  const uint64_t h = mix(rank, index);
  const uint64_t slot = (static_cast<uint64_t>(rank) + index) % static_cast<uint64_t>(ctx.nranks);
  if (!ctx.coll->reduces) {
    int64_t r = movementRange(t);
    if (!t.isSigned) return static_cast<double>(h % static_cast<uint64_t>(r + 1));
    return static_cast<double>(static_cast<int64_t>(h % static_cast<uint64_t>(2 * r + 1)) - r);
  }
  if (ctx.op == strataProd) {
    double magnitude = (slot < 4 && ((h >> 8) & 1)) ? 2.0 : 1.0;
    return (t.isSigned && (h & 1)) ? -magnitude : magnitude;
  }
  const int64_t a = sumAmplitude(t);
  const uint64_t contributors = static_cast<uint64_t>(exactBound(t) / static_cast<double>(a));
  if (slot >= contributors) return 0.0;
  if (!t.isSigned) return static_cast<double>(h % static_cast<uint64_t>(a + 1));
  return static_cast<double>(static_cast<int64_t>(h % static_cast<uint64_t>(2 * a + 1)) - a);
}

// What element k of a result must hold; `magnitude` is the sum of |input| over the ranks that went into it
// (0 for collectives that only move data), which bounds the rounding an avg may legitimately show.
struct Expected {
  double value;
  double magnitude;
};

Expected reduceOverRanks(const CheckContext& ctx, size_t index) {
  double acc = inputValue(ctx, 0, index);
  double magnitude = std::fabs(acc);
  for (int q = 1; q < ctx.nranks; ++q) {
    double v = inputValue(ctx, q, index);
    magnitude += std::fabs(v);
    switch (ctx.op) {
      case strataProd: acc *= v; break;
      case strataMax: acc = v > acc ? v : acc; break;
      case strataMin: acc = v < acc ? v : acc; break;
      default: acc += v; break;  // sum, avg
    }
  }
  if (ctx.op == strataAvg) {
    if (!ctx.type->isFloat) return {static_cast<double>(static_cast<int64_t>(acc) / ctx.nranks), magnitude};
    return {roundToDtype(*ctx.type, acc / ctx.nranks), magnitude};
  }
  return {acc, magnitude};
}

Expected expectedValue(const CheckContext& ctx, size_t k) {
  const Layout& l = ctx.layout;
  const size_t r = static_cast<size_t>(ctx.rank);
  if (ctx.coll->isSendRecv()) return {inputValue(ctx, (ctx.rank + ctx.nranks - 1) % ctx.nranks, k), 0};
  switch (*ctx.coll->collective) {
    case strataCollAllReduce:
    case strataCollReduce: return reduceOverRanks(ctx, k);
    case strataCollReduceScatter: return reduceOverRanks(ctx, r * l.recvCount + k);
    case strataCollAllGather: return {inputValue(ctx, static_cast<int>(k / l.paramCount), k % l.paramCount), 0};
    case strataCollBroadcast: return {inputValue(ctx, ctx.root, k), 0};
    case strataCollAllToAll:
      return {inputValue(ctx, static_cast<int>(k / l.paramCount), r * l.paramCount + k % l.paramCount), 0};
  }
  return {NAN, 0};
}

// A value no correct result holds: NaN for floats, the most negative (signed) or largest (unsigned) integer.
double poisonValue(const DtypeInfo& t) {
  if (t.isFloat) return NAN;
  if (!t.isSigned) return -1.0;  // stored through int64, it wraps to the largest value
  return -std::ldexp(1.0, static_cast<int>(t.size * 8 - 1));
}

}  // namespace

const CollSpec* findColl(std::string_view name) {
  // nccl-tests' binary names, minus "_perf", are accepted too.
  static const struct {
    const char* alias;
    const char* name;
  } kAliases[] = {{"all_reduce", "allreduce"},
                  {"reduce_scatter", "reducescatter"},
                  {"all_gather", "allgather"},
                  {"all_to_all", "alltoall"}};
  for (const auto& a : kAliases) {
    if (name == a.alias) name = a.name;
  }
  for (const CollSpec& c : kColls) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

const char* collNames() {
  static const std::string names = [] {
    std::string list;
    for (const CollSpec& c : kColls) list += (list.empty() ? "" : "|") + std::string(c.name);
    return list;
  }();
  return names.c_str();
}

double busBandwidthFactor(const CollSpec& coll, int nranks) {
  const double n = nranks;
  if (coll.isSendRecv()) return 1.0;
  switch (*coll.collective) {
    case strataCollAllReduce: return 2.0 * (n - 1) / n;
    case strataCollReduceScatter:
    case strataCollAllGather:
    case strataCollAllToAll: return (n - 1) / n;
    case strataCollBroadcast:
    case strataCollReduce: return 1.0;
  }
  return 1.0;
}

Layout layoutFor(const CollSpec& coll, size_t bytes, size_t eltSize, int nranks) {
  const size_t count = bytes / eltSize;
  const size_t n = static_cast<size_t>(nranks);
  const size_t perRank = count / n;
  Layout l;
  if (coll.isSendRecv()) {
    l.sendCount = l.recvCount = l.paramCount = count;
    return l;
  }
  switch (*coll.collective) {
    case strataCollAllReduce:
    case strataCollBroadcast:
    case strataCollReduce: l.sendCount = l.recvCount = l.paramCount = count; break;
    case strataCollReduceScatter:
      l.sendCount = perRank * n;
      l.recvCount = l.paramCount = l.recvInplaceOffset = perRank;
      break;
    case strataCollAllGather:
      l.sendCount = l.paramCount = l.sendInplaceOffset = perRank;
      l.recvCount = perRank * n;
      break;
    case strataCollAllToAll:
      l.sendCount = l.recvCount = perRank * n;
      l.paramCount = perRank;
      break;
  }
  return l;
}

RunBuffers runBuffers(const Layout& layout, size_t eltSize, void* sendbuff, void* recvbuff, bool inPlace, int rank) {
  if (!inPlace) return {sendbuff, recvbuff};
  char* base = static_cast<char*>(recvbuff);
  const size_t r = static_cast<size_t>(rank);
  return {base + layout.sendInplaceOffset * r * eltSize, base + layout.recvInplaceOffset * r * eltSize};
}

strataResult_t runCollective(const CollSpec& coll, const RunBuffers& b, const Layout& l, strataDataType_t type,
                             strataRedOp_t op, int root, strataComm_t comm, int rank, int nranks,
                             strataStream_t stream) {
  if (coll.isSendRecv()) {
    // nccl-tests' sendrecv: every rank sends to the next and receives from the previous, as one group.
    strataResult_t rc = strataGroupStart();
    if (rc != strataSuccess) return rc;
    strataResult_t sendRc = strataSend(b.send, l.paramCount, type, (rank + 1) % nranks, comm, stream);
    strataResult_t recvRc = strataRecv(b.recv, l.paramCount, type, (rank + nranks - 1) % nranks, comm, stream);
    rc = strataGroupEnd();
    if (sendRc != strataSuccess) return sendRc;
    if (recvRc != strataSuccess) return recvRc;
    return rc;
  }
  switch (*coll.collective) {
    case strataCollAllReduce: return strataAllReduce(b.send, b.recv, l.paramCount, type, op, comm, stream);
    case strataCollReduceScatter: return strataReduceScatter(b.send, b.recv, l.paramCount, type, op, comm, stream);
    case strataCollAllGather: return strataAllGather(b.send, b.recv, l.paramCount, type, comm, stream);
    case strataCollBroadcast: return strataBroadcast(b.send, b.recv, l.paramCount, type, root, comm, stream);
    case strataCollReduce: return strataReduce(b.send, b.recv, l.paramCount, type, op, root, comm, stream);
    case strataCollAllToAll: return strataAllToAll(b.send, b.recv, l.paramCount, type, comm, stream);
  }
  return strataInvalidArgument;
}

void fillInputs(const CheckContext& ctx, void* sendbuff, void* recvbuff, bool inPlace) {
  const DtypeInfo& t = *ctx.type;
  const Layout& l = ctx.layout;
  const size_t r = static_cast<size_t>(ctx.rank);
  // Poison everything the receive side may write, then place the input (which, in place, lies inside it).
  size_t recvSpan = l.recvCount;
  if (inPlace) {
    recvSpan = std::max(recvSpan, l.sendInplaceOffset * r + l.sendCount);
    recvSpan = std::max(recvSpan, l.recvInplaceOffset * r + l.recvCount);
  }
  const double poison = poisonValue(t);
  for (size_t i = 0; i < recvSpan; ++i) storeValue(t, recvbuff, i, poison);
  RunBuffers b = runBuffers(l, t.size, sendbuff, recvbuff, inPlace, ctx.rank);
  void* input = const_cast<void*>(b.send);
  for (size_t i = 0; i < l.sendCount; ++i) storeValue(t, input, i, inputValue(ctx, ctx.rank, i));
}

ResultRegion resultRegion(const CheckContext& ctx, void* recvbuff, bool inPlace) {
  if (ctx.coll->is(strataCollReduce) && ctx.rank != ctx.root) return {recvbuff, 0};
  RunBuffers b = runBuffers(ctx.layout, ctx.type->size, recvbuff, recvbuff, inPlace, ctx.rank);
  return {b.recv, ctx.layout.recvCount};
}

int64_t countWrong(const CheckContext& ctx, const ResultRegion& result, int showMax) {
  const DtypeInfo& t = *ctx.type;
  // Every result is exact except a floating-point avg: NCCL, and Strata after it, may compute it as a sum
  // of inputs pre-multiplied by 1/n (and keep partial results in the type), which rounds differently
  // from sum / n. Allow one ulp of the result plus half an ulp per rank at the inputs' magnitude.
  const bool tolerant = t.isFloat && ctx.coll->reduces && ctx.op == strataAvg;
  const double unitRoundoff = tolerant ? std::ldexp(1.0, -(t.mantissaBits + 1)) : 0.0;
  int64_t wrong = 0;
  for (size_t k = 0; k < result.count; ++k) {
    const double got = loadValue(t, result.data, k);
    const Expected want = expectedValue(ctx, k);
    const bool ok = tolerant ? std::fabs(got - want.value) <= ulpOf(t, want.value) + unitRoundoff * want.magnitude
                             : got == want.value;
    if (!ok && wrong < showMax) {
      std::fprintf(stderr, "strata-perf: rank %d: %s %s: element %zu is %.17g, expected %.17g\n", ctx.rank,
                   ctx.coll->name, t.name, k, got, want.value);
    }
    wrong += ok ? 0 : 1;
  }
  return wrong;
}

}  // namespace strata::perf
