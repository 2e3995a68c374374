// strata-sim's cluster files (clusters/*.json): reading them field by field, naming the wrong field in every
// error, writing them back, and the cluster a communicator's tuning inputs describe (STRATA_TUNE=sim).
#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "collectives/sim.h"
#include "topology/json.h"
#include "topology/json_reader.h"
#include "util/error.h"

namespace strata {
namespace {

using json::ObjectReader;
using json::Type;
using json::Value;

// A rate or a latency: a number >= 0 (rates > 0 where `positive`).
double figure(const ObjectReader& r, const char* key, double def, bool positive) {
  if (!r.has(key)) {
    if (def < 0) r.fail(r.at(key), "missing; expected a number");
    return def;
  }
  const double d = r.number(key);
  if (positive && !(d > 0)) r.fail(r.at(key), strprintf("%g must be greater than 0", d));
  return d;
}

double efficiency(const ObjectReader& r, const char* key) {
  const double e = r.number(key, 1.0);
  if (!(e > 0) || e > 1) r.fail(r.at(key), strprintf("%g is not a share in (0, 1]", e));
  return e;
}

std::vector<std::string> notes(const ObjectReader& r) {
  std::vector<std::string> out;
  static const std::vector<Value> none;
  const std::vector<Value>& list = r.array("notes", none);
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i].type != Type::kString)
      r.fail(r.at("notes") + "[" + std::to_string(i) + "]",
             std::string("expected a string, found ") + json::typeName(list[i].type));
    out.push_back(list[i].string);
  }
  return out;
}

}  // namespace

const char* intraKindName(SimCluster::Intra kind) {
  switch (kind) {
    case SimCluster::Intra::kSwitch: return "switch";
    case SimCluster::Intra::kShm: return "shm";
    case SimCluster::Intra::kPairwise: return "pairwise";
  }
  return "?";
}

size_t SimCluster::messageBytes() const {
  return pieceBytes * static_cast<size_t>(executor == Executor::kDevice ? std::max(1, channels) : 1);
}

double SimCluster::memoryGBpsAt(double bytes) const {
  if (memoryCurve.empty()) return memoryGBps;
  if (bytes <= memoryCurve.front().first) return memoryCurve.front().second;
  for (size_t i = 1; i < memoryCurve.size(); ++i) {
    const auto& [x1, y1] = memoryCurve[i];
    if (bytes <= x1) {
      const auto& [x0, y0] = memoryCurve[i - 1];
      const double f = std::log(bytes / x0) / std::log(x1 / x0);
      return std::exp(std::log(y0) + f * (std::log(y1) - std::log(y0)));
    }
  }
  // Beyond the curve: toward memoryGBps, reached at 4x the last point.
  const auto& [x0, y0] = memoryCurve.back();
  const double f = std::min(1.0, std::log(bytes / x0) / std::log(4.0));
  return std::exp(std::log(y0) + f * (std::log(memoryGBps) - std::log(y0)));
}

size_t SimCluster::chunkBytes() const {
  return std::max(messageBytes(), messageBytes() * static_cast<size_t>(nslots) / 2);
}

SimCluster clusterFromJson(const std::string& text, const std::string& origin) {
  const Value root = json::parse(text, origin);
  const ObjectReader top(root, "", origin, {"name", "notes", "hosts", "maxHosts", "host", "fabric", "executor"});
  SimCluster c;
  c.name = top.string("name");
  c.notes = notes(top);
  c.hosts = top.integer("hosts", 1, 1);
  c.maxHosts = top.integer("maxHosts", 0, 0);
  if (c.maxHosts > 0 && c.hosts > c.maxHosts)
    top.fail("hosts", strprintf("%d is more than maxHosts (%d)", c.hosts, c.maxHosts));

  const ObjectReader host(top.get("host", Type::kObject), "host", origin, {"ranks", "cores", "intra", "nics", "notes"});
  c.ranksPerHost = host.integer("ranks", 1);
  c.cores = host.integer("cores", 0, 0);
  {
    const ObjectReader intra(
        host.get("intra", Type::kObject), "host.intra", origin,
        {"kind", "bandwidthGBps", "latencyUs", "efficiency", "memoryGBps", "memoryCurve", "slotMemoryShare", "notes"});
    const std::string kind = intra.string("kind");
    bool known = false;
    std::string kinds;
    for (SimCluster::Intra k : {SimCluster::Intra::kSwitch, SimCluster::Intra::kShm, SimCluster::Intra::kPairwise}) {
      if (kind == intraKindName(k)) {
        c.intra = k;
        known = true;
      }
      kinds += std::string(kinds.empty() ? "" : ", ") + intraKindName(k);
    }
    if (!known) intra.fail(intra.at("kind"), "'" + kind + "' is not one of " + kinds);
    c.intraGBps = figure(intra, "bandwidthGBps", -1, true);
    c.intraLatencyUs = figure(intra, "latencyUs", -1, false);
    c.intraEfficiency = efficiency(intra, "efficiency");
    c.memoryGBps = figure(intra, "memoryGBps", 0, false);
    static const std::vector<Value> none;
    const std::vector<Value>& curve = intra.array("memoryCurve", none);
    for (size_t i = 0; i < curve.size(); ++i) {
      const std::string at = intra.at("memoryCurve") + "[" + std::to_string(i) + "]";
      const Value& point = curve[i];
      if (point.type != Type::kArray || point.array.size() != 2 || point.array[0].type != Type::kNumber ||
          point.array[1].type != Type::kNumber)
        intra.fail(at, "expected [working-set bytes, GB/s]");
      const double bytes = point.array[0].number, gbps = point.array[1].number;
      if (!(bytes > 0) || !(gbps > 0)) intra.fail(at, "bytes and GB/s must be greater than 0");
      if (!c.memoryCurve.empty() && bytes <= c.memoryCurve.back().first) intra.fail(at, "working sets must ascend");
      c.memoryCurve.emplace_back(bytes, gbps);
    }
    c.slotMemoryShare = intra.number("slotMemoryShare", 0.5);
    if (c.slotMemoryShare > 1)
      intra.fail(intra.at("slotMemoryShare"), strprintf("%g is not a share in [0, 1]", c.slotMemoryShare));
    if (!c.memoryCurve.empty() && !(c.memoryGBps > 0))
      intra.fail(intra.at("memoryGBps"), "missing; memoryCurve needs the rate beyond its last point");
  }
  if (host.has("nics")) {
    const ObjectReader nics(host.get("nics", Type::kObject), "host.nics", origin,
                            {"count", "gbps", "latencyUs", "efficiency", "notes"});
    c.nics = nics.integer("count", 1);
    c.nicGBps = figure(nics, "gbps", -1, true) / 8;
    c.netLatencyUs = figure(nics, "latencyUs", -1, false);
    c.netEfficiency = efficiency(nics, "efficiency");
  } else if (c.hosts > 1 || c.maxHosts != 1) {
    host.fail(host.at("nics"), "missing; a cluster of several hosts needs its NICs (count, gbps, latencyUs)");
  }

  if (top.has("fabric")) {
    const ObjectReader fabric(top.get("fabric", Type::kObject), "fabric", origin,
                              {"kind", "hostsPerLeaf", "oversubscription", "switchLatencyUs", "notes"});
    const std::string kind = fabric.string("kind");
    if (kind == "rail") {
      c.fabric = SimCluster::Fabric::kRail;
    } else if (kind == "fattree") {
      c.fabric = SimCluster::Fabric::kFatTree;
    } else {
      fabric.fail(fabric.at("kind"), "'" + kind + "' is not one of rail, fattree");
    }
    c.hostsPerLeaf = fabric.integer("hostsPerLeaf", 0, 0);
    c.oversubscription = fabric.number("oversubscription", 1.0);
    if (c.oversubscription < 1)
      fabric.fail(fabric.at("oversubscription"), strprintf("%g is less than 1 (1: non-blocking)", c.oversubscription));
    c.switchLatencyUs = fabric.number("switchLatencyUs", 0.0);
  }

  const ObjectReader ex(
      top.get("executor", Type::kObject), "executor", origin,
      {"kind", "pieceBytes", "slots", "channels", "channelGBps", "messageUs", "reduceGBps", "copyGBps", "notes"});
  const std::string kind = ex.string("kind");
  if (kind == "host") {
    c.executor = SimCluster::Executor::kHost;
  } else if (kind == "device") {
    c.executor = SimCluster::Executor::kDevice;
  } else {
    ex.fail(ex.at("kind"), "'" + kind + "' is not one of host, device");
  }
  c.pieceBytes = static_cast<size_t>(ex.integer("pieceBytes", 256, static_cast<int>(c.pieceBytes)));
  c.nslots = ex.integer("slots", 2, c.nslots);
  c.channels = ex.integer("channels", 1, 1);
  if (c.channels > 32) ex.fail(ex.at("channels"), strprintf("%d is more than 32 (STRATA_GPU_CHANNELS)", c.channels));
  c.channelGBps = figure(ex, "channelGBps", 0, false);
  c.messageUs = figure(ex, "messageUs", -1, false);
  c.reduceGBps = figure(ex, "reduceGBps", -1, true);
  c.copyGBps = figure(ex, "copyGBps", -1, true);
  return c;
}

SimCluster loadCluster(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InvalidArgument("cluster file " + path + ": cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  return clusterFromJson(text.str(), "cluster file " + path);
}

std::string clusterToJson(const SimCluster& c) {
  auto num = [](double d) { return Value::makeNumber(d); };
  auto str = [](const std::string& s) { return Value::makeString(s); };
  Value v = Value::makeObject();
  v.add("name", str(c.name));
  if (!c.notes.empty()) {
    Value& n = v.add("notes", Value::makeArray());
    for (const std::string& s : c.notes) n.push(str(s));
  }
  v.add("hosts", num(c.hosts));
  if (c.maxHosts > 0) v.add("maxHosts", num(c.maxHosts));
  Value& host = v.add("host", Value::makeObject());
  host.add("ranks", num(c.ranksPerHost));
  if (c.cores > 0) host.add("cores", num(c.cores));
  Value& intra = host.add("intra", Value::makeObject());
  intra.add("kind", str(intraKindName(c.intra)));
  intra.add("bandwidthGBps", num(c.intraGBps));
  intra.add("latencyUs", num(c.intraLatencyUs));
  intra.add("efficiency", num(c.intraEfficiency));
  if (c.memoryGBps > 0) intra.add("memoryGBps", num(c.memoryGBps));
  if (c.intra == SimCluster::Intra::kShm) intra.add("slotMemoryShare", num(c.slotMemoryShare));
  if (!c.memoryCurve.empty()) {
    Value& curve = intra.add("memoryCurve", Value::makeArray());
    for (const auto& [bytes, gbps] : c.memoryCurve) {
      Value& point = curve.push(Value::makeArray());
      point.push(num(bytes));
      point.push(num(gbps));
    }
  }
  Value& nics = host.add("nics", Value::makeObject());
  nics.add("count", num(c.nics));
  nics.add("gbps", num(c.nicGBps * 8));
  nics.add("latencyUs", num(c.netLatencyUs));
  nics.add("efficiency", num(c.netEfficiency));
  Value& fabric = v.add("fabric", Value::makeObject());
  fabric.add("kind", str(c.fabric == SimCluster::Fabric::kRail ? "rail" : "fattree"));
  fabric.add("hostsPerLeaf", num(c.hostsPerLeaf));
  fabric.add("oversubscription", num(c.oversubscription));
  fabric.add("switchLatencyUs", num(c.switchLatencyUs));
  Value& ex = v.add("executor", Value::makeObject());
  ex.add("kind", str(c.executor == SimCluster::Executor::kHost ? "host" : "device"));
  ex.add("pieceBytes", num(static_cast<double>(c.pieceBytes)));
  ex.add("slots", num(c.nslots));
  ex.add("channels", num(c.channels));
  ex.add("channelGBps", num(c.channelGBps));
  ex.add("messageUs", num(c.messageUs));
  ex.add("reduceGBps", num(c.reduceGBps));
  ex.add("copyGBps", num(c.copyGBps));
  return json::write(v);
}

SimCluster clusterFromTuning(const TuningInputs& in, size_t pieceBytes, int nslots) {
  SimCluster c;
  c.name = "communicator";
  int hosts = 1;
  for (int h : in.hostOf) hosts = std::max(hosts, h + 1);
  c.hosts = hosts;
  c.ranksPerHost = std::max(1, in.nranks / hosts);
  c.intra = SimCluster::Intra::kSwitch;
  c.intraGBps = in.intra.bandwidthGBps;
  c.intraLatencyUs = in.intra.latencyUs;
  c.nics = std::max(1, in.nicsPerHost);
  c.nicGBps = in.inter.bandwidthGBps;
  c.netLatencyUs = in.inter.latencyUs;
  c.fabric = SimCluster::Fabric::kFatTree;
  c.executor = in.lanes > 0 ? SimCluster::Executor::kDevice : SimCluster::Executor::kHost;
  c.channels = std::max(1, in.lanes);
  c.channelGBps = in.laneGBps;
  c.pieceBytes = pieceBytes;
  c.nslots = nslots;
  c.messageUs = in.messageUs;
  c.reduceGBps = in.reduceGBps;
  c.copyGBps = in.copyGBps;
  return c;
}

}  // namespace strata
