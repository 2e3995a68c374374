#include "collectives/host_layout.h"

#include <algorithm>

#include "util/error.h"

namespace strata {

HostLayout::HostLayout(int nranks, const std::vector<int>& hostOf, const char* what) {
  const size_t n = static_cast<size_t>(std::max(nranks, 0));
  if (!hostOf.empty() && hostOf.size() != n)
    throw InvalidArgument(
        strprintf("%s: host layout names %zu ranks, the communicator has %d", what, hostOf.size(), nranks));
  hostOf_.resize(n);
  localOf_.resize(n);
  std::vector<int> position;  // host index in hostOf -> position in hosts_
  for (int r = 0; r < nranks; ++r) {
    const int h = hostOf.empty() ? 0 : hostOf[static_cast<size_t>(r)];
    if (h < 0 || h >= nranks) throw InvalidArgument(strprintf("%s: rank %d has host index %d", what, r, h));
    if (static_cast<size_t>(h) >= position.size()) position.resize(static_cast<size_t>(h) + 1, -1);
    int& p = position[static_cast<size_t>(h)];
    if (p < 0) {
      p = static_cast<int>(hosts_.size());
      hosts_.emplace_back();
    }
    std::vector<int>& host = hosts_[static_cast<size_t>(p)];
    hostOf_[static_cast<size_t>(r)] = p;
    localOf_[static_cast<size_t>(r)] = static_cast<int>(host.size());
    host.push_back(r);
  }
  minPerHost_ = nranks;
  maxPerHost_ = 0;
  for (const std::vector<int>& host : hosts_) {
    minPerHost_ = std::min(minPerHost_, static_cast<int>(host.size()));
    maxPerHost_ = std::max(maxPerHost_, static_cast<int>(host.size()));
  }
}

std::vector<int> HostLayout::rail(int j) const {
  std::vector<int> out;
  for (const std::vector<int>& host : hosts_) out.push_back(host[static_cast<size_t>(j)]);
  return out;
}

}  // namespace strata
