// strata_soak's resource accounting: samples of RSS, malloc's bytes in use, descriptors, threads and /dev/shm
// (mappings, and strata-* names on rank 0), and the verdict of each metric's steady state against its baseline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace soak {

enum Metric { kRss, kHeap, kFds, kThreads, kShmNames, kShmMaps, kNumMetrics };
inline constexpr const char* kMetricNames[kNumMetrics] = {"rss_kib", "heap_kib",  "fds",
                                                          "threads", "shm_names", "shm_maps"};

struct Sample {
  double t = 0;  // seconds since the start, on the deciding rank's clock
  uint64_t iteration = 0;
  bool warm = false;
  long v[kNumMetrics] = {};  // -1: not measured on this rank
};

/// The metrics of this process now (and the strata-* names in /dev/shm on launch rank 0).
Sample takeSample(double t, uint64_t iteration, bool warm);

/// The sample as one JSON line of --log.
std::string sampleJson(const Sample& s);

// Per metric: first, last and max sample, the baseline, the final figure, and whether it stayed within slack.
struct Verdict {
  long first = -1, last = -1, max = -1, baseline = -1, final = -1;
  bool ok = true;
};

// Baseline: the largest sample of the first 20% of the run once warm (the first warm sample when the warm-up took
// longer); final: the largest sample of the last 20%. The heap and the RSS are judged by their least samples
// instead: the library's caches (a communicator's scratch for Avg and PreMulSum inputs, its plans) and the test's
// own largest buffers move them by tens of MiB from one sample to the next (RSS peaked 23 MiB above a warm-up that
// had not yet drawn the largest calls, with the heap floor flat), while a leak lifts their floor.
Verdict judge(const std::vector<Sample>& samples, Metric m, const Sample& firstWarm, long slack);

// Record exchanged at the end so rank 0 can print every rank's figures: [launch rank, failed, 5 x 5 figures].
constexpr size_t kRecordLen = 2 + kNumMetrics * 5;

}  // namespace soak
