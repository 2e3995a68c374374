// Plan generators, verified through the reference interpreter: every collective x algorithm for n = 1..33,
// counts from 0 to several chunks, in place and out of place, several dtypes and ops. Inputs are small
// integers so every reduction order gives exactly the same value (nccl-tests style), and the expected
// output comes from a plain scalar reference. Small pieces and few slots exercise chunking, piece
// splitting and the connection capacity; guard bytes around every buffer catch stray writes.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "collectives/algorithms.h"
#include "collectives/generators.h"
#include "collectives/host_layout.h"
#include "collectives/p2p_group.h"
#include "collectives/plan.h"
#include "core/interpreter.h"
#include "kernels/reduce.h"
#include "util/error.h"

namespace strata {
namespace {

// ---- settings ------------------------------------------------------------------------------------------

// Interpreter limits plus the chunk size the executor would pick: nslots * pieceBytes / 2 / elemSize,
// optionally capped lower.
struct Setting {
  const char* name;
  size_t pieceBytes;
  int nslots;
  size_t chunkCap;  // 0: no cap
};
constexpr Setting kTiny{"tiny", 8, 6, 5};           // 5-element chunks over 2-element (f32) pieces
constexpr Setting kOnePiece{"onepiece", 64, 2, 0};  // a chunk is exactly one piece
constexpr Setting kSplit{"split", 64, 4, 0};        // a chunk is two pieces
constexpr Setting kDefault{"default", 128 * 1024, 8, 0};

size_t chunkElemsFor(const Setting& s, size_t elemSize) {
  const size_t rule = static_cast<size_t>(s.nslots) * s.pieceBytes / 2 / elemSize;
  return std::max<size_t>(1, s.chunkCap ? std::min(rule, s.chunkCap) : rule);
}

// ---- element access (exact for the small integers used here) ------------------------------------------

double load(const char* buf, size_t i, strataDataType_t dt) {
  switch (dt) {
    case strataInt32: {
      int32_t v;
      std::memcpy(&v, buf + 4 * i, 4);
      return v;
    }
    case strataFloat32: {
      float v;
      std::memcpy(&v, buf + 4 * i, 4);
      return v;
    }
    case strataFloat64: {
      double v;
      std::memcpy(&v, buf + 8 * i, 8);
      return v;
    }
    case strataFloat16:
    case strataBfloat16: {
      uint16_t v;
      std::memcpy(&v, buf + 2 * i, 2);
      return dt == strataFloat16 ? halfToFloat(v) : bf16ToFloat(v);
    }
    default: ADD_FAILURE() << "dtype not used by this test: " << dt; return 0;
  }
}

void store(char* buf, size_t i, strataDataType_t dt, double value) {
  switch (dt) {
    case strataInt32: {
      const int32_t v = static_cast<int32_t>(value);
      std::memcpy(buf + 4 * i, &v, 4);
      break;
    }
    case strataFloat32: {
      const float v = static_cast<float>(value);
      std::memcpy(buf + 4 * i, &v, 4);
      break;
    }
    case strataFloat64: std::memcpy(buf + 8 * i, &value, 8); break;
    case strataFloat16:
    case strataBfloat16: {
      const float f = static_cast<float>(value);
      const uint16_t v = dt == strataFloat16 ? floatToHalf(f) : floatToBf16(f);
      std::memcpy(buf + 2 * i, &v, 2);
      break;
    }
    default: ADD_FAILURE() << "dtype not used by this test: " << dt;
  }
}

const char* opName(ReduceKind op) {
  switch (op) {
    case ReduceKind::kSum: return "sum";
    case ReduceKind::kProd: return "prod";
    case ReduceKind::kMax: return "max";
    case ReduceKind::kMin: return "min";
  }
  return "?";
}

// Element i of rank r's send buffer. Small integers: sums over 33 ranks stay within +-99, products
// within +-64, so every dtype here (bf16 included) represents every partial result exactly.
double inputValue(ReduceKind op, int rank, size_t i) {
  const size_t r = static_cast<size_t>(rank);
  switch (op) {
    case ReduceKind::kSum: return static_cast<double>((r * 5 + i * 3 + 1) % 7) - 3;
    case ReduceKind::kProd:
      if ((r + 2 * i) % 6 == 0) return 2;
      return (r * 3 + i) % 4 == 0 ? -1 : 1;
    default: return static_cast<double>((r * 13 + i * 7) % 41) - 20;
  }
}

double apply(ReduceKind op, double a, double b) {
  switch (op) {
    case ReduceKind::kSum: return a + b;
    case ReduceKind::kProd: return a * b;
    case ReduceKind::kMax: return std::max(a, b);
    case ReduceKind::kMin: return std::min(a, b);
  }
  return 0;
}

// Reduction over ranks 0..n-1 of element i of every send buffer.
double reduced(ReduceKind op, int n, size_t i) {
  double acc = inputValue(op, 0, i);
  for (int j = 1; j < n; ++j) acc = apply(op, acc, inputValue(op, j, i));
  return acc;
}

// ---- memory with guards ----------------------------------------------------------------------------

constexpr size_t kGuard = 64;
constexpr unsigned char kGuardByte = 0xA5;
constexpr unsigned char kPoisonByte = 0x5A;

// A byte area with guard bytes on both sides, filled with poison.
class Area {
 public:
  explicit Area(size_t bytes) : bytes_(bytes), storage_(bytes + 2 * kGuard, kGuardByte) {
    std::memset(data(), kPoisonByte, bytes);
  }
  char* data() { return storage_.data() + kGuard; }
  size_t bytes() const { return bytes_; }
  bool guardsIntact() const {
    for (size_t i = 0; i < kGuard; ++i)
      if (static_cast<unsigned char>(storage_[i]) != kGuardByte ||
          static_cast<unsigned char>(storage_[kGuard + bytes_ + i]) != kGuardByte)
        return false;
    return true;
  }

 private:
  size_t bytes_;
  std::vector<char> storage_;
};

// ---- one collective through the interpreter ------------------------------------------------------------

struct CollCase {
  CollKind kind = CollKind::kAllReduce;
  std::string algorithm;
  int nranks = 1;
  size_t count = 0;
  bool inPlace = false;
  strataDataType_t dtype = strataInt32;
  ReduceKind op = ReduceKind::kSum;
  int root = 0;
  Setting setting = kOnePiece;
  std::vector<int> hostOf;  // host of each rank; empty: one host
};

// Host layouts a hierarchical plan must handle for n ranks: one host, one rank per host, pairs, threes
// (the last host smaller), alternating hosts, and a lone rank on the first host.
std::vector<std::vector<int>> hostLayouts(int n) {
  std::vector<std::vector<int>> out{{}};
  auto make = [&](auto hostOfRank) {
    std::vector<int> h(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) h[static_cast<size_t>(r)] = hostOfRank(r);
    out.push_back(std::move(h));
  };
  make([](int r) { return r; });
  make([](int r) { return r / 2; });
  make([](int r) { return r / 3; });
  make([](int r) { return r % 2; });
  make([](int r) { return r == 0 ? 0 : 1 + (r - 1) / 3; });
  return out;
}

std::string describe(const CollCase& c) {
  std::string hosts;
  for (int h : c.hostOf) hosts += (hosts.empty() ? "" : ",") + std::to_string(h);
  return strprintf("%s/%s n=%d count=%zu %s %s %s root=%d setting=%s hosts=[%s]", collName(c.kind), c.algorithm.c_str(),
                   c.nranks, c.count, c.inPlace ? "in-place" : "out-of-place", dtypeName(c.dtype), opName(c.op), c.root,
                   c.setting.name, hosts.c_str());
}

// Elements of the send and receive buffers, per NCCL's definition of each collective.
size_t sendElems(const CollCase& c) {
  const size_t n = static_cast<size_t>(c.nranks);
  switch (c.kind) {
    case CollKind::kReduceScatter:
    case CollKind::kAllToAll: return n * c.count;
    case CollKind::kBarrier: return 0;
    default: return c.count;
  }
}
size_t recvElems(const CollCase& c) {
  const size_t n = static_cast<size_t>(c.nranks);
  switch (c.kind) {
    case CollKind::kAllGather:
    case CollKind::kAllToAll: return n * c.count;
    case CollKind::kBarrier: return 0;
    default: return c.count;
  }
}

// Where the in-place send and receive buffers sit inside the one user buffer (element offsets).
size_t inPlaceSendOffset(const CollCase& c, int rank) {
  return c.kind == CollKind::kAllGather ? static_cast<size_t>(rank) * c.count : 0;
}
size_t inPlaceRecvOffset(const CollCase& c, int rank) {
  return c.kind == CollKind::kReduceScatter ? static_cast<size_t>(rank) * c.count : 0;
}

// Expected element i of rank r's receive buffer; false where the result is unspecified.
bool expectedValue(const CollCase& c, int r, size_t i, double* out) {
  const size_t count = c.count;
  switch (c.kind) {
    case CollKind::kAllReduce: *out = reduced(c.op, c.nranks, i); return true;
    case CollKind::kReduceScatter: *out = reduced(c.op, c.nranks, static_cast<size_t>(r) * count + i); return true;
    case CollKind::kAllGather: *out = inputValue(c.op, static_cast<int>(i / count), i % count); return true;
    case CollKind::kBroadcast: *out = inputValue(c.op, c.root, i); return true;
    case CollKind::kReduce:
      if (r != c.root) return false;
      *out = reduced(c.op, c.nranks, i);
      return true;
    case CollKind::kAllToAll:
      *out = inputValue(c.op, static_cast<int>(i / count), static_cast<size_t>(r) * count + i % count);
      return true;
    default: return false;
  }
}

// What one op of a plan reads or writes, in real addresses: bytes [begin, end).
struct Footprint {
  uintptr_t begin, end;
  size_t lane, op;
  bool write;
};

// For each op, how many ops of every lane are certain to have completed before it starts: its lane's earlier
// ops, and through a cross-lane dependency everything the op it waits for was certain of (vector clocks).
// Ops are visited in an order that runs each dependency first; a plan whose dependencies form a cycle fails.
std::vector<std::vector<std::vector<uint32_t>>> happensBefore(const Plan& plan) {
  const size_t nl = plan.lanes.size();
  std::vector<std::vector<std::vector<uint32_t>>> before(nl);
  std::vector<size_t> pos(nl, 0);
  for (size_t l = 0; l < nl; ++l) before[l].resize(plan.lanes[l].size());
  for (bool moved = true; moved;) {
    moved = false;
    for (size_t l = 0; l < nl; ++l) {
      while (pos[l] < plan.lanes[l].size()) {
        const size_t i = pos[l];
        const Op& op = plan.lanes[l][i];
        const size_t dep = static_cast<size_t>(op.afterLane);
        if (op.hasDependency() && pos[dep] < op.afterOps) break;
        std::vector<uint32_t> clock = i == 0 ? std::vector<uint32_t>(nl, 0) : before[l][i - 1];
        clock[l] = static_cast<uint32_t>(i);
        if (op.hasDependency()) {
          const std::vector<uint32_t>& other = before[dep][op.afterOps - 1];
          for (size_t m = 0; m < nl; ++m) clock[m] = std::max(clock[m], other[m]);
          clock[dep] = std::max(clock[dep], op.afterOps);
        }
        before[l][i] = std::move(clock);
        ++pos[l];
        moved = true;
      }
    }
  }
  for (size_t l = 0; l < nl; ++l)
    if (pos[l] < plan.lanes[l].size()) ADD_FAILURE() << "dependency cycle at lane " << l << "\n" << plan.toString();
  return before;
}

// The plan IR's rule that lanes never write what another lane reads or writes unless a cross-lane dependency
// orders the two ops, checked on the real addresses (in place, buffers 0 and 1 overlap).
void expectLanesIndependent(const Plan& plan, const std::vector<void*>& buffers, size_t elemSize) {
  const size_t nl = plan.lanes.size();
  std::vector<Footprint> fp;
  auto add = [&](const Region& r, size_t l, size_t i, bool write) {
    const uintptr_t base = reinterpret_cast<uintptr_t>(buffers[static_cast<size_t>(r.buf)]);
    fp.push_back(Footprint{base + r.offset * elemSize, base + (r.offset + r.count) * elemSize, l, i, write});
  };
  for (size_t l = 0; l < nl; ++l) {
    for (size_t i = 0; i < plan.lanes[l].size(); ++i) {
      const Op& op = plan.lanes[l][i];
      if (op.kind == OpKind::kCopy &&
          buffers[static_cast<size_t>(op.src.buf)] == buffers[static_cast<size_t>(op.dst.buf)] &&
          op.src.offset == op.dst.offset)
        continue;  // skipped
      if (usesSrc(op.kind)) add(op.src, l, i, false);
      if (usesDst(op.kind)) add(op.dst, l, i, true);
    }
  }
  if (nl < 2) return;
  const auto before = happensBefore(plan);
  auto ordered = [&](const Footprint& a, const Footprint& b) {
    return before[b.lane][b.op][a.lane] > a.op || before[a.lane][a.op][b.lane] > b.op;
  };
  // Sweep in order of start, each footprint against those still open when it starts.
  std::sort(fp.begin(), fp.end(), [](const Footprint& a, const Footprint& b) { return a.begin < b.begin; });
  std::vector<const Footprint*> open;
  for (const Footprint& f : fp) {
    std::erase_if(open, [&](const Footprint* o) { return o->end <= f.begin; });
    for (const Footprint* o : open) {
      if (o->lane == f.lane || (!o->write && !f.write) || ordered(*o, f)) continue;
      ADD_FAILURE() << "rank " << plan.rank << ": lane " << f.lane << " op " << f.op << " and lane " << o->lane
                    << " op " << o->op << " touch the same memory, one writing, in no dependency order\n"
                    << plan.toString();
      return;
    }
    open.push_back(&f);
  }
}

// Builds every rank's plan, runs them, and checks every rank's output. Returns false on a failure.
bool runCollective(const CollCase& c) {
  if (c.algorithm == "hier" && c.hostOf.empty()) {
    // Hierarchical plans: every host layout (the first is one host).
    for (const std::vector<int>& layout : hostLayouts(c.nranks)) {
      if (layout.empty()) continue;
      CollCase h = c;
      h.hostOf = layout;
      if (!runCollective(h)) return false;
    }
  }
  SCOPED_TRACE(describe(c));
  const int n = c.nranks;
  const size_t es = dtypeSize(c.dtype);
  const size_t chunk = chunkElemsFor(c.setting, es);
  const size_t sendN = sendElems(c), recvN = recvElems(c);

  std::vector<Plan> plans;
  for (int r = 0; r < n; ++r) {
    CollArgs args;
    args.kind = c.kind;
    args.nranks = n;
    args.rank = r;
    args.count = c.count;
    args.root = c.root;
    args.inPlace = c.inPlace;
    args.chunkElems = chunk;
    args.hostOf = c.hostOf;
    plans.push_back(makePlan(args, c.algorithm));
    const Plan& p = plans.back();
    EXPECT_EQ(p.rank, r);
    EXPECT_EQ(p.nranks, n);
    EXPECT_EQ(p.algorithm, c.algorithm);
    try {
      validatePlan(p);
    } catch (const Error& e) {
      ADD_FAILURE() << e.what() << "\n" << p.toString();
      return false;
    }
    if (c.count == 0 && c.kind != CollKind::kBarrier) {
      EXPECT_EQ(p.numOps(), 0u) << p.toString();
    }
  }

  // User memory: in place one area per rank holding both buffers, else one each.
  std::vector<Area> user, sendAreas, scratch;
  std::vector<std::vector<void*>> buffers(static_cast<size_t>(n));
  std::vector<char*> sendPtr(static_cast<size_t>(n)), recvPtr(static_cast<size_t>(n));
  user.reserve(static_cast<size_t>(n));
  sendAreas.reserve(static_cast<size_t>(n));
  scratch.reserve(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const size_t ur = static_cast<size_t>(r);
    if (c.inPlace) {
      Area& a = user.emplace_back(std::max(sendN, recvN) * es);
      sendPtr[ur] = a.data() + inPlaceSendOffset(c, r) * es;
      recvPtr[ur] = a.data() + inPlaceRecvOffset(c, r) * es;
    } else {
      sendPtr[ur] = sendAreas.emplace_back(sendN * es).data();
      recvPtr[ur] = user.emplace_back(recvN * es).data();
    }
    for (size_t i = 0; i < sendN; ++i) store(sendPtr[ur], i, c.dtype, inputValue(c.op, r, i));
    Area& s = scratch.emplace_back(plans[ur].scratchElems * es);
    // nullptr where the rank must not touch a buffer: the runner throws if the plan does.
    void* sendBuf = sendPtr[ur];
    void* recvBuf = recvPtr[ur];
    if (!c.inPlace && c.kind == CollKind::kBroadcast && r != c.root) sendBuf = nullptr;
    if (!c.inPlace && c.kind == CollKind::kReduce && r != c.root) recvBuf = nullptr;
    if (c.kind == CollKind::kBarrier) sendBuf = recvBuf = nullptr;
    buffers[ur] = {sendBuf, recvBuf, s.data()};
  }
  std::vector<std::vector<char>> sendBefore;
  for (int r = 0; r < n; ++r)
    sendBefore.emplace_back(sendPtr[static_cast<size_t>(r)], sendPtr[static_cast<size_t>(r)] + sendN * es);

  for (int r = 0; r < n; ++r) {
    // Stand-ins for the buffers the rank must not touch, so addresses exist for the overlap check.
    std::vector<void*> addrs = buffers[static_cast<size_t>(r)];
    if (!addrs[0]) addrs[0] = sendPtr[static_cast<size_t>(r)];
    if (!addrs[1]) addrs[1] = recvPtr[static_cast<size_t>(r)];
    expectLanesIndependent(plans[static_cast<size_t>(r)], addrs, es);
  }

  try {
    interpretPlans(plans, buffers, c.dtype, c.op, InterpreterOptions{c.setting.pieceBytes, c.setting.nslots});
  } catch (const Error& e) {
    ADD_FAILURE() << "interpreter: " << e.what() << "\n" << (n <= 4 ? plans[0].toString() : std::string());
    return false;
  }

  bool ok = !::testing::Test::HasFailure();
  for (int r = 0; r < n && ok; ++r) {
    const size_t ur = static_cast<size_t>(r);
    for (size_t i = 0; i < recvN; ++i) {
      double want;
      if (!expectedValue(c, r, i, &want)) break;
      const double got = load(recvPtr[ur], i, c.dtype);
      if (got != want) {
        ADD_FAILURE() << "rank " << r << " element " << i << ": got " << got << ", expected " << want;
        ok = false;
        break;
      }
    }
    const bool sendKept = sendN == 0 || std::memcmp(sendBefore[ur].data(), sendPtr[ur], sendN * es) == 0;
    if (!c.inPlace && !sendKept) {
      ADD_FAILURE() << "rank " << r << " modified its send buffer out of place";
      ok = false;
    }
    if (c.inPlace && c.kind == CollKind::kReduce && r != c.root && !sendKept) {
      ADD_FAILURE() << "non-root rank " << r << " modified its buffer in an in-place reduce";
      ok = false;
    }
    if (!user[ur].guardsIntact() || (!c.inPlace && !sendAreas[ur].guardsIntact()) || !scratch[ur].guardsIntact()) {
      ADD_FAILURE() << "rank " << r << " wrote outside its buffers";
      ok = false;
    }
  }
  return ok;
}

// ---- the sweep -----------------------------------------------------------------------------------------

struct CollAlgo {
  CollKind kind;
  const char* algorithm;
};

void PrintTo(const CollAlgo& c, std::ostream* os) { *os << collName(c.kind) << "/" << c.algorithm; }

std::string paramName(const ::testing::TestParamInfo<CollAlgo>& info) {
  return std::string(collName(info.param.kind)) + "_" + info.param.algorithm;
}

class PlanSweep : public ::testing::TestWithParam<CollAlgo> {
 protected:
  CollCase base(int n) const {
    CollCase c;
    c.kind = GetParam().kind;
    c.algorithm = GetParam().algorithm;
    c.nranks = n;
    return c;
  }
  bool rooted() const { return GetParam().kind == CollKind::kBroadcast || GetParam().kind == CollKind::kReduce; }
  // Roots worth trying for n ranks: first, last, and one in the middle.
  std::vector<int> roots(int n) const {
    if (!rooted()) return {0};
    std::vector<int> out{0};
    if (n > 2) out.push_back(n / 2);
    if (n > 1) out.push_back(n - 1);
    return out;
  }
};

const int kSomeRanks[] = {2, 3, 4, 5, 7, 8, 13, 16, 33};

// Every n from 1 to 33 with small counts, int32 sum, both settings that split chunks and pieces.
TEST_P(PlanSweep, SmallCountsEveryN) {
  for (int n = 1; n <= 33; ++n) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, static_cast<size_t>(n) * 3 + 1}) {
      for (bool inPlace : {false, true}) {
        for (const Setting& s : {kTiny, kOnePiece}) {
          for (int root : roots(n)) {
            if (root != 0 && count != 7) continue;
            CollCase c = base(n);
            c.count = count;
            c.inPlace = inPlace;
            c.setting = s;
            c.root = root;
            if (!runCollective(c)) return;
          }
        }
      }
    }
  }
}

// Counts of many chunks (and 1023), so every segment spans several chunks of several pieces.
TEST_P(PlanSweep, ManyChunks) {
  for (int n : {1, 2, 3, 5, 8, 13, 33}) {
    for (const Setting& s : {kTiny, kSplit}) {
      const size_t chunk = chunkElemsFor(s, 4);
      for (size_t count : {size_t{1023}, 4 * static_cast<size_t>(n) * chunk + 3}) {
        if (n == 33 && count > 1023) continue;  // keep the test fast; 1023 already spans many chunks at n=33
        for (bool inPlace : {false, true}) {
          for (int root : roots(n)) {
            if (root != 0 && s.pieceBytes != kTiny.pieceBytes) continue;  // other roots: one setting
            CollCase c = base(n);
            c.count = count;
            c.inPlace = inPlace;
            c.setting = s;
            c.root = root;
            c.dtype = inPlace ? strataFloat32 : strataInt32;
            if (!runCollective(c)) return;
          }
        }
      }
    }
  }
}

// Every op with int32 and float32, and half-precision spot checks.
TEST_P(PlanSweep, DtypesAndOps) {
  struct TypeOp {
    strataDataType_t dtype;
    ReduceKind op;
  };
  const TypeOp combos[] = {
      {strataInt32, ReduceKind::kProd},   {strataInt32, ReduceKind::kMin},    {strataFloat32, ReduceKind::kSum},
      {strataFloat32, ReduceKind::kMax},  {strataFloat32, ReduceKind::kProd}, {strataFloat16, ReduceKind::kSum},
      {strataBfloat16, ReduceKind::kSum}, {strataBfloat16, ReduceKind::kMax}, {strataFloat64, ReduceKind::kMin}};
  for (const TypeOp& to : combos) {
    for (int n : kSomeRanks) {
      for (size_t count : {size_t{7}, static_cast<size_t>(n) * 3 + 1, size_t{101}}) {
        for (bool inPlace : {false, true}) {
          CollCase c = base(n);
          c.count = count;
          c.inPlace = inPlace;
          c.dtype = to.dtype;
          c.op = to.op;
          c.setting = count == 101 ? kTiny : kSplit;
          c.root = rooted() ? n - 1 : 0;
          if (!runCollective(c)) return;
        }
      }
    }
  }
}

// Production-like limits: one chunk, one piece for small counts.
TEST_P(PlanSweep, DefaultLimits) {
  for (int n : {1, 2, 3, 6, 17}) {
    for (size_t count : {size_t{1}, size_t{1023}, size_t{70000}}) {
      for (bool inPlace : {false, true}) {
        CollCase c = base(n);
        c.count = count;
        c.inPlace = inPlace;
        c.dtype = strataFloat32;
        c.setting = kDefault;
        c.root = rooted() ? 1 % n : 0;
        if (!runCollective(c)) return;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Collectives, PlanSweep,
    ::testing::Values(CollAlgo{CollKind::kAllReduce, "ring"}, CollAlgo{CollKind::kAllReduce, "oneshot"},
                      CollAlgo{CollKind::kAllReduce, "twoshot"}, CollAlgo{CollKind::kAllReduce, "rhd"},
                      CollAlgo{CollKind::kAllReduce, "tree"}, CollAlgo{CollKind::kAllReduce, "hier"},
                      CollAlgo{CollKind::kReduceScatter, "ring"}, CollAlgo{CollKind::kReduceScatter, "rhd"},
                      CollAlgo{CollKind::kReduceScatter, "hier"}, CollAlgo{CollKind::kAllGather, "ring"},
                      CollAlgo{CollKind::kAllGather, "rhd"}, CollAlgo{CollKind::kAllGather, "hier"},
                      CollAlgo{CollKind::kBroadcast, "chain"}, CollAlgo{CollKind::kReduce, "chain"},
                      CollAlgo{CollKind::kAllToAll, "pairwise"}, CollAlgo{CollKind::kBarrier, "dissemination"}),
    paramName);

// Every listed algorithm is in the sweep above.
TEST(Algorithms, ListsAndDefaults) {
  EXPECT_EQ(algorithmsFor(CollKind::kAllReduce),
            (std::vector<std::string>{"ring", "oneshot", "twoshot", "rhd", "tree", "hier"}));
  EXPECT_EQ(algorithmsFor(CollKind::kReduceScatter), (std::vector<std::string>{"ring", "rhd", "hier"}));
  EXPECT_EQ(algorithmsFor(CollKind::kAllGather), (std::vector<std::string>{"ring", "rhd", "hier"}));
  EXPECT_EQ(algorithmsFor(CollKind::kBroadcast), std::vector<std::string>{"chain"});
  EXPECT_EQ(algorithmsFor(CollKind::kReduce), std::vector<std::string>{"chain"});
  EXPECT_EQ(algorithmsFor(CollKind::kAllToAll), std::vector<std::string>{"pairwise"});
  EXPECT_EQ(algorithmsFor(CollKind::kSend), std::vector<std::string>{"p2p"});
  EXPECT_EQ(algorithmsFor(CollKind::kRecv), std::vector<std::string>{"p2p"});
  EXPECT_EQ(algorithmsFor(CollKind::kBarrier), std::vector<std::string>{"dissemination"});
  EXPECT_STREQ(collName(CollKind::kReduceScatter), "reducescatter");
  EXPECT_STREQ(collName(CollKind::kAllToAll), "alltoall");
}

TEST(Algorithms, Segments) {
  for (int n = 1; n <= 9; ++n) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{8}, size_t{9}, size_t{100}}) {
      size_t total = 0;
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(segmentOffset(count, n, i), total);
        const size_t s = segmentCount(count, n, i);
        EXPECT_TRUE(s == count / n || s == count / n + 1);
        if (i > 0) {
          EXPECT_LE(s, segmentCount(count, n, i - 1));
        }
        total += s;
      }
      EXPECT_EQ(total, count);
      EXPECT_EQ(segmentOffset(count, n, n), count);
    }
  }
  EXPECT_EQ(segmentCount(10, 4, 0), 3u);
  EXPECT_EQ(segmentCount(10, 4, 1), 3u);
  EXPECT_EQ(segmentCount(10, 4, 2), 2u);
  EXPECT_EQ(segmentOffset(10, 4, 3), 8u);
}

TEST(Algorithms, BadArguments) {
  CollArgs args;
  args.nranks = 4;
  args.rank = 1;
  args.count = 10;
  EXPECT_THROW(makePlan(args, "nosuch"), InvalidArgument);
  EXPECT_THROW(makePlan(args, "pairwise"), InvalidArgument);  // an algorithm of another collective
  args.rank = 4;
  EXPECT_THROW(makePlan(args, "ring"), InvalidArgument);
  args.rank = 1;
  args.chunkElems = 0;
  EXPECT_THROW(makePlan(args, "ring"), InvalidArgument);
  args.chunkElems = 8;
  args.kind = CollKind::kBroadcast;
  args.root = 4;
  EXPECT_THROW(makePlan(args, "chain"), InvalidArgument);
  args.root = -1;
  EXPECT_THROW(makePlan(args, "chain"), InvalidArgument);
  args.root = 0;
  EXPECT_NO_THROW(makePlan(args, "chain"));
  EXPECT_THROW(makePlan(args, "ring"), InvalidArgument);  // broadcast and reduce run chains, not rings
  args.kind = CollKind::kSend;
  args.peer = 1;  // self
  EXPECT_THROW(makePlan(args, "p2p"), InvalidArgument);
  args.peer = 7;
  EXPECT_THROW(makePlan(args, "p2p"), InvalidArgument);
  args.kind = CollKind::kAllGather;
  args.count = SIZE_MAX / 2;
  EXPECT_THROW(makePlan(args, "ring"), InvalidArgument);
}

// The host layout the hierarchical plans and the cost model share: hosts in order of their lowest rank,
// ranks ascending, rails = the smallest host's rank count; bad layouts are rejected with the collective's name.
TEST(PlanHostLayout, GroupsRanksByHost) {
  const HostLayout one(4, {}, "test");
  EXPECT_EQ(one.hosts(), (std::vector<std::vector<int>>{{0, 1, 2, 3}}));
  EXPECT_EQ(one.rails(), 4);
  EXPECT_FALSE(one.crossesHosts(0, 3));

  const HostLayout threes(7, {0, 0, 0, 1, 1, 1, 2}, "test");
  EXPECT_EQ(threes.hosts(), (std::vector<std::vector<int>>{{0, 1, 2}, {3, 4, 5}, {6}}));
  EXPECT_EQ(threes.minPerHost(), 1);
  EXPECT_EQ(threes.maxPerHost(), 3);
  EXPECT_EQ(threes.rails(), 1);
  EXPECT_EQ(threes.localOf(5), 2);
  EXPECT_EQ(threes.hostOf(6), 2);
  EXPECT_EQ(threes.rail(0), (std::vector<int>{0, 3, 6}));

  // Hosts are numbered by their lowest rank, whatever indices the caller used.
  const HostLayout alternating(5, {1, 0, 1, 0, 1}, "test");
  EXPECT_EQ(alternating.hosts(), (std::vector<std::vector<int>>{{0, 2, 4}, {1, 3}}));
  EXPECT_EQ(alternating.hostOf(0), 0);
  EXPECT_EQ(alternating.localOf(3), 1);
  EXPECT_EQ(alternating.rails(), 2);
  EXPECT_EQ(alternating.rail(1), (std::vector<int>{2, 3}));
  EXPECT_TRUE(alternating.crossesHosts(0, 1));
  EXPECT_FALSE(alternating.crossesHosts(1, 3));
}

TEST(PlanHostLayout, RejectsBadLayouts) {
  auto message = [](int n, const std::vector<int>& hostOf) {
    CollArgs args;
    args.nranks = n;
    args.count = 10;
    args.hostOf = hostOf;
    try {
      makePlan(args, "hier");
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(4, {0, 0, 1}), "allreduce: host layout names 3 ranks, the communicator has 4");
  EXPECT_EQ(message(4, {0, 0, 1, 4}), "allreduce: rank 3 has host index 4");
  EXPECT_EQ(message(3, {0, -1, 1}), "allreduce: rank 1 has host index -1");
  EXPECT_THROW(HostLayout(2, {0, 2}, "test"), InvalidArgument);
}

// ---- determinism ---------------------------------------------------------------------------------------

// Non-integer floats: the reduction order matters, yet every rank must hold bitwise the same result, in
// place or not.
TEST(PlanDeterminism, AllReduceBitwiseEqualOnEveryRank) {
  for (const char* algo : {"ring", "oneshot", "twoshot", "rhd", "tree", "hier"}) {
    for (int n : {3, 5, 8, 13}) {
      const size_t count = 1023;
      std::mt19937 rng(static_cast<unsigned>(n) * 7919u);
      std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
      std::vector<std::vector<float>> input(static_cast<size_t>(n), std::vector<float>(count));
      for (auto& v : input)
        for (float& x : v) x = dist(rng);
      std::vector<float> firstResult;
      for (bool inPlace : {false, true}) {
        SCOPED_TRACE(strprintf("%s n=%d %s", algo, n, inPlace ? "in-place" : "out-of-place"));
        std::vector<Plan> plans;
        std::vector<std::vector<float>> send = input, recv(static_cast<size_t>(n), std::vector<float>(count)),
                                        scratch(static_cast<size_t>(n));
        std::vector<std::vector<void*>> buffers;
        for (int r = 0; r < n; ++r) {
          CollArgs args;
          args.nranks = n;
          args.rank = r;
          args.count = count;
          args.inPlace = inPlace;
          args.chunkElems = chunkElemsFor(kTiny, 4);
          if (std::string(algo) == "hier") args.hostOf = hostLayouts(n)[3];  // hosts of 3 ranks
          plans.push_back(makePlan(args, algo));
          const size_t ur = static_cast<size_t>(r);
          scratch[ur].resize(plans.back().scratchElems);
          float* out = inPlace ? send[ur].data() : recv[ur].data();
          buffers.push_back({send[ur].data(), out, scratch[ur].data()});
        }
        interpretPlans(plans, buffers, strataFloat32, ReduceKind::kSum,
                       InterpreterOptions{kTiny.pieceBytes, kTiny.nslots});
        const std::vector<float>& rank0 = inPlace ? send[0] : recv[0];
        for (int r = 1; r < n; ++r) {
          const std::vector<float>& mine = inPlace ? send[static_cast<size_t>(r)] : recv[static_cast<size_t>(r)];
          ASSERT_EQ(std::memcmp(mine.data(), rank0.data(), count * sizeof(float)), 0) << "rank " << r;
        }
        for (size_t i = 0; i < count; ++i) {
          double ref = 0;
          for (int r = 0; r < n; ++r) ref += input[static_cast<size_t>(r)][i];
          ASSERT_NEAR(rank0[i], ref, 1e-4) << "element " << i;
        }
        if (firstResult.empty()) firstResult = rank0;
        else
          EXPECT_EQ(std::memcmp(firstResult.data(), rank0.data(), count * sizeof(float)), 0)
              << "in-place and out-of-place results differ";
      }
    }
  }
}

// ---- send / recv ---------------------------------------------------------------------------------------

// Rank r sends to r+k and receives from r-k in one group, planned by the builder the executor uses: buffers
// 0..2 belong to the send, 3..5 to the receive (kBuffersPerColl per call).
TEST(PlanP2P, ShiftExchangeAsGroup) {
  for (int n = 2; n <= 9; ++n) {
    for (int k = 1; k < n; k += 2) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{100}, size_t{1023}}) {
        SCOPED_TRACE(strprintf("n=%d shift=%d count=%zu", n, k, count));
        std::vector<Plan> plans;
        std::vector<std::vector<int32_t>> send(static_cast<size_t>(n)), recv(static_cast<size_t>(n));
        std::vector<std::vector<void*>> buffers;
        for (int r = 0; r < n; ++r) {
          const P2PCall calls[] = {{true, (r + k) % n, count}, {false, (r - k + n) % n, count}};
          Plan group = p2pGroupPlan(r, n, calls, sizeof(int32_t));
          EXPECT_NO_THROW(validatePlan(group)) << group.toString();
          EXPECT_EQ(group.lanes.size(), count ? 2u : 0u) << "one lane per (peer, direction)";
          plans.push_back(group);
          const size_t ur = static_cast<size_t>(r);
          send[ur].resize(count);
          recv[ur].assign(count, -1);
          for (size_t i = 0; i < count; ++i) send[ur][i] = static_cast<int32_t>(r * 100000 + static_cast<int>(i));
          buffers.push_back({send[ur].data(), nullptr, nullptr, nullptr, recv[ur].data(), nullptr});
        }
        ASSERT_NO_THROW(interpretPlans(plans, buffers, strataInt32, ReduceKind::kSum,
                                       InterpreterOptions{kTiny.pieceBytes, kTiny.nslots}));
        for (int r = 0; r < n; ++r)
          ASSERT_EQ(recv[static_cast<size_t>(r)], send[static_cast<size_t>((r - k + n) % n)]) << "rank " << r;
      }
    }
  }
}

// The single-call "p2p" plans of the algorithm table come from the same builder.
TEST(PlanP2P, SingleCallPlansAreOneMemberGroups) {
  CollArgs args;
  args.nranks = 4;
  args.rank = 1;
  args.count = 100;
  args.kind = CollKind::kSend;
  args.peer = 3;
  const P2PCall send{true, 3, 100};
  EXPECT_EQ(makePlan(args, "p2p").toString(), p2pGroupPlan(1, 4, std::span<const P2PCall>(&send, 1), 4).toString());
  args.kind = CollKind::kRecv;
  args.peer = 0;
  const P2PCall recv{false, 0, 100};
  EXPECT_EQ(makePlan(args, "p2p").toString(), p2pGroupPlan(1, 4, std::span<const P2PCall>(&recv, 1), 4).toString());
}

// Several sends and receives to the same peers keep issue order on one lane per (peer, direction); sends to
// self pair with receives from self in issue order and become copies; empty calls vanish.
TEST(PlanP2P, GroupLanesAndSelfCopies) {
  const int n = 3;
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE(strprintf("rank %d", r));
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    const P2PCall calls[] = {{true, next, 5},  {true, r, 4},    {false, prev, 5}, {true, next, 6}, {false, r, 4},
                             {false, prev, 6}, {true, next, 0}, {true, r, 2},     {false, r, 2}};
    const Plan plan = p2pGroupPlan(r, n, calls, 8);
    ASSERT_NO_THROW(validatePlan(plan));
    ASSERT_EQ(plan.lanes.size(), 3u) << plan.toString();
    // Sends to next: calls 0 and 3, in order; receives from prev: calls 2 and 5; then the self copies.
    ASSERT_EQ(plan.lanes[0].size(), 2u);
    EXPECT_EQ(plan.lanes[0][0].src.buf, 0 * kBuffersPerColl + kBufSend);
    EXPECT_EQ(plan.lanes[0][1].src.buf, 3 * kBuffersPerColl + kBufSend);
    ASSERT_EQ(plan.lanes[1].size(), 2u);
    EXPECT_EQ(plan.lanes[1][0].dst.buf, 2 * kBuffersPerColl + kBufRecv);
    EXPECT_EQ(plan.lanes[1][1].dst.buf, 5 * kBuffersPerColl + kBufRecv);
    ASSERT_EQ(plan.lanes[2].size(), 2u);
    EXPECT_EQ(plan.lanes[2][0].kind, OpKind::kCopy);
    EXPECT_EQ(plan.lanes[2][0].src.buf, 1 * kBuffersPerColl + kBufSend);
    EXPECT_EQ(plan.lanes[2][0].dst.buf, 4 * kBuffersPerColl + kBufRecv);
    EXPECT_EQ(plan.lanes[2][1].src.buf, 7 * kBuffersPerColl + kBufSend);
    EXPECT_EQ(plan.lanes[2][1].dst.buf, 8 * kBuffersPerColl + kBufRecv);
  }
}

TEST(PlanP2P, UnpairedSelfCallsAndBadPeersAreRefused) {
  const P2PCall unpaired[] = {{true, 0, 4}};
  EXPECT_THROW(
      {
        try {
          p2pGroupPlan(0, 2, unpaired, 4);
        } catch (const InvalidUsage& e) {
          EXPECT_STREQ(e.what(), "rank 0: 1 send(s) to self but 0 recv(s) from self in one group");
          throw;
        }
      },
      InvalidUsage);
  const P2PCall mismatched[] = {{true, 1, 4}, {false, 1, 3}};
  EXPECT_THROW(
      {
        try {
          p2pGroupPlan(1, 2, mismatched, 4);
        } catch (const InvalidUsage& e) {
          EXPECT_STREQ(e.what(), "rank 1: send to self of 16 bytes matched with recv from self of 12 bytes");
          throw;
        }
      },
      InvalidUsage);
  const P2PCall badPeer[] = {{false, 2, 4}};
  EXPECT_THROW(p2pGroupPlan(0, 2, badPeer, 4), InvalidArgument);
}

// ---- the interpreter catches deadlocks; validatePlan catches broken structure ---------------------------

TEST(PlanInterpreter, ReportsDeadlockInsteadOfHanging) {
  // Both ranks send 100 elements before receiving: 400 bytes against a capacity of 2 x 16 bytes.
  std::vector<Plan> plans(2);
  std::vector<std::vector<int32_t>> send(2, std::vector<int32_t>(100, 1)), recv(2, std::vector<int32_t>(100));
  std::vector<std::vector<void*>> buffers;
  for (int r = 0; r < 2; ++r) {
    Plan& p = plans[static_cast<size_t>(r)];
    p.rank = r;
    p.nranks = 2;
    p.algorithm = "bad";
    Op s;
    s.kind = OpKind::kSend;
    s.sendPeer = 1 - r;
    s.src = Region{kBufSend, 0, 100};
    Op v;
    v.kind = OpKind::kRecv;
    v.recvPeer = 1 - r;
    v.dst = Region{kBufRecv, 0, 100};
    p.lanes.push_back({s, v});
    EXPECT_NO_THROW(validatePlan(p));  // structurally fine; only the capacity makes it deadlock
    buffers.push_back({send[static_cast<size_t>(r)].data(), recv[static_cast<size_t>(r)].data(), nullptr});
  }
  EXPECT_THROW(interpretPlans(plans, buffers, strataInt32, ReduceKind::kSum, InterpreterOptions{16, 2}), InternalError);
  // With room for the whole message the same plans complete.
  EXPECT_NO_THROW(interpretPlans(plans, buffers, strataInt32, ReduceKind::kSum, InterpreterOptions{16, 25}));
  EXPECT_EQ(recv[0], send[1]);
}

// ---- cross-lane dependencies ---------------------------------------------------------------------------

Op depOp(Op op, int lane, uint32_t ops) {
  op.afterLane = lane;
  op.afterOps = ops;
  return op;
}

// A relay chain built on dependencies, at every n: rank r receives chunk c from r-1 in lane 1 and, in lane 0,
// forwards it to r+1 once lane 1 has received it (lane 0's op c waits for lane 1's op c). The root's lane 0 sends
// from its send buffer with no dependency. Chunks are larger than a connection's capacity, so no rank finishes
// before the next one receives; and the forwarding lane comes first, so without its waits it would forward
// chunks it has not received.
TEST(PlanDependencies, RelayChainEveryN) {
  constexpr size_t kChunks = 5, kChunk = 12;
  for (int n = 1; n <= 33; ++n) {
    SCOPED_TRACE("n=" + std::to_string(n));
    std::vector<Plan> plans(static_cast<size_t>(n));
    std::vector<std::vector<int32_t>> send(static_cast<size_t>(n)), recv(static_cast<size_t>(n));
    std::vector<std::vector<void*>> buffers;
    for (int r = 0; r < n; ++r) {
      const size_t ur = static_cast<size_t>(r);
      send[ur].assign(kChunks * kChunk, 0);
      recv[ur].assign(kChunks * kChunk, -1);
      for (size_t i = 0; i < send[ur].size(); ++i) send[ur][i] = r == 0 ? static_cast<int32_t>(i * 7 + 1) : -2;
      Plan& p = plans[ur];
      p.rank = r;
      p.nranks = n;
      p.algorithm = "relay";
      p.lanes.resize(2);
      for (size_t c = 0; c < kChunks; ++c) {
        const Region chunk{r == 0 ? kBufSend : kBufRecv, c * kChunk, kChunk};
        if (r > 0) p.lanes[1].push_back(gen::recvOp(r - 1, chunk));
        if (r + 1 < n) {
          const Op forward = gen::sendOp(r + 1, chunk);
          p.lanes[0].push_back(r == 0 ? forward : depOp(forward, 1, static_cast<uint32_t>(c + 1)));
        }
      }
      ASSERT_NO_THROW(validatePlan(p)) << p.toString();
      buffers.push_back({send[ur].data(), recv[ur].data(), nullptr});
    }
    ASSERT_NO_THROW(interpretPlans(plans, buffers, strataInt32, ReduceKind::kSum, InterpreterOptions{16, 2}));
    for (int r = 1; r < n; ++r) EXPECT_EQ(recv[static_cast<size_t>(r)], send[0]) << "rank " << r;
  }
}

// A lane waiting on a dependency never holds up the others: rank 0's lane 1 waits for lane 0's receive, which rank 1
// only sends after it has received what rank 0's lane 2 sends.
TEST(PlanDependencies, AWaitingLaneDoesNotBlockTheOthers) {
  std::vector<int32_t> x(8, 5), y(8, 6), z(8, 7), got0(8), got1(8), got2(8), scratch1(8);
  std::vector<Plan> plans(3);
  for (int r = 0; r < 3; ++r) {
    plans[static_cast<size_t>(r)].rank = r;
    plans[static_cast<size_t>(r)].nranks = 3;
    plans[static_cast<size_t>(r)].algorithm = "test";
  }
  plans[0].lanes = {{gen::recvOp(1, Region{kBufRecv, 0, 8})},
                    {depOp(gen::sendOp(2, Region{kBufRecv, 0, 8}), 0, 1)},
                    {gen::sendOp(1, Region{kBufSend, 0, 8})}};
  plans[1].lanes = {{gen::recvOp(0, Region{kBufScratch, 0, 8}), gen::sendOp(0, Region{kBufSend, 0, 8})}};
  plans[2].lanes = {{gen::recvOp(0, Region{kBufRecv, 0, 8})}};
  for (const Plan& p : plans) ASSERT_NO_THROW(validatePlan(p)) << p.toString();
  std::vector<std::vector<void*>> buffers = {
      {z.data(), got0.data(), nullptr}, {x.data(), got1.data(), scratch1.data()}, {y.data(), got2.data(), nullptr}};
  ASSERT_NO_THROW(interpretPlans(plans, buffers, strataInt32, ReduceKind::kSum, InterpreterOptions{16, 2}));
  EXPECT_EQ(got0, x);
  EXPECT_EQ(scratch1, z);
  EXPECT_EQ(got2, x);  // rank 0 forwarded what it received
}

// Deliberate cycles are deadlocks, reported with the waiting lanes, never hangs.
TEST(PlanDependencies, CyclesAreReportedAsDeadlocks) {
  // 1. Within one rank: lane 0's send waits for lane 1's receive, which waits for lane 0's send.
  std::vector<Plan> plans(2);
  std::vector<std::vector<int32_t>> send(2, std::vector<int32_t>(4, 1)), recv(2, std::vector<int32_t>(4));
  std::vector<std::vector<void*>> buffers;
  for (int r = 0; r < 2; ++r) {
    Plan& p = plans[static_cast<size_t>(r)];
    p.rank = r;
    p.nranks = 2;
    p.algorithm = "cyclic";
    p.lanes = {{depOp(gen::sendOp(1 - r, Region{kBufSend, 0, 4}), 1, 1)},
               {depOp(gen::recvOp(1 - r, Region{kBufRecv, 0, 4}), 0, 1)}};
    buffers.push_back({send[static_cast<size_t>(r)].data(), recv[static_cast<size_t>(r)].data(), nullptr});
  }
  try {
    validatePlan(plans[0]);
    ADD_FAILURE() << "validatePlan accepted a cycle";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("lane 0 op 0 waits for lane 1 op 0"), std::string::npos) << e.what();
  }
  try {
    interpretPlans(plans, buffers, strataInt32, ReduceKind::kSum);
    ADD_FAILURE() << "the interpreter ran a cycle to completion";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("waiting for lane 1 to finish op 0"), std::string::npos) << e.what();
  }

  // 2. Through the peers: each rank's send waits for its own receive, which waits for the other's send. No rank's
  // plan has a cycle of its own, so only running the plans together finds it.
  for (int r = 0; r < 2; ++r)
    plans[static_cast<size_t>(r)].lanes = {{gen::recvOp(1 - r, Region{kBufRecv, 0, 4})},
                                           {depOp(gen::sendOp(1 - r, Region{kBufSend, 0, 4}), 0, 1)}};
  EXPECT_NO_THROW(validatePlan(plans[0]));
  try {
    interpretPlans(plans, buffers, strataInt32, ReduceKind::kSum);
    ADD_FAILURE() << "the interpreter ran a cross-rank cycle to completion";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
  }

  // 3. Dependencies on what does not exist.
  Plan bad = plans[0];
  bad.lanes[1][0].afterLane = 2;
  EXPECT_THROW(validatePlan(bad), InternalError);
  bad.lanes[1][0].afterLane = 1;  // its own lane
  EXPECT_THROW(validatePlan(bad), InternalError);
  bad.lanes[1][0].afterLane = 0;
  bad.lanes[1][0].afterOps = 2;  // lane 0 has one op
  EXPECT_THROW(validatePlan(bad), InternalError);
  bad.lanes[1][0].afterLane = -1;  // a count with no lane
  EXPECT_THROW(validatePlan(bad), InternalError);
}

// The hierarchical all-reduce across hosts is pipelined: its rail lane runs piece p while lane 0 runs the next
// piece's reduce-scatter, and only its dependencies keep lanes that share memory in order. Without them the
// lane-independence check (and the interpreter's result) fails.
TEST(PlanDependencies, HierarchicalAllReduceIsPipelined) {
  CollArgs args;
  args.kind = CollKind::kAllReduce;
  args.nranks = 8;
  args.count = 16 * 8 * 64;
  args.chunkElems = 64;
  args.hostOf = {0, 0, 0, 0, 1, 1, 1, 1};
  for (int r = 0; r < 8; ++r) {
    args.rank = r;
    const Plan p = makePlan(args, "hier");
    ASSERT_EQ(p.lanes.size(), 2u) << p.toString();
    EXPECT_NO_THROW(validatePlan(p));
    EXPECT_TRUE(hasDependencies(p));
    // Lane 0's first all-gather comes after the second piece's reduce-scatter has begun: find the first op of
    // lane 0 with a dependency and check a reduce-scatter op of another piece precedes it beyond piece 0.
    size_t firstWait = p.lanes[0].size();
    for (size_t i = 0; i < p.lanes[0].size(); ++i)
      if (p.lanes[0][i].hasDependency()) {
        firstWait = i;
        break;
      }
    ASSERT_LT(firstWait, p.lanes[0].size());
    size_t deps0 = 0, deps1 = 0;
    for (const Op& op : p.lanes[0]) deps0 += op.hasDependency();
    for (const Op& op : p.lanes[1]) deps1 += op.hasDependency();
    EXPECT_EQ(deps0, 16u) << "one wait per piece in lane 0";
    EXPECT_EQ(deps1, 16u) << "one wait per piece in lane 1";
    // Lane 1's wait for piece 1 names fewer lane-0 ops than lane 0's wait for piece 0's rail phase precedes: piece
    // 1's rail phase can start before piece 0's all-gather.
    EXPECT_GT(firstWait, p.lanes[1][0].afterOps);
  }
  // Remove the dependencies: lanes now touch the same memory in no order.
  args.rank = 0;
  Plan p = makePlan(args, "hier");
  for (auto& lane : p.lanes)
    for (Op& op : lane) op.afterLane = -1, op.afterOps = 0;
  std::vector<float> a(args.count), b(args.count);
  EXPECT_NONFATAL_FAILURE(expectLanesIndependent(p, {a.data(), b.data(), nullptr}, sizeof(float)),
                          "in no dependency order");
}

TEST(PlanValidation, RejectsBrokenPlans) {
  auto plan = [] {
    Plan p;
    p.rank = 1;
    p.nranks = 3;
    p.algorithm = "test";
    return p;
  };
  Op send;
  send.kind = OpKind::kSend;
  send.sendPeer = 2;
  send.src = Region{kBufSend, 0, 4};
  Op recv;
  recv.kind = OpKind::kRecv;
  recv.recvPeer = 0;
  recv.dst = Region{kBufRecv, 0, 4};

  Plan ok = plan();
  ok.lanes = {{send, recv}, {}};
  EXPECT_NO_THROW(validatePlan(ok));
  EXPECT_EQ(ok.numOps(), 2u);
  EXPECT_NE(ok.toString().find("send to 2"), std::string::npos) << ok.toString();

  Plan p = plan();
  Op self = send;
  self.sendPeer = 1;
  p.lanes = {{self}};
  EXPECT_THROW(validatePlan(p), InternalError);

  Op far = recv;
  far.recvPeer = 3;
  p.lanes = {{far}};
  EXPECT_THROW(validatePlan(p), InternalError);

  p.lanes = {{send}, {send}};  // two lanes send to rank 2
  EXPECT_THROW(validatePlan(p), InternalError);
  p.lanes = {{send, send}, {recv}};  // one lane may use a direction many times
  EXPECT_NO_THROW(validatePlan(p));
  Op back = send;
  back.kind = OpKind::kRecv;
  back.recvPeer = 2;
  back.sendPeer = -1;
  back.dst = Region{kBufRecv, 0, 4};
  p.lanes = {{send}, {back}};  // the two directions of one peer in two lanes are fine
  EXPECT_NO_THROW(validatePlan(p));

  Op mismatch;
  mismatch.kind = OpKind::kCopy;
  mismatch.src = Region{kBufSend, 0, 4};
  mismatch.dst = Region{kBufRecv, 0, 5};
  p.lanes = {{mismatch}};
  EXPECT_THROW(validatePlan(p), InternalError);

  Op empty = send;
  empty.src.count = 0;
  p.lanes = {{empty}};
  EXPECT_THROW(validatePlan(p), InternalError);

  Op fused;
  fused.kind = OpKind::kRecvReduceCopySend;
  fused.recvPeer = 0;
  fused.sendPeer = 2;
  fused.src = Region{kBufSend, 0, 4};
  fused.dst = Region{kBufRecv, 0, 4};
  p.lanes = {{fused}};
  EXPECT_NO_THROW(validatePlan(p));
  EXPECT_EQ(fused.count(), 4u);
  EXPECT_TRUE(fused.receives());
  EXPECT_TRUE(fused.sends());
  EXPECT_FALSE(recv.sends());
  EXPECT_FALSE(send.receives());

  Plan badRank = plan();
  badRank.rank = 3;
  EXPECT_THROW(validatePlan(badRank), InternalError);
}

TEST(PlanStructure, BarrierHasLogRounds) {
  for (int n = 1; n <= 33; ++n) {
    CollArgs args;
    args.kind = CollKind::kBarrier;
    args.nranks = n;
    args.rank = n / 2;
    const Plan p = makePlan(args, "dissemination");
    int rounds = 0;
    while ((1 << rounds) < n) ++rounds;
    EXPECT_EQ(p.numOps(), static_cast<size_t>(2 * rounds)) << "n=" << n;
  }
}

}  // namespace
}  // namespace strata
