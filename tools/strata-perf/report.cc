#include "report.h"

#include <cmath>
#include <cstring>

#include "util/json_escape.h"

namespace strata::perf {
namespace {

// nccl-tests prints times with fewer decimals as they grow, always 7 characters wide.
std::string formatTime(double us) {
  char buf[64];
  if (us >= 10000.0) {
    std::snprintf(buf, sizeof(buf), "%7.0f", us);
  } else if (us >= 100.0) {
    std::snprintf(buf, sizeof(buf), "%7.1f", us);
  } else {
    std::snprintf(buf, sizeof(buf), "%7.2f", us);
  }
  return buf;
}

std::string jsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

// CSV field: quoted only when it needs to be.
std::string csvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

void writeMeasurementJson(FILE* f, const char* name, const Measurement& m) {
  std::fprintf(f, "\"%s\": {\"time_us\": %s, \"algbw_gbps\": %s, \"busbw_gbps\": %s, \"wrong\": %s}", name,
               jsonNumber(m.timeUs).c_str(), jsonNumber(m.algBw).c_str(), jsonNumber(m.busBw).c_str(),
               m.wrong < 0 ? "null" : std::to_string(m.wrong).c_str());
}

void writeBaselineJson(FILE* f, const std::string& name, const BaselineMeasurement& b) {
  std::fprintf(f, "%s: ", jsonString(name).c_str());
  if (!b.supported) {
    std::fprintf(f, "null");
    return;
  }
  const Measurement& m = b.m;
  std::fprintf(f,
               "{\"algorithm\": %s, \"time_us\": %s, \"algbw_gbps\": %s, \"busbw_gbps\": %s, \"wrong\": %s, "
               "\"strata_ratio\": %s}",
               jsonString(b.algorithm).c_str(), jsonNumber(m.timeUs).c_str(), jsonNumber(m.algBw).c_str(),
               jsonNumber(m.busBw).c_str(), m.wrong < 0 ? "null" : std::to_string(m.wrong).c_str(),
               jsonNumber(b.ratio).c_str());
}

}  // namespace

void printRunHeader(FILE* out, const RunInfo& info) {
  const bool byFactor = info.stepFactor > 1;
  std::fprintf(out,
               "# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d agg iters: 1 "
               "validation: %d graph: 0\n",
               info.minBytes, info.maxBytes, byFactor ? info.stepFactor : info.stepBytes, byFactor ? "factor" : "bytes",
               info.warmupIters, info.iters, info.check > 0 ? 1 : 0);
  for (const BaselineInfo& b : info.baselines) {
    std::fprintf(out, "# Baseline %s: %s\n", b.name.c_str(), b.version.c_str());
  }
  std::fprintf(out, "#\n# Using devices\n");
}

void printTableHeader(FILE* out, const std::vector<BaselineInfo>& baselines, bool membound) {
  // Each measurement takes 32 characters: nccl-tests' two, then one per baseline.
  std::fprintf(out, "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          ", "",
               "", "", "", "");
  for (const BaselineInfo& b : baselines) {
    const std::string title = b.name + " (out-of-place)";
    const size_t pad = title.size() < 32 ? 32 - title.size() : 0;
    std::fprintf(out, "%*s%s%*s", static_cast<int>(pad - pad / 2), "", title.c_str(), static_cast<int>(pad / 2), "");
  }
  std::fprintf(out, "\n# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s", "size", "count", "type",
               "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  for (const BaselineInfo& b : baselines) {
    std::fprintf(out, "  %7s  %6s %6s  %6s", "time", "busbw", "#wrong", ("x " + b.name).c_str());
  }
  if (membound) std::fprintf(out, "  %7s  %6s  %6s  %6s", "memcpy", "memcpy", "bound", "%bound");
  std::fprintf(out, "\n# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s", "(B)", "(elements)", "",
               "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  for (size_t i = 0; i < baselines.size(); ++i) std::fprintf(out, "  %7s  %6s  %5s  %6s", "(us)", "(GB/s)", "", "");
  if (membound) std::fprintf(out, "  %7s  %6s  %6s  %6s", "(us)", "(GB/s)", "(GB/s)", "");
  std::fprintf(out, "\n");
}

void printTableRow(FILE* out, const Row& row) {
  std::fprintf(out, "%12zu  %12zu  %8s  %6s  %6d", row.bytes, row.count, row.type.c_str(), row.redop.c_str(), row.root);
  for (const Measurement* m : {&row.outOfPlace, &row.inPlace}) {
    std::string wrong = m->wrong < 0 ? "N/A" : std::to_string(m->wrong);
    std::fprintf(out, "  %7s  %6.2f  %6.2f  %5s", formatTime(m->timeUs).c_str(), m->algBw, m->busBw, wrong.c_str());
  }
  for (const BaselineMeasurement& b : row.baselines) {
    if (!b.supported) {
      std::fprintf(out, "  %7s  %6s  %5s  %6s", "n/a", "n/a", "n/a", "n/a");
      continue;
    }
    std::string wrong = b.m.wrong < 0 ? "N/A" : std::to_string(b.m.wrong);
    char ratio[32] = "n/a";
    if (std::isfinite(b.ratio)) std::snprintf(ratio, sizeof(ratio), "%6.2f", b.ratio);
    std::fprintf(out, "  %7s  %6.2f  %5s  %6s", formatTime(b.m.timeUs).c_str(), b.m.busBw, wrong.c_str(), ratio);
  }
  if (!std::isnan(row.boundBusBw)) {
    std::fprintf(out, "  %7s  %6.2f  %6.2f  %5.0f%%", formatTime(row.memcpyUs).c_str(), row.memcpyGBs, row.boundBusBw,
                 100.0 * row.boundShare);
  }
  std::fprintf(out, "\n");
}

bool RunSummary::failed() const {
  if (failedRuns > 0) return true;
  for (int f : baselineFailedRuns) {
    if (f > 0) return true;
  }
  return false;
}

RunSummary summarize(const std::vector<Row>& rows, size_t baselines) {
  RunSummary s;
  double busBwSum = 0;
  for (const Row& r : rows) {
    s.failedRuns += (r.outOfPlace.wrong > 0) + (r.inPlace.wrong > 0);
    busBwSum += r.outOfPlace.busBw + r.inPlace.busBw;
  }
  s.avgBusBw = rows.empty() ? 0.0 : busBwSum / static_cast<double>(2 * rows.size());
  s.baselineFailedRuns.assign(baselines, 0);
  s.baselineAvgBusBw.assign(baselines, 0.0);
  for (size_t b = 0; b < baselines; ++b) {
    size_t measured = 0;
    for (const Row& r : rows) {
      if (!r.baselines[b].supported) continue;
      s.baselineFailedRuns[b] += r.baselines[b].m.wrong > 0;
      s.baselineAvgBusBw[b] += r.baselines[b].m.busBw;
      ++measured;
    }
    if (measured > 0) s.baselineAvgBusBw[b] /= static_cast<double>(measured);
  }
  return s;
}

void printRunFooter(FILE* out, const RunInfo& info, const RunSummary& summary) {
  std::fprintf(out, "# Out of bounds values : %d %s\n", summary.failedRuns, summary.failedRuns ? "FAILED" : "OK");
  std::fprintf(out, "# Avg bus bandwidth    : %g \n", summary.avgBusBw);
  std::fprintf(out, "#\n");
  for (size_t b = 0; b < info.baselines.size(); ++b) {
    const int failed = summary.baselineFailedRuns[b];
    std::fprintf(out, "# Baseline %-10s : wrong results in %d runs %s, avg bus bandwidth %g\n",
                 info.baselines[b].name.c_str(), failed, failed ? "FAILED" : "OK", summary.baselineAvgBusBw[b]);
  }
}

bool writeJson(const std::string& path, const RunInfo& info, const std::vector<Row>& rows, int failedRuns,
               double avgBusBw) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return false;
  std::fprintf(f, "{\n  \"environment\": {\n");
  std::fprintf(f, "    \"hostname\": %s,\n", jsonString(info.hostname).c_str());
  std::fprintf(f, "    \"nranks\": %d,\n", info.nranks);
  std::fprintf(f, "    \"collective\": %s,\n", jsonString(info.collective).c_str());
  std::fprintf(f, "    \"dtype\": %s,\n", jsonString(info.dtype).c_str());
  std::fprintf(f, "    \"op\": %s,\n", jsonString(info.op).c_str());
  std::fprintf(f, "    \"root\": %d,\n", info.root);
  std::fprintf(f, "    \"transport\": %s,\n", jsonString(info.transport).c_str());
  std::fprintf(f, "    \"memory\": %s,\n", jsonString(info.memory).c_str());
  std::fprintf(f, "    \"algorithm\": %s,\n", jsonString(info.algorithm).c_str());
  std::fprintf(f, "    \"strata_version\": %s,\n", jsonString(info.strataVersion).c_str());
  std::fprintf(f, "    \"strata_version_code\": %d,\n", info.strataVersionCode);
  std::fprintf(f, "    \"date\": %s,\n", jsonString(info.date).c_str());
  std::fprintf(f, "    \"minbytes\": %zu,\n    \"maxbytes\": %zu,\n", info.minBytes, info.maxBytes);
  std::fprintf(f, "    \"stepbytes\": %zu,\n    \"stepfactor\": %zu,\n", info.stepBytes, info.stepFactor);
  std::fprintf(f, "    \"iters\": %d,\n    \"warmup_iters\": %d,\n    \"check\": %d,\n", info.iters, info.warmupIters,
               info.check);
  std::fprintf(f, "    \"baselines\": [");
  for (size_t i = 0; i < info.baselines.size(); ++i) {
    std::fprintf(f, "%s{\"name\": %s, \"version\": %s}", i == 0 ? "" : ", ", jsonString(info.baselines[i].name).c_str(),
                 jsonString(info.baselines[i].version).c_str());
  }
  std::fprintf(f, "]\n  },\n");
  std::fprintf(f, "  \"results\": [");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::fprintf(f, "%s\n    {\"size\": %zu, \"count\": %zu, \"type\": %s, \"redop\": %s, \"root\": %d, ",
                 i == 0 ? "" : ",", r.bytes, r.count, jsonString(r.type).c_str(), jsonString(r.redop).c_str(), r.root);
    if (!r.algorithm.empty())
      std::fprintf(f, "\"algorithm\": %s, \"predicted_us\": %s, ", jsonString(r.algorithm).c_str(),
                   jsonNumber(r.predictedUs).c_str());
    writeMeasurementJson(f, "out_of_place", r.outOfPlace);
    std::fprintf(f, ", ");
    writeMeasurementJson(f, "in_place", r.inPlace);
    if (!info.baselines.empty()) {
      std::fprintf(f, ", \"baselines\": {");
      for (size_t b = 0; b < info.baselines.size() && b < r.baselines.size(); ++b) {
        if (b > 0) std::fprintf(f, ", ");
        writeBaselineJson(f, info.baselines[b].name, r.baselines[b]);
      }
      std::fprintf(f, "}");
    }
    if (!std::isnan(r.boundBusBw)) {
      std::fprintf(f,
                   ", \"membound\": {\"memcpy_time_us\": %s, \"memcpy_aggregate_gbps\": %s, \"bound_busbw_gbps\": %s, "
                   "\"share_of_bound\": %s}",
                   jsonNumber(r.memcpyUs).c_str(), jsonNumber(r.memcpyGBs).c_str(), jsonNumber(r.boundBusBw).c_str(),
                   jsonNumber(r.boundShare).c_str());
    }
    std::fprintf(f, "}");
  }
  std::fprintf(f, "\n  ],\n  \"out_of_bounds\": %d,\n  \"avg_busbw_gbps\": %s\n}\n", failedRuns,
               jsonNumber(avgBusBw).c_str());
  bool ok = std::ferror(f) == 0;
  return std::fclose(f) == 0 && ok;
}

bool writeCsv(const std::string& path, const RunInfo& info, const std::vector<Row>& rows) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return false;
  // One self-contained table: the description of the run is repeated on every row, so rows from many
  // runs (hosts, transports, algorithms) can be concatenated and compared.
  std::fprintf(f,
               "collective,size_bytes,count,type,redop,root,"
               "oop_time_us,oop_algbw_gbps,oop_busbw_gbps,oop_wrong,ip_time_us,ip_algbw_gbps,ip_busbw_gbps,ip_wrong,"
               "nranks,hostname,transport,algorithm,strata_version,date");
  for (const BaselineInfo& b : info.baselines) {
    const std::string n = csvField(b.name);
    std::fprintf(f, ",%s_algorithm,%s_time_us,%s_busbw_gbps,%s_wrong,x_%s", n.c_str(), n.c_str(), n.c_str(), n.c_str(),
                 n.c_str());
  }
  std::fprintf(f, "\n");
  for (const Row& r : rows) {
    std::fprintf(f, "%s,%zu,%zu,%s,%s,%d", csvField(info.collective).c_str(), r.bytes, r.count,
                 csvField(r.type).c_str(), csvField(r.redop).c_str(), r.root);
    for (const Measurement* m : {&r.outOfPlace, &r.inPlace}) {
      std::fprintf(f, ",%.3f,%.4f,%.4f,%s", m->timeUs, m->algBw, m->busBw,
                   m->wrong < 0 ? "" : std::to_string(m->wrong).c_str());
    }
    std::fprintf(f, ",%d,%s,%s,%s,%s,%s", info.nranks, csvField(info.hostname).c_str(),
                 csvField(info.transport).c_str(), csvField(info.algorithm).c_str(),
                 csvField(info.strataVersion).c_str(), csvField(info.date).c_str());
    // Baselines come last, so the columns before them stay where they were; empty fields are n/a.
    for (size_t b = 0; b < info.baselines.size(); ++b) {
      const BaselineMeasurement* m = b < r.baselines.size() ? &r.baselines[b] : nullptr;
      if (m == nullptr || !m->supported) {
        std::fprintf(f, ",,,,,");
        continue;
      }
      std::fprintf(f, ",%s,%.3f,%.4f,%s,%s", csvField(m->algorithm).c_str(), m->m.timeUs, m->m.busBw,
                   m->m.wrong < 0 ? "" : std::to_string(m->m.wrong).c_str(),
                   std::isfinite(m->ratio) ? std::to_string(m->ratio).c_str() : "");
    }
    std::fprintf(f, "\n");
  }
  bool ok = std::ferror(f) == 0;
  return std::fclose(f) == 0 && ok;
}

}  // namespace strata::perf
