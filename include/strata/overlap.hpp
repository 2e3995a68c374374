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

/// How an OverlapScheduler buckets and reduces gradients. Read once, by the constructor.
struct OverlapOptions {
  /// What finish() leaves in the gradient buffer.
  enum class Mode {
    kAllReduceAverage,  ///< Data parallel: every rank ends with the average gradient (all-reduce per bucket).
    kReduceScatter,     ///< ZeRO-1/2: rank r ends with the average of its shard of every bucket (reduce-scatter).
  };
  Mode mode = Mode::kAllReduceAverage;  ///< All-reduce (the default) or reduce-scatter.
  /// Limit of the first bucket (the last layers), in unpadded bytes: small, so communication starts early.
  size_t firstBucketBytes = 1 << 20;
  size_t bucketCapBytes = 25 << 20;  ///< Limit of every later bucket, in unpadded bytes.
  /// Wire format: strataFloat32 (none), or strataBfloat16 / strataFloat16 (gradients are converted before the
  /// collective and back after it; the reduction accumulates in float32). As built: each pairwise add of
  /// the host kernels is done in float32 and rounded back to the wire type, so partial sums are rounded
  /// n-1 times (DESIGN.md, "Overlap scheduler (as built)").
  strataDataType_t wireType = strataFloat32;
  /// true: gradReady() launches each bucket as soon as it and every earlier one are complete. false:
  /// gradReady() only records; finish() launches every bucket (the baseline).
  bool overlap = true;
  /// finish(): a bucket not complete this many milliseconds after finish() began throws strata::Exception
  /// (strataTimeout) naming it; waitParams(): the limit of each bucket's wait. < 0: no limit.
  int64_t timeoutMs = -1;
  /// true: the constructor (then collective over `comm`) splits a private communicator for the buckets, so
  /// the caller may keep using `comm` during a step, and the destructor can abort work left in flight.
  /// false: buckets go out on `comm` itself, which must then carry nothing else between beginStep() and
  /// finish().
  bool ownCommunicator = true;
};

/// Per-step accounting, in microseconds of wall time on this rank.
struct OverlapStats {
  double computeUs = 0;  ///< From beginStep() to the last gradReady().
  /// Union of the intervals in which some bucket's collective was in flight (from its launch to when its
  /// completion was observed, which may be as late as the next gradReady()).
  double commUs = 0;
  /// Time finish() spent launching, waiting and post-processing, at most commUs: communication not hidden.
  double exposedCommUs = 0;
  double overlapPercent = 0;  ///< 100 * (commUs - exposedCommUs) / commUs, in [0, 100]; 0 without communication.
  int buckets = 0;            ///< Number of buckets.
};

/// Overlaps gradient communication with the backward pass: see the file comment and DESIGN.md, "Overlap
/// scheduler (as built)". Every call of this class throws strata::Exception on failure: strataInvalidArgument
/// for an index out of range, strataInvalidUsage for a call out of order, or the error of a collective. Not
/// thread-safe: use one scheduler from one thread. Once a collective has failed or timed out, beginStep(),
/// gradReady(), finish(), allGatherParams() and waitParams() throw strataInvalidUsage: the scheduler (and its
/// communicator) must be abandoned.
class OverlapScheduler {
 public:
  /// `comm` must outlive the scheduler. Parameters are float32. Not thread-safe. Buckets go out at times that
  /// differ between ranks, so they run on a private communicator split from `comm` (collective: every rank
  /// constructs its scheduler at the same point) unless options.ownCommunicator is false. Throws
  /// strataInvalidArgument for a wireType other than float32, bfloat16 or float16, or a bucket limit of 0.
  OverlapScheduler(Communicator& comm, OverlapOptions options = {});
  /// Frees the buffers and destroys the private communicator. With collectives still in flight (finish() timed
  /// out or was never called) it first aborts the private communicator, which stops them; with ownCommunicator
  /// false it leaks the buffers instead, which the caller's communicator may still write (the caller aborts
  /// that one). Never throws.
  ~OverlapScheduler();
  /// Not copyable: the scheduler owns its buffers and communicator.
  OverlapScheduler(const OverlapScheduler&) = delete;
  /// Not copy-assignable: the scheduler owns its buffers and communicator.
  OverlapScheduler& operator=(const OverlapScheduler&) = delete;

  /// Registers a parameter of `numel` float32 elements (forward order); returns its index. All parameters
  /// are registered before the first beginStep() or layout query (grad, gradBuffer, gradElems, the bucket
  /// and shard queries, paramBucket), which fix the flat buffer's layout; after that it throws
  /// strataInvalidUsage. `name` appears in error messages.
  int addParameter(const std::string& name, size_t numel);
  /// The gradient of parameter p inside the flat buffer (fixes the layout); valid as long as the scheduler.
  float* grad(int p);
  /// The flat buffer of every bucket, gradElems() floats (fixes the layout). Collectives reduce it in place;
  /// beginStep() zeroes only the padding, so the trainer writes every gradient each step.
  float* gradBuffer();
  /// Floats in gradBuffer(), padding of reduce-scatter buckets included (fixes the layout).
  size_t gradElems() const;

  /// The number of buckets. Bucket layout: bucket b holds parameters bucketParams(b) (reverse registration
  /// order) at [bucketOffset(b), bucketOffset(b) + bucketElems(b)) of the flat buffer. Each query fixes the
  /// layout.
  int numBuckets() const;
  /// The parameters of bucket b, in reverse registration order.
  const std::vector<int>& bucketParams(int b) const;
  /// Where bucket b starts in the flat buffer, in elements.
  size_t bucketOffset(int b) const;
  /// Elements of bucket b, padded with zeros to a multiple of the number of ranks in reduce-scatter mode.
  size_t bucketElems(int b) const;
  /// Reduce-scatter mode: the elements of bucket b this rank owns after finish() ([offset, offset+count) of
  /// the flat buffer), and allGatherParams() to share updated parameters laid out like the gradients.
  /// All-reduce mode: the whole bucket.
  size_t shardOffset(int b) const;
  /// The number of elements of bucket b this rank owns (see shardOffset).
  size_t shardElems(int b) const;
  /// The bucket parameter p belongs to (additions to the fixed interface).
  int paramBucket(int p) const;
  /// The buckets launched so far in the current (or last) step, in launch order: always 0, 1, 2, ... on every
  /// rank, whatever order gradReady() was called in.
  const std::vector<int>& launchOrder() const;

  /// Starts a step: fixes the layout (first call), marks every gradient not ready and zeroes the buckets'
  /// padding. Throws strataInvalidUsage when called twice without finish().
  void beginStep();
  /// Gradient p is final. Launches its bucket when the bucket is complete (and every earlier bucket has
  /// been launched, so buckets go out in the same order on every rank). Throws strataInvalidUsage outside a
  /// step or for a gradient marked twice, and the error of a launched collective (then the scheduler cannot
  /// go on).
  void gradReady(int p);
  /// Waits for every bucket; in reduce-scatter mode the shards hold averaged gradients. Throws
  /// strata::Exception naming the bucket (and the parameters never marked ready) on timeout.
  /// Throws strataInvalidUsage, launching nothing, when a gradient of this rank was not marked ready.
  void finish();
  /// The last finished step's accounting (zeros before the first).
  OverlapStats stats() const;

  /// Reduce-scatter mode: starts all-gathering updated parameters held in `params` (same layout as the
  /// gradient buffer, each rank's shards updated) so that the next forward has them; waitParams() waits.
  /// In place: each rank's shard is sent from, and every bucket received into, `params`, which must stay
  /// valid until waitParams(). Throws strataInvalidUsage in all-reduce mode or when called twice without
  /// waitParams(), strataInvalidArgument for nullptr.
  void allGatherParams(float* params);
  /// Waits for allGatherParams() (nothing to do without one); each bucket's wait is limited by timeoutMs
  /// (strataTimeout, then the scheduler cannot go on).
  void waitParams();

  /// Chrome/Perfetto trace events ("compute" and "comm" lanes of this rank) of every step so far (at most
  /// 2^20 events). Throws strataSystemError if the file cannot be written.
  void writeTrace(const std::string& path) const;
  /// Collective over the communicator (call it on every rank at the same point, between steps): rank 0
  /// writes one trace file holding every rank's compute and comm lanes; the other ranks write nothing.
  void writeTraceAllRanks(const std::string& path);

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace strata
