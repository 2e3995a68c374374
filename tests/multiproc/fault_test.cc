// A rank of this program is killed from outside while all ranks loop over large all-reduces; every
// survivor must return an error naming the dead rank (checked by test_fault.sh), not hang.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "strata/strata.h"

int main(int argc, char** argv) {
  const size_t count = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (4u << 20);
  strataComm_t comm;
  strataResult_t r = strataCommInitFromEnv(&comm);
  if (r != strataSuccess) {
    std::fprintf(stderr, "init failed: %s: %s\n", strataGetErrorString(r), strataGetLastError(nullptr));
    return 1;
  }
  int rank = 0;
  strataCommUserRank(comm, &rank);
  std::vector<float> buf(count, 1.0f);
  for (int iter = 0; iter < 1000000; ++iter) {
    r = strataAllReduce(buf.data(), buf.data(), count, strataFloat32, strataSum, comm, nullptr);
    if (r != strataSuccess) {
      std::fprintf(stderr, "FAULT rank %d iteration %d: %s: %s\n", rank, iter, strataGetErrorString(r),
                   strataGetLastError(comm));
      strataCommAbort(comm);
      return 3;
    }
    if (iter < 3 || iter % 10 == 0) {
      std::printf("rank %d iteration %d\n", rank, iter);
      std::fflush(stdout);
    }
    for (auto& x : buf) x = 1.0f;
  }
  strataCommDestroy(comm);
  return 0;
}
