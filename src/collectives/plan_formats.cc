// The file formats of plan_program.h: MSCCL's XML (read with pugixml) and Strata's plan file (JSON).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <pugixml.hpp>

#include "collectives/plan_program.h"
#include "topology/json.h"
#include "topology/json_reader.h"
#include "util/error.h"

namespace strata {

namespace {

// ---- MSCCL's XML ----------------------------------------------------------------------------------------------

struct MscclStepType {
  const char* name;
  OpKind kind;
};
// MSCCL's step types (msccl-tools' Instruction, MSCCL's runtime parser) and the IR's primitive for each.
constexpr MscclStepType kMscclTypes[] = {
    {"s", OpKind::kSend},           {"r", OpKind::kRecv},
    {"rrc", OpKind::kRecvReduce},   {"rrs", OpKind::kRecvReduceSend},
    {"rcs", OpKind::kRecvCopySend}, {"rrcs", OpKind::kRecvReduceCopySend},
    {"cpy", OpKind::kCopy},         {"re", OpKind::kReduceLocal},
    {"nop", OpKind::kNop},
};

class XmlReader {
 public:
  explicit XmlReader(std::string origin) : origin_(std::move(origin)) {}
  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw InvalidArgument(origin_ + ": " + (where.empty() ? "" : where + ": ") + what);
  }
  bool has(pugi::xml_node n, const char* name) const { return !n.attribute(name).empty(); }
  long long integer(pugi::xml_node n, const char* name, const std::string& where) const {
    pugi::xml_attribute a = n.attribute(name);
    if (a.empty()) fail(where, strprintf("missing attribute %s", name));
    const char* text = a.value();
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(text, &end, 10);
    if (end == text || *end != '\0' || errno == ERANGE)
      fail(where, strprintf("attribute %s=\"%s\" is not an integer", name, text));
    return v;
  }
  long long integer(pugi::xml_node n, const char* name, const std::string& where, long long def) const {
    return has(n, name) ? integer(n, name, where) : def;
  }
  int bounded(pugi::xml_node n, const char* name, const std::string& where, long long lo, long long hi) const {
    const long long v = integer(n, name, where);
    if (v < lo || v > hi) fail(where, strprintf("%s=%lld is not in %lld..%lld", name, v, lo, hi));
    return static_cast<int>(v);
  }
  std::string string(pugi::xml_node n, const char* name, const std::string& where) const {
    pugi::xml_attribute a = n.attribute(name);
    if (a.empty()) fail(where, strprintf("missing attribute %s", name));
    return a.value();
  }

 private:
  std::string origin_;
};

int mscclBuffer(const XmlReader& x, const std::string& letter, const std::string& where, const char* attr) {
  if (letter == "i" || letter == "input") return kBufSend;
  if (letter == "o" || letter == "output") return kBufRecv;
  if (letter == "s" || letter == "scratch") return kBufScratch;
  x.fail(where, strprintf("%s=\"%s\" is not a buffer (i, o or s)", attr, letter.c_str()));
}

CollKind mscclCollective(const XmlReader& x, const std::string& coll) {
  static const std::pair<const char*, CollKind> known[] = {
      {"allreduce", CollKind::kAllReduce},          {"allgather", CollKind::kAllGather},
      {"reduce_scatter", CollKind::kReduceScatter}, {"alltoall", CollKind::kAllToAll},
      {"broadcast", CollKind::kBroadcast},          {"reduce", CollKind::kReduce},
  };
  for (const auto& [name, kind] : known)
    if (coll == name) return kind;
  if (coll == "custom")
    x.fail("algo", "coll=\"custom\": a custom collective has no reference result to prove the file against");
  x.fail("algo", "coll=\"" + coll +
                     "\" is not a collective Strata runs (allreduce, allgather, reduce_scatter, alltoall, broadcast, "
                     "reduce)");
}

}  // namespace

std::shared_ptr<const PlanProgram> parseMscclXml(const std::string& text, const std::string& origin) {
  XmlReader x(origin);
  pugi::xml_document doc;
  const pugi::xml_parse_result parsed = doc.load_buffer(text.data(), text.size());
  if (!parsed) {
    const size_t at = std::min(static_cast<size_t>(std::max<ptrdiff_t>(parsed.offset, 0)), text.size());
    const size_t line =
        1 + static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<ptrdiff_t>(at), '\n'));
    x.fail(strprintf("line %zu", line), std::string("not well-formed XML: ") + parsed.description());
  }
  pugi::xml_node algo = doc.child("algo");
  if (!algo) x.fail("", "no <algo> element (an MSCCL algorithm file has one at its top)");
  auto p = std::make_shared<PlanProgram>();
  p->file = origin;
  p->format = "msccl";
  p->name = x.string(algo, "name", "algo");
  if (p->name.empty()) x.fail("algo", "name is empty");
  p->proto = algo.attribute("proto").value();
  if (!p->proto.empty() && p->proto != "Simple" && p->proto != "LL" && p->proto != "LL128")
    x.fail("algo", "proto=\"" + p->proto + "\" is not Simple, LL or LL128");
  p->kind = mscclCollective(x, x.string(algo, "coll", "algo"));
  p->nranks = x.bounded(algo, "ngpus", "algo", 1, 1 << 16);
  p->nchannels = x.bounded(algo, "nchannels", "algo", 0, kMaxPlanChannels);
  p->chunksPerLoop = x.bounded(algo, "nchunksperloop", "algo", 1, 1 << 20);
  // inplace="1": the schedule treats input and output as one buffer (MSCCL runs it for in-place calls only);
  // outofplace, where a file gives it, adds out-of-place calls.
  const int inplace = x.bounded(algo, "inplace", "algo", 0, 1);
  p->inPlace = inplace == 1;
  p->outOfPlace = x.integer(algo, "outofplace", "algo", inplace == 1 ? 0 : 1) != 0;
  const long long minBytes = x.integer(algo, "minBytes", "algo", 0);
  if (minBytes < 0) x.fail("algo", "minBytes is negative");
  p->minBytes = static_cast<uint64_t>(minBytes);
  if (x.has(algo, "maxBytes")) {
    const long long maxBytes = x.integer(algo, "maxBytes", "algo");
    if (maxBytes < 0) x.fail("algo", "maxBytes is negative");
    p->maxBytes = static_cast<uint64_t>(maxBytes);
  }
  p->ranks.resize(static_cast<size_t>(p->nranks));
  std::vector<bool> seen(static_cast<size_t>(p->nranks), false);
  for (pugi::xml_node gpu : algo.children()) {
    if (std::string(gpu.name()) != "gpu") continue;
    const int id = x.bounded(gpu, "id", "gpu", 0, p->nranks - 1);
    const std::string gw = strprintf("gpu %d", id);
    if (seen[static_cast<size_t>(id)]) x.fail(gw, "appears twice");
    seen[static_cast<size_t>(id)] = true;
    ProgramRank& rank = p->ranks[static_cast<size_t>(id)];
    rank.inputChunks = x.bounded(gpu, "i_chunks", gw, 0, 1 << 20);
    rank.outputChunks = x.bounded(gpu, "o_chunks", gw, 0, 1 << 20);
    rank.scratchChunks = x.bounded(gpu, "s_chunks", gw, 0, 1 << 24);
    // MSCCL's own consistency rule: the larger buffer holds nchunksperloop chunks.
    const int inMul = p->kind == CollKind::kAllGather ? p->nranks : 1;
    const int outMul = p->kind == CollKind::kReduceScatter ? p->nranks : 1;
    if ((rank.inputChunks > 0 && rank.inputChunks * inMul != p->chunksPerLoop) ||
        (rank.outputChunks > 0 && rank.outputChunks * outMul != p->chunksPerLoop))
      x.fail(gw, strprintf("i_chunks/o_chunks (%d/%d) disagree with nchunksperloop %d for %s", rank.inputChunks,
                           rank.outputChunks, p->chunksPerLoop, collName(p->kind)));
    std::map<int, size_t> laneOf;  // tb id -> lane index
    for (pugi::xml_node tb : gpu.children()) {
      if (std::string(tb.name()) != "tb") continue;
      const int tbId = x.bounded(tb, "id", gw + " tb", 0, 1 << 16);
      const std::string tw = strprintf("gpu %d tb %d", id, tbId);
      if (!laneOf.emplace(tbId, rank.lanes.size()).second) x.fail(tw, "duplicate tb id");
      ProgramLane& lane = rank.lanes.emplace_back();
      lane.id = tbId;
      lane.sendPeer = x.bounded(tb, "send", tw, -1, p->nranks - 1);
      lane.recvPeer = x.bounded(tb, "recv", tw, -1, p->nranks - 1);
      if (lane.sendPeer == id || lane.recvPeer == id) x.fail(tw, "send or recv peer is the gpu itself");
      lane.channel = x.bounded(tb, "chan", tw, 0, kMaxPlanChannels - 1);
      for (pugi::xml_node st : tb.children()) {
        const std::string tag = st.name();
        if (tag == "op")
          x.fail(tw,
                 "<op> elements (msccl-tools' newer format, which drops the second buffer of a copy or a "
                 "reduce) are not read: write the file in the format MSCCL's runtime reads (<step ...>)");
        if (tag != "step") continue;
        const int s = x.bounded(st, "s", tw + " step", 0, 1 << 20);
        const std::string sw = strprintf("%s step %d", tw.c_str(), s);
        if (s != static_cast<int>(lane.steps.size()))
          x.fail(sw, strprintf("steps must be numbered 0, 1, ... in order; expected s=\"%zu\"", lane.steps.size()));
        ProgramStep& step = lane.steps.emplace_back();
        const std::string type = x.string(st, "type", sw);
        bool known = false;
        for (const MscclStepType& t : kMscclTypes)
          if (type == t.name) {
            step.kind = t.kind;
            known = true;
          }
        if (!known)
          x.fail(sw, "unknown type \"" + type + "\" (known: s, r, rrc, rrs, rcs, rrcs, cpy, re, nop)" +
                         (type == "ra" ? "; \"ra\" (residual add) is not a collective's step" : ""));
        step.sendPeer = lane.sendPeer;
        step.recvPeer = lane.recvPeer;
        step.channel = lane.channel;
        const int cnt = x.bounded(st, "cnt", sw, 0, 1 << 20);
        auto region = [&](const char* bufAttr, const char* offAttr) {
          ChunkRegion r;
          r.buf = mscclBuffer(x, x.string(st, bufAttr, sw), sw, bufAttr);
          const long long off = x.integer(st, offAttr, sw);
          if (off < -1 || off > (1 << 24)) x.fail(sw, strprintf("%s=%lld is out of range", offAttr, off));
          r.offset = static_cast<int>(off);
          r.count = cnt;
          return r;
        };
        if (usesSrc(step.kind)) step.src = region("srcbuf", "srcoff");
        if (usesDst(step.kind)) step.dst = region("dstbuf", "dstoff");
        const int depid = x.bounded(st, "depid", sw, -1, 1 << 16);
        const int deps = x.bounded(st, "deps", sw, -1, 1 << 20);
        if (depid >= 0) {
          step.afterLane = depid;  // a tb id until every tb is read (below)
          step.afterStep = deps;
          if (deps < 0) x.fail(sw, strprintf("depid=%d with deps=%d", depid, deps));
        }
        step.hasDep = x.integer(st, "hasdep", sw, 0) != 0;
      }
    }
    for (ProgramLane& lane : rank.lanes) {
      for (size_t t = 0; t < lane.steps.size(); ++t) {
        ProgramStep& step = lane.steps[t];
        if (step.afterLane < 0) continue;
        auto it = laneOf.find(step.afterLane);
        if (it == laneOf.end())
          x.fail(strprintf("gpu %d tb %d step %zu", id, lane.id, t),
                 strprintf("depends on tb %d, which gpu %d does not have", step.afterLane, id));
        step.afterLane = static_cast<int>(it->second);
      }
    }
  }
  for (int r = 0; r < p->nranks; ++r)
    if (!seen[static_cast<size_t>(r)]) x.fail("", strprintf("ngpus is %d but gpu %d is missing", p->nranks, r));
  checkProgram(*p);
  return p;
}

// ---- Strata's plan file --------------------------------------------------------------------------------------
//
// {"format": "strata-plan", "version": 1, "name": "ring", "collective": "allreduce", "nranks": 4, "chunks": 4,
//  "inplace": true, "outofplace": true, "minBytes": 0, "maxBytes": 1048576,
//  "ranks": [{"scratch": 0, "lanes": [{"ops": [
//     {"op": "send", "to": 1, "src": ["i", 0, 1]},
//     {"op": "recvReduceSend", "from": 3, "to": 1, "channel": 1, "src": ["i", 3, 1], "after": [1, 0]}, ...]}]}]}
//
// "chunks" is MSCCL's nchunksperloop; regions are [buffer, first chunk, chunks] with the buffers i, o and s; "after"
// is [lane, step] of the rank's lane and step the op waits for; op names are the IR's (plan.h, opKindName).

namespace {

constexpr const char* kBufLetters[] = {"i", "o", "s"};

}  // namespace

std::shared_ptr<const PlanProgram> parseStrataPlan(const std::string& text, const std::string& origin) {
  const json::Value root = json::parse(text, origin);
  json::ObjectReader top(root, "", origin,
                         {"format", "version", "name", "collective", "nranks", "chunks", "inplace", "outofplace",
                          "minBytes", "maxBytes", "proto", "ranks"});
  if (top.string("format") != "strata-plan") top.fail("format", "expected \"strata-plan\"");
  if (top.integer("version", 1) != 1) top.fail("version", "this Strata reads version 1");
  auto p = std::make_shared<PlanProgram>();
  p->file = origin;
  p->format = "strata-plan";
  p->name = top.string("name");
  if (p->name.empty()) top.fail("name", "is empty");
  p->proto = top.string("proto", "");
  const std::string coll = top.string("collective");
  bool found = false;
  for (int k = 0; k < kNumCollKinds; ++k)
    if (coll == collName(static_cast<CollKind>(k))) {
      p->kind = static_cast<CollKind>(k);
      found = true;
    }
  if (!found || p->kind == CollKind::kSend || p->kind == CollKind::kRecv || p->kind == CollKind::kBarrier)
    top.fail("collective", "\"" + coll + "\" is not a collective a plan file can describe");
  p->nranks = top.integer("nranks", 1);
  p->chunksPerLoop = top.integer("chunks", 1);
  p->inPlace = top.boolean("inplace", true);
  p->outOfPlace = top.boolean("outofplace", true);
  p->minBytes = static_cast<uint64_t>(top.number("minBytes", 0));
  if (top.has("maxBytes")) p->maxBytes = static_cast<uint64_t>(top.number("maxBytes"));
  const auto& ranks = top.array("ranks");
  if (static_cast<int>(ranks.size()) != p->nranks)
    top.fail("ranks", strprintf("%zu entries for %d ranks", ranks.size(), p->nranks));
  for (size_t r = 0; r < ranks.size(); ++r) {
    json::ObjectReader rank(ranks[r], strprintf("ranks[%zu]", r), origin, {"scratch", "lanes"});
    ProgramRank& pr = p->ranks.emplace_back();
    pr.scratchChunks = rank.integer("scratch", 0, 0);
    const auto& lanes = rank.array("lanes");
    for (size_t l = 0; l < lanes.size(); ++l) {
      json::ObjectReader lane(lanes[l], rank.at(strprintf("lanes[%zu]", l)), origin, {"ops"});
      ProgramLane& pl = pr.lanes.emplace_back();
      pl.id = static_cast<int>(l);
      const auto& ops = lane.array("ops");
      for (size_t t = 0; t < ops.size(); ++t) {
        json::ObjectReader op(ops[t], lane.at(strprintf("ops[%zu]", t)), origin,
                              {"op", "to", "from", "channel", "src", "dst", "after"});
        ProgramStep& s = pl.steps.emplace_back();
        const std::string name = op.string("op");
        bool known = false;
        for (int k = 0; k <= static_cast<int>(OpKind::kNop); ++k)
          if (name == opKindName(static_cast<OpKind>(k))) {
            s.kind = static_cast<OpKind>(k);
            known = true;
          }
        if (!known) op.fail(op.at("op"), "unknown op \"" + name + "\"");
        Op probe;
        probe.kind = s.kind;
        s.sendPeer = op.integer("to", -1, -1);
        s.recvPeer = op.integer("from", -1, -1);
        if (probe.sends() != (s.sendPeer >= 0)) op.fail(op.at("to"), probe.sends() ? "missing" : "not used by " + name);
        if (probe.receives() != (s.recvPeer >= 0))
          op.fail(op.at("from"), probe.receives() ? "missing" : "not used by " + name);
        s.channel = op.integer("channel", 0, 0);
        auto region = [&](const char* key) {
          const auto& a = op.array(key);
          if (a.size() != 3 || a[0].type != json::Type::kString)
            op.fail(op.at(key), "expected [buffer, first chunk, chunks] with buffer \"i\", \"o\" or \"s\"");
          ChunkRegion c;
          c.buf = -1;
          for (int b = 0; b < 3; ++b)
            if (a[0].string == kBufLetters[b]) c.buf = b;
          if (c.buf < 0) op.fail(op.at(key), "buffer \"" + a[0].string + "\" is not i, o or s");
          c.offset = op.toInt(a[1], op.at(key), 0);
          c.count = op.toInt(a[2], op.at(key), 1);
          return c;
        };
        if (usesSrc(s.kind)) s.src = region("src");
        else if (op.has("src")) op.fail(op.at("src"), "not used by " + name);
        if (usesDst(s.kind)) s.dst = region("dst");
        else if (op.has("dst")) op.fail(op.at("dst"), "not used by " + name);
        if (op.has("after")) {
          const auto& a = op.array("after");
          if (a.size() != 2) op.fail(op.at("after"), "expected [lane, step]");
          s.afterLane = op.toInt(a[0], op.at("after"), 0);
          s.afterStep = op.toInt(a[1], op.at("after"), 0);
        }
      }
    }
  }
  checkProgram(*p);
  return p;
}

std::string writeStrataPlan(const PlanProgram& p) {
  using json::Value;
  Value root = Value::makeObject();
  root.add("format", Value::makeString("strata-plan"));
  root.add("version", Value::makeNumber(1));
  root.add("name", Value::makeString(p.name));
  root.add("collective", Value::makeString(collName(p.kind)));
  root.add("nranks", Value::makeNumber(p.nranks));
  root.add("chunks", Value::makeNumber(p.chunksPerLoop));
  root.add("inplace", Value::makeBool(p.inPlace));
  root.add("outofplace", Value::makeBool(p.outOfPlace));
  if (p.minBytes) root.add("minBytes", Value::makeNumber(static_cast<double>(p.minBytes)));
  if (p.maxBytes != UINT64_MAX) root.add("maxBytes", Value::makeNumber(static_cast<double>(p.maxBytes)));
  Value& ranks = root.add("ranks", Value::makeArray());
  for (const ProgramRank& r : p.ranks) {
    Value& rank = ranks.push(Value::makeObject());
    if (r.scratchChunks) rank.add("scratch", Value::makeNumber(r.scratchChunks));
    Value& lanes = rank.add("lanes", Value::makeArray());
    for (const ProgramLane& l : r.lanes) {
      Value& lane = lanes.push(Value::makeObject());
      Value& ops = lane.add("ops", Value::makeArray());
      for (const ProgramStep& s : l.steps) {
        Value& op = ops.push(Value::makeObject());
        op.add("op", Value::makeString(opKindName(s.kind)));
        Op probe;
        probe.kind = s.kind;
        if (probe.receives()) op.add("from", Value::makeNumber(s.recvPeer));
        if (probe.sends()) op.add("to", Value::makeNumber(s.sendPeer));
        if (s.channel) op.add("channel", Value::makeNumber(s.channel));
        auto region = [](const ChunkRegion& c) {
          Value a = Value::makeArray();
          a.push(Value::makeString(kBufLetters[c.buf]));
          a.push(Value::makeNumber(c.offset));
          a.push(Value::makeNumber(c.count));
          return a;
        };
        if (usesSrc(s.kind)) op.add("src", region(s.src));
        if (usesDst(s.kind)) op.add("dst", region(s.dst));
        if (s.afterLane >= 0) {
          Value a = Value::makeArray();
          a.push(Value::makeNumber(s.afterLane));
          a.push(Value::makeNumber(s.afterStep));
          op.add("after", std::move(a));
        }
      }
    }
  }
  return json::write(root) + "\n";
}

}  // namespace strata
