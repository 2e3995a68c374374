// What an operation's buffers hold before and after it (check.h): inputs and expected results, layouts, the
// check.
#include "check.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "dtypes.h"
#include "failure.h"

namespace soak {

namespace {

enum class Values { kSum, kProd, kMaxMin, kAvgFloat };

Values valuesFor(int op, const DtypeInfo& d) {
  switch (op) {
    case strataProd: return Values::kProd;
    case strataMax:
    case strataMin:
    case kNoOp: return Values::kMaxMin;  // copies: any value goes; these are the widest exact ones
    case strataAvg: return d.isFloat ? Values::kAvgFloat : Values::kSum;
    default: return Values::kSum;  // sum, premulsum
  }
}

// Input of rank r (of n) at element i of operation `salt`.
double inputValue(Values kind, const DtypeInfo& d, uint64_t salt, int r, int n, size_t i) {
  const uint64_t k = (i * 3 + static_cast<uint64_t>(r) * 7 + salt * 2654435761ull) % 1000003;
  const bool fp8 = d.size == 1 && d.isFloat;
  switch (kind) {
    case Values::kProd: {
      // Magnitude 2 on one rank per element and 1 elsewhere, signs at random: every product is +-1 or +-2.
      const double mag = (i + salt) % static_cast<uint64_t>(n) == static_cast<uint64_t>(r) ? 2 : 1;
      return !d.isUnsigned && k % 3 == 0 ? -mag : mag;
    }
    case Values::kMaxMin: return d.isUnsigned ? double(k % 11) : double(k % 11) - 5;
    case Values::kAvgFloat:
      // Multiples of n: pre-multiplied by 1/n they become small integers again, so the average is exact (in fp8
      // only up to 8 ranks: beyond, n itself may not be exact, and every input is 0).
      if (r >= d.sumRanks || (fp8 && n > 8)) return 0;
      return n * (fp8 ? double(k % 3) - 1 : double(k % 5) - 2);
    case Values::kSum:
      if (r >= d.sumRanks) return 0;
      if (d.isUnsigned) return double(k % 3);
      return fp8 ? double(k % 3) - 1 : double(k % 5) - 2;
  }
  return 0;
}

double expectedReduction(int op, const DtypeInfo& d, uint64_t salt, int n, size_t i) {
  const Values kind = valuesFor(op, d);
  double acc = inputValue(kind, d, salt, 0, n, i);
  for (int r = 1; r < n; ++r) {
    const double v = inputValue(kind, d, salt, r, n, i);
    switch (op) {
      case strataProd: acc *= v; break;
      case strataMax: acc = std::max(acc, v); break;
      case strataMin: acc = std::min(acc, v); break;
      default: acc += v;
    }
  }
  if (op == strataAvg) return d.isFloat ? acc / n : std::trunc(acc / n);  // integer avg truncates, as NCCL's
  if (op == kPreMulSum) return kPreMulScalar * acc;
  return acc;
}

// Float Avg pre-multiplies by 1/n rounded to a double: float64 may be off by an ulp or two of the small integers.
double tolerance(const Op& op) { return op.op == strataAvg && op.dtype == strataFloat64 ? 1e-12 : 0.0; }

// The expected value of output element e, or NAN where the output is unspecified (reduce, not root).
double expectedOutput(const Op& op, const CommView& v, size_t e) {
  const DtypeInfo& d = info(op.dtype);
  const int n = v.size, root = static_cast<int>(op.rootDraw % static_cast<uint64_t>(n));
  const size_t c = op.count;
  const Values copy = Values::kMaxMin;
  switch (op.kind) {
    case kAllReduce: return expectedReduction(op.op, d, op.salt, n, e);
    case kReduceScatter: return expectedReduction(op.op, d, op.salt, n, static_cast<size_t>(v.rank) * c + e);
    case kReduce: return v.rank == root ? expectedReduction(op.op, d, op.salt, n, e) : NAN;
    case kAllGather: return inputValue(copy, d, op.salt, static_cast<int>(e / c), n, e % c);
    case kBroadcast: return inputValue(copy, d, op.salt, root, n, e);
    case kAllToAll:
      return inputValue(copy, d, op.salt, static_cast<int>(e / c), n, static_cast<size_t>(v.rank) * c + e % c);
    case kSendRecv: return inputValue(copy, d, op.salt, (v.rank + n - 1) % n, n, e);
    default: return NAN;
  }
}

// The inputs every rank gave for output element e, for a failure message.
std::string inputsFor(const Op& op, const CommView& v, size_t e) {
  const DtypeInfo& d = info(op.dtype);
  size_t idx = e;
  if (op.kind == kReduceScatter) idx = static_cast<size_t>(v.rank) * op.count + e;
  if (op.kind == kAllGather || op.kind == kAllToAll) idx = e % std::max<size_t>(op.count, 1);
  if (op.kind == kAllToAll) idx += static_cast<size_t>(v.rank) * op.count;
  std::string s;
  for (int r = 0; r < v.size; ++r) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%g", r ? " " : "", inputValue(valuesFor(op.op, d), d, op.salt, r, v.size, idx));
    s += buf;
  }
  return s;
}

}  // namespace

Layout layoutOf(const Op& op, int rank, int n) {
  const size_t c = op.count, nn = static_cast<size_t>(n), r = static_cast<size_t>(rank);
  Layout l;
  switch (op.kind) {
    case kReduceScatter:
      l.inElems = nn * c;
      l.outElems = c;
      if (op.inPlace) l.outOffset = r * c;
      break;
    case kAllGather:
      l.inElems = c;
      l.outElems = nn * c;
      if (op.inPlace) l.inOffset = r * c;
      break;
    case kAllToAll: l.inElems = l.outElems = nn * c; break;
    case kBarrier: break;
    default: l.inElems = l.outElems = c;
  }
  l.spanElems = op.inPlace ? std::max(l.inElems, l.outElems) : l.outElems;
  return l;
}

void prepare(const Op& op, const CommView& v, const Slot& s) {
  if (op.kind == kBarrier) return;
  const DtypeInfo& d = info(op.dtype);
  const Layout l = layoutOf(op, v.rank, v.size);
  const Values kind = valuesFor(op.op, d);
  std::memset(s.recv, kSentinel, l.spanElems * d.size + kGuardBytes);
  unsigned char* in = op.inPlace ? s.recv + l.inOffset * d.size : s.send;
  for (size_t i = 0; i < l.inElems; ++i) store(in, i, op.dtype, inputValue(kind, d, op.salt, v.rank, v.size, i));
}

void check(const Op& op, const CommView& v, const Slot& s) {
  if (op.kind == kBarrier) return;
  const DtypeInfo& d = info(op.dtype);
  const Layout l = layoutOf(op, v.rank, v.size);
  const int root = static_cast<int>(op.rootDraw % static_cast<uint64_t>(v.size));
  const bool unspecified = op.kind == kReduce && v.rank != root;  // recvbuff is only used on the root
  const unsigned char* out = s.recv + l.outOffset * d.size;
  const double tol = tolerance(op);
  size_t wrong = 0, first = 0;
  double firstGot = 0, firstWant = 0;
  if (!unspecified) {
    for (size_t e = 0; e < l.outElems; ++e) {
      const double got = load(out, e, op.dtype), want = expectedOutput(op, v, e);
      if (!(std::fabs(got - want) <= tol)) {
        if (wrong++ == 0) first = e, firstGot = got, firstWant = want;
      }
    }
  }
  if (wrong)
    die("%s: %zu of %zu elements wrong; element %zu is %g, expected %g (inputs of ranks 0..%d there: %s)",
        describe(op, v).c_str(), wrong, l.outElems, first, firstGot, firstWant, v.size - 1,
        inputsFor(op, v, first).c_str());
  // Nothing past the output (or, off the root of an out-of-place reduce, in it) may change.
  const size_t from = unspecified && !op.inPlace ? 0 : l.spanElems * d.size;
  const size_t to = l.spanElems * d.size + kGuardBytes;
  for (size_t b = from; b < to; ++b)
    if (s.recv[b] != kSentinel)
      die("%s: byte %zu of the receive buffer (output ends at byte %zu) was written: 0x%02x", describe(op, v).c_str(),
          b, l.spanElems * d.size, s.recv[b]);
  if (!op.inPlace) {
    const Values kind = valuesFor(op.op, d);
    for (size_t i = 0; i < l.inElems; ++i) {
      const double want = inputValue(kind, d, op.salt, v.rank, v.size, i);
      if (load(s.send, i, op.dtype) != want)
        die("%s: the send buffer changed: element %zu is %g, was %g", describe(op, v).c_str(), i,
            load(s.send, i, op.dtype), want);
    }
  }
}

}  // namespace soak
