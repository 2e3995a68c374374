#include "collectives/selector.h"

#include <algorithm>

#include "collectives/sim.h"
#include "util/error.h"
#include "util/log.h"

namespace strata {

Selector::Selector(std::map<std::string, std::string> forced, TuningInputs tuning, int rank)
    : forced_(std::move(forced)), tuning_(std::move(tuning)), rank_(rank) {
  checkForced(forced_);
}

void Selector::checkForced(const std::map<std::string, std::string>& forced, bool algorithmsToo,
                           const std::vector<LoadedProgram>& programs) {
  for (const auto& [coll, algo] : forced) {
    std::string known;
    int found = -1;
    for (int k = 0; k < kNumCollKinds; ++k) {
      const char* name = collName(static_cast<CollKind>(k));
      if (coll == name) found = k;
      known += std::string(known.empty() ? "" : ", ") + name;
    }
    if (found < 0) throw InvalidArgument("STRATA_ALGO names unknown collective '" + coll + "' (known: " + known + ")");
    const auto kind = static_cast<CollKind>(found);
    bool loaded = false;
    for (const LoadedProgram& p : programs) loaded |= p.program->kind == kind && p.program->name == algo;
    if (algorithmsToo && !loaded && !findAlgorithm(kind, algo)) {
      std::string list;
      for (const std::string& n : algorithmsFor(kind)) list += (list.empty() ? "" : ", ") + n;
      for (const LoadedProgram& p : programs)
        if (p.program->kind == kind) list += ", " + p.program->name + " (" + p.program->file + ")";
      throw InvalidArgument(
          strprintf("STRATA_ALGO: %s has no algorithm '%s' (available: %s)", coll.c_str(), algo.c_str(), list.c_str()));
    }
  }
}

void Selector::setPrograms(std::vector<LoadedProgram> programs) {
  std::lock_guard<std::mutex> lk(mutex_);
  programs_ = std::move(programs);
  decisions_.clear();
}

const LoadedProgram* Selector::findProgram(CollKind kind, std::string_view name) const {
  for (const LoadedProgram& p : programs_)
    if (p.program->kind == kind && p.program->name == name) return &p;
  return nullptr;
}

Plan Selector::makePlan(const CollArgs& args, const std::string& algorithm) const {
  if (const LoadedProgram* p = findProgram(args.kind, algorithm)) {
    // choose() knows no root: a broadcast or reduce file describes root 0 and leaves another root's call to the
    // default (every rank has the same root, so every rank decides alike).
    const bool rooted = args.kind == CollKind::kBroadcast || args.kind == CollKind::kReduce;
    if (!rooted || args.root == 0) return planOf(*p->program, args);
    STRATA_INFO(kLogTuning, "rank %d: %s with root %d: %s (%s) describes root 0; the default serves it", rank_,
                collName(args.kind), args.root, p->program->name.c_str(), p->program->file.c_str());
    return strata::makePlan(args, defaultAlgorithm(args.kind).name);
  }
  return strata::makePlan(args, algorithm);
}

Prediction Selector::choose(CollKind kind, size_t bytes, bool inPlace) const {
  bool builtInsOnly = false;  // a forced program that does not serve the call leaves it to the built-ins
  if (!forced_.empty()) {
    const std::string coll = collName(kind);
    auto forced = forced_.find(coll);
    if (forced != forced_.end() && !programs_.empty()) {
      if (const LoadedProgram* p = findProgram(kind, forced->second)) {
        std::string why;
        if (programServes(*p->program, tuning_.nranks, bytes, inPlace, &why)) {
          STRATA_INFO(kLogTuning, "rank %d: %s of %zu bytes%s: %s, forced (STRATA_ALGO), from %s", rank_, coll.c_str(),
                      bytes, inPlace ? " in place" : "", p->program->name.c_str(), p->program->file.c_str());
          return Prediction{p->program->name,
                            priceUs(programShape(*p->program, p->figures, static_cast<double>(bytes)), tuning_)};
        }
        STRATA_INFO(kLogTuning,
                    "rank %d: %s of %zu bytes%s: STRATA_ALGO's %s (%s) does not serve it: %s; a built-in "
                    "does",
                    rank_, coll.c_str(), bytes, inPlace ? " in place" : "", p->program->name.c_str(),
                    p->program->file.c_str(), why.c_str());
        forced = forced_.end();
        builtInsOnly = true;
      }
    }
    if (forced != forced_.end()) {
      if (!findAlgorithm(kind, forced->second)) {
        std::string list;
        for (const std::string& n : algorithmsFor(kind)) list += (list.empty() ? "" : ", ") + n;
        throw InvalidArgument(strprintf("STRATA_ALGO: %s has no algorithm '%s' (available: %s)", coll.c_str(),
                                        forced->second.c_str(), list.c_str()));
      }
      return Prediction{forced->second, predictedUs(kind, bytes, forced->second)};
    }
  }
  // One rank, and the collectives with a single algorithm and no loaded program: nothing to compare.
  bool programOfKind = false;
  for (const LoadedProgram& p : programs_) programOfKind |= p.program->kind == kind && !builtInsOnly;
  if (tuning_.nranks <= 1 || (!modelCompares(kind) && !programOfKind))
    return Prediction{defaultAlgorithm(kind).name, 0};
  std::lock_guard<std::mutex> lk(mutex_);
  const auto key = std::make_tuple(static_cast<int>(kind), bytes, inPlace && !programs_.empty());
  auto it = decisions_.find(key);
  if (it != decisions_.end()) return it->second;
  const std::vector<Prediction> all = predictions(kind, bytes, inPlace, !builtInsOnly);
  if (logEnabled(LogLevel::kInfo, kLogTuning)) {
    std::string alternatives;
    for (const Prediction& p : all) alternatives += strprintf(" %s=%.1fus", p.algorithm.c_str(), p.us);
    STRATA_INFO(kLogTuning, "rank %d: %s of %zu bytes on %d rank(s): %s, predicted %.1f us (%s:%s)", rank_,
                collName(kind), bytes, tuning_.nranks, all.front().algorithm.c_str(), all.front().us,
                simulating() ? "simulated" : "model", alternatives.c_str());
  }
  if (decisions_.size() > 4096) decisions_.clear();
  return decisions_.emplace(key, all.front()).first->second;
}

double Selector::predictedUs(CollKind kind, size_t bytes, const std::string& algorithm) const {
  if (tuning_.nranks <= 1 || !modelCompares(kind)) return 0;
  for (const Prediction& p : predictions(kind, bytes))
    if (p.algorithm == algorithm) return p.us;
  return 0;
}

std::vector<Prediction> Selector::predictions(CollKind kind, size_t bytes, bool inPlace, bool withPrograms) const {
  std::vector<Prediction> out = simulating() ? simulated(kind, bytes) : predictAll(kind, bytes, tuning_);
  bool added = false;
  for (const LoadedProgram& p : programs_) {
    if (!withPrograms) break;
    if (p.program->kind != kind || !programServes(*p.program, tuning_.nranks, bytes, inPlace, nullptr)) continue;
    // STRATA_TUNE=sim simulates the program's plans as it does the built-ins'; otherwise the model prices its shape.
    const double us = simulating() ? simulated(kind, bytes, p.program.get()).front().us
                                   : priceUs(programShape(*p.program, p.figures, static_cast<double>(bytes)), tuning_);
    out.push_back(Prediction{p.program->name, us});
    added = true;
  }
  if (added)
    std::stable_sort(out.begin(), out.end(), [](const Prediction& a, const Prediction& b) { return a.us < b.us; });
  return out;
}

std::vector<Prediction> Selector::simulated(CollKind kind, size_t bytes, const PlanProgram* program) const {
  const SimCluster cluster = clusterFromTuning(tuning_, simPieceBytes_, simSlots_);
  SimCall call;
  call.kind = kind;
  call.bytes = bytes;
  call.elemSize = bytes % 4 == 0 ? 4 : 1;
  // Hosts of equal size, ranks numbered host by host: the simulator may use their symmetry. Otherwise it takes
  // the layout as it is.
  bool blocks = true;
  for (size_t r = 0; r < tuning_.hostOf.size(); ++r)
    blocks &= tuning_.hostOf[r] == static_cast<int>(r) / cluster.ranksPerHost;
  blocks &= cluster.hosts * cluster.ranksPerHost == tuning_.nranks;
  if (blocks) {
    call.hosts = cluster.hosts;
    call.ranksPerHost = cluster.ranksPerHost;
  } else {
    call.hostOf = tuning_.hostOf;
  }
  std::vector<Prediction> out;
  if (program) {
    call.program = program;
    const SimResult r = simulate(cluster, call);
    return {Prediction{r.algorithm, r.us}};
  }
  for (const SimResult& r : simulateAll(cluster, call)) out.push_back(Prediction{r.algorithm, r.us});
  return out;
}

void Selector::useSimulator(size_t pieceBytes, int nslots) {
  std::lock_guard<std::mutex> lk(mutex_);
  simPieceBytes_ = pieceBytes;
  simSlots_ = nslots;
  decisions_.clear();
}

void Selector::setLinks(const LinkFigures& intra, const LinkFigures& inter) {
  std::lock_guard<std::mutex> lk(mutex_);
  tuning_.intra = intra;
  tuning_.inter = inter;
  decisions_.clear();
}

}  // namespace strata
