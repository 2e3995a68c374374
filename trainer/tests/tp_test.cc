// strata-train: column- and row-parallel layers (plain and sequence parallel) equal the unsplit layer, in
// outputs and in gradients. Run under strata-run -n T; every rank checks its slice against the full layer.
#include "tp.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "model.h"

using namespace strain;

namespace {
Vec randn(size_t n, uint64_t seed) {
  Rng r(seed);
  Vec v(n);
  for (auto& x : v) x = r.normal();
  return v;
}
double maxRel(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i)
    m = std::max(m, std::fabs(double(a[i]) - b[i]) / std::max(1.0, std::fabs(double(b[i]))));
  return m;
}
int failures = 0;
void expectClose(const char* what, bool sp, int rank, const float* got, const float* want, size_t n) {
  double e = maxRel(got, want, n);
  bool ok = e < 1e-5;
  if (!ok) ++failures;
  std::printf("rank %d %-24s %s max rel diff %.2e %s\n", rank, what, sp ? "(sp)" : "    ", e, ok ? "ok" : "FAIL");
}
}  // namespace

int main() {
  openblas_set_num_threads(1);
  auto comm = strata::Communicator::fromEnv();
  const int T = comm.size(), r = comm.rank();
  const int N = 8, K = 16, M = 24;  // N rows, K in, M out; K and M divisible by T = 2, 4
  Vec x = randn(N * K, 1), dyM = randn(N * M, 2), W = randn(K * M, 3), b = randn(M, 4);
  // Unsplit reference: y = x W + b, dx = dy W^T, dW = x^T dy, db = colsum(dy).
  Vec y(N * M), dx(N * K), dW(K * M, 0.f), db(M, 0.f);
  {
    TpCtx one;
    ColumnParallel c{K, M};
    c.forward(one, x.data(), N, W.data(), b.data(), y.data());
    c.backward(one, dyM.data(), N, W.data(), dW.data(), db.data(), dx.data());
  }
  for (int sp = 0; sp < 2; ++sp) {
    TpCtx tp;
    tp.comm = &comm;
    tp.rank = r;
    tp.size = T;
    tp.sp = sp;
    const int Nl = sp ? N / T : N, row0 = sp ? r * Nl : 0;
    // Column parallel: W split by columns (one group).
    {
      Param p;
      p.rows = K;
      p.cols = M;
      p.shard = 1;
      p.numel = size_t(K) * M / T;
      const int Ml = M / T;
      Vec Wl(p.numel), bl(Ml), dWl(p.numel, 0.f), dbl(Ml, 0.f), yl(N * Ml), dxl(Nl * K), dyl(N * Ml);
      shardCopy(p, r, T, W.data(), Wl.data(), false);
      std::memcpy(bl.data(), b.data() + r * Ml, Ml * sizeof(float));
      for (int i = 0; i < N; ++i) std::memcpy(dyl.data() + i * Ml, dyM.data() + i * M + r * Ml, Ml * sizeof(float));
      ColumnParallel c{K, Ml};
      c.forward(tp, x.data() + size_t(row0) * K, Nl, Wl.data(), bl.data(), yl.data());
      c.backward(tp, dyl.data(), Nl, Wl.data(), dWl.data(), dbl.data(), dxl.data());
      Vec ywant(N * Ml), dWwant(p.numel), dbwant(Ml);
      for (int i = 0; i < N; ++i) std::memcpy(ywant.data() + i * Ml, y.data() + i * M + r * Ml, Ml * sizeof(float));
      shardCopy(p, r, T, dW.data(), dWwant.data(), false);
      std::memcpy(dbwant.data(), db.data() + r * Ml, Ml * sizeof(float));
      expectClose("column-parallel y", sp, r, yl.data(), ywant.data(), yl.size());
      expectClose("column-parallel dx", sp, r, dxl.data(), dx.data() + size_t(row0) * K, dxl.size());
      expectClose("column-parallel dW", sp, r, dWl.data(), dWwant.data(), dWl.size());
      expectClose("column-parallel db", sp, r, dbl.data(), dbwant.data(), dbl.size());
    }
    // Row parallel: W split by rows; input is this rank's column slice of x.
    {
      Param p;
      p.rows = K;
      p.cols = M;
      p.shard = 2;
      p.numel = size_t(K) * M / T;
      const int Kl = K / T;
      Vec Wl(p.numel), xl(N * Kl), dWl(p.numel, 0.f), dbl(M, 0.f), yl(Nl * M), dxl(N * Kl);
      shardCopy(p, r, T, W.data(), Wl.data(), false);
      for (int i = 0; i < N; ++i) std::memcpy(xl.data() + i * Kl, x.data() + i * K + r * Kl, Kl * sizeof(float));
      RowParallel rp{Kl, M};
      rp.forward(tp, xl.data(), N, Wl.data(), b.data(), yl.data());
      rp.backward(tp, dyM.data() + size_t(row0) * M, N, Wl.data(), dWl.data(), dbl.data(), dxl.data());
      if (sp) tp.allReduce(dbl.data(), M);  // the replicated bias's gradient is partial under sp
      Vec dWwant(p.numel), dxwant(N * Kl);
      shardCopy(p, r, T, dW.data(), dWwant.data(), false);
      for (int i = 0; i < N; ++i) std::memcpy(dxwant.data() + i * Kl, dx.data() + i * K + r * Kl, Kl * sizeof(float));
      expectClose("row-parallel y", sp, r, yl.data(), y.data() + size_t(row0) * M, yl.size());
      expectClose("row-parallel dx", sp, r, dxl.data(), dxwant.data(), dxl.size());
      expectClose("row-parallel dW", sp, r, dWl.data(), dWwant.data(), dWl.size());
      expectClose("row-parallel db", sp, r, dbl.data(), db.data(), M);
    }
  }
  if (failures) std::printf("rank %d: %d FAILED\n", r, failures);
  return failures ? 1 : 0;
}
