// strata-plan: algorithm files (MSCCL's XML, Strata's plan files) before they run.
//   check FILE...     the proof (core/plan_proof.h): a verdict per file, and the reasons of a refusal
//   show FILE         per-rank lanes and steps, chunks moved per link, the critical path in steps
//   dump ALGO -n N COLL [--count C]   a built-in algorithm as a Strata plan file
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "collectives/algorithms.h"
#include "collectives/plan_program.h"
#include "core/plan_proof.h"
#include "util/error.h"

namespace strata {
namespace {

constexpr int kExitRefused = 1;
constexpr int kExitUsage = 2;

void printUsage(FILE* out) {
  std::fprintf(
      out,
      "usage: strata-plan check FILE...\n"
      "       strata-plan show FILE\n"
      "       strata-plan dump ALGO -n N COLLECTIVE [--count C] [-o FILE]\n"
      "\n"
      "Algorithm files: MSCCL's XML (as msccl-tools writes it) and Strata's plan files (JSON, as dump writes\n"
      "them). STRATA_PLANS loads them into a communicator; this tool looks at them first.\n"
      "\n"
      "  check   runs every rank's plan in the reference interpreter, at the connection capacity the executor\n"
      "          uses, on random data of 1-, 2-, 4- and 8-byte elements, in and out of place as the file\n"
      "          allows, in one loop and in several loops with a tail, and accepts the file only if every\n"
      "          rank's result is the collective's and nothing deadlocks. Prints 'proven' or 'refused' and\n"
      "          why per file; exits 1 if any file is refused.\n"
      "  show    the file's ranks, lanes and steps, the chunks each link carries, and its critical path in\n"
      "          steps (lane order, cross-lane waits and messages).\n"
      "  dump    the built-in algorithm ALGO of COLLECTIVE on N ranks as a plan file (stdout, or -o FILE),\n"
      "          at C elements per block (default: N for allreduce, broadcast, reduce; 1 for the others):\n"
      "          loaded back, it gives the very plans of the built-in at that count.\n");
}

[[noreturn]] void usageError(const std::string& msg) {
  std::fprintf(stderr, "strata-plan: %s (see strata-plan --help)\n", msg.c_str());
  std::exit(kExitUsage);
}

CollKind collectiveNamed(const std::string& name) {
  for (int k = 0; k < kNumCollKinds; ++k)
    if (name == collName(static_cast<CollKind>(k))) return static_cast<CollKind>(k);
  usageError("unknown collective '" + name + "'");
}

int check(const std::vector<std::string>& files) {
  int refused = 0;
  for (const std::string& f : files) {
    try {
      auto p = loadProgram(f);
      std::printf("%s\n", proveProgram(*p).c_str());
    } catch (const Error& e) {
      std::printf("%s: refused: %s\n", f.c_str(), e.what());
      ++refused;
    }
  }
  return refused ? kExitRefused : 0;
}

int show(const std::string& file) {
  auto p = loadProgram(file);
  std::printf("%s: %s %s (%s) on %d ranks, %d chunk(s) per loop, %s, %d channel(s)\n", file.c_str(), p->format.c_str(),
              p->name.c_str(), collName(p->kind), p->nranks, p->chunksPerLoop,
              p->inPlace && p->outOfPlace ? "in and out of place"
              : p->inPlace                ? "in place only"
                                          : "out of place only",
              p->channels());
  std::map<std::pair<int, int>, long> chunks;  // (a, b) -> chunks a sends b per loop
  for (int r = 0; r < p->nranks; ++r) {
    const ProgramRank& rank = p->ranks[static_cast<size_t>(r)];
    std::printf("%s: %zu lane(s), %d scratch chunk(s)\n", p->where(r, -1, -1).c_str(), rank.lanes.size(),
                rank.scratchChunks);
    for (size_t l = 0; l < rank.lanes.size(); ++l) {
      const ProgramLane& lane = rank.lanes[l];
      std::printf("  %s:", p->where(r, static_cast<int>(l), -1).c_str());
      for (const ProgramStep& s : lane.steps) {
        Op probe;
        probe.kind = s.kind;
        std::printf(" %s", opKindName(s.kind));
        if (probe.receives()) std::printf("<%d", s.recvPeer);
        if (probe.sends()) {
          std::printf(">%d", s.sendPeer);
          chunks[{r, s.sendPeer}] += s.src.count > 0 ? s.src.count : s.dst.count;
        }
        if (s.channel) std::printf("@%d", s.channel);
        if (s.afterLane >= 0)
          std::printf("[after %d.%d]", rank.lanes[static_cast<size_t>(s.afterLane)].id, s.afterStep);
      }
      std::printf("\n");
    }
  }
  std::printf("chunks per loop on each link (sender -> receiver):\n");
  for (const auto& [link, n] : chunks) std::printf("  %d -> %d: %ld\n", link.first, link.second, n);
  int longest = 0;
  stepLevels(*p, &longest);
  std::printf("critical path: %d step(s)\n", longest);
  return 0;
}

int dump(int argc, char** argv) {
  std::string algo, coll, outFile;
  int n = 0;
  size_t count = 0;
  std::vector<std::string> rest;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usageError(a + " needs a value");
      return argv[++i];
    };
    if (a == "-n") n = std::atoi(value().c_str());
    else if (a == "--count") count = std::strtoull(value().c_str(), nullptr, 10);
    else if (a == "-o") outFile = value();
    else rest.push_back(a);
  }
  if (rest.size() != 2) usageError("dump needs ALGO and COLLECTIVE");
  algo = rest[0];
  coll = rest[1];
  const CollKind kind = collectiveNamed(coll);
  if (n < 2) usageError("dump needs -n N with N >= 2");
  if (count == 0)
    count = kind == CollKind::kAllReduce || kind == CollKind::kBroadcast || kind == CollKind::kReduce
                ? static_cast<size_t>(n)
                : 1;
  const std::string text = writeStrataPlan(dumpProgram(kind, algo, n, count));
  if (outFile.empty()) {
    std::fputs(text.c_str(), stdout);
  } else {
    std::ofstream out(outFile);
    out << text;
    if (!out) throw InvalidArgument(outFile + ": cannot be written");
  }
  return 0;
}

const char* shortName(OpKind k) {
  switch (k) {
    case OpKind::kSend: return "s";
    case OpKind::kRecv: return "r";
    case OpKind::kRecvReduce: return "rrc";
    case OpKind::kRecvReduceSend: return "rrs";
    case OpKind::kRecvReduceCopySend: return "rrcs";
    case OpKind::kRecvCopySend: return "rcs";
    case OpKind::kCopy: return "cpy";
    case OpKind::kReduceLocal: return "re";
    case OpKind::kCopySend: return "cs";
    case OpKind::kNop: return "nop";
  }
  return "?";
}

int svg(int argc, char** argv) {
  std::string file, out;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-o" && i + 1 < argc) out = argv[++i];
    else if (file.empty()) file = a;
    else usageError("svg takes one file and -o OUT.svg");
  }
  if (file.empty() || out.empty()) usageError("svg needs FILE and -o OUT.svg");
  auto p = loadProgram(file);
  int longest = 0;
  const auto level = stepLevels(*p, &longest);
  size_t steps = 0;
  for (const ProgramRank& r : p->ranks)
    for (const ProgramLane& l : r.lanes) steps += l.steps.size();
  constexpr size_t kMaxSteps = 20000;
  if (steps > kMaxSteps)
    throw InvalidArgument(
        strprintf("%s: %zu steps are too many to draw (at most %zu)", file.c_str(), steps, kMaxSteps));
  constexpr double kCol = 46, kLane = 16, kGap = 12, kLeft = 70, kTop = 40;
  // Each rank's band: one row per lane.
  std::vector<double> rankTop;
  double y = kTop;
  for (const ProgramRank& r : p->ranks) {
    rankTop.push_back(y);
    y += std::max<size_t>(1, r.lanes.size()) * kLane + kGap;
  }
  const double width = kLeft + (longest + 1) * kCol, height = y + 10;
  auto cx = [&](int lv) { return kLeft + (lv - 0.5) * kCol; };
  auto cy = [&](int r, size_t l) { return rankTop[static_cast<size_t>(r)] + (static_cast<double>(l) + 0.5) * kLane; };
  std::string svgText = strprintf(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
      "font-size=\"9\">\n<defs><marker id=\"a\" markerWidth=\"6\" markerHeight=\"6\" refX=\"5\" refY=\"3\" "
      "orient=\"auto\"><path d=\"M0,0 L6,3 L0,6 z\" fill=\"#c33\"/></marker></defs>\n"
      "<text x=\"4\" y=\"16\" font-size=\"12\">%s: %s %s on %d ranks, critical path %d steps</text>\n",
      width, height, file.c_str(), p->name.c_str(), collName(p->kind), p->nranks, longest);
  // Messages: the k-th send on (a, b, channel) to the k-th receive.
  std::map<std::tuple<int, int, int>, std::vector<std::pair<double, double>>> sends;
  for (int r = 0; r < p->nranks; ++r) {
    const auto& lanes = p->ranks[static_cast<size_t>(r)].lanes;
    svgText += strprintf("<text x=\"4\" y=\"%.1f\">rank %d</text>\n", rankTop[static_cast<size_t>(r)] + 10, r);
    for (size_t l = 0; l < lanes.size(); ++l)
      for (size_t t = 0; t < lanes[l].steps.size(); ++t) {
        const ProgramStep& s = lanes[l].steps[t];
        Op probe;
        probe.kind = s.kind;
        const int lv = level[static_cast<size_t>(r)][l][t];
        svgText += strprintf(
            "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" stroke=\"#666\"/>"
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
            cx(lv) - kCol * 0.4, cy(r, l) - kLane * 0.4, kCol * 0.8, kLane * 0.8, probe.sends() ? "#fde" : "#eef",
            cx(lv), cy(r, l) + 3, shortName(s.kind));
        if (probe.sends()) sends[{r, s.sendPeer, s.channel}].emplace_back(cx(lv) + kCol * 0.4, cy(r, l));
      }
  }
  for (int r = 0; r < p->nranks; ++r) {
    const auto& lanes = p->ranks[static_cast<size_t>(r)].lanes;
    std::map<std::tuple<int, int, int>, size_t> taken;
    for (size_t l = 0; l < lanes.size(); ++l)
      for (size_t t = 0; t < lanes[l].steps.size(); ++t) {
        const ProgramStep& s = lanes[l].steps[t];
        Op probe;
        probe.kind = s.kind;
        if (!probe.receives()) continue;
        const auto key = std::make_tuple(s.recvPeer, r, s.channel);
        const size_t k = taken[key]++;
        const auto& from = sends[key];
        if (k >= from.size()) continue;
        const int lv = level[static_cast<size_t>(r)][l][t];
        svgText += strprintf(
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#c33\" "
            "stroke-width=\"0.7\" marker-end=\"url(#a)\"/>\n",
            from[k].first, from[k].second, cx(lv) - kCol * 0.4, cy(r, l));
      }
  }
  svgText += "</svg>\n";
  std::ofstream f(out);
  f << svgText;
  if (!f) throw InvalidArgument(out + ": cannot be written");
  std::printf("%s: %zu steps on %d levels\n", out.c_str(), steps, longest);
  return 0;
}

// strata-sim, from strata-plan's own folder (they are installed and built side by side).
std::string simulatorPath() {
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0) return "strata-sim";
  self[len] = '\0';
  std::string dir(self);
  return dir.substr(0, dir.rfind('/') + 1) + "strata-sim";
}

int sim(int argc, char** argv) {
  if (argc < 1) usageError("sim needs a file");
  const std::string file = argv[0];
  auto p = loadProgram(file);
  std::printf("# %s\n", proveProgram(*p).c_str());
  std::fflush(stdout);
  std::vector<std::string> args = {simulatorPath(), "--plan", file};
  bool algo = false, layout = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    args.push_back(a);
    algo |= a == "--algo";
    layout |= a == "--hosts" || a == "--ranks-per-host";
  }
  if (!algo) args.insert(args.end(), {"--algo", "all"});
  // The file's ranks on one host unless the command line lays them out.
  if (!layout) args.insert(args.end(), {"--hosts", "1", "--ranks-per-host", std::to_string(p->nranks)});
  args.emplace_back(collName(p->kind));
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  execv(cargs[0], cargs.data());
  throw InvalidArgument(args[0] + ": cannot be run: " + std::strerror(errno));
}

int run(int argc, char** argv) {
  if (argc < 2) usageError("no command");
  const std::string cmd = argv[1];
  if (cmd == "-h" || cmd == "--help") {
    printUsage(stdout);
    return 0;
  }
  if (cmd == "check") {
    if (argc < 3) usageError("check needs a file");
    return check(std::vector<std::string>(argv + 2, argv + argc));
  }
  if (cmd == "show") {
    if (argc != 3) usageError("show needs one file");
    return show(argv[2]);
  }
  if (cmd == "dump") return dump(argc - 2, argv + 2);
  if (cmd == "sim") return sim(argc - 2, argv + 2);
  if (cmd == "svg") return svg(argc - 2, argv + 2);
  usageError("unknown command '" + cmd + "'");
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  try {
    return strata::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata-plan: %s\n", e.what());
    return 1;
  }
}
