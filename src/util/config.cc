#include "util/config.h"

#include <cerrno>
#include <cstdlib>
#include <iterator>
#include <string_view>
#include <utility>

#include "util/config_table.h"
#include "util/error.h"

namespace strata {
namespace {

// The table: one row per variable, in describe() order. What each field means is said at the field, in
// config.h; a row says how the variable is spelled, its default and what it accepts.
constexpr ConfigVar kConfigVars[] = {
    {"STRATA_DEBUG", "", ReadElsewhere{"util/log.cc"}, "log level: WARN, INFO or TRACE (default: silent)"},
    {"STRATA_DEBUG_SUBSYS", "", ReadElsewhere{"util/log.cc"},
     "comma-separated subsystems to log: INIT,NET,COLL,TUNING,ALL (default ALL)"},
    {"STRATA_TIMEOUT_MS", "600000", IntegerField{&Config::timeoutMs, 1, int64_t{1} << 40},
     "deadline of every wait in ms"},
    {"STRATA_TRANSPORT", "auto", ChoiceField{&Config::transport, "auto, shm, tcp, ucx"},
     "auto | shm | tcp | ucx: auto = shm in a host, STRATA_NET between hosts"},
    {"STRATA_NET", "tcp", ChoiceField{&Config::net, "tcp, ucx"}, "tcp | ucx: transport between hosts"},
    {"STRATA_TOPO_FILE", "", TextField{&Config::topoFile}, "topology JSON used instead of discovery"},
    {"STRATA_TUNE", "model", ChoiceField{&Config::tune, "model, probe, sim"},
     "model | probe | sim: cost model on the topology's link figures, on figures measured at init, or the simulator"},
    {"STRATA_SOCKET_IFNAME", "", TextField{&Config::socketIfname}, "interface whose address ranks advertise"},
    {"STRATA_HOSTID", "", TextField{&Config::hostId}, "host identity override; equal ids share a host"},
    {"STRATA_ALGO", "", AlgoSpecField{&Config::algo}, "forced algorithms, e.g. allreduce:ring,allgather:ring"},
    {"STRATA_PLANS", "", TextField{&Config::plans},
     "algorithm files (MSCCL XML, Strata plan files) or folders of them, comma-separated: each is proven, then "
     "offered to the selector under its name"},
    {"STRATA_PIECE_BYTES", "128K", IntegerField{&Config::pieceBytes, 256, 64 << 20, 64},
     "bytes per transport message (FIFO slot)"},
    {"STRATA_NSLOTS", "8", IntegerField{&Config::nslots, 2, 1024}, "FIFO slots per connection direction"},
    {"STRATA_SHM_SINGLE_COPY", "auto", ChoiceField{&Config::shmSingleCopy, "auto, off"},
     "auto | off: large shm pieces read straight from the sender's buffer (process_vm_readv), one copy"},
    {"STRATA_SHM_SINGLE_COPY_BYTES", "64K", IntegerField{&Config::shmSingleCopyBytes, 4096, int64_t{1} << 36},
     "smallest shm piece sent by reference when single copy is on"},
    {"STRATA_NSOCKS", "2", IntegerField{&Config::nsocks, 1, 64}, "TCP sockets per peer"},
    {"STRATA_SPIN_US", "5", IntegerField{&Config::spinUs, 0, 1000000}, "spin time before a wait yields/sleeps"},
    {"STRATA_GPU_DIRECT_BYTES", "4M", IntegerField{&Config::gpuDirectMaxBytes, 0, int64_t{1} << 30},
     "CUDA IPC region per rank for device all-reduces on one host; larger ones run in rounds (0: staged)"},
    {"STRATA_GPU_ONESHOT_BYTES", "256K", IntegerField{&Config::gpuOneShotMaxBytes, 0, int64_t{1} << 30},
     "largest CUDA IPC all-reduce run one-shot (larger ones run two-shot)"},
    {"STRATA_GPU_STAGE_CHUNK_BYTES", "4M", IntegerField{&Config::gpuStageChunkBytes, 0, int64_t{1} << 30},
     "chunk of a device all-reduce staged through host memory (copies overlap the transfer)"},
    {"STRATA_GPU_EXECUTOR", "1", IntegerField{&Config::gpuExecutor, 0, 1},
     "1: device collectives run in the device executor (kernels over CUDA IPC FIFOs; not yet run on a GPU) where it "
     "serves them; 0: the direct CUDA IPC and staged paths only"},
    {"STRATA_GPU_CHANNELS", "0", IntegerField{&Config::gpuChannels, 0, 32},
     "most channels (thread blocks, each with FIFOs of its own per peer) a device executor call uses; one per 64 KiB "
     "of the call. 0: from the topology (32 on NVSwitch hosts of H100/H200, 2 on PCIe; 8 when no GPU is known)"},
    {"STRATA_GPU_LL128", "auto", ChoiceField{&Config::gpuLL128, "auto, on, off"},
     "the device executor's LL128 protocol for ops over 16 KiB up to 512 KiB (auto: on where every GPU pair of each "
     "host has NVLink, as NCCL)"},
    {"STRATA_GPU_PROTO", "auto", ChoiceField{&Config::gpuProto, "auto, simple, ll, ll128"},
     "the device executor's protocol: auto (by each op's size: LL, LL128, Simple) or one for every op (ll: up to "
     "a piece, Simple above), as NCCL_PROTO"},
    {"STRATA_FLIGHT_RECORDER_ENTRIES", "2000", IntegerField{&Config::flightRecorderEntries, 0, 1 << 24},
     "operations each communicator's flight recorder keeps (0: off)"},
    {"STRATA_FLIGHT_RECORDER_DIR", "", TextField{&Config::flightRecorderDir},
     "where flight recorder dumps go on timeout, failure, abort and SIGUSR1 (empty: no automatic dumps)"},
    {"STRATA_CUDA_LIBRARY", "", ReadElsewhere{"kernels/cuda_loader.cc"},
     "path of libstrata_cuda.so (default: next to libstrata)"},
    {"STRATA_SECRET", "", ReadElsewhere{"bootstrap/env_launch.cc"},
     "job secret (32 hex digits) of a launch from the environment; strata-run sets a random one"},
};

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

// Whether `word` is one of the ", "-separated `choices`.
bool isChoice(std::string_view choices, std::string_view word) {
  while (!choices.empty()) {
    const size_t comma = choices.find(", ");
    if (choices.substr(0, comma) == word) return true;
    if (comma == std::string_view::npos) break;
    choices.remove_prefix(comma + 2);
  }
  return false;
}

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

}  // namespace

std::span<const ConfigVar> configVariables() { return kConfigVars; }

const ConfigVar& configVariable(std::string_view name) {
  for (const ConfigVar& v : kConfigVars) {
    if (name == v.name) return v;
  }
  throw InternalError("the config table has no variable " + std::string(name));
}

void ConfigVar::parse(Config& config, const char* value) const {
  std::visit(Overloaded{
                 [&]<class T>(const IntegerField<T>& f) {
                   const int64_t x = parseInt(name, value, f.lo, f.hi);
                   if (f.multipleOf > 1 && x % f.multipleOf)
                     throw InvalidArgument(
                         strprintf("%s must be a multiple of %lld", name, static_cast<long long>(f.multipleOf)));
                   config.*f.field = static_cast<T>(x);
                 },
                 [&](const ChoiceField& f) {
                   if (!isChoice(f.choices, value))
                     throw InvalidArgument(std::string(name) + "=" + value + " is not one of " + f.choices);
                   config.*f.field = value;
                 },
                 [&](const TextField& f) { config.*f.field = value; },
                 [&](const AlgoSpecField& f) { config.*f.field = parseAlgoSpec(value); },
                 [](const ReadElsewhere&) {},
             },
             binding);
}

std::string ConfigVar::show(const Config& config) const {
  return std::visit(Overloaded{
                        [&]<class T>(const IntegerField<T>& f) { return std::to_string(config.*f.field); },
                        [&](const ChoiceField& f) { return config.*f.field; },
                        [&](const TextField& f) { return config.*f.field; },
                        [&](const AlgoSpecField& f) {
                          std::string out;
                          for (auto& [k, v] : config.*f.field) out += (out.empty() ? "" : ",") + k + ":" + v;
                          return out;
                        },
                        [](const ReadElsewhere&) { return std::string(); },
                    },
                    binding);
}

void ConfigVar::check(const Config& config) const {
  std::visit(Overloaded{
                 [&]<class T>(const IntegerField<T>& f) {
                   // Compared unconverted: a size_t above 2^63 is out of range, not negative.
                   const T x = config.*f.field;
                   const std::string shown = std::to_string(x);
                   if (std::cmp_less(x, f.lo) || std::cmp_greater(x, f.hi))
                     throw InvalidArgument(strprintf("%s=%s is out of range [%lld, %lld]", name, shown.c_str(),
                                                     static_cast<long long>(f.lo), static_cast<long long>(f.hi)));
                   if (f.multipleOf > 1 && static_cast<int64_t>(x) % f.multipleOf)
                     throw InvalidArgument(strprintf("%s=%s is not a multiple of %lld", name, shown.c_str(),
                                                     static_cast<long long>(f.multipleOf)));
                 },
                 [&](const ChoiceField& f) {
                   if (!isChoice(f.choices, config.*f.field))
                     throw InvalidArgument(std::string(name) + "=" + config.*f.field + " is not one of " + f.choices);
                 },
                 [](const TextField&) {},
                 [](const AlgoSpecField&) {},
                 [](const ReadElsewhere&) {},
             },
             binding);
}

const char* ConfigVar::readBy() const {
  const auto* r = std::get_if<ReadElsewhere>(&binding);
  return r ? r->by : nullptr;
}

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

Config::Config() {
  for (const ConfigVar& v : kConfigVars) v.parse(*this, v.defaultValue);
}

Config Config::fromEnv() {
  Config c;
  for (const ConfigVar& v : kConfigVars) {
    if (v.readBy()) continue;
    if (const char* value = env(v.name)) v.parse(c, value);
  }
  return c;
}

std::vector<Config::Entry> Config::describe() const {
  std::vector<Entry> out;
  out.reserve(std::size(kConfigVars));
  for (const ConfigVar& v : kConfigVars) out.push_back({v.name, v.show(*this), v.doc});
  return out;
}

}  // namespace strata
