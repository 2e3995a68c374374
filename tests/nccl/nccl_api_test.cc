// NCCL's API through nccl.h alone, on whichever libnccl.so.2 the program is linked with (in this tree, Strata's
// drop-in). Every rank computes what every other rank sent, so each result is checked element by element and
// exactly: every collective x dtype x op x count, in place and out of place, every root; groups that mix
// collectives with sends and receives; split, shrink, non-blocking communicators polled to completion, PreMulSum
// and Avg; and bad arguments, which must come back as NCCL's result code with a message, never a crash.
//
// Inputs are chosen so that NCCL's semantics give one exact answer in every dtype: sums stay within the range
// where a type's integers are exact (small integers for fp8, halves for 16-bit and wider floats), products are of
// small factors, max/min see random bit patterns (the whole range, subnormals included), and Avg's float inputs
// are multiples of the rank count (NCCL pre-multiplies by 1/n) while its integer sums are divided truncating
// toward zero (NCCL's SumPostDiv).
//
// Ranks and the unique id: under `mpirun` (the build with STRATA_NCCL_TEST_MPI) from MPI, the id by MPI_Bcast;
// under `strata-run` (or torchrun) from RANK / WORLD_SIZE, rank 0 writing the id to a file that the others wait
// for (--id-file PATH, or a name made from MASTER_PORT and a hash of STRATA_SECRET in the temp directory); alone,
// one rank. Later ids (the non-blocking communicator's) travel over the first communicator.
//
// usage: nccl_api_test [--id-file PATH] [--large-count N (0: none; default 65537)]
// Prints one line per group of checks and "nccl_api_test: N checks passed on rank r of n"; exits 1 on any
// failure, naming the call and its first wrong element.
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <source_location>
#include <string>
#include <thread>
#include <vector>

#include "nccl_test_support.h"

// NCCL's device API is declared in nccl_device.h, which needs a CUDA compiler: the host functions under test are
// declared here with the same C ABI (opaque pointers).
extern "C" ncclResult_t ncclDevCommCreate(ncclComm_t comm, const void* reqs, void* outDevComm);
extern "C" ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const void* devComm);
extern "C" ncclResult_t ncclCommQueryProperties(ncclComm_t comm, void* props);

namespace {

using namespace nccl_test;

// The end of a group of checks: one line from rank 0.
void groupDone(const char* name) {
  if (gRank == 0) std::printf("  %-46s %6ld checks\n", name, gGroupChecks);
  std::fflush(stdout);
  gGroupChecks = 0;
}

// ---- datatypes ---------------------------------------------------------------------------------------------

enum class Kind { kSigned, kUnsigned, kFloat };

// A datatype as this test sees it: values are long doubles (exact for every value of every type, 64-bit
// integers included), stored in the type's own bits.
struct DType {
  ncclDataType_t type;
  const char* name;
  size_t size;
  Kind kind;
  int expBits = 0;  // floats: IEEE-style layout
  int manBits = 0;
  bool e4m3 = false;  // OCP e4m3: no infinities, NaN only with every exponent and mantissa bit set

  bool isFloat() const { return kind == Kind::kFloat; }
  bool isFp8() const { return isFloat() && size == 1; }
  // Every integer of magnitude up to this is exact (floats: 2^precision).
  long double exactRange() const {
    if (isFloat()) return std::ldexp(1.0L, manBits + 1);
    const int bits = static_cast<int>(size * 8) - (kind == Kind::kSigned ? 1 : 0);
    return std::ldexp(1.0L, bits) - 1;
  }

  uint64_t bitsAt(const unsigned char* p) const {
    uint64_t b = 0;
    std::memcpy(&b, p, size);  // little-endian host: the low bytes
    return b;
  }

  long double get(const unsigned char* p) const {
    const uint64_t b = bitsAt(p);
    switch (kind) {
      case Kind::kUnsigned: return static_cast<long double>(b);
      case Kind::kSigned: {
        const int shift = 64 - static_cast<int>(size * 8);
        return static_cast<long double>(static_cast<int64_t>(b << shift) >> shift);
      }
      case Kind::kFloat: return decodeFloat(b);
    }
    return 0;
  }

  void put(unsigned char* p, long double v) const {
    uint64_t b = 0;
    switch (kind) {
      case Kind::kUnsigned: b = static_cast<uint64_t>(v); break;
      case Kind::kSigned: b = static_cast<uint64_t>(static_cast<int64_t>(v)); break;
      case Kind::kFloat: b = encodeFloat(v); break;
    }
    std::memcpy(p, &b, size);
    if (get(p) != v) die(std::string("test bug: ") + std::to_string(static_cast<double>(v)) + " is not a " + name);
  }

  bool isNanOrInf(uint64_t b) const {
    const uint64_t man = b & ((1ull << manBits) - 1);
    const uint64_t exp = (b >> manBits) & ((1ull << expBits) - 1);
    const uint64_t expMax = (1ull << expBits) - 1;
    return e4m3 ? exp == expMax && man == (1ull << manBits) - 1 : exp == expMax;
  }

  long double decodeFloat(uint64_t b) const {
    const uint64_t man = b & ((1ull << manBits) - 1);
    const uint64_t exp = (b >> manBits) & ((1ull << expBits) - 1);
    const bool negative = (b >> (expBits + manBits)) & 1;
    const int bias = (1 << (expBits - 1)) - 1;
    long double v;
    if (isNanOrInf(b)) v = man || e4m3 ? NAN : INFINITY;
    else if (exp == 0) v = std::ldexp(static_cast<long double>(man), 1 - bias - manBits);
    else v = std::ldexp(static_cast<long double>(man | (1ull << manBits)), static_cast<int>(exp) - bias - manBits);
    return negative ? -v : v;
  }

  // The bits of v, which must be exactly representable (put checks).
  uint64_t encodeFloat(long double v) const {
    const uint64_t sign = std::signbit(v) ? 1ull << (expBits + manBits) : 0;
    const long double a = std::fabs(v);
    if (a == 0) return sign;
    const int bias = (1 << (expBits - 1)) - 1;
    int e = 0;
    std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
    int exp = e - 1 + bias;
    uint64_t man;
    if (exp >= 1) {
      man = static_cast<uint64_t>(std::ldexp(a, manBits - (e - 1))) - (1ull << manBits);
    } else {
      exp = 0;
      man = static_cast<uint64_t>(std::ldexp(a, manBits + bias - 1));
    }
    return sign | static_cast<uint64_t>(exp) << manBits | man;
  }
};

const DType kTypes[] = {
    {ncclInt8, "int8", 1, Kind::kSigned},
    {ncclUint8, "uint8", 1, Kind::kUnsigned},
    {ncclInt32, "int32", 4, Kind::kSigned},
    {ncclUint32, "uint32", 4, Kind::kUnsigned},
    {ncclInt64, "int64", 8, Kind::kSigned},
    {ncclUint64, "uint64", 8, Kind::kUnsigned},
    {ncclFloat16, "float16", 2, Kind::kFloat, 5, 10},
    {ncclFloat32, "float32", 4, Kind::kFloat, 8, 23},
    {ncclFloat64, "float64", 8, Kind::kFloat, 11, 52},
    {ncclBfloat16, "bfloat16", 2, Kind::kFloat, 8, 7},
    {ncclFloat8e4m3, "float8e4m3", 1, Kind::kFloat, 4, 3, true},
    {ncclFloat8e5m2, "float8e5m2", 1, Kind::kFloat, 5, 2},
};

const DType& typeOf(ncclDataType_t t) {
  for (const DType& d : kTypes)
    if (d.type == t) return d;
  die("test bug: unknown datatype");
}

// ---- values ------------------------------------------------------------------------------------------------

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The bits of element `index` sent by `rank` in the call numbered `salt`: every call and rank sends other data.
uint64_t hashOf(uint64_t salt, int rank, size_t index) {
  return mix(mix(mix(salt) ^ static_cast<uint64_t>(rank)) ^ static_cast<uint64_t>(index));
}

enum class Op { kSum, kProd, kMax, kMin, kAvg, kPreMulSum };
const char* opName(Op op) {
  static const char* const names[] = {"sum", "prod", "max", "min", "avg", "premulsum"};
  return names[static_cast<int>(op)];
}

// Picks from `choices` by hash.
long double pick(uint64_t h, std::initializer_list<long double> choices) { return choices.begin()[h % choices.size()]; }

// A uniform integer in [-k, k] (signed) or [0, k].
long double uniform(uint64_t h, uint64_t k, bool withNegatives) {
  if (!withNegatives) return static_cast<long double>(k == UINT64_MAX ? h : h % (k + 1));
  return static_cast<long double>(h % (2 * k + 1)) - static_cast<long double>(k);
}

// The input of a reduction: exact under `op` over `n` ranks (see the file comment).
long double reductionInput(const DType& t, Op op, uint64_t h, int n) {
  const bool isSigned = t.kind != Kind::kUnsigned;
  switch (op) {
    case Op::kMax:
    case Op::kMin: {
      if (!t.isFloat()) return t.get(reinterpret_cast<const unsigned char*>(&h));
      uint64_t b = h;
      for (int i = 0; t.isNanOrInf(b & (t.size == 8 ? ~0ull : (1ull << (8 * t.size)) - 1)); ++i) b = mix(b + i);
      const long double v = t.get(reinterpret_cast<const unsigned char*>(&b));
      return v == 0 ? 0.0L : v;  // -0 and +0 compare equal: which one max returns is not specified
    }
    case Op::kProd:
      switch (t.type) {
        case ncclInt8: return pick(h, {-2, -1, 1, 2});
        case ncclUint8: return pick(h, {1, 2, 3});
        case ncclInt32: return pick(h, {-64, -1, 1, 2, 64});
        case ncclUint32: return pick(h, {1, 2, 80});
        case ncclInt64: return pick(h, {-4096, -1, 1, 3, 4096});
        case ncclUint64: return pick(h, {1, 3, 7000});
        case ncclFloat32:
        case ncclFloat64: return pick(h, {-2, -1, -0.5, 0.5, 1, 3});
        default: return pick(h, {-2, -1, -0.5, 0.5, 1, 2});
      }
    case Op::kSum:
    case Op::kPreMulSum: {
      // Integers: the sum (times 2 for PreMulSum) stays in range. Floats: every partial sum is a multiple of the
      // unit within the exact range (the factor 2 of PreMulSum moves the exponent only).
      if (!t.isFloat()) {
        const uint64_t k = static_cast<uint64_t>(t.exactRange() / (n * (op == Op::kPreMulSum ? 2 : 1)));
        return uniform(h, k, isSigned);
      }
      const long double unit = t.isFp8() ? 1.0L : 0.5L;
      const uint64_t k = std::max<uint64_t>(1, static_cast<uint64_t>(t.exactRange() / n));
      return uniform(h, k, true) * unit;
    }
    case Op::kAvg: {
      if (!t.isFloat()) return uniform(h, static_cast<uint64_t>(t.exactRange() / n), isSigned);
      // n * k: pre-multiplied by 1/n it is k again, whatever the rounding of 1/n.
      const uint64_t k = std::max<uint64_t>(1, std::min<uint64_t>(1000, static_cast<uint64_t>(t.exactRange() / n)));
      return uniform(h, k, true) * n;
    }
  }
  return 0;
}

// NCCL's result for one element, from every rank's input.
long double reduceReference(const DType& t, Op op, const std::vector<long double>& in, long double scalar) {
  long double acc = op == Op::kPreMulSum ? in[0] * scalar : in[0];
  for (size_t r = 1; r < in.size(); ++r) {
    switch (op) {
      case Op::kSum:
      case Op::kAvg: acc += in[r]; break;
      case Op::kPreMulSum: acc += in[r] * scalar; break;
      case Op::kProd: acc *= in[r]; break;
      case Op::kMax: acc = std::max(acc, in[r]); break;
      case Op::kMin: acc = std::min(acc, in[r]); break;
    }
  }
  if (op != Op::kAvg) return acc;
  const auto n = static_cast<int64_t>(in.size());
  if (t.isFloat()) return acc / n;
  // SumPostDiv: the sum divided truncating toward zero (|sum| < 2^64 is exact as a long double).
  if (t.kind == Kind::kUnsigned) return static_cast<long double>(static_cast<uint64_t>(acc) / static_cast<uint64_t>(n));
  return static_cast<long double>(static_cast<int64_t>(acc) / n);
}

// ---- buffers -----------------------------------------------------------------------------------------------

constexpr size_t kGuard = 8;           // elements after each output that no call may touch
constexpr unsigned char kFill = 0xA5;  // what an output holds before the call

struct Buffer {
  const DType* t;
  std::vector<unsigned char> bytes;
  Buffer(const DType& type, size_t elems) : t(&type), bytes((elems + kGuard) * type.size, kFill) {}
  unsigned char* at(size_t i) { return bytes.data() + i * t->size; }
  void* ptr(size_t i = 0) { return at(i); }
};

// Fills `count` elements of `b` from `first` with element j = value(j).
void fill(Buffer& b, size_t first, size_t count, const std::function<long double(size_t)>& value) {
  for (size_t j = 0; j < count; ++j) b.t->put(b.at(first + j), value(j));
}
void fillBits(Buffer& b, size_t first, size_t count, const std::function<uint64_t(size_t)>& bits) {
  for (size_t j = 0; j < count; ++j) {
    const uint64_t v = bits(j);
    std::memcpy(b.at(first + j), &v, b.t->size);
  }
}

// Compares `count` elements of `b` from `first` with expected(j); reports the first wrong one.
bool expectValues(const std::string& what, Buffer& b, size_t first, size_t count,
                  const std::function<long double(size_t)>& expected) {
  size_t wrong = 0, firstWrong = 0;
  long double got0 = 0, want0 = 0;
  for (size_t j = 0; j < count; ++j) {
    const long double got = b.t->get(b.at(first + j)), want = expected(j);
    if (got == want) continue;
    if (wrong++ == 0) firstWrong = j, got0 = got, want0 = want;
  }
  char detail[160] = "";
  if (wrong)
    std::snprintf(detail, sizeof detail, ": element %zu is %.21Lg, expected %.21Lg (%zu of %zu wrong)", firstWrong,
                  got0, want0, wrong, count);
  return check(wrong == 0, what + detail);
}

bool expectBits(const std::string& what, Buffer& b, size_t first, size_t count,
                const std::function<uint64_t(size_t)>& expected) {
  const uint64_t mask = b.t->size == 8 ? ~0ull : (1ull << (8 * b.t->size)) - 1;
  size_t wrong = 0, firstWrong = 0;
  uint64_t got0 = 0, want0 = 0;
  for (size_t j = 0; j < count; ++j) {
    const uint64_t got = b.t->bitsAt(b.at(first + j)), want = expected(j) & mask;
    if (got == want) continue;
    if (wrong++ == 0) firstWrong = j, got0 = got, want0 = want;
  }
  char detail[160] = "";
  if (wrong)
    std::snprintf(detail, sizeof detail, ": element %zu is 0x%" PRIx64 ", expected 0x%" PRIx64 " (%zu of %zu wrong)",
                  firstWrong, got0, want0, wrong, count);
  return check(wrong == 0, what + detail);
}

// The `kGuard` elements after `end` still hold the fill.
bool expectGuard(const std::string& what, Buffer& b, size_t end) {
  for (size_t i = end * b.t->size; i < (end + kGuard) * b.t->size; ++i)
    if (b.bytes[i] != kFill) return check(false, what + ": wrote past its output (byte " + std::to_string(i) + ")");
  return check(true, what);
}

// ---- the id of a communicator --------------------------------------------------------------------------------

// The id of the first communicator, from rank 0 to every rank.
ncclUniqueId shareFirstId(const std::string& idFile) {
  ncclUniqueId id{};
#ifdef STRATA_NCCL_TEST_MPI
  (void)idFile;
  if (gRank == 0) ok(ncclGetUniqueId(&id), "ncclGetUniqueId");
  if (MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS) die("MPI_Bcast of the unique id failed");
#else
  if (gNranks == 1) {
    ok(ncclGetUniqueId(&id), "ncclGetUniqueId");
    return id;
  }
  if (gRank == 0) {
    ok(ncclGetUniqueId(&id), "ncclGetUniqueId");
    writeId(idFile, id);
    return id;
  }
  return readId(idFile);
#endif
  return id;
}

// A later id: rank 0 makes it, the others receive it over `comm`.
ncclUniqueId shareId(ncclComm_t comm) {
  ncclUniqueId id{};
  int rank = 0;
  ok(ncclCommUserRank(comm, &rank), "ncclCommUserRank");
  if (rank == 0) ok(ncclGetUniqueId(&id), "ncclGetUniqueId");
  ok(ncclBroadcast(&id, &id, sizeof id, ncclUint8, 0, comm, nullptr), "ncclBroadcast of a unique id");
  return id;
}

// ---- collectives -----------------------------------------------------------------------------------------------

struct Tester {
  ncclComm_t comm;
  int rank, n;
  uint64_t salt = 1;  // numbers the calls, the same on every rank

  std::string label(const char* coll, const DType& t, const char* op, size_t count, bool inPlace, int root = -1) {
    char s[200];
    std::snprintf(s, sizeof s, "%s %s%s%s count %zu %s%s on rank %d of %d", coll, t.name, op ? " " : "", op ? op : "",
                  count, inPlace ? "in place" : "out of place",
                  root >= 0 ? (" root " + std::to_string(root)).c_str() : "", rank, n);
    return s;
  }

  // A reducing collective. `opHandle` is the ncclRedOp_t passed (a PreMulSum op's handle, or the built-in one).
  enum class Reducing { kAllReduce, kReduceScatter, kReduce };
  void reducing(Reducing coll, const DType& t, Op op, ncclRedOp_t opHandle, size_t count, bool inPlace, int root,
                long double scalar = 1) {
    const uint64_t s = salt++;
    const size_t sendElems = coll == Reducing::kReduceScatter ? count * static_cast<size_t>(n) : count;
    auto input = [&](int r, size_t j) { return reductionInput(t, op, hashOf(s, r, j), n); };
    const char* name = coll == Reducing::kAllReduce       ? "ncclAllReduce"
                       : coll == Reducing::kReduceScatter ? "ncclReduceScatter"
                                                          : "ncclReduce";
    const std::string what = label(name, t, opName(op), count, inPlace, coll == Reducing::kReduce ? root : -1);

    Buffer send(t, sendElems), recv(t, count);
    fill(send, 0, sendElems, [&](size_t j) { return input(rank, j); });
    const std::vector<unsigned char> sent = send.bytes;
    const bool output = coll != Reducing::kReduce || rank == root;
    // Where the result lands: in place, inside the send buffer.
    Buffer& out = inPlace ? send : recv;
    const size_t outFirst = inPlace && coll == Reducing::kReduceScatter ? static_cast<size_t>(rank) * count : 0;
    void* recvPtr = out.ptr(outFirst);
    // NCCL: "recvbuff may be NULL on all calls except for root".
    if (coll == Reducing::kReduce && !output && !inPlace) recvPtr = nullptr;

    ncclResult_t r = ncclSuccess;
    switch (coll) {
      case Reducing::kAllReduce: r = ncclAllReduce(send.ptr(), recvPtr, count, t.type, opHandle, comm, nullptr); break;
      case Reducing::kReduceScatter:
        r = ncclReduceScatter(send.ptr(), recvPtr, count, t.type, opHandle, comm, nullptr);
        break;
      case Reducing::kReduce: r = ncclReduce(send.ptr(), recvPtr, count, t.type, opHandle, root, comm, nullptr); break;
    }
    ok(r, what.c_str());

    const size_t offset = coll == Reducing::kReduceScatter ? static_cast<size_t>(rank) * count : 0;
    std::vector<long double> in(static_cast<size_t>(n));
    if (output) {
      expectValues(what, out, outFirst, count, [&](size_t j) {
        for (int p = 0; p < n; ++p) in[static_cast<size_t>(p)] = input(p, offset + j);
        return reduceReference(t, op, in, scalar);
      });
    }
    if (!inPlace) check(send.bytes == sent, what + ": the send buffer changed");
    expectGuard(what, out, inPlace ? sendElems : count);
  }

  // Collectives that move data: checked bit for bit on random patterns (NaNs included).
  enum class Moving { kAllGather, kBroadcast, kBcast, kAlltoAll, kGather, kScatter };
  void moving(Moving coll, const DType& t, size_t count, bool inPlace, int root) {
    const uint64_t s = salt++;
    const size_t un = static_cast<size_t>(n), me = static_cast<size_t>(rank), ro = static_cast<size_t>(root);
    auto bits = [&](int r, size_t j) { return hashOf(s, r, j); };
    static const char* const names[] = {"ncclAllGather", "ncclBroadcast", "ncclBcast",
                                        "ncclAlltoAll",  "ncclGather",    "ncclScatter"};
    const bool rooted = coll != Moving::kAllGather && coll != Moving::kAlltoAll;
    const std::string what = label(names[static_cast<int>(coll)], t, nullptr, count, inPlace, rooted ? root : -1);
    ncclResult_t r = ncclSuccess;
    switch (coll) {
      case Moving::kAllGather: {
        Buffer recv(t, un * count), send(t, count);
        fillBits(inPlace ? recv : send, inPlace ? me * count : 0, count, [&](size_t j) { return bits(rank, j); });
        r = ncclAllGather(inPlace ? recv.ptr(me * count) : send.ptr(), recv.ptr(), count, t.type, comm, nullptr);
        ok(r, what.c_str());
        expectBits(what, recv, 0, un * count, [&](size_t j) { return bits(static_cast<int>(j / count), j % count); });
        expectGuard(what, recv, un * count);
        break;
      }
      case Moving::kBroadcast:
      case Moving::kBcast: {
        Buffer send(t, count), recv(t, count);
        // Off the root, the send buffer holds data that must be ignored.
        fillBits(coll == Moving::kBcast || inPlace ? recv : send, 0, count, [&](size_t j) { return bits(rank, j); });
        if (coll == Moving::kBcast) r = ncclBcast(recv.ptr(), count, t.type, root, comm, nullptr);
        else r = ncclBroadcast(inPlace ? recv.ptr() : send.ptr(), recv.ptr(), count, t.type, root, comm, nullptr);
        ok(r, what.c_str());
        expectBits(what, recv, 0, count, [&](size_t j) { return bits(root, j); });
        expectGuard(what, recv, count);
        break;
      }
      case Moving::kAlltoAll: {
        Buffer send(t, un * count), recv(t, un * count);
        fillBits(send, 0, un * count, [&](size_t j) { return bits(rank, j); });
        ok(ncclAlltoAll(send.ptr(), recv.ptr(), count, t.type, comm, nullptr), what.c_str());
        expectBits(what, recv, 0, un * count,
                   [&](size_t j) { return bits(static_cast<int>(j / count), me * count + j % count); });
        expectGuard(what, recv, un * count);
        break;
      }
      case Moving::kGather: {
        // In place: sendbuff == recvbuff + root * count (every rank passes the same shape; only the root's
        // recvbuff is used). Out of place, recvbuff is NULL off the root ("not used").
        Buffer recv(t, un * count), send(t, count);
        fillBits(inPlace ? recv : send, inPlace ? ro * count : 0, count, [&](size_t j) { return bits(rank, j); });
        void* recvPtr = inPlace || rank == root ? recv.ptr() : nullptr;
        r = ncclGather(inPlace ? recv.ptr(ro * count) : send.ptr(), recvPtr, count, t.type, root, comm, nullptr);
        ok(r, what.c_str());
        if (rank == root)
          expectBits(what, recv, 0, un * count, [&](size_t j) { return bits(static_cast<int>(j / count), j % count); });
        expectGuard(what, recv, un * count);
        break;
      }
      case Moving::kScatter: {
        // In place: recvbuff == sendbuff + root * count. Out of place, sendbuff is NULL off the root.
        Buffer send(t, un * count), recv(t, count);
        if (rank == root) fillBits(send, 0, un * count, [&](size_t j) { return bits(rank, j); });
        void* sendPtr = inPlace || rank == root ? send.ptr() : nullptr;
        Buffer& out = inPlace ? send : recv;
        const size_t outFirst = inPlace ? ro * count : 0;
        r = ncclScatter(sendPtr, out.ptr(outFirst), count, t.type, root, comm, nullptr);
        ok(r, what.c_str());
        expectBits(what, out, outFirst, count, [&](size_t j) { return bits(root, me * count + j); });
        expectGuard(what, out, inPlace ? un * count : count);
        break;
      }
    }
  }

  // Sends and receives in one group: a ring (to the next rank, from the previous one) or every pair, this rank
  // included.
  void sendRecv(const DType& t, size_t count, bool allPairs) {
    const uint64_t s = salt++;
    const size_t un = static_cast<size_t>(n), me = static_cast<size_t>(rank);
    auto bits = [&](int r, size_t j) { return hashOf(s, r, j); };
    char what[160];
    std::snprintf(what, sizeof what, "ncclSend/ncclRecv %s %s count %zu on rank %d of %d",
                  allPairs ? "all pairs" : "ring", t.name, count, rank, n);
    if (!allPairs) {
      Buffer send(t, count), recv(t, count);
      fillBits(send, 0, count, [&](size_t j) { return bits(rank, j); });
      const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
      ok(ncclGroupStart(), "ncclGroupStart");
      ok(ncclSend(send.ptr(), count, t.type, next, comm, nullptr), "ncclSend");
      ok(ncclRecv(recv.ptr(), count, t.type, prev, comm, nullptr), "ncclRecv");
      ok(ncclGroupEnd(), what);
      expectBits(what, recv, 0, count, [&](size_t j) { return bits(prev, j); });
      expectGuard(what, recv, count);
      return;
    }
    Buffer send(t, un * count), recv(t, un * count);
    fillBits(send, 0, un * count, [&](size_t j) { return bits(rank, j); });
    ok(ncclGroupStart(), "ncclGroupStart");
    for (int p = 0; p < n; ++p) {
      const size_t up = static_cast<size_t>(p);
      ok(ncclSend(send.ptr(up * count), count, t.type, p, comm, nullptr), "ncclSend");
      ok(ncclRecv(recv.ptr(up * count), count, t.type, p, comm, nullptr), "ncclRecv");
    }
    ok(ncclGroupEnd(), what);
    expectBits(what, recv, 0, un * count,
               [&](size_t j) { return bits(static_cast<int>(j / count), me * count + j % count); });
    expectGuard(what, recv, un * count);
  }
};

const Op kBuiltinOps[] = {Op::kSum, Op::kProd, Op::kMax, Op::kMin, Op::kAvg};
ncclRedOp_t ncclOf(Op op) { return static_cast<ncclRedOp_t>(static_cast<int>(op)); }

// Every reducing collective x dtype x op x count x place x root; every moving one x dtype x count x place x root.
void testCollectives(Tester& T, const std::vector<size_t>& counts, size_t largeCount) {
  using R = Tester::Reducing;
  const R reducings[] = {R::kAllReduce, R::kReduceScatter, R::kReduce};
  const char* const reducingNames[] = {"ncclAllReduce", "ncclReduceScatter", "ncclReduce"};
  for (int c = 0; c < 3; ++c) {
    for (const DType& t : kTypes)
      for (Op op : kBuiltinOps)
        for (size_t count : counts)
          for (bool inPlace : {false, true})
            for (int root = 0; root < (reducings[c] == R::kReduce ? T.n : 1); ++root)
              T.reducing(reducings[c], t, op, ncclOf(op), count, inPlace, root);
    // The large count: every dtype and op out of place, and summed in place (the root: the last rank).
    if (largeCount) {
      for (const DType& t : kTypes) {
        for (Op op : kBuiltinOps) T.reducing(reducings[c], t, op, ncclOf(op), largeCount, false, T.n - 1);
        T.reducing(reducings[c], t, Op::kSum, ncclSum, largeCount, true, T.n - 1);
      }
    }
    groupDone(reducingNames[c]);
  }

  using M = Tester::Moving;
  const M movings[] = {M::kAllGather, M::kBroadcast, M::kBcast, M::kAlltoAll, M::kGather, M::kScatter};
  const char* const movingNames[] = {"ncclAllGather", "ncclBroadcast", "ncclBcast",
                                     "ncclAlltoAll",  "ncclGather",    "ncclScatter"};
  for (int c = 0; c < 6; ++c) {
    const M coll = movings[c];
    const bool rooted = coll != M::kAllGather && coll != M::kAlltoAll;
    // AlltoAll has no in-place form in NCCL; Bcast is always in place.
    const std::vector<bool> places = coll == M::kAlltoAll ? std::vector<bool>{false}
                                     : coll == M::kBcast  ? std::vector<bool>{true}
                                                          : std::vector<bool>{false, true};
    for (const DType& t : kTypes)
      for (size_t count : counts)
        for (bool inPlace : places)
          for (int root = 0; root < (rooted ? T.n : 1); ++root) T.moving(coll, t, count, inPlace, root);
    if (largeCount)
      for (ncclDataType_t dt : {ncclInt8, ncclFloat64})
        for (bool inPlace : places) T.moving(coll, typeOf(dt), largeCount, inPlace, rooted ? T.n - 1 : 0);
    groupDone(movingNames[c]);
  }

  for (const DType& t : kTypes)
    for (size_t count : counts)
      for (bool allPairs : {false, true}) T.sendRecv(t, count, allPairs);
  if (largeCount)
    for (bool allPairs : {false, true}) T.sendRecv(typeOf(ncclUint8), largeCount, allPairs);
  groupDone("ncclSend/ncclRecv (ring, all pairs)");
}

// PreMulSum: NCCL's scalar in the op's own type, read at creation (HostImmediate). Every dtype, scalar 2.
void testPreMulSum(Tester& T) {
  for (const DType& t : kTypes) {
    Buffer scalar(t, 1);
    t.put(scalar.at(0), 2);
    ncclRedOp_t op;
    ok(ncclRedOpCreatePreMulSum(&op, scalar.ptr(), t.type, ncclScalarHostImmediate, T.comm),
       "ncclRedOpCreatePreMulSum");
    check(static_cast<int>(op) >= static_cast<int>(ncclNumOps),
          std::string("ncclRedOpCreatePreMulSum gives an op >= ncclNumOps for ") + t.name);
    t.put(scalar.at(0), 3);  // read at creation: changing it now changes nothing
    for (size_t count : {size_t{1}, size_t{7}, size_t{1000}})
      for (bool inPlace : {false, true}) {
        T.reducing(Tester::Reducing::kAllReduce, t, Op::kPreMulSum, op, count, inPlace, 0, 2);
        T.reducing(Tester::Reducing::kReduceScatter, t, Op::kPreMulSum, op, count, inPlace, 0, 2);
        T.reducing(Tester::Reducing::kReduce, t, Op::kPreMulSum, op, count, inPlace, T.n - 1, 2);
      }
    ok(ncclRedOpDestroy(op, T.comm), "ncclRedOpDestroy");
  }
  groupDone("PreMulSum (every dtype, scalar 2)");
}

// ncclGroupStart; an all-reduce, a ring of sends and receives, an all-gather, and an all-pairs exchange of
// another dtype; ncclGroupEnd. Every result checked after the end.
void testGroups(Tester& T) {
  const int n = T.n, rank = T.rank;
  const size_t un = static_cast<size_t>(n), me = static_cast<size_t>(rank);
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}}) {
    const uint64_t s = T.salt++;
    const DType& f = typeOf(ncclFloat32);
    const DType& i64 = typeOf(ncclInt64);
    const DType& u8 = typeOf(ncclUint8);
    auto sumIn = [&](int r, size_t j) { return reductionInput(f, Op::kSum, hashOf(s, r, j), n); };
    auto bits = [&](int r, size_t j) { return hashOf(s + 1, r, j); };
    auto bytes = [&](int r, size_t j) { return hashOf(s + 2, r, j); };
    Buffer arSend(f, count), arRecv(f, count), ringSend(i64, count), ringRecv(i64, count);
    Buffer agSend(i64, count), agRecv(i64, un * count), pairSend(u8, un * count), pairRecv(u8, un * count);
    fill(arSend, 0, count, [&](size_t j) { return sumIn(rank, j); });
    fillBits(ringSend, 0, count, [&](size_t j) { return bits(rank, j); });
    fillBits(agSend, 0, count, [&](size_t j) { return bits(rank, j); });
    fillBits(pairSend, 0, un * count, [&](size_t j) { return bytes(rank, j); });
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;

    ok(ncclGroupStart(), "ncclGroupStart");
    ok(ncclAllReduce(arSend.ptr(), arRecv.ptr(), count, ncclFloat32, ncclSum, T.comm, nullptr), "ncclAllReduce");
    ok(ncclSend(ringSend.ptr(), count, ncclInt64, next, T.comm, nullptr), "ncclSend");
    ok(ncclRecv(ringRecv.ptr(), count, ncclInt64, prev, T.comm, nullptr), "ncclRecv");
    ok(ncclAllGather(agSend.ptr(), agRecv.ptr(), count, ncclInt64, T.comm, nullptr), "ncclAllGather");
    ok(ncclGroupStart(), "ncclGroupStart (nested)");
    for (int p = 0; p < n; ++p) {
      const size_t up = static_cast<size_t>(p);
      ok(ncclRecv(pairRecv.ptr(up * count), count, ncclUint8, p, T.comm, nullptr), "ncclRecv");
      ok(ncclSend(pairSend.ptr(up * count), count, ncclUint8, p, T.comm, nullptr), "ncclSend");
    }
    ok(ncclGroupEnd(), "ncclGroupEnd (nested)");
    ok(ncclGroupEnd(), "ncclGroupEnd");

    const std::string what = "group of all-reduce + send/recv ring + all-gather + all-pairs, count " +
                             std::to_string(count) + " on rank " + std::to_string(rank);
    std::vector<long double> in(un);
    expectValues(what + " (all-reduce)", arRecv, 0, count, [&](size_t j) {
      for (int p = 0; p < n; ++p) in[static_cast<size_t>(p)] = sumIn(p, j);
      return reduceReference(f, Op::kSum, in, 1);
    });
    expectBits(what + " (ring)", ringRecv, 0, count, [&](size_t j) { return bits(prev, j); });
    expectBits(what + " (all-gather)", agRecv, 0, un * count,
               [&](size_t j) { return bits(static_cast<int>(j / count), j % count); });
    expectBits(what + " (all pairs)", pairRecv, 0, un * count,
               [&](size_t j) { return bytes(static_cast<int>(j / count), me * count + j % count); });
    expectGuard(what + " (all-gather)", agRecv, un * count);
  }
  groupDone("groups mixing collectives and send/recv");
}

// ncclGroupSimulateEnd: an estimate, and nothing runs.
void testSimulate(Tester& T) {
  const size_t count = 1000;
  const DType& f = typeOf(ncclFloat32);
  Buffer send(f, count), recv(f, count), gathered(f, count * static_cast<size_t>(T.n));
  fill(send, 0, count, [](size_t j) { return static_cast<long double>(j % 7); });
  const std::vector<unsigned char> before = recv.bytes, gatheredBefore = gathered.bytes;
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  ok(ncclGroupStart(), "ncclGroupStart");
  ok(ncclAllReduce(send.ptr(), recv.ptr(), count, ncclFloat32, ncclSum, T.comm, nullptr), "ncclAllReduce");
  ok(ncclAllGather(send.ptr(), gathered.ptr(), count, ncclFloat32, T.comm, nullptr), "ncclAllGather");
  ok(ncclGroupSimulateEnd(&sim), "ncclGroupSimulateEnd");
  check(sim.estimatedTime >= 0 && std::isfinite(sim.estimatedTime),
        "ncclGroupSimulateEnd estimates a time >= 0 (got " + std::to_string(sim.estimatedTime) + ")");
  check(recv.bytes == before && gathered.bytes == gatheredBefore, "ncclGroupSimulateEnd runs nothing");
  // The group is over: the next call runs at once.
  ok(ncclAllReduce(send.ptr(), recv.ptr(), count, ncclFloat32, ncclSum, T.comm, nullptr), "ncclAllReduce");
  expectValues("ncclAllReduce after ncclGroupSimulateEnd", recv, 0, count,
               [&](size_t j) { return static_cast<long double>(j % 7) * T.n; });
  groupDone("ncclGroupSimulateEnd");
}

// ---- split and shrink ----------------------------------------------------------------------------------------

// The parent ranks of a communicator, from an all-gather of them (which checks it as a side effect).
std::vector<int> parentRanks(ncclComm_t comm, int parentRank) {
  int n = 0;
  ok(ncclCommCount(comm, &n), "ncclCommCount");
  std::vector<int32_t> all(static_cast<size_t>(n));
  int32_t mine = parentRank;
  ok(ncclAllGather(&mine, all.data(), 1, ncclInt32, comm, nullptr), "ncclAllGather of parent ranks");
  return std::vector<int>(all.begin(), all.end());
}

// The sum of `values` over `comm` (an all-reduce of int64).
int64_t sumOver(ncclComm_t comm, int64_t value) {
  int64_t out = 0;
  ok(ncclAllReduce(&value, &out, 1, ncclInt64, ncclSum, comm, nullptr), "ncclAllReduce");
  return out;
}

void testSplit(Tester& T) {
  const int rank = T.rank, n = T.n;
  // By parity, the keys reversing the order: the new rank 0 is the highest parent rank of the part.
  ncclComm_t part = nullptr;
  ok(ncclCommSplit(T.comm, rank % 2, n - rank, &part, nullptr), "ncclCommSplit by parity");
  std::vector<int> expected;
  for (int r = n - 1; r >= 0; --r)
    if (r % 2 == rank % 2) expected.push_back(r);
  int count = 0, me = -1;
  ok(ncclCommCount(part, &count), "ncclCommCount");
  ok(ncclCommUserRank(part, &me), "ncclCommUserRank");
  const auto pos = std::find(expected.begin(), expected.end(), rank) - expected.begin();
  check(count == static_cast<int>(expected.size()) && me == pos,
        "ncclCommSplit by parity: rank " + std::to_string(me) + " of " + std::to_string(count) + ", expected " +
            std::to_string(pos) + " of " + std::to_string(expected.size()));
  check(parentRanks(part, rank) == expected, "ncclCommSplit by parity: ranks ordered by key");
  int64_t paritySum = 0;
  for (int r : expected) paritySum += r;
  check(sumOver(part, rank) == paritySum, "ncclAllReduce on a split communicator");
  Tester onPart{part, me, count, T.salt};
  for (const DType& t : kTypes) {
    onPart.reducing(Tester::Reducing::kReduceScatter, t, Op::kSum, ncclSum, 7, true, 0);
    onPart.moving(Tester::Moving::kBroadcast, t, 7, false, count - 1);
  }
  T.salt = onPart.salt;

  // Two communicators in one group: the parent's all-reduce and the part's.
  int64_t worldOut = 0, partOut = 0, mine = rank;
  ok(ncclGroupStart(), "ncclGroupStart");
  ok(ncclAllReduce(&mine, &worldOut, 1, ncclInt64, ncclSum, T.comm, nullptr), "ncclAllReduce (parent)");
  ok(ncclAllReduce(&mine, &partOut, 1, ncclInt64, ncclSum, part, nullptr), "ncclAllReduce (part)");
  ok(ncclGroupEnd(), "ncclGroupEnd (two communicators)");
  check(worldOut == int64_t{n} * (n - 1) / 2 && partOut == paritySum, "a group over two communicators");
  ok(ncclCommDestroy(part), "ncclCommDestroy");

  // NCCL_SPLIT_NOCOLOR: rank 0 takes part and gets NULL; the others make one communicator in parent order.
  ncclComm_t rest = T.comm;  // must be overwritten
  ok(ncclCommSplit(T.comm, rank == 0 ? NCCL_SPLIT_NOCOLOR : 7, rank, &rest, nullptr), "ncclCommSplit NOCOLOR");
  if (rank == 0) {
    check(rest == nullptr, "ncclCommSplit with NCCL_SPLIT_NOCOLOR gives NULL");
  } else {
    std::vector<int> others;
    for (int r = 1; r < n; ++r) others.push_back(r);
    check(rest != nullptr && parentRanks(rest, rank) == others, "ncclCommSplit: the colored ranks, in key order");
    check(sumOver(rest, rank) == int64_t{n} * (n - 1) / 2, "ncclAllReduce on the colored ranks");
    ok(ncclCommAbort(rest), "ncclCommAbort");  // abort of a healthy communicator: local, and no error
  }
  groupDone("ncclCommSplit (parity, NOCOLOR, in a group)");
}

// The last rank is left out: it does not call ncclCommShrink. The parent stays usable by everyone afterwards.
void testShrink(Tester& T) {
  const int rank = T.rank, n = T.n;
  if (n < 2) return;
  if (rank != n - 1) {
    int excluded[] = {n - 1};
    ncclComm_t shrunk = nullptr;
    ok(ncclCommShrink(T.comm, excluded, 1, &shrunk, nullptr, NCCL_SHRINK_DEFAULT), "ncclCommShrink");
    int count = 0, me = -1;
    ok(ncclCommCount(shrunk, &count), "ncclCommCount");
    ok(ncclCommUserRank(shrunk, &me), "ncclCommUserRank");
    check(count == n - 1 && me == rank, "ncclCommShrink: rank " + std::to_string(me) + " of " + std::to_string(count));
    check(sumOver(shrunk, rank + 1) == int64_t{n} * (n - 1) / 2, "ncclAllReduce on the shrunk communicator");
    Tester onShrunk{shrunk, me, count, 0x5151};
    for (const DType& t : kTypes) {
      onShrunk.reducing(Tester::Reducing::kAllReduce, t, Op::kAvg, ncclAvg, 7, false, 0);
      onShrunk.moving(Tester::Moving::kAllGather, t, 7, true, 0);
    }
    onShrunk.sendRecv(typeOf(ncclFloat16), 7, true);
    ok(ncclCommDestroy(shrunk), "ncclCommDestroy");
  }
  // NCCL_SHRINK_DEFAULT leaves the parent as it was, the excluded rank included.
  check(sumOver(T.comm, 1) == n, "ncclAllReduce on the parent after ncclCommShrink");
  groupDone("ncclCommShrink (the last rank excluded)");
}

// ---- non-blocking --------------------------------------------------------------------------------------------

void testNonBlocking(Tester& T) {
  const ncclUniqueId id = shareId(T.comm);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = "nccl_api_test non-blocking";
  ncclComm_t nb = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&nb, T.n, id, T.rank, &config);
  check(r == ncclSuccess || r == ncclInProgress,
        "non-blocking ncclCommInitRankConfig returns ncclSuccess or ncclInProgress (got " + std::to_string(r) + ")");
  if (!nb) die("non-blocking ncclCommInitRankConfig gave no communicator: " + lastError(nullptr));
  check(waitAsync(nb, "non-blocking ncclCommInitRankConfig") == ncclSuccess, "non-blocking init completes");

  int count = 0, me = -1;
  ok(ncclCommCount(nb, &count), "ncclCommCount");
  ok(ncclCommUserRank(nb, &me), "ncclCommUserRank");
  check(count == T.n && me == T.rank, "non-blocking communicator: count and rank");

  // Collectives return ncclSuccess or ncclInProgress; the results are read after polling.
  const uint64_t s = T.salt++;
  const DType& t = typeOf(ncclBfloat16);
  const size_t n = static_cast<size_t>(T.n);
  for (size_t elems : {size_t{1}, size_t{1000}}) {
    auto in = [&](int rk, size_t j) { return reductionInput(t, Op::kAvg, hashOf(s + elems, rk, j), T.n); };
    Buffer send(t, elems), recv(t, elems), gathered(t, elems * n);
    fill(send, 0, elems, [&](size_t j) { return in(T.rank, j); });
    okAsync(ncclAllReduce(send.ptr(), recv.ptr(), elems, t.type, ncclAvg, nb, nullptr), nb, "ncclAllReduce");
    std::vector<long double> all(n);
    auto reference = [&](size_t j) {
      for (int p = 0; p < T.n; ++p) all[static_cast<size_t>(p)] = in(p, j);
      return reduceReference(t, Op::kAvg, all, 1);
    };
    expectValues("non-blocking ncclAllReduce avg bfloat16 count " + std::to_string(elems), recv, 0, elems, reference);

    // A group on the non-blocking communicator: ncclGroupEnd may return ncclInProgress.
    Buffer ring(t, elems);
    ok(ncclGroupStart(), "ncclGroupStart");
    const ncclResult_t a = ncclAllReduce(send.ptr(), send.ptr(), elems, t.type, ncclAvg, nb, nullptr);
    const ncclResult_t g = ncclAllGather(recv.ptr(), gathered.ptr(), elems, t.type, nb, nullptr);
    const ncclResult_t sd = ncclSend(recv.ptr(), elems, t.type, (T.rank + 1) % T.n, nb, nullptr);
    const ncclResult_t rv = ncclRecv(ring.ptr(), elems, t.type, (T.rank + T.n - 1) % T.n, nb, nullptr);
    for (ncclResult_t x : {a, g, sd, rv})
      check(x == ncclSuccess || x == ncclInProgress, "a call in a non-blocking group: " + std::to_string(x));
    okAsync(ncclGroupEnd(), nb, "ncclGroupEnd (non-blocking)");
    const std::string what = "non-blocking group count " + std::to_string(elems);
    expectValues(what + " (in-place all-reduce)", send, 0, elems, reference);
    expectValues(what + " (all-gather)", gathered, 0, elems * n, [&](size_t j) { return reference(j % elems); });
    expectValues(what + " (ring)", ring, 0, elems, reference);
  }

  // A split of a non-blocking communicator is non-blocking too (the config is inherited).
  ncclComm_t half = nullptr;
  const ncclResult_t sr = ncclCommSplit(nb, T.rank % 2, T.rank, &half, nullptr);
  check(sr == ncclSuccess || sr == ncclInProgress, "non-blocking ncclCommSplit: " + std::to_string(sr));
  if (!half) die("non-blocking ncclCommSplit gave no communicator: " + lastError(nb));
  check(waitAsync(half, "non-blocking ncclCommSplit") == ncclSuccess, "non-blocking split completes");
  int64_t one = 1, halfCount = 0;
  okAsync(ncclAllReduce(&one, &halfCount, 1, ncclInt64, ncclSum, half, nullptr), half, "ncclAllReduce");
  check(halfCount == (T.n + (T.rank % 2 == 0 ? 1 : 0)) / 2, "ncclAllReduce on a non-blocking split");

  okAsync(ncclCommFinalize(half), half, "ncclCommFinalize");
  ok(ncclCommDestroy(half), "ncclCommDestroy");
  okAsync(ncclCommFinalize(nb), nb, "ncclCommFinalize");
  ok(ncclCommDestroy(nb), "ncclCommDestroy");
  groupDone("non-blocking init, collectives, group, split");
}

// ---- queries and misc ----------------------------------------------------------------------------------------

void testQueries(Tester& T) {
  int version = 0;
  ok(ncclGetVersion(&version), "ncclGetVersion");
  check(version == NCCL_VERSION_CODE,
        "ncclGetVersion " + std::to_string(version) + " == NCCL_VERSION_CODE " + std::to_string(NCCL_VERSION_CODE));
  int count = 0, rank = -1, device = -2;
  ok(ncclCommCount(T.comm, &count), "ncclCommCount");
  ok(ncclCommUserRank(T.comm, &rank), "ncclCommUserRank");
  check(count == T.n && rank == T.rank, "ncclCommCount and ncclCommUserRank");
  ok(ncclCommCuDevice(T.comm, &device), "ncclCommCuDevice");
  check(device >= -1, "ncclCommCuDevice gives a device or -1");
  ncclResult_t async = ncclInternalError;
  ok(ncclCommGetAsyncError(T.comm, &async), "ncclCommGetAsyncError");
  check(async == ncclSuccess, "ncclCommGetAsyncError on a healthy blocking communicator: ncclSuccess");
  for (int code = ncclSuccess; code < ncclNumResults; ++code) {
    const char* s = ncclGetErrorString(static_cast<ncclResult_t>(code));
    check(s && *s, "ncclGetErrorString(" + std::to_string(code) + ") is a message");
  }
  // Registration is accepted and its handle given back; a window gives its pointer back.
  std::vector<char> buf(4096);
  void* handle = nullptr;
  ok(ncclCommRegister(T.comm, buf.data(), buf.size(), &handle), "ncclCommRegister");
  ok(ncclCommDeregister(T.comm, handle), "ncclCommDeregister");
  ncclWindow_t win = nullptr;
  void* user = nullptr;
  ok(ncclCommWindowRegister(T.comm, buf.data(), buf.size(), &win, 0), "ncclCommWindowRegister");
  ok(ncclWinGetUserPtr(T.comm, win, &user), "ncclWinGetUserPtr");
  check(user == buf.data(), "ncclWinGetUserPtr gives the registered pointer");
  ok(ncclCommWindowDeregister(T.comm, win), "ncclCommWindowDeregister");
  ok(ncclMemFree(nullptr), "ncclMemFree(NULL)");
  groupDone("version, queries, registration");
}

// ---- bad input -----------------------------------------------------------------------------------------------

// `r` is NCCL's code `want`, and the last error (of `comm`, and of the thread) says something with `mention` in it.
void expectError(ncclResult_t r, ncclResult_t want, ncclComm_t comm, const char* mention, const std::string& what) {
  const std::string e = lastError(comm);
  check(r == want, what + ": returned " + codeName(r) + ", NCCL returns " + codeName(want) + "; last error: " + e);
  check(e.find(mention) != std::string::npos,
        what + ": ncclGetLastError says \"" + e + "\", which does not mention \"" + mention + "\"");
  const std::string threadError = lastError(nullptr);
  check(threadError == e, what + ": ncclGetLastError(NULL) says \"" + threadError + "\", not the same message");
}

void testBadInput(Tester& T) {
  ncclComm_t c = T.comm;
  const int n = T.n;
  std::vector<float> a(16, 1.0f), b(16);
  std::vector<float> wide(16 * static_cast<size_t>(n));
  const auto badType = static_cast<ncclDataType_t>(99);
  const auto badOp = static_cast<ncclRedOp_t>(77);

  expectError(ncclAllReduce(a.data(), b.data(), 16, ncclFloat32, ncclSum, nullptr, nullptr), ncclInvalidArgument,
              nullptr, "NULL", "ncclAllReduce with a NULL comm");
  int count = 0;
  expectError(ncclCommCount(nullptr, &count), ncclInvalidArgument, nullptr, "NULL", "ncclCommCount with a NULL comm");
  expectError(ncclAllReduce(a.data(), b.data(), 16, badType, ncclSum, c, nullptr), ncclInvalidArgument, c, "99",
              "ncclAllReduce with datatype 99");
  expectError(ncclAllGather(a.data(), wide.data(), 16, badType, c, nullptr), ncclInvalidArgument, c, "99",
              "ncclAllGather with datatype 99");
  expectError(ncclSend(a.data(), 16, badType, 0, c, nullptr), ncclInvalidArgument, c, "99",
              "ncclSend with datatype 99");
  expectError(ncclAllReduce(a.data(), b.data(), 16, ncclFloat32, badOp, c, nullptr), ncclInvalidArgument, c, "77",
              "ncclAllReduce with op 77");
  expectError(ncclReduceScatter(wide.data(), b.data(), 16, ncclFloat32, static_cast<ncclRedOp_t>(-1), c, nullptr),
              ncclInvalidArgument, c, "-1", "ncclReduceScatter with op -1");
  expectError(ncclBroadcast(a.data(), b.data(), 16, ncclFloat32, n, c, nullptr), ncclInvalidArgument, c,
              std::to_string(n).c_str(), "ncclBroadcast with root n");
  expectError(ncclReduce(a.data(), b.data(), 16, ncclFloat32, ncclSum, -1, c, nullptr), ncclInvalidArgument, c, "-1",
              "ncclReduce with root -1");
  expectError(ncclGather(a.data(), wide.data(), 16, ncclFloat32, n, c, nullptr), ncclInvalidArgument, c,
              std::to_string(n).c_str(), "ncclGather with root n");
  expectError(ncclScatter(wide.data(), b.data(), 16, ncclFloat32, -3, c, nullptr), ncclInvalidArgument, c, "-3",
              "ncclScatter with root -3");
  expectError(ncclAllReduce(nullptr, b.data(), 16, ncclFloat32, ncclSum, c, nullptr), ncclInvalidArgument, c, "NULL",
              "ncclAllReduce with a NULL sendbuff");
  expectError(ncclAllReduce(a.data(), nullptr, 16, ncclFloat32, ncclSum, c, nullptr), ncclInvalidArgument, c, "NULL",
              "ncclAllReduce with a NULL recvbuff");
  expectError(ncclAllGather(a.data(), nullptr, 16, ncclFloat32, c, nullptr), ncclInvalidArgument, c, "NULL",
              "ncclAllGather with a NULL recvbuff");
  expectError(ncclSend(a.data(), 16, ncclFloat32, n, c, nullptr), ncclInvalidArgument, c, std::to_string(n).c_str(),
              "ncclSend to peer n");
  expectError(ncclRecv(b.data(), 16, ncclFloat32, -1, c, nullptr), ncclInvalidArgument, c, "-1",
              "ncclRecv from peer -1");
  expectError(ncclGroupEnd(), ncclInvalidUsage, nullptr, "ncclGroupEnd", "ncclGroupEnd without ncclGroupStart");
  int bogus = 0;
  expectError(ncclCommDeregister(c, &bogus), ncclInvalidArgument, c, "handle", "ncclCommDeregister of a bogus handle");
  void* mem = &bogus;
  expectError(ncclMemAlloc(&mem, 1024), ncclUnhandledCudaError, nullptr, "CUDA", "ncclMemAlloc without CUDA");
  check(mem == nullptr, "a failed ncclMemAlloc sets *ptr to NULL");
  ncclComm_t none[2] = {nullptr, nullptr};
  expectError(ncclCommInitAll(none, 2, nullptr), ncclUnhandledCudaError, nullptr, "CUDA",
              "ncclCommInitAll without CUDA");
  void* devComm[16] = {};
  expectError(ncclDevCommCreate(c, nullptr, devComm), ncclInvalidUsage, c, "ncclDevCommCreate",
              "ncclDevCommCreate (device API)");
  expectError(ncclDevCommDestroy(c, devComm), ncclInvalidUsage, c, "ncclDevCommDestroy",
              "ncclDevCommDestroy (device API)");
  expectError(ncclCommQueryProperties(c, devComm), ncclInvalidUsage, c, "ncclCommQueryProperties",
              "ncclCommQueryProperties (device API)");
  expectError(ncclGetUniqueId(nullptr), ncclInvalidArgument, nullptr, "NULL", "ncclGetUniqueId(NULL)");
  expectError(ncclCommCount(c, nullptr), ncclInvalidArgument, c, "NULL", "ncclCommCount(comm, NULL)");

  // Configs: one never initialised (magic 0) and one with blocking neither 0 nor 1. Checked before any
  // communication, so no rank waits.
  ncclConfig_t zero;
  std::memset(&zero, 0, sizeof zero);
  ncclComm_t made = nullptr;
  ncclUniqueId id{};
  expectError(ncclCommInitRankConfig(&made, n, id, T.rank, &zero), ncclInvalidArgument, nullptr,
              "NCCL_CONFIG_INITIALIZER", "ncclCommInitRankConfig with a config of magic 0");
  expectError(ncclCommSplit(c, 0, T.rank, &made, &zero), ncclInvalidArgument, c, "NCCL_CONFIG_INITIALIZER",
              "ncclCommSplit with a config of magic 0");
  ncclConfig_t badBlocking = NCCL_CONFIG_INITIALIZER;
  badBlocking.blocking = 5;
  expectError(ncclCommSplit(c, 0, T.rank, &made, &badBlocking), ncclInvalidArgument, c, "blocking",
              "ncclCommSplit with config blocking 5");
  check(made == nullptr, "a refused creation gives no communicator");
  expectError(ncclCommInitRank(&made, n, id, n), ncclInvalidArgument, nullptr, std::to_string(n).c_str(),
              "ncclCommInitRank with rank == nranks");
  expectError(ncclCommInitRank(&made, 0, id, 0), ncclInvalidArgument, nullptr, "0", "ncclCommInitRank with 0 ranks");

  // PreMulSum: a NULL scalar, a device-resident scalar (only host-immediate ones exist without CUDA), and an op
  // used after its destruction.
  float two = 2;
  ncclRedOp_t op = ncclSum;
  expectError(ncclRedOpCreatePreMulSum(&op, nullptr, ncclFloat32, ncclScalarHostImmediate, c), ncclInvalidArgument, c,
              "NULL", "ncclRedOpCreatePreMulSum with a NULL scalar");
  expectError(ncclRedOpCreatePreMulSum(&op, &two, ncclFloat32, ncclScalarDevice, c), ncclInvalidArgument, c,
              "HostImmediate", "ncclRedOpCreatePreMulSum with ncclScalarDevice and a host scalar");
  expectError(ncclRedOpCreatePreMulSum(&op, &two, badType, ncclScalarHostImmediate, c), ncclInvalidArgument, c, "99",
              "ncclRedOpCreatePreMulSum with datatype 99");
  ok(ncclRedOpCreatePreMulSum(&op, &two, ncclFloat32, ncclScalarHostImmediate, c), "ncclRedOpCreatePreMulSum");
  ok(ncclRedOpDestroy(op, c), "ncclRedOpDestroy");
  const std::string opText = std::to_string(static_cast<int>(op));
  expectError(ncclAllReduce(a.data(), b.data(), 16, ncclFloat32, op, c, nullptr), ncclInvalidArgument, c,
              opText.c_str(), "ncclAllReduce with a destroyed PreMulSum op");
  expectError(ncclRedOpDestroy(op, c), ncclInvalidArgument, c, opText.c_str(), "ncclRedOpDestroy twice");
  expectError(ncclRedOpDestroy(ncclSum, c), ncclInvalidArgument, c, "0", "ncclRedOpDestroy(ncclSum)");

  // A bad call inside a group fails at once, and the outermost ncclGroupEnd returns that error and runs nothing of
  // the group (NCCL's ncclGroupEndInternal: `if ((ret = ncclGroupError) != ncclSuccess) goto fail`).
  for (const char* bad : {"datatype 99", "a NULL sendbuff"}) {
    std::vector<float> untouched(16, -1.0f);
    ok(ncclGroupStart(), "ncclGroupStart");
    ok(ncclAllReduce(a.data(), untouched.data(), 16, ncclFloat32, ncclSum, c, nullptr), "ncclAllReduce in a group");
    if (bad[0] == 'd')
      expectError(ncclAllReduce(a.data(), b.data(), 16, badType, ncclSum, c, nullptr), ncclInvalidArgument, c, "99",
                  "ncclAllReduce with datatype 99 in a group");
    else
      expectError(ncclSend(nullptr, 16, ncclFloat32, (T.rank + 1) % n, c, nullptr), ncclInvalidArgument, c, "NULL",
                  "ncclSend of a NULL buffer in a group");
    const ncclResult_t end = ncclGroupEnd();
    check(end == ncclInvalidArgument, std::string("ncclGroupEnd after a call with ") + bad +
                                          " in its group returns ncclInvalidArgument (got " + std::to_string(end) +
                                          ")");
    check(untouched == std::vector<float>(16, -1.0f),
          std::string("a group with a refused call (") + bad + ") runs none of its calls");
  }

  // ncclGroupSimulateEnd with a simInfo not made by NCCL_SIM_INFO_INITIALIZER: refused, and (as in NCCL, which
  // checks it after leaving the group) the group is over and its calls dropped.
  ncclSimInfo_t sim;
  std::memset(&sim, 0, sizeof sim);
  std::vector<float> untouched(16, -1.0f);
  ok(ncclGroupStart(), "ncclGroupStart");
  ok(ncclAllReduce(a.data(), untouched.data(), 16, ncclFloat32, ncclSum, c, nullptr), "ncclAllReduce in a group");
  expectError(ncclGroupSimulateEnd(&sim), ncclInvalidArgument, nullptr, "NCCL_SIM_INFO_INITIALIZER",
              "ncclGroupSimulateEnd with an uninitialised simInfo");
  const ncclResult_t after = ncclGroupEnd();
  check(after == ncclInvalidUsage,
        "ncclGroupEnd after a refused ncclGroupSimulateEnd: the group is over, ncclInvalidUsage (got " +
            std::to_string(after) + ")");
  check(untouched == std::vector<float>(16, -1.0f), "a refused ncclGroupSimulateEnd runs nothing");

  // A suspended communicator refuses calls until it is resumed.
  ok(ncclCommSuspend(c, NCCL_SUSPEND_MEM), "ncclCommSuspend");
  expectError(ncclAllReduce(a.data(), b.data(), 16, ncclFloat32, ncclSum, c, nullptr), ncclInvalidUsage, c, "suspend",
              "ncclAllReduce on a suspended communicator");
  ok(ncclCommResume(c), "ncclCommResume");
  expectError(ncclCommResume(c), ncclInvalidUsage, c, "not suspended", "ncclCommResume when not suspended");

  // A destroyed communicator: NCCL poisons its magic, and CommCheck then answers ncclInvalidArgument.
  ncclComm_t doomed = nullptr;
  ok(ncclCommSplit(c, 0, T.rank, &doomed, nullptr), "ncclCommSplit");
  ok(ncclCommDestroy(doomed), "ncclCommDestroy");
  expectError(ncclAllReduce(a.data(), b.data(), 16, ncclFloat32, ncclSum, doomed, nullptr), ncclInvalidArgument,
              nullptr, "destroyed", "ncclAllReduce on a destroyed communicator");
  expectError(ncclCommCount(doomed, &count), ncclInvalidArgument, nullptr, "destroyed",
              "ncclCommCount on a destroyed communicator");

  // After all of that the communicator works.
  check(sumOver(c, T.rank) == int64_t{n} * (n - 1) / 2, "ncclAllReduce after the bad calls");
  groupDone("bad input (NCCL's codes and ncclGetLastError)");
}

}  // namespace

int main(int argc, char** argv) {
  gWho = "nccl_api_test";
  std::string idFile;
  size_t largeCount = 65537;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--id-file" && i + 1 < argc) idFile = argv[++i];
    else if (arg == "--large-count" && i + 1 < argc) largeCount = std::strtoull(argv[++i], nullptr, 10);
    else {
      std::fprintf(stderr, "usage: %s [--id-file PATH] [--large-count N]\n", argv[0]);
      return 2;
    }
  }
#ifdef STRATA_NCCL_TEST_MPI
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &gRank);
  MPI_Comm_size(MPI_COMM_WORLD, &gNranks);
#else
  gRank = std::atoi(envOr("RANK", "0").c_str());
  gNranks = std::atoi(envOr("WORLD_SIZE", "1").c_str());
  if (gNranks < 1 || gRank < 0 || gRank >= gNranks)
    die("RANK " + std::to_string(gRank) + " and WORLD_SIZE " + std::to_string(gNranks) + " do not make sense");
  if (idFile.empty()) idFile = launchFile("nccl_api_test", "world");
#endif
  const auto start = Clock::now();
  if (gRank == 0) std::printf("nccl_api_test: %d rank%s\n", gNranks, gNranks == 1 ? "" : "s");

  ncclComm_t world = nullptr;
  const ncclUniqueId id = shareFirstId(idFile);
  ok(ncclCommInitRank(&world, gNranks, id, gRank), "ncclCommInitRank");
  // Every rank has read the id once rank 0's creation returns (it needs them all).
  if (gRank == 0 && gNranks > 1 && !idFile.empty()) std::filesystem::remove(idFile);

  Tester T{world, gRank, gNranks};
  testQueries(T);
  testCollectives(T, {0, 1, 2, 7, 64, 1000}, largeCount);
  testPreMulSum(T);
  testGroups(T);
  testSimulate(T);
  testSplit(T);
  testNonBlocking(T);
  testBadInput(T);
  testShrink(T);

  ok(ncclCommFinalize(world), "ncclCommFinalize");
  ok(ncclCommDestroy(world), "ncclCommDestroy");
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (gFailures) {
    std::fprintf(stderr, "nccl_api_test: %ld of %ld checks FAILED on rank %d of %d\n", gFailures, gChecks, gRank,
                 gNranks);
#ifdef STRATA_NCCL_TEST_MPI
    MPI_Finalize();
#endif
    return 1;
  }
  std::printf("nccl_api_test: %ld checks passed on rank %d of %d (%.1f s)\n", gChecks, gRank, gNranks, seconds);
#ifdef STRATA_NCCL_TEST_MPI
  MPI_Finalize();
#endif
  return 0;
}
