// strata-train: a GPT-style byte-level language model trained with data parallelism (DP) x tensor
// parallelism (TP) over Strata. Launch: strata-run -n D*T build/bin/strata-train --dp D --tp T [options].
#include <cblas.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>

#include "checkpoint.h"
#include "data.h"
#include "grad_sync.h"
#include "model.h"
#include "optim.h"

namespace {

struct Options {
  int dp = 1, tp = 1, steps = 200, batch = 8, logEvery = 1, zero = 0;
  double bucketMb = 25;
  strain::ModelConfig model;
  float lr = 3e-3f, clip = 1.0f, weightDecay = 0.1f;
  std::string data, save, load, lossLog, trace;
  bool overlap = true, sp = false;
};

[[noreturn]] void usage(int code) {
  std::fprintf(code ? stderr : stdout,
               "usage: strata-run -n D*T strata-train [options]\n"
               "  --dp D --tp T           data x tensor parallel layout (world size must be D*T)\n"
               "  --steps N (200) --batch B (8, global sequences per step) --seq S (64)\n"
               "  --layers L (2) --heads H (4) --dim C (64) --lr X (3e-3) --clip X (1.0) --wd X (0.1)\n"
               "  --seed N (1234) --data FILE (default /usr/share/common-licenses/GPL-3)\n"
               "  --overlap on|off (on)   off: the DP collective launches after backward\n"
               "  --sequence-parallel     reduce-scatter/all-gather instead of TP all-reduces\n"
               "  --zero 0|1 (0)          1: shard AdamW state (and the update) over DP\n"
               "  --save FILE --load FILE checkpoints (full tensors, any layout can load them)\n"
               "  --bucket-mb X (25)      gradient bucket cap in MiB (the first bucket is at most 1 MiB)\n"
               "  --trace FILE            Chrome/Perfetto trace of the DP scheduler (compute and comm lanes per\n"
               "                          rank; with --tp > 1, TP rank k > 0 writes FILE.tp<k>)\n"
               "  --log-every N (1) --loss-log FILE (per-step loss, full precision)\n"
               "  --compare A B           compare two checkpoints' parameters and exit\n");
  std::exit(code);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) usage(2);
      return argv[++i];
    };
    if (a == "--dp") o.dp = std::stoi(val());
    else if (a == "--tp") o.tp = std::stoi(val());
    else if (a == "--steps") o.steps = std::stoi(val());
    else if (a == "--batch") o.batch = std::stoi(val());
    else if (a == "--seq") o.model.seq = std::stoi(val());
    else if (a == "--layers") o.model.layers = std::stoi(val());
    else if (a == "--heads") o.model.heads = std::stoi(val());
    else if (a == "--dim") o.model.dim = std::stoi(val());
    else if (a == "--lr") o.lr = std::stof(val());
    else if (a == "--clip") o.clip = std::stof(val());
    else if (a == "--wd") o.weightDecay = std::stof(val());
    else if (a == "--seed") o.model.seed = std::stoull(val());
    else if (a == "--data") o.data = val();
    else if (a == "--overlap") {
      std::string v = val();
      if (v != "on" && v != "off") usage(2);
      o.overlap = v == "on";
    } else if (a == "--sequence-parallel") o.sp = true;
    else if (a == "--zero") o.zero = std::stoi(val());
    else if (a == "--save") o.save = val();
    else if (a == "--trace") o.trace = val();
    else if (a == "--bucket-mb") o.bucketMb = std::stod(val());
    else if (a == "--load") o.load = val();
    else if (a == "--log-every") o.logEvery = std::max(1, std::stoi(val()));
    else if (a == "--loss-log") o.lossLog = val();
    else if (a == "--compare") {
      std::string x = val(), y = val();
      double abs = 0, rel = strain::compareCheckpoints(x, y, &abs);
      std::printf("max relative difference %.3g, max absolute difference %.3g\n", rel, abs);
      std::exit(0);
    } else if (a == "-h" || a == "--help") usage(0);
    else {
      std::fprintf(stderr, "strata-train: unknown option %s\n", a.c_str());
      usage(2);
    }
  }
  return o;
}

using Clock = std::chrono::steady_clock;

int run(const Options& o) {
  openblas_set_num_threads(1);
  auto world = strata::Communicator::fromEnv();
  const int W = world.size(), rank = world.rank();
  if (W != o.dp * o.tp) throw std::runtime_error("world size " + std::to_string(W) + " != dp*tp");
  if (o.batch % o.dp) throw std::runtime_error("--batch must be divisible by --dp");
  const int dRank = rank / o.tp, tRank = rank % o.tp;  // TP groups are adjacent ranks
  strata::Communicator tpComm = world.split(dRank, tRank);
  strata::Communicator dpComm = world.split(tRank, dRank);
  strain::TpCtx tp;
  tp.comm = &tpComm;
  tp.rank = tRank;
  tp.size = o.tp;
  tp.sp = o.sp;

  strain::Gpt model(o.model, tp);
  auto& params = model.params();
  std::vector<std::string> names;
  std::vector<size_t> numels;
  for (auto& p : params) {
    names.push_back(p.name);
    numels.push_back(p.numel);
  }
  if (!(o.bucketMb > 0)) throw std::runtime_error("--bucket-mb must be > 0");
  auto sync = strain::makeGradSync(o.dp > 1 ? &dpComm : nullptr, o.zero > 0, o.overlap,
                                   static_cast<size_t>(o.bucketMb * (1 << 20)));
  sync->layout(names, numels);
  std::vector<size_t> offsets(params.size());
  for (size_t i = 0; i < params.size(); ++i) offsets[i] = sync->offset(int(i));
  strain::Vec weights(sync->totalElems(), 0.f);
  model.bind(weights.data(), sync->gradBuffer(), offsets);

  strain::AdamW opt;
  opt.lr = o.lr;
  opt.clip = o.clip;
  opt.weightDecay = o.weightDecay;
  opt.init(sync->ownedRanges());
  strata::Communicator* dpIfSharded = (o.zero > 0 && o.dp > 1) ? &dpComm : nullptr;
  strain::CkptCtx ck{&params,    &offsets, weights.data(), weights.size(), &opt, &tp, o.dp > 1 ? &dpComm : nullptr,
                     o.zero > 0, rank == 0};
  if (!o.load.empty()) strain::loadCheckpoint(o.load, ck);

  strain::ByteData data(o.data);
  const int Bl = o.batch / o.dp, S = o.model.seq;
  size_t nparam = 0;
  for (auto& p : params) nparam += size_t(p.rows) * p.cols;
  if (rank == 0)
    std::printf(
        "strata-train: dp %d x tp %d%s%s | %zu parameters | %d layers, %d heads, dim %d, seq %d, batch %d | "
        "data %s (%zu bytes) | dp sync: %s, overlap %s\n",
        o.dp, o.tp, o.sp ? " (sequence parallel)" : "", o.zero ? " zero-1" : "", nparam, o.model.layers, o.model.heads,
        o.model.dim, S, o.batch, data.source().c_str(), data.size(),
        strain::haveOverlapScheduler() && o.dp > 1 ? "OverlapScheduler" : "all-reduce after backward",
        o.overlap ? "on" : "off");
  std::FILE* lossLog = (rank == 0 && !o.lossLog.empty()) ? std::fopen(o.lossLog.c_str(), "w") : nullptr;

  std::vector<uint8_t> tokens;
  const float lossScale = 1.f / float(Bl * S);  // mean over this DP rank's tokens; DP averages the ranks
  const int startStep = opt.t;
  double firstLoss = 0, lastLoss = 0;
  // Means over the steps after the first three (warm-up: connections, caches, the plan cache).
  double sumMs = 0, sumComm = 0, sumExposed = 0;
  int counted = 0;
  for (int step = startStep; step < startStep + o.steps; ++step) {
    auto t0 = Clock::now();
    tp.commSec = 0;
    data.batch(o.model.seed, step, dRank * Bl, Bl, S, tokens);
    sync->beginStep();
    double lossSum = model.step(tokens.data(), Bl, lossScale, [&](int p) { sync->gradReady(p); });
    sync->finish();
    opt.step(params, offsets, weights.data(), sync->gradBuffer(), tp, dpIfSharded);
    sync->allGatherParams(weights.data());
    // Reported loss: the mean over the global batch. Every TP rank holds all of its rows' losses unless
    // sequence parallel splits them.
    double l = lossSum / (double(o.batch) * S * (o.sp ? 1 : o.tp));
    world.allReduce(&l, &l, 1, strataFloat64, strataSum);
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (step == startStep) firstLoss = l;
    lastLoss = l;
    auto st = sync->stats();
    if (step - startStep >= 3) {
      sumMs += ms;
      sumComm += st.commMs;
      sumExposed += st.exposedMs;
      ++counted;
    }
    if (lossLog) std::fprintf(lossLog, "%d %.9g\n", step, l);
    if (rank == 0 && ((step - startStep) % o.logEvery == 0 || step == startStep + o.steps - 1)) {
      double tps = double(o.batch) * S / (ms / 1000.0);
      std::printf(
          "step %d | loss %.4f | %.1fk tok/s | step %.1f ms | comm %.1f ms | exposed %.1f ms | overlap %.0f%% "
          "| tp comm %.1f ms\n",
          step, l, tps / 1000.0, ms, st.commMs, st.exposedMs, st.overlapPct, tp.commSec * 1000.0);
      std::fflush(stdout);
    }
  }
  if (lossLog) std::fclose(lossLog);
  if (rank == 0 && o.steps > 0) std::printf("loss %.4f -> %.4f over %d steps\n", firstLoss, lastLoss, o.steps);
  if (rank == 0 && counted > 0)
    std::printf("mean of steps %d-%d | step %.1f ms | comm %.1f ms | exposed %.1f ms | hidden %.0f%%\n", startStep + 3,
                startStep + o.steps - 1, sumMs / counted, sumComm / counted, sumExposed / counted,
                sumComm > 0 ? 100.0 * (sumComm - sumExposed) / sumComm : 0.0);
  if (!o.trace.empty()) {
    const std::string path = tRank == 0 ? o.trace : o.trace + ".tp" + std::to_string(tRank);
    if (!sync->writeTrace(path)) {
      if (rank == 0) std::fprintf(stderr, "strata-train: --trace needs the overlap scheduler and --dp > 1\n");
    } else if (rank == 0) {
      std::printf("trace written to %s\n", path.c_str());
    }
  }
  if (!o.save.empty()) {
    strain::saveCheckpoint(o.save, ck);
    if (rank == 0) std::printf("saved %s\n", o.save.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o = parse(argc, argv);
    if (o.dp < 1 || o.tp < 1 || o.steps < 0 || o.batch < 1 || o.zero < 0 || o.zero > 1)
      throw std::runtime_error("--dp, --tp, --batch must be >= 1, --steps >= 0, --zero 0 or 1");
    return run(o);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "strata-train: bad number in the options (%s)\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata-train: %s\n", e.what());
    return 1;
  }
}
