#include "core/plan_proof.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "core/interpreter.h"
#include "util/error.h"

namespace strata {

namespace {

struct ElementClass {
  strataDataType_t dtype;
  const char* name;
};
// One element type per size, integers and floats both: a plan's ops depend on the element size (its chunks and
// pieces are counted in elements), its results on nothing else.
constexpr ElementClass kClasses[] = {
    {strataInt8, "int8"}, {strataBfloat16, "bfloat16"}, {strataFloat32, "float32"}, {strataFloat64, "float64"}};

// Small integers, exact in every class (bfloat16 holds integers up to 256 exactly), so sums in any order agree.
void put(void* base, size_t i, strataDataType_t dt, long v) {
  switch (dt) {
    case strataInt8: static_cast<int8_t*>(base)[i] = static_cast<int8_t>(v); return;
    case strataBfloat16: {
      const float f = static_cast<float>(v);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      static_cast<uint16_t*>(base)[i] = static_cast<uint16_t>(bits >> 16);
      return;
    }
    case strataFloat32: static_cast<float*>(base)[i] = static_cast<float>(v); return;
    default: static_cast<double*>(base)[i] = static_cast<double>(v); return;
  }
}

double get(const void* base, size_t i, strataDataType_t dt) {
  switch (dt) {
    case strataInt8: return static_cast<const int8_t*>(base)[i];
    case strataBfloat16: {
      const uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(base)[i]) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case strataFloat32: return static_cast<const float*>(base)[i];
    default: return static_cast<const double*>(base)[i];
  }
}

struct Run {
  strataDataType_t dtype;
  const char* dtypeName;
  bool inPlace;
  size_t count;  // per block
  size_t pieceBytes;
};

// One run of every rank's plan; throws InvalidArgument with what went wrong.
void runOnce(const PlanProgram& p, const Run& run, int nslots) {
  const int n = p.nranks;
  const size_t esize = dtypeSize(run.dtype), count = run.count;
  const size_t sendElems = count * static_cast<size_t>(p.blocks(kBufSend));
  const size_t recvElems = count * static_cast<size_t>(p.blocks(kBufRecv));
  // The executor's pipeline chunk (CommImpl::chunkBytes) for this piece size.
  const size_t chunkBytes = std::max(run.pieceBytes * static_cast<size_t>(nslots) / 2, run.pieceBytes);
  const size_t chunkElems = std::max<size_t>(1, chunkBytes / esize);
  const std::string what =
      strprintf("%s, %s, count %zu", run.dtypeName, run.inPlace ? "in place" : "out of place", count);
  const long range = std::max(1L, std::min(4L, 100L / n));
  std::mt19937_64 rng(0x5354524154414c31ull ^ (count * 31 + esize));
  std::vector<std::vector<long>> inputs(static_cast<size_t>(n));
  for (auto& in : inputs) {
    in.resize(sendElems);
    for (long& v : in) v = static_cast<long>(rng() % static_cast<uint64_t>(2 * range + 1)) - range;
  }
  // Storage per rank: the larger buffer; in place, the smaller one lies in it where NCCL puts it.
  std::vector<std::vector<char>> storage(static_cast<size_t>(n)), sendCopy(static_cast<size_t>(n)),
      scratch(static_cast<size_t>(n));
  std::vector<std::vector<void*>> buffers(static_cast<size_t>(n));
  std::vector<Plan> plans;
  std::vector<std::vector<std::vector<OpOrigin>>> origins(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const size_t ri = static_cast<size_t>(r);
    CollArgs args = makeCollArgs(p.kind, n, r, count, chunkElems, 0, -1, run.inPlace);
    plans.push_back(planOf(p, args, &origins[ri]));
    char *send = nullptr, *recv = nullptr;
    if (run.inPlace) {
      storage[ri].assign(std::max(sendElems, recvElems) * esize, 0);
      char* base = storage[ri].data();
      send = base;
      recv = base;
      if (p.kind == CollKind::kAllGather) send = base + ri * count * esize;
      if (p.kind == CollKind::kReduceScatter) recv = base + ri * count * esize;
    } else {
      storage[ri].assign(recvElems * esize, 0);
      sendCopy[ri].assign(sendElems * esize, 0);
      send = sendCopy[ri].data();
      recv = storage[ri].data();
    }
    for (size_t i = 0; i < sendElems; ++i) put(send, i, run.dtype, inputs[ri][i]);
    // Poison the output (out of place) so an element nobody writes is seen.
    if (!run.inPlace)
      for (size_t i = 0; i < recvElems; ++i) put(recv, i, run.dtype, 99);
    scratch[ri].assign(plans.back().scratchElems * esize + 1, 0);
    buffers[ri] = {send, recv, scratch[ri].data()};
  }
  InterpreterOptions options;
  options.pieceBytes = run.pieceBytes;
  options.nslots = nslots;
  const DescribeOp describe = [&](size_t r, size_t lane, size_t op) {
    const auto& o = origins[r];
    if (lane < o.size() && op < o[lane].size() && o[lane][op].lane >= 0) {
      const OpOrigin& at = o[lane][op];
      return p.where(static_cast<int>(r), at.lane, at.step) + strprintf(" (loop %zu)", at.loop);
    }
    return strprintf("rank %zu's tail lane (the last count %% %d elements of each block, by the built-in %s) op %zu", r,
                     p.chunksPerBlock(), plans[r].algorithm.c_str(), op);
  };
  try {
    interpretPlans(plans, buffers, run.dtype, ReduceKind::kSum, options, describe);
  } catch (const Error& e) {
    throw InvalidArgument(p.file + ": " + what + ": " + e.what());
  }
  // The reference, element by element.
  const size_t k = static_cast<size_t>(p.chunksPerBlock()), q = count / k;
  for (int r = 0; r < n; ++r) {
    if (p.kind == CollKind::kReduce && r != 0) continue;  // only the root's output is defined
    const void* out = buffers[static_cast<size_t>(r)][kBufRecv];
    for (size_t e = 0; e < recvElems; ++e) {
      long want = 0;
      const size_t b = e / count, i = e % count;
      switch (p.kind) {
        case CollKind::kAllReduce:
        case CollKind::kReduce:
          for (int s = 0; s < n; ++s) want += inputs[static_cast<size_t>(s)][e];
          break;
        case CollKind::kBroadcast: want = inputs[0][e]; break;
        case CollKind::kAllGather: want = inputs[b][i]; break;
        case CollKind::kReduceScatter:
          for (int s = 0; s < n; ++s) want += inputs[static_cast<size_t>(s)][static_cast<size_t>(r) * count + e];
          break;
        case CollKind::kAllToAll: want = inputs[b][static_cast<size_t>(r) * count + i]; break;
        default: break;
      }
      const double got = get(out, e, run.dtype);
      if (got == static_cast<double>(want)) continue;
      std::string chunk;
      if (i < k * q) chunk = strprintf("output chunk %zu (element %zu of it)", b * k + i / q, i % q);
      else
        chunk =
            strprintf("the tail of output block %zu (element %zu of its last count %% %zu elements)", b, i - k * q, k);
      throw InvalidArgument(
          strprintf("%s: %s: wrong result: rank %d's %s, element %zu of the output, is %g; "
                    "%s gives %ld",
                    p.file.c_str(), what.c_str(), r, chunk.c_str(), e, got, collName(p.kind), want));
    }
  }
}

}  // namespace

std::string proveProgram(const PlanProgram& p, const ProofOptions& options) {
  checkProgram(p);
  const size_t k = static_cast<size_t>(p.chunksPerBlock());
  // Two counts: one element per chunk (one loop, no tail), at the executor's piece size; and 2.5 slices per chunk
  // plus a tail (three loops, the last one short), at a small piece size with the executor's slots, which cuts the
  // same messages per op as the executor's (a slice is nslots / 8 pieces at any piece size), so the loops and the
  // connection's capacity interact as they will there.
  constexpr size_t kSmallPiece = 256;
  std::vector<bool> placements;
  if (p.outOfPlace) placements.push_back(false);
  if (p.inPlace) placements.push_back(true);
  int runs = 0;
  for (const ElementClass& c : kClasses) {
    const size_t esize = dtypeSize(c.dtype);
    const size_t chunkElems =
        std::max<size_t>(1, std::max(kSmallPiece * static_cast<size_t>(options.nslots) / 2, kSmallPiece) / esize);
    const size_t loopCount = k * (2 * (chunkElems / 4) + chunkElems / 8) + (k - 1);
    for (bool inPlace : placements) {
      runOnce(p, Run{c.dtype, c.name, inPlace, k, options.pieceBytes}, options.nslots);
      runOnce(p, Run{c.dtype, c.name, inPlace, loopCount, kSmallPiece}, options.nslots);
      runs += 2;
    }
  }
  return strprintf(
      "%s: proven: %s %s on %d ranks, %d run(s) in the interpreter (int8, bfloat16, float32, float64; "
      "%s; one loop, and three loops with a tail), every rank's result exact, no deadlock",
      p.file.c_str(), collName(p.kind), p.name.c_str(), p.nranks, runs,
      p.inPlace && p.outOfPlace ? "in and out of place"
      : p.inPlace               ? "in place"
                                : "out of place");
}

}  // namespace strata
