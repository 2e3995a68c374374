// How strata_soak fails: one message naming the rank and the iteration, the flight recorders of the live
// communicators written to --flight-dir, exit status 1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "strata/strata.h"

namespace soak {

extern int gLaunchRank;      // RANK from the launcher: names this process in every message
extern uint64_t gIteration;  // the iteration running, for messages
// The communicators alive in this process, whose flight recorders a failure writes to --flight-dir. (Not
// STRATA_FLIGHT_RECORDER_DIR: that would also write one at every deliberate abort, thousands an hour.)
extern std::vector<strataComm_t> gLiveComms;
extern std::string gFlightDir;

/// "strata_soak: rank R: iteration I: FAIL: <message>" on stderr, the flight recorders to gFlightDir, exit 1.
[[noreturn]] __attribute__((format(printf, 1, 2))) void die(const char* fmt, ...);

/// die() naming `what`, the result and the communicator's last error, unless `r` is strataSuccess.
void expectOk(strataResult_t r, strataComm_t comm, const std::string& what);

}  // namespace soak
