// The registry of baselines: which were built (STRATA_PERF_WITH_MPI, STRATA_PERF_WITH_GLOO, defined by
// CMake when it finds the library) and how to start one by name.
#include "baseline.h"

namespace strata::perf {

std::vector<std::string> knownBaselines() { return {"mpi", "gloo", "nccl"}; }

std::vector<std::string> builtBaselines() {
  std::vector<std::string> names;
#ifdef STRATA_PERF_WITH_MPI
  names.push_back("mpi");
#endif
#ifdef STRATA_PERF_WITH_GLOO
  names.push_back("gloo");
#endif
#ifdef STRATA_PERF_WITH_NCCL
  names.push_back("nccl");
#endif
  return names;
}

std::unique_ptr<Baseline> makeBaseline(const std::string& name, const BaselineSettings& settings) {
#ifdef STRATA_PERF_WITH_MPI
  if (name == "mpi") return makeMpiBaseline(settings);
#endif
#ifdef STRATA_PERF_WITH_GLOO
  if (name == "gloo") return makeGlooBaseline(settings);
#endif
#ifdef STRATA_PERF_WITH_NCCL
  if (name == "nccl") return makeNcclBaseline(settings);
#endif
  (void)settings;
  throw BaselineError("baseline '" + name + "' is not built into this strata-perf");
}

}  // namespace strata::perf
