// reduce2 (2 inputs -> 1 output) against memcpy on the same buffer sizes, so the ratio of the bytes/s columns
// says how close the kernels come to the memory bandwidth. reduce2 counts 3 x buffer bytes (two reads, one
// write) and memcpy 2 x buffer bytes. Sizes are per input buffer; 64 MiB and up do not fit the LLC.
//
//   strata_bench_reduce --benchmark_min_time=0.2
//   strata_bench_reduce --benchmark_filter='reduce2/float32'
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "kernels/reduce.h"

namespace strata {
namespace {

constexpr int64_t kSizes[] = {int64_t{64} << 10, int64_t{1} << 20, int64_t{64} << 20, int64_t{256} << 20};
constexpr size_t kAlign = 4096;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t, FreeDeleter>;

// A page-aligned buffer of ordinary finite values (no NaN or subnormal slow paths), every page touched.
Buffer makeBuffer(size_t bytes, strataDataType_t dt, double base) {
  Buffer buf(static_cast<uint8_t*>(std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign)));
  const size_t size = dtypeSize(dt);
  const size_t patternCount = kAlign / size;
  for (size_t i = 0; i < patternCount && i * size < bytes; ++i) {
    storeFromDouble(buf.get(), i, dt, base + static_cast<double>(i % 61) * 0.125);
  }
  for (size_t off = kAlign; off < bytes; off += kAlign) {
    std::memcpy(buf.get() + off, buf.get(), std::min(kAlign, bytes - off));
  }
  return buf;
}

void benchReduce(benchmark::State& state, strataDataType_t dt, KernelIsa isa) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / dtypeSize(dt);
  Buffer a = makeBuffer(bytes, dt, 1.0);
  Buffer b = makeBuffer(bytes, dt, -2.0);
  Buffer d = makeBuffer(bytes, dt, 0.0);
  for (auto _ : state) {
    reduce2WithIsa(d.get(), a.get(), b.get(), count, dt, ReduceKind::kSum, isa);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 3 * static_cast<int64_t>(bytes));
}

void benchMemcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  Buffer src = makeBuffer(bytes, strataUint8, 1.0);
  Buffer dst = makeBuffer(bytes, strataUint8, 0.0);
  for (auto _ : state) {
    std::memcpy(dst.get(), src.get(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 * static_cast<int64_t>(bytes));
}

// reduce2/<dtype>/<tier>/<bytes per input>: every tier this CPU supports, the default one marked "(best)".
void registerAll() {
  const strataDataType_t dtypes[] = {strataFloat32,    strataBfloat16,   strataFloat16,
                                     strataFloat8e4m3, strataFloat8e5m2, strataInt32};
  for (strataDataType_t dt : dtypes) {
    for (KernelIsa isa : {KernelIsa::kPortable, KernelIsa::kAvx2, KernelIsa::kAvx512, KernelIsa::kAvx512Vbmi}) {
      if (!kernelIsaSupported(isa)) continue;
      std::string name = std::string("reduce2/") + dtypeName(dt) + "/" + kernelIsaName(isa);
      if (isa == bestKernelIsa()) name += "(best)";
      auto* b = benchmark::RegisterBenchmark(name.c_str(), benchReduce, dt, isa);
      for (int64_t size : kSizes) b->Arg(size);
      b->UseRealTime();
    }
  }
  auto* b = benchmark::RegisterBenchmark("memcpy", benchMemcpy);
  for (int64_t size : kSizes) b->Arg(size);
  b->UseRealTime();
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  strata::registerAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
