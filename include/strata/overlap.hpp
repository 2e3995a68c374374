// Strata's compute/communication overlap scheduler (C++, part of libstrata).
//
// Data-parallel training hides gradient communication behind the backward pass: parameters are registered
// once, in forward order; during backward the trainer calls gradReady(p) as each gradient is final; the
// scheduler packs gradients into buckets in reverse registration order (the order backward produces them)
// and launches each full bucket's collective asynchronously, in bucket order on every rank; finish() waits
// for all of them. Buckets are views of one flat gradient buffer, as DDP's gradient_as_bucket_view: the
// trainer's gradients live in gradBuffer() and are reduced in place, with no copy in or out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "strata/strata.hpp"

namespace strata {

struct OverlapOptions {
  enum class Mode {
    kAllReduceAverage,  // data parallel: every rank ends with the average gradient
    kReduceScatter,     // ZeRO-1/2: rank r ends with the average of its shard of every bucket
  };
  Mode mode = Mode::kAllReduceAverage;
  size_t firstBucketBytes = 1 << 20;  // the first bucket (last layers) is small, so communication starts early
  size_t bucketCapBytes = 25 << 20;   // later buckets up to this size
  /// Wire format: strataFloat32 (none), or strataBfloat16 / strataFloat16 (gradients are converted before the
  /// collective and back after it; the reduction accumulates in float32). As built: each pairwise add of
  /// the host kernels is done in float32 and rounded back to the wire type, so partial sums are rounded
  /// n-1 times (DESIGN.md, "Overlap scheduler (as built)").
  strataDataType_t wireType = strataFloat32;
  bool overlap = true;     // false: gradReady only records; finish() launches every bucket (the baseline)
  int64_t timeoutMs = -1;  // finish(): a bucket not complete by then throws strata::Exception naming it; < 0: none
  /// true: the constructor (then collective over `comm`) splits a private communicator for the buckets, so
  /// the caller may keep using `comm` during a step, and the destructor can abort work left in flight.
  /// false: buckets go out on `comm` itself, which must then carry nothing else between beginStep() and
  /// finish().
  bool ownCommunicator = true;
};

/// Per-step accounting, in microseconds of wall time on this rank.
struct OverlapStats {
  double computeUs = 0;       // from beginStep() to the last gradReady()
  double commUs = 0;          // union of the intervals in which some bucket's collective was in flight
  double exposedCommUs = 0;   // communication after the last gradReady(), that finish() waited for
  double overlapPercent = 0;  // 100 * (commUs - exposedCommUs) / commUs
  int buckets = 0;
};

class OverlapScheduler {
 public:
  /// `comm` must outlive the scheduler. Parameters are float32. Not thread-safe. Buckets go out at times that
  /// differ between ranks, so they run on a private communicator split from `comm` (collective: every rank
  /// constructs its scheduler at the same point) unless options.ownCommunicator is false.
  OverlapScheduler(Communicator& comm, OverlapOptions options = {});
  ~OverlapScheduler();
  OverlapScheduler(const OverlapScheduler&) = delete;
  OverlapScheduler& operator=(const OverlapScheduler&) = delete;

  /// Registers a parameter of `numel` float32 elements (forward order); returns its index. All parameters
  /// are registered before the first beginStep(); the flat buffer is laid out then.
  int addParameter(const std::string& name, size_t numel);
  /// The gradient of parameter p inside the flat buffer (valid after the first beginStep()).
  float* grad(int p);
  float* gradBuffer();
  size_t gradElems() const;

  /// Bucket layout: bucket b holds parameters bucketParams(b) (reverse registration order) at
  /// [bucketOffset(b), bucketOffset(b) + bucketElems(b)) of the flat buffer.
  int numBuckets() const;
  const std::vector<int>& bucketParams(int b) const;
  size_t bucketOffset(int b) const;
  size_t bucketElems(int b) const;
  /// Reduce-scatter mode: the elements of bucket b this rank owns after finish() ([offset, offset+count) of
  /// the flat buffer), and allGatherParams() to share updated parameters laid out like the gradients.
  size_t shardOffset(int b) const;
  size_t shardElems(int b) const;
  /// The bucket parameter p belongs to (additions to the fixed interface).
  int paramBucket(int p) const;
  /// The buckets launched so far in the current (or last) step, in launch order: always 0, 1, 2, ... on every
  /// rank, whatever order gradReady() was called in.
  const std::vector<int>& launchOrder() const;

  void beginStep();
  /// Gradient p is final. Launches its bucket when the bucket is complete (and every earlier bucket has
  /// been launched, so buckets go out in the same order on every rank).
  void gradReady(int p);
  /// Waits for every bucket; in reduce-scatter mode the shards hold averaged gradients. Throws
  /// strata::Exception naming the bucket (and the parameters never marked ready) on timeout.
  void finish();
  OverlapStats stats() const;

  /// Reduce-scatter mode: starts all-gathering updated parameters held in `params` (same layout as the
  /// gradient buffer, each rank's shards updated) so that the next forward has them; waitParams() waits.
  void allGatherParams(float* params);
  void waitParams();

  /// Chrome/Perfetto trace events ("compute" and "comm" lanes of this rank) of every step so far.
  void writeTrace(const std::string& path) const;
  /// Collective over the communicator (call it on every rank at the same point, between steps): rank 0
  /// writes one trace file holding every rank's compute and comm lanes; the other ranks write nothing.
  void writeTraceAllRanks(const std::string& path);

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace strata
