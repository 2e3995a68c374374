#include "topology/cpulist.h"

#include <charconv>

namespace strata {
namespace {
// More CPUs than any machine has: a list beyond it is a typo ("0-1000000000"), not a reason to allocate.
constexpr size_t kMaxCpus = 1 << 20;
}  // namespace

std::string formatCpuList(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

std::optional<std::vector<int>> parseCpuList(const std::string& text) {
  std::vector<int> cpus;
  const char* p = text.data();
  const char* end = p + text.size();
  // sysfs files end in a newline.
  while (end > p && (end[-1] == '\n' || end[-1] == ' ')) --end;
  if (p == end) return cpus;
  auto number = [&](int& out) {
    auto [next, ec] = std::from_chars(p, end, out);
    if (ec != std::errc() || out < 0) return false;
    p = next;
    return true;
  };
  for (;;) {
    int first = 0, last = 0;
    if (!number(first)) return std::nullopt;
    last = first;
    if (p < end && *p == '-') {
      ++p;
      if (!number(last) || last < first) return std::nullopt;
    }
    if (static_cast<size_t>(last - first) + cpus.size() >= kMaxCpus) return std::nullopt;
    for (int c = first; c <= last; ++c) cpus.push_back(c);
    if (p == end) return cpus;
    if (*p != ',') return std::nullopt;
    ++p;
  }
}

}  // namespace strata
