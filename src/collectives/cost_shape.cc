// The phase constructors the algorithms' cost shapes are written with.
#include "collectives/cost_shape.h"

#include <utility>

namespace strata {

using Pattern = Phase::Pattern;

std::vector<int> ShapeBuilder::allRanks() const {
  std::vector<int> v(static_cast<size_t>(layout_.nranks()));
  for (int i = 0; i < layout_.nranks(); ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

std::vector<int> ShapeBuilder::largestHost() const {
  std::vector<int> host;
  for (const std::vector<int>& ranks : layout_.hosts())
    if (static_cast<int>(ranks.size()) == layout_.maxPerHost()) host = ranks;
  return host;
}

Phase ShapeBuilder::ring(std::vector<int> members, int steps, double stepBytes, double reduceBytes) const {
  Phase ph;
  ph.pattern = Pattern::kRing;
  ph.members = std::move(members);
  ph.steps = static_cast<int>(ph.members.size()) > 1 ? steps : 0;
  ph.stepBytes = stepBytes;
  ph.reduceBytes = reduceBytes;
  return ph;
}

Phase ShapeBuilder::direct(int rounds, double stepBytes, double reduceBytes) const {
  Phase ph;
  ph.pattern = Pattern::kDirect;
  ph.steps = rounds;
  ph.stepBytes = stepBytes;
  ph.fanout = layout_.nranks() - 1;
  ph.reduceBytes = reduceBytes;
  return ph;
}

Phase ShapeBuilder::rhd(Pattern pattern, double bytes, bool reduce) const {
  Phase ph;
  ph.pattern = pattern;
  ph.rhd = RhdPattern(layout_.nranks());
  ph.steps = ph.rhd.exchanges() + (ph.rhd.pairs > 0 ? 1 : 0);
  ph.stepBytes = bytes;
  ph.reduceBytes = reduce ? bytes - bytes / ph.rhd.p : 0;  // the halving steps' sizes
  return ph;
}

Phase ShapeBuilder::simple(Pattern pattern, int steps, double stepBytes) const {
  Phase ph;
  ph.pattern = pattern;
  ph.steps = steps;
  ph.stepBytes = stepBytes;
  return ph;
}

Phase ShapeBuilder::rail(int steps, double bytes, bool reduce) const {
  const int H = layout_.nhosts(), R = layout_.rails();
  const double interStep = bytes / R / H;
  Phase ph = simple(Pattern::kRail, steps, interStep);
  ph.flows = R;
  ph.reduceBytes = reduce ? (H - 1) * interStep : 0;
  return ph;
}

Phase ShapeBuilder::chain(std::vector<int> members, double bytes, bool reduce) const {
  Phase ph;
  ph.pattern = Pattern::kChain;
  ph.members = std::move(members);
  ph.steps = std::max(0, static_cast<int>(ph.members.size()) - 1);
  ph.stepBytes = bytes;
  ph.reduceBytes = reduce ? bytes : 0;
  return ph;
}

Phase ShapeBuilder::rounds(int rounds, double bytes) const { return simple(Pattern::kRounds, rounds, bytes); }

}  // namespace strata
