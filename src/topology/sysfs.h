// Reading Linux sysfs for topology discovery: small files, absent on some systems, never fatal.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace strata::sysfs {

/// The first line of a sysfs file without its newline; nullopt if the file cannot be read.
std::optional<std::string> read(const std::string& path);
/// The file's first line as an integer; nullopt if unreadable or not a number (e.g. speed "-1" reads as
/// -1, an unsupported one fails to read at all: both mean unknown to callers).
std::optional<long> readInt(const std::string& path);
/// Names in a directory, sorted (so discovery lists devices in a stable order); empty if absent.
std::vector<std::string> list(const std::string& dir);
/// The NUMA node of a device directory (its numa_node file); -1 when unknown.
int numaNode(const std::string& deviceDir);
/// The PCI address of a device directory ("/sys/class/net/eth0/device"): the last PCI address on the path
/// it resolves to, so a virtio or USB function reports the PCI device it sits on. Empty if none.
std::string pciBusId(const std::string& deviceDir);
/// "00000000:1A:00.0" (NVML) or "0000:1a:00.0" -> "0000:1a:00.0": four-digit domain, lowercase. Returns the
/// input unchanged if it is not a PCI address.
std::string normalizePciBusId(const std::string& id);

}  // namespace strata::sysfs
