// The rank arithmetic of recursive halving and doubling over any number of ranks, shared by the plans
// (rhd.cc) and the cost model (cost_model.cc).
//
// With p the largest power of two <= n, ranks 0..2*pairs-1 (pairs = n - p) pair up: the even rank of a pair
// hands its data to the odd one and sits the exchanges out, so p "virtual ranks" run the power-of-two
// algorithm. Virtual rank v is rank 2v+1 for v < pairs, else v + pairs; in the exchange with mask m it
// trades with virtual rank v ^ m.
#pragma once

namespace strata {

struct RhdPattern {
  int p = 1;      // virtual ranks
  int pairs = 0;  // ranks that hand their data to a partner

  explicit RhdPattern(int nranks) {
    while (p * 2 <= nranks) p *= 2;
    pairs = nranks - p;
  }
  /// Exchanges each way: log2(p).
  int exchanges() const {
    int k = 0;
    for (int mask = p / 2; mask >= 1; mask /= 2) ++k;
    return k;
  }
  /// Virtual rank of rank r, or -1 for the even rank of a pair.
  int vrank(int r) const {
    if (r < 2 * pairs) return r % 2 ? r / 2 : -1;
    return r - pairs;
  }
  /// The rank behind virtual rank v.
  int real(int v) const { return v < pairs ? 2 * v + 1 : v + pairs; }
};

}  // namespace strata
