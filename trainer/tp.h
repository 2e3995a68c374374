// strata-train: tensor-parallel context (the f/g operators' collectives) and the Megatron-LM column- and
// row-parallel linear layers.
#pragma once

#include <chrono>
#include <cstddef>

#include "strata/strata.hpp"
#include "tensor.h"

namespace strain {

/// The tensor-parallel group of this rank. With size 1 (or no communicator) every collective is a no-op.
struct TpCtx {
  strata::Communicator* comm = nullptr;
  int rank = 0;
  int size = 1;
  bool sp = false;     // sequence parallel: activations outside the parallel regions hold rows/size rows
  double commSec = 0;  // accumulated wall time in TP collectives

  void allReduce(float* x, size_t n);
  /// Concatenates every rank's `nloc` floats in rank order into `full` (size * nloc floats).
  void allGather(const float* local, float* full, size_t nloc);
  /// Sums `full` over ranks and leaves this rank's `nloc`-float slice in `local`.
  void reduceScatter(const float* full, float* local, size_t nloc);
  /// Asynchronous forms (the input-gradient collective runs while the weight-gradient GEMM computes);
  /// wait() waits and counts only the exposed time in commSec.
  strata::Work allReduceAsync(float* x, size_t n);
  strata::Work reduceScatterAsync(const float* full, float* local, size_t nloc);
  void wait(strata::Work& w);
};

/// Y[N, Ml] = X W + b with W [K, Ml] this rank's column slice (f: identity forward, all-reduce backward;
/// sequence parallel: all-gather forward, reduce-scatter backward). X has N/size rows under sp.
struct ColumnParallel {
  ColumnParallel() = default;
  ColumnParallel(int k, int ml) : K(k), Ml(ml) {}
  int K = 0, Ml = 0;
  Vec xfull;  // the gathered input under sp
  const float* xin = nullptr;
  Vec dxfull;
  /// nIn: rows of x on this rank; y gets nIn * (sp ? size : 1) rows.
  void forward(TpCtx& tp, const float* x, int nIn, const float* W, const float* b, float* y);
  /// Sets dx (nIn rows); accumulates dW, db.
  void backward(TpCtx& tp, const float* dy, int nIn, const float* W, float* dW, float* db, float* dx);
};

/// Y = (X W summed over ranks) + b with X [N, Kl] and W [Kl, M] this rank's row slice (g: all-reduce
/// forward, identity backward; sequence parallel: reduce-scatter forward, all-gather backward).
struct RowParallel {
  RowParallel() = default;
  RowParallel(int kl, int m) : Kl(kl), M(m) {}
  int Kl = 0, M = 0;
  Vec ypart, dyfull;
  const float* xin = nullptr;
  /// n: rows of x; y gets n / (sp ? size : 1) rows.
  void forward(TpCtx& tp, const float* x, int n, const float* W, const float* b, float* y);
  /// Sets dx (n rows); accumulates dW, db (db is this rank's partial sum under sp).
  void backward(TpCtx& tp, const float* dy, int n, const float* W, float* dW, float* db, float* dx);
};

}  // namespace strain
