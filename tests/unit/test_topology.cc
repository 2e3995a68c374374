// Topology: the JSON format round-trips and rejects bad files with messages naming the field, ranks are
// placed by the documented rules, link classes and figures follow, discovery works on this machine, and
// buildTopology gives every rank the same answer.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "bootstrap/bootstrap.h"
#include "topology/cpulist.h"
#include "topology/host.h"
#include "topology/json.h"
#include "topology/sysfs.h"
#include "topology/topology.h"
#include "util/config.h"
#include "util/error.h"

#ifndef STRATA_SOURCE_DIR
#error "the unit tests are built with STRATA_SOURCE_DIR (tests/CMakeLists.txt)"
#endif

namespace strata {
namespace {

const std::string kDataDir = std::string(STRATA_SOURCE_DIR) + "/tests/data/topo/";
const std::string kDgx = kDataDir + "dgx_2x8gpu_4nic.json";
const std::string kTcp = kDataDir + "two_hosts_tcp.json";

::testing::AssertionResult contains(const std::string& haystack, const std::string& needle) {
  if (haystack.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << haystack << "' does not contain '" << needle << "'";
}

std::string readText(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The message fromJson throws for `text`, or "" if it parsed.
std::string fromJsonError(const std::string& text, const std::string& origin = "STRATA_TOPO_FILE /x.json") {
  try {
    Topology::fromJson(text, origin);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

// `text` with the first occurrence of `from` replaced by `to` (which must exist: tests edit known files).
std::string edit(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "'" << from << "' not in the text";
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// The n-th occurrence (from 0) of `from` replaced.
std::string editNth(std::string text, const std::string& from, const std::string& to, int n) {
  size_t at = text.find(from);
  for (int i = 0; i < n && at != std::string::npos; ++i) at = text.find(from, at + 1);
  EXPECT_NE(at, std::string::npos) << "occurrence " << n << " of '" << from << "' not in the text";
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

Topology withRanks(Topology t, const std::vector<int>& hostOfRank) {
  t.ranks = placeRanks(t.hosts, hostOfRank);
  return t;
}

Topology dgx16() {
  std::vector<int> hostOfRank;
  for (int r = 0; r < 16; ++r) hostOfRank.push_back(r / 8);
  return withRanks(loadTopologyFile(kDgx, "test"), hostOfRank);
}

// ---- JSON reader and writer --------------------------------------------------------------------------

TEST(Json, ParsesEveryKindOfValue) {
  const json::Value v =
      json::parse(R"( {"a": [1, -2.5e3, 0, true, false, null], "s": "q\"\\\/\n\t\u00e9\ud83d\ude00", "o": {}} )", "t");
  ASSERT_EQ(v.type, json::Type::kObject);
  const json::Value* a = v.find("a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->array.size(), 6u);
  EXPECT_EQ(a->array[1].number, -2500);
  EXPECT_TRUE(a->array[3].boolean);
  EXPECT_EQ(a->array[5].type, json::Type::kNull);
  EXPECT_EQ(v.find("s")->string, "q\"\\/\n\t\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(v.find("o")->type, json::Type::kObject);
  EXPECT_EQ(v.find("missing"), nullptr);
}

TEST(Json, WriteReadsBackUnchanged) {
  json::Value v = json::Value::makeObject();
  v.add("third", json::Value::makeNumber(1.0 / 3));
  v.add("big", json::Value::makeNumber(1099511627776.0));
  v.add("tiny", json::Value::makeNumber(1e-300));
  v.add("text", json::Value::makeString(std::string("ctl\x01 \"quote\" back\\slash")));
  json::Value& arr = v.add("list", json::Value::makeArray());
  for (int i = 0; i < 3; ++i) arr.push(json::Value::makeNumber(i));
  const std::string once = json::write(v);
  const json::Value back = json::parse(once, "t");
  EXPECT_EQ(back.find("third")->number, 1.0 / 3);
  EXPECT_EQ(back.find("tiny")->number, 1e-300);
  EXPECT_EQ(back.find("text")->string, v.find("text")->string);
  EXPECT_EQ(json::write(back), once);
  EXPECT_TRUE(contains(once, "\"big\": 1099511627776"));
  EXPECT_TRUE(contains(once, "\"list\": [0, 1, 2]"));
}

TEST(Json, ErrorsNameLineAndColumn) {
  auto error = [](const std::string& text) {
    try {
      json::parse(text, "f.json");
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_TRUE(contains(error("{\n  \"a\": 1,\n  \"b\" 2\n}"), "f.json: line 3, column 7: expected ':'"));
  EXPECT_TRUE(contains(error("{\"a\": [1, 2"), "truncated"));
  EXPECT_TRUE(contains(error("{\"a\": \"open"), "string not closed (truncated?)"));
  EXPECT_TRUE(contains(error(""), "empty document"));
  EXPECT_TRUE(contains(error("{\"a\": 01}"), "expected ',' or '}'"));
  EXPECT_TRUE(contains(error("{\"a\": 1.}"), "expected a digit after the decimal point"));
  EXPECT_TRUE(contains(error("{\"a\": 1e999}"), "out of range"));
  EXPECT_TRUE(contains(error("{\"a\": 1, \"a\": 2}"), "duplicate member \"a\""));
  EXPECT_TRUE(contains(error("{} x"), "unexpected text after the JSON value"));
  EXPECT_TRUE(contains(error("[tru]"), "expected a value, found 't'"));
  EXPECT_TRUE(contains(error("\"\\ud800\""), "unpaired UTF-16 surrogate"));
  EXPECT_TRUE(contains(error(std::string(100000, '[')), "nesting deeper than"));
}

TEST(CpuList, FormatsRangesAndParsesThemBack) {
  EXPECT_EQ(formatCpuList({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(formatCpuList({}), "");
  EXPECT_EQ(formatCpuList({5, 3, 4}), "5,3-4");
  for (const std::vector<int>& v : std::vector<std::vector<int>>{{}, {7}, {0, 1}, {3, 1, 2}, {1, 1}, {0, 2, 4}})
    EXPECT_EQ(parseCpuList(formatCpuList(v)), v);
  EXPECT_EQ(parseCpuList("0-2,7\n"), (std::vector<int>{0, 1, 2, 7}));
  EXPECT_FALSE(parseCpuList("3-1"));
  EXPECT_FALSE(parseCpuList("1,,2"));
  EXPECT_FALSE(parseCpuList("a"));
  EXPECT_FALSE(parseCpuList("0-2000000000"));
}

TEST(Sysfs, NormalizesPciAddresses) {
  EXPECT_EQ(sysfs::normalizePciBusId("00000000:1A:00.0"), "0000:1a:00.0");
  EXPECT_EQ(sysfs::normalizePciBusId("0000:1a:00.0"), "0000:1a:00.0");
  EXPECT_EQ(sysfs::normalizePciBusId("1a:00.0"), "1a:00.0");  // not a full address: unchanged
}

// ---- the file format ---------------------------------------------------------------------------------

TEST(TopologyJson, ExampleFilesRoundTrip) {
  for (const std::string& path : {kDgx, kTcp}) {
    SCOPED_TRACE(path);
    const Topology t = loadTopologyFile(path, "test");
    EXPECT_TRUE(t.ranks.empty());
    const std::string json = t.toJson();
    const Topology back = Topology::fromJson(json, "round trip");
    EXPECT_TRUE(back == t);
    EXPECT_EQ(back.toJson(), json);
    EXPECT_FALSE(contains(json, "\"ranks\""));
  }
  // With ranks placed, the ranks section round-trips too.
  const Topology t = dgx16();
  const Topology back = Topology::fromJson(t.toJson(), "round trip");
  EXPECT_TRUE(back == t);
  EXPECT_EQ(back.toJson(), t.toJson());
  EXPECT_EQ(back.nranks(), 16);
}

TEST(TopologyJson, ReadsTheExampleFilesFields) {
  const Topology dgx = loadTopologyFile(kDgx, "test");
  ASSERT_EQ(dgx.nhosts(), 2);
  const HostTopology& h = dgx.hosts[1];
  EXPECT_EQ(h.hostId, "dgx-b");
  EXPECT_EQ(h.cores, 112);
  ASSERT_EQ(h.numa.size(), 2u);
  EXPECT_EQ(h.numa[1].cpus.size(), 56u);
  EXPECT_EQ(h.numa[1].cpus.front(), 56);
  ASSERT_EQ(h.gpus.size(), 8u);
  EXPECT_EQ(h.gpus[5].nvlinkPeers, (std::vector<int>{0, 1, 2, 3, 4, 6, 7}));
  EXPECT_EQ(h.gpus[5].nvlinkGBps, 450);
  ASSERT_EQ(h.nics.size(), 4u);
  EXPECT_EQ(h.nics[2].gbps, 400);
  EXPECT_TRUE(h.nics[2].rdma);
  EXPECT_EQ(h.nics[2].numa, 1);
  // No figures in the file: shm defaults, net from the 400 Gbit/s RDMA NICs.
  EXPECT_EQ(h.shm, (LinkFigures{kShmLatencyUs, kShmBandwidthGBps}));
  EXPECT_EQ(h.net, (LinkFigures{kRdmaLatencyUs, 50}));
  const Topology tcp = loadTopologyFile(kTcp, "test");
  EXPECT_EQ(tcp.hosts[0].net, (LinkFigures{kTcpLatencyUs, 0.125}));
  EXPECT_TRUE(tcp.hosts[0].gpus.empty());
}

TEST(TopologyJson, ErrorsNameTheFileAndTheField) {
  const std::string dgx = readText(kDgx);
  const std::string tcp = readText(kTcp);
  // Wrong type.
  EXPECT_EQ(fromJsonError(editNth(dgx, "\"gbps\": 400", "\"gbps\": \"400\"", 4)),
            "STRATA_TOPO_FILE /x.json: hosts[1].nics[0].gbps: expected a number, found a string");
  // Missing required field.
  EXPECT_EQ(fromJsonError(editNth(tcp, "\"cores\": 2,", "", 1)),
            "STRATA_TOPO_FILE /x.json: hosts[1].cores: missing; expected a number");
  EXPECT_EQ(fromJsonError(edit(tcp, "\"hosts\"", "\"hostz\"")),
            "STRATA_TOPO_FILE /x.json: hostz: unknown field (known: version, comment, hosts, ranks)");
  EXPECT_EQ(fromJsonError("{\"version\": 1}"), "STRATA_TOPO_FILE /x.json: hosts: missing; expected an array");
  // A misspelt optional field is an error, not silently ignored.
  EXPECT_TRUE(contains(fromJsonError(edit(tcp, "\"gbps\"", "\"gpbs\"")), "hosts[0].nics[0].gpbs: unknown field"));
  // Values out of their range.
  EXPECT_TRUE(
      contains(fromJsonError(edit(tcp, "\"cores\": 2", "\"cores\": 2.5")), "hosts[0].cores: 2.5 is not an integer"));
  EXPECT_TRUE(
      contains(fromJsonError(edit(tcp, "\"gbps\": 1", "\"gbps\": -1")), "hosts[0].nics[0].gbps: -1 is negative"));
  EXPECT_TRUE(contains(fromJsonError(edit(tcp, "\"numa\": 0,", "\"numa\": 3,")),
                       "hosts[0].nics[0].numa: 3 is not one of this host's NUMA domains (0)"));
  EXPECT_TRUE(contains(fromJsonError(edit(tcp, "\"cpus\": \"0-1\"", "\"cpus\": \"1-0\"")),
                       "hosts[0].numa[0].cpus: \"1-0\" is not a CPU list"));
  EXPECT_TRUE(contains(fromJsonError(edit(dgx, "\"nvlinkPeers\": [1,", "\"nvlinkPeers\": [9,")),
                       "hosts[0].gpus[0].nvlinkPeers[0]: GPU 9 does not exist (the host has 8)"));
  EXPECT_TRUE(contains(fromJsonError(edit(dgx, "\"index\": 3", "\"index\": 4")),
                       "hosts[0].gpus[3].index: 4, but GPUs are listed in index order (expected 3)"));
  EXPECT_TRUE(
      contains(fromJsonError(edit(tcp, "\"tcp-b\"", "\"tcp-a\"")), "hosts[1].hostId: \"tcp-a\" is also hosts[0]'s id"));
  EXPECT_TRUE(
      contains(fromJsonError(edit(tcp, "\"version\": 1", "\"version\": 2")), "version: 2, but this Strata reads"));
  EXPECT_EQ(fromJsonError("[1, 2]"),
            "STRATA_TOPO_FILE /x.json: expected a JSON object with \"hosts\" at the top, found an array");
  // Truncated text: the JSON reader says where it stopped.
  EXPECT_TRUE(contains(fromJsonError(dgx.substr(0, dgx.size() / 2)), "STRATA_TOPO_FILE /x.json: line "));
  EXPECT_TRUE(contains(fromJsonError(dgx.substr(0, dgx.size() / 2)), "truncated"));
}

TEST(TopologyJson, RanksMustAgreeWithTheHosts) {
  const std::string json = dgx16().toJson();
  // Edits the first rank entry that starts with {"host": <from>.
  auto rankEdit = [&](const std::string& from, const std::string& to) {
    return fromJsonError(edit(json, "{\"host\": " + from, "{\"host\": " + to));
  };
  EXPECT_TRUE(contains(rankEdit("0, \"localRank\": 3", "0, \"localRank\": 4"),
                       "ranks[3].localRank: 4, but rank 3 is rank 3 of host 0 in rank order"));
  EXPECT_TRUE(contains(rankEdit("0", "1"), "ranks[0].host: host 1 before any rank on host 0"));
  EXPECT_TRUE(contains(rankEdit("0", "2"), "ranks[0].host: host 2 does not exist (the file has 2)"));
  EXPECT_TRUE(
      contains(fromJsonError(edit(json, "\"gpu\": 7,", "\"gpu\": 8,")), "gpu: GPU 8 does not exist (host 0 has 8)"));
  EXPECT_TRUE(
      contains(fromJsonError(edit(json, "\"nic\": 1}", "\"nic\": 4}")), "nic: NIC 4 does not exist (host 0 has 4)"));
  // Every rank on host 0: host 1 has no rank.
  std::string oneHost = json;
  for (int r = 8; r < 16; ++r)
    oneHost = edit(oneHost, "{\"host\": 1, \"localRank\": " + std::to_string(r - 8),
                   "{\"host\": 0, \"localRank\": " + std::to_string(r));
  EXPECT_TRUE(contains(fromJsonError(oneHost), "ranks: no rank runs on host 1 (hosts[1])"));
}

TEST(TopologyJson, DamagedFilesThrowInvalidArgumentOnly) {
  // Every prefix of a file, and random byte changes: either a valid topology or InvalidArgument, never a
  // crash or another exception.
  const std::string text = dgx16().toJson();
  for (size_t n = 0; n < text.size(); n += 7) {
    EXPECT_THROW(Topology::fromJson(text.substr(0, n), "prefix"), InvalidArgument) << n;
  }
  std::mt19937 rng(12345);
  const std::string bytes = "{}[],:\"\\0123456789-.eEtrufalsn x\x01\xff";
  for (int i = 0; i < 2000; ++i) {
    std::string damaged = text;
    for (int k = 0; k < 3; ++k) damaged[rng() % damaged.size()] = bytes[rng() % bytes.size()];
    try {
      Topology::fromJson(damaged, "damaged");
    } catch (const InvalidArgument&) {
    }
  }
}

// ---- placement ---------------------------------------------------------------------------------------

TEST(Placement, OneRankPerGpuAndARailPerLocalRank) {
  const Topology t = dgx16();
  for (int r = 0; r < 16; ++r) {
    SCOPED_TRACE(r);
    const RankPlace& p = t.ranks[static_cast<size_t>(r)];
    EXPECT_EQ(p.host, r / 8);
    EXPECT_EQ(p.localRank, r % 8);
    EXPECT_EQ(p.gpu, r % 8);
    EXPECT_EQ(p.numa, r % 8 < 4 ? 0 : 1);
    // GPUs 0-3 share NICs 0 and 1 (NUMA 0), GPUs 4-7 NICs 2 and 3, alternating.
    EXPECT_EQ(p.nic, (r % 8 < 4 ? 0 : 2) + r % 2);
    EXPECT_EQ(t.hosts[static_cast<size_t>(p.host)].nics[static_cast<size_t>(p.nic)].numa, p.numa);
  }
  EXPECT_EQ(t.ranksOfHost(1), (std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15}));
}

TEST(Placement, MoreRanksThanGpusWrapAround) {
  Topology t = loadTopologyFile(kDgx, "test");
  t.hosts.resize(1);
  t = withRanks(t, std::vector<int>(10, 0));
  EXPECT_EQ(t.ranks[8].gpu, 0);
  EXPECT_EQ(t.ranks[9].gpu, 1);
  EXPECT_EQ(t.ranks[9].localRank, 9);
}

TEST(Placement, UnequalRanksPerHost) {
  // 3 ranks on host A, 1 on host B, interleaved in rank order: A B A A.
  const Topology t = withRanks(loadTopologyFile(kTcp, "test"), {0, 1, 0, 0});
  EXPECT_EQ(t.ranksOfHost(0), (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(t.ranksOfHost(1), (std::vector<int>{1}));
  EXPECT_EQ(t.ranks[3].localRank, 2);
  EXPECT_EQ(t.ranks[1].localRank, 0);
  for (const RankPlace& p : t.ranks) {
    EXPECT_EQ(p.gpu, -1);
    EXPECT_EQ(p.numa, 0);
    EXPECT_EQ(p.nic, 0);
  }
  EXPECT_TRUE(Topology::fromJson(t.toJson(), "round trip") == t);
}

TEST(Placement, WithoutGpusRanksSpreadOverNumaDomains) {
  Topology t = loadTopologyFile(kDgx, "test");
  t.hosts.resize(1);
  t.hosts[0].gpus.clear();
  t = withRanks(t, std::vector<int>(4, 0));
  EXPECT_EQ(t.ranks[0].numa, 0);
  EXPECT_EQ(t.ranks[1].numa, 1);
  EXPECT_EQ(t.ranks[2].numa, 0);
  // Ranks on NUMA 0 take its two NICs in turn, as do ranks on NUMA 1.
  EXPECT_EQ(t.ranks[0].nic, 0);
  EXPECT_EQ(t.ranks[1].nic, 2);
  EXPECT_EQ(t.ranks[2].nic, 1);
  EXPECT_EQ(t.ranks[3].nic, 3);
}

TEST(Placement, RdmaNicsComeBeforeOtherInterfaces) {
  Topology t = loadTopologyFile(kDgx, "test");
  t.hosts.resize(1);
  Nic eth;
  eth.name = "eth0";
  eth.linkLayer = "Ethernet";
  eth.gbps = 100;
  eth.numa = 0;
  t.hosts[0].nics.insert(t.hosts[0].nics.begin(), eth);
  t = withRanks(t, std::vector<int>(8, 0));
  for (const RankPlace& p : t.ranks) EXPECT_TRUE(t.hosts[0].nics[static_cast<size_t>(p.nic)].rdma);
  // Without RDMA NICs the Ethernet interface serves every rank, wherever it sits.
  t.hosts[0].nics.resize(1);
  t.hosts[0].nics[0].numa = 1;
  t = withRanks(t, std::vector<int>(8, 0));
  for (const RankPlace& p : t.ranks) EXPECT_EQ(p.nic, 0);
  EXPECT_THROW(placeRanks(t.hosts, {0, 1}), InvalidArgument);
}

// ---- link classes and figures ------------------------------------------------------------------------

TEST(Links, ClassesAndFigures) {
  Topology t = dgx16();
  EXPECT_EQ(t.linkClass(3, 3), LinkClass::kSelf);
  EXPECT_EQ(t.linkClass(0, 7), LinkClass::kNvlink);
  EXPECT_EQ(t.linkClass(8, 9), LinkClass::kNvlink);
  EXPECT_EQ(t.linkClass(0, 8), LinkClass::kNet);
  EXPECT_STREQ(linkClassName(t.linkClass(0, 8)), "net");
  EXPECT_EQ(t.link(0, 7), (LinkFigures{kNvlinkLatencyUs, 450}));
  EXPECT_EQ(t.link(0, 8), (LinkFigures{kRdmaLatencyUs, 50}));
  EXPECT_EQ(t.link(5, 5).timeUs(1e9), 0);
  // 1 MB over 50 GB/s: 20 us plus latency.
  EXPECT_DOUBLE_EQ(t.link(0, 8).timeUs(1e6), kRdmaLatencyUs + 20);
  // Without NVLink between them, two GPUs talk through PCIe.
  t.hosts[0].gpus[0].nvlinkPeers.clear();
  EXPECT_EQ(t.linkClass(0, 1), LinkClass::kPcie);
  EXPECT_EQ(t.link(0, 1), (LinkFigures{kPcieLatencyUs, kPcieBandwidthGBps}));
  // The slower host sets the network figures.
  t.hosts[1].net = {5, 12.5};
  EXPECT_EQ(t.link(0, 8), (LinkFigures{5, 12.5}));
  EXPECT_EQ(t.link(8, 0), (LinkFigures{5, 12.5}));
  EXPECT_THROW(t.linkClass(0, 16), InvalidArgument);
  EXPECT_THROW(t.link(-1, 0), InvalidArgument);

  const Topology tcp = withRanks(loadTopologyFile(kTcp, "test"), {0, 0, 1});
  EXPECT_EQ(tcp.linkClass(0, 1), LinkClass::kShm);
  EXPECT_EQ(tcp.link(0, 1), (LinkFigures{kShmLatencyUs, kShmBandwidthGBps}));
  EXPECT_EQ(tcp.linkClass(1, 2), LinkClass::kNet);
  EXPECT_EQ(tcp.link(1, 2), (LinkFigures{kTcpLatencyUs, 0.125}));
}

TEST(Links, NetFiguresComeFromTheFastestNic) {
  EXPECT_EQ(netFigures({}, false), (LinkFigures{kTcpLatencyUs, kUnknownNicGbps / 8}));
  Nic slow, fast;
  slow.gbps = 25;
  fast.gbps = 200;
  fast.rdma = true;
  EXPECT_EQ(netFigures({slow, fast}, true), (LinkFigures{kRdmaLatencyUs, 25}));
  // RDMA latency only when the transport between hosts uses RDMA (STRATA_NET=ucx).
  EXPECT_EQ(netFigures({slow, fast}, false), (LinkFigures{kTcpLatencyUs, 25}));
}

// ---- text --------------------------------------------------------------------------------------------

TEST(TopologyText, MentionsEveryHostDeviceAndRank) {
  const std::string text = dgx16().toText();
  EXPECT_TRUE(contains(text, "topology: 2 hosts, 16 ranks"));
  EXPECT_TRUE(contains(text, "host 0: dgx-a"));
  EXPECT_TRUE(contains(text, "host 1: dgx-b"));
  EXPECT_TRUE(contains(text, "NUMA 1: cpus 56-111 (56), 1024.0 GiB"));
  EXPECT_TRUE(
      contains(text, "NIC 3: mlx5_3 port 1, InfiniBand RDMA, 400 Gbit/s, NUMA 1, PCI 0000:bc:00.0, netdev ibp188s0"));
  EXPECT_TRUE(contains(text, "GPU 2: NVIDIA H100 80GB HBM3, PCI 0000:3a:00.0, NUMA 0, NVLink 450 GB/s to GPU 0-1,3-7"));
  EXPECT_TRUE(contains(text, "links: shm 0.5 us, 10 GB/s; net 2 us, 50 GB/s"));
  EXPECT_TRUE(contains(text, "    15     1      7     1    7  mlx5_3\n"));
  const std::string hostsOnly = loadTopologyFile(kTcp, "test").toText();
  EXPECT_TRUE(contains(hostsOnly, "host 1: tcp-b"));
  EXPECT_TRUE(contains(hostsOnly, "GPUs: none"));
  EXPECT_TRUE(contains(hostsOnly, "ranks: none placed"));
}

// ---- discovery ---------------------------------------------------------------------------------------

bool cudaDriverPresent() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  return lib != nullptr;  // left loaded, as discovery leaves it
}

TEST(Discovery, ThisHost) {
  Config config;
  const HostTopology h = discoverHost(config);
  EXPECT_EQ(h.hostId, hostIdentity(config));
  EXPECT_FALSE(h.hostname.empty());
  EXPECT_GE(h.cores, 1);
  ASSERT_GE(h.numa.size(), 1u);
  size_t cpus = 0;
  for (const NumaDomain& d : h.numa) cpus += d.cpus.size();
  EXPECT_GE(cpus, 1u);
  if (!cudaDriverPresent()) {
    EXPECT_TRUE(h.gpus.empty());
  }
  for (const Nic& n : h.nics) {
    EXPECT_GT(n.gbps, 0) << n.name;
    EXPECT_NE(n.name, "lo");
  }
  EXPECT_EQ(h.shm, (LinkFigures{kShmLatencyUs, kShmBandwidthGBps}));
  EXPECT_GT(h.net.bandwidthGBps, 0);
  // What travels through the bootstrap reads back unchanged.
  EXPECT_TRUE(hostFromJson(hostToJson(h), "test") == h);

  config.hostId = "node7";
  EXPECT_EQ(discoverHost(config).hostId, "node7");
}

TEST(Discovery, HostDescriptionErrorsNameTheSender) {
  try {
    hostFromJson("{\"hostId\": \"a\", \"numa\": []}", "rank 3's host description");
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "rank 3's host description: cores: missing; expected a number");
  }
}

// ---- buildTopology -----------------------------------------------------------------------------------

Config testConfig() {
  Config c;
  c.timeoutMs = 20000;
  return c;
}

// Runs buildTopology on `hostIds.size()` thread ranks over a real bootstrap; returns each rank's result
// or error message.
struct BuildResult {
  std::vector<Topology> topos;
  std::vector<std::string> errors;
};
BuildResult buildOnRanks(const Config& config, const std::vector<std::string>& hostIds) {
  const int n = static_cast<int>(hostIds.size());
  const UniqueIdInfo id = startRootService(config, "127.0.0.1", 0, randomSecret(), n);
  BuildResult out;
  out.topos.resize(hostIds.size());
  out.errors.resize(hostIds.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto bs = Bootstrap::connect(config, id, r, n);
        try {
          out.topos[static_cast<size_t>(r)] = buildTopology(config, *bs, hostIds);
        } catch (const std::exception& e) {
          out.errors[static_cast<size_t>(r)] = e.what();
        }
        bs->barrier();
      } catch (const std::exception& e) {
        if (out.errors[static_cast<size_t>(r)].empty()) out.errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST(BuildTopology, DiscoveryGivesEveryRankTheSameAnswer) {
  // Host ids say ranks 0, 1, 3 share a host and rank 2 is elsewhere (all really run here).
  const std::vector<std::string> ids = {"A", "A", "B", "A"};
  const BuildResult res = buildOnRanks(testConfig(), ids);
  for (const std::string& e : res.errors) ASSERT_EQ(e, "");
  const Topology& t = res.topos[0];
  ASSERT_EQ(t.nhosts(), 2);
  EXPECT_EQ(t.hosts[0].hostId, "A");
  EXPECT_EQ(t.hosts[1].hostId, "B");
  EXPECT_EQ(t.ranksOfHost(0), (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(t.ranks[3].localRank, 2);
  EXPECT_EQ(t.ranks[2].localRank, 0);
  EXPECT_EQ(t.linkClass(0, 2), LinkClass::kNet);
  for (const Topology& other : res.topos) EXPECT_TRUE(other == t);
}

// A file of `text` in the test's temporary directory, removed when it goes out of scope.
struct TempFile {
  TempFile(const std::string& name, const std::string& text)
      : path(::testing::TempDir() + "/" + std::to_string(getpid()) + "_" + name) {
    std::ofstream(path) << text;
  }
  ~TempFile() { std::remove(path.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  std::string path;
};

TEST(BuildTopology, FileWithoutRanksPlacesThemByHostId) {
  Config config = testConfig();
  config.topoFile = kTcp;
  // 3 ranks on the first host id, 1 on the second: the file's hosts[0] and hosts[1].
  const BuildResult res = buildOnRanks(config, {"x", "x", "y", "x"});
  for (const std::string& e : res.errors) ASSERT_EQ(e, "");
  const Topology& t = res.topos[1];
  EXPECT_EQ(t.nhosts(), 2);
  EXPECT_EQ(t.hosts[0].hostId, "tcp-a");
  EXPECT_EQ(t.ranksOfHost(0), (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(t.ranksOfHost(1), (std::vector<int>{2}));
  for (const Topology& other : res.topos) EXPECT_TRUE(other == t);

  // One host id: only the file's first host is used.
  const BuildResult one = buildOnRanks(config, {"x", "x"});
  EXPECT_EQ(one.errors[0], "");
  EXPECT_EQ(one.topos[0].nhosts(), 1);

  // More hosts than the file describes.
  const BuildResult many = buildOnRanks(config, {"x", "y", "z"});
  EXPECT_EQ(many.errors[0], "STRATA_TOPO_FILE " + kTcp +
                                ": the communicator's ranks run on 3 hosts (by host id), but the file describes 2");
}

TEST(BuildTopology, FileWithRanksMustMatchTheCommunicator) {
  Config config = testConfig();
  const TempFile file("topo_3ranks.json", withRanks(loadTopologyFile(kTcp, "test"), {0, 0, 1}).toJson());
  config.topoFile = file.path;
  const BuildResult ok = buildOnRanks(config, {"a", "a", "a"});  // the file's placement wins over host ids
  EXPECT_EQ(ok.errors[2], "");
  EXPECT_EQ(ok.topos[2].ranksOfHost(1), (std::vector<int>{2}));
  const BuildResult bad = buildOnRanks(config, {"a", "a"});
  EXPECT_EQ(bad.errors[0],
            "STRATA_TOPO_FILE " + config.topoFile + ": the file places 3 ranks, but the communicator has 2");
}

TEST(BuildTopology, UnreadableOrMalformedFileIsNamed) {
  Config config = testConfig();
  config.topoFile = "/nonexistent/topo.json";
  const BuildResult res = buildOnRanks(config, {"a"});
  EXPECT_EQ(res.errors[0], "STRATA_TOPO_FILE /nonexistent/topo.json: cannot read: No such file or directory");
  const TempFile file("topo_bad.json", "{\"hosts\": [{\"hostId\": \"a\", \"cores\": true}]}");
  config.topoFile = file.path;
  const BuildResult bad = buildOnRanks(config, {"a"});
  EXPECT_EQ(bad.errors[0],
            "STRATA_TOPO_FILE " + config.topoFile + ": hosts[0].cores: expected a number, found a boolean");
}

}  // namespace
}  // namespace strata
