#include "util/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace strata {
namespace {

std::atomic<int> gRank{-1};

LogSettings readSettings() {
  LogSettings s;
  if (const char* v = std::getenv("STRATA_DEBUG")) {
    std::string l(v);
    for (auto& c : l) c = static_cast<char>(toupper(c));
    if (l == "WARN") s.level = LogLevel::kWarn;
    else if (l == "INFO") s.level = LogLevel::kInfo;
    else if (l == "TRACE") s.level = LogLevel::kTrace;
  }
  if (const char* v = std::getenv("STRATA_DEBUG_SUBSYS")) {
    std::string list(v);
    uint32_t mask = 0;
    size_t pos = 0;
    while (pos <= list.size()) {
      size_t c = list.find(',', pos);
      std::string item = list.substr(pos, c == std::string::npos ? std::string::npos : c - pos);
      for (auto& ch : item) ch = static_cast<char>(toupper(ch));
      if (item == "INIT") mask |= kLogInit;
      else if (item == "NET") mask |= kLogNet;
      else if (item == "COLL") mask |= kLogColl;
      else if (item == "TUNING") mask |= kLogTuning;
      else if (item == "BOOTSTRAP") mask |= kLogBootstrap;
      else if (item == "SHM") mask |= kLogShm;
      else if (item == "ALL") mask |= kLogAll;
      if (c == std::string::npos) break;
      pos = c + 1;
    }
    s.subsys = mask;
  }
  return s;
}

const char* levelName(LogLevel l) {
  switch (l) {
    case LogLevel::kWarn: return "WARN";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kTrace: return "TRACE";
    default: return "";
  }
}

}  // namespace

const LogSettings& logSettings() {
  static const LogSettings s = readSettings();
  return s;
}

void logSetRank(int rank) { gRank.store(rank); }

void logWrite(LogLevel level, uint32_t, const char* file, int line, const char* fmt, ...) {
  char host[64] = {0};
  gethostname(host, sizeof(host) - 1);
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  const char* base = std::strrchr(file, '/');
  std::fprintf(stderr, "%s:%d [%d] STRATA %s %s:%d %s\n", host, static_cast<int>(getpid()), gRank.load(),
               levelName(level), base ? base + 1 : file, line, msg);
}

}  // namespace strata
