// strata-train: a GPT-style decoder (token + position embeddings, pre-LayerNorm blocks with causal multi-head
// self-attention and a GELU MLP, final LayerNorm, LM head tied to the token embedding), tensor parallel as
// Megatron-LM over a TpCtx.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tp.h"

namespace strain {

struct ModelConfig {
  int vocab = 256;
  int seq = 64;
  int layers = 2;
  int heads = 4;
  int dim = 64;
  uint64_t seed = 1234;
};

/// One parameter tensor. Its full (unsplit) shape is rows x cols; this rank holds a slice of it when shard != 0.
struct Param {
  std::string name;
  int rows = 1, cols = 1;
  int shard = 0;  // 0: replicated over TP; 1: columns split (in `groups` column groups); 2: rows split
  int groups = 1;
  bool decay = false;  // weight decay applies (matrices)
  float initStd = 0;   // 0: constant initValue
  float initValue = 0;
  size_t numel = 0;  // local elements
  float* w = nullptr;
  float* g = nullptr;
};

/// Copies this rank's slice of a full tensor out of `full` (or back into it with insert = true).
void shardCopy(const Param& p, int tpRank, int tpSize, float* full, float* local, bool insert);

class Gpt {
 public:
  Gpt(const ModelConfig& cfg, TpCtx& tp);
  std::vector<Param>& params() { return params_; }
  /// Points every parameter into `wbase` / `gbase` at `offsets[p]` and initialises the weights from the seed
  /// (the full tensor is generated from the seed, then sliced, so every tp gives the same model).
  void bind(float* wbase, float* gbase, const std::vector<size_t>& offsets);

  /// Forward and backward over B sequences (tokens[B*(S+1)]: inputs then the next-byte targets). Gradients are
  /// accumulated into the bound gradient buffer, scaled by `lossScale` per token. `onGradReady(p)` is called
  /// once per parameter as soon as its gradient is final. Returns this rank's sum of token losses (its rows).
  template <typename F>
  double step(const uint8_t* tokens, int B, float lossScale, F&& onGradReady);
  double forwardBackward(const uint8_t* tokens, int B, float lossScale, void (*ready)(void*, int), void* ctx);

 private:
  struct Block {
    int ln1g, ln1b, wqkv, bqkv, wo, bo, ln2g, ln2b, w1, b1, w2, b2;
    Vec x, ln1, mean1, rstd1, qkv, att, probs, x1, ln2, mean2, rstd2, h, a;
    ColumnParallel cqkv, cfc;
    RowParallel rproj, rfc;
  };
  ModelConfig c_;
  TpCtx& tp_;
  std::vector<Param> params_;
  std::vector<Block> blocks_;
  int wte_, wpe_, lnfg_, lnfb_;
  Vec xf_, lnf_, meanf_, rstdf_, logits_, dlogits_;
  int add(Param p);
};

template <typename F>
double Gpt::step(const uint8_t* tokens, int B, float lossScale, F&& onGradReady) {
  return forwardBackward(
      tokens, B, lossScale, [](void* ctx, int p) { (*static_cast<F*>(ctx))(p); }, &onGradReady);
}

}  // namespace strain
