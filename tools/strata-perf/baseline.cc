// The registry of baselines: which were built (STRATA_PERF_WITH_MPI, _GLOO, _NCCL, _ONECCL, defined by CMake when
// it finds the library) and how to start one by name; and what the baselines share.
#include "baseline.h"

#include <unistd.h>

#include <cstring>

namespace strata::perf {

void checkStrata(const BaselineSettings& settings, strataResult_t rc, const char* what) {
  if (rc == strataSuccess) return;
  throw BaselineError("rank " + std::to_string(settings.rank) + ": " + what + " failed: " + strataGetErrorString(rc) +
                      ": " + strataGetLastError(settings.comm));
}

std::vector<std::string> rankHostNames(const BaselineSettings& settings) {
  constexpr size_t kName = 256;
  char name[kName] = {0};
  gethostname(name, kName - 1);
  std::vector<char> all(kName * static_cast<size_t>(settings.nranks));
  checkStrata(settings, strataAllGather(name, all.data(), kName, strataUint8, settings.comm, nullptr),
              "strataAllGather of host names");
  std::vector<std::string> names;
  for (int r = 0; r < settings.nranks; ++r) names.emplace_back(all.data() + kName * static_cast<size_t>(r));
  return names;
}

std::vector<std::string> knownBaselines() { return {"mpi", "gloo", "nccl", "oneccl"}; }

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
#ifdef STRATA_PERF_WITH_ONECCL
  names.push_back("oneccl");
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
#ifdef STRATA_PERF_WITH_ONECCL
  if (name == "oneccl") return makeOnecclBaseline(settings);
#endif
  (void)settings;
  throw BaselineError("baseline '" + name + "' is not built into this strata-perf");
}

}  // namespace strata::perf
