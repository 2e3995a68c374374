#include "perf_run.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "baseline.h"
#include "buffers.h"
#include "measure.h"
#include "perf_comm.h"
#include "report.h"
#include "strata/strata.h"

namespace strata::perf {
namespace {

// Strata reads its configuration when the communicator is made, so the options become variables first.
// --algo as STRATA_ALGO specs: one per algorithm of a ';'-separated list (NAME becomes <collective>:NAME).
std::vector<std::string> algoSpecs(const Options& opt) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= opt.algo.size()) {
    const size_t end = std::min(opt.algo.find(';', at), opt.algo.size());
    const std::string item = opt.algo.substr(at, end - at);
    if (!item.empty())
      out.push_back(item.find(':') != std::string::npos ? item : std::string(opt.coll->name) + ":" + item);
    at = end + 1;
  }
  return out;
}

void applyEnvironment(const Options& opt) {
  if (opt.timeoutSec > 0) setenv("STRATA_TIMEOUT_MS", std::to_string(opt.timeoutSec * 1000LL).c_str(), 1);
  if (!opt.transport.empty()) setenv("STRATA_TRANSPORT", opt.transport.c_str(), 1);
  const std::vector<std::string> specs = algoSpecs(opt);
  if (specs.size() == 1) setenv("STRATA_ALGO", specs[0].c_str(), 1);
}

// The sizes of the sweep: minbytes, then times the factor (or plus stepbytes) up to maxbytes.
std::vector<size_t> sweepSizes(const Options& opt) {
  std::vector<size_t> out;
  for (size_t size = opt.minBytes; size <= opt.maxBytes;) {
    out.push_back(size);
    size_t next = opt.stepFactor > 1 ? size * opt.stepFactor : size + opt.stepBytes;
    if (next == 0 && opt.stepFactor > 1) next = 1;  // -b 0 with a factor would never grow
    if (next <= size) break;
    size = next;
  }
  return out;
}

// Each baseline starts on every rank (collectively); one that cannot start ends the run.
std::vector<std::unique_ptr<Baseline>> startBaselines(const Options& opt, const PerfComm& comm) {
  BaselineSettings settings{comm.get(), comm.rank(), comm.nranks(), std::chrono::milliseconds(opt.timeoutSec * 1000LL)};
  settings.deviceBuffers = opt.device;
  std::vector<std::unique_ptr<Baseline>> baselines;
  for (const std::string& name : opt.baselines) {
    try {
      baselines.push_back(makeBaseline(name, settings));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "strata-perf: %s\n", e.what());
      std::exit(kExitFailure);
    }
  }
  return baselines;
}

RunInfo describeRun(const Options& opt, const PerfComm& comm, const std::vector<std::unique_ptr<Baseline>>& baselines) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  int code = 0;
  comm.check(strataGetVersion(&code), "strataGetVersion");
  char version[32];
  std::snprintf(version, sizeof(version), "%d.%d.%d", code / 10000, code / 100 % 100, code % 100);
  char date[64];
  std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", &utc);
  const char* transport = std::getenv("STRATA_TRANSPORT");
  const char* algo = std::getenv("STRATA_ALGO");
  RunInfo info;
  info.hostname = host;
  info.nranks = comm.nranks();
  info.collective = opt.coll->name;
  info.dtype = opt.dtypeArg;
  info.op = opt.coll->reduces ? opt.opArg : "none";
  info.root = opt.coll->rooted ? opt.root : -1;
  info.transport = transport && *transport ? transport : "auto";
  info.algorithm = algo && *algo ? algo : "auto";
  info.strataVersion = version;
  info.strataVersionCode = code;
  info.date = date;
  info.minBytes = opt.minBytes;
  info.maxBytes = opt.maxBytes;
  info.stepBytes = opt.stepBytes;
  info.stepFactor = opt.stepFactor;
  info.iters = opt.iters;
  info.warmupIters = opt.warmupIters;
  info.check = opt.check;
  info.memory = opt.device ? "device" : "host";
  for (const auto& b : baselines) info.baselines.push_back({b->name(), b->version()});
  return info;
}

// Every rank's device line, gathered to rank 0 and printed there in rank order.
void printDevices(const Options& opt, PerfComm& comm, const PerfBuffers& buffers, const RunInfo& info) {
  constexpr size_t kLine = 256;
  char line[kLine] = {0};
  const int pid = static_cast<int>(getpid());
  if (opt.device) {
    std::snprintf(line, kLine, "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s]\n", comm.rank(), 0, pid,
                  info.hostname.c_str(), buffers.deviceIndex(), buffers.deviceName().c_str());
  } else {
    std::snprintf(line, kLine, "#  Rank %2d Group %2d Pid %6d on %10s device %2d [cpu] host memory\n", comm.rank(), 0,
                  pid, info.hostname.c_str(), 0);
  }
  std::vector<char> all(kLine * static_cast<size_t>(comm.nranks()));
  comm.setStep("(gathering host names)");
  comm.check(strataAllGather(line, all.data(), kLine, strataUint8, comm.get(), nullptr), "strataAllGather");
  comm.setStep("");
  if (comm.rank() != 0) return;
  for (int r = 0; r < comm.nranks(); ++r) {
    const char* l = all.data() + kLine * static_cast<size_t>(r);
    std::fwrite(l, 1, strnlen(l, kLine), stdout);
  }
}

}  // namespace

int runSweep(const Options& opt, PerfComm& comm, const PerfBuffers& buffers,
             std::vector<std::unique_ptr<Baseline>>& baselines);

int runPerf(const Options& opt) {
  applyEnvironment(opt);
  PerfComm comm;
  const int rank = comm.rank();
  if (opt.coll->rooted && opt.root >= comm.nranks()) {
    if (rank == 0) {
      std::fprintf(stderr, "strata-perf: -r/--root %d is not a rank of %d\n\n", opt.root, comm.nranks());
      printUsage(stderr);
    }
    return kExitUsage;
  }
  const PerfBuffers buffers(opt.maxBytes, opt.device, rank);
  if (opt.device && comm.nranks() > 1 && opt.maxBytes >= sizeof(float)) {
    // One device all-reduce of one element first, as a training job's first step: it sets up what a communicator's
    // first device collective sets up (CUDA IPC, the device executor), which send/recv alone cannot, so a sendrecv
    // sweep measures the path it will have in a job.
    comm.setStep("the set-up all-reduce on device buffers");
    comm.check(strataAllReduce(buffers.callSend(), buffers.callRecv(), 1, strataFloat32, strataSum, comm.get(),
                               buffers.stream()),
               "strataAllReduce");
    comm.orExit([&] { buffers.syncStream(); });
    comm.setStep("");
  }
  std::vector<std::unique_ptr<Baseline>> baselines = startBaselines(opt, comm);
  // Several algorithms: each on a communicator split from the launched ranks with it forced, one table each.
  const std::vector<std::string> specs = algoSpecs(opt);
  int exitCode = 0;
  for (size_t a = 0; a < std::max<size_t>(1, specs.size()); ++a) {
    if (specs.size() > 1) {
      comm.useAlgorithm(specs[a]);
      setenv("STRATA_ALGO", specs[a].c_str(), 1);  // for the JSON's "algorithm"
      if (comm.rank() == 0) {
        std::printf("%s# Strata algorithm: %s (STRATA_ALGO, %zu of %zu in this launch)\n", a ? "#\n" : "",
                    specs[a].c_str(), a + 1, specs.size());
        std::fflush(stdout);
      }
    }
    exitCode = std::max(exitCode, runSweep(opt, comm, buffers, baselines));
  }
  // No rank leaves before rank 0 has written everything: a launcher that sees one rank fail (a wrong
  // result fails every rank) terminates the others.
  comm.barrier();
  baselines.clear();  // MPI_Finalize, Gloo's connections closed, while every rank is still here
  comm.destroy();
  return exitCode;
}

int runSweep(const Options& opt, PerfComm& comm, const PerfBuffers& buffers,
             std::vector<std::unique_ptr<Baseline>>& baselines) {
  const int rank = comm.rank();
  const RunInfo info = describeRun(opt, comm, baselines);
  if (rank == 0) {
    printRunHeader(stdout, info);
    if (opt.injectFault) {
      std::fprintf(stderr, "strata-perf: --inject-fault: one result element will be corrupted on purpose\n");
    }
  }
  printDevices(opt, comm, buffers, info);
  const bool membound = opt.membound && opt.coll->is(strataCollAllReduce);
  if (rank == 0) {
    std::printf("#\n");
    printTableHeader(stdout, info.baselines, membound);
    std::fflush(stdout);
  }

  // The sweep: every type, every op (one, "none", for collectives that do not reduce), every size.
  RowMeasurer measurer(opt, comm, buffers, baselines);
  const std::vector<size_t> sizes = sweepSizes(opt);
  std::vector<Row> rows;
  for (const DtypeInfo* type : opt.dtypes) {
    const std::vector<OpInfo> ops = opt.coll->reduces ? opt.ops : std::vector<OpInfo>{{strataSum, "none"}};
    for (const OpInfo& op : ops) {
      size_t done = 0;
      for (size_t bytes : sizes) {
        Row row = measurer.measureRow(*type, op, bytes);
        ++done;
        if (rank == 0) {
          printTableRow(stdout, row);
          std::fflush(stdout);
          if (opt.progress) {
            std::fprintf(stderr, "strata-perf: %s %s %s: %zu bytes done (%zu/%zu), %.2f / %.2f us\n", opt.coll->name,
                         type->name, op.name, row.bytes, done, sizes.size(), row.outOfPlace.timeUs, row.inPlace.timeUs);
          }
        }
        rows.push_back(std::move(row));
      }
    }
  }

  const RunSummary summary = summarize(rows, baselines.size());
  int exitCode = summary.failed() ? kExitFailure : 0;
  if (rank == 0) {
    printRunFooter(stdout, info, summary);
    std::fflush(stdout);
    if (!opt.jsonPath.empty() && !writeJson(opt.jsonPath, info, rows, summary.failedRuns, summary.avgBusBw)) {
      std::fprintf(stderr, "strata-perf: cannot write %s: %s\n", opt.jsonPath.c_str(), std::strerror(errno));
      exitCode = kExitFailure;
    }
    if (!opt.csvPath.empty() && !writeCsv(opt.csvPath, info, rows)) {
      std::fprintf(stderr, "strata-perf: cannot write %s: %s\n", opt.csvPath.c_str(), std::strerror(errno));
      exitCode = kExitFailure;
    }
  }
  return exitCode;
}

}  // namespace strata::perf
