// A small JSON reader and writer, enough of RFC 8259 for topology files: files strata-topo writes and files
// people edit by hand. Written here rather than taken as a dependency because the library needs only this.
// The reader reports the line and column of the first problem; the writer prints numbers in their
// shortest form that reads back to the same double, so write(parse(write(v))) == write(v).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace strata::json {

enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
/// "null", "a boolean", "a number", "a string", "an array", "an object": for error messages.
const char* typeName(Type t);

struct Value {
  Type type = Type::kNull;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<Value> array;
  std::vector<std::pair<std::string, Value>> object;  // members in file order; keys are unique

  Value() = default;
  static Value makeBool(bool b);
  static Value makeNumber(double d);
  static Value makeString(std::string s);
  static Value makeArray();
  static Value makeObject();

  /// The member named `key` of an object, or nullptr (also when this is not an object).
  const Value* find(const std::string& key) const;
  /// Appends a member to an object (the caller keeps keys unique).
  Value& add(std::string key, Value v);
  /// Appends an element to an array.
  Value& push(Value v);
};

/// Parses `text`; throws InvalidArgument "<origin>: line L, column C: <what is wrong>".
Value parse(const std::string& text, const std::string& origin);

/// Writes `v` indented by two spaces per level. Arrays of scalars, and objects of scalars (or arrays of
/// scalars) that fit in a short line, stay on one line, so long lists of CPUs or ranks stay readable.
/// Non-finite numbers, which JSON cannot hold, are written as null.
std::string write(const Value& v);

}  // namespace strata::json
