#include "perf_comm.h"

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "options.h"

namespace strata::perf {

PerfComm::PerfComm() {
  check(strataCommInitFromEnv(&comm_), "strataCommInitFromEnv");
  check(strataCommUserRank(comm_, &rank_), "strataCommUserRank");
  check(strataCommCount(comm_, &nranks_), "strataCommCount");
}

PerfComm::~PerfComm() {
  if (comm_ != nullptr) strataCommDestroy(comm_);
  if (world_ != nullptr) strataCommDestroy(world_);
}

void PerfComm::useAlgorithm(const std::string& algo) {
  if (!world_) {
    world_ = comm_;
  } else {
    check(strataCommDestroy(comm_), "strataCommDestroy");
  }
  comm_ = world_;  // while splitting: a failure names the launched ranks' communicator
  strataConfig_t config = STRATA_CONFIG_INITIALIZER;
  config.algo = algo.c_str();
  strataComm_t split = nullptr;
  check(strataCommSplit(world_, 0, rank_, &split, &config), "strataCommSplit");
  comm_ = split;
}

void PerfComm::check(strataResult_t rc, const char* what) const {
  if (rc == strataSuccess) return;
  const std::string rankText = rank_ >= 0 ? std::to_string(rank_) : "?";
  std::fprintf(stderr, "strata-perf: rank %s: %s%s%s failed: %s: %s\n", rankText.c_str(), what,
               step_.empty() ? "" : " ", step_.c_str(), strataGetErrorString(rc), strataGetLastError(comm_));
  std::exit(kExitFailure);
}

void PerfComm::orExit(const std::function<void()>& f) const {
  try {
    f();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata-perf: rank %d: %s %s\n", rank_, e.what(), step_.c_str());
    std::exit(kExitFailure);
  }
}

double PerfComm::maxOverRanks(double v) const {
  double out = 0;
  check(strataAllReduce(&v, &out, 1, strataFloat64, strataMax, comm_, nullptr), "strataAllReduce");
  return out;
}

int64_t PerfComm::sumOverRanks(int64_t v) const {
  int64_t out = 0;
  check(strataAllReduce(&v, &out, 1, strataInt64, strataSum, comm_, nullptr), "strataAllReduce");
  return out;
}

void PerfComm::barrier() const { check(strataBarrier(comm_, nullptr), "strataBarrier"); }

void PerfComm::destroy() {
  check(strataCommDestroy(comm_), "strataCommDestroy");
  comm_ = nullptr;
  if (world_) {
    check(strataCommDestroy(world_), "strataCommDestroy");
    world_ = nullptr;
  }
}

}  // namespace strata::perf
