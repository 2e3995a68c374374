// strata-perf's output: the nccl-tests table on stdout, and the same rows as JSON or CSV with a
// description of the run.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace strata::perf {

/// One measurement: out-of-place or in-place.
struct Measurement {
  double timeUs = 0;
  double algBw = 0;  // GB/s (1e9 bytes per second)
  double busBw = 0;
  int64_t wrong = -1;  // -1 when not checked
};

/// One row of the table: a size, a type and an op, measured out of place and in place.
struct Row {
  size_t bytes = 0;
  size_t count = 0;
  std::string type, redop;
  int root = -1;
  Measurement outOfPlace, inPlace;
};

/// What ran where; written with the rows by --json and --csv.
struct RunInfo {
  std::string hostname, collective, dtype, op, transport, algorithm, strataVersion, date;
  int nranks = 0, strataVersionCode = 0;
  size_t minBytes = 0, maxBytes = 0, stepBytes = 0, stepFactor = 0;
  int iters = 0, warmupIters = 0, check = 0, root = 0;
};

/// nccl-tests' column headers (three lines).
void printTableHeader(FILE* out);
/// One row in nccl-tests' widths, with its newline.
void printTableRow(FILE* out, const Row& row);
/// nccl-tests' summary lines.
void printTableFooter(FILE* out, int failedRuns, double avgBusBw);

/// Writes the run and its rows; returns false (with errno set) if the file cannot be written.
bool writeJson(const std::string& path, const RunInfo& info, const std::vector<Row>& rows, int failedRuns,
               double avgBusBw);
bool writeCsv(const std::string& path, const RunInfo& info, const std::vector<Row>& rows);

}  // namespace strata::perf
