// Compiled against the installed headers only: checks that strata.hpp and strata.h are self-contained.
#include <cstdio>
#include <strata/strata.hpp>

int main() {
  int v = 0;
  if (strataGetVersion(&v) != strataSuccess || v != STRATA_VERSION_CODE) return 1;
  // A one-rank communicator needs no launcher.
  strataUniqueId id = strata::Communicator::uniqueId();
  strata::Communicator comm(1, id, 0);
  float x[4] = {1, 2, 3, 4}, y[4] = {0, 0, 0, 0};
  comm.allReduce(x, y, 4);
  auto work = comm.allReduceAsync(x, y, 4, strataFloat32, strataSum);
  work.wait();
  std::printf("consumer: version %d, rank %d of %d, y[3] = %g\n", v, comm.rank(), comm.size(), y[3]);
  return y[3] == 4 ? 0 : 1;
}
