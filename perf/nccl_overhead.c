/* The NCCL drop-in's cost per call over strata.h: one rank, `iters` blocking all-reduces of 8 B (2 floats, sum,
 * out of place, host buffers, stream 0) in a tight loop, timed with clock_gettime after `warmup` untimed calls.
 * Built twice from this file (perf/CMakeLists.txt): strata_nccl_overhead_nccl calls ncclAllReduce through
 * libnccl.so.2 (the drop-in, compiled with STRATA_OVERHEAD_NCCL and nccl.h), strata_nccl_overhead_strata calls
 * strataAllReduce through libstrata.so. perf/nccl_overhead.sh alternates launches of the two and counts
 * instructions per call under callgrind.
 * usage: strata_nccl_overhead_{nccl,strata} [iters [warmup]]   (one rank: no launcher needed)
 * Prints one line: "<api> <iters> all-reduces of 8 B: <ns> ns/call". */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifdef STRATA_OVERHEAD_NCCL
#include <nccl.h>
#define OVERHEAD_API "nccl"
typedef ncclComm_t Comm;
#define ALL_REDUCE(in, out, comm) (ncclAllReduce((in), (out), 2, ncclFloat32, ncclSum, (comm), 0) == ncclSuccess)
#define LAST_ERROR(comm) ncclGetLastError(comm)
#define COMM_DESTROY(comm) ncclCommDestroy(comm)
static int commInit(Comm* comm) {
  ncclUniqueId id;
  return ncclGetUniqueId(&id) == ncclSuccess && ncclCommInitRank(comm, 1, id, 0) == ncclSuccess;
}
#else
#include "strata/strata.h"
#define OVERHEAD_API "strata"
typedef strataComm_t Comm;
#define ALL_REDUCE(in, out, comm) \
  (strataAllReduce((in), (out), 2, strataFloat32, strataSum, (comm), NULL) == strataSuccess)
#define LAST_ERROR(comm) strataGetLastError(comm)
#define COMM_DESTROY(comm) strataCommDestroy(comm)
static int commInit(Comm* comm) {
  strataUniqueId id;
  return strataGetUniqueId(&id) == strataSuccess && strataCommInitRank(comm, 1, id, 0) == strataSuccess;
}
#endif

static double nowNs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int main(int argc, char** argv) {
  const long iters = argc > 1 ? atol(argv[1]) : 200000;
  const long warmup = argc > 2 ? atol(argv[2]) : 1000;
  Comm comm;
  if (!commInit(&comm)) {
    fprintf(stderr, "nccl_overhead (%s): init failed: %s\n", OVERHEAD_API, LAST_ERROR(NULL));
    return 1;
  }
  float in[2] = {1.0f, 2.0f}, out[2] = {0, 0};
  for (long i = 0; i < warmup; ++i) {
    if (!ALL_REDUCE(in, out, comm)) {
      fprintf(stderr, "nccl_overhead (%s): all-reduce failed: %s\n", OVERHEAD_API, LAST_ERROR(comm));
      return 1;
    }
  }
  const double start = nowNs();
  for (long i = 0; i < iters; ++i) {
    if (!ALL_REDUCE(in, out, comm)) {
      fprintf(stderr, "nccl_overhead (%s): all-reduce failed: %s\n", OVERHEAD_API, LAST_ERROR(comm));
      return 1;
    }
  }
  const double elapsed = nowNs() - start;
  COMM_DESTROY(comm);
  printf("%s %ld all-reduces of 8 B: %.2f ns/call\n", OVERHEAD_API, iters, iters > 0 ? elapsed / (double)iters : 0.0);
  return out[0] == 1.0f && out[1] == 2.0f ? 0 : 1;
}
