// Internal to the simulator: the event engine that runs the plans of the simulated ranks over a cluster's resources
// (sim_engine.cc). sim_call.cc decides which plans it gets.
#pragma once

#include <memory>
#include <vector>

#include "collectives/plan.h"
#include "collectives/sim.h"

namespace strata {

class SimEngine {
 public:
  /// An engine for `call` on `n` ranks (rank r on host hostOf[r]) of `cluster`, simulating ranks 0..period-1: with
  /// period < n every other rank, connection and resource maps onto the one `period` ranks (a multiple of whole
  /// hosts) below it.
  SimEngine(const SimCluster& cluster, const SimCall& call, int n, std::vector<int> hostOf, int period);
  ~SimEngine();
  SimEngine(const SimEngine&) = delete;
  SimEngine& operator=(const SimEngine&) = delete;

  /// Adds simulated rank plan.rank's plan (ranks 0..period-1, each once, before run).
  void addPlan(const Plan& plan);
  /// Runs every event; the result's us, laneUs, pieces and events.
  SimResult run();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata
