// strata-perf: nccl-tests for Strata. Same options, same sizes, same table, through the public C API only,
// so its numbers compare line by line with all_reduce_perf & co. Every rank starts from the launcher's
// environment (strata-run, torchrun, mpirun, srun); rank 0 prints.
//
// Per size and per mode (out of place, then in place): the check runs (inputs every type holds exactly,
// every element of the result compared), the warm-up runs, then the timed runs. Each timed run is
// measured on its own; a row reports the median, and the slowest rank's median, as the time. Baselines
// (--baseline mpi,gloo) then run the same call out of place, through the same steps, on the same buffers.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "baseline.h"
#include "collective.h"
#include "device.h"
#include "dtype.h"
#include "options.h"
#include "report.h"
#include "strata/strata.h"

namespace strata::perf {
namespace {

// ---- the run -------------------------------------------------------------------------------------------

class PerfRun {
 public:
  explicit PerfRun(Options opt) : opt_(std::move(opt)) {}

  int run() {
    applyEnvironment();
    check(strataCommInitFromEnv(&comm_), "strataCommInitFromEnv");
    check(strataCommUserRank(comm_, &rank_), "strataCommUserRank");
    check(strataCommCount(comm_, &nranks_), "strataCommCount");
    if (opt_.coll->rooted && opt_.root >= nranks_) {
      if (rank_ == 0) {
        std::fprintf(stderr, "strata-perf: -r/--root %d is not a rank of %d\n\n", opt_.root, nranks_);
        printUsage(stderr);
      }
      strataCommDestroy(comm_);
      return kExitUsage;
    }
    allocateBuffers();
    startBaselines();
    describeRun();
    if (rank_ == 0) {
      printHeader();
      if (opt_.injectFault) {
        std::fprintf(stderr, "strata-perf: --inject-fault: one result element will be corrupted on purpose\n");
      }
    }
    printDevices();
    if (rank_ == 0) {
      std::printf("#\n");
      printTableHeader(stdout, info_.baselines, opt_.membound && opt_.coll->is(strataCollAllReduce));
      std::fflush(stdout);
    }

    const size_t nsizes = sizes().size();
    for (const DtypeInfo* type : opt_.dtypes) {
      std::vector<OpInfo> ops = opt_.coll->reduces ? opt_.ops : std::vector<OpInfo>{{strataSum, "none"}};
      for (const OpInfo& op : ops) {
        size_t done = 0;
        for (size_t bytes : sizes()) {
          Row row = measureRow(*type, op, bytes);
          ++done;
          if (rank_ == 0) {
            printTableRow(stdout, row);
            std::fflush(stdout);
            if (opt_.progress) {
              std::fprintf(stderr, "strata-perf: %s %s %s: %zu bytes done (%zu/%zu), %.2f / %.2f us\n", opt_.coll->name,
                           type->name, op.name, row.bytes, done, nsizes, row.outOfPlace.timeUs, row.inPlace.timeUs);
            }
          }
          rows_.push_back(std::move(row));
        }
      }
    }

    int failedRuns = 0;
    double busBwSum = 0;
    for (const Row& r : rows_) {
      failedRuns += (r.outOfPlace.wrong > 0) + (r.inPlace.wrong > 0);
      busBwSum += r.outOfPlace.busBw + r.inPlace.busBw;
    }
    const double avgBusBw = rows_.empty() ? 0.0 : busBwSum / static_cast<double>(2 * rows_.size());
    int exitCode = failedRuns > 0 ? kExitFailure : 0;
    // A baseline with a wrong result fails the run too: its numbers would compare Strata with a bug.
    std::vector<int> baselineFailedRuns(baselines_.size(), 0);
    std::vector<double> baselineAvgBusBw(baselines_.size(), 0.0);
    for (size_t b = 0; b < baselines_.size(); ++b) {
      size_t measured = 0;
      for (const Row& r : rows_) {
        if (!r.baselines[b].supported) continue;
        baselineFailedRuns[b] += r.baselines[b].m.wrong > 0;
        baselineAvgBusBw[b] += r.baselines[b].m.busBw;
        ++measured;
      }
      if (measured > 0) baselineAvgBusBw[b] /= static_cast<double>(measured);
      if (baselineFailedRuns[b] > 0) exitCode = kExitFailure;
    }
    if (rank_ == 0) {
      printTableFooter(stdout, failedRuns, avgBusBw);
      for (size_t b = 0; b < baselines_.size(); ++b) {
        printBaselineFooter(stdout, info_.baselines[b], baselineFailedRuns[b], baselineAvgBusBw[b]);
      }
      std::fflush(stdout);
      if (!opt_.jsonPath.empty() && !writeJson(opt_.jsonPath, info_, rows_, failedRuns, avgBusBw)) {
        std::fprintf(stderr, "strata-perf: cannot write %s: %s\n", opt_.jsonPath.c_str(), std::strerror(errno));
        exitCode = kExitFailure;
      }
      if (!opt_.csvPath.empty() && !writeCsv(opt_.csvPath, info_, rows_)) {
        std::fprintf(stderr, "strata-perf: cannot write %s: %s\n", opt_.csvPath.c_str(), std::strerror(errno));
        exitCode = kExitFailure;
      }
    }
    // No rank leaves before rank 0 has written everything: a launcher that sees one rank fail (a wrong
    // result fails every rank) terminates the others.
    check(strataBarrier(comm_, nullptr), "strataBarrier");
    baselines_.clear();  // MPI_Finalize, Gloo's connections closed, while every rank is still here
    check(strataCommDestroy(comm_), "strataCommDestroy");
    comm_ = nullptr;
    std::free(sendbuff_);
    std::free(recvbuff_);
    if (opt_.device) {
      deviceFree(devSend_);
      deviceFree(devRecv_);
      streamDestroy(stream_);
    }
    return exitCode;
  }

 private:
  // Strata reads its configuration when the communicator is made, so the options become variables first.
  void applyEnvironment() {
    if (opt_.timeoutSec > 0) setenv("STRATA_TIMEOUT_MS", std::to_string(opt_.timeoutSec * 1000LL).c_str(), 1);
    if (!opt_.transport.empty()) setenv("STRATA_TRANSPORT", opt_.transport.c_str(), 1);
    if (!opt_.algo.empty()) {
      std::string spec =
          opt_.algo.find(':') != std::string::npos ? opt_.algo : std::string(opt_.coll->name) + ":" + opt_.algo;
      setenv("STRATA_ALGO", spec.c_str(), 1);
    }
  }

  // Any Strata error ends this rank; the launcher takes the others down.
  void check(strataResult_t rc, const char* what) {
    if (rc == strataSuccess) return;
    std::string rankText = rank_ >= 0 ? std::to_string(rank_) : "?";
    std::fprintf(stderr, "strata-perf: rank %s: %s%s%s failed: %s: %s\n", rankText.c_str(), what,
                 step_.empty() ? "" : " ", step_.c_str(), strataGetErrorString(rc), strataGetLastError(comm_));
    std::exit(kExitFailure);
  }

  std::vector<size_t> sizes() const {
    std::vector<size_t> out;
    for (size_t size = opt_.minBytes; size <= opt_.maxBytes;) {
      out.push_back(size);
      size_t next = opt_.stepFactor > 1 ? size * opt_.stepFactor : size + opt_.stepBytes;
      if (next == 0 && opt_.stepFactor > 1) next = 1;  // -b 0 with a factor would never grow
      if (next <= size) break;
      size = next;
    }
    return out;
  }

  // One send and one receive buffer of maxbytes serve every size, type and mode (as in nccl-tests).
  void allocateBuffers() {
    const size_t page = 4096;
    const size_t bytes = (std::max<size_t>(opt_.maxBytes, 1) + page - 1) / page * page;
    sendbuff_ = std::aligned_alloc(page, bytes);
    recvbuff_ = std::aligned_alloc(page, bytes);
    if (sendbuff_ == nullptr || recvbuff_ == nullptr) {
      std::fprintf(stderr, "strata-perf: rank %d: cannot allocate 2 x %zu bytes\n", rank_, bytes);
      std::exit(kExitFailure);
    }
    // Touch every page now, so no timed run pays for the first fault.
    std::memset(sendbuff_, 0, bytes);
    std::memset(recvbuff_, 0, bytes);
    if (!opt_.device) return;
    // Device mode: the host buffers hold inputs and results for the checks; the calls use device copies.
    try {
      const char* lr = std::getenv("LOCAL_RANK");
      deviceName_ = selectDevice(lr ? std::atoi(lr) : rank_, &deviceIndex_);
      devSend_ = deviceAlloc(bytes);
      devRecv_ = deviceAlloc(bytes);
      stream_ = streamCreate();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "strata-perf: rank %d: --device: %s\n", rank_, e.what());
      std::exit(kExitFailure);
    }
  }
  void* callSend() const { return opt_.device ? devSend_ : sendbuff_; }
  void* callRecv() const { return opt_.device ? devRecv_ : recvbuff_; }

  // Each baseline starts on every rank (collectively); one that cannot start ends the run.
  void startBaselines() {
    BaselineSettings settings{comm_, rank_, nranks_, std::chrono::milliseconds(opt_.timeoutSec * 1000LL)};
    settings.deviceBuffers = opt_.device;
    for (const std::string& name : opt_.baselines) {
      try {
        baselines_.push_back(makeBaseline(name, settings));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "strata-perf: %s\n", e.what());
        std::exit(kExitFailure);
      }
    }
  }

  void describeRun() {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    int code = 0;
    check(strataGetVersion(&code), "strataGetVersion");
    char version[32];
    std::snprintf(version, sizeof(version), "%d.%d.%d", code / 10000, code / 100 % 100, code % 100);
    char date[64];
    std::time_t now = std::time(nullptr);
    std::tm utc{};
    gmtime_r(&now, &utc);
    std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", &utc);
    const char* transport = std::getenv("STRATA_TRANSPORT");
    const char* algo = std::getenv("STRATA_ALGO");
    info_.hostname = host;
    info_.nranks = nranks_;
    info_.collective = opt_.coll->name;
    info_.dtype = opt_.dtypeArg;
    info_.op = opt_.coll->reduces ? opt_.opArg : "none";
    info_.root = opt_.coll->rooted ? opt_.root : -1;
    info_.transport = transport && *transport ? transport : "auto";
    info_.algorithm = algo && *algo ? algo : "auto";
    info_.strataVersion = version;
    info_.strataVersionCode = code;
    info_.date = date;
    info_.minBytes = opt_.minBytes;
    info_.maxBytes = opt_.maxBytes;
    info_.stepBytes = opt_.stepBytes;
    info_.stepFactor = opt_.stepFactor;
    info_.iters = opt_.iters;
    info_.warmupIters = opt_.warmupIters;
    info_.check = opt_.check;
    info_.memory = opt_.device ? "device" : "host";
    for (const auto& b : baselines_) info_.baselines.push_back({b->name(), b->version()});
  }

  void printHeader() const {
    const bool byFactor = opt_.stepFactor > 1;
    std::printf(
        "# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d agg iters: 1 "
        "validation: %d graph: 0\n",
        opt_.minBytes, opt_.maxBytes, byFactor ? opt_.stepFactor : opt_.stepBytes, byFactor ? "factor" : "bytes",
        opt_.warmupIters, opt_.iters, opt_.check > 0 ? 1 : 0);
    for (const BaselineInfo& b : info_.baselines) std::printf("# Baseline %s: %s\n", b.name.c_str(), b.version.c_str());
    std::printf("#\n# Using devices\n");
  }

  // Every rank's line, gathered to rank 0 in rank order.
  void printDevices() {
    constexpr size_t kLine = 256;
    char line[kLine] = {0};
    if (opt_.device) {
      std::snprintf(line, kLine, "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s]\n", rank_, 0,
                    static_cast<int>(getpid()), info_.hostname.c_str(), deviceIndex_, deviceName_.c_str());
    } else {
      std::snprintf(line, kLine, "#  Rank %2d Group %2d Pid %6d on %10s device %2d [cpu] host memory\n", rank_, 0,
                    static_cast<int>(getpid()), info_.hostname.c_str(), 0);
    }
    std::vector<char> all(kLine * static_cast<size_t>(nranks_));
    step_ = "(gathering host names)";
    check(strataAllGather(line, all.data(), kLine, strataUint8, comm_, nullptr), "strataAllGather");
    step_.clear();
    if (rank_ != 0) return;
    for (int r = 0; r < nranks_; ++r) {
      const char* l = all.data() + kLine * static_cast<size_t>(r);
      std::fwrite(l, 1, strnlen(l, kLine), stdout);
    }
  }

  double maxOverRanks(double v) {
    double out = 0;
    check(strataAllReduce(&v, &out, 1, strataFloat64, strataMax, comm_, nullptr), "strataAllReduce");
    return out;
  }
  int64_t sumOverRanks(int64_t v) {
    int64_t out = 0;
    check(strataAllReduce(&v, &out, 1, strataInt64, strataSum, comm_, nullptr), "strataAllReduce");
    return out;
  }

  Row measureRow(const DtypeInfo& type, const OpInfo& op, size_t bytes) {
    CheckContext ctx{
        opt_.coll, &type, op.op, opt_.root, rank_, nranks_, layoutFor(*opt_.coll, bytes, type.size, nranks_)};
    Row row;
    row.bytes = ctx.layout.reportedBytes(type.size);
    row.count = ctx.layout.paramCount;
    row.type = type.name;
    row.redop = op.name;
    row.root = opt_.coll->rooted ? opt_.root : -1;
    explain(ctx, &row);
    row.outOfPlace = measure(ctx, row.bytes, false);
    row.inPlace = measure(ctx, row.bytes, true);
    for (const auto& baseline : baselines_) row.baselines.push_back(measureBaseline(*baseline, ctx, row));
    if (opt_.membound && opt_.coll->is(strataCollAllReduce)) measureMemoryBound(ctx, &row);
    return row;
  }

  // What the selector picks for this row and how long its cost model expects it to take.
  void explain(const CheckContext& ctx, Row* row) {
    if (opt_.coll->isSendRecv()) return;  // no collective of the library: nothing to explain
    char algorithm[64] = "";
    double us = 0;
    check(strataCommExplain(comm_, *opt_.coll->collective, ctx.layout.paramCount, ctx.type->type, algorithm,
                            sizeof(algorithm), &us),
          "strataCommExplain");
    row->algorithm = algorithm;
    row->predictedUs = us > 0 ? us : NAN;
  }

  // The memory-bandwidth bound of an all-reduce of S bytes on n ranks of one host. Buffers larger than the
  // caches must at least be read once (the input, S) and written once (the output, S) by every rank:
  // 2 S per rank, 2 n S in all; the peers' data can pass through the caches. B = the aggregate memcpy
  // bandwidth (bytes read plus written per second with every rank copying its own S at once, timed here on
  // the same buffers). Then t >= 2 n S / B and busbw = 2(n-1)/n * S/t <= (n-1) B / n^2: B/4 at n = 2.
  void measureMemoryBound(const CheckContext& ctx, Row* row) {
    const size_t bytes = ctx.layout.sendCount * ctx.type->size;
    if (bytes == 0) return;
    auto runOnce = [&] { std::memcpy(recvbuff_, sendbuff_, bytes); };
    for (int w = 0; w < opt_.warmupIters; ++w) runOnce();
    std::vector<double> times(static_cast<size_t>(opt_.iters));
    for (double& t : times) {
      check(strataBarrier(comm_, nullptr), "strataBarrier");  // every rank copies at the same time
      auto t0 = std::chrono::steady_clock::now();
      runOnce();
      auto t1 = std::chrono::steady_clock::now();
      t = std::chrono::duration<double, std::micro>(t1 - t0).count();
    }
    std::sort(times.begin(), times.end());
    row->memcpyUs = maxOverRanks(times[times.size() / 2]);
    const double n = nranks_;
    const double aggregate = n * 2.0 * static_cast<double>(bytes) / (row->memcpyUs * 1e-6) / 1e9;  // GB/s
    row->memcpyGBs = aggregate;
    row->boundBusBw = n > 1 ? (n - 1) * aggregate / (n * n) : NAN;
    row->boundShare = n > 1 ? row->outOfPlace.busBw / row->boundBusBw : NAN;
  }

  // Every algorithm the baseline has for the call, each checked and timed like Strata; the row shows the
  // fastest, and the wrong elements of all of them (a broken algorithm must not hide behind a good one).
  BaselineMeasurement measureBaseline(Baseline& baseline, const CheckContext& ctx, const Row& row) {
    const RunBuffers bufs = runBuffers(ctx.layout, ctx.type->size, callSend(), callRecv(), false, rank_);
    const BaselineCall call{opt_.coll, ctx.type, ctx.op, ctx.root, ctx.layout, bufs.send, bufs.recv};
    BaselineMeasurement out;
    int64_t wrong = opt_.check > 0 ? 0 : -1;
    for (const std::string& algorithm : baseline.algorithms(call)) {
      step_ = std::string("(") + baseline.name() + " " + algorithm + ", " + std::to_string(row.bytes) + " bytes, " +
              ctx.type->name + (opt_.coll->reduces ? std::string(", ") + opName(ctx.op) : std::string()) + ")";
      std::unique_ptr<BaselineCollective> coll;
      auto orExit = [&](const std::function<void()>& f) {
        try {
          f();
        } catch (const std::exception& e) {
          std::fprintf(stderr, "strata-perf: %s %s\n", e.what(), step_.c_str());
          std::exit(kExitFailure);
        }
      };
      orExit([&] { coll = baseline.prepare(call, algorithm); });
      auto runOnce = [&] { orExit([&] { coll->run(); }); };
      const Measurement m = measureCalls(ctx, row.bytes, false, runOnce, false);
      if (m.wrong > 0) wrong += m.wrong;
      if (!out.supported || m.timeUs < out.m.timeUs) {
        out.supported = true;
        out.algorithm = algorithm;
        out.m = m;
      }
    }
    step_.clear();
    out.m.wrong = wrong;
    if (out.supported && out.m.busBw > 0) out.ratio = row.outOfPlace.busBw / out.m.busBw;
    return out;
  }

  Measurement measure(const CheckContext& ctx, size_t reportedBytes, bool inPlace) {
    const Layout& l = ctx.layout;
    const RunBuffers bufs = runBuffers(l, ctx.type->size, callSend(), callRecv(), inPlace, rank_);
    step_ = std::string("(") + opt_.coll->name + ", " + std::to_string(reportedBytes) + " bytes, " + ctx.type->name +
            (opt_.coll->reduces ? std::string(", ") + opName(ctx.op) : std::string()) +
            (inPlace ? ", in place)" : ", out of place)");
    auto runOnce = [&] {
      check(runCollective(*opt_.coll, bufs, l, ctx.type->type, ctx.op, ctx.root, comm_, rank_, nranks_,
                          opt_.device ? stream_ : nullptr),
            opt_.coll->call);
      // Device calls return once enqueued: the time is launch to completion of the stream.
      if (opt_.device) deviceStep([&] { streamSync(stream_); });
    };
    return measureCalls(ctx, reportedBytes, inPlace, runOnce, opt_.injectFault);
  }

  // Checks, warms up and times one way of making the call (Strata's or a baseline's).
  Measurement measureCalls(const CheckContext& ctx, size_t reportedBytes, bool inPlace,
                           const std::function<void()>& runOnce, bool injectFault) {
    Measurement m;
    // In place, sendrecv sends from and receives into one buffer; Strata stages such sends, so the
    // result is defined and checked like every other.
    if (opt_.check > 0) {
      m.wrong = 0;
      for (int c = 0; c < opt_.check; ++c) {
        fillInputs(ctx, sendbuff_, recvbuff_, inPlace);
        const size_t bytes = ctx.layout.reportedBytes(ctx.type->size);
        if (opt_.device)
          deviceStep([&] {
            copyToDevice(devSend_, sendbuff_, bytes);
            copyToDevice(devRecv_, recvbuff_, bytes);
          });
        // No rank starts before every rank has filled its buffers: some algorithms (Gloo's AllgatherRing)
        // write into a peer's output as soon as they start, which would race with that peer's poisoning.
        check(strataBarrier(comm_, nullptr), "strataBarrier");
        runOnce();
        if (opt_.device) deviceStep([&] { copyToHost(recvbuff_, devRecv_, bytes); });
        ResultRegion result = resultRegion(ctx, recvbuff_, inPlace);
        const int faultRank = opt_.coll->is(strataCollReduce) ? ctx.root : 0;
        if (injectFault && !faultInjected_ && rank_ == faultRank && result.count > 0) {
          // Far enough off to fail any tolerance: doubled, or moved by 1 when small.
          const double got = loadValue(*ctx.type, result.data, 0);
          storeValue(*ctx.type, result.data, 0, got + std::max(1.0, std::fabs(got)));
          faultInjected_ = true;
        }
        m.wrong = sumOverRanks(countWrong(ctx, result, opt_.showWrong));
        if (m.wrong != 0) break;
      }
    }
    for (int w = 0; w < opt_.warmupIters; ++w) runOnce();
    std::vector<double> times(static_cast<size_t>(opt_.iters));
    for (double& t : times) {
      auto t0 = std::chrono::steady_clock::now();
      runOnce();
      auto t1 = std::chrono::steady_clock::now();
      t = std::chrono::duration<double, std::micro>(t1 - t0).count();
    }
    std::nth_element(times.begin(), times.begin() + static_cast<long>(times.size() / 2), times.end());
    double median = times[times.size() / 2];
    if (times.size() % 2 == 0) {
      median = (median + *std::max_element(times.begin(), times.begin() + static_cast<long>(times.size() / 2))) / 2;
    }
    step_ = std::string("(") + opt_.coll->name + " timing)";
    m.timeUs = maxOverRanks(median);
    step_.clear();
    const double seconds = m.timeUs * 1e-6;
    m.algBw = seconds > 0 ? static_cast<double>(reportedBytes) / 1e9 / seconds : 0.0;
    m.busBw = m.algBw * busBandwidthFactor(*opt_.coll, nranks_);
    return m;
  }

  void deviceStep(const std::function<void()>& f) {
    try {
      f();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "strata-perf: rank %d: %s %s\n", rank_, e.what(), step_.c_str());
      std::exit(kExitFailure);
    }
  }

  Options opt_;
  void* devSend_ = nullptr;
  void* devRecv_ = nullptr;
  void* stream_ = nullptr;
  int deviceIndex_ = -1;
  std::string deviceName_;
  strataComm_t comm_ = nullptr;
  int rank_ = -1, nranks_ = 0;
  void* sendbuff_ = nullptr;
  void* recvbuff_ = nullptr;
  RunInfo info_;
  std::vector<std::unique_ptr<Baseline>> baselines_;
  std::vector<Row> rows_;
  std::string step_;  // what is running, for error messages
  bool faultInjected_ = false;
};

}  // namespace
}  // namespace strata::perf

int main(int argc, char** argv) {
  setlinebuf(stdout);
  strata::perf::Options opt = strata::perf::parseOptions(argc, argv);
  return strata::perf::PerfRun(std::move(opt)).run();
}
