// Config: every STRATA_* variable parses, and malformed values are rejected with a message naming them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "util/config.h"
#include "util/config_table.h"
#include "util/error.h"

namespace strata {
namespace {

// Sets a variable for the scope of one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_.c_str(), old_.c_str(), 1);
    else unsetenv(name_.c_str());
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

TEST(Config, Defaults) {
  Config c;
  EXPECT_EQ(c.timeoutMs, 600000);
  EXPECT_EQ(c.transport, "auto");
  EXPECT_EQ(c.connectionCapacity(), c.pieceBytes * static_cast<size_t>(c.nslots));
  EXPECT_FALSE(c.describe().empty());
}

TEST(Config, ReadsEveryVariable) {
  ScopedEnv a("STRATA_TIMEOUT_MS", "1234");
  ScopedEnv b("STRATA_TRANSPORT", "tcp");
  ScopedEnv d("STRATA_ALGO", "allreduce:ring,allgather:ring");
  ScopedEnv e("STRATA_PIECE_BYTES", "64K");
  ScopedEnv f("STRATA_NSLOTS", "4");
  ScopedEnv g("STRATA_NSOCKS", "3");
  ScopedEnv h("STRATA_HOSTID", "node7");
  Config c = Config::fromEnv();
  EXPECT_EQ(c.timeoutMs, 1234);
  EXPECT_EQ(c.transport, "tcp");
  EXPECT_EQ(c.algo.at("allreduce"), "ring");
  EXPECT_EQ(c.algo.at("allgather"), "ring");
  EXPECT_EQ(c.pieceBytes, 65536u);
  EXPECT_EQ(c.nslots, 4);
  EXPECT_EQ(c.nsocks, 3);
  EXPECT_EQ(c.hostId, "node7");
}

TEST(Config, RejectsMalformedValues) {
  {
    ScopedEnv a("STRATA_TIMEOUT_MS", "soon");
    try {
      Config::fromEnv();
      FAIL() << "accepted STRATA_TIMEOUT_MS=soon";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("STRATA_TIMEOUT_MS"), std::string::npos);
    }
  }
  {
    ScopedEnv a("STRATA_TRANSPORT", "carrier-pigeon");
    EXPECT_THROW(Config::fromEnv(), InvalidArgument);
  }
  {
    ScopedEnv a("STRATA_NSLOTS", "1");  // a connection needs at least two slots to pipeline
    EXPECT_THROW(Config::fromEnv(), InvalidArgument);
  }
  {
    ScopedEnv a("STRATA_PIECE_BYTES", "1000");  // not a multiple of 64
    EXPECT_THROW(Config::fromEnv(), InvalidArgument);
  }
  EXPECT_THROW(parseAlgoSpec("allreduce"), InvalidArgument);
  EXPECT_THROW(parseAlgoSpec("allreduce:"), InvalidArgument);
  EXPECT_EQ(parseAlgoSpec("").size(), 0u);
}

// ---- The table against the struct and the environment: these fail if they drift apart. ----------------

// describe() of a default Config, by variable name.
std::map<std::string, std::string> shown(const Config& c) {
  std::map<std::string, std::string> out;
  for (const auto& e : c.describe()) out[e.name] = e.value;
  return out;
}

// The message fromEnv() throws with the environment as it is, or "" if it accepts it.
std::string fromEnvError() {
  try {
    Config::fromEnv();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

// Every variable describe() lists, in its order. Four are read by their own module, not into a Config field.
const std::vector<std::string> kVariables = {"STRATA_DEBUG",
                                             "STRATA_DEBUG_SUBSYS",
                                             "STRATA_TIMEOUT_MS",
                                             "STRATA_TRANSPORT",
                                             "STRATA_NET",
                                             "STRATA_TOPO_FILE",
                                             "STRATA_TUNE",
                                             "STRATA_SOCKET_IFNAME",
                                             "STRATA_HOSTID",
                                             "STRATA_ALGO",
                                             "STRATA_PLANS",
                                             "STRATA_PIECE_BYTES",
                                             "STRATA_NSLOTS",
                                             "STRATA_SHM_SINGLE_COPY",
                                             "STRATA_SHM_SINGLE_COPY_BYTES",
                                             "STRATA_NSOCKS",
                                             "STRATA_SPIN_US",
                                             "STRATA_GPU_DIRECT_BYTES",
                                             "STRATA_GPU_ONESHOT_BYTES",
                                             "STRATA_GPU_STAGE_CHUNK_BYTES",
                                             "STRATA_GPU_EXECUTOR",
                                             "STRATA_GPU_CHANNELS",
                                             "STRATA_GPU_LL128",
                                             "STRATA_GPU_PROTO",
                                             "STRATA_FLIGHT_RECORDER_ENTRIES",
                                             "STRATA_FLIGHT_RECORDER_DIR",
                                             "STRATA_CUDA_LIBRARY",
                                             "STRATA_SECRET"};

TEST(ConfigTable, DescribeNamesEachVariableOnceInOrder) {
  std::vector<std::string> names;
  for (const auto& e : Config().describe()) names.push_back(e.name);
  EXPECT_EQ(names, kVariables);
  for (const auto& n : kVariables) EXPECT_EQ(std::count(names.begin(), names.end(), n), 1) << n;
}

TEST(ConfigTable, DefaultsAreTheDocumentedOnes) {
  const Config c;
  EXPECT_EQ(c.timeoutMs, 600000);
  EXPECT_EQ(c.transport, "auto");
  EXPECT_EQ(c.net, "tcp");
  EXPECT_EQ(c.topoFile, "");
  EXPECT_EQ(c.tune, "model");
  EXPECT_EQ(c.socketIfname, "");
  EXPECT_EQ(c.hostId, "");
  EXPECT_TRUE(c.algo.empty());
  EXPECT_EQ(c.pieceBytes, 131072u);
  EXPECT_EQ(c.nslots, 8);
  EXPECT_EQ(c.shmSingleCopy, "auto");
  EXPECT_EQ(c.shmSingleCopyBytes, size_t{64} << 10);
  EXPECT_EQ(c.nsocks, 2);
  EXPECT_EQ(c.spinUs, 5);
  EXPECT_EQ(c.gpuDirectMaxBytes, size_t{4} << 20);
  EXPECT_EQ(c.gpuOneShotMaxBytes, size_t{256} << 10);
  EXPECT_EQ(c.gpuStageChunkBytes, size_t{4} << 20);
  EXPECT_EQ(c.gpuExecutor, 1u);  // the device executor is the default device path
  // An empty environment gives the same Config.
  EXPECT_EQ(shown(Config::fromEnv()), shown(c));
}

// A valid value other than the default for every variable Config::fromEnv() reads: it lands in its own field,
// and only there.
struct Sample {
  const char* name;
  const char* value;
  const char* shown;  // as describe() shows it
  bool (*inField)(const Config&);
};
const Sample kSamples[] = {
    {"STRATA_TIMEOUT_MS", "0x10", "16", [](const Config& c) { return c.timeoutMs == 16; }},
    {"STRATA_TRANSPORT", "shm", "shm", [](const Config& c) { return c.transport == "shm"; }},
    {"STRATA_NET", "ucx", "ucx", [](const Config& c) { return c.net == "ucx"; }},
    {"STRATA_TOPO_FILE", "/tmp/t.json", "/tmp/t.json", [](const Config& c) { return c.topoFile == "/tmp/t.json"; }},
    {"STRATA_TUNE", "probe", "probe", [](const Config& c) { return c.tune == "probe"; }},
    {"STRATA_SOCKET_IFNAME", "eth1", "eth1", [](const Config& c) { return c.socketIfname == "eth1"; }},
    {"STRATA_HOSTID", "node7", "node7", [](const Config& c) { return c.hostId == "node7"; }},
    {"STRATA_ALGO", "allgather:rhd,allreduce:tree", "allgather:rhd,allreduce:tree",
     [](const Config& c) { return c.algo.size() == 2 && c.algo.at("allreduce") == "tree"; }},
    {"STRATA_PLANS", "/tmp/a.xml,/tmp/plans", "/tmp/a.xml,/tmp/plans",
     [](const Config& c) { return c.plans == "/tmp/a.xml,/tmp/plans"; }},
    {"STRATA_PIECE_BYTES", "1M", "1048576", [](const Config& c) { return c.pieceBytes == 1048576u; }},
    {"STRATA_NSLOTS", "1024", "1024", [](const Config& c) { return c.nslots == 1024; }},
    {"STRATA_SHM_SINGLE_COPY", "off", "off", [](const Config& c) { return c.shmSingleCopy == "off"; }},
    {"STRATA_SHM_SINGLE_COPY_BYTES", "1M", "1048576", [](const Config& c) { return c.shmSingleCopyBytes == 1u << 20; }},
    {"STRATA_NSOCKS", "64", "64", [](const Config& c) { return c.nsocks == 64; }},
    {"STRATA_SPIN_US", "0", "0", [](const Config& c) { return c.spinUs == 0; }},
    {"STRATA_GPU_DIRECT_BYTES", "1G", "1073741824", [](const Config& c) { return c.gpuDirectMaxBytes == 1u << 30; }},
    {"STRATA_GPU_ONESHOT_BYTES", "0", "0", [](const Config& c) { return c.gpuOneShotMaxBytes == 0; }},
    {"STRATA_GPU_STAGE_CHUNK_BYTES", "64k", "65536", [](const Config& c) { return c.gpuStageChunkBytes == 65536; }},
    {"STRATA_GPU_EXECUTOR", "0", "0", [](const Config& c) { return c.gpuExecutor == 0; }},
    {"STRATA_GPU_CHANNELS", "3", "3", [](const Config& c) { return c.gpuChannels == 3; }},
    {"STRATA_GPU_LL128", "off", "off", [](const Config& c) { return c.gpuLL128 == "off"; }},
    {"STRATA_GPU_PROTO", "ll128", "ll128", [](const Config& c) { return c.gpuProto == "ll128"; }},
    {"STRATA_FLIGHT_RECORDER_ENTRIES", "0", "0", [](const Config& c) { return c.flightRecorderEntries == 0; }},
    {"STRATA_FLIGHT_RECORDER_DIR", "/tmp/fr", "/tmp/fr",
     [](const Config& c) { return c.flightRecorderDir == "/tmp/fr"; }},
};

TEST(ConfigTable, EveryVariableParsesIntoItsOwnField) {
  const auto defaults = shown(Config());
  for (const Sample& s : kSamples) {
    SCOPED_TRACE(s.name);
    ScopedEnv e(s.name, s.value);
    const Config c = Config::fromEnv();
    EXPECT_TRUE(s.inField(c));
    auto expected = defaults;
    ASSERT_TRUE(expected.count(s.name));
    EXPECT_NE(expected[s.name], s.shown) << "the sample must not be the default";
    expected[s.name] = s.shown;
    EXPECT_EQ(shown(c), expected);
  }
}

TEST(ConfigTable, EveryVariableParsesItsOwnDefault) {
  const Config d;
  for (const auto& e : d.describe()) {
    if (e.value.empty()) continue;  // an empty variable is an unset one
    SCOPED_TRACE(e.name);
    ScopedEnv env(e.name.c_str(), e.value.c_str());
    EXPECT_EQ(shown(Config::fromEnv()), shown(d));
  }
}

TEST(ConfigTable, RejectsWithTheSameMessages) {
  struct Case {
    const char* name;
    const char* value;
    const char* message;
  };
  const Case cases[] = {
      {"STRATA_TIMEOUT_MS", "soon", "STRATA_TIMEOUT_MS=soon is not an integer"},
      {"STRATA_TIMEOUT_MS", "0", "STRATA_TIMEOUT_MS=0 is out of range [1, 1099511627776]"},
      {"STRATA_TIMEOUT_MS", "99999999999999999999",
       "STRATA_TIMEOUT_MS=99999999999999999999 is out of range [1, 1099511627776]"},
      {"STRATA_TRANSPORT", "carrier-pigeon", "STRATA_TRANSPORT=carrier-pigeon is not one of auto, shm, tcp, ucx"},
      {"STRATA_TRANSPORT", "SHM", "STRATA_TRANSPORT=SHM is not one of auto, shm, tcp, ucx"},
      {"STRATA_GPU_LL128", "yes", "STRATA_GPU_LL128=yes is not one of auto, on, off"},
      {"STRATA_GPU_PROTO", "LL,Simple", "STRATA_GPU_PROTO=LL,Simple is not one of auto, simple, ll, ll128"},
      {"STRATA_NET", "shm", "STRATA_NET=shm is not one of tcp, ucx"},
      {"STRATA_TUNE", "guess", "STRATA_TUNE=guess is not one of model, probe, sim"},
      {"STRATA_ALGO", "allreduce", "STRATA_ALGO item 'allreduce' is not collective:algorithm"},
      {"STRATA_ALGO", "allreduce:ring,:tree", "STRATA_ALGO item ':tree' is not collective:algorithm"},
      {"STRATA_PIECE_BYTES", "1000", "STRATA_PIECE_BYTES must be a multiple of 64"},
      {"STRATA_PIECE_BYTES", "128", "STRATA_PIECE_BYTES=128 is out of range [256, 67108864]"},
      {"STRATA_PIECE_BYTES", "128M", "STRATA_PIECE_BYTES=128M is out of range [256, 67108864]"},
      {"STRATA_PIECE_BYTES", "1T", "STRATA_PIECE_BYTES=1T is not an integer"},
      {"STRATA_PIECE_BYTES", "64KB", "STRATA_PIECE_BYTES=64KB is not an integer"},
      {"STRATA_NSLOTS", "1", "STRATA_NSLOTS=1 is out of range [2, 1024]"},
      {"STRATA_NSLOTS", "4.5", "STRATA_NSLOTS=4.5 is not an integer"},
      {"STRATA_NSOCKS", "0", "STRATA_NSOCKS=0 is out of range [1, 64]"},
      {"STRATA_NSOCKS", "65", "STRATA_NSOCKS=65 is out of range [1, 64]"},
      {"STRATA_SPIN_US", "-1", "STRATA_SPIN_US=-1 is out of range [0, 1000000]"},
      {"STRATA_GPU_DIRECT_BYTES", "2G", "STRATA_GPU_DIRECT_BYTES=2G is out of range [0, 1073741824]"},
      {"STRATA_GPU_ONESHOT_BYTES", "-1", "STRATA_GPU_ONESHOT_BYTES=-1 is out of range [0, 1073741824]"},
      {"STRATA_GPU_STAGE_CHUNK_BYTES", "1.5M", "STRATA_GPU_STAGE_CHUNK_BYTES=1.5M is not an integer"},
  };
  for (const Case& c : cases) {
    ScopedEnv e(c.name, c.value);
    EXPECT_EQ(fromEnvError(), c.message) << c.name << "=" << c.value;
  }
}

// check() holds a Config set in code (the transports check theirs before set-up) to the rows parse() holds the
// environment to: the defaults and every sample pass, what parse refuses is refused with the value named.
TEST(ConfigTable, CheckRefusesWhatParseRefuses) {
  const Config defaults;
  for (const ConfigVar& v : configVariables()) EXPECT_NO_THROW(v.check(defaults)) << v.name;
  for (const Sample& s : kSamples) {
    Config c;
    configVariable(s.name).parse(c, s.value);
    EXPECT_NO_THROW(configVariable(s.name).check(c)) << s.name << "=" << s.value;
  }
  struct Case {
    std::function<void(Config&)> set;
    const char* name;
    const char* message;
  };
  const Case cases[] = {
      {[](Config& c) { c.nslots = 1; }, "STRATA_NSLOTS", "STRATA_NSLOTS=1 is out of range [2, 1024]"},
      {[](Config& c) { c.pieceBytes = 1000; }, "STRATA_PIECE_BYTES", "STRATA_PIECE_BYTES=1000 is not a multiple of 64"},
      {[](Config& c) { c.pieceBytes = 128; }, "STRATA_PIECE_BYTES",
       "STRATA_PIECE_BYTES=128 is out of range [256, 67108864]"},
      {[](Config& c) { c.pieceBytes = ~size_t{0}; }, "STRATA_PIECE_BYTES",
       "STRATA_PIECE_BYTES=18446744073709551615 is out of range [256, 67108864]"},
      {[](Config& c) { c.spinUs = -1; }, "STRATA_SPIN_US", "STRATA_SPIN_US=-1 is out of range [0, 1000000]"},
      {[](Config& c) { c.transport = "SHM"; }, "STRATA_TRANSPORT",
       "STRATA_TRANSPORT=SHM is not one of auto, shm, tcp, ucx"},
  };
  for (const Case& k : cases) {
    Config c;
    k.set(c);
    try {
      configVariable(k.name).check(c);
      ADD_FAILURE() << k.message << ": accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(std::string(e.what()), k.message);
    }
  }
  EXPECT_THROW(configVariable("STRATA_NO_SUCH_VARIABLE"), InternalError);
}

// The table itself: it lists what describe() lists, each field-bound row has a sample above, and a row's
// declared default is what Config() holds (set from any other value, parsing the default gives it back).
TEST(ConfigTable, RowsMatchTheStruct) {
  std::vector<std::string> names;
  for (const ConfigVar& v : configVariables()) names.push_back(v.name);
  EXPECT_EQ(names, kVariables);
  const Config defaults;
  for (const ConfigVar& v : configVariables()) {
    SCOPED_TRACE(v.name);
    if (const char* by = v.readBy()) {
      EXPECT_EQ(v.show(defaults), "");
      EXPECT_STREQ(v.defaultValue, "");
      // The module the row names reads the variable (a move or a rename would leave the row stale).
      std::ifstream module(std::string(STRATA_SOURCE_DIR) + "/src/" + by);
      ASSERT_TRUE(module.good()) << by << " does not exist";
      const std::string text((std::istreambuf_iterator<char>(module)), std::istreambuf_iterator<char>());
      EXPECT_NE(text.find(std::string("\"") + v.name + "\""), std::string::npos) << by << " does not read " << v.name;
      continue;
    }
    const Sample* sample = nullptr;
    for (const Sample& s : kSamples)
      if (std::string(s.name) == v.name) sample = &s;
    ASSERT_NE(sample, nullptr) << "add a sample value for " << v.name << " to kSamples";
    Config c;
    v.parse(c, sample->value);
    EXPECT_TRUE(sample->inField(c));
    EXPECT_EQ(v.show(c), sample->shown);
    v.parse(c, v.defaultValue);
    EXPECT_EQ(shown(c), shown(defaults));
    EXPECT_FALSE(sample->inField(c));
  }
  int readElsewhere = 0;
  for (const ConfigVar& v : configVariables()) readElsewhere += v.readBy() != nullptr;
  EXPECT_EQ(readElsewhere, 4);  // STRATA_DEBUG, STRATA_DEBUG_SUBSYS, STRATA_CUDA_LIBRARY, STRATA_SECRET
}

// The README's table of environment variables lists every row of the table (a new variable must be documented).
TEST(ConfigTable, ReadmeListsEveryVariable) {
  std::ifstream readme(std::string(STRATA_SOURCE_DIR) + "/README.md");
  ASSERT_TRUE(readme.good());
  const std::string text((std::istreambuf_iterator<char>(readme)), std::istreambuf_iterator<char>());
  for (const ConfigVar& v : configVariables())
    EXPECT_NE(text.find(std::string("| `") + v.name + "` |"), std::string::npos) << v.name << " is not in README.md";
}

}  // namespace
}  // namespace strata
