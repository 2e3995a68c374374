// strata_soak's command line: how long, the seed, the sampling, the logs, the largest count and the slack of each
// resource metric.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace soak {

struct Options {
  double seconds = 60;
  uint64_t seed = 1;
  double sampleSeconds = 5;
  std::string log;
  std::string flightDir;
  size_t maxCount = size_t{1} << 20;
  double rssSlackMib = 32;
  double heapSlackMib = 8;
  long fdSlack = 4;
  long threadSlack = 2;
  long shmSlack = 2;
  long mapSlack = 4;
};

/// The options of argv; prints the usage and exits 0 for --help, 2 for a bad option or value.
Options parseOptions(int argc, char** argv);

}  // namespace soak
