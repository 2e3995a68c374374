// One row of the table, measured. Per mode (out of place, then in place): the check runs (inputs every type
// holds exactly, every element of the result compared), the warm-up runs, then the timed runs. Each timed
// run is measured on its own; a row reports the median, and the slowest rank's median, as the time.
// Baselines (--baseline mpi,gloo) then run the same call out of place, through the same steps, on the same
// buffers.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "baseline.h"
#include "buffers.h"
#include "collective.h"
#include "dtype.h"
#include "options.h"
#include "perf_comm.h"
#include "report.h"

namespace strata::perf {

class RowMeasurer {
 public:
  /// Everything is the run's and outlives this.
  RowMeasurer(const Options& opt, PerfComm& comm, const PerfBuffers& buffers,
              const std::vector<std::unique_ptr<Baseline>>& baselines)
      : opt_(opt), comm_(comm), buffers_(buffers), baselines_(baselines) {}

  /// The row of `bytes` (nccl-tests' size parameter) of `type`, reduced with `op` where the collective
  /// reduces. Collective: every rank calls it with the same arguments.
  Row measureRow(const DtypeInfo& type, const OpInfo& op, size_t bytes);

 private:
  void explain(const CheckContext& ctx, Row* row);
  void measureMemoryBound(const CheckContext& ctx, Row* row);
  BaselineMeasurement measureBaseline(Baseline& baseline, const CheckContext& ctx, const Row& row);
  Measurement measure(const CheckContext& ctx, size_t reportedBytes, bool inPlace);
  Measurement measureCalls(const CheckContext& ctx, size_t reportedBytes, bool inPlace,
                           const std::function<void()>& runOnce, bool injectFault);

  const Options& opt_;
  PerfComm& comm_;
  const PerfBuffers& buffers_;
  const std::vector<std::unique_ptr<Baseline>>& baselines_;
  bool faultInjected_ = false;  // --inject-fault: once per run
};

}  // namespace strata::perf
