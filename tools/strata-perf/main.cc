// strata-perf: nccl-tests for Strata. Same options, same sizes, same table, through the public C API only,
// so its numbers compare line by line with all_reduce_perf & co. Every rank starts from the launcher's
// environment (strata-run, torchrun, mpirun, srun); rank 0 prints.
//
// options.cc reads the command line, perf_run.cc runs the sweep, measure.cc measures each row (checked,
// warmed up, timed; Strata, then the baselines), report.cc prints and writes the rows.
#include <cstdio>

#include "options.h"
#include "perf_run.h"

int main(int argc, char** argv) {
  setlinebuf(stdout);
  const strata::perf::Options opt = strata::perf::parseOptions(argc, argv);
  return strata::perf::runPerf(opt);
}
