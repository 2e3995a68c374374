// strata_soak: random collectives for as long as asked, every result checked exactly, while the process's
// resources are sampled; at the end the steady state is compared with a warm-up baseline. perf/soak.sh runs it
// under strata-run (5 minutes in CI, hours by hand).
//
// Every rank draws the same sequence of operations from the shared --seed: the collective (all-reduce,
// reduce-scatter, all-gather, broadcast, reduce, all-to-all, a send/recv ring in a group, barrier), the count (0,
// or log-uniform from 1 to --max-count), the dtype (all twelve), the operator (sum, prod, max, min, avg, and a
// PreMulSum made for the call and destroyed after it), the root, in place or not, and how it is issued (blocking,
// in a group, in a group ended asynchronously). Now and then the world is split into random colors or shrunk
// (strataCommShrink, excluding random ranks): a few operations on each part, sometimes a split of a part, then
// destroy, or abort or revoke after a barrier on the world. And now and then the world is re-created: split with
// one color and random keys, the old one destroyed or aborted.
//
// Inputs are a function of (operation, rank, index): small integers chosen per operator so that the expected
// result is exact in every dtype (sums of -2..2, or -1..1 in fp8; products of +-1 with one 2; avg inputs that are
// multiples of the rank count). Each output element, the guard bytes after the output and, out of place, the
// send buffer are checked; a wrong value or a failed call ends the run naming the iteration, the operation and
// the values.
//
// Every --sample-seconds (rank 0 decides for all ranks, and decides when to stop, so no rank is left in a
// collective) each rank samples its RSS, the bytes malloc has handed out (heap), open descriptors, threads and
// mappings of /dev/shm files, and rank 0 the strata-* names in /dev/shm. Baseline: the largest sample of the first
// 20% of the run taken after the warm-up (the first split and the first re-create); final: the largest sample of
// the last 20%; for the heap, the least samples of the same windows (see judge()). The run fails when a metric's
// final exceeds its baseline by more than its slack.
//
// usage: strata_soak [--seconds S] [--seed N] [--sample-seconds S] [--log FILE] [--flight-dir DIR] [--max-count N]
//                    [--rss-slack-mib M] [--heap-slack-mib M] [--fd-slack N] [--thread-slack N] [--shm-slack N]
//                    [--map-slack N]
// FILE gets one JSON line per sample and a summary line; "%r" in it becomes the launcher's rank. On a failure, the
// flight recorders of the live communicators go to DIR.
#include <dirent.h>
#include <malloc.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "strata/strata.h"

namespace {

int gLaunchRank = 0;      // RANK from the launcher: names this process in every message
uint64_t gIteration = 0;  // the iteration running, for messages
// The communicators alive in this process, whose flight recorders a failure writes to --flight-dir. (Not
// STRATA_FLIGHT_RECORDER_DIR: that would also write one at every deliberate abort, thousands an hour.)
std::vector<strataComm_t> gLiveComms;
std::string gFlightDir;

[[noreturn]] __attribute__((format(printf, 1, 2))) void die(const char* fmt, ...) {
  char msg[4096];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "strata_soak: rank %d: iteration %llu: FAIL: %s\n", gLaunchRank,
               static_cast<unsigned long long>(gIteration), msg);
  std::fflush(stderr);
  if (!gFlightDir.empty())
    for (strataComm_t c : gLiveComms) strataCommDumpFlightRecorder(c, gFlightDir.c_str());
  std::exit(1);
}

void expectOk(strataResult_t r, strataComm_t comm, const std::string& what) {
  if (r != strataSuccess) die("%s returned %s: %s", what.c_str(), strataGetErrorString(r), strataGetLastError(comm));
}

// ---- options -------------------------------------------------------------------------------------------------

struct Options {
  double seconds = 60;
  uint64_t seed = 1;
  double sampleSeconds = 5;
  std::string log;
  std::string flightDir;
  size_t maxCount = size_t{1} << 20;
  double rssSlackMib = 32;
  double heapSlackMib = 8;
  long fdSlack = 4;
  long threadSlack = 2;
  long shmSlack = 2;
  long mapSlack = 4;
};

const char kUsage[] =
    "usage: strata_soak [--seconds S] [--seed N] [--sample-seconds S] [--log FILE] [--flight-dir DIR]\n"
    "                   [--max-count N]\n"
    "                   [--rss-slack-mib M] [--heap-slack-mib M] [--fd-slack N] [--thread-slack N]\n"
    "                   [--shm-slack N] [--map-slack N]\n"
    "Random collectives checked exactly for S seconds (default 60) on every rank of the launcher's world,\n"
    "sampling RSS, malloc's bytes in use, descriptors, threads, /dev/shm mappings and (rank 0) /dev/shm/strata-*\n"
    "every S seconds (default 5); fails when the last 20% of the run exceeds the warm-up baseline by more than\n"
    "the slack (defaults: RSS 32 MiB, heap 8 MiB, 4 descriptors, 2 threads, 2 shm names, 4 mappings).\n"
    "\"%r\" in FILE becomes the rank. Seed default 1; counts up to 1048576 (--max-count). On a failure every\n"
    "live communicator's flight recorder goes to DIR (strata-doctor DIR reads them).\n";

Options parseOptions(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "strata_soak: %s needs a value\n%s", a.c_str(), kUsage);
      std::exit(2);
    }
    const char* v = argv[++i];
    if (a == "--seconds") o.seconds = std::atof(v);
    else if (a == "--seed") o.seed = std::strtoull(v, nullptr, 0);
    else if (a == "--sample-seconds") o.sampleSeconds = std::atof(v);
    else if (a == "--log") o.log = v;
    else if (a == "--flight-dir") o.flightDir = v;
    else if (a == "--max-count") o.maxCount = std::strtoull(v, nullptr, 0);
    else if (a == "--rss-slack-mib") o.rssSlackMib = std::atof(v);
    else if (a == "--heap-slack-mib") o.heapSlackMib = std::atof(v);
    else if (a == "--fd-slack") o.fdSlack = std::atol(v);
    else if (a == "--thread-slack") o.threadSlack = std::atol(v);
    else if (a == "--shm-slack") o.shmSlack = std::atol(v);
    else if (a == "--map-slack") o.mapSlack = std::atol(v);
    else {
      std::fprintf(stderr, "strata_soak: unknown option %s\n%s", a.c_str(), kUsage);
      std::exit(2);
    }
  }
  if (o.seconds <= 0 || o.sampleSeconds <= 0 || o.maxCount < 1) {
    std::fprintf(stderr, "strata_soak: --seconds, --sample-seconds and --max-count must be positive\n");
    std::exit(2);
  }
  return o;
}

// ---- the shared random sequence ------------------------------------------------------------------------------

// SplitMix64: every rank starts from the same seed and makes the same draws in the same order, so every rank
// chooses the same operations without talking. Draws never depend on the rank or on a communicator's size.
class SharedRandom {
 public:
  explicit SharedRandom(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t n) { return next() % n; }
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  bool chance(double p) { return unit() < p; }

 private:
  uint64_t state_;
};

// ---- dtypes --------------------------------------------------------------------------------------------------

// A narrow binary float (f16, bf16, fp8) with E exponent bits, M mantissa bits and bias B; kFiniteOnly is the OCP
// e4m3 flavour (no infinities, all-ones is NaN). This program only stores small integers, so encode needs no
// rounding and refuses a value it cannot represent exactly (a bug of this program, not of the library).
template <int E, int M, int B, bool kFiniteOnly>
struct NarrowFloat {
  static constexpr uint32_t kExpAll = (1u << E) - 1;
  static constexpr uint32_t kMantAll = (1u << M) - 1;

  static double decode(uint32_t code) {
    const uint32_t exp = (code >> M) & kExpAll, mant = code & kMantAll;
    double mag;
    if (exp == kExpAll && (!kFiniteOnly || mant == kMantAll)) mag = (kFiniteOnly || mant) ? NAN : INFINITY;
    else if (exp == 0) mag = std::ldexp(mant, 1 - B - M);
    else mag = std::ldexp(mant + (1u << M), static_cast<int>(exp) - B - M);
    return (code >> (E + M)) & 1 ? -mag : mag;
  }

  static uint32_t encode(double v) {
    const uint32_t sign = std::signbit(v) ? 1u << (E + M) : 0;
    const double x = std::fabs(v);
    if (x == 0) return sign;
    int ex = 0;
    std::frexp(x, &ex);                     // x = f * 2^ex with f in [0.5, 1)
    const int e = std::max(ex - 1, 1 - B);  // the exponent x is stored with (subnormals: the least)
    const double q = std::ldexp(x, M - e);  // the significand as an integer, when x is representable
    if (q != std::floor(q) || e + B >= static_cast<int>(kExpAll)) die("%g is not exact in this float format", v);
    const uint32_t m = static_cast<uint32_t>(q);
    return (m < (1u << M) ? m : (static_cast<uint32_t>(e + B) << M) + (m - (1u << M))) | sign;
  }
};
using Half = NarrowFloat<5, 10, 15, false>;
using Bf16 = NarrowFloat<8, 7, 127, false>;
using E4m3 = NarrowFloat<4, 3, 7, true>;
using E5m2 = NarrowFloat<5, 2, 15, false>;

struct DtypeInfo {
  strataDataType_t type;
  const char* name;
  size_t size;
  bool isFloat;
  bool isUnsigned;
  // Sums take inputs from this many ranks at most (the others give 0), so that every partial sum, also doubled by
  // the PreMulSum scalar 2, stays exact: fp8 e5m2 holds the integers up to 8 and the even ones up to 16.
  int sumRanks;
};
const DtypeInfo kDtypes[] = {
    {strataInt8, "int8", 1, false, false, 16},           {strataUint8, "uint8", 1, false, true, 16},
    {strataInt32, "int32", 4, false, false, 1 << 20},    {strataUint32, "uint32", 4, false, true, 1 << 20},
    {strataInt64, "int64", 8, false, false, 1 << 20},    {strataUint64, "uint64", 8, false, true, 1 << 20},
    {strataFloat16, "float16", 2, true, false, 256},     {strataFloat32, "float32", 4, true, false, 1 << 20},
    {strataFloat64, "float64", 8, true, false, 1 << 20}, {strataBfloat16, "bfloat16", 2, true, false, 64},
    {strataFloat8e4m3, "float8e4m3", 1, true, false, 8}, {strataFloat8e5m2, "float8e5m2", 1, true, false, 8},
};
constexpr int kNumDtypes = sizeof(kDtypes) / sizeof(kDtypes[0]);
constexpr size_t kMaxDtypeSize = 8;
const DtypeInfo& info(strataDataType_t t) { return kDtypes[static_cast<int>(t)]; }

template <class T>
T loadAs(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
void storeAs(unsigned char* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

double load(const unsigned char* base, size_t i, strataDataType_t t) {
  const unsigned char* p = base + i * info(t).size;
  switch (t) {
    case strataInt8: return loadAs<int8_t>(p);
    case strataUint8: return loadAs<uint8_t>(p);
    case strataInt32: return loadAs<int32_t>(p);
    case strataUint32: return loadAs<uint32_t>(p);
    case strataInt64: return static_cast<double>(loadAs<int64_t>(p));
    case strataUint64: return static_cast<double>(loadAs<uint64_t>(p));
    case strataFloat16: return Half::decode(loadAs<uint16_t>(p));
    case strataFloat32: return loadAs<float>(p);
    case strataFloat64: return loadAs<double>(p);
    case strataBfloat16: return Bf16::decode(loadAs<uint16_t>(p));
    case strataFloat8e4m3: return E4m3::decode(*p);
    case strataFloat8e5m2: return E5m2::decode(*p);
    default: die("load: dtype %d", static_cast<int>(t));
  }
}

void store(unsigned char* base, size_t i, strataDataType_t t, double v) {
  unsigned char* p = base + i * info(t).size;
  switch (t) {
    case strataInt8: storeAs(p, static_cast<int8_t>(v)); break;
    case strataUint8: storeAs(p, static_cast<uint8_t>(v)); break;
    case strataInt32: storeAs(p, static_cast<int32_t>(v)); break;
    case strataUint32: storeAs(p, static_cast<uint32_t>(v)); break;
    case strataInt64: storeAs(p, static_cast<int64_t>(v)); break;
    case strataUint64: storeAs(p, static_cast<uint64_t>(v)); break;
    case strataFloat16: storeAs(p, static_cast<uint16_t>(Half::encode(v))); break;
    case strataFloat32: storeAs(p, static_cast<float>(v)); break;
    case strataFloat64: storeAs(p, v); break;
    case strataBfloat16: storeAs(p, static_cast<uint16_t>(Bf16::encode(v))); break;
    case strataFloat8e4m3: *p = static_cast<unsigned char>(E4m3::encode(v)); break;
    case strataFloat8e5m2: *p = static_cast<unsigned char>(E5m2::encode(v)); break;
    default: die("store: dtype %d", static_cast<int>(t));
  }
}

// ---- operations ----------------------------------------------------------------------------------------------

enum Kind { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce, kAllToAll, kSendRecv, kBarrier, kNumKinds };
const char* const kKindNames[kNumKinds] = {"allreduce", "reducescatter", "allgather", "broadcast",
                                           "reduce",    "alltoall",      "sendrecv",  "barrier"};
bool isReducing(Kind k) { return k == kAllReduce || k == kReduceScatter || k == kReduce; }

// Operators: the built-in ones, and kPreMulSum, a strataRedOpCreatePreMulSum op with scalar 2 made for the call.
constexpr int kPreMulSum = strataNumOps;
constexpr int kNoOp = -1;
constexpr double kPreMulScalar = 2.0;
const char* opName(int op) {
  static const char* const kNames[] = {"sum", "prod", "max", "min", "avg", "premulsum"};
  return op == kNoOp ? "-" : kNames[op];
}

struct Op {
  Kind kind = kBarrier;
  size_t count = 0;
  strataDataType_t dtype = strataFloat32;
  int op = kNoOp;
  uint64_t rootDraw = 0;  // the root is rootDraw % (size of the communicator it runs on)
  bool inPlace = false;
  uint64_t salt = 0;  // makes the inputs of every operation different
};

enum class Issue { kBlocking, kGroup, kGroupAsync };
struct Step {
  std::vector<Op> ops;  // more than one only in a group
  Issue issue = Issue::kBlocking;
  bool pollAsync = false;  // wait for asynchronous work with strataWorkTest instead of strataWorkWait
};

uint64_t gSalt = 0;

Op drawOp(SharedRandom& rng, size_t maxCount, bool allowBarrier) {
  Op op;
  op.kind = static_cast<Kind>(rng.below(allowBarrier ? kNumKinds : kNumKinds - 1));
  // Log-uniform from 1 to maxCount, and 0 one time in sixteen.
  const double logCount = rng.unit() * std::log(static_cast<double>(maxCount) + 1);
  const size_t count = std::clamp<size_t>(static_cast<size_t>(std::exp(logCount)), 1, maxCount);
  op.count = rng.below(16) == 0 ? 0 : count;
  op.dtype = kDtypes[rng.below(kNumDtypes)].type;
  op.op = isReducing(op.kind) ? static_cast<int>(rng.below(kPreMulSum + 1)) : kNoOp;
  op.rootDraw = rng.next();
  op.inPlace = op.kind != kBarrier && rng.chance(0.5);  // sendrecv in place: the receive overwrites the send
  op.salt = ++gSalt;
  return op;
}

Step drawStep(SharedRandom& rng, size_t maxCount) {
  Step s;
  const double u = rng.unit();
  if (u < 0.7) {
    s.ops.push_back(drawOp(rng, maxCount, true));
  } else if (u < 0.85) {
    s.ops.push_back(drawOp(rng, maxCount, false));
    s.issue = rng.chance(0.5) ? Issue::kGroupAsync : Issue::kGroup;
  } else {
    // Two or three operations in one group: each gets a third of the buffers, so counts go to maxCount / 4.
    const uint64_t n = 2 + rng.below(2);
    for (uint64_t k = 0; k < n; ++k) s.ops.push_back(drawOp(rng, std::max<size_t>(1, maxCount / 4), false));
    s.issue = rng.chance(0.5) ? Issue::kGroupAsync : Issue::kGroup;
  }
  s.pollAsync = rng.chance(0.3);
  return s;
}

// A communicator and this process's place in it.
struct CommView {
  strataComm_t comm = nullptr;
  int rank = 0;
  int size = 1;
  std::string name;
};

std::string describe(const Op& op, const CommView& v) {
  char root[32] = "";
  if (op.kind == kBroadcast || op.kind == kReduce)
    std::snprintf(root, sizeof root, " root %d", static_cast<int>(op.rootDraw % static_cast<uint64_t>(v.size)));
  char buf[320];
  std::snprintf(buf, sizeof buf, "%s (salt %llu) on %s (rank %d of %d): count %zu %s op %s%s %s", kKindNames[op.kind],
                static_cast<unsigned long long>(op.salt), v.name.c_str(), v.rank, v.size, op.count, info(op.dtype).name,
                opName(op.op), root, op.inPlace ? "in-place" : "out-of-place");
  return buf;
}

// ---- inputs and expected results -----------------------------------------------------------------------------

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

// ---- buffers and layouts -------------------------------------------------------------------------------------

constexpr unsigned char kSentinel = 0xa5;  // what output buffers hold before a call; never an expected value
constexpr size_t kGuardBytes = 64;         // bytes after an output that a call must leave alone

// Where an operation's input and output lie for `rank` of `n`, in elements.
struct Layout {
  size_t inElems = 0, outElems = 0;
  size_t inOffset = 0, outOffset = 0;  // in place: the input's and the result's place in the receive buffer
  size_t spanElems = 0;                // in place: the part of the receive buffer the call may write
};

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

// One operation's share of the send and receive buffers.
struct Slot {
  unsigned char* send;
  unsigned char* recv;
};

void prepare(const Op& op, const CommView& v, const Slot& s) {
  if (op.kind == kBarrier) return;
  const DtypeInfo& d = info(op.dtype);
  const Layout l = layoutOf(op, v.rank, v.size);
  const Values kind = valuesFor(op.op, d);
  std::memset(s.recv, kSentinel, l.spanElems * d.size + kGuardBytes);
  unsigned char* in = op.inPlace ? s.recv + l.inOffset * d.size : s.send;
  for (size_t i = 0; i < l.inElems; ++i) store(in, i, op.dtype, inputValue(kind, d, op.salt, v.rank, v.size, i));
}

strataResult_t issue(const Op& op, const CommView& v, const Slot& s, strataRedOp_t redOp) {
  const DtypeInfo& d = info(op.dtype);
  const Layout l = layoutOf(op, v.rank, v.size);
  const void* in = op.inPlace ? s.recv + l.inOffset * d.size : s.send;
  void* out = s.recv + l.outOffset * d.size;
  const int root = static_cast<int>(op.rootDraw % static_cast<uint64_t>(v.size));
  switch (op.kind) {
    case kAllReduce: return strataAllReduce(in, out, op.count, op.dtype, redOp, v.comm, nullptr);
    case kReduceScatter: return strataReduceScatter(in, out, op.count, op.dtype, redOp, v.comm, nullptr);
    case kAllGather: return strataAllGather(in, out, op.count, op.dtype, v.comm, nullptr);
    case kBroadcast: return strataBroadcast(in, out, op.count, op.dtype, root, v.comm, nullptr);
    case kReduce: return strataReduce(in, out, op.count, op.dtype, redOp, root, v.comm, nullptr);
    case kAllToAll: return strataAllToAll(in, out, op.count, op.dtype, v.comm, nullptr);
    case kBarrier: return strataBarrier(v.comm, nullptr);
    case kSendRecv: {
      // A ring shift in a group of its own (nested when the step is a group).
      const int next = (v.rank + 1) % v.size, prev = (v.rank + v.size - 1) % v.size;
      strataResult_t r = strataGroupStart();
      if (r == strataSuccess) r = strataSend(in, op.count, op.dtype, next, v.comm, nullptr);
      if (r == strataSuccess) r = strataRecv(out, op.count, op.dtype, prev, v.comm, nullptr);
      const strataResult_t end = strataGroupEnd();
      return r != strataSuccess ? r : end;
    }
    default: return strataInternalError;
  }
}

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

// ---- statistics ----------------------------------------------------------------------------------------------

struct Stats {
  uint64_t iterations = 0;
  uint64_t ops[kNumKinds] = {};
  uint64_t bytes = 0;  // per operation, the larger of this rank's input and output
  uint64_t grouped = 0, async = 0, preMulSums = 0;
  uint64_t splits = 0, shrinks = 0, nestedSplits = 0, recreates = 0, aborts = 0, revokes = 0, subOps = 0;
};

struct Buffers {
  std::vector<unsigned char> send, recv;
  size_t slotBytes = 0;  // the share of each operation of a group
};

void runStep(const Step& step, const CommView& v, Buffers& buf, Stats& st) {
  const size_t nops = step.ops.size();
  std::vector<strataRedOp_t> redOps(nops, strataSum);
  std::vector<Slot> slots(nops);
  for (size_t k = 0; k < nops; ++k) {
    const Op& op = step.ops[k];
    const size_t offset = nops == 1 ? 0 : k * buf.slotBytes;
    slots[k] = Slot{buf.send.data() + offset, buf.recv.data() + offset};
    if (op.op == kPreMulSum) {
      unsigned char scalar[kMaxDtypeSize];
      store(scalar, 0, op.dtype, kPreMulScalar);
      expectOk(strataRedOpCreatePreMulSum(&redOps[k], scalar, op.dtype, strataScalarHostImmediate, v.comm), v.comm,
               "strataRedOpCreatePreMulSum for " + describe(op, v));
      ++st.preMulSums;
    } else if (op.op != kNoOp) {
      redOps[k] = static_cast<strataRedOp_t>(op.op);
    }
    prepare(op, v, slots[k]);
  }
  if (step.issue == Issue::kBlocking) {
    expectOk(issue(step.ops[0], v, slots[0], redOps[0]), v.comm, describe(step.ops[0], v));
  } else {
    expectOk(strataGroupStart(), v.comm, "strataGroupStart");
    for (size_t k = 0; k < nops; ++k)
      expectOk(issue(step.ops[k], v, slots[k], redOps[k]), v.comm, "in a group: " + describe(step.ops[k], v));
    std::string what = "the group of " + std::to_string(nops) + " ops, the first " + describe(step.ops[0], v);
    if (step.issue == Issue::kGroup) {
      expectOk(strataGroupEnd(), v.comm, "strataGroupEnd of " + what);
    } else {
      strataWork_t work = nullptr;
      expectOk(strataGroupEndAsync(&work), v.comm, "strataGroupEndAsync of " + what);
      strataResult_t r;
      if (step.pollAsync) {
        // Poll with a growing sleep: the machine's cores are shared by every rank.
        int done = 0, sleepUs = 10;
        while ((r = strataWorkTest(work, &done)) == strataSuccess && !done) {
          std::this_thread::sleep_for(std::chrono::microseconds(sleepUs));
          sleepUs = std::min(sleepUs * 2, 2000);
        }
      } else {
        r = strataWorkWait(work, -1);
      }
      if (r != strataSuccess) die("async %s: %s: %s", what.c_str(), strataGetErrorString(r), strataWorkError(work));
      expectOk(strataWorkFree(work), v.comm, "strataWorkFree");
      ++st.async;
    }
    st.grouped += nops;
  }
  for (size_t k = 0; k < nops; ++k) {
    const Op& op = step.ops[k];
    check(op, v, slots[k]);
    if (op.op == kPreMulSum) expectOk(strataRedOpDestroy(redOps[k], v.comm), v.comm, "strataRedOpDestroy");
    const Layout l = layoutOf(op, v.rank, v.size);
    ++st.ops[op.kind];
    st.bytes += std::max(l.inElems, l.outElems) * info(op.dtype).size;
  }
}

// ---- communicators -------------------------------------------------------------------------------------------

// The ranks of a parent (0..n-1) with this rank's color, in (key, parent rank) order: the split's members.
std::vector<int> splitMembers(const std::vector<int>& color, const std::vector<int>& key, int n, int me) {
  std::vector<int> members;
  for (int r = 0; r < n; ++r)
    if (color[static_cast<size_t>(r)] == color[static_cast<size_t>(me)]) members.push_back(r);
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return key[static_cast<size_t>(a)] < key[static_cast<size_t>(b)]; });
  return members;
}

// Splits `parent` with this rank's color and key from the arrays (indexed by parent rank) and checks the new
// communicator's size and this rank's place in it. Returns an empty view for STRATA_SPLIT_NOCOLOR.
CommView split(const CommView& parent, const std::vector<int>& color, const std::vector<int>& key,
               const std::string& name) {
  const int myColor = color[static_cast<size_t>(parent.rank)];
  CommView child;
  child.name = name;
  expectOk(strataCommSplit(parent.comm, myColor, key[static_cast<size_t>(parent.rank)], &child.comm, nullptr),
           parent.comm, "strataCommSplit of " + parent.name + " into " + name);
  if (myColor == STRATA_SPLIT_NOCOLOR) {
    if (child.comm) die("strataCommSplit with STRATA_SPLIT_NOCOLOR returned a communicator for %s", name.c_str());
    return child;
  }
  gLiveComms.push_back(child.comm);
  const std::vector<int> members = splitMembers(color, key, parent.size, parent.rank);
  const int wantRank = static_cast<int>(std::find(members.begin(), members.end(), parent.rank) - members.begin());
  expectOk(strataCommCount(child.comm, &child.size), child.comm, "strataCommCount");
  expectOk(strataCommUserRank(child.comm, &child.rank), child.comm, "strataCommUserRank");
  if (child.size != static_cast<int>(members.size()) || child.rank != wantRank)
    die("strataCommSplit of %s (color %d, key %d): rank %d of %d, expected rank %d of %zu", parent.name.c_str(),
        myColor, key[static_cast<size_t>(parent.rank)], child.rank, child.size, wantRank, members.size());
  return child;
}

// Shrinks `parent` to the ranks not in `excluded` (0/1 by parent rank; the excluded do not call it) and checks the
// new communicator's size and this rank's place in it (the parent's order). Returns an empty view when excluded.
CommView shrink(const CommView& parent, const std::vector<int>& excluded, const std::string& name) {
  std::vector<int> list;
  int wantRank = 0;
  for (int r = 0; r < parent.size; ++r) {
    if (excluded[static_cast<size_t>(r)]) list.push_back(r);
    else if (r < parent.rank) ++wantRank;
  }
  CommView child;
  child.name = name;
  if (excluded[static_cast<size_t>(parent.rank)]) return child;
  expectOk(strataCommShrink(parent.comm, list.data(), static_cast<int>(list.size()), &child.comm, nullptr,
                            STRATA_SHRINK_DEFAULT),
           parent.comm, "strataCommShrink of " + parent.name + " into " + name);
  gLiveComms.push_back(child.comm);
  expectOk(strataCommCount(child.comm, &child.size), child.comm, "strataCommCount");
  expectOk(strataCommUserRank(child.comm, &child.rank), child.comm, "strataCommUserRank");
  if (child.size != parent.size - static_cast<int>(list.size()) || child.rank != wantRank)
    die("strataCommShrink of %s excluding %zu ranks: rank %d of %d, expected rank %d of %d", parent.name.c_str(),
        list.size(), child.rank, child.size, wantRank, parent.size - static_cast<int>(list.size()));
  return child;
}

// How a communicator goes: destroy; abort; or revoke, then destroy. Abort and revoke do not wait for peers, so the
// caller first makes sure that every rank is done with it.
enum class Release { kDestroy, kAbort, kRevoke };

void release(CommView& v, Release how, const std::string& why) {
  if (!v.comm) return;
  gLiveComms.erase(std::find(gLiveComms.begin(), gLiveComms.end(), v.comm));
  const std::string what = v.name + " (" + why + ")";
  if (how == Release::kRevoke)
    expectOk(strataCommRevoke(v.comm, STRATA_REVOKE_DEFAULT), v.comm, "strataCommRevoke of " + what);
  if (how == Release::kAbort) expectOk(strataCommAbort(v.comm), nullptr, "strataCommAbort of " + what);
  else expectOk(strataCommDestroy(v.comm), nullptr, "strataCommDestroy of " + what);
  v.comm = nullptr;
}

// Random colors (some ranks out), or a shrink of the world that excludes random ranks (never `decider`, whose
// process hosts the bootstrap root); a few operations on each part, maybe a split of a part; then destroy, or abort
// or revoke once a barrier on the world shows that every rank has finished with the parts.
// A world shrunk before (excluding ranks that are alive and take part again) is shrunk again like any other.
void splitRound(CommView& world, int decider, SharedRandom& rng, size_t maxCount, Buffers& buf, Stats& st) {
  const int n = world.size;
  const int ncolors = 1 + static_cast<int>(rng.below(static_cast<uint64_t>(std::min(n, 3))));
  std::vector<int> color(static_cast<size_t>(n)), key(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    color[static_cast<size_t>(r)] =
        rng.chance(0.125) ? STRATA_SPLIT_NOCOLOR : static_cast<int>(rng.below(static_cast<uint64_t>(ncolors)));
    key[static_cast<size_t>(r)] = static_cast<int>(rng.below(3));
  }
  std::vector<Step> steps(1 + rng.below(3));
  for (Step& s : steps) s = drawStep(rng, maxCount);
  // The nested split's arrays are indexed by rank in the part; world-sized so every rank draws the same.
  const bool nested = rng.chance(0.25);
  std::vector<int> nestedColor(static_cast<size_t>(n)), nestedKey(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    nestedColor[static_cast<size_t>(r)] = static_cast<int>(rng.below(2));
    nestedKey[static_cast<size_t>(r)] = static_cast<int>(rng.below(3));
  }
  const Step nestedStep = drawStep(rng, maxCount);
  const bool useShrink = rng.chance(0.25);
  std::vector<int> excluded(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) excluded[static_cast<size_t>(r)] = r != decider && rng.chance(0.3);
  const uint64_t end = rng.below(8);  // 0-1: abort, 2: revoke, else destroy
  const Release how = end < 2 ? Release::kAbort : end == 2 ? Release::kRevoke : Release::kDestroy;

  CommView part;
  if (useShrink) {
    part = shrink(world, excluded, "shrink " + std::to_string(st.shrinks));
    ++st.shrinks;
  } else {
    const int myColor = color[static_cast<size_t>(world.rank)];
    part = split(world, color, key, "split " + std::to_string(st.splits) + " color " + std::to_string(myColor));
    ++st.splits;
  }
  if (part.comm) {
    for (const Step& s : steps) {
      runStep(s, part, buf, st);
      st.subOps += s.ops.size();
    }
    if (nested) {
      CommView inner = split(part, nestedColor, nestedKey,
                             part.name + " / color " + std::to_string(nestedColor[static_cast<size_t>(part.rank)]));
      runStep(nestedStep, inner, buf, st);
      st.subOps += nestedStep.ops.size();
      release(inner, Release::kDestroy, "nested split done");
      ++st.nestedSplits;
    }
  }
  if (how != Release::kDestroy) {
    expectOk(strataBarrier(world.comm, nullptr), world.comm,
             "strataBarrier on " + world.name + " before an abort or revoke");
    if (part.comm) ++(how == Release::kAbort ? st.aborts : st.revokes);
  }
  release(part, how, "split round done");
}

// A new world: a split of the old one with one color and random keys (so ranks move), then the old one goes.
// `decider` (the rank that decides when to sample and stop) follows its process to its new rank.
void recreateWorld(CommView& world, int& decider, SharedRandom& rng, Stats& st) {
  const int n = world.size;
  std::vector<int> color(static_cast<size_t>(n), 0), key(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) key[static_cast<size_t>(r)] = static_cast<int>(rng.below(static_cast<uint64_t>(n)));
  const bool abort = rng.chance(0.25);
  ++st.recreates;
  CommView fresh = split(world, color, key, "world " + std::to_string(st.recreates));
  const std::vector<int> order = splitMembers(color, key, n, world.rank);
  decider = static_cast<int>(std::find(order.begin(), order.end(), decider) - order.begin());
  if (abort) {
    // Abort does not wait for peers: first make sure every rank is done with the old world.
    expectOk(strataBarrier(fresh.comm, nullptr), fresh.comm, "strataBarrier on " + fresh.name + " before an abort");
    ++st.aborts;
  }
  release(world, abort ? Release::kAbort : Release::kDestroy, "replaced by " + fresh.name);
  world = fresh;
}

// ---- resource samples ----------------------------------------------------------------------------------------

enum Metric { kRss, kHeap, kFds, kThreads, kShmNames, kShmMaps, kNumMetrics };
const char* const kMetricNames[kNumMetrics] = {"rss_kib", "heap_kib", "fds", "threads", "shm_names", "shm_maps"};

struct Sample {
  double t = 0;  // seconds since the start, on the deciding rank's clock
  uint64_t iteration = 0;
  bool warm = false;
  long v[kNumMetrics] = {};  // -1: not measured on this rank
};

long statusField(const char* field) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long value = -1;
  const size_t len = std::strlen(field);
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, field, len) == 0 && line[len] == ':') value = std::atol(line + len + 1);
  std::fclose(f);
  return value;
}

// Entries of `dir` whose name starts with `prefix`; -1 if it cannot be read.
long countEntries(const char* dir, const char* prefix) {
  DIR* d = opendir(dir);
  if (!d) return -1;
  long n = 0;
  while (const dirent* e = readdir(d))
    if (e->d_name[0] != '.' && std::strncmp(e->d_name, prefix, std::strlen(prefix)) == 0) ++n;
  closedir(d);
  return n;
}

// Bytes malloc has handed out and not had back, in KiB (glibc; -1 elsewhere). Unlike RSS, it falls when memory is
// freed, so a slow leak shows here long before it passes RSS's slack.
long heapInUseKib() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
  const struct mallinfo2 mi = mallinfo2();
  return static_cast<long>((mi.uordblks + mi.hblkhd) / 1024);
#else
  return -1;
#endif
}

long countShmMappings() {
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (!f) return -1;
  char line[1024];
  long n = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::strstr(line, " /dev/shm/")) ++n;
  std::fclose(f);
  return n;
}

Sample takeSample(double t, uint64_t iteration, bool warm) {
  Sample s;
  s.t = t;
  s.iteration = iteration;
  s.warm = warm;
  s.v[kRss] = statusField("VmRSS");
  s.v[kHeap] = heapInUseKib();
  s.v[kFds] = countEntries("/proc/self/fd", "") - 1;  // less the descriptor reading the directory
  s.v[kThreads] = statusField("Threads");
  s.v[kShmNames] = gLaunchRank == 0 ? countEntries("/dev/shm", "strata-") : -1;
  s.v[kShmMaps] = countShmMappings();
  return s;
}

std::string sampleJson(const Sample& s) {
  char buf[512];
  std::snprintf(
      buf, sizeof buf,
      "{\"type\":\"sample\",\"rank\":%d,\"t\":%.1f,\"iteration\":%llu,\"warm\":%s,\"rss_kib\":%ld,\"heap_kib\":%ld,"
      "\"fds\":%ld,\"threads\":%ld,\"shm_names\":%ld,\"shm_maps\":%ld}",
      gLaunchRank, s.t, static_cast<unsigned long long>(s.iteration), s.warm ? "true" : "false", s.v[kRss], s.v[kHeap],
      s.v[kFds], s.v[kThreads], s.v[kShmNames], s.v[kShmMaps]);
  return buf;
}

// Per metric: first, last and max sample, the baseline, the final figure, and whether it stayed within slack.
struct Verdict {
  long first = -1, last = -1, max = -1, baseline = -1, final = -1;
  bool ok = true;
};

// Baseline: the largest sample of the first 20% of the run once warm (the first warm sample when the warm-up took
// longer); final: the largest sample of the last 20%. The heap and the RSS are judged by their least samples
// instead: the library's caches (a communicator's scratch for Avg and PreMulSum inputs, its plans) and the test's
// own largest buffers move them by tens of MiB from one sample to the next (RSS peaked 23 MiB above a warm-up that
// had not yet drawn the largest calls, with the heap floor flat), while a leak lifts their floor.
Verdict judge(const std::vector<Sample>& samples, Metric m, const Sample& firstWarm, long slack) {
  const double total = samples.back().t;
  const bool floor = m == kHeap || m == kRss;
  const auto pick = [floor](long a, long b) { return floor ? std::min(a, b) : std::max(a, b); };
  Verdict v;
  v.first = samples.front().v[m];
  v.last = samples.back().v[m];
  v.max = v.first;
  v.baseline = firstWarm.v[m];
  v.final = samples.back().v[m];
  for (const Sample& s : samples) {
    v.max = std::max(v.max, s.v[m]);
    if (s.warm && s.t <= 0.2 * total) v.baseline = pick(v.baseline, s.v[m]);
    if (s.t >= 0.8 * total) v.final = pick(v.final, s.v[m]);
  }
  v.ok = v.final - v.baseline <= slack;
  return v;
}

// Record exchanged at the end so rank 0 can print every rank's figures: [launch rank, failed, 5 x 5 figures].
constexpr size_t kRecordLen = 2 + kNumMetrics * 5;

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parseOptions(argc, argv);
#if defined(__GLIBC__)
  // A fixed mmap threshold: glibc otherwise raises it to the largest block freed (up to 32 MiB), after which big
  // blocks come from the heap and RSS shows glibc's high-water mark instead of the memory in use.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
#endif
  if (const char* r = std::getenv("RANK")) gLaunchRank = std::atoi(r);
  CommView world;
  world.name = "world 0";
  expectOk(strataCommInitFromEnv(&world.comm), nullptr, "strataCommInitFromEnv");
  expectOk(strataCommCount(world.comm, &world.size), world.comm, "strataCommCount");
  expectOk(strataCommUserRank(world.comm, &world.rank), world.comm, "strataCommUserRank");
  gLaunchRank = world.rank;
  gLiveComms.push_back(world.comm);
  gFlightDir = opt.flightDir;

  FILE* log = nullptr;
  if (!opt.log.empty()) {
    std::string path = opt.log;
    for (size_t p; (p = path.find("%r")) != std::string::npos;) path.replace(p, 2, std::to_string(gLaunchRank));
    log = std::fopen(path.c_str(), "w");
    if (!log) die("cannot write --log %s: %s", path.c_str(), std::strerror(errno));
  }

  // Buffers for the largest operation (n x maxCount elements of 8 bytes), or three slots for the operations of a
  // group (n x maxCount / 4 elements each), touched now so that the first use of a large count later does not look
  // like growth.
  Buffers buf;
  const size_t n = static_cast<size_t>(world.size);
  buf.slotBytes = (n * std::max<size_t>(1, opt.maxCount / 4) * kMaxDtypeSize + kGuardBytes + 63) / 64 * 64;
  const size_t bytes = std::max(n * opt.maxCount * kMaxDtypeSize + kGuardBytes, 3 * buf.slotBytes);
  buf.send.assign(bytes, kSentinel);
  buf.recv.assign(bytes, kSentinel);

  SharedRandom rng(opt.seed);
  Stats st;
  std::vector<Sample> samples;
  int decider = 0;  // the world rank of the launcher's rank 0, which keeps the clock
  const auto start = std::chrono::steady_clock::now();
  double lastSample = -1e9;
  if (gLaunchRank == 0)
    std::printf("strata_soak: %d ranks, %.0f s, seed %llu, counts up to %zu, a sample every %.0f s\n", world.size,
                opt.seconds, static_cast<unsigned long long>(opt.seed), opt.maxCount, opt.sampleSeconds);

  // Every iteration starts with a broadcast from the deciding rank: go on or stop, sample now or not, and its
  // clock, so every rank stops after the same iteration and samples at the same points.
  constexpr int64_t kGoOn = 1, kSampleNow = 2;
  for (gIteration = 0;; ++gIteration) {
    int64_t flags[2] = {0, 0};
    if (world.rank == decider) {
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const bool goOn = t < opt.seconds;
      const bool sampleNow = !goOn || t - lastSample >= opt.sampleSeconds;
      if (sampleNow) lastSample = t;
      flags[0] = (goOn ? kGoOn : 0) | (sampleNow ? kSampleNow : 0);
      flags[1] = static_cast<int64_t>(t * 1000);
    }
    expectOk(strataBroadcast(flags, flags, 2, strataInt64, decider, world.comm, nullptr), world.comm,
             "strataBroadcast of the control flags on " + world.name);
    if (flags[0] & kSampleNow) {
      strataResult_t async = strataSuccess;
      expectOk(strataCommGetAsyncError(world.comm, &async), world.comm, "strataCommGetAsyncError");
      if (async != strataSuccess)
        die("%s has an asynchronous error: %s", world.name.c_str(), strataGetErrorString(async));
      const Sample s =
          takeSample(static_cast<double>(flags[1]) / 1000, gIteration, (st.splits || st.shrinks) && st.recreates);
      samples.push_back(s);
      if (log) {
        std::fprintf(log, "%s\n", sampleJson(s).c_str());
        std::fflush(log);
      }
      if (gLaunchRank == 0) {
        std::printf(
            "sample t=%.0fs iteration %llu%s: rss %.1f MiB, heap %.1f MiB, fds %ld, threads %ld, shm names %ld, "
            "shm maps %ld\n",
            s.t, static_cast<unsigned long long>(s.iteration), s.warm ? "" : " (warm-up)",
            static_cast<double>(s.v[kRss]) / 1024, static_cast<double>(s.v[kHeap]) / 1024, s.v[kFds], s.v[kThreads],
            s.v[kShmNames], s.v[kShmMaps]);
        std::fflush(stdout);
      }
    }
    if (!(flags[0] & kGoOn)) break;
    st.iterations = gIteration + 1;
    if (gIteration == 2 || rng.chance(1.0 / 40)) splitRound(world, decider, rng, opt.maxCount, buf, st);
    if (gIteration == 4 || rng.chance(1.0 / 150)) recreateWorld(world, decider, rng, st);
    runStep(drawStep(rng, opt.maxCount), world, buf, st);
  }

  const double total = samples.back().t;
  Verdict verdicts[kNumMetrics];
  const long slack[kNumMetrics] = {static_cast<long>(opt.rssSlackMib * 1024),
                                   static_cast<long>(opt.heapSlackMib * 1024),
                                   opt.fdSlack,
                                   opt.threadSlack,
                                   opt.shmSlack,
                                   opt.mapSlack};
  bool failed = false;
  const Sample* firstWarm = nullptr;
  for (const Sample& s : samples)
    if (s.warm && !firstWarm) firstWarm = &s;
  if (!firstWarm) {
    std::fprintf(stderr, "strata_soak: rank %d: FAIL: the run ended before the warm-up did (%.1f s)\n", gLaunchRank,
                 total);
    failed = true;
  }
  for (int m = 0; m < kNumMetrics && firstWarm; ++m) {
    Verdict& v = verdicts[m];
    if (samples.front().v[m] < 0) continue;
    v = judge(samples, static_cast<Metric>(m), *firstWarm, slack[m]);
    if (!v.ok) {
      failed = true;
      const char* how = m == kHeap || m == kRss ? "least" : "largest";
      std::fprintf(stderr,
                   "strata_soak: rank %d: FAIL: %s grew from %ld (baseline: the %s sample of the first 20%% after "
                   "warm-up) to %ld (the %s sample of the last 20%%), by %ld, more than the slack of %ld\n",
                   gLaunchRank, kMetricNames[m], v.baseline, how, v.final, how, v.final - v.baseline, slack[m]);
    }
  }

  if (log) {
    std::fprintf(log, "{\"type\":\"summary\",\"rank\":%d,\"seconds\":%.1f,\"iterations\":%llu,\"bytes\":%llu",
                 gLaunchRank, total, static_cast<unsigned long long>(st.iterations),
                 static_cast<unsigned long long>(st.bytes));
    for (int k = 0; k < kNumKinds; ++k)
      std::fprintf(log, ",\"%s\":%llu", kKindNames[k], static_cast<unsigned long long>(st.ops[k]));
    for (int m = 0; m < kNumMetrics; ++m)
      std::fprintf(log, ",\"%s\":{\"first\":%ld,\"last\":%ld,\"max\":%ld,\"baseline\":%ld,\"final\":%ld,\"ok\":%s}",
                   kMetricNames[m], verdicts[m].first, verdicts[m].last, verdicts[m].max, verdicts[m].baseline,
                   verdicts[m].final, verdicts[m].ok ? "true" : "false");
    std::fprintf(log, ",\"failed\":%s}\n", failed ? "true" : "false");
    std::fclose(log);
  }

  // Every rank's figures to every rank: the launcher's rank 0 prints them all, and every rank exits with the
  // same status.
  std::vector<int64_t> mine(kRecordLen), all(kRecordLen * static_cast<size_t>(world.size));
  mine[0] = gLaunchRank;
  mine[1] = failed ? 1 : 0;
  for (int m = 0; m < kNumMetrics; ++m) {
    const Verdict& v = verdicts[m];
    const long f[5] = {v.first, v.last, v.max, v.baseline, v.final};
    for (int j = 0; j < 5; ++j) mine[2 + static_cast<size_t>(m) * 5 + static_cast<size_t>(j)] = f[j];
  }
  expectOk(strataAllGather(mine.data(), all.data(), kRecordLen, strataInt64, world.comm, nullptr), world.comm,
           "strataAllGather of the verdicts");
  bool anyFailed = false;
  for (int r = 0; r < world.size; ++r) anyFailed = anyFailed || all[static_cast<size_t>(r) * kRecordLen + 1] != 0;

  if (gLaunchRank == 0) {
    std::printf("strata_soak: %.1f s, %llu iterations, %.2f GiB through this rank, %zu samples (warm from t=%.0fs)\n",
                total, static_cast<unsigned long long>(st.iterations), static_cast<double>(st.bytes) / (1 << 30),
                samples.size(), firstWarm ? firstWarm->t : -1.0);
    std::printf("operations on rank 0:");
    for (int k = 0; k < kNumKinds; ++k)
      std::printf(" %s %llu", kKindNames[k], static_cast<unsigned long long>(st.ops[k]));
    std::printf("; in groups %llu (async groups %llu), premulsum %llu\n", static_cast<unsigned long long>(st.grouped),
                static_cast<unsigned long long>(st.async), static_cast<unsigned long long>(st.preMulSums));
    std::printf(
        "communicators: %llu splits and %llu shrinks (%llu nested splits, %llu operations on the parts), %llu "
        "re-creates, %llu aborts, %llu revokes\n",
        static_cast<unsigned long long>(st.splits), static_cast<unsigned long long>(st.shrinks),
        static_cast<unsigned long long>(st.nestedSplits), static_cast<unsigned long long>(st.subOps),
        static_cast<unsigned long long>(st.recreates), static_cast<unsigned long long>(st.aborts),
        static_cast<unsigned long long>(st.revokes));
    for (int r = 0; r < world.size; ++r) {
      const int64_t* rec = &all[static_cast<size_t>(r) * kRecordLen];
      std::printf("rank %lld:", static_cast<long long>(rec[0]));
      for (int m = 0; m < kNumMetrics; ++m) {
        const int64_t* f = rec + 2 + m * 5;
        if (f[0] < 0) continue;
        std::printf(" %s first/last/max %lld/%lld/%lld %s %lld final %lld (slack %ld)%s", kMetricNames[m],
                    static_cast<long long>(f[0]), static_cast<long long>(f[1]), static_cast<long long>(f[2]),
                    m == kHeap || m == kRss ? "floors: baseline" : "baseline", static_cast<long long>(f[3]),
                    static_cast<long long>(f[4]), slack[m], f[4] - f[3] > slack[m] ? " GREW" : "");
        if (m + 1 < kNumMetrics) std::printf(";");
      }
      std::printf("\n");
    }
    std::printf("strata_soak: %s\n", anyFailed ? "FAIL" : "PASS");
    std::fflush(stdout);
  }
  release(world, Release::kDestroy, "the end of the run");
  return anyFailed ? 1 : 0;
}
