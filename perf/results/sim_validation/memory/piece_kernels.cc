// One core's in-cache rate of a float32 a+b and of memcpy over the same buffers, 64 KiB to 1 MiB of output (the
// executor's pieces are 128 KiB): the ranges of executor.reduceGBps and copyGBps (README.md, probes.txt).
//   g++ -O3 -march=native -o /tmp/k perf/results/sim_validation/memory/piece_kernels.cc && /tmp/k
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
int main() {
  for (size_t bytes : {65536ul, 131072ul, 262144ul, 1048576ul}) {
    size_t n = bytes / 4;
    std::vector<float> a(n, 1), b(n, 2), c(n, 0);
    int reps = int(2e9 / bytes);
    for (int mode = 0; mode < 2; ++mode) {
      double best = 1e30;
      for (int t = 0; t < 5; ++t) {
        auto t0 = std::chrono::steady_clock::now();
        for (int r = 0; r < reps; ++r) {
          if (mode == 0) {
            float* __restrict x = a.data();
            float* __restrict y = b.data();
            float* __restrict z = c.data();
            for (size_t i = 0; i < n; ++i) z[i] = x[i] + y[i];
          } else std::memcpy(c.data(), a.data(), bytes);
          asm volatile("" ::"r"(c.data()) : "memory");
        }
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::min(best, s);
      }
      printf("%s %7zu B: %.1f GB/s of output\n", mode ? "memcpy" : "reduce", bytes, bytes * double(reps) / best / 1e9);
    }
  }
}
