// The communicator's topology: from STRATA_TOPO_FILE, or from every rank's discovery gathered through the
// bootstrap. Either way each rank ends with the same Topology, computed from the same inputs by the same
// deterministic steps, so no further agreement is needed.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "bootstrap/bootstrap.h"
#include "topology/topology.h"
#include "util/config.h"
#include "util/error.h"
#include "util/log.h"

namespace strata {
namespace {

// Host index of each rank: hosts numbered in order of their lowest rank.
std::vector<int> hostIndices(const std::vector<std::string>& hostIds, std::vector<int>* firstRank) {
  std::vector<std::string> distinct;
  std::vector<int> index;
  for (size_t r = 0; r < hostIds.size(); ++r) {
    size_t h = 0;
    while (h < distinct.size() && distinct[h] != hostIds[r]) ++h;
    if (h == distinct.size()) {
      distinct.push_back(hostIds[r]);
      if (firstRank) firstRank->push_back(static_cast<int>(r));
    }
    index.push_back(static_cast<int>(h));
  }
  return index;
}

Topology fromFile(const Config& config, const std::vector<std::string>& hostIds) {
  const std::string origin = "STRATA_TOPO_FILE " + config.topoFile;
  Topology t = loadTopologyFile(config.topoFile, "STRATA_TOPO_FILE");
  const int nranks = static_cast<int>(hostIds.size());
  if (!t.ranks.empty()) {
    if (t.nranks() != nranks)
      throw InvalidArgument(
          strprintf("%s: the file places %d ranks, but the communicator has %d", origin.c_str(), t.nranks(), nranks));
    return t;
  }
  // No ranks section: the i-th distinct host id (in rank order) runs on the file's i-th host.
  const std::vector<int> hostOfRank = hostIndices(hostIds, nullptr);
  int nhosts = 0;
  for (int h : hostOfRank) nhosts = std::max(nhosts, h + 1);
  if (nhosts > t.nhosts())
    throw InvalidArgument(
        strprintf("%s: the communicator's ranks run on %d hosts (by host id), but the file "
                  "describes %d",
                  origin.c_str(), nhosts, t.nhosts()));
  t.hosts.resize(static_cast<size_t>(nhosts));
  t.ranks = placeRanks(t.hosts, hostOfRank);
  return t;
}

}  // namespace

Topology loadTopologyFile(const std::string& path, const std::string& what) {
  const std::string origin = what + " " + path;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidArgument(strprintf("%s: cannot read: %s", origin.c_str(), std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InvalidArgument(strprintf("%s: read failed: %s", origin.c_str(), std::strerror(errno)));
  return Topology::fromJson(text.str(), origin);
}

Topology buildTopology(const Config& config, Bootstrap& bootstrap, const std::vector<std::string>& hostIds) {
  if (static_cast<int>(hostIds.size()) != bootstrap.size())
    throw InvalidArgument(
        strprintf("buildTopology: %zu host ids for a communicator of %d ranks", hostIds.size(), bootstrap.size()));
  Topology t;
  if (!config.topoFile.empty()) {
    t = fromFile(config, hostIds);
  } else {
    std::vector<int> firstRank;
    const std::vector<int> hostOfRank = hostIndices(hostIds, &firstRank);
    // Only the lowest rank of each host discovers it (the others would send the same, and discovery
    // loads libraries and walks sysfs); the rest send nothing.
    const int myHost = hostOfRank[static_cast<size_t>(bootstrap.rank())];
    const bool describer = firstRank[static_cast<size_t>(myHost)] == bootstrap.rank();
    const std::string mine = describer ? hostToJson(discoverHost(config)) : std::string();
    const auto all = bootstrap.allGather(mine.data(), mine.size());
    // Each host is described by its lowest rank; the communicator's host ids are the ones that count.
    for (size_t h = 0; h < firstRank.size(); ++h) {
      const auto& data = all[static_cast<size_t>(firstRank[h])];
      t.hosts.push_back(
          hostFromJson(std::string(data.begin(), data.end()), strprintf("rank %d's host description", firstRank[h])));
      t.hosts.back().hostId = hostIds[static_cast<size_t>(firstRank[h])];
    }
    t.ranks = placeRanks(t.hosts, hostOfRank);
  }
  const RankPlace& me = t.ranks[static_cast<size_t>(bootstrap.rank())];
  STRATA_INFO(kLogInit, "topology: %d hosts%s; rank %d on host %d (local rank %d), numa %d, gpu %d, nic %d", t.nhosts(),
              config.topoFile.empty() ? "" : (" from " + config.topoFile).c_str(), bootstrap.rank(), me.host,
              me.localRank, me.numa, me.gpu, me.nic);
  return t;
}

}  // namespace strata
