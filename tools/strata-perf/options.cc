// The command line: one table of options, in the order the usage text lists them, from which both the
// parser (getopt_long, as nccl-tests uses it: -b8, --minbytes=8, unambiguous abbreviations) and the usage
// text are made.
#include "options.h"

#include <getopt.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
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

// ---- the option table ----------------------------------------------------------------------------------

// Where an option appears in the usage text.
enum class Section {
  kNcclTests,  // nccl-tests' options, one per line
  kCompat,     // nccl-tests' options strata-perf only accepts, listed together on one line
  kStrata,     // Strata's own (long only, but for -h)
};

enum class Arg { kNone, kRequired };

class OptionParser;

struct OptionSpec {
  char letter;            // nccl-tests' short option; 0 for none
  const char* name;       // the long option, without "--"
  Arg arg;                // whether it takes a value
  const char* valueName;  // the value as the usage shows it ("SIZE"), or nullptr
  Section section;
  const char* help;                // '\n' continues it on the next line; "{built}" stands for the baselines built here
  void (*apply)(OptionParser& p);  // parses p.value() into p.opt
};

// One parse of the command line: the options so far, and the one being applied.
class OptionParser {
 public:
  Options opt;
  bool factorGiven = false, stepBytesGiven = false;

  void set(const OptionSpec& spec, const char* value) {
    spec_ = &spec;
    value_ = value != nullptr ? value : "";
  }
  const std::string& value() const { return value_; }
  // How error messages name the option: "-b/--minbytes", "--show-wrong"; letter(): "-t".
  std::string label() const { return spec_->letter ? letter() + "/--" + spec_->name : std::string("--") + spec_->name; }
  std::string letter() const { return std::string("-") + spec_->letter; }
  [[noreturn]] void bad(const std::string& what) const { usageError(label() + ": " + what); }

  size_t size() const {
    size_t bytes = 0;
    if (!parseSize(value_.c_str(), &bytes)) bad("bad size '" + value_ + "'");
    return bytes;
  }
  size_t positiveSize() const {
    size_t bytes = 0;
    if (!parseSize(value_.c_str(), &bytes) || bytes == 0) bad("bad size '" + value_ + "' (must be > 0)");
    return bytes;
  }
  // An integer in [lo, hi]; `expected` says what is ("an integer >= 1").
  int integer(long lo, long hi, const char* expected) const {
    int v = 0;
    if (!parseInt(value_.c_str(), lo, hi, &v)) bad(std::string("expected ") + expected + ", got '" + value_ + "'");
    return v;
  }

 private:
  const OptionSpec* spec_ = nullptr;
  std::string value_;
};

// nccl-tests' -t, -g, -m: threads, GPUs and aggregated calls per process, all 1 here.
void onlyOne(OptionParser& p) {
  int one = 0;
  if (!parseInt(p.value().c_str(), 1, 1, &one)) {
    usageError(p.letter() + ": strata-perf runs one rank per process (only 1 is supported), got '" + p.value() + "'");
  }
}
// nccl-tests' -z, -y: blocking calls and the null stream, which do not change what strata-perf runs.
void zeroOrOne(OptionParser& p) {
  int ignored = 0;
  if (!parseInt(p.value().c_str(), 0, 1, &ignored)) {
    usageError(p.letter() + ": expected 0 or 1, got '" + p.value() + "'");
  }
}

void addBaselines(OptionParser& p) {
  const std::vector<std::string> known = knownBaselines(), built = builtBaselines();
  for (const std::string& name : splitList(p.value())) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      p.bad("unknown baseline '" + name + "' (expected a list of mpi, gloo, nccl, oneccl)");
    }
    if (std::find(built.begin(), built.end(), name) == built.end()) {
      usageError(p.label() + " " + name + ": this strata-perf was built without it (built: " + builtBaselineList() +
                 ")");
    }
    std::vector<std::string>& list = p.opt.baselines;
    if (std::find(list.begin(), list.end(), name) == list.end()) list.push_back(name);
  }
}

constexpr Arg kValue = Arg::kRequired;
constexpr Arg kFlag = Arg::kNone;
constexpr Section kNccl = Section::kNcclTests;
constexpr Section kCompat = Section::kCompat;
constexpr Section kStrata = Section::kStrata;

const OptionSpec kOptionTable[] = {
    {'b', "minbytes", kValue, "SIZE", kNccl, "smallest size (default 32M; suffixes K, M, G are powers of 1024)",
     [](OptionParser& p) { p.opt.minBytes = p.size(); }},
    {'e', "maxbytes", kValue, "SIZE", kNccl, "largest size (default 32M)",
     [](OptionParser& p) { p.opt.maxBytes = p.size(); }},
    {'f', "stepfactor", kValue, "F", kNccl, "multiply the size by F each step (default 2)",
     [](OptionParser& p) {
       p.opt.stepFactor = static_cast<size_t>(p.integer(1, 1 << 20, "an integer >= 1"));
       p.factorGiven = true;
     }},
    {'i', "stepbytes", kValue, "SIZE", kNccl, "add SIZE each step instead (default 1M; used when -f is not given)",
     [](OptionParser& p) {
       p.opt.stepBytes = p.positiveSize();
       p.stepBytesGiven = true;
     }},
    {'n', "iters", kValue, "N", kNccl, "timed runs per size (default 20)",
     [](OptionParser& p) { p.opt.iters = p.integer(1, 1 << 30, "an integer >= 1"); }},
    {'w', "warmup_iters", kValue, "N", kNccl, "untimed runs per size before them (default 5)",
     [](OptionParser& p) { p.opt.warmupIters = p.integer(0, 1 << 30, "an integer >= 0"); }},
    {'c', "check", kValue, "N", kNccl, "check runs per size, each verified element by element; 0 = none\n(default 1)",
     [](OptionParser& p) { p.opt.check = p.integer(0, 1 << 20, "an integer >= 0"); }},
    {'d', "datatype", kValue, "T", kNccl,
     "int8 uint8 int32 uint32 int64 uint64 half float double bfloat16\n"
     "fp8_e4m3 fp8_e5m2, a comma-separated list, or all (default float)",
     [](OptionParser& p) { p.opt.dtypeArg = p.value(); }},
    {'o', "op", kValue, "OP", kNccl, "sum prod max min avg, a list, or all (default sum)",
     [](OptionParser& p) { p.opt.opArg = p.value(); }},
    {'r', "root", kValue, "R", kNccl, "root of broadcast and reduce (default 0)",
     [](OptionParser& p) { p.opt.root = p.integer(0, 1 << 30, "a rank >= 0"); }},
    {'T', "timeout", kValue, "SEC", kNccl, "deadline of every wait inside Strata (sets STRATA_TIMEOUT_MS); 0 = keep",
     [](OptionParser& p) { p.opt.timeoutSec = p.integer(0, 1 << 30, "seconds >= 0"); }},
    {'t', "nthreads", kValue, "1", kCompat, nullptr, onlyOne},
    {'g', "ngpus", kValue, "1", kCompat, nullptr, onlyOne},
    {'m', "agg_iters", kValue, "1", kCompat, nullptr, onlyOne},
    {'z', "blocking", kValue, nullptr, kCompat, nullptr, zeroOrOne},
    {'y', "stream_null", kValue, nullptr, kCompat, nullptr, zeroOrOne},
    {0, "algo", kValue, "NAME", kStrata,
     "force an algorithm (sets STRATA_ALGO=<collective>:NAME; a value with ':'\nis used as the whole STRATA_ALGO); "
     "several, separated by ';' (e.g. 'ring;rhd;NAME'),\nrun one after another in this launch, a table each, on "
     "communicators split\nfrom the launched ranks (no --json or --csv then)",
     [](OptionParser& p) {
       if (p.value().empty()) usageError(p.label() + " needs a name");
       p.opt.algo = p.value();
     }},
    {0, "transport", kValue, "T", kStrata, "shm, tcp, ucx or auto (sets STRATA_TRANSPORT)",
     [](OptionParser& p) {
       const std::string& v = p.value();
       if (v != "shm" && v != "tcp" && v != "ucx" && v != "auto")
         p.bad("expected shm, tcp, ucx or auto, got '" + v + "'");
       p.opt.transport = v;
     }},
    {0, "json", kValue, "FILE", kStrata, "also write the rows and a description of the run as JSON (rank 0)",
     [](OptionParser& p) { p.opt.jsonPath = p.value(); }},
    {0, "csv", kValue, "FILE", kStrata, "also write them as CSV (rank 0)",
     [](OptionParser& p) { p.opt.csvPath = p.value(); }},
    {0, "progress", kFlag, nullptr, kStrata, "one line per finished size on stderr",
     [](OptionParser& p) { p.opt.progress = true; }},
    {0, "membound", kFlag, nullptr, kStrata,
     "all-reduce only: time memcpy of the same buffers on every rank at once\n"
     "and add the memory-bandwidth bound of busbw and Strata's share of it",
     [](OptionParser& p) { p.opt.membound = true; }},
    {0, "show-wrong", kValue, "N", kStrata, "describe the first N wrong elements of each rank on stderr",
     [](OptionParser& p) { p.opt.showWrong = p.integer(0, 1 << 30, "a count >= 0"); }},
    {0, "baseline", kValue, "LIST", kStrata,
     "also time these libraries on the same calls and buffers: mpi, gloo, nccl,\n"
     "oneccl (built here: {built}). Each adds columns time, busbw, #wrong and\n"
     "\"x NAME\" (Strata's out-of-place busbw / the baseline's); n/a where the\n"
     "library lacks the type or op. mpi needs the ranks started by mpirun;\n"
     "nccl needs --device and one GPU per rank (libnccl.so.2 loaded at run time)",
     addBaselines},
    {0, "device", kFlag, nullptr, kStrata,
     "CUDA device buffers (GPU local rank mod device count) and a stream per\n"
     "rank; each call is timed from launch to completion of its stream",
     [](OptionParser& p) {
       if (!deviceBuilt()) p.bad("this strata-perf was built without CUDA");
       p.opt.device = true;
     }},
    {0, "inject-fault", kFlag, nullptr, kStrata,
     "TEST ONLY: corrupt one result element after the first check run, so\n"
     "the check must report it (#wrong > 0, exit status 1)",
     [](OptionParser& p) { p.opt.injectFault = true; }},
    {'h', "help", kFlag, nullptr, kStrata, "show this help",
     [](OptionParser&) {
       printUsage(stdout);
       std::exit(0);
     }},
};

// getopt_long's value for the long-only option at `index` of the table (short options return their letter).
constexpr int kLongOnlyValue = 1000;

// The checks that involve more than one option, or a list that names types and ops; they run once every
// option is read, in this order.
void checkTogether(OptionParser& p, int argc, char** argv) {
  Options& opt = p.opt;
  if (optind < argc) usageError(std::string("unexpected argument '") + argv[optind] + "'");
  if (p.stepBytesGiven && !p.factorGiven) opt.stepFactor = 1;
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
  if (opt.algo.find(';') != std::string::npos && (!opt.jsonPath.empty() || !opt.csvPath.empty()))
    usageError("--algo with several algorithms writes no --json or --csv (one table per algorithm)");
  if (!opt.algo.empty() && opt.coll->isSendRecv() && opt.algo.find(':') == std::string::npos) {
    usageError("--algo: sendrecv has no algorithms to choose from");
  }
}

// "-b, --minbytes SIZE", "--algo NAME".
std::string optionText(const OptionSpec& spec) {
  std::string text = spec.letter ? std::string("-") + spec.letter + ", " : std::string();
  text += std::string("--") + spec.name;
  if (spec.valueName != nullptr) text += std::string(" ") + spec.valueName;
  return text;
}

constexpr size_t kHelpColumn = 27;
constexpr std::string_view kBuiltMarker = "{built}";

// Help text from column kHelpColumn, each '\n' continuing it there on the next line.
std::string helpLines(const std::string& help) {
  std::string out;
  size_t start = 0;
  for (;;) {
    const size_t nl = help.find('\n', start);
    out += help.substr(start, nl == std::string::npos ? std::string::npos : nl - start) + "\n";
    if (nl == std::string::npos) return out;
    out += std::string(kHelpColumn, ' ');
    start = nl + 1;
  }
}

// One option's lines of the usage: short options in column 2, long ones in column 6 (where they stand
// after "-X, "), the help in column kHelpColumn.
std::string optionUsage(const OptionSpec& spec) {
  std::string line = (spec.letter ? "  " : "      ") + optionText(spec);
  line +=
      line.size() < kHelpColumn ? std::string(kHelpColumn - line.size(), ' ') : "\n" + std::string(kHelpColumn, ' ');
  std::string help = spec.help;
  if (const size_t at = help.find(kBuiltMarker); at != std::string::npos) {
    help.replace(at, kBuiltMarker.size(), builtBaselineList());
  }
  return line + helpLines(help);
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
  std::string text = std::string("usage: strata-perf <") + collNames() + "> [options]\n";
  text +=
      "\n"
      "Measures one collective over a range of sizes, like nccl-tests (all_reduce_perf, ...), and prints\n"
      "the same table. Start it with a launcher: strata-run -n 4 strata-perf allreduce -b 8 -e 128M\n"
      "(or torchrun, mpirun, srun). Buffers are host memory.\n"
      "\n"
      "nccl-tests options:\n";
  for (const OptionSpec& spec : kOptionTable) {
    if (spec.section == Section::kNcclTests) text += optionUsage(spec);
  }
  std::string compat;
  for (const OptionSpec& spec : kOptionTable) {
    if (spec.section == Section::kCompat) compat += (compat.empty() ? "  " : ", ") + optionText(spec);
  }
  text += compat + "\n" + std::string(kHelpColumn, ' ') +
          "accepted for compatibility (one rank per process, blocking, host memory)\n"
          "\n"
          "Strata options:\n";
  for (const OptionSpec& spec : kOptionTable) {
    if (spec.section == Section::kStrata) text += optionUsage(spec);
  }
  text +=
      "\n"
      "Columns as nccl-tests: size is the larger buffer in bytes (for allgather the total received,\n"
      "for reducescatter and alltoall the total sent), count the count argument of the call, time the\n"
      "median over the timed runs of the slowest rank, algbw = size / time, busbw = algbw x 2(n-1)/n\n"
      "(allreduce), (n-1)/n (reducescatter, allgather, alltoall) or 1 (broadcast, reduce, sendrecv).\n"
      "In-place sendrecv (one buffer sent from and received into) is timed but not checked (#wrong N/A).\n"
      "Exit status: 0 if every check passed (Strata's and the baselines'), 1 on a wrong result or an\n"
      "error, 2 on bad usage.\n";
  std::fputs(text.c_str(), out);
}

Options parseOptions(int argc, char** argv) {
  if (argc < 2) usageError("missing the collective");
  const std::string first = argv[1];
  if (first == "-h" || first == "--help") {
    printUsage(stdout);
    std::exit(0);
  }
  OptionParser p;
  p.opt.coll = findColl(first);
  if (p.opt.coll == nullptr) usageError("unknown collective '" + first + "' (expected one of " + collNames() + ")");

  // getopt's tables, from ours. A leading ':' makes a missing value return ':' instead of '?'.
  std::vector<option> longOptions;
  std::string shortOptions = ":";
  for (size_t i = 0; i < std::size(kOptionTable); ++i) {
    const OptionSpec& spec = kOptionTable[i];
    const int hasArg = spec.arg == Arg::kRequired ? required_argument : no_argument;
    longOptions.push_back(
        {spec.name, hasArg, nullptr, spec.letter ? spec.letter : kLongOnlyValue + static_cast<int>(i)});
    if (spec.letter) shortOptions += std::string(1, spec.letter) + (hasArg == required_argument ? ":" : "");
  }
  longOptions.push_back({nullptr, 0, nullptr, 0});

  // getopt sees the collective as the program name.
  const int subArgc = argc - 1;
  char** subArgv = argv + 1;
  opterr = 0;
  optind = 1;
  for (;;) {
    const int c = getopt_long(subArgc, subArgv, shortOptions.c_str(), longOptions.data(), nullptr);
    if (c == -1) break;
    if (c == ':') usageError(std::string("option '") + subArgv[optind - 1] + "' needs a value");
    const OptionSpec* spec = nullptr;
    for (size_t i = 0; i < std::size(kOptionTable); ++i) {
      const OptionSpec& s = kOptionTable[i];
      if (s.letter ? c == s.letter : c == kLongOnlyValue + static_cast<int>(i)) {
        spec = &s;
        break;
      }
    }
    if (spec == nullptr) usageError(std::string("unknown option '") + subArgv[optind - 1] + "'");
    p.set(*spec, optarg);
    spec->apply(p);
  }
  checkTogether(p, subArgc, subArgv);
  return p.opt;
}

}  // namespace strata::perf
