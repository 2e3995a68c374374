// How strata_soak fails (failure.h).
#include "failure.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace soak {

int gLaunchRank = 0;
uint64_t gIteration = 0;
std::vector<strataComm_t> gLiveComms;
std::string gFlightDir;

[[noreturn]] __attribute__((format(printf, 1, 2))) void die(const char* fmt, ...) {
  char msg[4096];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "strata_soak: rank %d: iteration %llu: FAIL: %s\n", gLaunchRank,
               static_cast<unsigned long long>(gIteration), msg);
  std::fflush(stderr);
  if (!gFlightDir.empty())
    for (strataComm_t c : gLiveComms) strataCommDumpFlightRecorder(c, gFlightDir.c_str());
  std::exit(1);
}

void expectOk(strataResult_t r, strataComm_t comm, const std::string& what) {
  if (r != strataSuccess) die("%s returned %s: %s", what.c_str(), strataGetErrorString(r), strataGetLastError(comm));
}

}  // namespace soak
