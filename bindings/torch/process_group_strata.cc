// ProcessGroupStrata's life: the group's communicator made from the store's unique id (with the group's timeout),
// or taken over from a split or a shrink; shutdown and abort; errors and sequence numbers; new communicators
// (split, shrink). The calls are in process_group_launch.cc, process_group_collectives.cc and process_group_p2p.cc.
#include "process_group_strata.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <utility>

#include "process_group_call.h"
#include "result_error.h"

namespace strata::torch_backend {

namespace {

int commRank(strataComm_t comm) {
  int rank = -1;
  TORCH_CHECK(strataCommUserRank(comm, &rank) == strataSuccess, "strata: invalid communicator");
  return rank;
}

int commSize(strataComm_t comm) {
  int size = 0;
  TORCH_CHECK(strataCommCount(comm, &size) == strataSuccess, "strata: invalid communicator");
  return size;
}

/// A group's communicator settings (strataConfig_t): torch's timeout, unless the user set STRATA_TIMEOUT_MS (which
/// then wins, as strata.torch documents), and the group's name. Holds the name the struct points to.
class GroupConfig {
 public:
  GroupConfig(std::chrono::milliseconds timeout, std::string name) : name_(std::move(name)) {
    if (std::getenv("STRATA_TIMEOUT_MS") == nullptr && timeout.count() > 0)
      config_.timeoutMs = static_cast<int>(std::min<int64_t>(timeout.count(), std::numeric_limits<int>::max()));
    if (!name_.empty()) config_.commName = name_.c_str();
  }
  GroupConfig(const GroupConfig&) = delete;
  GroupConfig& operator=(const GroupConfig&) = delete;
  const strataConfig_t* get() const { return &config_; }

 private:
  std::string name_;
  strataConfig_t config_ = STRATA_CONFIG_INITIALIZER;
};

}  // namespace

// ---- construction and teardown --------------------------------------------------------------------------------

ProcessGroupStrata::ProcessGroupStrata(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                       c10::intrusive_ptr<Options> options)
    : Backend(rank, size), store_(store), options_(std::move(options)) {
  // The store may outlive the group (torchrun's agent store does) and torch names a re-created group as it named
  // the last one, so a fixed key would hand a rank that reads it early the last generation's id, whose root is
  // gone. Each rank counts the groups it has made on this store: its n-th group meets rank 0's n-th.
  const int64_t generation = store->add("strata_generation/" + std::to_string(rank), 1);
  const std::string key = "strata_unique_id/" + std::to_string(generation);
  strataUniqueId id;
  if (rank == 0) {
    check(strataGetUniqueId(&id), "strataGetUniqueId");
    const auto* bytes = reinterpret_cast<const uint8_t*>(&id);
    store->set(key, std::vector<uint8_t>(bytes, bytes + sizeof(id)));
  } else {
    const std::vector<uint8_t> bytes = store->get(key);
    TORCH_CHECK(bytes.size() == sizeof(id), "strata: the store's ", key, " has ", bytes.size(), " bytes, not ",
                sizeof(id), " (another backend's key?)");
    std::memcpy(&id, bytes.data(), sizeof(id));
  }
  const GroupConfig config(options_->timeout, options_->group_name);
  check(strataCommInitRankConfig(&comm_, size, id, rank, config.get()), "strataCommInitRankConfig");
  startCompletionThread();
}

ProcessGroupStrata::ProcessGroupStrata(strataComm_t comm, c10::intrusive_ptr<c10d::Store> store,
                                       c10::intrusive_ptr<Options> options)
    : Backend(commRank(comm), commSize(comm)), comm_(comm), store_(std::move(store)), options_(std::move(options)) {
  startCompletionThread();
}

ProcessGroupStrata::~ProcessGroupStrata() {
  try {
    shutdown();
  } catch (const std::exception& e) {
    TORCH_WARN("strata: destroying the process group: ", e.what());
  }
}

void ProcessGroupStrata::startCompletionThread() {
  completer_ = std::thread([this] { completionLoop(); });
}

void ProcessGroupStrata::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (completer_.joinable()) completer_.join();  // after every launched group completed
  if (comm_) {
    strataComm_t comm = std::exchange(comm_, nullptr);
    check(strataCommDestroy(comm), "strataCommDestroy");
  }
}

void ProcessGroupStrata::abort() {
  if (comm_) {
    // Outstanding groups fail at once; the completion thread then finishes their Works with the error.
    strataComm_t comm = std::exchange(comm_, nullptr);
    strataCommAbort(comm);
  }
  shutdown();
}

void ProcessGroupStrata::useStreamsForEveryTensor(std::shared_ptr<DeviceStreams> streams) {
  streams_ = std::move(streams);
  everyTensorOnStreams_ = true;
}

// ---- errors ---------------------------------------------------------------------------------------------------

void ProcessGroupStrata::throwResult(strataResult_t result, const std::string& what) const {
  std::rethrow_exception(resultError(result, what, strataGetLastError(comm_)));
}

void ProcessGroupStrata::check(strataResult_t result, const char* what) const {
  if (result != strataSuccess) throwResult(result, what);
}

c10d::ErrorType ProcessGroupStrata::getError() {
  strataResult_t async = strataSuccess;
  if (!comm_ || strataCommGetAsyncError(comm_, &async) != strataSuccess) return c10d::ErrorType::COMM_ERROR;
  if (async == strataSuccess) return c10d::ErrorType::SUCCESS;
  return async == strataTimeout ? c10d::ErrorType::TIMEOUT : c10d::ErrorType::COMM_ERROR;
}

uint64_t ProcessGroupStrata::getSequenceNumberForGroup() {
  std::lock_guard<std::mutex> lock(mutex_);
  return seq_;
}

uint64_t ProcessGroupStrata::nextSequenceNumber() {
  std::lock_guard<std::mutex> lock(mutex_);
  return ++seq_;
}

int ProcessGroupStrata::globalRank() const {
  const auto& global = options_->global_ranks_in_group;
  return global.empty() ? rank_ : static_cast<int>(global.at(rank_));
}

// ---- new communicators ----------------------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Backend> ProcessGroupStrata::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                            const std::vector<int>& ranks,
                                                            const c10::intrusive_ptr<c10d::Backend::Options>& opts) {
  TORCH_CHECK(comm_ != nullptr, "strata: split of a process group that was shut down or aborted");
  const int me = globalRank();
  const auto it = std::find(ranks.begin(), ranks.end(), me);
  int color = STRATA_SPLIT_NOCOLOR, key = 0;
  if (it != ranks.end()) {
    // Every member computes the same color from the same list; disjoint lists get different colors.
    uint64_t h = 1469598103934665603ull;
    for (int r : ranks) h = (h ^ static_cast<uint64_t>(r)) * 1099511628211ull;
    color = static_cast<int>(h & 0x3fffffff);
    key = static_cast<int>(it - ranks.begin());
  }
  auto childOptions = c10::make_intrusive<Options>(opts ? opts->timeout : options_->timeout);
  if (opts) {
    childOptions->group_name = opts->group_name;
    childOptions->group_desc = opts->group_desc;
    childOptions->global_ranks_in_group = opts->global_ranks_in_group;
  }
  if (childOptions->global_ranks_in_group.empty()) {
    childOptions->global_ranks_in_group.assign(ranks.begin(), ranks.end());
  }
  const GroupConfig config(childOptions->timeout, childOptions->group_name);
  strataComm_t child = nullptr;
  check(strataCommSplit(comm_, color, key, &child, config.get()), "split");
  ++splits_;
  if (child == nullptr) return nullptr;
  return c10::make_intrusive<ProcessGroupStrata>(child, store, childOptions);
}

void ProcessGroupStrata::performNocolorSplit() { split(store_, {}, nullptr); }

c10::intrusive_ptr<c10d::Backend> ProcessGroupStrata::shrink(
    const std::vector<int64_t>& ranksToExclude, int shrinkFlags,
    const c10::intrusive_ptr<c10d::Backend::Options>& optsOverride) {
  TORCH_CHECK(comm_ != nullptr, "strata: shrink of a process group that was shut down or aborted");
  std::vector<int> exclude(ranksToExclude.begin(), ranksToExclude.end());
  auto childOptions = c10::make_intrusive<Options>(optsOverride ? optsOverride->timeout : options_->timeout);
  childOptions->group_name = optsOverride ? optsOverride->group_name : options_->group_name;
  const GroupConfig config(childOptions->timeout, childOptions->group_name);
  strataComm_t child = nullptr;
  check(strataCommShrink(comm_, exclude.data(), static_cast<int>(exclude.size()), &child, config.get(),
                         (shrinkFlags & 1) ? STRATA_SHRINK_ABORT : STRATA_SHRINK_DEFAULT),
        "shrink");
  const auto& global = options_->global_ranks_in_group;
  for (int r = 0; r < size_; ++r) {
    if (std::find(exclude.begin(), exclude.end(), r) != exclude.end()) continue;
    childOptions->global_ranks_in_group.push_back(global.empty() ? r : global[r]);
  }
  return c10::make_intrusive<ProcessGroupStrata>(child, store_, childOptions);
}

}  // namespace strata::torch_backend
