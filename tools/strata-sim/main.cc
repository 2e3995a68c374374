// strata-sim: predicts what a collective takes on a described cluster by simulating the plans Strata executes
// (src/collectives/sim.h), and prints nccl-tests' table for a sweep of sizes, with the chosen algorithm per row,
// plus JSON (--json) and a chart of busbw against size per algorithm (--plot).
#include <getopt.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collectives/algorithms.h"
#include "collectives/host_layout.h"
#include "collectives/plan_program.h"
#include "collectives/sim.h"
#include "svg_plot.h"
#include "topology/json.h"
#include "util/error.h"

namespace strata {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

struct Options {
  std::string cluster;
  CollKind kind = CollKind::kAllReduce;
  std::string collective = "allreduce";
  int hosts = 0, ranksPerHost = 0;
  size_t minBytes = 32 << 20, maxBytes = 32 << 20;
  double factor = 2;
  size_t step = 0;  // -i: additive step instead of -f
  std::string algo = "auto";
  std::string dtype = "float";
  size_t elemSize = 4;
  std::string json, plot;
  bool symmetry = true;
  int coarsen = 1;
  int channels = 0;  // 0: the cluster's
  size_t pieceBytes = 0;
  int slots = 0;
  std::string plan;  // a loaded plan program (MSCCL XML, Strata plan file) simulated beside the built-ins
};

void printUsage(FILE* out) {
  std::fprintf(out,
               "usage: strata-sim --cluster FILE [options] COLLECTIVE [-b MIN] [-e MAX] [-f FACTOR | -i STEP]\n"
               "\n"
               "Predicts the time of a collective on the cluster FILE describes (clusters/*.json) by simulating the\n"
               "very plans Strata runs, piece by piece, over the cluster's links. Prints nccl-tests' table.\n"
               "\n"
               "  COLLECTIVE         allreduce, reducescatter, allgather, broadcast, reduce, alltoall\n"
               "  --cluster FILE     the cluster description (required)\n"
               "  --hosts H          hosts (default: the file's \"hosts\")\n"
               "  --ranks-per-host L ranks per host (default: the file's host.ranks)\n"
               "  -b, -e SIZE        smallest and largest size, nccl-tests' meaning (K, M, G suffixes; default 32M)\n"
               "  -f FACTOR          multiply the size by FACTOR per row (default 2); -i STEP adds STEP instead\n"
               "  -d TYPE            float (default), half, bfloat16, double, int8, int32, int64, fp8\n"
               "  --algo NAME        an algorithm of the collective (as strata-perf's --algo), 'auto' (default: the\n"
               "                     fastest simulated, which STRATA_TUNE=sim picks) or 'all' (auto, and every\n"
               "                     algorithm's time as a column)\n"
               "  --json FILE        also write the rows as JSON ('-': stdout instead of the table)\n"
               "  --plot FILE        write an SVG chart of busbw against size, one line per algorithm simulated\n"
               "  --channels N       the device executor's channels (default: the file's)\n"
               "  --piece-bytes B    bytes per message and channel, as STRATA_PIECE_BYTES (default: the file's)\n"
               "  --slots N          message slots per connection, as STRATA_NSLOTS (default: the file's)\n"
               "  --coarsen K        chunks and pieces K times larger: faster, less exact\n"
               "  --plan FILE        also simulate an algorithm file (MSCCL XML, Strata plan file; strata-plan check\n"
               "                     proves it), as one more algorithm under its name; on the device executor each of\n"
               "                     its channels is a thread block\n"
               "  --no-symmetry      simulate every rank even where the ranks' symmetry would let it skip them\n"
               "  -h, --help         this text\n"
               "\n"
               "Example: strata-sim --cluster clusters/dgx-h200.json --hosts 2 allreduce -b 1M -e 1G -f 2\n");
}

[[noreturn]] void usageError(const std::string& msg) {
  std::fprintf(stderr, "strata-sim: %s (see strata-sim --help)\n", msg.c_str());
  std::exit(kExitUsage);
}

size_t parseSize(const char* what, const char* text) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text, &end);
  double unit = 1;
  std::string suffix(end ? end : "");
  if (!suffix.empty()) {
    const char u = suffix[0];
    unit = u == 'K' || u == 'k' ? 1024.0 : u == 'M' || u == 'm' ? 1048576.0 : u == 'G' || u == 'g' ? 1073741824.0 : 0;
    const std::string rest = suffix.substr(1);
    if (unit == 0 || !(rest.empty() || rest == "B" || rest == "iB")) unit = -1;
  }
  if (end == text || errno != 0 || !(v >= 0) || unit < 0 || v * unit > 1e15)
    usageError(strprintf("%s '%s' is not a size (a number with an optional K, M or G)", what, text));
  return static_cast<size_t>(v * unit);
}

int parseInt(const char* what, const char* text, int lo, int hi) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || errno != 0 || v < lo || v > hi)
    usageError(strprintf("%s '%s': expected an integer from %d to %d", what, text, lo, hi));
  return static_cast<int>(v);
}

Options parseOptions(int argc, char** argv) {
  static const option kLong[] = {{"cluster", required_argument, nullptr, 'c'},
                                 {"hosts", required_argument, nullptr, 'H'},
                                 {"ranks-per-host", required_argument, nullptr, 'L'},
                                 {"algo", required_argument, nullptr, 'a'},
                                 {"json", required_argument, nullptr, 'J'},
                                 {"plot", required_argument, nullptr, 'P'},
                                 {"channels", required_argument, nullptr, 'C'},
                                 {"piece-bytes", required_argument, nullptr, 'B'},
                                 {"slots", required_argument, nullptr, 'N'},
                                 {"coarsen", required_argument, nullptr, 'K'},
                                 {"no-symmetry", no_argument, nullptr, 'S'},
                                 {"plan", required_argument, nullptr, 'p'},
                                 {"help", no_argument, nullptr, 'h'},
                                 {nullptr, 0, nullptr, 0}};
  Options o;
  bool minGiven = false, maxGiven = false;
  int c = 0;
  while ((c = getopt_long(argc, argv, "b:e:f:i:d:h", kLong, nullptr)) != -1) {
    switch (c) {
      case 'c': o.cluster = optarg; break;
      case 'H': o.hosts = parseInt("--hosts", optarg, 1, 1 << 20); break;
      case 'L': o.ranksPerHost = parseInt("--ranks-per-host", optarg, 1, 4096); break;
      case 'a': o.algo = optarg; break;
      case 'p': o.plan = optarg; break;
      case 'J': o.json = optarg; break;
      case 'P': o.plot = optarg; break;
      case 'C': o.channels = parseInt("--channels", optarg, 1, 32); break;
      case 'B':
        o.pieceBytes = parseSize("--piece-bytes", optarg);
        if (o.pieceBytes < 256 || o.pieceBytes > (size_t{64} << 20))
          usageError("--piece-bytes: from 256 B to 64 MiB, as STRATA_PIECE_BYTES");
        break;
      case 'N': o.slots = parseInt("--slots", optarg, 2, 1024); break;
      case 'K': o.coarsen = parseInt("--coarsen", optarg, 1, 1 << 16); break;
      case 'S': o.symmetry = false; break;
      case 'b':
        o.minBytes = parseSize("-b", optarg);
        minGiven = true;
        break;
      case 'e':
        o.maxBytes = parseSize("-e", optarg);
        maxGiven = true;
        break;
      case 'f': {
        char* end = nullptr;
        o.factor = std::strtod(optarg, &end);
        if (end == optarg || *end != '\0' || !(o.factor > 1))
          usageError(strprintf("-f '%s': expected a number > 1", optarg));
        break;
      }
      case 'i': o.step = parseSize("-i", optarg); break;
      case 'd': o.dtype = optarg; break;
      case 'h': printUsage(stdout); std::exit(0);
      default: usageError("unknown option");
    }
  }
  if (o.cluster.empty()) usageError("--cluster FILE is required");
  if (optind + 1 != argc) usageError(optind >= argc ? "name one collective" : "name one collective, not several");
  o.collective = argv[optind];
  bool found = false;
  for (CollKind k : {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather, CollKind::kBroadcast,
                     CollKind::kReduce, CollKind::kAllToAll}) {
    if (o.collective == collName(k)) {
      o.kind = k;
      found = true;
    }
  }
  if (!found)
    usageError("unknown collective '" + o.collective +
               "' (known: allreduce, reducescatter, allgather, broadcast, reduce, alltoall)");
  if (minGiven && !maxGiven) o.maxBytes = o.minBytes;
  if (maxGiven && !minGiven) o.minBytes = std::min(o.minBytes, o.maxBytes);
  if (o.minBytes > o.maxBytes) usageError("-b is larger than -e");
  static const std::map<std::string, size_t> kTypes = {{"float", 4},    {"float32", 4}, {"half", 2}, {"float16", 2},
                                                       {"bfloat16", 2}, {"double", 8},  {"int8", 1}, {"uint8", 1},
                                                       {"int32", 4},    {"int64", 8},   {"fp8", 1}};
  auto t = kTypes.find(o.dtype);
  if (t == kTypes.end()) usageError("unknown type '" + o.dtype + "'");
  o.elemSize = t->second;
  if (o.algo != "auto" && o.algo != "all" && o.plan.empty()) {
    bool known = false;
    std::string list;
    for (const std::string& a : algorithmsFor(o.kind)) {
      known |= a == o.algo;
      list += (list.empty() ? "" : ", ") + a;
    }
    if (!known)
      usageError("--algo: " + o.collective + " has no algorithm '" + o.algo + "' (available: " + list + ", auto, all)");
  }
  return o;
}

// nccl-tests' bus bandwidth factor.
double busFactor(CollKind k, int n) {
  switch (k) {
    case CollKind::kAllReduce: return 2.0 * (n - 1) / n;
    case CollKind::kReduceScatter:
    case CollKind::kAllGather:
    case CollKind::kAllToAll: return static_cast<double>(n - 1) / n;
    default: return 1;
  }
}

struct Row {
  size_t bytes = 0, count = 0;
  SimResult chosen;
  std::vector<SimResult> all;  // every algorithm simulated, fastest first
};

std::string describe(const SimCluster& c) {
  std::string s = strprintf("#  intra-host: %s %g GB/s x %g, %g us", intraKindName(c.intra), c.intraGBps,
                            c.intraEfficiency, c.intraLatencyUs);
  s += strprintf("; network: %d NIC(s) x %g Gbit/s x %g, %g us; fabric: %s", c.nics, c.nicGBps * 8, c.netEfficiency,
                 c.netLatencyUs, c.fabric == SimCluster::Fabric::kRail ? "rail-optimised" : "fat tree");
  if (c.hostsPerLeaf > 0) s += strprintf(", %d hosts per leaf, %g:1", c.hostsPerLeaf, c.oversubscription);
  s += strprintf("\n#  executor: %s", c.executor == SimCluster::Executor::kHost ? "host" : "device");
  if (c.executor == SimCluster::Executor::kDevice) s += strprintf(", %d channel(s)", c.channels);
  if (c.channelGBps > 0) s += strprintf(" of %g GB/s", c.channelGBps);
  s += strprintf(", pieces of %zu B x %d slots, chunks of %zu B, %g us per message, reduce %g GB/s, copy %g GB/s\n",
                 c.messageBytes(), c.nslots, c.chunkBytes(), c.messageUs, c.reduceGBps, c.copyGBps);
  return s;
}

int run(int argc, char** argv) {
  const Options o = parseOptions(argc, argv);
  SimCluster cluster = loadCluster(o.cluster);
  if (o.channels > 0) cluster.channels = o.channels;
  if (o.pieceBytes > 0) cluster.pieceBytes = o.pieceBytes;
  if (o.slots > 0) cluster.nslots = o.slots;
  const int hosts = o.hosts > 0 ? o.hosts : cluster.hosts;
  const int L = o.ranksPerHost > 0 ? o.ranksPerHost : cluster.ranksPerHost;
  const int n = hosts * L;
  if (cluster.maxHosts > 0 && hosts > cluster.maxHosts)
    throw InvalidArgument(strprintf("--hosts %d: cluster '%s' takes at most %d hosts (maxHosts)", hosts,
                                    cluster.name.c_str(), cluster.maxHosts));
  std::shared_ptr<const PlanProgram> program;
  if (!o.plan.empty()) {
    program = loadProgram(o.plan);
    if (program->kind != o.kind || program->nranks != n)
      throw InvalidArgument(strprintf("--plan %s is a %s on %d ranks, not a %s on %d (--hosts x --ranks-per-host)",
                                      o.plan.c_str(), collName(program->kind), program->nranks, collName(o.kind), n));
  }
  const bool programOnly = program && o.algo == program->name;
  if (o.algo != "auto" && o.algo != "all" && !programOnly) {
    // The algorithm's name and where it applies, before anything is simulated.
    const AlgorithmRecord& algorithm = algorithmOf(o.kind, o.algo);
    std::vector<int> hostOf;
    for (int h = 0; h < hosts; ++h) hostOf.insert(hostOf.end(), static_cast<size_t>(L), h);
    if (!algorithm.applies(HostLayout(n, hostOf, "strata-sim"), 0))
      throw InvalidArgument(strprintf("--algo %s needs %s (--hosts %d)", algorithm.name, algorithm.requirement, hosts));
  }

  SimCall call;
  call.kind = o.kind;
  call.elemSize = o.elemSize;
  call.hosts = hosts;
  call.ranksPerHost = L;
  call.symmetry = o.symmetry;
  call.coarsen = o.coarsen;

  std::vector<Row> rows;
  double wallMs = 0;
  for (size_t bytes = o.minBytes; bytes <= o.maxBytes;) {
    Row row;
    // nccl-tests' rounding: whole elements, a multiple of n for the collectives that split the buffer in n.
    const size_t unit = o.elemSize * (busFactor(o.kind, n) == 1 || o.kind == CollKind::kAllReduce ? 1 : n);
    row.bytes = bytes / unit * unit;
    row.count = row.bytes / o.elemSize;
    call.bytes = row.bytes;
    if (programOnly) {
      call.program = program.get();
      row.chosen = simulate(cluster, call);
      call.program = nullptr;
      row.all = {row.chosen};
    } else if (o.algo == "auto" || o.algo == "all") {
      row.all = simulateAll(cluster, call);
      if (program) {
        call.program = program.get();
        row.all.push_back(simulate(cluster, call));
        call.program = nullptr;
        std::stable_sort(row.all.begin(), row.all.end(),
                         [](const SimResult& a, const SimResult& b) { return a.us < b.us; });
      }
      row.chosen = row.all.front();
    } else {
      call.algorithm = o.algo;
      row.chosen = simulate(cluster, call);
      row.all = {row.chosen};
    }
    for (const SimResult& r : row.all) wallMs += r.wallMs;
    rows.push_back(std::move(row));
    const size_t next =
        o.step > 0 ? bytes + o.step : static_cast<size_t>(std::ceil(static_cast<double>(bytes) * o.factor));
    if (next <= bytes) break;
    bytes = next;
  }

  // Algorithms in the columns and the plot: every one simulated in some row, in the table's order.
  std::vector<std::string> algos;
  std::vector<std::string> names = algorithmsFor(o.kind);
  if (program) names.push_back(program->name);
  for (const std::string& a : names)
    for (const Row& row : rows)
      for (const SimResult& r : row.all)
        if (r.algorithm == a && std::find(algos.begin(), algos.end(), a) == algos.end()) algos.push_back(a);
  auto find = [](const Row& row, const std::string& a) -> const SimResult* {
    for (const SimResult& r : row.all)
      if (r.algorithm == a) return &r;
    return nullptr;
  };
  const double factor = busFactor(o.kind, n);
  auto algbw = [](const SimResult& r, size_t bytes) {
    return r.us > 0 ? static_cast<double>(bytes) / (r.us * 1e3) : 0.0;
  };

  FILE* out = stdout;
  const bool tableOut = o.json != "-";
  if (tableOut) {
    std::fprintf(out, "# strata-sim: %s, %d ranks (%d host(s) x %d) on '%s' (%s); times are predictions\n",
                 o.collective.c_str(), n, hosts, L, cluster.name.c_str(), o.cluster.c_str());
    std::fputs(describe(cluster).c_str(), out);
    std::fprintf(out, "#  algorithm: %s\n#\n",
                 o.algo == "auto"  ? "auto (the fastest simulated)"
                 : o.algo == "all" ? "auto (the fastest simulated); every algorithm's time"
                                   : o.algo.c_str());
    // Three header lines in nccl-tests' widths, each without trailing blanks.
    auto header = [&](const char* size, const char* count, const char* type, const char* redop, const char* time,
                      const char* algbw, const char* busbw, const char* algo, const std::vector<std::string>& more) {
      std::string line =
          strprintf("# %10s %12s %8s %6s %10s %7s %7s %10s", size, count, type, redop, time, algbw, busbw, algo);
      if (o.algo == "all")
        for (const std::string& m : more) line += strprintf(" %11s", m.c_str());
      line.erase(line.find_last_not_of(' ') + 1);
      std::fprintf(out, "%s\n", line.c_str());
    };
    header("", "", "", "", "predicted", "", "", "", algos);
    header("size", "count", "type", "redop", "time", "algbw", "busbw", "algorithm",
           std::vector<std::string>(algos.size(), "time"));
    header("(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", "", std::vector<std::string>(algos.size(), "(us)"));
  }
  double sumBus = 0;
  for (const Row& row : rows) {
    const double a = algbw(row.chosen, row.bytes);
    sumBus += a * factor;
    if (!tableOut) continue;
    std::fprintf(out, "  %10zu %12zu %8s %6s %10.2f %7.2f %7.2f %10s", row.bytes, row.count, o.dtype.c_str(),
                 o.kind == CollKind::kAllGather || o.kind == CollKind::kBroadcast || o.kind == CollKind::kAllToAll
                     ? "none"
                     : "sum",
                 row.chosen.us, a, a * factor, row.chosen.algorithm.c_str());
    if (o.algo == "all")
      for (const std::string& al : algos) {
        const SimResult* r = find(row, al);
        if (r) {
          std::fprintf(out, " %11.2f", r->us);
        } else {
          std::fprintf(out, " %11s", "n/a");
        }
      }
    std::fputc('\n', out);
  }
  if (tableOut) {
    std::fprintf(out, "# Avg bus bandwidth    : %g\n", rows.empty() ? 0.0 : sumBus / static_cast<double>(rows.size()));
    int simulated = n;
    for (const Row& row : rows) simulated = std::min(simulated, row.chosen.simulatedRanks);
    std::fprintf(out, "# simulated in %.3f s (ranks simulated per call: %d of %d)\n#\n", wallMs / 1e3, simulated, n);
  }

  if (!o.json.empty()) {
    using json::Value;
    Value v = Value::makeObject();
    v.add("tool", Value::makeString("strata-sim"));
    v.add("clusterFile", Value::makeString(o.cluster));
    v.add("cluster", json::parse(clusterToJson(cluster), "cluster"));
    v.add("collective", Value::makeString(o.collective));
    v.add("hosts", Value::makeNumber(hosts));
    v.add("ranksPerHost", Value::makeNumber(L));
    v.add("nranks", Value::makeNumber(n));
    v.add("dtype", Value::makeString(o.dtype));
    v.add("algorithm", Value::makeString(o.algo));
    Value& list = v.add("rows", Value::makeArray());
    for (const Row& row : rows) {
      Value& e = list.push(Value::makeObject());
      e.add("bytes", Value::makeNumber(static_cast<double>(row.bytes)));
      e.add("count", Value::makeNumber(static_cast<double>(row.count)));
      e.add("algorithm", Value::makeString(row.chosen.algorithm));
      e.add("timeUs", Value::makeNumber(row.chosen.us));
      e.add("algBw", Value::makeNumber(algbw(row.chosen, row.bytes)));
      e.add("busBw", Value::makeNumber(algbw(row.chosen, row.bytes) * factor));
      Value& each = e.add("algorithms", Value::makeObject());
      for (const SimResult& r : row.all) {
        Value& x = each.add(r.algorithm, Value::makeObject());
        x.add("timeUs", Value::makeNumber(r.us));
        x.add("busBw", Value::makeNumber(algbw(r, row.bytes) * factor));
        x.add("simulatedRanks", Value::makeNumber(r.simulatedRanks));
        x.add("messages", Value::makeNumber(static_cast<double>(r.pieces)));
        x.add("wallMs", Value::makeNumber(r.wallMs));
      }
    }
    const std::string text = json::write(v) + "\n";
    if (o.json == "-") {
      std::fputs(text.c_str(), stdout);
    } else {
      std::ofstream f(o.json);
      if (!(f << text)) throw SysError("--json " + o.json + ": cannot write the file", errno);
    }
  }
  if (!o.plot.empty()) {
    std::vector<sim::Series> series;
    for (const std::string& a : algos) {
      sim::Series s;
      s.name = a;
      for (const Row& row : rows) {
        const SimResult* r = find(row, a);
        s.x.push_back(static_cast<double>(row.bytes));
        s.y.push_back(r ? algbw(*r, row.bytes) * factor : NAN);
      }
      series.push_back(std::move(s));
    }
    const std::string title =
        strprintf("strata-sim: %s on %s, %d ranks (%d x %d)", o.collective.c_str(), cluster.name.c_str(), n, hosts, L);
    std::ofstream f(o.plot);
    if (!(f << sim::svgChart(title, "predicted busbw (GB/s)", series)))
      throw SysError("--plot " + o.plot + ": cannot write the file", errno);
  }
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  try {
    return strata::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata-sim: %s\n", e.what());
    return strata::kExitFailure;
  }
}
