// The pieces of discoverHost, one per source. Each returns what it finds and never throws for a missing
// library, device or sysfs file: absence is a normal answer (a laptop has no GPUs and no RDMA NICs).
#pragma once

#include <vector>

#include "topology/topology.h"

namespace strata {

/// NUMA domains with their CPUs and memory: hwloc when built with it, else /sys/devices/system/node.
/// Never empty: a system that reports nothing is one domain 0 holding this process's CPUs.
std::vector<NumaDomain> discoverNuma();

/// RDMA NICs (libibverbs when built with it, else /sys/class/infiniband), then every other network
/// interface that is up (not loopback, not a bridge, not the netdev of an RDMA NIC already listed).
std::vector<Nic> discoverNics();

/// GPUs through the CUDA driver (libcuda.so.1) and NVML (libnvidia-ml.so.1), both loaded at run time.
/// Empty when neither library loads or no device is visible.
std::vector<Gpu> discoverGpus();

}  // namespace strata
