// Starting from the environment that launchers set: torchrun / strata-run, Open MPI's mpirun, Slurm's srun.
// Every rank must reach the same root address, port and secret from its own environment alone, so
// anything derived here (port, secret) is a pure function of job-wide variables, never of per-rank ones.
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "bootstrap/bootstrap.h"
#include "bootstrap/siphash.h"
#include "bootstrap/socket_io.h"
#include "util/error.h"

namespace strata {
namespace {

// Fixed keys for derivations; not secrets, just domain separation.
constexpr std::array<uint8_t, 16> kDeriveKey = {'s', 't', 'r', 'a', 't', 'a', '-', 'e',
                                                'n', 'v', '-', 'd', 'e', 'r', 'i', 'v'};
// [20000, 32767]: below Linux's default ephemeral range (32768-60999), where any process's outgoing connection may
// hold the port when the root comes to listen.
constexpr uint16_t kDerivedPortMin = 20000;
constexpr uint16_t kDerivedPortSpan = 12768;

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

long long parseInt(const char* name, const std::string& v, long long lo, long long hi) {
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (errno != 0 || end == v.c_str() || *end != '\0' || x < lo || x > hi) {
    throw InvalidArgument(
        strprintf("environment variable %s='%s' is not an integer in [%lld, %lld]", name, v.c_str(), lo, hi));
  }
  return x;
}

int requiredInt(const char* name, long long lo, long long hi, const char* launcher) {
  auto v = env(name);
  if (!v) throw InvalidArgument(strprintf("%s launch detected but %s is not set", launcher, name));
  return static_cast<int>(parseInt(name, *v, lo, hi));
}

int optionalInt(const char* name, long long lo, long long hi, int dflt) {
  auto v = env(name);
  return v ? static_cast<int>(parseInt(name, *v, lo, hi)) : dflt;
}

uint64_t derive(const std::string& domain, const std::string& identity) {
  std::string s = domain + '\0' + identity;
  return sipHash24(kDeriveKey, s.data(), s.size());
}

uint16_t derivedPort(const std::string& identity) {
  return static_cast<uint16_t>(kDerivedPortMin + derive("port", identity) % kDerivedPortSpan);
}

std::array<uint8_t, 16> derivedSecret(const std::string& identity) {
  std::array<uint8_t, 16> s{};
  const uint64_t a = derive("secret-lo", identity), b = derive("secret-hi", identity);
  for (int i = 0; i < 8; ++i) {
    s[static_cast<size_t>(i)] = static_cast<uint8_t>(a >> (8 * i));
    s[static_cast<size_t>(8 + i)] = static_cast<uint8_t>(b >> (8 * i));
  }
  return s;
}

std::array<uint8_t, 16> parseSecret(const std::string& hex) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::array<uint8_t, 16> s{};
  bool ok = hex.size() == 32;
  for (size_t i = 0; ok && i < 16; ++i) {
    int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    ok = hi >= 0 && lo >= 0;
    s[i] = static_cast<uint8_t>(hi << 4 | (lo & 0xf));
  }
  if (!ok) {
    throw InvalidArgument(
        strprintf("STRATA_SECRET must be exactly 32 hex digits (16 bytes); got %zu characters", hex.size()));
  }
  return s;
}

uint16_t masterPort() { return static_cast<uint16_t>(parseInt("MASTER_PORT", *env("MASTER_PORT"), 1, 65535)); }

void checkRanks(EnvLaunch& e, const char* rankVar, const char* sizeVar) {
  if (e.rank >= e.size) {
    throw InvalidArgument(
        strprintf("%s launch: %s=%d is not below %s=%d", e.source.c_str(), rankVar, e.rank, sizeVar, e.size));
  }
  if (e.localSize >= 0 && e.localRank >= e.localSize) {
    throw InvalidArgument(strprintf("%s launch: local rank %d is not below the local size %d", e.source.c_str(),
                                    e.localRank, e.localSize));
  }
}

EnvLaunch fromTorchrun() {
  EnvLaunch e;
  const bool torchelastic = env("TORCHELASTIC_RUN_ID").has_value();
  e.source = !torchelastic && env("STRATA_SECRET") ? "strata-run" : "torchrun";
  e.rank = requiredInt("RANK", 0, 1 << 24, e.source.c_str());
  e.size = requiredInt("WORLD_SIZE", 1, 1 << 24, e.source.c_str());
  e.localRank = optionalInt("LOCAL_RANK", 0, 1 << 24, -1);
  e.localSize = optionalInt("LOCAL_WORLD_SIZE", 1, 1 << 24, -1);
  auto addr = env("MASTER_ADDR");
  if (!addr) throw InvalidArgument(e.source + " launch detected (RANK and WORLD_SIZE are set) but MASTER_ADDR is not");
  if (!env("MASTER_PORT")) {
    throw InvalidArgument(e.source + " launch detected (RANK and WORLD_SIZE are set) but MASTER_PORT is not");
  }
  e.rootAddr = *addr;
  e.rootPort = masterPort();
  // torchrun's agent serves its own TCP store on MASTER_PORT on that host; the root takes the next port.
  if (auto agent = env("TORCHELASTIC_USE_AGENT_STORE");
      agent && (*agent == "True" || *agent == "true" || *agent == "1")) {
    e.rootPort = static_cast<uint16_t>(e.rootPort == 65535 ? 65534 : e.rootPort + 1);
  }
  const std::string identity = "torchrun|" + env("TORCHELASTIC_RUN_ID").value_or("") + "|" + e.rootAddr + ":" +
                               std::to_string(e.rootPort) + "|" + std::to_string(e.size);
  e.secret = jobSecret(identity);
  e.secretDerived = !env("STRATA_SECRET");
  checkRanks(e, "RANK", "WORLD_SIZE");
  return e;
}

EnvLaunch fromOpenMpi() {
  EnvLaunch e;
  e.source = "openmpi";
  e.rank = requiredInt("OMPI_COMM_WORLD_RANK", 0, 1 << 24, "Open MPI");
  e.size = requiredInt("OMPI_COMM_WORLD_SIZE", 1, 1 << 24, "Open MPI");
  e.localRank = optionalInt("OMPI_COMM_WORLD_LOCAL_RANK", 0, 1 << 24, -1);
  e.localSize = optionalInt("OMPI_COMM_WORLD_LOCAL_SIZE", 1, 1 << 24, -1);
  if (auto addr = env("MASTER_ADDR")) {
    e.rootAddr = *addr;
  } else if (e.localSize == e.size) {
    e.rootAddr = "127.0.0.1";  // every rank on this host, so rank 0 is local to all of them
  } else {
    throw InvalidArgument(
        "Open MPI launch across several hosts: set MASTER_ADDR to the address of the host of rank 0 (for example "
        "mpirun -x MASTER_ADDR=<host of rank 0>); mpirun does not tell ranks where rank 0 runs");
  }
  auto job = env("OMPI_MCA_ess_base_jobid");
  if (!job) job = env("PMIX_NAMESPACE");
  const std::string identity = "openmpi|" + job.value_or("") + "|" + std::to_string(e.size);
  if (env("MASTER_PORT")) {
    e.rootPort = masterPort();
  } else if (job) {
    e.rootPort = derivedPort(identity);
  } else {
    throw InvalidArgument(
        "Open MPI launch: MASTER_PORT is not set and there is no job id (OMPI_MCA_ess_base_jobid or PMIX_NAMESPACE) "
        "to derive a port from; set MASTER_PORT");
  }
  e.secret = jobSecret(identity + "|" + e.rootAddr + ":" + std::to_string(e.rootPort));
  e.secretDerived = !env("STRATA_SECRET");
  checkRanks(e, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE");
  return e;
}

EnvLaunch fromSlurm() {
  EnvLaunch e;
  e.source = "slurm";
  e.rank = requiredInt("SLURM_PROCID", 0, 1 << 24, "Slurm");
  e.size = env("SLURM_NTASKS") ? requiredInt("SLURM_NTASKS", 1, 1 << 24, "Slurm")
                               : requiredInt("SLURM_NPROCS", 1, 1 << 24, "Slurm");
  e.localRank = optionalInt("SLURM_LOCALID", 0, 1 << 24, -1);
  if (auto v = env("SLURM_NTASKS_PER_NODE")) {
    e.localSize = tasksOnNode(*v, optionalInt("SLURM_NODEID", 0, 1 << 24, 0));
  } else if (auto t = env("SLURM_TASKS_PER_NODE")) {
    e.localSize = tasksOnNode(*t, optionalInt("SLURM_NODEID", 0, 1 << 24, 0));
  }
  if (auto addr = env("MASTER_ADDR")) {
    e.rootAddr = *addr;
  } else if (auto nl = env("SLURM_STEP_NODELIST") ? env("SLURM_STEP_NODELIST") : env("SLURM_JOB_NODELIST")) {
    // Rank 0 runs on the first node of the step (block distribution, Slurm's default).
    e.rootAddr = firstHostOfNodelist(*nl);
  } else {
    throw InvalidArgument("Slurm launch: neither MASTER_ADDR nor SLURM_STEP_NODELIST/SLURM_JOB_NODELIST is set");
  }
  auto jobId = env("SLURM_JOB_ID");
  if (!jobId) jobId = env("SLURM_JOBID");
  const std::string identity = "slurm|" + jobId.value_or("") + "." +
                               env("SLURM_STEP_ID").value_or(env("SLURM_STEPID").value_or("")) + "|" +
                               std::to_string(e.size);
  if (env("MASTER_PORT")) {
    e.rootPort = masterPort();
  } else if (jobId) {
    e.rootPort = derivedPort(identity);
  } else {
    throw InvalidArgument("Slurm launch: MASTER_PORT is not set and SLURM_JOB_ID is missing; set MASTER_PORT");
  }
  e.secret = jobSecret(identity + "|" + e.rootAddr + ":" + std::to_string(e.rootPort));
  e.secretDerived = !env("STRATA_SECRET");
  checkRanks(e, "SLURM_PROCID", "SLURM_NTASKS");
  return e;
}

}  // namespace

std::string firstHostOfNodelist(const std::string& nodelist) {
  // The first item ends at the first comma outside brackets; in it, every bracket group "[a-b,c]"
  // is replaced by its first value, keeping the zero padding ("node[01-04]" -> "node01").
  std::string host;
  size_t i = 0;
  while (i < nodelist.size() && nodelist[i] != ',') {
    char c = nodelist[i];
    if (c == '[') {
      size_t close = nodelist.find(']', i);
      if (close == std::string::npos) {
        throw InvalidArgument("Slurm node list '" + nodelist + "': unmatched '['");
      }
      size_t j = i + 1;
      std::string first;
      while (j < close && std::isdigit(static_cast<unsigned char>(nodelist[j]))) first += nodelist[j++];
      if (first.empty() || (j < close && nodelist[j] != '-' && nodelist[j] != ',')) {
        throw InvalidArgument("Slurm node list '" + nodelist + "': malformed range in brackets");
      }
      host += first;
      i = close + 1;
      continue;
    }
    if (c == ']') throw InvalidArgument("Slurm node list '" + nodelist + "': unmatched ']'");
    if (std::isspace(static_cast<unsigned char>(c))) break;
    host += c;
    ++i;
  }
  if (host.empty()) throw InvalidArgument("Slurm node list '" + nodelist + "' has no first host");
  return host;
}

int tasksOnNode(const std::string& tasksPerNode, int nodeIndex) {
  // "2(x3),1": nodes 0-2 run 2 tasks each, node 3 runs 1.
  size_t pos = 0;
  int node = 0;
  while (pos < tasksPerNode.size()) {
    size_t end = tasksPerNode.find(',', pos);
    if (end == std::string::npos) end = tasksPerNode.size();
    std::string item = tasksPerNode.substr(pos, end - pos);
    int count = 0, repeat = 1;
    char tail = 0;
    if (std::sscanf(item.c_str(), "%d(x%d)%c", &count, &repeat, &tail) == 2 ||
        (std::sscanf(item.c_str(), "%d%c", &count, &tail) == 1)) {
      if (count < 1 || repeat < 1) break;
      if (nodeIndex < node + repeat) return count;
      node += repeat;
    } else {
      break;
    }
    pos = end + 1;
  }
  throw InvalidArgument(
      strprintf("Slurm tasks-per-node '%s': malformed or has no entry for node %d", tasksPerNode.c_str(), nodeIndex));
}

EnvLaunch discoverEnvLaunch() {
  if (env("RANK") || env("WORLD_SIZE")) return fromTorchrun();
  if (env("OMPI_COMM_WORLD_RANK") || env("OMPI_COMM_WORLD_SIZE")) return fromOpenMpi();
  if (env("SLURM_PROCID")) return fromSlurm();
  // No launcher: one process on its own, as `python train.py` runs without torchrun.
  EnvLaunch e;
  e.source = "single process";
  e.rank = 0;
  e.size = 1;
  e.localRank = 0;
  e.localSize = 1;
  return e;
}

std::array<uint8_t, 16> jobSecret(const std::string& identity) {
  if (auto s = env("STRATA_SECRET")) return parseSecret(*s);
  return derivedSecret(identity);
}

UniqueIdInfo uniqueIdForEnv(const EnvLaunch& env) {
  if (env.rootAddr.empty()) throw InvalidArgument("environment launch (" + env.source + "): no root address");
  if (env.rootPort == 0) throw InvalidArgument("environment launch (" + env.source + "): root port is 0");
  auto addr =
      bootstrap_io::resolveHost(env.rootAddr, env.rootPort, false, "bootstrap root address (" + env.source + ")");
  UniqueIdInfo info;
  info.magic = kUniqueIdMagic;
  info.family = static_cast<uint8_t>(addr.family());
  bootstrap_io::sockAddrToRaw(addr, info.addr);
  info.port = env.rootPort;
  info.secret = env.secret;
  // Every rank must agree on the nonce (the world commId is derived from it) without talking first.
  static const char kDomain[] = "strata-env-nonce";
  info.nonce = sipHash24(env.secret, kDomain, sizeof(kDomain) - 1);
  return info;
}

}  // namespace strata
