#include "model.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "layers.h"

namespace strain {

void shardCopy(const Param& p, int r, int T, float* full, float* local, bool insert) {
  if (p.shard == 0 || T == 1) {
    if (insert) std::memcpy(full, local, p.numel * sizeof(float));
    else std::memcpy(local, full, p.numel * sizeof(float));
    return;
  }
  if (p.shard == 2) {
    size_t n = size_t(p.rows / T) * p.cols;
    float* f = full + size_t(r) * n;
    if (insert) std::memcpy(f, local, n * sizeof(float));
    else std::memcpy(local, f, n * sizeof(float));
    return;
  }
  int gcols = p.cols / p.groups, lg = gcols / T, lcols = lg * p.groups;
  for (int i = 0; i < p.rows; ++i)
    for (int g = 0; g < p.groups; ++g) {
      float* f = full + size_t(i) * p.cols + g * gcols + r * lg;
      float* l = local + size_t(i) * lcols + g * lg;
      if (insert) std::memcpy(f, l, lg * sizeof(float));
      else std::memcpy(l, f, lg * sizeof(float));
    }
}

int Gpt::add(Param p) {
  int T = tp_.size;
  size_t full = size_t(p.rows) * p.cols;
  p.numel = p.shard ? full / T : full;
  params_.push_back(p);
  return int(params_.size()) - 1;
}

Gpt::Gpt(const ModelConfig& c, TpCtx& tp) : c_(c), tp_(tp) {
  const int D = c.dim, T = tp.size;
  if (c.dim % c.heads || c.heads % T) throw std::runtime_error("dim must divide by heads and heads by tp");
  const float s = 0.02f, so = 0.02f / std::sqrt(2.f * c.layers);
  wte_ = add({"wte", c.vocab, D, 0, 1, true, s});
  wpe_ = add({"wpe", c.seq, D, 0, 1, true, s});
  for (int l = 0; l < c.layers; ++l) {
    std::string pre = "h" + std::to_string(l) + ".";
    Block b{};
    b.ln1g = add({pre + "ln1.g", 1, D, 0, 1, false, 0, 1});
    b.ln1b = add({pre + "ln1.b", 1, D, 0, 1, false, 0, 0});
    b.wqkv = add({pre + "attn.wqkv", D, 3 * D, 1, 3, true, s});
    b.bqkv = add({pre + "attn.bqkv", 1, 3 * D, 1, 3, false, 0, 0});
    b.wo = add({pre + "attn.wo", D, D, 2, 1, true, so});
    b.bo = add({pre + "attn.bo", 1, D, 0, 1, false, 0, 0});
    b.ln2g = add({pre + "ln2.g", 1, D, 0, 1, false, 0, 1});
    b.ln2b = add({pre + "ln2.b", 1, D, 0, 1, false, 0, 0});
    b.w1 = add({pre + "mlp.w1", D, 4 * D, 1, 1, true, s});
    b.b1 = add({pre + "mlp.b1", 1, 4 * D, 1, 1, false, 0, 0});
    b.w2 = add({pre + "mlp.w2", 4 * D, D, 2, 1, true, so});
    b.b2 = add({pre + "mlp.b2", 1, D, 0, 1, false, 0, 0});
    b.cqkv.K = D;
    b.cqkv.Ml = 3 * D / T;
    b.cfc.K = D;
    b.cfc.Ml = 4 * D / T;
    b.rproj.Kl = D / T;
    b.rproj.M = D;
    b.rfc.Kl = 4 * D / T;
    b.rfc.M = D;
    blocks_.push_back(std::move(b));
  }
  lnfg_ = add({"lnf.g", 1, D, 0, 1, false, 0, 1});
  lnfb_ = add({"lnf.b", 1, D, 0, 1, false, 0, 0});
}

void Gpt::bind(float* wbase, float* gbase, const std::vector<size_t>& offsets) {
  for (size_t i = 0; i < params_.size(); ++i) {
    Param& p = params_[i];
    p.w = wbase + offsets[i];
    p.g = gbase + offsets[i];
    size_t full = size_t(p.rows) * p.cols;
    Vec f(full);
    Rng rng(c_.seed * 1000003ull + i);
    for (auto& v : f) v = p.initStd > 0 ? p.initStd * rng.normal() : p.initValue;
    shardCopy(p, tp_.rank, tp_.size, f.data(), p.w, false);
  }
}

double Gpt::forwardBackward(const uint8_t* tokens, int B, float lossScale, void (*ready)(void*, int), void* ctx) {
  const int S = c_.seq, D = c_.dim, V = c_.vocab, T = tp_.size;
  const bool sp = tp_.sp && T > 1;
  const int N = B * S;            // rows inside the parallel regions
  const int Nl = sp ? N / T : N;  // rows of the residual stream on this rank
  const int row0 = sp ? tp_.rank * Nl : 0;
  if (sp && N % T) throw std::runtime_error("sequence parallel needs batch*seq divisible by tp");
  const int Hl = c_.heads / T, hd = D / c_.heads, Cl = Hl * hd;
  auto P = [&](int i) -> Param& { return params_[i]; };

  std::vector<uint8_t> tok(Nl), tgt(Nl);
  std::vector<int> pos(Nl);
  for (int i = 0; i < Nl; ++i) {
    int r = row0 + i, b = r / S, t = r % S;
    tok[i] = tokens[size_t(b) * (S + 1) + t];
    tgt[i] = tokens[size_t(b) * (S + 1) + t + 1];
    pos[i] = t;
  }

  // ---- forward
  Vec x(size_t(Nl) * D);
  embeddingForward(tok.data(), pos.data(), P(wte_).w, P(wpe_).w, x.data(), Nl, D);
  for (auto& bl : blocks_) {
    bl.x = x;
    bl.ln1.resize(x.size());
    bl.mean1.resize(Nl);
    bl.rstd1.resize(Nl);
    layerNormForward(x.data(), P(bl.ln1g).w, P(bl.ln1b).w, bl.ln1.data(), bl.mean1.data(), bl.rstd1.data(), Nl, D);
    bl.qkv.resize(size_t(N) * 3 * Cl);
    bl.cqkv.forward(tp_, bl.ln1.data(), Nl, P(bl.wqkv).w, P(bl.bqkv).w, bl.qkv.data());
    bl.att.resize(size_t(N) * Cl);
    bl.probs.resize(size_t(B) * Hl * S * S);
    attentionForward(bl.qkv.data(), bl.att.data(), bl.probs.data(), B, S, Hl, hd);
    Vec o(size_t(Nl) * D);
    bl.rproj.forward(tp_, bl.att.data(), N, P(bl.wo).w, P(bl.bo).w, o.data());
    bl.x1.resize(x.size());
    for (size_t i = 0; i < x.size(); ++i) bl.x1[i] = x[i] + o[i];
    bl.ln2.resize(x.size());
    bl.mean2.resize(Nl);
    bl.rstd2.resize(Nl);
    layerNormForward(bl.x1.data(), P(bl.ln2g).w, P(bl.ln2b).w, bl.ln2.data(), bl.mean2.data(), bl.rstd2.data(), Nl, D);
    bl.h.resize(size_t(N) * 4 * Cl);
    bl.cfc.forward(tp_, bl.ln2.data(), Nl, P(bl.w1).w, P(bl.b1).w, bl.h.data());
    bl.a.resize(bl.h.size());
    geluForward(bl.h.data(), bl.a.data(), bl.h.size());
    Vec m(size_t(Nl) * D);
    bl.rfc.forward(tp_, bl.a.data(), N, P(bl.w2).w, P(bl.b2).w, m.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] = bl.x1[i] + m[i];
  }
  xf_ = x;
  lnf_.resize(x.size());
  meanf_.resize(Nl);
  rstdf_.resize(Nl);
  layerNormForward(x.data(), P(lnfg_).w, P(lnfb_).w, lnf_.data(), meanf_.data(), rstdf_.data(), Nl, D);
  logits_.resize(size_t(Nl) * V);
  dlogits_.resize(logits_.size());
  gemm(false, true, Nl, V, D, 1.f, lnf_.data(), D, P(wte_).w, D, 0.f, logits_.data(), V);
  double loss = crossEntropy(logits_.data(), tgt.data(), dlogits_.data(), Nl, V, lossScale);

  // ---- backward. Under sequence parallelism the replicated parameters see only this rank's rows, so their
  // gradients are summed over the TP group before they are reported ready.
  auto done = [&](int p) {
    if (sp && P(p).shard == 0) tp_.allReduce(P(p).g, P(p).numel);
    ready(ctx, p);
  };
  Vec dx(x.size()), dtmp(x.size());
  gemm(true, false, V, D, Nl, 1.f, dlogits_.data(), V, lnf_.data(), D, 1.f, P(wte_).g, D);  // head (tied)
  Vec dlnf(x.size());
  gemm(false, false, Nl, D, V, 1.f, dlogits_.data(), V, P(wte_).w, D, 0.f, dlnf.data(), D);
  layerNormBackward(dlnf.data(), xf_.data(), P(lnfg_).w, meanf_.data(), rstdf_.data(), dx.data(), P(lnfg_).g,
                    P(lnfb_).g, Nl, D);
  done(lnfb_);
  done(lnfg_);
  for (int l = int(blocks_.size()) - 1; l >= 0; --l) {
    auto& bl = blocks_[l];
    // x2 = x1 + mlp(ln2(x1)); dx holds dL/dx2
    Vec da(bl.a.size()), dh(bl.h.size()), dln(x.size());
    bl.rfc.backward(tp_, dx.data(), N, P(bl.w2).w, P(bl.w2).g, P(bl.b2).g, da.data());
    done(bl.b2);
    done(bl.w2);
    geluBackward(da.data(), bl.h.data(), dh.data(), dh.size());
    bl.cfc.backward(tp_, dh.data(), Nl, P(bl.w1).w, P(bl.w1).g, P(bl.b1).g, dln.data());
    done(bl.b1);
    done(bl.w1);
    layerNormBackward(dln.data(), bl.x1.data(), P(bl.ln2g).w, bl.mean2.data(), bl.rstd2.data(), dtmp.data(),
                      P(bl.ln2g).g, P(bl.ln2b).g, Nl, D);
    done(bl.ln2b);
    done(bl.ln2g);
    for (size_t i = 0; i < dx.size(); ++i) dx[i] += dtmp[i];  // dL/dx1
    Vec datt(bl.att.size()), dqkv(bl.qkv.size());
    bl.rproj.backward(tp_, dx.data(), N, P(bl.wo).w, P(bl.wo).g, P(bl.bo).g, datt.data());
    done(bl.bo);
    done(bl.wo);
    attentionBackward(datt.data(), bl.qkv.data(), bl.probs.data(), dqkv.data(), B, S, Hl, hd);
    bl.cqkv.backward(tp_, dqkv.data(), Nl, P(bl.wqkv).w, P(bl.wqkv).g, P(bl.bqkv).g, dln.data());
    done(bl.bqkv);
    done(bl.wqkv);
    layerNormBackward(dln.data(), bl.x.data(), P(bl.ln1g).w, bl.mean1.data(), bl.rstd1.data(), dtmp.data(),
                      P(bl.ln1g).g, P(bl.ln1b).g, Nl, D);
    done(bl.ln1b);
    done(bl.ln1g);
    for (size_t i = 0; i < dx.size(); ++i) dx[i] += dtmp[i];  // dL/dx
  }
  embeddingBackward(dx.data(), tok.data(), pos.data(), P(wte_).g, P(wpe_).g, Nl, D);
  done(wpe_);
  done(wte_);
  return loss;
}

}  // namespace strain
