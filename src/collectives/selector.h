// The Selector: which algorithm a collective runs. STRATA_ALGO forces one per collective; otherwise the cost
// model (cost_model.h), or with STRATA_TUNE=sim the simulator (sim.h), picks the fastest for the call's size, and the
// decision is cached per (collective, bytes). Every rank of a communicator holds one built from the same inputs, so all
// choose alike.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "collectives/algorithms.h"
#include "collectives/cost_model.h"
#include "collectives/plan_program.h"

namespace strata {

/// A proven plan program (STRATA_PLANS, core/plan_registry.h) with what the cost model prices of it.
struct LoadedProgram {
  std::shared_ptr<const PlanProgram> program;
  ProgramFigures figures;
  std::string digest;  // "name@hash of its plan file", the same on every rank that loaded the same file
};

class Selector {
 public:
  /// `forced`: STRATA_ALGO's collective -> algorithm map. Throws InvalidArgument naming a collective that
  /// does not exist (a misspelt one would otherwise be ignored silently); algorithm names are checked when
  /// that collective is first chosen for.
  Selector(std::map<std::string, std::string> forced, TuningInputs tuning, int rank);
  /// The constructor's check of `forced`, for callers that want it before any communication; `algorithmsToo` also
  /// refuses an algorithm name the collective does not have (communicator creation: a misspelt name fails at once).
  /// `programs`: the loaded programs, whose names count as algorithms of their collective.
  static void checkForced(const std::map<std::string, std::string>& forced, bool algorithmsToo = false,
                          const std::vector<LoadedProgram>& programs = {});

  /// Offers loaded programs (STRATA_PLANS) beside the built-ins: one that serves a call (its collective, rank
  /// count, minBytes..maxBytes and placement) is priced by its shape and chosen where cheaper, or where STRATA_ALGO
  /// names it; a forced program that does not serve a call leaves it to the built-ins, with an INFO line saying why.
  void setPrograms(std::vector<LoadedProgram> programs);
  const std::vector<LoadedProgram>& programs() const { return programs_; }
  /// The loaded program of `kind` named `name`, or nullptr.
  const LoadedProgram* findProgram(CollKind kind, std::string_view name) const;

  /// The algorithm for a call of `kind` whose full buffer (nccl-tests' "size") is `bytes`, in place or not, with
  /// the model's predicted time (0 where it has none). Throws InvalidArgument for a forced algorithm `kind` lacks.
  Prediction choose(CollKind kind, size_t bytes, bool inPlace = false) const;
  /// The plan of `algorithm` (a loaded program's name, else a built-in's) for `args`.
  Plan makePlan(const CollArgs& args, const std::string& algorithm) const;
  /// The model's predicted time of `algorithm` for that call (0 if it has none).
  double predictedUs(CollKind kind, size_t bytes, const std::string& algorithm) const;

  const TuningInputs& tuning() const { return tuning_; }
  /// Replaces the link figures (STRATA_TUNE=probe measures them after construction); drops cached decisions.
  void setLinks(const LinkFigures& intra, const LinkFigures& inter);
  /// STRATA_TUNE=sim: predictions come from simulating every algorithm's plans (sim.h) on the cluster the tuning
  /// inputs describe, cut in pieces of `pieceBytes` with `nslots` slots, instead of the cost model's formulas.
  /// Costs a simulation per new (collective, size); decisions stay cached.
  void useSimulator(size_t pieceBytes, int nslots);
  bool simulating() const { return simPieceBytes_ > 0; }

 private:
  std::map<std::string, std::string> forced_;
  TuningInputs tuning_;
  int rank_ = 0;
  mutable std::mutex mutex_;
  mutable std::map<std::tuple<int, size_t, bool>, Prediction> decisions_;  // (collective, bytes, in place) -> choice
  std::vector<LoadedProgram> programs_;
  size_t simPieceBytes_ = 0;  // > 0: STRATA_TUNE=sim
  int simSlots_ = 0;

  /// Every algorithm's predicted time, fastest first: the cost model's, or the simulator's; and the loaded programs
  /// that serve the call (in place or not), priced by the model.
  std::vector<Prediction> predictions(CollKind kind, size_t bytes, bool inPlace = false,
                                      bool withPrograms = true) const;
  /// The built-ins' times simulated (STRATA_TUNE=sim), or with `program` that program's alone.
  std::vector<Prediction> simulated(CollKind kind, size_t bytes, const PlanProgram* program = nullptr) const;
};

}  // namespace strata
