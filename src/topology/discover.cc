// discoverHost: this host's identity, CPUs and NUMA domains, NICs and GPUs, and the link figures that
// follow from them.
#include "topology/discover.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "topology/cpulist.h"
#include "topology/host.h"
#include "topology/sysfs.h"
#include "topology/topology.h"
#include "util/config.h"
#include "util/log.h"

#ifdef STRATA_HAVE_HWLOC
#include <hwloc.h>
#endif

namespace strata {
namespace {

std::vector<int> affinityCpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

#ifdef STRATA_HAVE_HWLOC
std::vector<NumaDomain> numaFromHwloc() {
  std::vector<NumaDomain> out;
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return out;
  if (hwloc_topology_load(topo) == 0) {
    const int n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    for (int i = 0; i < n; ++i) {
      hwloc_obj_t obj = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
      NumaDomain d;
      d.id = static_cast<int>(obj->os_index);
      d.memoryBytes = obj->attr ? obj->attr->numanode.local_memory : 0;
      if (obj->cpuset) {
        unsigned cpu = 0;
        hwloc_bitmap_foreach_begin(cpu, obj->cpuset) d.cpus.push_back(static_cast<int>(cpu));
        hwloc_bitmap_foreach_end();
      }
      out.push_back(std::move(d));
    }
  } else {
    STRATA_WARN(kLogInit, "topology: hwloc could not load this host's topology; reading sysfs instead");
  }
  hwloc_topology_destroy(topo);
  return out;
}
#endif

// /sys/devices/system/node/nodeN/{cpulist,meminfo}.
std::vector<NumaDomain> numaFromSysfs() {
  std::vector<NumaDomain> out;
  const std::string base = "/sys/devices/system/node/";
  for (const std::string& name : sysfs::list(base)) {
    if (name.size() < 5 || name.compare(0, 4, "node") != 0 ||
        name.find_first_not_of("0123456789", 4) != std::string::npos)
      continue;
    NumaDomain d;
    d.id = std::stoi(name.substr(4));
    if (auto text = sysfs::read(base + name + "/cpulist"))
      if (auto cpus = parseCpuList(*text)) d.cpus = std::move(*cpus);
    // meminfo's first line: "Node 0 MemTotal:       5727976 kB".
    if (auto line = sysfs::read(base + name + "/meminfo")) {
      const size_t at = line->find("MemTotal:");
      if (at != std::string::npos) d.memoryBytes = std::strtoull(line->c_str() + at + 9, nullptr, 10) * 1024;
    }
    out.push_back(std::move(d));
  }
  // Directory order sorts "node10" before "node2".
  std::sort(out.begin(), out.end(), [](const NumaDomain& a, const NumaDomain& b) { return a.id < b.id; });
  return out;
}

// Devices' NUMA nodes come from sysfs, the domains from hwloc, which leaves out domains a container may
// not use: a node not in the list becomes unknown (-1), as the model requires. And a device whose node
// is unknown on a one-domain host can only be on that domain.
void fixDeviceNuma(HostTopology& h) {
  auto fix = [&](int& numa) {
    bool listed = false;
    for (const NumaDomain& d : h.numa) listed |= d.id == numa;
    if (numa < 0 && h.numa.size() == 1) numa = h.numa[0].id;
    else if (!listed) numa = -1;
  };
  for (Nic& n : h.nics) fix(n.numa);
  for (Gpu& g : h.gpus) fix(g.numa);
}

}  // namespace

std::vector<NumaDomain> discoverNuma() {
  std::vector<NumaDomain> out;
#ifdef STRATA_HAVE_HWLOC
  out = numaFromHwloc();
#endif
  if (out.empty()) out = numaFromSysfs();
  if (out.empty()) {
    NumaDomain d;
    d.cpus = affinityCpus();
    out.push_back(std::move(d));
  }
  return out;
}

HostTopology discoverHost(const Config& config) {
  HostTopology h;
  h.hostId = hostIdentity(config);
  char name[256] = {0};
  gethostname(name, sizeof(name) - 1);
  h.hostname = name;
  // The CPUs this process may run on: what ranks started here can use (a container's cpuset, a launcher's
  // binding), which is what oversubscription decisions need.
  h.cores = static_cast<int>(affinityCpus().size());
  if (h.cores == 0) h.cores = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  h.numa = discoverNuma();
  h.nics = discoverNics();
  h.gpus = discoverGpus();
  fixDeviceNuma(h);
  h.shm = {kShmLatencyUs, kShmBandwidthGBps};
  const bool rdmaTransport = config.net == "ucx" || config.transport == "ucx";
  h.net = netFigures(h.nics, rdmaTransport);
  STRATA_INFO(kLogInit, "topology: %s: %d cores, %zu NUMA domains, %zu NICs, %zu GPUs; net %g us %g GB/s",
              h.hostname.c_str(), h.cores, h.numa.size(), h.nics.size(), h.gpus.size(), h.net.latencyUs,
              h.net.bandwidthGBps);
  return h;
}

}  // namespace strata
