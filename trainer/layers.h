// strata-train: the model's layers, each a forward and a hand-written backward over row-major fp32 arrays.
// Backward functions *set* input gradients and *accumulate* parameter gradients.
#pragma once

#include <cstdint>

#include "tensor.h"

namespace strain {

/// y = (x - mean) * rstd * g + b over rows of width D; caches mean and rstd (N each).
void layerNormForward(const float* x, const float* g, const float* b, float* y, float* mean, float* rstd, int N, int D);
void layerNormBackward(const float* dy, const float* x, const float* g, const float* mean, const float* rstd, float* dx,
                       float* dg, float* db, int N, int D);

/// GELU (tanh approximation), elementwise.
void geluForward(const float* x, float* y, size_t n);
void geluBackward(const float* dy, const float* x, float* dx, size_t n);

/// Causal multi-head self-attention core. qkv: [B*S, 3*H*hd] (all q heads, then k, then v); out: [B*S, H*hd];
/// probs: cache [B, H, S, S].
void attentionForward(const float* qkv, float* out, float* probs, int B, int S, int H, int hd);
void attentionBackward(const float* dout, const float* qkv, const float* probs, float* dqkv, int B, int S, int H,
                       int hd);

/// y[i] = wte[tok[i]] + wpe[pos[i]].
void embeddingForward(const uint8_t* tok, const int* pos, const float* wte, const float* wpe, float* y, int N, int D);
void embeddingBackward(const float* dy, const uint8_t* tok, const int* pos, float* dwte, float* dwpe, int N, int D);

/// Softmax cross-entropy over V classes: returns the sum of the N losses; dlogits = scale * (p - onehot).
double crossEntropy(const float* logits, const uint8_t* target, float* dlogits, int N, int V, float scale);

}  // namespace strain
