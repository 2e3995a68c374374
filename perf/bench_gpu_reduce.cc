// CUDA reduction kernels against the device's own copy bandwidth, in one run on the same GPU.
// A D2D cudaMemcpy of S bytes moves 2S (read S, write S); a 2-input reduction of S-byte buffers moves 3S (read
// 2S, write S). Both are reported as bytes moved per second, so "share" = reduction GB/s / memcpy GB/s says how
// close the kernel runs to the memory system (the target is >= 90%). Times are CUDA-event medians.
// Usage: strata_bench_gpu_reduce [--bytes N (per buffer, default 256 MiB)] [--iters N] [--json FILE]
// Exits 77 with the reason when no CUDA device is usable.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda_loader.h"
#include "util/error.h"

namespace {

#define BENCH_CUDA(call)                                                      \
  do {                                                                        \
    cudaError_t e_ = (call);                                                  \
    if (e_ != cudaSuccess) {                                                  \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

template <class F>
double medianMs(int iters, F&& f) {
  cudaEvent_t a, b;
  BENCH_CUDA(cudaEventCreate(&a));
  BENCH_CUDA(cudaEventCreate(&b));
  f();  // warm-up
  f();
  BENCH_CUDA(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    BENCH_CUDA(cudaEventRecord(a));
    f();
    BENCH_CUDA(cudaEventRecord(b));
    BENCH_CUDA(cudaEventSynchronize(b));
    float t = 0;
    BENCH_CUDA(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = size_t{256} << 20;
  int iters = 20;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--bytes" && i + 1 < argc) bytes = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--iters" && i + 1 < argc) iters = std::atoi(argv[++i]);
    else if (a == "--json" && i + 1 < argc) json = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--bytes N] [--iters N] [--json FILE]\n", argv[0]);
      return 2;
    }
  }
  strata::CudaApi* api = nullptr;
  try {
    api = &strata::cudaApi();
  } catch (const strata::Error& e) {
    std::printf("SKIPPED: %s\n", e.what());
    return 77;
  }
  int dev = 0;
  BENCH_CUDA(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, dev));
  void *a = nullptr, *b = nullptr, *c = nullptr;
  BENCH_CUDA(cudaMalloc(&a, bytes));
  BENCH_CUDA(cudaMalloc(&b, bytes));
  BENCH_CUDA(cudaMalloc(&c, bytes));
  // Small finite values: a sum of random bits would produce NaNs and infinities, which cost nothing extra but
  // say nothing either.
  BENCH_CUDA(cudaMemset(a, 0x3c, bytes));
  BENCH_CUDA(cudaMemset(b, 0x3c, bytes));
  const double memcpyMs = medianMs(iters, [&] { BENCH_CUDA(cudaMemcpyAsync(c, a, bytes, cudaMemcpyDeviceToDevice)); });
  const double memcpyGBs = 2.0 * static_cast<double>(bytes) / (memcpyMs * 1e-3) / 1e9;
  std::printf("# device %d: %s, buffers of %zu bytes, median of %d\n", dev, prop.name, bytes, iters);
  std::printf("%-12s %-8s %10s %12s %8s\n", "kernel", "dtype", "time_ms", "GB/s_moved", "share");
  std::printf("%-12s %-8s %10.3f %12.1f %8s\n", "memcpy_d2d", "-", memcpyMs, memcpyGBs, "1.00");
  struct Result {
    std::string dtype;
    int nsrcs;
    double ms, gbs, share;
  };
  std::vector<Result> results;
  const std::pair<strataDataType_t, const char*> types[] = {
      {strataBfloat16, "bf16"}, {strataFloat32, "f32"}, {strataFloat16, "f16"}, {strataFloat8e4m3, "e4m3"}};
  for (const auto& [t, name] : types) {
    const size_t esize = t == strataFloat32 ? 4 : t == strataFloat8e4m3 ? 1 : 2;
    const size_t count = bytes / esize;
    const void* srcs[2] = {a, b};
    const double ms = medianMs(iters, [&] {
      if (api->reduce(c, srcs, 2, count, t, strata::ReduceKind::kSum, nullptr) != 0) {
        std::fprintf(stderr, "reduce failed\n");
        std::exit(1);
      }
    });
    const double gbs = 3.0 * static_cast<double>(count * esize) / (ms * 1e-3) / 1e9;
    results.push_back({name, 2, ms, gbs, gbs / memcpyGBs});
    std::printf("%-12s %-8s %10.3f %12.1f %8.2f\n", "reduce2", name, ms, gbs, gbs / memcpyGBs);
  }
  BENCH_CUDA(cudaGetLastError());
  if (!json.empty()) {
    FILE* f = std::fopen(json.c_str(), "w");
    if (!f) {
      std::perror(json.c_str());
      return 1;
    }
    std::fprintf(f, "{\n  \"device\": \"%s\",\n  \"bytes_per_buffer\": %zu,\n  \"iters\": %d,\n", prop.name, bytes,
                 iters);
    std::fprintf(f, "  \"memcpy_d2d\": {\"ms\": %.4f, \"gbs_moved\": %.2f},\n  \"reduce\": [", memcpyMs, memcpyGBs);
    for (size_t i = 0; i < results.size(); ++i)
      std::fprintf(
          f, "%s\n    {\"dtype\": \"%s\", \"nsrcs\": %d, \"ms\": %.4f, \"gbs_moved\": %.2f, \"share_of_memcpy\": %.4f}",
          i ? "," : "", results[i].dtype.c_str(), results[i].nsrcs, results[i].ms, results[i].gbs, results[i].share);
    std::fprintf(f, "\n  ]\n}\n");
    std::fclose(f);
  }
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return 0;
}
