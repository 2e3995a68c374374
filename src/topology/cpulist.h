// The Linux cpulist notation ("0-27,56-83"), used by sysfs, by topology files and in strata-topo's text.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace strata {

/// Consecutive ascending runs become ranges: {0,1,2,3,8} -> "0-3,8". Keeps the given order, so
/// parseCpuList(formatCpuList(v)) == v for any list of non-negative numbers.
std::string formatCpuList(const std::vector<int>& cpus);
/// "0-3,8" -> {0,1,2,3,8}; "" -> {}. nullopt if malformed (a range that runs backwards, a stray character).
std::optional<std::vector<int>> parseCpuList(const std::string& text);

}  // namespace strata
