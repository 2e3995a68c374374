#include "measure.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

namespace strata::perf {

Row RowMeasurer::measureRow(const DtypeInfo& type, const OpInfo& op, size_t bytes) {
  const int rank = comm_.rank(), nranks = comm_.nranks();
  CheckContext ctx{opt_.coll, &type, op.op, opt_.root, rank, nranks, layoutFor(*opt_.coll, bytes, type.size, nranks)};
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
void RowMeasurer::explain(const CheckContext& ctx, Row* row) {
  if (opt_.coll->isSendRecv()) return;  // no collective of the library: nothing to explain
  char algorithm[64] = "";
  double us = 0;
  comm_.check(strataCommExplain(comm_.get(), *opt_.coll->collective, ctx.layout.paramCount, ctx.type->type, algorithm,
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
void RowMeasurer::measureMemoryBound(const CheckContext& ctx, Row* row) {
  const size_t bytes = ctx.layout.sendCount * ctx.type->size;
  if (bytes == 0) return;
  auto runOnce = [&] { std::memcpy(buffers_.hostRecv(), buffers_.hostSend(), bytes); };
  for (int w = 0; w < opt_.warmupIters; ++w) runOnce();
  std::vector<double> times(static_cast<size_t>(opt_.iters));
  for (double& t : times) {
    comm_.barrier();  // every rank copies at the same time
    auto t0 = std::chrono::steady_clock::now();
    runOnce();
    auto t1 = std::chrono::steady_clock::now();
    t = std::chrono::duration<double, std::micro>(t1 - t0).count();
  }
  std::sort(times.begin(), times.end());
  row->memcpyUs = comm_.maxOverRanks(times[times.size() / 2]);
  const double n = comm_.nranks();
  const double aggregate = n * 2.0 * static_cast<double>(bytes) / (row->memcpyUs * 1e-6) / 1e9;  // GB/s
  row->memcpyGBs = aggregate;
  row->boundBusBw = n > 1 ? (n - 1) * aggregate / (n * n) : NAN;
  row->boundShare = n > 1 ? row->outOfPlace.busBw / row->boundBusBw : NAN;
}

// Every algorithm the baseline has for the call, each checked and timed like Strata; the row shows the
// fastest, and the wrong elements of all of them (a broken algorithm must not hide behind a good one).
BaselineMeasurement RowMeasurer::measureBaseline(Baseline& baseline, const CheckContext& ctx, const Row& row) {
  const RunBuffers bufs =
      runBuffers(ctx.layout, ctx.type->size, buffers_.callSend(), buffers_.callRecv(), false, comm_.rank());
  const BaselineCall call{opt_.coll, ctx.type, ctx.op, ctx.root, ctx.layout, bufs.send, bufs.recv};
  BaselineMeasurement out;
  int64_t wrong = opt_.check > 0 ? 0 : -1;
  for (const std::string& algorithm : baseline.algorithms(call)) {
    comm_.setStep(std::string("(") + baseline.name() + " " + algorithm + ", " + std::to_string(row.bytes) + " bytes, " +
                  ctx.type->name + (opt_.coll->reduces ? std::string(", ") + opName(ctx.op) : std::string()) + ")");
    std::unique_ptr<BaselineCollective> coll;
    // A baseline's errors name the rank themselves.
    auto orExit = [&](const std::function<void()>& f) {
      try {
        f();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "strata-perf: %s %s\n", e.what(), comm_.step().c_str());
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
  comm_.setStep("");
  out.m.wrong = wrong;
  if (out.supported && out.m.busBw > 0) out.ratio = row.outOfPlace.busBw / out.m.busBw;
  return out;
}

Measurement RowMeasurer::measure(const CheckContext& ctx, size_t reportedBytes, bool inPlace) {
  const Layout& l = ctx.layout;
  const RunBuffers bufs =
      runBuffers(l, ctx.type->size, buffers_.callSend(), buffers_.callRecv(), inPlace, comm_.rank());
  comm_.setStep(std::string("(") + opt_.coll->name + ", " + std::to_string(reportedBytes) + " bytes, " +
                ctx.type->name + (opt_.coll->reduces ? std::string(", ") + opName(ctx.op) : std::string()) +
                (inPlace ? ", in place)" : ", out of place)"));
  auto runOnce = [&] {
    comm_.check(runCollective(*opt_.coll, bufs, l, ctx.type->type, ctx.op, ctx.root, comm_.get(), comm_.rank(),
                              comm_.nranks(), buffers_.stream()),
                opt_.coll->call);
    // Device calls return once enqueued: the time is launch to completion of the stream.
    if (buffers_.onDevice()) comm_.orExit([&] { buffers_.syncStream(); });
  };
  return measureCalls(ctx, reportedBytes, inPlace, runOnce, opt_.injectFault);
}

// Checks, warms up and times one way of making the call (Strata's or a baseline's).
Measurement RowMeasurer::measureCalls(const CheckContext& ctx, size_t reportedBytes, bool inPlace,
                                      const std::function<void()>& runOnce, bool injectFault) {
  Measurement m;
  // In place, sendrecv sends from and receives into one buffer; Strata stages such sends, so the
  // result is defined and checked like every other.
  if (opt_.check > 0) {
    m.wrong = 0;
    for (int c = 0; c < opt_.check; ++c) {
      fillInputs(ctx, buffers_.hostSend(), buffers_.hostRecv(), inPlace);
      const size_t bytes = ctx.layout.reportedBytes(ctx.type->size);
      if (buffers_.onDevice()) comm_.orExit([&] { buffers_.copyToDevice(bytes); });
      // No rank starts before every rank has filled its buffers: some algorithms (Gloo's AllgatherRing)
      // write into a peer's output as soon as they start, which would race with that peer's poisoning.
      comm_.barrier();
      runOnce();
      if (buffers_.onDevice()) comm_.orExit([&] { buffers_.copyResultToHost(bytes); });
      ResultRegion result = resultRegion(ctx, buffers_.hostRecv(), inPlace);
      const int faultRank = opt_.coll->is(strataCollReduce) ? ctx.root : 0;
      if (injectFault && !faultInjected_ && comm_.rank() == faultRank && result.count > 0) {
        // Far enough off to fail any tolerance: doubled, or moved by 1 when small.
        const double got = loadValue(*ctx.type, result.data, 0);
        storeValue(*ctx.type, result.data, 0, got + std::max(1.0, std::fabs(got)));
        faultInjected_ = true;
      }
      m.wrong = comm_.sumOverRanks(countWrong(ctx, result, opt_.showWrong));
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
  comm_.setStep(std::string("(") + opt_.coll->name + " timing)");
  m.timeUs = comm_.maxOverRanks(median);
  comm_.setStep("");
  const double seconds = m.timeUs * 1e-6;
  m.algBw = seconds > 0 ? static_cast<double>(reportedBytes) / 1e9 / seconds : 0.0;
  m.busBw = m.algBw * busBandwidthFactor(*opt_.coll, comm_.nranks());
  return m;
}

}  // namespace strata::perf
