// strata_soak's resource accounting (resources.h): reading /proc and /dev/shm, malloc's figures, the verdicts.
#include "resources.h"

#include <dirent.h>
#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "failure.h"

namespace soak {

namespace {

long statusField(const char* field) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long value = -1;
  const size_t len = std::strlen(field);
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, field, len) == 0 && line[len] == ':') value = std::atol(line + len + 1);
  std::fclose(f);
  return value;
}

// Entries of `dir` whose name starts with `prefix`; -1 if it cannot be read.
long countEntries(const char* dir, const char* prefix) {
  DIR* d = opendir(dir);
  if (!d) return -1;
  long n = 0;
  while (const dirent* e = readdir(d))
    if (e->d_name[0] != '.' && std::strncmp(e->d_name, prefix, std::strlen(prefix)) == 0) ++n;
  closedir(d);
  return n;
}

// Bytes malloc has handed out and not had back, in KiB (glibc; -1 elsewhere). Unlike RSS, it falls when memory is
// freed, so a slow leak shows here long before it passes RSS's slack.
long heapInUseKib() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
  const struct mallinfo2 mi = mallinfo2();
  return static_cast<long>((mi.uordblks + mi.hblkhd) / 1024);
#else
  return -1;
#endif
}

long countShmMappings() {
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (!f) return -1;
  char line[1024];
  long n = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::strstr(line, " /dev/shm/")) ++n;
  std::fclose(f);
  return n;
}

}  // namespace

Sample takeSample(double t, uint64_t iteration, bool warm) {
  Sample s;
  s.t = t;
  s.iteration = iteration;
  s.warm = warm;
  s.v[kRss] = statusField("VmRSS");
  s.v[kHeap] = heapInUseKib();
  s.v[kFds] = countEntries("/proc/self/fd", "") - 1;  // less the descriptor reading the directory
  s.v[kThreads] = statusField("Threads");
  s.v[kShmNames] = gLaunchRank == 0 ? countEntries("/dev/shm", "strata-") : -1;
  s.v[kShmMaps] = countShmMappings();
  return s;
}

std::string sampleJson(const Sample& s) {
  char buf[512];
  std::snprintf(
      buf, sizeof buf,
      "{\"type\":\"sample\",\"rank\":%d,\"t\":%.1f,\"iteration\":%llu,\"warm\":%s,\"rss_kib\":%ld,\"heap_kib\":%ld,"
      "\"fds\":%ld,\"threads\":%ld,\"shm_names\":%ld,\"shm_maps\":%ld}",
      gLaunchRank, s.t, static_cast<unsigned long long>(s.iteration), s.warm ? "true" : "false", s.v[kRss], s.v[kHeap],
      s.v[kFds], s.v[kThreads], s.v[kShmNames], s.v[kShmMaps]);
  return buf;
}

Verdict judge(const std::vector<Sample>& samples, Metric m, const Sample& firstWarm, long slack) {
  const double total = samples.back().t;
  const bool floor = m == kHeap || m == kRss;
  const auto pick = [floor](long a, long b) { return floor ? std::min(a, b) : std::max(a, b); };
  Verdict v;
  v.first = samples.front().v[m];
  v.last = samples.back().v[m];
  v.max = v.first;
  v.baseline = firstWarm.v[m];
  v.final = samples.back().v[m];
  for (const Sample& s : samples) {
    v.max = std::max(v.max, s.v[m]);
    if (s.warm && s.t <= 0.2 * total) v.baseline = pick(v.baseline, s.v[m]);
    if (s.t >= 0.8 * total) v.final = pick(v.final, s.v[m]);
  }
  v.ok = v.final - v.baseline <= slack;
  return v;
}

}  // namespace soak
