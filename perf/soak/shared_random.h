// The random sequence every rank of strata_soak draws its operations from.
#pragma once

#include <cstdint>

namespace soak {

// SplitMix64: every rank starts from the same seed and makes the same draws in the same order, so every rank
// chooses the same operations without talking. Draws never depend on the rank or on a communicator's size.
class SharedRandom {
 public:
  explicit SharedRandom(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t n) { return next() % n; }
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  bool chance(double p) { return unit() < p; }

 private:
  uint64_t state_;
};

}  // namespace soak
