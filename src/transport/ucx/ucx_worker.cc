#include "transport/ucx/ucx_worker.h"

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <utility>

#include "util/error.h"
#include "util/log.h"

namespace strata::ucx {

class Context {
 public:
  Context(const Api& api, ucp_context_h ctx) : api_(api), ctx_(ctx) {}
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ~Context() { api_.cleanup(ctx_); }
  ucp_context_h handle() const { return ctx_; }

 private:
  const Api& api_;
  ucp_context_h ctx_;
};

namespace {

// Guards the registry and every context or worker creation and destruction.
std::mutex& registryMutex() {
  static std::mutex mu;
  return mu;
}
std::weak_ptr<Context>& currentContext() {
  static std::weak_ptr<Context> ctx;
  return ctx;
}
std::weak_ptr<Worker>& currentWorker() {
  static std::weak_ptr<Worker> w;
  return w;
}

[[noreturn]] void fail(const Api& api, const char* what, ucs_status_t st) {
  throw Error(strataSystemError, strprintf("UCX %s failed: %s", what, api.status_string(st)));
}

// Settings applied before the first context reads its configuration; each only where the user left the
// variable unset, so UCX_* in the environment always wins.
void prepareEnvironment(const Api& api) {
  static bool done = false;
  if (done) return;
  done = true;
  // UCX's own warnings (unused variables, transports it skips) are noise in a training job's log: errors
  // only, unless Strata's debug logging is on.
  const char* debug = std::getenv("STRATA_DEBUG");
  if (!std::getenv("UCX_LOG_LEVEL") && !(debug && *debug) && api.global_opts_set_value) {
    api.global_opts_set_value("LOG_LEVEL", "error");
  }
  // Endpoints ask for peer-failure handling (a dead peer must become an error, not a hang). UCX's POSIX
  // shared-memory transport supports it (it checks the peer process) but only advertises it when asked;
  // without this, same-host peers would fall back to TCP loopback and UCX_TLS=sm would find no transport.
  // UCX reads this variable when the context opens its transports, so it has to be in the environment.
  setenv("UCX_POSIX_ERROR_HANDLING", "y", /*overwrite=*/0);
}

std::shared_ptr<Context> contextLocked(const Api& api) {
  if (auto ctx = currentContext().lock()) return ctx;
  prepareEnvironment(api);
  ucp_config_t* config = nullptr;
  ucs_status_t st = api.config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) fail(api, "reading the configuration (UCX_* variables)", st);
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG;
  // Workers of different communicators run on different threads at once; they share the context's
  // registration cache.
  params.mt_workers_shared = 1;
  ucp_context_h handle = nullptr;
  st = api.init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, config, &handle);
  api.config_release(config);
  if (st != UCS_OK) fail(api, "ucp_init (check UCX_TLS and UCX_NET_DEVICES)", st);
  auto ctx = std::make_shared<Context>(api, handle);
  currentContext() = ctx;
  STRATA_INFO(kLogNet, "UCX %u.%u.%u context created", api.major, api.minor, api.release);
  return ctx;
}

}  // namespace

Worker::Worker(std::shared_ptr<Context> context, ucp_worker_h worker, std::vector<uint8_t> address)
    : api_(api()), context_(std::move(context)), worker_(worker), address_(std::move(address)) {}

Worker::~Worker() {
  std::lock_guard<std::mutex> reg(registryMutex());
  {
    std::lock_guard<std::mutex> lk(mu_);
    // Let endpoints that are still closing finish (their peers are usually closing too), for a while.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (!abandoned_ && (!closing_.empty() || !deferred_.empty()) && std::chrono::steady_clock::now() < deadline) {
      if (progress() == 0) std::this_thread::yield();
    }
    if (abandoned_ || !closing_.empty() || !deferred_.empty()) {
      // UCX asserts (aborts) when a worker is destroyed under requests that never finished, which happens
      // after a peer died in the middle of a transfer. Leave this worker and its context to the process's
      // end; the next connection gets a fresh pair.
      STRATA_INFO(kLogNet, "leaving the ucx worker alive: %s",
                  abandoned_ ? "a transfer from a dead peer never finished" : "endpoints still closing");
      (void)new std::shared_ptr<Context>(std::move(context_));  // deliberately leaked with the worker
      for (auto& c : closing_) (void)c.second.release();        // an error callback may still name them
      for (auto& d : deferred_) (void)d.state.release();
      closing_.clear();
      deferred_.clear();
      return;
    }
    api_.worker_destroy(worker_);  // no callback runs after this
  }
  // The context goes when its last worker does, still under the registry lock.
  std::shared_ptr<Context> last = std::move(context_);
  last.reset();
}

unsigned Worker::progress() {
  const unsigned n = api_.worker_progress(worker_);
  if (!closing_.empty() || !deferred_.empty()) reap();
  return n;
}

void Worker::drain(int rounds) {
  for (int i = 0; i < rounds && progress() != 0; ++i) {
  }
}

void Worker::retire(void* closeRequest, std::unique_ptr<EndpointState> state) {
  closing_.emplace_back(closeRequest, std::move(state));
}

void Worker::deferClose(ucp_ep_h ep, std::vector<void*> requests, std::unique_ptr<EndpointState> state) {
  deferred_.push_back(DeferredClose{ep, std::move(requests), std::move(state)});
}

void Worker::reap() {
  for (auto it = deferred_.begin(); it != deferred_.end();) {
    auto& reqs = it->requests;
    for (auto q = reqs.begin(); q != reqs.end();) {
      if (api_.request_check_status(*q) == UCS_INPROGRESS) {
        ++q;
        continue;
      }
      api_.request_free(*q);
      q = reqs.erase(q);
    }
    if (!reqs.empty()) {
      ++it;
      continue;
    }
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* r = api_.ep_close_nbx(it->ep, &p);
    if (r && !UCS_PTR_IS_ERR(r)) closing_.emplace_back(r, std::move(it->state));
    it = deferred_.erase(it);
  }
  for (auto it = closing_.begin(); it != closing_.end();) {
    if (api_.request_check_status(it->first) == UCS_INPROGRESS) {
      ++it;
      continue;
    }
    api_.request_free(it->first);
    it = closing_.erase(it);
  }
}

std::shared_ptr<Worker> Worker::acquire() {
  const Api& a = api();
  std::lock_guard<std::mutex> lk(registryMutex());
  if (auto w = currentWorker().lock()) return w;
  std::shared_ptr<Context> ctx = contextLocked(a);
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // Every call is serialized by Worker::mutex().
  params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucp_worker_h handle = nullptr;
  ucs_status_t st = a.worker_create(ctx->handle(), &params, &handle);
  if (st != UCS_OK) fail(a, "ucp_worker_create", st);
  ucp_address_t* addr = nullptr;
  size_t len = 0;
  st = a.worker_get_address(handle, &addr, &len);
  if (st != UCS_OK) {
    a.worker_destroy(handle);
    fail(a, "ucp_worker_get_address", st);
  }
  const auto* bytes = reinterpret_cast<const uint8_t*>(addr);
  std::vector<uint8_t> address(bytes, bytes + len);
  a.worker_release_address(handle, addr);
  std::shared_ptr<Worker> w(new Worker(std::move(ctx), handle, std::move(address)));
  currentWorker() = w;
  STRATA_INFO(kLogNet, "UCX worker created (%zu-byte address)", w->address().size());
  return w;
}

}  // namespace strata::ucx
