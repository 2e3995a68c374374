#include "data.h"

#include <fstream>
#include <iterator>
#include <stdexcept>

#include "tensor.h"

namespace strain {

ByteData::ByteData(const std::string& path) {
  std::vector<std::string> candidates;
  if (!path.empty()) candidates = {path};
  else
    candidates = {"/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/GPL-2",
                  "/usr/share/common-licenses/Apache-2.0"};
  for (auto& c : candidates) {
    std::ifstream f(c, std::ios::binary);
    if (!f) continue;
    bytes_.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    source_ = c;
    break;
  }
  if (source_.empty()) throw std::runtime_error("cannot read data file " + (path.empty() ? candidates[0] : path));
}

void ByteData::batch(uint64_t seed, int step, int first, int count, int seq, std::vector<uint8_t>& out) const {
  if (bytes_.size() < size_t(seq) + 2) throw std::runtime_error("data file shorter than one sequence");
  out.resize(size_t(count) * (seq + 1));
  for (int i = 0; i < count; ++i) {
    Rng r(seed ^ (uint64_t(step) << 32) ^ uint64_t(first + i) * 0x2545F4914F6CDD1Dull);
    size_t start = r.next() % (bytes_.size() - seq - 1);
    for (int t = 0; t <= seq; ++t) out[size_t(i) * (seq + 1) + t] = bytes_[start + t];
  }
}

}  // namespace strain
