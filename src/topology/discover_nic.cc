// NICs: RDMA devices first (libibverbs, or sysfs without it), then the other network interfaces that are
// up, which is all a host without RDMA has (TCP between hosts).
#include <sys/stat.h>

#include <cstdlib>
#include <set>
#include <string>

#include "topology/discover.h"
#include "topology/sysfs.h"
#include "util/log.h"

#ifdef STRATA_HAVE_IBVERBS
#include <infiniband/verbs.h>
#endif

namespace strata {
namespace {

const std::string kIbClass = "/sys/class/infiniband/";
const std::string kNetClass = "/sys/class/net/";

bool isDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Where an RDMA port sits and which Linux interface carries it (IPoIB or the RoCE netdev).
void addRdmaLocation(Nic& nic) {
  const std::string dev = kIbClass + nic.name + "/device";
  nic.numa = sysfs::numaNode(dev);
  nic.pciBusId = sysfs::pciBusId(dev);
  const auto netdevs = sysfs::list(dev + "/net");
  for (const std::string& nd : netdevs) {
    // dev_port numbers the ports of one PCI function from 0; verbs numbers them from 1.
    if (sysfs::readInt(kNetClass + nd + "/dev_port").value_or(0) == nic.port - 1) {
      nic.netdev = nd;
      break;
    }
  }
  if (nic.netdev.empty() && !netdevs.empty()) nic.netdev = netdevs.front();
}

#ifdef STRATA_HAVE_IBVERBS
// Per-lane signalling rate of ibv_port_attr::active_speed, Gbit/s.
double laneGbps(uint8_t speed) {
  switch (speed) {
    case 1: return 2.5;    // SDR
    case 2: return 5;      // DDR
    case 4: return 10;     // QDR
    case 8: return 10;     // FDR10
    case 16: return 14;    // FDR
    case 32: return 25;    // EDR
    case 64: return 50;    // HDR
    case 128: return 100;  // NDR
    default: return 0;
  }
}

// Lanes of ibv_port_attr::active_width.
int laneCount(uint8_t width) {
  switch (width) {
    case 1: return 1;
    case 2: return 4;
    case 4: return 8;
    case 8: return 12;
    case 16: return 2;
    default: return 0;
  }
}

std::vector<Nic> rdmaFromVerbs() {
  std::vector<Nic> out;
  int n = 0;
  ibv_device** devices = ibv_get_device_list(&n);
  if (!devices) return out;
  for (int i = 0; i < n; ++i) {
    ibv_context* ctx = ibv_open_device(devices[i]);
    if (!ctx) {
      STRATA_WARN(kLogInit, "topology: cannot open RDMA device %s; skipping it", ibv_get_device_name(devices[i]));
      continue;
    }
    ibv_device_attr attr;
    if (ibv_query_device(ctx, &attr) == 0) {
      for (int port = 1; port <= attr.phys_port_cnt; ++port) {
        ibv_port_attr pa;
        if (ibv_query_port(ctx, static_cast<uint8_t>(port), &pa) != 0 || pa.state != IBV_PORT_ACTIVE) continue;
        Nic nic;
        nic.name = ibv_get_device_name(devices[i]);
        nic.port = port;
        nic.rdma = true;
        nic.linkLayer = pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand";
        nic.gbps = laneGbps(pa.active_speed) * laneCount(pa.active_width);
        if (nic.gbps <= 0) {
          nic.gbps = kUnknownNicGbps;
          nic.gbpsAssumed = true;
        }
        addRdmaLocation(nic);
        out.push_back(std::move(nic));
      }
    }
    ibv_close_device(ctx);
  }
  ibv_free_device_list(devices);
  return out;
}
#endif

// The same from sysfs: ports/<p>/state "4: ACTIVE", link_layer, rate "400 Gb/sec (4X NDR)".
std::vector<Nic> rdmaFromSysfs() {
  std::vector<Nic> out;
  for (const std::string& dev : sysfs::list(kIbClass)) {
    for (const std::string& p : sysfs::list(kIbClass + dev + "/ports")) {
      const std::string port = kIbClass + dev + "/ports/" + p;
      const auto state = sysfs::read(port + "/state");
      if (!state || state->find("ACTIVE") == std::string::npos) continue;
      Nic nic;
      nic.name = dev;
      nic.port = std::atoi(p.c_str());
      nic.rdma = true;
      nic.linkLayer = sysfs::read(port + "/link_layer").value_or("InfiniBand");
      nic.gbps = std::strtod(sysfs::read(port + "/rate").value_or("0").c_str(), nullptr);
      if (nic.gbps <= 0) {
        nic.gbps = kUnknownNicGbps;
        nic.gbpsAssumed = true;
      }
      addRdmaLocation(nic);
      out.push_back(std::move(nic));
    }
  }
  return out;
}

// Interfaces that are up, except loopback, bridges (their traffic leaves through another interface) and
// those already listed as an RDMA NIC's netdev.
std::vector<Nic> netdevs(const std::set<std::string>& taken) {
  std::vector<Nic> out;
  constexpr long kArphrdInfiniband = 32, kArphrdLoopback = 772;
  for (const std::string& name : sysfs::list(kNetClass)) {
    const std::string dir = kNetClass + name;
    const long type = sysfs::readInt(dir + "/type").value_or(-1);
    if (type == kArphrdLoopback || taken.count(name) || isDirectory(dir + "/bridge")) continue;
    if (sysfs::read(dir + "/operstate").value_or("") != "up") continue;
    Nic nic;
    nic.name = name;
    nic.netdev = name;
    nic.linkLayer = type == kArphrdInfiniband ? "InfiniBand" : "Ethernet";
    // speed is in Mbit/s; virtual interfaces report -1 or fail the read.
    const long mbps = sysfs::readInt(dir + "/speed").value_or(-1);
    nic.gbps = mbps > 0 ? static_cast<double>(mbps) / 1000 : kUnknownNicGbps;
    nic.gbpsAssumed = mbps <= 0;
    nic.numa = sysfs::numaNode(dir + "/device");
    nic.pciBusId = sysfs::pciBusId(dir + "/device");
    out.push_back(std::move(nic));
  }
  return out;
}

}  // namespace

std::vector<Nic> discoverNics() {
  std::vector<Nic> nics;
#ifdef STRATA_HAVE_IBVERBS
  nics = rdmaFromVerbs();
#endif
  if (nics.empty()) nics = rdmaFromSysfs();
  std::set<std::string> taken;
  for (const Nic& n : nics)
    if (!n.netdev.empty()) taken.insert(n.netdev);
  for (Nic& n : netdevs(taken)) nics.push_back(std::move(n));
  return nics;
}

}  // namespace strata
