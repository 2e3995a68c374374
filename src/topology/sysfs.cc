#include "topology/sysfs.h"

#include <dirent.h>
#include <limits.h>
#include <stdlib.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>

namespace strata::sysfs {
namespace {

// "dddd:bb:dd.f" with any number of domain digits.
bool isPciAddress(const std::string& s) {
  const size_t colon = s.find(':');
  if (colon == std::string::npos || colon == 0 || s.size() != colon + 8) return false;
  auto hex = [&](size_t from, size_t n) {
    for (size_t i = from; i < from + n; ++i)
      if (!std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
    return true;
  };
  return hex(0, colon) && hex(colon + 1, 2) && s[colon + 3] == ':' && hex(colon + 4, 2) && s[colon + 6] == '.' &&
         hex(colon + 7, 1);
}

}  // namespace

std::optional<std::string> read(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ' || line.back() == '\r')) line.pop_back();
  return line;
}

std::optional<long> readInt(const std::string& path) {
  auto text = read(path);
  if (!text || text->empty()) return std::nullopt;
  char* end = nullptr;
  const long v = std::strtol(text->c_str(), &end, 10);
  if (*end != '\0') return std::nullopt;
  return v;
}

std::vector<std::string> list(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (!d) return names;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

int numaNode(const std::string& deviceDir) {
  const auto n = readInt(deviceDir + "/numa_node");
  return n && *n >= 0 ? static_cast<int>(*n) : -1;
}

std::string pciBusId(const std::string& deviceDir) {
  char resolved[PATH_MAX];
  if (!realpath(deviceDir.c_str(), resolved)) return "";
  const std::string path = resolved;
  std::string last;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    const std::string part = path.substr(start, end - start);
    if (isPciAddress(part)) last = part;
    start = end + 1;
  }
  return normalizePciBusId(last);
}

std::string normalizePciBusId(const std::string& id) {
  if (!isPciAddress(id)) return id;
  std::string out = id;
  const size_t colon = out.find(':');
  // Keep the low four digits of the domain: NVML pads it to eight.
  if (colon > 4) out.erase(0, colon - 4);
  else if (colon < 4) out.insert(0, 4 - colon, '0');
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace strata::sysfs
