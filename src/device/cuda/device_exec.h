// The device executor's launcher, callable from plain C++ (no CUDA headers): one thread block per lane of a lowered
// plan (device/dev_plan.h), each running device/proto.h's runLane under DevicePolicy: the same code the CPU tests run
// under HostPolicy.
#pragma once

#include <cstdint>

#include "device/dev_types.h"

namespace strata {

/// Enqueues the executor on `stream` (a cudaStream_t): `lanes` blocks of `threads` threads; laneArgs is in device
/// memory (lanes entries whose pointers are all device or mapped memory). Returns a cudaError_t value (0: launched).
int cudaDevExecLaunch(const devproto::LaneArgs* laneArgs, int lanes, int threads, void* stream);

}  // namespace strata
