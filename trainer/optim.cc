#include "optim.h"

#include <algorithm>
#include <cmath>

namespace strain {

void AdamW::init(std::vector<std::pair<size_t, size_t>> owned) {
  ranges = std::move(owned);
  size_t n = 0;
  for (auto& r : ranges) n += r.second;
  m.assign(n, 0.f);
  v.assign(n, 0.f);
}

namespace {
/// Calls f(param, lo, hi) for each parameter's part inside [a, b) of the flat buffer.
template <typename F>
void forEachOverlap(const std::vector<Param>& params, const std::vector<size_t>& off, size_t a, size_t b, F&& f) {
  for (size_t i = 0; i < params.size(); ++i) {
    size_t lo = std::max(a, off[i]), hi = std::min(b, off[i] + params[i].numel);
    if (lo < hi) f(params[i], lo, hi);
  }
}
}  // namespace

double AdamW::step(const std::vector<Param>& params, const std::vector<size_t>& off, float* w, const float* g,
                   TpCtx& tp, strata::Communicator* dp) {
  double ss[2] = {0, 0};  // [0]: TP-sharded parameters, [1]: replicated ones (counted once)
  for (auto& r : ranges)
    forEachOverlap(params, off, r.first, r.first + r.second, [&](const Param& p, size_t lo, size_t hi) {
      double s = 0;
      for (size_t k = lo; k < hi; ++k) s += double(g[k]) * g[k];
      ss[p.shard ? 0 : 1] += s;
    });
  if (dp && dp->size() > 1) dp->allReduce(ss, ss, 2, strataFloat64, strataSum);
  if (tp.size > 1 && tp.comm) tp.comm->allReduce(ss, ss, 1, strataFloat64, strataSum);
  double norm = std::sqrt(ss[0] + ss[1]);
  float scale = (clip > 0 && norm > clip) ? float(clip / (norm + 1e-6)) : 1.f;

  ++t;
  const float bc1 = 1.f - std::pow(beta1, float(t)), bc2 = 1.f - std::pow(beta2, float(t));
  size_t base = 0;
  for (auto& r : ranges) {
    forEachOverlap(params, off, r.first, r.first + r.second, [&](const Param& p, size_t lo, size_t hi) {
      float wd = p.decay ? weightDecay : 0.f;
      for (size_t k = lo; k < hi; ++k) {
        size_t j = base + (k - r.first);
        float gk = g[k] * scale;
        m[j] = beta1 * m[j] + (1.f - beta1) * gk;
        v[j] = beta2 * v[j] + (1.f - beta2) * gk * gk;
        float mh = m[j] / bc1, vh = v[j] / bc2;
        w[k] -= lr * (mh / (std::sqrt(vh) + eps) + wd * w[k]);
      }
    });
    base += r.second;
  }
  return norm;
}

}  // namespace strain
