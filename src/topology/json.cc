#include "topology/json.h"

#include <charconv>
#include <cmath>
#include <cstdint>

#include "util/error.h"
#include "util/json_escape.h"

namespace strata::json {
namespace {

// Nesting deeper than this is refused rather than recursed into: a hostile or corrupt file must not be
// able to overflow the stack. Topology files nest four levels.
constexpr int kMaxDepth = 64;
// Objects of scalars shorter than this are written on one line.
constexpr size_t kInlineWidth = 150;

class Parser {
 public:
  Parser(const std::string& text, const std::string& origin) : s_(text), origin_(origin) {}

  Value document() {
    skipSpace();
    if (pos_ == s_.size()) fail("empty document; expected a JSON value");
    Value v = value(0);
    skipSpace();
    if (pos_ != s_.size()) fail("unexpected text after the JSON value");
    return v;
  }

 private:
  const std::string& s_;
  const std::string& origin_;
  size_t pos_ = 0;

  [[noreturn]] void fail(const std::string& what) const { failAt(pos_, what); }
  [[noreturn]] void failAt(size_t at, const std::string& what) const {
    int line = 1, column = 1;
    for (size_t i = 0; i < at && i < s_.size(); ++i) {
      if (s_[i] == '\n') ++line, column = 1;
      else ++column;
    }
    throw InvalidArgument(strprintf("%s: line %d, column %d: %s", origin_.c_str(), line, column, what.c_str()));
  }
  // What the parser is looking at, for messages: "'x'" or "the end of the text".
  std::string here() const {
    if (pos_ >= s_.size()) return "the end of the text (truncated?)";
    const unsigned char c = static_cast<unsigned char>(s_[pos_]);
    if (c < 0x20 || c >= 0x7f) return strprintf("byte 0x%02x", c);
    return strprintf("'%c'", c);
  }

  void skipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool consume(char c) {
    skipSpace();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c, const char* context) {
    if (!consume(c)) fail(strprintf("expected '%c' %s, found %s", c, context, here().c_str()));
  }
  bool literal(const char* word) {
    size_t n = std::char_traits<char>::length(word);
    if (s_.compare(pos_, n, word) != 0) return false;
    pos_ += n;
    return true;
  }

  Value value(int depth) {
    if (depth > kMaxDepth) fail(strprintf("nesting deeper than %d levels", kMaxDepth));
    skipSpace();
    if (pos_ >= s_.size()) fail("expected a value, found the end of the text (truncated?)");
    const char c = s_[pos_];
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') return Value::makeString(string());
    if (c == '-' || (c >= '0' && c <= '9')) return Value::makeNumber(number());
    if (literal("true")) return Value::makeBool(true);
    if (literal("false")) return Value::makeBool(false);
    if (literal("null")) return Value();
    for (const char* word : {"true", "false", "null"})
      if (s_.size() - pos_ < std::char_traits<char>::length(word) &&
          s_.compare(pos_, std::string::npos, word, s_.size() - pos_) == 0)
        fail(std::string("expected ") + word + ", found the end of the text (truncated?)");
    fail("expected a value, found " + here());
  }

  Value object(int depth) {
    Value v = Value::makeObject();
    ++pos_;  // '{'
    if (consume('}')) return v;
    for (;;) {
      skipSpace();
      if (pos_ >= s_.size() || s_[pos_] != '"') fail("expected a member name in double quotes, found " + here());
      const size_t keyAt = pos_;
      std::string key = string();
      if (v.find(key)) failAt(keyAt, "duplicate member \"" + key + "\"");
      expect(':', "after a member name");
      v.add(std::move(key), value(depth + 1));
      if (consume('}')) return v;
      expect(',', "or '}' in an object");
    }
  }

  Value array(int depth) {
    Value v = Value::makeArray();
    ++pos_;  // '['
    if (consume(']')) return v;
    for (;;) {
      v.push(value(depth + 1));
      if (consume(']')) return v;
      expect(',', "or ']' in an array");
    }
  }

  double number() {
    // Checks the JSON grammar first (from_chars alone would accept "1." or "01"), then converts.
    const size_t start = pos_;
    auto digits = [&] {
      size_t n = 0;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_, ++n;
      return n;
    };
    if (s_[pos_] == '-') ++pos_;
    if (pos_ < s_.size() && s_[pos_] == '0') {
      ++pos_;
    } else if (digits() == 0) {
      fail("expected a digit in a number, found " + here());
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (digits() == 0) fail("expected a digit after the decimal point, found " + here());
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (digits() == 0) fail("expected a digit in the exponent, found " + here());
    }
    double d = 0;
    auto [end, ec] = std::from_chars(s_.data() + start, s_.data() + pos_, d);
    if (ec != std::errc() || end != s_.data() + pos_ || !std::isfinite(d))
      failAt(start, "number " + s_.substr(start, pos_ - start) + " is out of range");
    return d;
  }

  unsigned hex4() {
    if (pos_ + 4 > s_.size()) fail("truncated \\u escape");
    unsigned u = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_++];
      u <<= 4;
      if (c >= '0' && c <= '9') u |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') u |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') u |= static_cast<unsigned>(c - 'A' + 10);
      else failAt(pos_ - 1, "expected a hex digit in a \\u escape");
    }
    return u;
  }

  static void appendUtf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  std::string string() {
    const size_t start = pos_;
    ++pos_;  // '"'
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) failAt(start, "string not closed (truncated?)");
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) failAt(pos_ - 1, "control character inside a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) failAt(start, "string not closed (truncated?)");
      const char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xd800 && cp < 0xdc00) {  // high surrogate: a low one must follow
            if (!literal("\\u")) fail("unpaired UTF-16 surrogate in a \\u escape");
            const uint32_t low = hex4();
            if (low < 0xdc00 || low >= 0xe000) fail("unpaired UTF-16 surrogate in a \\u escape");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
          } else if (cp >= 0xdc00 && cp < 0xe000) {
            fail("unpaired UTF-16 surrogate in a \\u escape");
          }
          appendUtf8(out, cp);
          break;
        }
        default: failAt(pos_ - 1, strprintf("unknown escape \\%c in a string", e));
      }
    }
  }
};

bool isScalar(const Value& v) { return v.type != Type::kArray && v.type != Type::kObject; }

void writeString(std::string& out, const std::string& s) { appendJsonString(out, s); }

void writeNumber(std::string& out, double d) {
  if (!std::isfinite(d)) {
    out += "null";
    return;
  }
  // to_chars without a precision gives the shortest text that reads back to exactly d ("400", "0.5").
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), d);
  out.append(buf, ec == std::errc() ? end : buf);
}

void writeValue(std::string& out, const Value& v, int indent);

// One line: every element is a scalar or an array of scalars.
bool inlineable(const Value& v) {
  if (v.type == Type::kArray) {
    for (const Value& e : v.array)
      if (!isScalar(e)) return false;
    return true;
  }
  for (const auto& [k, m] : v.object)
    if (!isScalar(m) && !(m.type == Type::kArray && inlineable(m))) return false;
  return true;
}

void writeInline(std::string& out, const Value& v) {
  if (v.type == Type::kArray) {
    out += '[';
    for (size_t i = 0; i < v.array.size(); ++i) {
      if (i) out += ", ";
      writeValue(out, v.array[i], 0);
    }
    out += ']';
  } else if (v.type == Type::kObject) {
    out += '{';
    for (size_t i = 0; i < v.object.size(); ++i) {
      if (i) out += ", ";
      writeString(out, v.object[i].first);
      out += ": ";
      writeValue(out, v.object[i].second, 0);
    }
    out += '}';
  } else {
    writeValue(out, v, 0);
  }
}

void writeValue(std::string& out, const Value& v, int indent) {
  switch (v.type) {
    case Type::kNull: out += "null"; return;
    case Type::kBool: out += v.boolean ? "true" : "false"; return;
    case Type::kNumber: writeNumber(out, v.number); return;
    case Type::kString: writeString(out, v.string); return;
    case Type::kArray:
    case Type::kObject: break;
  }
  const bool isArray = v.type == Type::kArray;
  const size_t n = isArray ? v.array.size() : v.object.size();
  if (n == 0) {
    out += isArray ? "[]" : "{}";
    return;
  }
  if (inlineable(v)) {
    std::string line;
    writeInline(line, v);
    if (isArray || line.size() <= kInlineWidth) {
      out += line;
      return;
    }
  }
  const std::string pad(static_cast<size_t>(indent + 2), ' ');
  out += isArray ? "[\n" : "{\n";
  for (size_t i = 0; i < n; ++i) {
    out += pad;
    if (isArray) {
      writeValue(out, v.array[i], indent + 2);
    } else {
      writeString(out, v.object[i].first);
      out += ": ";
      writeValue(out, v.object[i].second, indent + 2);
    }
    out += i + 1 < n ? ",\n" : "\n";
  }
  out += std::string(static_cast<size_t>(indent), ' ');
  out += isArray ? ']' : '}';
}

}  // namespace

const char* typeName(Type t) {
  switch (t) {
    case Type::kNull: return "null";
    case Type::kBool: return "a boolean";
    case Type::kNumber: return "a number";
    case Type::kString: return "a string";
    case Type::kArray: return "an array";
    case Type::kObject: return "an object";
  }
  return "?";
}

Value Value::makeBool(bool b) {
  Value v;
  v.type = Type::kBool;
  v.boolean = b;
  return v;
}
Value Value::makeNumber(double d) {
  Value v;
  v.type = Type::kNumber;
  v.number = d;
  return v;
}
Value Value::makeString(std::string s) {
  Value v;
  v.type = Type::kString;
  v.string = std::move(s);
  return v;
}
Value Value::makeArray() {
  Value v;
  v.type = Type::kArray;
  return v;
}
Value Value::makeObject() {
  Value v;
  v.type = Type::kObject;
  return v;
}

const Value* Value::find(const std::string& key) const {
  if (type != Type::kObject) return nullptr;
  for (const auto& [k, v] : object)
    if (k == key) return &v;
  return nullptr;
}

Value& Value::add(std::string key, Value v) {
  object.emplace_back(std::move(key), std::move(v));
  return object.back().second;
}

Value& Value::push(Value v) {
  array.push_back(std::move(v));
  return array.back();
}

Value parse(const std::string& text, const std::string& origin) { return Parser(text, origin).document(); }

std::string write(const Value& v) {
  std::string out;
  writeValue(out, v, 0);
  out += '\n';
  return out;
}

}  // namespace strata::json
