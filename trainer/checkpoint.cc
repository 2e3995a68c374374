#include "checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace strain {

namespace {
constexpr char kMagic[8] = {'S', 'T', 'R', 'N', 'C', 'K', 'P', '1'};

/// Full-local flat moments (zeros outside the owned ranges), summed over DP under ZeRO.
void momentsFlat(CkptCtx& c, Vec& M, Vec& V) {
  M.assign(c.total, 0.f);
  V.assign(c.total, 0.f);
  size_t base = 0;
  for (auto& r : c.opt->ranges) {
    std::memcpy(M.data() + r.first, c.opt->m.data() + base, r.second * sizeof(float));
    std::memcpy(V.data() + r.first, c.opt->v.data() + base, r.second * sizeof(float));
    base += r.second;
  }
  if (c.zero && c.dp && c.dp->size() > 1) {
    c.dp->allReduce(M.data(), M.data(), c.total, strataFloat32, strataSum);
    c.dp->allReduce(V.data(), V.data(), c.total, strataFloat32, strataSum);
  }
}

void gatherFull(CkptCtx& c, const Param& p, const float* local, Vec& full) {
  size_t n = size_t(p.rows) * p.cols;
  full.assign(n, 0.f);
  int T = c.tp->size;
  if (p.shard == 0 || T == 1) {
    std::memcpy(full.data(), local, n * sizeof(float));
    return;
  }
  Vec all(p.numel * T);
  c.tp->allGather(local, all.data(), p.numel);
  for (int r = 0; r < T; ++r) shardCopy(p, r, T, full.data(), all.data() + r * p.numel, true);
}

struct Entry {
  std::string name;
  Vec w, m, v;
};

std::vector<Entry> readFile(const std::string& path, int64_t* step) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open checkpoint " + path);
  char magic[8];
  f.read(magic, 8);
  if (!f || std::memcmp(magic, kMagic, 8)) throw std::runtime_error(path + " is not a strata-train checkpoint");
  int64_t hdr[2];
  f.read(reinterpret_cast<char*>(hdr), sizeof hdr);
  *step = hdr[0];
  std::vector<Entry> out(static_cast<size_t>(hdr[1]));
  for (auto& e : out) {
    int64_t len[2];
    f.read(reinterpret_cast<char*>(len), sizeof len);
    e.name.resize(size_t(len[0]));
    f.read(e.name.data(), len[0]);
    for (Vec* x : {&e.w, &e.m, &e.v}) {
      x->resize(size_t(len[1]));
      f.read(reinterpret_cast<char*>(x->data()), len[1] * sizeof(float));
    }
  }
  if (!f) throw std::runtime_error("truncated checkpoint " + path);
  return out;
}
}  // namespace

void saveCheckpoint(const std::string& path, CkptCtx& c) {
  Vec M, V;
  momentsFlat(c, M, V);
  std::ofstream f;
  if (c.writer) {
    f.open(path + ".tmp", std::ios::binary);
    if (!f) throw std::runtime_error("cannot write " + path);
    f.write(kMagic, 8);
    int64_t hdr[2] = {c.opt->t, int64_t(c.params->size())};
    f.write(reinterpret_cast<char*>(hdr), sizeof hdr);
  }
  Vec full;
  for (size_t i = 0; i < c.params->size(); ++i) {
    const Param& p = (*c.params)[i];
    size_t off = (*c.offsets)[i];
    if (c.writer) {
      int64_t len[2] = {int64_t(p.name.size()), int64_t(p.rows) * p.cols};
      f.write(reinterpret_cast<char*>(len), sizeof len);
      f.write(p.name.data(), len[0]);
    }
    for (const float* src : {c.w + off, M.data() + off, V.data() + off}) {
      gatherFull(c, p, src, full);
      if (c.writer) f.write(reinterpret_cast<const char*>(full.data()), full.size() * sizeof(float));
    }
  }
  if (c.writer) {
    f.close();
    if (!f || std::rename((path + ".tmp").c_str(), path.c_str())) throw std::runtime_error("cannot write " + path);
  }
}

void loadCheckpoint(const std::string& path, CkptCtx& c) {
  int64_t step = 0;
  auto entries = readFile(path, &step);
  if (entries.size() != c.params->size()) throw std::runtime_error(path + ": parameter count does not match");
  Vec M(c.total, 0.f), V(c.total, 0.f);
  for (size_t i = 0; i < entries.size(); ++i) {
    Param& p = (*c.params)[i];
    auto& e = entries[i];
    if (e.name != p.name || e.w.size() != size_t(p.rows) * p.cols)
      throw std::runtime_error(path + ": parameter " + e.name + " does not match the model");
    size_t off = (*c.offsets)[i];
    shardCopy(p, c.tp->rank, c.tp->size, e.w.data(), c.w + off, false);
    shardCopy(p, c.tp->rank, c.tp->size, e.m.data(), M.data() + off, false);
    shardCopy(p, c.tp->rank, c.tp->size, e.v.data(), V.data() + off, false);
  }
  size_t base = 0;
  for (auto& r : c.opt->ranges) {
    std::memcpy(c.opt->m.data() + base, M.data() + r.first, r.second * sizeof(float));
    std::memcpy(c.opt->v.data() + base, V.data() + r.first, r.second * sizeof(float));
    base += r.second;
  }
  c.opt->t = int(step);
}

double compareCheckpoints(const std::string& a, const std::string& b, double* maxAbs) {
  int64_t sa, sb;
  auto A = readFile(a, &sa), B = readFile(b, &sb);
  if (A.size() != B.size() || sa != sb) throw std::runtime_error("checkpoints differ in shape or step");
  double rel = 0, abs = 0;
  for (size_t i = 0; i < A.size(); ++i) {
    if (A[i].name != B[i].name || A[i].w.size() != B[i].w.size()) throw std::runtime_error("parameter mismatch");
    for (size_t k = 0; k < A[i].w.size(); ++k) {
      double d = std::fabs(double(A[i].w[k]) - B[i].w[k]);
      abs = std::max(abs, d);
      rel = std::max(rel, d / std::max(1.0, std::fabs(double(B[i].w[k]))));
    }
  }
  if (maxAbs) *maxAbs = abs;
  return rel;
}

}  // namespace strain
