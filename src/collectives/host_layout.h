// Where the ranks of a communicator sit on hosts: the rank arithmetic that the hierarchical plans (hier.cc)
// and the cost model (cost_model.cc) share, computed once from the host index of every rank.
//
// Hosts are numbered in order of their lowest rank and list their ranks ascending; a rank's local index is
// its position on its host. A rail is the set of ranks with one local index on every host, so there are as
// many rails as the smallest host has ranks.
#pragma once

#include <cstddef>
#include <vector>

namespace strata {

class HostLayout {
 public:
  /// The layout of `nranks` ranks where rank r runs on host hostOf[r] (empty: every rank on one host).
  /// Throws InvalidArgument, prefixed with `what` (the collective), if hostOf does not name `nranks` ranks
  /// or names a host index outside 0..nranks-1.
  HostLayout(int nranks, const std::vector<int>& hostOf, const char* what);

  int nranks() const { return static_cast<int>(hostOf_.size()); }
  int nhosts() const { return static_cast<int>(hosts_.size()); }
  /// Ranks of host h, ascending.
  const std::vector<int>& ranksOf(int h) const { return hosts_[static_cast<size_t>(h)]; }
  const std::vector<std::vector<int>>& hosts() const { return hosts_; }
  /// Host of rank r (in order of the hosts' lowest ranks) and r's index on it.
  int hostOf(int r) const { return hostOf_[static_cast<size_t>(r)]; }
  int localOf(int r) const { return localOf_[static_cast<size_t>(r)]; }
  bool crossesHosts(int a, int b) const { return hostOf(a) != hostOf(b); }

  /// Ranks of the smallest and the largest host.
  int minPerHost() const { return minPerHost_; }
  int maxPerHost() const { return maxPerHost_; }
  /// Rails: local indices 0..rails()-1 exist on every host.
  int rails() const { return minPerHost_; }
  /// Rail `j`'s member on every host, in host order.
  std::vector<int> rail(int j) const;

 private:
  std::vector<std::vector<int>> hosts_;
  std::vector<int> hostOf_;   // index: rank
  std::vector<int> localOf_;  // index: rank
  int minPerHost_ = 0, maxPerHost_ = 0;
};

}  // namespace strata
