// Other libraries strata-perf times next to Strata (--baseline mpi,gloo,nccl,oneccl): the same collective, on the same
// buffers, sizes, types, ops and ranks, checked element by element like Strata's own results, so a row
// compares like with like and a broken baseline shows up as #wrong > 0 instead of as a fast number.
//
// Each library lives in its own file (baseline_mpi.cc, baseline_gloo.cc), compiled only when CMake finds
// it; this interface and the registry in baseline.cc are all the rest of strata-perf sees.
#pragma once

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "collective.h"
#include "dtype.h"
#include "strata/strata.h"

namespace strata::perf {

/// A baseline's failure: says which library, which call and which rank.
class BaselineError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The out-of-place call Strata is timed on, as a baseline must reproduce it.
struct BaselineCall {
  const CollSpec* coll;
  const DtypeInfo* type;
  strataRedOp_t op;  // ignored by collectives that do not reduce
  int root;
  Layout layout;
  const void* send;  // layout.sendCount elements
  void* recv;        // room for max(sendCount, recvCount) elements (strata-perf's buffers hold maxbytes)
};

/// One algorithm of a baseline, set up for one call: whatever the library binds to the buffers or
/// connects per size is done when it is made, so run() is only what a user's loop would repeat.
class BaselineCollective {
 public:
  virtual ~BaselineCollective() = default;
  /// Runs the call once, blocking, out of place (send buffer in, receive buffer out). Throws BaselineError.
  virtual void run() = 0;
};

/// A library strata-perf compares against. Made once per run, collectively on every rank.
class Baseline {
 public:
  virtual ~Baseline() = default;
  /// "mpi", "gloo": the name on the command line, in the table and in the JSON.
  virtual const char* name() const = 0;
  /// The library and its version, e.g. "Open MPI v4.1.4".
  virtual std::string version() const = 0;
  /// The library's algorithms for this call, each timed and the fastest reported; empty when the library
  /// cannot run it (a type or op it lacks). Every rank gets the same answer for the same call.
  virtual std::vector<std::string> algorithms(const BaselineCall& call) const = 0;
  /// Sets one of them up, collectively. Throws BaselineError.
  virtual std::unique_ptr<BaselineCollective> prepare(const BaselineCall& call, const std::string& algorithm) = 0;
};

/// What a baseline needs from the run that starts it.
struct BaselineSettings {
  strataComm_t comm;  // Strata's communicator: the ranks, and a channel for the baseline's own setup
  int rank, nranks;
  std::chrono::milliseconds timeout{0};  // deadline of every baseline call; 0 = the library's default
  bool deviceBuffers = false;            // --device: the call's buffers are CUDA device memory
};

/// Throws BaselineError naming the rank, `what` and Strata's error, unless rc is strataSuccess.
void checkStrata(const BaselineSettings& settings, strataResult_t rc, const char* what);
/// Every rank's host name (gethostname), in rank order; collective over settings.comm.
std::vector<std::string> rankHostNames(const BaselineSettings& settings);

/// The baselines this strata-perf was built with, e.g. {"mpi", "gloo"}.
std::vector<std::string> builtBaselines();
/// Every baseline strata-perf knows, built or not.
std::vector<std::string> knownBaselines();
/// Starts the baseline `name` on every rank of settings.comm (collective). Throws BaselineError, e.g. when
/// the library sees other ranks than Strata does.
std::unique_ptr<Baseline> makeBaseline(const std::string& name, const BaselineSettings& settings);

// Implemented by baseline_mpi.cc, baseline_gloo.cc, baseline_nccl.cc and baseline_oneccl.cc when they are built.
std::unique_ptr<Baseline> makeMpiBaseline(const BaselineSettings& settings);
std::unique_ptr<Baseline> makeGlooBaseline(const BaselineSettings& settings);
std::unique_ptr<Baseline> makeNcclBaseline(const BaselineSettings& settings);
std::unique_ptr<Baseline> makeOnecclBaseline(const BaselineSettings& settings);

}  // namespace strata::perf
