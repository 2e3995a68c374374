/* The per-call cost of the small-message path, in instructions: one rank, `iters` blocking all-reduces of 8 B
 * (float32 sum, out of place) through the public C API. perf/count_small_call.sh runs it under
 * `valgrind --tool=callgrind --toggle-collect=strataAllReduce` and divides by the number of calls; callgrind
 * counts instructions, so the figure is the same whatever else the machine is doing.
 * usage: strata_small_call_loop [iters]   (one rank: no launcher needed) */
#include <stdio.h>
#include <stdlib.h>

#include "strata/strata.h"

int main(int argc, char** argv) {
  const long iters = argc > 1 ? atol(argv[1]) : 10000;
  strataUniqueId id;
  strataComm_t comm;
  if (strataGetUniqueId(&id) != strataSuccess || strataCommInitRank(&comm, 1, id, 0) != strataSuccess) {
    fprintf(stderr, "strata_small_call_loop: init failed: %s\n", strataGetLastError(NULL));
    return 1;
  }
  float in[2] = {1.0f, 2.0f}, out[2] = {0, 0};
  for (long i = 0; i < iters; ++i) {
    if (strataAllReduce(in, out, 2, strataFloat32, strataSum, comm, NULL) != strataSuccess) {
      fprintf(stderr, "strata_small_call_loop: all-reduce failed: %s\n", strataGetLastError(comm));
      return 1;
    }
  }
  strataCommDestroy(comm);
  printf("%ld all-reduces of 8 B, result %g %g\n", iters, out[0], out[1]);
  return out[0] == 1.0f && out[1] == 2.0f ? 0 : 1;
}
