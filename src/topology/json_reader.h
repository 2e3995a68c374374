// Reading a JSON object field by field, for the file formats Strata reads (topology files, strata-sim's cluster
// files): typed getters that name the field by its path in every error ("hosts[1].nics[0].gbps: expected a
// number"), and a check that the object has no field the format does not know, so a misspelt optional field
// fails instead of being ignored.
#pragma once

#include <cmath>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "topology/json.h"
#include "util/error.h"

namespace strata::json {

// One JSON object being read at `path`: typed getters that name the field in every error, and a check
// that the object holds no field it does not know (a misspelt optional field would otherwise be ignored).
class ObjectReader {
 public:
  ObjectReader(const Value& v, std::string path, const std::string& origin, std::initializer_list<const char*> known)
      : v_(v), path_(std::move(path)), origin_(origin) {
    if (v.type != Type::kObject) fail(path_, std::string("expected an object, found ") + json::typeName(v.type));
    for (const auto& [key, member] : v.object) {
      bool ok = false;
      for (const char* k : known) ok |= key == k;
      if (!ok) {
        std::string list;
        for (const char* k : known) list += std::string(list.empty() ? "" : ", ") + k;
        fail(at(key), "unknown field (known: " + list + ")");
      }
    }
  }

  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw InvalidArgument(origin_ + ": " + (where.empty() ? "" : where + ": ") + what);
  }
  std::string at(const char* key) const { return path_.empty() ? std::string(key) : path_ + "." + key; }
  std::string at(const std::string& key) const { return at(key.c_str()); }
  const std::string& path() const { return path_; }

  bool has(const char* key) const { return v_.find(key) != nullptr; }

  const Value& get(const char* key, Type type) const {
    const Value* m = v_.find(key);
    if (!m) fail(at(key), std::string("missing; expected ") + json::typeName(type));
    if (m->type != type)
      fail(at(key), std::string("expected ") + json::typeName(type) + ", found " + json::typeName(m->type));
    return *m;
  }

  double number(const char* key) const {
    const double d = get(key, Type::kNumber).number;
    if (d < 0) fail(at(key), strprintf("%g is negative", d));
    return d;
  }
  double number(const char* key, double def) const { return has(key) ? number(key) : def; }

  // An integer >= lo (most fields: -1 for unknown, or 0).
  int integer(const char* key, int lo) const { return toInt(get(key, Type::kNumber), at(key), lo); }
  int integer(const char* key, int lo, int def) const { return has(key) ? integer(key, lo) : def; }

  std::string string(const char* key) const { return get(key, Type::kString).string; }
  std::string string(const char* key, const std::string& def) const { return has(key) ? string(key) : def; }

  bool boolean(const char* key, bool def) const { return has(key) ? get(key, Type::kBool).boolean : def; }

  const std::vector<Value>& array(const char* key) const { return get(key, Type::kArray).array; }
  const std::vector<Value>& array(const char* key, const std::vector<Value>& def) const {
    return has(key) ? array(key) : def;
  }

  int toInt(const Value& v, const std::string& where, int lo) const {
    if (v.type != Type::kNumber) fail(where, std::string("expected an integer, found ") + json::typeName(v.type));
    const double d = v.number;
    if (d != std::floor(d) || d > std::numeric_limits<int>::max()) fail(where, strprintf("%g is not an integer", d));
    if (d < lo) fail(where, strprintf("%g is less than %d", d, lo));
    return static_cast<int>(d);
  }

 private:
  const Value& v_;
  std::string path_;
  const std::string& origin_;
};

}  // namespace strata::json
