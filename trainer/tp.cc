#include "tp.h"

#include <cstring>

namespace strain {

namespace {
struct Timer {
  double& acc;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  explicit Timer(double& a) : acc(a) {}
  ~Timer() { acc += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
};
}  // namespace

void TpCtx::allReduce(float* x, size_t n) {
  if (size == 1 || !comm) return;
  Timer t(commSec);
  comm->allReduce(x, x, n, strataFloat32, strataSum);
}

void TpCtx::allGather(const float* local, float* full, size_t nloc) {
  if (size == 1 || !comm) {
    if (full != local) std::memcpy(full, local, nloc * sizeof(float));
    return;
  }
  Timer t(commSec);
  comm->allGather(local, full, nloc, strataFloat32);
}

void TpCtx::reduceScatter(const float* full, float* local, size_t nloc) {
  if (size == 1 || !comm) {
    if (full != local) std::memcpy(local, full, nloc * sizeof(float));
    return;
  }
  Timer t(commSec);
  comm->reduceScatter(full, local, nloc, strataFloat32, strataSum);
}

strata::Work TpCtx::allReduceAsync(float* x, size_t n) {
  if (size == 1 || !comm) return {};
  return comm->allReduceAsync(x, x, n, strataFloat32, strataSum);
}

strata::Work TpCtx::reduceScatterAsync(const float* full, float* local, size_t nloc) {
  if (size == 1 || !comm) {
    if (full != local) std::memcpy(local, full, nloc * sizeof(float));
    return {};
  }
  return comm->reduceScatterAsync(full, local, nloc, strataFloat32, strataSum);
}

void TpCtx::wait(strata::Work& w) {
  Timer t(commSec);
  w.wait();
}

void ColumnParallel::forward(TpCtx& tp, const float* x, int nIn, const float* W, const float* b, float* y) {
  int N = nIn;
  if (tp.sp && tp.size > 1) {
    N = nIn * tp.size;
    xfull.resize(size_t(N) * K);
    tp.allGather(x, xfull.data(), size_t(nIn) * K);
    xin = xfull.data();
  } else {
    xin = x;
  }
  for (int i = 0; i < N; ++i) std::memcpy(y + size_t(i) * Ml, b, Ml * sizeof(float));
  gemm(false, false, N, Ml, K, 1.f, xin, K, W, Ml, 1.f, y, Ml);
}

void ColumnParallel::backward(TpCtx& tp, const float* dy, int nIn, const float* W, float* dW, float* db, float* dx) {
  bool sp = tp.sp && tp.size > 1;
  int N = sp ? nIn * tp.size : nIn;
  // The input gradient first, so its collective (g's all-reduce, or reduce-scatter under sp) runs while
  // the weight gradient is computed, as Megatron-LM's asynchronous tensor-parallel backward does.
  strata::Work pending;
  if (sp) {
    dxfull.resize(size_t(N) * K);
    gemm(false, true, N, K, Ml, 1.f, dy, Ml, W, Ml, 0.f, dxfull.data(), K);
    pending = tp.reduceScatterAsync(dxfull.data(), dx, size_t(nIn) * K);
  } else {
    gemm(false, true, N, K, Ml, 1.f, dy, Ml, W, Ml, 0.f, dx, K);
    pending = tp.allReduceAsync(dx, size_t(N) * K);
  }
  gemm(true, false, K, Ml, N, 1.f, xin, K, dy, Ml, 1.f, dW, Ml);
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < Ml; ++j) db[j] += dy[size_t(i) * Ml + j];
  tp.wait(pending);
}

void RowParallel::forward(TpCtx& tp, const float* x, int n, const float* W, const float* b, float* y) {
  xin = x;
  bool sp = tp.sp && tp.size > 1;
  int nOut = sp ? n / tp.size : n;
  if (sp) {
    ypart.resize(size_t(n) * M);
    gemm(false, false, n, M, Kl, 1.f, x, Kl, W, M, 0.f, ypart.data(), M);
    tp.reduceScatter(ypart.data(), y, size_t(nOut) * M);
  } else {
    gemm(false, false, n, M, Kl, 1.f, x, Kl, W, M, 0.f, y, M);
    tp.allReduce(y, size_t(n) * M);
  }
  for (int i = 0; i < nOut; ++i)
    for (int j = 0; j < M; ++j) y[size_t(i) * M + j] += b[j];
}

void RowParallel::backward(TpCtx& tp, const float* dy, int n, const float* W, float* dW, float* db, float* dx) {
  bool sp = tp.sp && tp.size > 1;
  int nOut = sp ? n / tp.size : n;
  for (int i = 0; i < nOut; ++i)
    for (int j = 0; j < M; ++j) db[j] += dy[size_t(i) * M + j];
  const float* dyf = dy;
  if (sp) {
    dyfull.resize(size_t(n) * M);
    tp.allGather(dy, dyfull.data(), size_t(nOut) * M);
    dyf = dyfull.data();
  }
  gemm(true, false, Kl, M, n, 1.f, xin, Kl, dyf, M, 1.f, dW, M);
  gemm(false, true, n, Kl, M, 1.f, dyf, M, W, M, 0.f, dx, Kl);
}

}  // namespace strain
