// The command line: nccl-tests' options and Strata's, checked before Strata starts.
#include "options.h"

#include <getopt.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "baseline.h"
#include "device.h"

namespace strata::perf {
namespace {

const OpInfo kOps[] = {
    {strataSum, "sum"}, {strataProd, "prod"}, {strataMax, "max"}, {strataMin, "min"}, {strataAvg, "avg"}};

std::string builtBaselineList() {
  std::string list;
  for (const std::string& name : builtBaselines()) list += (list.empty() ? "" : ", ") + name;
  return list.empty() ? "none" : list;
}

// The rank the launcher gave this process, before Strata is up: only rank 0 complains about options.
bool isLauncherRankZero() {
  for (const char* var : {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') return std::strcmp(v, "0") == 0;
  }
  return true;
}

[[noreturn]] void usageError(const std::string& message) {
  if (isLauncherRankZero()) {
    std::fprintf(stderr, "strata-perf: %s\n\n", message.c_str());
    printUsage(stderr);
  }
  std::exit(kExitUsage);
}

bool parseSize(const char* text, size_t* out) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text, &end);
  if (end == text || errno != 0 || !(v >= 0)) return false;
  std::string suffix(end);
  double unit = 1;
  if (!suffix.empty()) {
    switch (suffix[0]) {
      case 'k':
      case 'K': unit = 1024.0; break;
      case 'm':
      case 'M': unit = 1024.0 * 1024; break;
      case 'g':
      case 'G': unit = 1024.0 * 1024 * 1024; break;
      case 't':
      case 'T': unit = 1024.0 * 1024 * 1024 * 1024; break;
      case 'b':
      case 'B': break;
      default: return false;
    }
    std::string rest = suffix.substr(unit == 1 ? 0 : 1);
    if (!rest.empty() && rest != "B" && rest != "b" && rest != "iB") return false;
  }
  double bytes = v * unit;
  if (bytes > 1e18) return false;
  *out = static_cast<size_t>(bytes);
  return true;
}

bool parseInt(const char* text, long lo, long hi, int* out) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text, &end, 0);
  if (end == text || *end != '\0' || errno != 0 || v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

std::vector<std::string> splitList(const std::string& s) {
  std::vector<std::string> items;
  size_t start = 0;
  for (;;) {
    size_t comma = s.find(',', start);
    items.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return items;
    start = comma + 1;
  }
}

}  // namespace

std::span<const OpInfo> allOps() { return kOps; }

const char* opName(strataRedOp_t op) {
  for (const OpInfo& o : kOps) {
    if (o.op == op) return o.name;
  }
  return "?";
}

void printUsage(FILE* out) {
  std::fprintf(out,
               "usage: strata-perf <%s> [options]\n"
               "\n"
               "Measures one collective over a range of sizes, like nccl-tests (all_reduce_perf, ...), and prints\n"
               "the same table. Start it with a launcher: strata-run -n 4 strata-perf allreduce -b 8 -e 128M\n"
               "(or torchrun, mpirun, srun). Buffers are host memory.\n"
               "\n"
               "nccl-tests options:\n"
               "  -b, --minbytes SIZE      smallest size (default 32M; suffixes K, M, G are powers of 1024)\n"
               "  -e, --maxbytes SIZE      largest size (default 32M)\n"
               "  -f, --stepfactor F       multiply the size by F each step (default 2)\n"
               "  -i, --stepbytes SIZE     add SIZE each step instead (default 1M; used when -f is not given)\n"
               "  -n, --iters N            timed runs per size (default 20)\n"
               "  -w, --warmup_iters N     untimed runs per size before them (default 5)\n"
               "  -c, --check N            check runs per size, each verified element by element; 0 = none\n"
               "                           (default 1)\n"
               "  -d, --datatype T         int8 uint8 int32 uint32 int64 uint64 half float double bfloat16\n"
               "                           fp8_e4m3 fp8_e5m2, a comma-separated list, or all (default float)\n"
               "  -o, --op OP              sum prod max min avg, a list, or all (default sum)\n"
               "  -r, --root R             root of broadcast and reduce (default 0)\n"
               "  -T, --timeout SEC        deadline of every wait inside Strata (sets STRATA_TIMEOUT_MS); 0 = keep\n"
               "  -t, --nthreads 1, -g, --ngpus 1, -m, --agg_iters 1, -z, --blocking, -y, --stream_null\n"
               "                           accepted for compatibility (one rank per process, blocking, host memory)\n"
               "\n"
               "Strata options:\n"
               "      --algo NAME          force an algorithm (sets STRATA_ALGO=<collective>:NAME; a value with ':'\n"
               "                           is used as the whole STRATA_ALGO)\n"
               "      --transport T        shm, tcp, ucx or auto (sets STRATA_TRANSPORT)\n"
               "      --json FILE          also write the rows and a description of the run as JSON (rank 0)\n"
               "      --csv FILE           also write them as CSV (rank 0)\n"
               "      --progress           one line per finished size on stderr\n"
               "      --membound           all-reduce only: time memcpy of the same buffers on every rank at once\n"
               "                           and add the memory-bandwidth bound of busbw and Strata's share of it\n"
               "      --show-wrong N       describe the first N wrong elements of each rank on stderr\n"
               "      --baseline LIST      also time these libraries on the same calls and buffers: mpi, gloo, nccl\n"
               "                           (built here: %s). Each adds columns time, busbw, #wrong and\n"
               "                           \"x NAME\" (Strata's out-of-place busbw / the baseline's); n/a where the\n"
               "                           library lacks the type or op. mpi needs the ranks started by mpirun;\n"
               "                           nccl needs --device and one GPU per rank (libnccl.so.2 loaded at run time)\n"
               "      --device             CUDA device buffers (GPU local rank mod device count) and a stream per\n"
               "                           rank; each call is timed from launch to completion of its stream\n"
               "      --inject-fault       TEST ONLY: corrupt one result element after the first check run, so\n"
               "                           the check must report it (#wrong > 0, exit status 1)\n"
               "  -h, --help               show this help\n"
               "\n"
               "Columns as nccl-tests: size is the larger buffer in bytes (for allgather the total received,\n"
               "for reducescatter and alltoall the total sent), count the count argument of the call, time the\n"
               "median over the timed runs of the slowest rank, algbw = size / time, busbw = algbw x 2(n-1)/n\n"
               "(allreduce), (n-1)/n (reducescatter, allgather, alltoall) or 1 (broadcast, reduce, sendrecv).\n"
               "In-place sendrecv (one buffer sent from and received into) is timed but not checked (#wrong N/A).\n"
               "Exit status: 0 if every check passed (Strata's and the baselines'), 1 on a wrong result or an\n"
               "error, 2 on bad usage.\n",
               collNames(), builtBaselineList().c_str());
}

Options parseOptions(int argc, char** argv) {
  if (argc < 2) usageError("missing the collective");
  std::string first = argv[1];
  if (first == "-h" || first == "--help") {
    printUsage(stdout);
    std::exit(0);
  }
  Options opt;
  opt.coll = findColl(first);
  if (opt.coll == nullptr) usageError("unknown collective '" + first + "' (expected one of " + collNames() + ")");

  enum LongOnly {
    kAlgo = 1000,
    kTransport,
    kJson,
    kCsv,
    kProgress,
    kInjectFault,
    kShowWrong,
    kBaseline,
    kMembound,
    kDevice
  };
  static const option kLongOptions[] = {
      {"minbytes", required_argument, nullptr, 'b'},
      {"maxbytes", required_argument, nullptr, 'e'},
      {"stepbytes", required_argument, nullptr, 'i'},
      {"stepfactor", required_argument, nullptr, 'f'},
      {"iters", required_argument, nullptr, 'n'},
      {"warmup_iters", required_argument, nullptr, 'w'},
      {"check", required_argument, nullptr, 'c'},
      {"datatype", required_argument, nullptr, 'd'},
      {"op", required_argument, nullptr, 'o'},
      {"root", required_argument, nullptr, 'r'},
      {"timeout", required_argument, nullptr, 'T'},
      {"nthreads", required_argument, nullptr, 't'},
      {"ngpus", required_argument, nullptr, 'g'},
      {"agg_iters", required_argument, nullptr, 'm'},
      {"blocking", required_argument, nullptr, 'z'},
      {"stream_null", required_argument, nullptr, 'y'},
      {"algo", required_argument, nullptr, kAlgo},
      {"transport", required_argument, nullptr, kTransport},
      {"json", required_argument, nullptr, kJson},
      {"csv", required_argument, nullptr, kCsv},
      {"progress", no_argument, nullptr, kProgress},
      {"inject-fault", no_argument, nullptr, kInjectFault},
      {"show-wrong", required_argument, nullptr, kShowWrong},
      {"baseline", required_argument, nullptr, kBaseline},
      {"membound", no_argument, nullptr, kMembound},
      {"device", no_argument, nullptr, kDevice},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0},
  };
  // getopt sees the collective as the program name.
  int subArgc = argc - 1;
  char** subArgv = argv + 1;
  opterr = 0;
  optind = 1;
  bool factorGiven = false, stepBytesGiven = false;
  int one = 0, ignored = 0;
  for (;;) {
    int c = getopt_long(subArgc, subArgv, ":b:e:i:f:n:w:c:d:o:r:T:t:g:m:z:y:h", kLongOptions, nullptr);
    if (c == -1) break;
    const std::string arg = optarg ? optarg : "";
    switch (c) {
      case 'b':
        if (!parseSize(optarg, &opt.minBytes)) usageError("-b/--minbytes: bad size '" + arg + "'");
        break;
      case 'e':
        if (!parseSize(optarg, &opt.maxBytes)) usageError("-e/--maxbytes: bad size '" + arg + "'");
        break;
      case 'i':
        if (!parseSize(optarg, &opt.stepBytes) || opt.stepBytes == 0) {
          usageError("-i/--stepbytes: bad size '" + arg + "' (must be > 0)");
        }
        stepBytesGiven = true;
        break;
      case 'f': {
        int f = 0;
        if (!parseInt(optarg, 1, 1 << 20, &f))
          usageError("-f/--stepfactor: expected an integer >= 1, got '" + arg + "'");
        opt.stepFactor = static_cast<size_t>(f);
        factorGiven = true;
        break;
      }
      case 'n':
        if (!parseInt(optarg, 1, 1 << 30, &opt.iters))
          usageError("-n/--iters: expected an integer >= 1, got '" + arg + "'");
        break;
      case 'w':
        if (!parseInt(optarg, 0, 1 << 30, &opt.warmupIters)) {
          usageError("-w/--warmup_iters: expected an integer >= 0, got '" + arg + "'");
        }
        break;
      case 'c':
        if (!parseInt(optarg, 0, 1 << 20, &opt.check))
          usageError("-c/--check: expected an integer >= 0, got '" + arg + "'");
        break;
      case 'd': opt.dtypeArg = arg; break;
      case 'o': opt.opArg = arg; break;
      case 'r':
        if (!parseInt(optarg, 0, 1 << 30, &opt.root)) usageError("-r/--root: expected a rank >= 0, got '" + arg + "'");
        break;
      case 'T':
        if (!parseInt(optarg, 0, 1 << 30, &opt.timeoutSec)) {
          usageError("-T/--timeout: expected seconds >= 0, got '" + arg + "'");
        }
        break;
      case 't':
      case 'g':
      case 'm':
        if (!parseInt(optarg, 1, 1, &one)) {
          usageError(std::string("-") + static_cast<char>(c) +
                     ": strata-perf runs one rank per process (only 1 is supported), got '" + arg + "'");
        }
        break;
      case 'z':
      case 'y':
        if (!parseInt(optarg, 0, 1, &ignored))
          usageError(std::string("-") + static_cast<char>(c) + ": expected 0 or 1, got '" + arg + "'");
        break;
      case kAlgo:
        if (arg.empty()) usageError("--algo needs a name");
        opt.algo = arg;
        break;
      case kTransport:
        if (arg != "shm" && arg != "tcp" && arg != "ucx" && arg != "auto")
          usageError("--transport: expected shm, tcp, ucx or auto, got '" + arg + "'");
        opt.transport = arg;
        break;
      case kJson: opt.jsonPath = arg; break;
      case kCsv: opt.csvPath = arg; break;
      case kProgress: opt.progress = true; break;
      case kMembound: opt.membound = true; break;
      case kDevice:
        if (!deviceBuilt()) usageError("--device: this strata-perf was built without CUDA");
        opt.device = true;
        break;
      case kInjectFault: opt.injectFault = true; break;
      case kShowWrong:
        if (!parseInt(optarg, 0, 1 << 30, &opt.showWrong))
          usageError("--show-wrong: expected a count >= 0, got '" + arg + "'");
        break;
      case kBaseline:
        for (const std::string& name : splitList(arg)) {
          const std::vector<std::string> known = knownBaselines(), built = builtBaselines();
          if (std::find(known.begin(), known.end(), name) == known.end()) {
            usageError("--baseline: unknown baseline '" + name + "' (expected a list of mpi, gloo, nccl)");
          }
          if (std::find(built.begin(), built.end(), name) == built.end()) {
            usageError("--baseline " + name + ": this strata-perf was built without it (built: " + builtBaselineList() +
                       ")");
          }
          if (std::find(opt.baselines.begin(), opt.baselines.end(), name) == opt.baselines.end()) {
            opt.baselines.push_back(name);
          }
        }
        break;
      case 'h': printUsage(stdout); std::exit(0);
      case ':': usageError(std::string("option '") + subArgv[optind - 1] + "' needs a value");
      default: usageError(std::string("unknown option '") + subArgv[optind - 1] + "'");
    }
  }
  if (optind < subArgc) usageError(std::string("unexpected argument '") + subArgv[optind] + "'");
  if (stepBytesGiven && !factorGiven) opt.stepFactor = 1;
  if (opt.minBytes > opt.maxBytes) {
    usageError("minbytes (" + std::to_string(opt.minBytes) + ") is larger than maxbytes (" +
               std::to_string(opt.maxBytes) + ")");
  }

  for (const std::string& name : splitList(opt.dtypeArg)) {
    if (name == "all") {
      for (const DtypeInfo& t : allDtypes()) opt.dtypes.push_back(&t);
    } else if (const DtypeInfo* t = findDtype(name)) {
      opt.dtypes.push_back(t);
    } else {
      usageError("-d/--datatype: unknown type '" + name + "'");
    }
  }
  for (const std::string& name : splitList(opt.opArg)) {
    bool found = false;
    for (const OpInfo& o : kOps) {
      if (name == "all" || name == o.name) {
        opt.ops.push_back(o);
        found = true;
      }
    }
    if (!found) usageError("-o/--op: unknown op '" + name + "' (expected sum, prod, max, min, avg or all)");
  }
  for (const std::string& b : opt.baselines) {
    if (opt.device && b != "nccl") usageError("--baseline " + b + ": runs on host buffers, not with --device");
    if (!opt.device && b == "nccl") usageError("--baseline nccl needs --device");
  }
  if (opt.device && opt.membound) usageError("--membound measures host memcpy; it does not apply with --device");
  if (!opt.algo.empty() && opt.coll->isSendRecv() && opt.algo.find(':') == std::string::npos) {
    usageError("--algo: sendrecv has no algorithms to choose from");
  }
  return opt;
}

}  // namespace strata::perf
