// The topology file format (strata-topo --json, STRATA_TOPO_FILE). Reading checks every field and names
// the first wrong one by its path ("hosts[1].nics[0].gbps: expected a number"), so a hand-edited file
// fails with a message that says where to look. DESIGN.md lists the fields.
#include <cmath>
#include <limits>
#include <set>

#include "topology/cpulist.h"
#include "topology/json.h"
#include "topology/json_reader.h"
#include "topology/topology.h"
#include "util/error.h"

namespace strata {
namespace {

using json::ObjectReader;
using json::Type;
using json::Value;

constexpr int kFormatVersion = 1;

// ---- writing -----------------------------------------------------------------------------------------

Value num(double d) { return Value::makeNumber(d); }
Value str(const std::string& s) { return Value::makeString(s); }

Value figuresToValue(const LinkFigures& f) {
  Value v = Value::makeObject();
  v.add("latencyUs", num(f.latencyUs));
  v.add("bandwidthGBps", num(f.bandwidthGBps));
  return v;
}

Value hostToValue(const HostTopology& h) {
  Value v = Value::makeObject();
  v.add("hostId", str(h.hostId));
  v.add("hostname", str(h.hostname));
  v.add("cores", num(h.cores));
  Value& numa = v.add("numa", Value::makeArray());
  for (const NumaDomain& d : h.numa) {
    Value& e = numa.push(Value::makeObject());
    e.add("id", num(d.id));
    e.add("cpus", str(formatCpuList(d.cpus)));
    e.add("memoryBytes", num(static_cast<double>(d.memoryBytes)));
  }
  Value& nics = v.add("nics", Value::makeArray());
  for (const Nic& n : h.nics) {
    Value& e = nics.push(Value::makeObject());
    e.add("name", str(n.name));
    e.add("port", num(n.port));
    e.add("linkLayer", str(n.linkLayer));
    e.add("gbps", num(n.gbps));
    if (n.gbpsAssumed) e.add("gbpsAssumed", Value::makeBool(true));
    e.add("numa", num(n.numa));
    e.add("pciBusId", str(n.pciBusId));
    e.add("netdev", str(n.netdev));
    e.add("rdma", Value::makeBool(n.rdma));
  }
  Value& gpus = v.add("gpus", Value::makeArray());
  for (const Gpu& g : h.gpus) {
    Value& e = gpus.push(Value::makeObject());
    e.add("index", num(g.index));
    e.add("name", str(g.name));
    e.add("pciBusId", str(g.pciBusId));
    e.add("numa", num(g.numa));
    Value& peers = e.add("nvlinkPeers", Value::makeArray());
    for (int p : g.nvlinkPeers) peers.push(num(p));
    e.add("nvlinkGBps", num(g.nvlinkGBps));
  }
  v.add("shm", figuresToValue(h.shm));
  v.add("net", figuresToValue(h.net));
  return v;
}

// ---- reading -----------------------------------------------------------------------------------------

const std::vector<Value> kNoValues;

std::string indexed(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

LinkFigures readFigures(const ObjectReader& parent, const char* key, LinkFigures def, const std::string& origin) {
  if (!parent.has(key)) return def;
  ObjectReader r(parent.get(key, Type::kObject), parent.at(key), origin, {"latencyUs", "bandwidthGBps"});
  return {r.number("latencyUs"), r.number("bandwidthGBps")};
}

// -1 (unknown) or the id of one of the host's NUMA domains.
void checkNuma(const ObjectReader& r, const char* key, int numa, const HostTopology& h) {
  if (numa < 0) return;
  std::string ids;
  for (const NumaDomain& d : h.numa) {
    if (d.id == numa) return;
    ids += std::string(ids.empty() ? "" : ", ") + std::to_string(d.id);
  }
  r.fail(r.at(key), strprintf("%d is not one of this host's NUMA domains (%s)", numa, ids.c_str()));
}

NumaDomain readNuma(const Value& v, const std::string& path, const std::string& origin) {
  ObjectReader r(v, path, origin, {"id", "cpus", "memoryBytes"});
  NumaDomain d;
  d.id = r.integer("id", 0);
  if (r.has("cpus")) {
    const Value& c = *v.find("cpus");
    if (c.type == Type::kString) {
      auto cpus = parseCpuList(c.string);
      if (!cpus) r.fail(r.at("cpus"), "\"" + c.string + "\" is not a CPU list like \"0-27,56-83\"");
      d.cpus = std::move(*cpus);
    } else if (c.type == Type::kArray) {
      for (size_t i = 0; i < c.array.size(); ++i) d.cpus.push_back(r.toInt(c.array[i], indexed(r.at("cpus"), i), 0));
    } else {
      r.fail(r.at("cpus"), std::string("expected a CPU list string or an array, found ") + json::typeName(c.type));
    }
  }
  const double mem = r.number("memoryBytes", 0);
  // Doubles hold integers exactly up to 2^53 bytes (8 PiB), far beyond any NUMA domain.
  if (mem != std::floor(mem) || mem > 9007199254740992.0)
    r.fail(r.at("memoryBytes"), strprintf("%g is not a byte count", mem));
  d.memoryBytes = static_cast<uint64_t>(mem);
  return d;
}

Nic readNic(const Value& v, const std::string& path, const std::string& origin, const HostTopology& h) {
  ObjectReader r(v, path, origin,
                 {"name", "port", "linkLayer", "gbps", "gbpsAssumed", "numa", "pciBusId", "netdev", "rdma"});
  Nic n;
  n.name = r.string("name");
  if (n.name.empty()) r.fail(r.at("name"), "empty");
  n.port = r.integer("port", 0, 1);
  n.rdma = r.boolean("rdma", false);
  n.linkLayer = r.string("linkLayer", n.rdma ? "InfiniBand" : "Ethernet");
  n.gbps = r.number("gbps");
  n.gbpsAssumed = r.boolean("gbpsAssumed", false);
  n.numa = r.integer("numa", -1, -1);
  checkNuma(r, "numa", n.numa, h);
  n.pciBusId = r.string("pciBusId", "");
  n.netdev = r.string("netdev", "");
  return n;
}

Gpu readGpu(const Value& v, const std::string& path, const std::string& origin, const HostTopology& h, size_t i,
            size_t ngpus) {
  ObjectReader r(v, path, origin, {"index", "name", "pciBusId", "numa", "nvlinkPeers", "nvlinkGBps"});
  Gpu g;
  g.index = r.integer("index", 0, static_cast<int>(i));
  if (g.index != static_cast<int>(i))
    r.fail(r.at("index"), strprintf("%d, but GPUs are listed in index order (expected %zu)", g.index, i));
  g.name = r.string("name", "");
  g.pciBusId = r.string("pciBusId", "");
  g.numa = r.integer("numa", -1, -1);
  checkNuma(r, "numa", g.numa, h);
  const auto& peers = r.array("nvlinkPeers", kNoValues);
  for (size_t k = 0; k < peers.size(); ++k) {
    const std::string where = indexed(r.at("nvlinkPeers"), k);
    const int p = r.toInt(peers[k], where, 0);
    if (p >= static_cast<int>(ngpus)) r.fail(where, strprintf("GPU %d does not exist (the host has %zu)", p, ngpus));
    if (p == g.index) r.fail(where, "a GPU is not its own NVLink peer");
    g.nvlinkPeers.push_back(p);
  }
  g.nvlinkGBps = r.number("nvlinkGBps", 0);
  return g;
}

HostTopology readHost(const Value& v, const std::string& path, const std::string& origin) {
  ObjectReader r(v, path, origin, {"hostId", "hostname", "cores", "numa", "nics", "gpus", "shm", "net"});
  HostTopology h;
  h.hostId = r.string("hostId");
  if (h.hostId.empty()) r.fail(r.at("hostId"), "empty");
  h.hostname = r.string("hostname", h.hostId);
  h.cores = r.integer("cores", 0);
  const auto& numa = r.array("numa");
  std::set<int> ids;
  for (size_t i = 0; i < numa.size(); ++i) {
    h.numa.push_back(readNuma(numa[i], indexed(r.at("numa"), i), origin));
    if (!ids.insert(h.numa.back().id).second)
      r.fail(indexed(r.at("numa"), i) + ".id", strprintf("NUMA domain %d is listed twice", h.numa.back().id));
  }
  const auto& nics = r.array("nics", kNoValues);
  for (size_t i = 0; i < nics.size(); ++i) h.nics.push_back(readNic(nics[i], indexed(r.at("nics"), i), origin, h));
  const auto& gpus = r.array("gpus", kNoValues);
  for (size_t i = 0; i < gpus.size(); ++i)
    h.gpus.push_back(readGpu(gpus[i], indexed(r.at("gpus"), i), origin, h, i, gpus.size()));
  h.shm = readFigures(r, "shm", {kShmLatencyUs, kShmBandwidthGBps}, origin);
  // A file describes a cluster: without figures, a verbs NIC is taken to be used over RDMA.
  h.net = readFigures(r, "net", netFigures(h.nics, true), origin);
  return h;
}

// Ranks must agree with the hosts: every host has a rank, hosts appear in order of their lowest rank, and
// localRank counts the host's ranks in rank order (what placeRanks produces).
std::vector<RankPlace> readRanks(const ObjectReader& top, const std::vector<HostTopology>& hosts,
                                 const std::string& origin) {
  const auto& ranks = top.array("ranks");
  std::vector<RankPlace> places;
  std::vector<int> localCount(hosts.size(), 0);
  int nextHost = 0;
  for (size_t i = 0; i < ranks.size(); ++i) {
    ObjectReader r(ranks[i], indexed("ranks", i), origin, {"host", "localRank", "numa", "gpu", "nic"});
    RankPlace p;
    p.host = r.integer("host", 0);
    if (p.host >= static_cast<int>(hosts.size()))
      r.fail(r.at("host"), strprintf("host %d does not exist (the file has %zu)", p.host, hosts.size()));
    if (p.host > nextHost)
      r.fail(r.at("host"), strprintf("host %d before any rank on host %d; hosts are listed in order of their "
                                     "lowest rank",
                                     p.host, nextHost));
    if (p.host == nextHost) ++nextHost;
    const HostTopology& h = hosts[static_cast<size_t>(p.host)];
    const int expected = localCount[static_cast<size_t>(p.host)]++;
    p.localRank = r.integer("localRank", 0, expected);
    if (p.localRank != expected)
      r.fail(r.at("localRank"),
             strprintf("%d, but rank %zu is rank %d of host %d in rank order", p.localRank, i, expected, p.host));
    p.numa = r.integer("numa", -1, -1);
    checkNuma(r, "numa", p.numa, h);
    p.gpu = r.integer("gpu", -1, -1);
    if (p.gpu >= static_cast<int>(h.gpus.size()))
      r.fail(r.at("gpu"), strprintf("GPU %d does not exist (host %d has %zu)", p.gpu, p.host, h.gpus.size()));
    p.nic = r.integer("nic", -1, -1);
    if (p.nic >= static_cast<int>(h.nics.size()))
      r.fail(r.at("nic"), strprintf("NIC %d does not exist (host %d has %zu)", p.nic, p.host, h.nics.size()));
    places.push_back(p);
  }
  if (!places.empty() && nextHost < static_cast<int>(hosts.size()))
    top.fail("ranks", strprintf("no rank runs on host %d (hosts[%d]); remove the host or place a rank on it", nextHost,
                                nextHost));
  return places;
}

}  // namespace

std::string hostToJson(const HostTopology& host) { return json::write(hostToValue(host)); }

HostTopology hostFromJson(const std::string& text, const std::string& origin) {
  return readHost(json::parse(text, origin), "", origin);
}

std::string Topology::toJson() const {
  Value v = Value::makeObject();
  v.add("version", num(kFormatVersion));
  Value& hs = v.add("hosts", Value::makeArray());
  for (const HostTopology& h : hosts) hs.push(hostToValue(h));
  // A description of hosts alone (a file meant for any number of ranks) has no ranks section.
  if (!ranks.empty()) {
    Value& rs = v.add("ranks", Value::makeArray());
    for (const RankPlace& p : ranks) {
      Value& e = rs.push(Value::makeObject());
      e.add("host", num(p.host));
      e.add("localRank", num(p.localRank));
      e.add("numa", num(p.numa));
      e.add("gpu", num(p.gpu));
      e.add("nic", num(p.nic));
    }
  }
  return json::write(v);
}

Topology Topology::fromJson(const std::string& text, const std::string& origin) {
  const Value v = json::parse(text, origin);
  if (v.type != Type::kObject)
    throw InvalidArgument(origin + ": expected a JSON object with \"hosts\" at the top, found " +
                          json::typeName(v.type));
  ObjectReader top(v, "", origin, {"version", "comment", "hosts", "ranks"});
  const int version = top.integer("version", 0, kFormatVersion);
  if (version != kFormatVersion)
    top.fail("version", strprintf("%d, but this Strata reads version %d", version, kFormatVersion));
  Topology t;
  const auto& hosts = top.array("hosts");
  if (hosts.empty()) top.fail("hosts", "empty; a topology needs at least one host");
  for (size_t i = 0; i < hosts.size(); ++i) {
    t.hosts.push_back(readHost(hosts[i], indexed("hosts", i), origin));
    for (size_t j = 0; j < i; ++j)
      if (t.hosts[j].hostId == t.hosts[i].hostId)
        top.fail(indexed("hosts", i) + ".hostId",
                 strprintf("\"%s\" is also hosts[%zu]'s id; host ids are unique", t.hosts[i].hostId.c_str(), j));
  }
  if (top.has("ranks")) t.ranks = readRanks(top, t.hosts, origin);
  return t;
}

}  // namespace strata
