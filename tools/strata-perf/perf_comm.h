// The communicator a strata-perf run measures on, and how the run treats a Strata error: it ends this
// rank, with a message that names the rank and the step that was running; the launcher then takes the
// other ranks down.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "strata/strata.h"

namespace strata::perf {

class PerfComm {
 public:
  /// Joins the ranks the launcher started (strataCommInitFromEnv).
  PerfComm();
  /// Destroys the communicator, unchecked, unless destroy() did.
  ~PerfComm();
  PerfComm(const PerfComm&) = delete;
  PerfComm& operator=(const PerfComm&) = delete;

  strataComm_t get() const { return comm_; }
  int rank() const { return rank_; }
  int nranks() const { return nranks_; }

  /// What is running, e.g. "(allreduce, 1024 bytes, float, sum, in place)", for error messages; "" for none.
  void setStep(std::string step) { step_ = std::move(step); }
  const std::string& step() const { return step_; }

  /// Ends this rank unless rc is strataSuccess: "strata-perf: rank R: <what> <step> failed: <error>: <detail>".
  void check(strataResult_t rc, const char* what) const;
  /// Runs f; an exception from it ends this rank: "strata-perf: rank R: <exception> <step>".
  void orExit(const std::function<void()>& f) const;

  double maxOverRanks(double v) const;
  int64_t sumOverRanks(int64_t v) const;
  void barrier() const;
  /// strataCommDestroy, checked.
  void destroy();
  /// From now on get() is a communicator of the same ranks that forces `algo` (STRATA_ALGO's spelling; "" forces
  /// none): strataCommSplit of the launched ranks with that algo in its strataConfig_t. The previous one is destroyed.
  void useAlgorithm(const std::string& algo);

 private:
  strataComm_t comm_ = nullptr;
  strataComm_t world_ = nullptr;  // the launched ranks, while comm_ is a split of them
  int rank_ = -1, nranks_ = 0;
  std::string step_;
};

}  // namespace strata::perf
