// strata-perf's command line: nccl-tests' options (-b -e -f -i -n -w -c -d -o -r ...) and Strata's own
// (--algo, --baseline, --json ...), parsed into one Options value before Strata is started.
#pragma once

#include <cstddef>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "collective.h"
#include "dtype.h"
#include "strata/strata.h"

namespace strata::perf {

/// Exit statuses, as the usage text documents them.
constexpr int kExitFailure = 1;  // a wrong result or an error
constexpr int kExitUsage = 2;    // bad usage

/// A reduction op as -o/--op names it.
struct OpInfo {
  strataRedOp_t op;
  const char* name;
};
/// Every op -o knows, in the order "-o all" runs them.
std::span<const OpInfo> allOps();
/// The name of `op` ("sum", ...), or "?".
const char* opName(strataRedOp_t op);

/// One run's settings. The defaults are nccl-tests'.
struct Options {
  const CollSpec* coll = nullptr;
  size_t minBytes = 32 << 20;
  size_t maxBytes = 32 << 20;
  size_t stepBytes = 1 << 20;
  size_t stepFactor = 2;  // 1: sizes grow by stepBytes
  int iters = 20;
  int warmupIters = 5;
  int check = 1;
  std::string dtypeArg = "float";  // -d as given; dtypes is what it names
  std::vector<const DtypeInfo*> dtypes;
  std::string opArg = "sum";  // -o as given; ops is what it names
  std::vector<OpInfo> ops;
  int root = 0;
  int timeoutSec = 0;
  std::string algo, transport, jsonPath, csvPath;
  bool progress = false;
  bool injectFault = false;
  int showWrong = 0;
  std::vector<std::string> baselines;  // --baseline: libraries timed next to Strata
  bool membound = false;               // --membound: memory-bandwidth bound of all-reduce, measured per row
  bool device = false;                 // --device: CUDA device buffers and a stream
};

/// Parses `strata-perf <collective> [options]`. On bad usage, rank 0 (as the launcher numbers the
/// processes) prints what is wrong and the usage, and every rank exits with kExitUsage; -h prints the usage
/// and exits 0.
Options parseOptions(int argc, char** argv);
/// The usage text: every option with its help, from the option table.
void printUsage(FILE* out);

}  // namespace strata::perf
