// Which plan a device executor call runs: STRATA_ALGO's built-in or the collective's default, or a loaded plan
// program (STRATA_PLANS) that STRATA_ALGO forces, where it serves the call.
#include "collectives/algorithms.h"
#include "core/host_side.h"
#include "engine/device_engine.h"
#include "util/config.h"
#include "util/log.h"

namespace strata {

std::string DeviceEngine::execAlgorithm(CollKind k) const {
  // STRATA_ALGO's built-in where it forces one, else the collective's default (algorithms.h): the ring-like plans
  // NCCL chooses over NVLink, which are device-capable (tests/unit/test_algorithms.cc). A forced loaded program that
  // execProgram turned down leaves the call to the default too.
  const auto forced = host_.config().algo.find(collName(k));
  if (forced != host_.config().algo.end() && findAlgorithm(k, forced->second)) return forced->second;
  return defaultAlgorithm(k).name;
}

const LoadedProgram* DeviceEngine::execProgram(const CollCall& c, int n, bool inPlace) const {
  if (host_.selector().programs().empty()) return nullptr;  // every device call asks: no lookup without files
  const auto forced = host_.config().algo.find(collName(c.kind));
  if (forced == host_.config().algo.end()) return nullptr;
  const LoadedProgram* p = host_.selector().findProgram(c.kind, forced->second);
  if (!p) return nullptr;
  std::string why;
  if (!programServes(*p->program, n, callBytes(c, n), inPlace, &why, c.root)) {
    STRATA_INFO(kLogTuning, "rank %d: device %s: STRATA_ALGO's %s does not serve it: %s; the default runs",
                host_.rank(), collName(c.kind), p->program->name.c_str(), why.c_str());
    return nullptr;
  }
  // Its channels, and one more for the tail (the count's remainder) where the count leaves one.
  const int needed = p->program->channels() + (c.count % static_cast<size_t>(p->program->chunksPerBlock()) ? 1 : 0);
  if (needed > execChannels_) {
    STRATA_INFO(kLogTuning,
                "rank %d: device %s: %s needs %d channels, the executor has %d (STRATA_GPU_CHANNELS); the "
                "default runs",
                host_.rank(), collName(c.kind), p->program->name.c_str(), needed, execChannels_);
    return nullptr;
  }
  return p;
}

}  // namespace strata
