// strata-perf's output: the nccl-tests table on stdout, and the same rows as JSON or CSV with a
// description of the run. Baselines (--baseline) add their columns after nccl-tests' own.
#pragma once

#include <cmath>
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

/// A baseline's measurement of a row: the same call, out of place.
struct BaselineMeasurement {
  bool supported = false;  // false: the library cannot run this type or op (n/a)
  std::string algorithm;   // the fastest of the library's algorithms for the call
  Measurement m;
  double ratio = NAN;  // Strata's out-of-place busbw / this busbw (the "x <name>" column)
};

/// One row of the table: a size, a type and an op, measured out of place and in place.
struct Row {
  size_t bytes = 0;
  size_t count = 0;
  std::string type, redop;
  int root = -1;
  Measurement outOfPlace, inPlace;
  std::vector<BaselineMeasurement> baselines;  // in RunInfo::baselines' order
  // --membound (all-reduce): concurrent memcpy of the same buffers on every rank, the busbw bound derived
  // from it, and Strata's out-of-place busbw as a share of that bound. NAN when not measured.
  double memcpyUs = NAN, memcpyGBs = NAN, boundBusBw = NAN, boundShare = NAN;
  // The algorithm Strata chose (or was forced to use) and the cost model's predicted time (NAN: none).
  std::string algorithm;
  double predictedUs = NAN;
};

/// A library measured next to Strata.
struct BaselineInfo {
  std::string name;     // "mpi", "gloo"
  std::string version;  // e.g. "Open MPI v4.1.4, ..."
};

/// What ran where; written with the rows by --json and --csv.
struct RunInfo {
  std::string hostname, collective, dtype, op, transport, algorithm, strataVersion, date;
  std::string memory = "host";  // "host", or "device" (--device: CUDA buffers, each call timed to completion)
  int nranks = 0, strataVersionCode = 0;
  size_t minBytes = 0, maxBytes = 0, stepBytes = 0, stepFactor = 0;
  int iters = 0, warmupIters = 0, check = 0, root = 0;
  std::vector<BaselineInfo> baselines;
};

/// nccl-tests' header: the run's settings, the baselines' versions, and "# Using devices" (each rank's
/// device line follows).
void printRunHeader(FILE* out, const RunInfo& info);

/// nccl-tests' column headers (three lines), then four columns per baseline: time, busbw, #wrong, and
/// "x <name>" (Strata's out-of-place busbw over the baseline's).
void printTableHeader(FILE* out, const std::vector<BaselineInfo>& baselines = {}, bool membound = false);
/// One row in nccl-tests' widths, with its newline.
void printTableRow(FILE* out, const Row& row);

/// What the footer says: the runs with a wrong result and the average bus bandwidth, Strata's (over both
/// modes of every row) and each baseline's (over the rows it could run).
struct RunSummary {
  int failedRuns = 0;
  double avgBusBw = 0;
  std::vector<int> baselineFailedRuns;  // in RunInfo::baselines' order
  std::vector<double> baselineAvgBusBw;
  /// A wrong result, Strata's or a baseline's: a baseline's would compare Strata with a bug.
  bool failed() const;
};
RunSummary summarize(const std::vector<Row>& rows, size_t baselines);
/// nccl-tests' summary lines, then one line per baseline.
void printRunFooter(FILE* out, const RunInfo& info, const RunSummary& summary);

/// Writes the run and its rows; returns false (with errno set) if the file cannot be written.
bool writeJson(const std::string& path, const RunInfo& info, const std::vector<Row>& rows, int failedRuns,
               double avgBusBw);
bool writeCsv(const std::string& path, const RunInfo& info, const std::vector<Row>& rows);

}  // namespace strata::perf
