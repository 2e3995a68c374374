// Logging: STRATA_DEBUG=WARN|INFO|TRACE, STRATA_DEBUG_SUBSYS=INIT,NET,COLL,TUNING,... Silent by default.
// The level check happens before any formatting.
#pragma once

#include <cstdint>

namespace strata {

enum class LogLevel : int { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };
enum LogSubsys : uint32_t {
  kLogInit = 1u << 0,
  kLogNet = 1u << 1,
  kLogColl = 1u << 2,
  kLogTuning = 1u << 3,
  kLogBootstrap = 1u << 4,
  kLogShm = 1u << 5,
  kLogAll = ~0u,
};

struct LogSettings {
  LogLevel level = LogLevel::kNone;
  uint32_t subsys = kLogAll;
};

/// Process-wide log settings, read from the environment on first use.
const LogSettings& logSettings();
/// True when a message of this level and subsystem would be written (to skip building it otherwise).
inline bool logEnabled(LogLevel level, uint32_t subsys) {
  const LogSettings& s = logSettings();
  return static_cast<int>(s.level) >= static_cast<int>(level) && (s.subsys & subsys);
}
/// Sets the identity printed in front of every line ("host:pid rank").
void logSetRank(int rank);
void logWrite(LogLevel level, uint32_t subsys, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));

}  // namespace strata

#define STRATA_LOG(lvl, sub, ...)                                                                   \
  do {                                                                                              \
    const auto& strata_ls_ = ::strata::logSettings();                                               \
    if (static_cast<int>(strata_ls_.level) >= static_cast<int>(lvl) && (strata_ls_.subsys & (sub))) \
      ::strata::logWrite(lvl, sub, __FILE__, __LINE__, __VA_ARGS__);                                \
  } while (0)
#define STRATA_WARN(sub, ...) STRATA_LOG(::strata::LogLevel::kWarn, sub, __VA_ARGS__)
#define STRATA_INFO(sub, ...) STRATA_LOG(::strata::LogLevel::kInfo, sub, __VA_ARGS__)
#define STRATA_TRACE(sub, ...) STRATA_LOG(::strata::LogLevel::kTrace, sub, __VA_ARGS__)
