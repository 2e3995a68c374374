// An MSCCL XML writer for the tests (the format msccl-tools' MSCCLang emits, <step> elements): ring and all-pairs
// all-reduce and ring all-gather at any rank count, channel count and chunk multiplicity, and the structures to
// break them by hand.
#pragma once

#include <string>
#include <vector>

#include "util/error.h"

namespace strata::msccl_test {

struct XStep {
  std::string type;
  std::string srcbuf = "i";
  int srcoff = -1;
  std::string dstbuf = "o";
  int dstoff = -1;
  int cnt = 1;
  int depid = -1, deps = -1;
  bool hasdep = false;
};
struct XTb {
  int send = -1, recv = -1, chan = 0;
  std::vector<XStep> steps;
};
struct XGpu {
  int ichunks = 0, ochunks = 0, schunks = 0;
  std::vector<XTb> tbs;
};
struct XAlgo {
  std::string name, coll;
  int nchunks = 1, nchannels = 1;
  bool inplace = false;
  std::vector<XGpu> gpus;
};

// hasdep="1" on every step some step depends on, as msccl-tools marks them.
inline void markDeps(XAlgo& a) {
  for (XGpu& g : a.gpus)
    for (XTb& tb : g.tbs)
      for (XStep& s : tb.steps)
        if (s.depid >= 0) g.tbs[static_cast<size_t>(s.depid)].steps[static_cast<size_t>(s.deps)].hasdep = true;
}

inline std::string xml(const XAlgo& a) {
  std::string out = strprintf(
      "<algo name=\"%s\" proto=\"Simple\" nchannels=\"%d\" nchunksperloop=\"%d\" ngpus=\"%zu\" coll=\"%s\" "
      "inplace=\"%d\">\n",
      a.name.c_str(), a.nchannels, a.nchunks, a.gpus.size(), a.coll.c_str(), a.inplace ? 1 : 0);
  for (size_t g = 0; g < a.gpus.size(); ++g) {
    const XGpu& gpu = a.gpus[g];
    out += strprintf("  <gpu id=\"%zu\" i_chunks=\"%d\" o_chunks=\"%d\" s_chunks=\"%d\">\n", g, gpu.ichunks,
                     gpu.ochunks, gpu.schunks);
    for (size_t t = 0; t < gpu.tbs.size(); ++t) {
      const XTb& tb = gpu.tbs[t];
      out += strprintf("    <tb id=\"%zu\" send=\"%d\" recv=\"%d\" chan=\"%d\">\n", t, tb.send, tb.recv, tb.chan);
      for (size_t s = 0; s < tb.steps.size(); ++s) {
        const XStep& st = tb.steps[s];
        out += strprintf(
            "      <step s=\"%zu\" type=\"%s\" srcbuf=\"%s\" srcoff=\"%d\" dstbuf=\"%s\" dstoff=\"%d\" cnt=\"%d\" "
            "depid=\"%d\" deps=\"%d\" hasdep=\"%d\"/>\n",
            s, st.type.c_str(), st.srcbuf.c_str(), st.srcoff, st.dstbuf.c_str(), st.dstoff, st.cnt, st.depid, st.deps,
            st.hasdep ? 1 : 0);
      }
      out += "    </tb>\n";
    }
    out += "  </gpu>\n";
  }
  return out + "</algo>\n";
}

inline int mod(int a, int n) { return ((a % n) + n) % n; }

// Ring all-reduce, out of place: each channel a ring over its share of the chunks (n segments of m chunks).
inline XAlgo ringAllReduce(int n, int channels, int m) {
  XAlgo a;
  a.name = strprintf("ring_allreduce_n%d_c%d_m%d", n, channels, m);
  a.coll = "allreduce";
  a.nchunks = n * channels * m;
  a.nchannels = channels;
  for (int r = 0; r < n; ++r) {
    XGpu& g = a.gpus.emplace_back();
    g.ichunks = g.ochunks = a.nchunks;
    for (int c = 0; c < channels; ++c) {
      XTb& tb = g.tbs.emplace_back();
      tb.send = mod(r + 1, n);
      tb.recv = mod(r - 1, n);
      tb.chan = c;
      auto seg = [&](int j) { return c * n * m + mod(j, n) * m; };
      tb.steps.push_back({"s", "i", seg(r), "o", -1, m});
      for (int t = 1; t <= n - 2; ++t) tb.steps.push_back({"rrs", "i", seg(r - t), "o", -1, m});
      tb.steps.push_back({"rrcs", "i", seg(r + 1), "o", seg(r + 1), m});
      for (int u = 0; u <= n - 3; ++u) tb.steps.push_back({"rcs", "i", -1, "o", seg(r - u), m});
      tb.steps.push_back({"r", "i", -1, "o", seg(r + 2), m});
    }
  }
  return a;
}

// All-pairs all-reduce, out of place: rank r owns segment r; every peer's contribution lands in scratch, a local tb
// reduces them (waiting on each receive: by a dependency per step, or by nops first), and the result goes to all.
inline XAlgo allPairsAllReduce(int n, int m, bool nops) {
  XAlgo a;
  a.name = strprintf("allpairs_allreduce_n%d_m%d%s", n, m, nops ? "_nop" : "");
  a.coll = "allreduce";
  a.nchunks = n * m;
  for (int r = 0; r < n; ++r) {
    XGpu& g = a.gpus.emplace_back();
    g.ichunks = g.ochunks = a.nchunks;
    g.schunks = (n - 1) * m;
    std::vector<int> peers;
    for (int p = 0; p < n; ++p)
      if (p != r) peers.push_back(p);
    const int local = static_cast<int>(peers.size());
    for (size_t k = 0; k < peers.size(); ++k) {
      XTb& tb = g.tbs.emplace_back();
      tb.send = tb.recv = peers[k];
      tb.steps.push_back({"s", "i", peers[k] * m, "o", -1, m});
      tb.steps.push_back({"r", "i", -1, "s", static_cast<int>(k) * m, m});
      XStep out{"s", "o", r * m, "o", -1, m};
      out.depid = local;
      out.deps = nops ? 2 * local : local;  // the local tb's last step
      tb.steps.push_back(out);
      tb.steps.push_back({"r", "i", -1, "o", peers[k] * m, m});
    }
    XTb& red = g.tbs.emplace_back();
    if (nops)
      for (int k = 0; k < local; ++k) {
        XStep w{"nop"};
        w.cnt = 0;
        w.depid = k;
        w.deps = 1;
        red.steps.push_back(w);
      }
    red.steps.push_back({"cpy", "i", r * m, "o", r * m, m});
    for (int k = 0; k < local; ++k) {
      XStep re{"re", "s", k * m, "o", r * m, m};
      if (!nops) {
        re.depid = k;
        re.deps = 1;
      }
      red.steps.push_back(re);
    }
  }
  markDeps(a);
  return a;
}

// Ring all-gather: channel c forwards input chunks c*m.. of every rank; in place, or out of place with a local copy.
inline XAlgo ringAllGather(int n, int channels, int m, bool inplace) {
  XAlgo a;
  a.name = strprintf("ring_allgather_n%d_c%d_m%d%s", n, channels, m, inplace ? "_inplace" : "");
  a.coll = "allgather";
  a.inplace = inplace;
  const int ichunks = channels * m;
  a.nchunks = n * ichunks;
  a.nchannels = channels;
  for (int r = 0; r < n; ++r) {
    XGpu& g = a.gpus.emplace_back();
    g.ichunks = ichunks;
    g.ochunks = a.nchunks;
    for (int c = 0; c < channels; ++c) {
      XTb& tb = g.tbs.emplace_back();
      tb.send = mod(r + 1, n);
      tb.recv = mod(r - 1, n);
      tb.chan = c;
      auto out = [&](int from) { return mod(from, n) * ichunks + c * m; };
      tb.steps.push_back({"s", "i", c * m, "o", -1, m});
      for (int t = 1; t <= n - 2; ++t) tb.steps.push_back({"rcs", "i", -1, "o", out(r - t), m});
      tb.steps.push_back({"r", "i", -1, "o", out(r - (n - 1)), m});
      if (!inplace) tb.steps.push_back({"cpy", "i", c * m, "o", out(r), m});
    }
  }
  return a;
}

// All-pairs all-gather, out of place: a tb per peer sends the input and receives the peer's, a local copy for its own.
inline XAlgo allPairsAllGather(int n) {
  XAlgo a;
  a.name = strprintf("allpairs_allgather_n%d", n);
  a.coll = "allgather";
  a.nchunks = n;
  for (int r = 0; r < n; ++r) {
    XGpu& g = a.gpus.emplace_back();
    g.ichunks = 1;
    g.ochunks = n;
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      XTb& tb = g.tbs.emplace_back();
      tb.send = tb.recv = p;
      tb.steps.push_back({"s", "i", 0, "o", -1, 1});
      tb.steps.push_back({"r", "i", -1, "o", p, 1});
    }
    g.tbs.back().steps.push_back({"cpy", "i", 0, "o", r, 1});
  }
  return a;
}

// Hierarchical all-reduce, out of place, n = groups x size ranks (size consecutive ranks a group): a ring
// reduce-scatter of `size` segments (of `groups` chunks) inside each group, a ring all-reduce of each segment among
// the ranks of one index in every group (its own tb on channel 1, waiting for the reduce-scatter), and a ring
// all-gather of the segments inside each group (the first tb again, waiting for the all-reduce).
inline XAlgo hierarchicalAllReduce(int groups, int size) {
  XAlgo a;
  const int n = groups * size;
  a.name = strprintf("hier_allreduce_%dx%d", groups, size);
  a.coll = "allreduce";
  a.nchunks = n;
  a.nchannels = 2;
  for (int r = 0; r < n; ++r) {
    const int grp = r / size, i = r % size;
    XGpu& g = a.gpus.emplace_back();
    g.ichunks = g.ochunks = n;
    auto seg = [&](int j) { return mod(j, size) * groups; };  // segment j: chunks j*groups ..
    XTb intra;
    intra.send = grp * size + mod(i + 1, size);
    intra.recv = grp * size + mod(i - 1, size);
    intra.steps.push_back({"s", "i", seg(i), "o", -1, groups});
    for (int t = 1; t <= size - 2; ++t) intra.steps.push_back({"rrs", "i", seg(i - t), "o", -1, groups});
    intra.steps.push_back({"rrc", "i", seg(i + 1), "o", seg(i + 1), groups});
    const int rsLast = static_cast<int>(intra.steps.size()) - 1;
    // The segment this rank reduced: (i + 1) mod size; its chunk per group index q is seg + q.
    const int mine = seg(i + 1);
    XTb inter;
    inter.send = mod(grp + 1, groups) * size + i;
    inter.recv = mod(grp - 1, groups) * size + i;
    inter.chan = 1;
    auto chunk = [&](int q) { return mine + mod(q, groups); };
    XStep first{"s", "o", chunk(grp), "o", -1, 1};
    first.depid = 0;
    first.deps = rsLast;
    inter.steps.push_back(first);
    for (int t = 1; t <= groups - 2; ++t) inter.steps.push_back({"rrs", "o", chunk(grp - t), "o", -1, 1});
    inter.steps.push_back({"rrcs", "o", chunk(grp + 1), "o", chunk(grp + 1), 1});
    for (int u = 0; u <= groups - 3; ++u) inter.steps.push_back({"rcs", "i", -1, "o", chunk(grp - u), 1});
    inter.steps.push_back({"r", "i", -1, "o", chunk(grp + 2), 1});
    const int arLast = static_cast<int>(inter.steps.size()) - 1;
    // The all-gather inside the group: this rank's segment, then the others around the ring.
    XStep ag{"s", "o", mine, "o", -1, groups};
    ag.depid = 1;
    ag.deps = arLast;
    intra.steps.push_back(ag);
    for (int t = 1; t <= size - 2; ++t) intra.steps.push_back({"rcs", "i", -1, "o", seg(i + 1 - t), groups});
    intra.steps.push_back({"r", "i", -1, "o", seg(i + 2), groups});
    g.tbs.push_back(intra);
    g.tbs.push_back(inter);
  }
  markDeps(a);
  return a;
}

}  // namespace strata::msccl_test
