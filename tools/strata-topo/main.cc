// strata-topo: shows the topology Strata works from. Alone, this host's discovery (one rank); with --file
// (or STRATA_TOPO_FILE), a topology file, optionally with --ranks N placed on its hosts; with --all under a
// launcher, the whole job's topology exactly as a communicator builds it. Text by default, --json for the
// file format that STRATA_TOPO_FILE reads back.
#include <getopt.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "collectives/cost_model.h"
#include "topology/host.h"
#include "topology/topology.h"
#include "util/config.h"
#include "util/error.h"

namespace strata {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

struct Options {
  bool json = false;
  bool all = false;
  bool choices = false;
  std::string file;
  int ranks = 0;  // 0: not given
};

void printUsage(FILE* out) {
  std::fprintf(out,
               "usage: strata-topo [--json] [--file FILE] [--ranks N] [--all] [--choices]\n"
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
               "  -h, --help    this text\n"
               "\n"
               "Example: strata-topo --file tests/data/topo/dgx_2x8gpu_4nic.json --ranks 16\n");
}

[[noreturn]] void usageError(const std::string& msg) {
  std::fprintf(stderr, "strata-topo: %s (see strata-topo --help)\n", msg.c_str());
  std::exit(kExitUsage);
}

Options parseOptions(int argc, char** argv) {
  static const option kLong[] = {{"json", no_argument, nullptr, 'j'},
                                 {"file", required_argument, nullptr, 'f'},
                                 {"ranks", required_argument, nullptr, 'n'},
                                 {"all", no_argument, nullptr, 'a'},
                                 {"choices", no_argument, nullptr, 'c'},
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
