// strata-train: finite-difference checks of every layer's backward and of the whole model (fp32).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "layers.h"
#include "model.h"
#include "tp.h"

using namespace strain;

namespace {

Vec randn(size_t n, uint64_t seed, float s = 1.f) {
  Rng r(seed);
  Vec v(n);
  for (auto& x : v) x = s * r.normal();
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

/// Compares analytic gradient g of f with respect to x against central differences (up to `samples` entries).
void checkGrad(const char* what, const std::function<double()>& f, float* x, const float* g, size_t n,
               float eps = 1e-2f, size_t samples = 40) {
  size_t stride = std::max<size_t>(1, n / samples);
  double worst = 0;
  for (size_t i = 0; i < n; i += stride) {
    float old = x[i];
    x[i] = old + eps;
    double fp = f();
    x[i] = old - eps;
    double fm = f();
    x[i] = old;
    double num = (fp - fm) / (2.0 * eps);
    double err = std::fabs(num - g[i]) / (std::fabs(num) + std::fabs(g[i]) + 1e-2);
    worst = std::max(worst, err);
    EXPECT_LT(err, 2e-2) << what << "[" << i << "]: numeric " << num << " analytic " << g[i];
  }
  std::printf("  %-20s worst relative error %.2e\n", what, worst);
}

}  // namespace

TEST(TrainerLayers, LayerNorm) {
  const int N = 5, D = 12;
  Vec x = randn(N * D, 1), g = randn(D, 2, 0.5f), b = randn(D, 3), R = randn(N * D, 4);
  for (auto& v : g) v += 1.f;
  Vec y(N * D), mean(N), rstd(N), dx(N * D), dg(D, 0.f), db(D, 0.f);
  auto f = [&] {
    layerNormForward(x.data(), g.data(), b.data(), y.data(), mean.data(), rstd.data(), N, D);
    return dot(y, R);
  };
  f();
  layerNormBackward(R.data(), x.data(), g.data(), mean.data(), rstd.data(), dx.data(), dg.data(), db.data(), N, D);
  checkGrad("ln.x", f, x.data(), dx.data(), x.size());
  checkGrad("ln.g", f, g.data(), dg.data(), g.size());
  checkGrad("ln.b", f, b.data(), db.data(), b.size());
}

TEST(TrainerLayers, Gelu) {
  Vec x = randn(64, 5, 2.f), R = randn(64, 6), y(64), dx(64);
  auto f = [&] {
    geluForward(x.data(), y.data(), x.size());
    return dot(y, R);
  };
  geluBackward(R.data(), x.data(), dx.data(), x.size());
  checkGrad("gelu", f, x.data(), dx.data(), x.size(), 1e-2f, 64);
}

TEST(TrainerLayers, Attention) {
  const int B = 2, S = 6, H = 2, hd = 4, C = H * hd;
  Vec qkv = randn(B * S * 3 * C, 7), R = randn(B * S * C, 8), out(B * S * C), probs(B * H * S * S), dqkv(qkv.size());
  auto f = [&] {
    attentionForward(qkv.data(), out.data(), probs.data(), B, S, H, hd);
    return dot(out, R);
  };
  f();
  attentionBackward(R.data(), qkv.data(), probs.data(), dqkv.data(), B, S, H, hd);
  checkGrad("attn.qkv", f, qkv.data(), dqkv.data(), qkv.size(), 1e-2f, 200);
}

TEST(TrainerLayers, Embedding) {
  const int N = 6, D = 4, V = 5, S = 3;
  std::vector<uint8_t> tok = {1, 3, 3, 0, 4, 1};
  std::vector<int> pos = {0, 1, 2, 0, 1, 2};
  Vec wte = randn(V * D, 9), wpe = randn(S * D, 10), R = randn(N * D, 11), y(N * D), dte(V * D, 0.f), dpe(S * D, 0.f);
  auto f = [&] {
    embeddingForward(tok.data(), pos.data(), wte.data(), wpe.data(), y.data(), N, D);
    return dot(y, R);
  };
  embeddingBackward(R.data(), tok.data(), pos.data(), dte.data(), dpe.data(), N, D);
  checkGrad("emb.wte", f, wte.data(), dte.data(), wte.size(), 1e-2f, 100);
  checkGrad("emb.wpe", f, wpe.data(), dpe.data(), wpe.size(), 1e-2f, 100);
}

TEST(TrainerLayers, CrossEntropy) {
  const int N = 4, V = 7;
  Vec l = randn(N * V, 12), d(N * V), scratch(N * V);
  std::vector<uint8_t> t = {0, 6, 3, 3};
  crossEntropy(l.data(), t.data(), d.data(), N, V, 0.5f);
  auto f = [&] { return 0.5 * crossEntropy(l.data(), t.data(), scratch.data(), N, V, 0.5f); };
  checkGrad("ce.logits", f, l.data(), d.data(), l.size(), 1e-2f, 100);
}

TEST(TrainerLayers, LinearColumnAndRow) {
  const int N = 5, K = 6, M = 8;
  TpCtx tp;  // one rank: the unsplit layers
  Vec x = randn(N * K, 13), W = randn(K * M, 14, 0.5f), b = randn(M, 15), R = randn(N * M, 16), y(N * M);
  for (int row = 0; row < 2; ++row) {
    Vec dW(W.size(), 0.f), db(M, 0.f), dx(x.size());
    ColumnParallel c{K, M};
    RowParallel r{K, M};
    auto f = [&] {
      if (row) r.forward(tp, x.data(), N, W.data(), b.data(), y.data());
      else c.forward(tp, x.data(), N, W.data(), b.data(), y.data());
      return dot(y, R);
    };
    f();
    if (row) r.backward(tp, R.data(), N, W.data(), dW.data(), db.data(), dx.data());
    else c.backward(tp, R.data(), N, W.data(), dW.data(), db.data(), dx.data());
    checkGrad("linear.x", f, x.data(), dx.data(), x.size());
    checkGrad("linear.W", f, W.data(), dW.data(), W.size());
    checkGrad("linear.b", f, b.data(), db.data(), b.size());
  }
}

TEST(TrainerModel, FullModelGradient) {
  ModelConfig cfg;
  cfg.seq = 8;
  cfg.layers = 2;
  cfg.heads = 2;
  cfg.dim = 16;
  TpCtx tp;
  Gpt model(cfg, tp);
  auto& ps = model.params();
  std::vector<size_t> off;
  size_t total = 0;
  for (auto& p : ps) {
    off.push_back(total);
    total += p.numel;
  }
  Vec w(total), g(total, 0.f), scratch(total);
  model.bind(w.data(), g.data(), off);
  // Larger weights than the init so every path carries signal.
  Rng r(77);
  for (auto& v : w) v += 0.1f * r.normal();
  const int B = 2;
  std::vector<uint8_t> tokens(B * (cfg.seq + 1));
  for (auto& t : tokens) t = uint8_t(r.next() % 256);
  const float scale = 1.f / (B * cfg.seq);
  int readyCount = 0;
  model.step(tokens.data(), B, scale, [&](int) { ++readyCount; });
  EXPECT_EQ(readyCount, int(ps.size()));
  Vec analytic = g;
  // A second model bound to its own buffers (bind() initialises weights), given the same weights.
  Gpt probe(cfg, tp);
  Vec w2(total), g2(total);
  probe.bind(w2.data(), g2.data(), off);
  std::copy(w.begin(), w.end(), w2.begin());
  auto loss = [&] { return probe.step(tokens.data(), B, scale, [](int) {}) * double(scale); };
  for (size_t i = 0; i < ps.size(); ++i)
    checkGrad(ps[i].name.c_str(), loss, w2.data() + off[i], analytic.data() + off[i], ps[i].numel, 1e-2f, 12);
}
