#include "layers.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace strain {

void layerNormForward(const float* x, const float* g, const float* b, float* y, float* mean, float* rstd, int N,
                      int D) {
  for (int i = 0; i < N; ++i) {
    const float* xi = x + size_t(i) * D;
    double m = 0;
    for (int j = 0; j < D; ++j) m += xi[j];
    m /= D;
    double v = 0;
    for (int j = 0; j < D; ++j) v += (xi[j] - m) * (xi[j] - m);
    v /= D;
    float r = float(1.0 / std::sqrt(v + 1e-5));
    mean[i] = float(m);
    rstd[i] = r;
    float* yi = y + size_t(i) * D;
    for (int j = 0; j < D; ++j) yi[j] = (xi[j] - float(m)) * r * g[j] + b[j];
  }
}

void layerNormBackward(const float* dy, const float* x, const float* g, const float* mean, const float* rstd, float* dx,
                       float* dg, float* db, int N, int D) {
  for (int i = 0; i < N; ++i) {
    const float* xi = x + size_t(i) * D;
    const float* dyi = dy + size_t(i) * D;
    float* dxi = dx + size_t(i) * D;
    double s1 = 0, s2 = 0;  // mean(dxhat), mean(dxhat * xhat)
    for (int j = 0; j < D; ++j) {
      float xh = (xi[j] - mean[i]) * rstd[i];
      float dxh = dyi[j] * g[j];
      s1 += dxh;
      s2 += dxh * xh;
      dg[j] += dyi[j] * xh;
      db[j] += dyi[j];
    }
    s1 /= D;
    s2 /= D;
    for (int j = 0; j < D; ++j) {
      float xh = (xi[j] - mean[i]) * rstd[i];
      dxi[j] = rstd[i] * (dyi[j] * g[j] - float(s1) - xh * float(s2));
    }
  }
}

namespace {
constexpr float kC = 0.7978845608028654f;  // sqrt(2/pi)
}

void geluForward(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    float v = x[i];
    y[i] = 0.5f * v * (1.f + std::tanh(kC * (v + 0.044715f * v * v * v)));
  }
}

void geluBackward(const float* dy, const float* x, float* dx, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    float v = x[i];
    float u = kC * (v + 0.044715f * v * v * v);
    float t = std::tanh(u);
    float du = kC * (1.f + 3.f * 0.044715f * v * v);
    dx[i] = dy[i] * (0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * du);
  }
}

void attentionForward(const float* qkv, float* out, float* probs, int B, int S, int H, int hd) {
  const int C = H * hd, ld = 3 * C;
  const float scale = 1.f / std::sqrt(float(hd));
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const float* q = qkv + size_t(b) * S * ld + h * hd;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* P = probs + (size_t(b) * H + h) * S * S;
      gemm(false, true, S, S, hd, scale, q, ld, k, ld, 0.f, P, S);
      for (int i = 0; i < S; ++i) {
        float* row = P + size_t(i) * S;
        float mx = row[0];
        for (int j = 1; j <= i; ++j) mx = std::max(mx, row[j]);
        float sum = 0;
        for (int j = 0; j <= i; ++j) {
          row[j] = std::exp(row[j] - mx);
          sum += row[j];
        }
        for (int j = 0; j <= i; ++j) row[j] /= sum;
        for (int j = i + 1; j < S; ++j) row[j] = 0.f;
      }
      gemm(false, false, S, hd, S, 1.f, P, S, v, ld, 0.f, out + size_t(b) * S * C + h * hd, C);
    }
}

void attentionBackward(const float* dout, const float* qkv, const float* probs, float* dqkv, int B, int S, int H,
                       int hd) {
  const int C = H * hd, ld = 3 * C;
  const float scale = 1.f / std::sqrt(float(hd));
  std::vector<float> dP(size_t(S) * S);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const float* q = qkv + size_t(b) * S * ld + h * hd;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* dq = dqkv + size_t(b) * S * ld + h * hd;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const float* P = probs + (size_t(b) * H + h) * S * S;
      const float* dO = dout + size_t(b) * S * C + h * hd;
      gemm(true, false, S, hd, S, 1.f, P, S, dO, C, 0.f, dv, ld);         // dV = P^T dO
      gemm(false, true, S, S, hd, 1.f, dO, C, v, ld, 0.f, dP.data(), S);  // dP = dO V^T
      for (int i = 0; i < S; ++i) {                                       // dS = P * (dP - rowsum(P*dP))
        float* r = dP.data() + size_t(i) * S;
        const float* p = P + size_t(i) * S;
        float dot = 0;
        for (int j = 0; j <= i; ++j) dot += p[j] * r[j];
        for (int j = 0; j <= i; ++j) r[j] = p[j] * (r[j] - dot) * scale;
        for (int j = i + 1; j < S; ++j) r[j] = 0.f;
      }
      gemm(false, false, S, hd, S, 1.f, dP.data(), S, k, ld, 0.f, dq, ld);  // dQ = dS K
      gemm(true, false, S, hd, S, 1.f, dP.data(), S, q, ld, 0.f, dk, ld);   // dK = dS^T Q
    }
}

void embeddingForward(const uint8_t* tok, const int* pos, const float* wte, const float* wpe, float* y, int N, int D) {
  for (int i = 0; i < N; ++i) {
    const float* a = wte + size_t(tok[i]) * D;
    const float* p = wpe + size_t(pos[i]) * D;
    float* yi = y + size_t(i) * D;
    for (int j = 0; j < D; ++j) yi[j] = a[j] + p[j];
  }
}

void embeddingBackward(const float* dy, const uint8_t* tok, const int* pos, float* dwte, float* dwpe, int N, int D) {
  for (int i = 0; i < N; ++i) {
    const float* d = dy + size_t(i) * D;
    float* a = dwte + size_t(tok[i]) * D;
    float* p = dwpe + size_t(pos[i]) * D;
    for (int j = 0; j < D; ++j) {
      a[j] += d[j];
      p[j] += d[j];
    }
  }
}

double crossEntropy(const float* logits, const uint8_t* target, float* dlogits, int N, int V, float scale) {
  double total = 0;
  for (int i = 0; i < N; ++i) {
    const float* l = logits + size_t(i) * V;
    float* d = dlogits + size_t(i) * V;
    float mx = l[0];
    for (int j = 1; j < V; ++j) mx = std::max(mx, l[j]);
    double sum = 0;
    for (int j = 0; j < V; ++j) sum += std::exp(double(l[j] - mx));
    total += std::log(sum) - double(l[target[i]] - mx);
    for (int j = 0; j < V; ++j) d[j] = scale * float(std::exp(double(l[j] - mx)) / sum);
    d[target[i]] -= scale;
  }
  return total;
}

}  // namespace strain
