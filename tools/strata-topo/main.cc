// strata-topo: shows the topology Strata works from. Alone, this host's discovery (one rank); with --file
// (or STRATA_TOPO_FILE), a topology file, optionally with --ranks N placed on its hosts; with --all under a
// launcher, the whole job's topology exactly as a communicator builds it. Text by default, --json for the
// file format that STRATA_TOPO_FILE reads back. --algorithms lists the algorithm table.
#include <getopt.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "collectives/algorithms.h"
#include "collectives/cost_model.h"
#include "topology/host.h"
#include "topology/topology.h"
#include "util/config.h"
#include "util/error.h"
#include "util/json_escape.h"

namespace strata {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

struct Options {
  bool json = false;
  bool all = false;
  bool choices = false;
  bool algorithms = false;  // the algorithm table (--algorithms)
  bool device = false;      // the device executor's prediction (--device)
  bool channelsGiven = false;
  DeviceFigures figures;
  std::string file;
  int ranks = 0;  // 0: not given
};

void printUsage(FILE* out) {
  std::fprintf(out,
               "usage: strata-topo [--json] [--file FILE] [--ranks N] [--all] [--choices]\n"
               "       strata-topo --algorithms [--json]\n"
               "\n"
               "Prints the topology Strata uses to choose algorithms: hosts, NUMA domains, NICs, GPUs, link\n"
               "figures, and where each rank runs.\n"
               "\n"
               "  (no option)   discover this host and place one rank on it\n"
               "  --json        print JSON (the format STRATA_TOPO_FILE reads) instead of text\n"
               "  --file FILE   read a topology file instead of discovering (default: $STRATA_TOPO_FILE)\n"
               "  --ranks N     place N ranks: on this host, or spread evenly over the file's hosts when the\n"
               "                file has no ranks section (N must be a multiple of its host count)\n"
               "  --all         under a launcher (strata-run -n 4 strata-topo --all, torchrun, mpirun, srun):\n"
               "                the job's topology, built as a communicator builds it; rank 0 prints\n"
               "  --choices     also print the selector's algorithm and predicted time per collective and size\n"
               "  --device      also print the device executor's predicted ring time and busbw for the GPU ranks\n"
               "                (all-reduce, reduce-scatter, all-gather, 1 MiB - 1 GiB), with what it assumes:\n"
               "  --channels N  channels per call (default STRATA_GPU_CHANNELS)\n"
               "  --lane-gbps X what one channel (thread block) moves, GB/s (default 11.6: NCCL's ~370 GB/s ring\n"
               "                peak on H100 over its 32 channels)\n"
               "  --memory-gbps X  the GPU's memory bandwidth, GB/s (default 4800, H200)\n"
               "  --algorithms  print every algorithm of every collective (the table the selector chooses from):\n"
               "                its default, whether the device executor runs it in channels, NCCL_ALGO's name\n"
               "                for it, where it applies, what it does; with --json as a JSON array\n"
               "  -h, --help    this text\n"
               "\n"
               "Example: strata-topo --file tests/data/topo/dgx_2x8gpu_4nic.json --ranks 16\n");
}

[[noreturn]] void usageError(const std::string& msg) {
  std::fprintf(stderr, "strata-topo: %s (see strata-topo --help)\n", msg.c_str());
  std::exit(kExitUsage);
}

double number(const char* what, const char* text, double lo, double hi) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (*text == '\0' || *end != '\0' || !(v >= lo && v <= hi))
    usageError(strprintf("%s %s: expected a number from %g to %g", what, text, lo, hi));
  return v;
}

Options parseOptions(int argc, char** argv) {
  static const option kLong[] = {{"json", no_argument, nullptr, 'j'},
                                 {"file", required_argument, nullptr, 'f'},
                                 {"ranks", required_argument, nullptr, 'n'},
                                 {"all", no_argument, nullptr, 'a'},
                                 {"choices", no_argument, nullptr, 'c'},
                                 {"algorithms", no_argument, nullptr, 'A'},
                                 {"device", no_argument, nullptr, 'd'},
                                 {"channels", required_argument, nullptr, 'C'},
                                 {"lane-gbps", required_argument, nullptr, 'L'},
                                 {"memory-gbps", required_argument, nullptr, 'M'},
                                 {"help", no_argument, nullptr, 'h'},
                                 {nullptr, 0, nullptr, 0}};
  Options o;
  opterr = 0;  // our own messages
  int c;
  while ((c = getopt_long(argc, argv, ":h", kLong, nullptr)) != -1) {
    switch (c) {
      case 'j': o.json = true; break;
      case 'a': o.all = true; break;
      case 'c': o.choices = true; break;
      case 'A': o.algorithms = true; break;
      case 'd': o.device = true; break;
      case 'C':
        o.figures.channels = static_cast<int>(number("--channels", optarg, 1, 32));
        o.channelsGiven = true;
        break;
      case 'L': o.figures.laneGBps = number("--lane-gbps", optarg, 0.001, 1e6); break;
      case 'M': o.figures.memoryGBps = number("--memory-gbps", optarg, 0.001, 1e7); break;
      case 'f': o.file = optarg; break;
      case 'n': {
        char* end = nullptr;
        const long n = std::strtol(optarg, &end, 10);
        if (*optarg == '\0' || *end != '\0' || n < 1 || n > 1 << 20)
          usageError(std::string("--ranks ") + optarg + ": expected a rank count from 1 to 1048576");
        o.ranks = static_cast<int>(n);
        break;
      }
      case 'h': printUsage(stdout); std::exit(0);
      case ':': usageError(std::string(argv[optind - 1]) + " needs a value");
      default: usageError(std::string("unknown option ") + argv[optind - 1]);
    }
  }
  if (optind < argc) usageError(std::string("unexpected argument ") + argv[optind]);
  if (o.algorithms && (o.all || o.ranks || o.choices || o.device || !o.file.empty()))
    usageError("--algorithms takes no topology: it lists the table (with --json at most)");
  if (o.all && o.ranks) usageError("--ranks cannot be combined with --all: the launcher decides the ranks");
  return o;
}

void print(const Topology& t, bool json) {
  const std::string out = json ? t.toJson() : t.toText();
  std::fwrite(out.data(), 1, out.size(), stdout);
}

// The selector's choice for the training trio from 8 B to 1 GiB on this topology, with the cost model's
// predicted time of every algorithm: what STRATA_DEBUG_SUBSYS=TUNING logs at run time.
void printChoices(const Topology& t, const Config& config) {
  const TuningInputs in = tuningInputs(t, std::max<size_t>(config.connectionCapacity() / 2, config.pieceBytes));
  std::printf("\nselector (%d ranks, %d hosts; intra %.1f us %.0f GB/s, inter %.1f us %.1f GB/s x %d NIC(s)/host):\n",
              in.nranks, t.nhosts(), in.intra.latencyUs, in.intra.bandwidthGBps, in.inter.latencyUs,
              in.inter.bandwidthGBps, in.nicsPerHost);
  std::printf("%-14s %12s  %-8s %12s  %s\n", "collective", "size", "choice", "predicted", "all algorithms (us)");
  for (CollKind kind : {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather}) {
    for (size_t bytes = 8; bytes <= (size_t{1} << 30); bytes *= 8) {
      const std::vector<Prediction> all = predictAll(kind, bytes, in);
      std::string rest;
      for (const Prediction& p : all) rest += strprintf(" %s=%.4g", p.algorithm.c_str(), p.us);
      std::printf("%-14s %12zu  %-8s %9.4g us %s\n", collName(kind), bytes, all.front().algorithm.c_str(),
                  all.front().us, rest.c_str());
    }
  }
}

// The device executor's prediction for the training trio on this topology's GPU ranks (ring, its algorithm), in
// nccl-tests' columns, with every figure it assumes beyond the file.
void printDevicePrediction(const Topology& t, DeviceFigures f) {
  f.chunkBytes = static_cast<size_t>(f.channels) * (size_t{512} << 10);  // the executor's chunk rule
  const TuningInputs in = deviceTuningInputs(t, f);
  const int n = in.nranks;
  std::printf(
      "\ndevice executor, predicted (%d ranks, %d hosts; %s; intra-host link %.1f us %.0f GB/s per direction; "
      "%d channels x %.1f GB/s each; reduction %.0f GB/s, fused with the transfer; chunk %zu KiB):\n",
      n, t.nhosts(), defaultAlgorithm(CollKind::kAllReduce).name, in.intra.latencyUs, in.intra.bandwidthGBps,
      f.channels, f.laneGBps, in.reduceGBps, f.chunkBytes >> 10);
  std::printf("%-14s %12s %12s %10s %10s\n", "collective", "size (B)", "time (us)", "algbw", "busbw");
  for (CollKind kind : {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather}) {
    const double factor = kind == CollKind::kAllReduce ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n;
    for (size_t bytes = size_t{1} << 20; bytes <= (size_t{1} << 30); bytes *= 4) {
      double us = 0;
      // The device executor runs the collective's default algorithm (STRATA_ALGO aside).
      for (const Prediction& p : predictAll(kind, bytes, in))
        if (p.algorithm == defaultAlgorithm(kind).name) us = p.us;
      const double algbw = us > 0 ? static_cast<double>(bytes) / (us * 1e3) : 0;
      std::printf("%-14s %12zu %12.1f %10.2f %10.2f\n", collName(kind), bytes, us, algbw, algbw * factor);
    }
  }
}

// The algorithm table, as the selector, the simulator, the device executor and NCCL_ALGO see it.
void printAlgorithms(bool json) {
  const std::vector<const AlgorithmRecord*> all = allAlgorithms();
  if (json) {
    std::string out = "[\n";
    for (size_t i = 0; i < all.size(); ++i) {
      const AlgorithmRecord& r = *all[i];
      out += "  {\"collective\": " + jsonString(collName(r.kind)) + ", \"algorithm\": " + jsonString(r.name) +
             ", \"default\": " + (&defaultAlgorithm(r.kind) == &r ? "true" : "false") +
             ", \"device\": " + (r.deviceCapable ? "true" : "false") +
             ", \"nccl\": " + (r.ncclName ? jsonString(r.ncclName) : "null") +
             ", \"requires\": " + jsonString(r.requirement) + ", \"description\": " + jsonString(r.description) +
             (i + 1 < all.size() ? "},\n" : "}\n");
    }
    out += "]\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
    return;
  }
  std::printf("%-14s %-14s %-8s %-7s %-5s %-27s %s\n", "collective", "algorithm", "default", "device", "nccl",
              "requires", "description");
  for (const AlgorithmRecord* record : all) {
    const AlgorithmRecord& r = *record;
    std::printf("%-14s %-14s %-8s %-7s %-5s %-27s %s\n", collName(r.kind), r.name,
                &defaultAlgorithm(r.kind) == &r ? "yes" : "", r.deviceCapable ? "yes" : "",
                r.ncclName ? r.ncclName : "", *r.requirement ? r.requirement : "any layout", r.description);
  }
}

// The communicator-wide topology: what Communicator::create does, without the transports.
int runAll(const Options& o, Config config) {
  if (!o.file.empty()) config.topoFile = o.file;
  const EnvLaunch env = discoverEnvLaunch();
  auto bootstrap = connectFromEnv(config, env);
  const std::string me = hostIdentity(config);
  std::vector<std::string> hostIds;
  for (const auto& id : bootstrap->allGather(me.data(), me.size())) hostIds.emplace_back(id.begin(), id.end());
  const Topology t = buildTopology(config, *bootstrap, hostIds);
  if (bootstrap->rank() == 0) {
    print(t, o.json);
    if (o.choices) printChoices(t, config);
  }
  std::fflush(stdout);
  bootstrap->barrier();
  return 0;
}

int run(const Options& o) {
  if (o.algorithms) {
    printAlgorithms(o.json);
    return 0;
  }
  const Config config = Config::fromEnv();
  if (o.all) return runAll(o, config);
  const std::string file = o.file.empty() ? config.topoFile : o.file;
  Topology t;
  if (file.empty()) {
    t.hosts.push_back(discoverHost(config));
    t.ranks = placeRanks(t.hosts, std::vector<int>(static_cast<size_t>(o.ranks ? o.ranks : 1), 0));
  } else {
    t = loadTopologyFile(file, o.file.empty() ? "STRATA_TOPO_FILE" : "--file");
    if (o.ranks && !t.ranks.empty() && o.ranks != t.nranks())
      usageError(strprintf("--ranks %d, but %s already places %d ranks", o.ranks, file.c_str(), t.nranks()));
    if (o.ranks && t.ranks.empty()) {
      if (o.ranks % t.nhosts() != 0)
        usageError(
            strprintf("--ranks %d does not divide evenly over the %d hosts of %s", o.ranks, t.nhosts(), file.c_str()));
      // Consecutive ranks share a host, as launchers number them.
      const int perHost = o.ranks / t.nhosts();
      std::vector<int> hostOfRank;
      for (int r = 0; r < o.ranks; ++r) hostOfRank.push_back(r / perHost);
      t.ranks = placeRanks(t.hosts, hostOfRank);
    }
  }
  print(t, o.json);
  if (o.choices) printChoices(t, config);
  if (o.device) {
    DeviceFigures f = o.figures;
    if (!o.channelsGiven)
      f.channels = config.gpuChannels != 0 ? static_cast<int>(config.gpuChannels) : deviceChannelCap(t, f);
    printDevicePrediction(t, f);
  }
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  const strata::Options o = strata::parseOptions(argc, argv);
  try {
    return strata::run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata-topo: %s\n", e.what());
    return strata::kExitFailure;
  }
}
