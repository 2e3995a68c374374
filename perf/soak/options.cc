// strata_soak's command line (options.h).
#include "options.h"

#include <cstdio>
#include <cstdlib>

namespace soak {

namespace {

const char kUsage[] =
    "usage: strata_soak [--seconds S] [--seed N] [--sample-seconds S] [--log FILE] [--flight-dir DIR]\n"
    "                   [--max-count N]\n"
    "                   [--rss-slack-mib M] [--heap-slack-mib M] [--fd-slack N] [--thread-slack N]\n"
    "                   [--shm-slack N] [--map-slack N]\n"
    "Random collectives checked exactly for S seconds (default 60) on every rank of the launcher's world,\n"
    "sampling RSS, malloc's bytes in use, descriptors, threads, /dev/shm mappings and (rank 0) /dev/shm/strata-*\n"
    "every S seconds (default 5); fails when the last 20% of the run exceeds the warm-up baseline by more than\n"
    "the slack (defaults: RSS 32 MiB, heap 8 MiB, 4 descriptors, 2 threads, 2 shm names, 4 mappings).\n"
    "\"%r\" in FILE becomes the rank. Seed default 1; counts up to 1048576 (--max-count). On a failure every\n"
    "live communicator's flight recorder goes to DIR (strata-doctor DIR reads them).\n";

}  // namespace

Options parseOptions(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "strata_soak: %s needs a value\n%s", a.c_str(), kUsage);
      std::exit(2);
    }
    const char* v = argv[++i];
    if (a == "--seconds") o.seconds = std::atof(v);
    else if (a == "--seed") o.seed = std::strtoull(v, nullptr, 0);
    else if (a == "--sample-seconds") o.sampleSeconds = std::atof(v);
    else if (a == "--log") o.log = v;
    else if (a == "--flight-dir") o.flightDir = v;
    else if (a == "--max-count") o.maxCount = std::strtoull(v, nullptr, 0);
    else if (a == "--rss-slack-mib") o.rssSlackMib = std::atof(v);
    else if (a == "--heap-slack-mib") o.heapSlackMib = std::atof(v);
    else if (a == "--fd-slack") o.fdSlack = std::atol(v);
    else if (a == "--thread-slack") o.threadSlack = std::atol(v);
    else if (a == "--shm-slack") o.shmSlack = std::atol(v);
    else if (a == "--map-slack") o.mapSlack = std::atol(v);
    else {
      std::fprintf(stderr, "strata_soak: unknown option %s\n%s", a.c_str(), kUsage);
      std::exit(2);
    }
  }
  if (o.seconds <= 0 || o.sampleSeconds <= 0 || o.maxCount < 1) {
    std::fprintf(stderr, "strata_soak: --seconds, --sample-seconds and --max-count must be positive\n");
    std::exit(2);
  }
  return o;
}

}  // namespace soak
