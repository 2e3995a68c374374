#include "util/config.h"

#include <cstdlib>

#include "util/error.h"

namespace strata {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

int64_t parseInt(const char* name, const char* v, int64_t lo, int64_t hi) {
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v, &end, 0);
  // Accept k/K, m/M, g/G suffixes for byte sizes.
  if (end && *end) {
    if ((*end == 'k' || *end == 'K') && end[1] == 0) x <<= 10;
    else if ((*end == 'm' || *end == 'M') && end[1] == 0) x <<= 20;
    else if ((*end == 'g' || *end == 'G') && end[1] == 0) x <<= 30;
    else throw InvalidArgument(strprintf("%s=%s is not an integer", name, v));
  }
  if (errno || x < lo || x > hi)
    throw InvalidArgument(strprintf("%s=%s is out of range [%lld, %lld]", name, v, (long long)lo, (long long)hi));
  return x;
}

}  // namespace

std::map<std::string, std::string> parseAlgoSpec(const std::string& spec) {
  std::map<std::string, std::string> out;
  size_t pos = 0;
  while (pos < spec.size()) {
    size_t comma = spec.find(',', pos);
    std::string item = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? spec.size() : comma + 1;
    if (item.empty()) continue;
    size_t colon = item.find(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == item.size())
      throw InvalidArgument("STRATA_ALGO item '" + item + "' is not collective:algorithm");
    out[item.substr(0, colon)] = item.substr(colon + 1);
  }
  return out;
}

Config Config::fromEnv() {
  Config c;
  if (auto v = env("STRATA_TIMEOUT_MS")) c.timeoutMs = parseInt("STRATA_TIMEOUT_MS", v, 1, int64_t(1) << 40);
  if (auto v = env("STRATA_TRANSPORT")) {
    c.transport = v;
    if (c.transport != "auto" && c.transport != "shm" && c.transport != "tcp" && c.transport != "ucx")
      throw InvalidArgument(std::string("STRATA_TRANSPORT=") + v + " is not one of auto, shm, tcp, ucx");
  }
  if (auto v = env("STRATA_NET")) {
    c.net = v;
    if (c.net != "tcp" && c.net != "ucx")
      throw InvalidArgument(std::string("STRATA_NET=") + v + " is not one of tcp, ucx");
  }
  if (auto v = env("STRATA_TOPO_FILE")) c.topoFile = v;
  if (auto v = env("STRATA_TUNE")) {
    c.tune = v;
    if (c.tune != "model" && c.tune != "probe")
      throw InvalidArgument(std::string("STRATA_TUNE=") + v + " is not one of model, probe");
  }
  if (auto v = env("STRATA_SOCKET_IFNAME")) c.socketIfname = v;
  if (auto v = env("STRATA_HOSTID")) c.hostId = v;
  if (auto v = env("STRATA_ALGO")) c.algo = parseAlgoSpec(v);
  if (auto v = env("STRATA_PIECE_BYTES")) c.pieceBytes = parseInt("STRATA_PIECE_BYTES", v, 256, 64 << 20);
  if (c.pieceBytes % 64) throw InvalidArgument("STRATA_PIECE_BYTES must be a multiple of 64");
  if (auto v = env("STRATA_NSLOTS")) c.nslots = static_cast<int>(parseInt("STRATA_NSLOTS", v, 2, 1024));
  if (auto v = env("STRATA_NSOCKS")) c.nsocks = static_cast<int>(parseInt("STRATA_NSOCKS", v, 1, 64));
  if (auto v = env("STRATA_SPIN_US")) c.spinUs = static_cast<int>(parseInt("STRATA_SPIN_US", v, 0, 1000000));
  if (auto v = env("STRATA_GPU_DIRECT_BYTES"))
    c.gpuDirectMaxBytes = parseInt("STRATA_GPU_DIRECT_BYTES", v, 0, int64_t{1} << 30);
  if (auto v = env("STRATA_GPU_STAGE_CHUNK_BYTES"))
    c.gpuStageChunkBytes = parseInt("STRATA_GPU_STAGE_CHUNK_BYTES", v, 0, int64_t{1} << 30);
  if (auto v = env("STRATA_GPU_ONESHOT_BYTES"))
    c.gpuOneShotMaxBytes = parseInt("STRATA_GPU_ONESHOT_BYTES", v, 0, int64_t{1} << 30);
  return c;
}

std::vector<Config::Entry> Config::describe() const {
  std::string algos;
  for (auto& [k, v] : algo) algos += (algos.empty() ? "" : ",") + k + ":" + v;
  return {
      {"STRATA_DEBUG", "", "log level: WARN, INFO or TRACE (default: silent)"},
      {"STRATA_DEBUG_SUBSYS", "", "comma-separated subsystems to log: INIT,NET,COLL,TUNING,ALL (default ALL)"},
      {"STRATA_TIMEOUT_MS", std::to_string(timeoutMs), "deadline of every wait in ms"},
      {"STRATA_TRANSPORT", transport, "auto | shm | tcp | ucx: auto = shm in a host, STRATA_NET between hosts"},
      {"STRATA_NET", net, "tcp | ucx: transport between hosts"},
      {"STRATA_TOPO_FILE", topoFile, "topology JSON used instead of discovery"},
      {"STRATA_TUNE", tune, "model | probe: link figures from the topology or measured at init"},
      {"STRATA_SOCKET_IFNAME", socketIfname, "interface whose address ranks advertise"},
      {"STRATA_HOSTID", hostId, "host identity override; equal ids share a host"},
      {"STRATA_ALGO", algos, "forced algorithms, e.g. allreduce:ring,allgather:ring"},
      {"STRATA_PIECE_BYTES", std::to_string(pieceBytes), "bytes per transport message (FIFO slot)"},
      {"STRATA_NSLOTS", std::to_string(nslots), "FIFO slots per connection direction"},
      {"STRATA_NSOCKS", std::to_string(nsocks), "TCP sockets per peer"},
      {"STRATA_SPIN_US", std::to_string(spinUs), "spin time before a wait yields/sleeps"},
      {"STRATA_GPU_DIRECT_BYTES", std::to_string(gpuDirectMaxBytes),
       "CUDA IPC region per rank for device all-reduces on one host; larger ones run in rounds (0: staged)"},
      {"STRATA_GPU_ONESHOT_BYTES", std::to_string(gpuOneShotMaxBytes),
       "largest CUDA IPC all-reduce run one-shot (larger ones run two-shot)"},
      {"STRATA_GPU_STAGE_CHUNK_BYTES", std::to_string(gpuStageChunkBytes),
       "chunk of a device all-reduce staged through host memory (copies overlap the transfer)"},
      {"STRATA_CUDA_LIBRARY", "", "path of libstrata_cuda.so (default: next to libstrata)"},
  };
}

}  // namespace strata
