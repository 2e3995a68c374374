// JSON string escaping: the one copy, for the topology files, strata-perf's reports and the overlap
// scheduler's traces. Header-only and dependency-free, so the layers that may use only the public API
// (overlap, tools) can include it too (DESIGN.md, "Layers").
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace strata {

/// Appends `s` to `out` as a quoted JSON string: quote, backslash and control characters escaped.
inline void appendJsonString(std::string& out, std::string_view s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

/// `s` as a quoted JSON string.
inline std::string jsonString(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  appendJsonString(out, s);
  return out;
}

}  // namespace strata
