// strata-train: byte-level language-modelling data. Sequence i of step t's global batch starts at a position
// drawn from (seed, t, i), so the global batch is the same for every dp x tp layout; each DP rank reads only
// its own slice of the batch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strain {

class ByteData {
 public:
  /// Reads `path`, or without one the first of a few texts every Debian machine has.
  explicit ByteData(const std::string& path);
  const std::string& source() const { return source_; }
  size_t size() const { return bytes_.size(); }
  /// Sequences [first, first + count) of step `step`'s global batch, each seq + 1 bytes, into out.
  void batch(uint64_t seed, int step, int first, int count, int seq, std::vector<uint8_t>& out) const;

 private:
  std::string source_;
  std::vector<uint8_t> bytes_;
};

}  // namespace strain
