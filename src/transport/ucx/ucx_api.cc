#include "transport/ucx/ucx_api.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "util/error.h"
#include "util/log.h"

namespace strata::ucx {
namespace {

constexpr const char* kLibrary = "libucp.so.0";

template <typename Fn>
void bind(void* lib, Fn& fn, const char* name, std::string& missing) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (!fn) missing += std::string(missing.empty() ? "" : ", ") + name;
}

Api load() {
  void* lib = dlopen(kLibrary, RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    const char* why = dlerror();
    throw InvalidUsage(
        strprintf("STRATA_TRANSPORT=ucx / STRATA_NET=ucx: cannot load %s (%s): install UCX "
                  "(Debian: libucx0) or use tcp",
                  kLibrary, why ? why : "unknown error"));
  }
  // Never dlclose: UCX keeps threads, hooks and handlers that do not survive being unloaded.
  Api a{};
  std::string missing;
  bind(lib, a.get_version, "ucp_get_version", missing);
  bind(lib, a.config_read, "ucp_config_read", missing);
  bind(lib, a.config_release, "ucp_config_release", missing);
  bind(lib, a.init_version, "ucp_init_version", missing);
  bind(lib, a.cleanup, "ucp_cleanup", missing);
  bind(lib, a.worker_create, "ucp_worker_create", missing);
  bind(lib, a.worker_destroy, "ucp_worker_destroy", missing);
  bind(lib, a.worker_get_address, "ucp_worker_get_address", missing);
  bind(lib, a.worker_release_address, "ucp_worker_release_address", missing);
  bind(lib, a.worker_progress, "ucp_worker_progress", missing);
  bind(lib, a.ep_create, "ucp_ep_create", missing);
  bind(lib, a.ep_close_nbx, "ucp_ep_close_nbx", missing);
  bind(lib, a.ep_flush_nbx, "ucp_ep_flush_nbx", missing);
  bind(lib, a.tag_send_nbx, "ucp_tag_send_nbx", missing);
  bind(lib, a.tag_recv_nbx, "ucp_tag_recv_nbx", missing);
  bind(lib, a.tag_recv_request_test, "ucp_tag_recv_request_test", missing);
  bind(lib, a.request_check_status, "ucp_request_check_status", missing);
  bind(lib, a.request_cancel, "ucp_request_cancel", missing);
  bind(lib, a.request_free, "ucp_request_free", missing);
  bind(lib, a.status_string, "ucs_status_string", missing);
  std::string optional;
  bind(lib, a.global_opts_set_value, "ucs_global_opts_set_value", optional);
  if (a.get_version) a.get_version(&a.major, &a.minor, &a.release);
  if (!missing.empty()) {
    throw InvalidUsage(
        strprintf("STRATA_TRANSPORT=ucx / STRATA_NET=ucx: %s (UCX %u.%u.%u) lacks %s: UCX 1.10 or "
                  "newer is needed",
                  kLibrary, a.major, a.minor, a.release, missing.c_str()));
  }
  STRATA_INFO(kLogNet, "loaded %s: UCX %u.%u.%u (built against the %d.%d API)", kLibrary, a.major, a.minor, a.release,
              UCP_API_MAJOR, UCP_API_MINOR);
  return a;
}

}  // namespace

const Api& api() {
  // Loaded once; a failure is remembered and reported again on every call.
  static std::once_flag once;
  static Api loaded{};
  static std::string error;
  std::call_once(once, [] {
    try {
      loaded = load();
    } catch (const Error& e) {
      error = e.what();
    }
  });
  if (!error.empty()) throw InvalidUsage(error);
  return loaded;
}

}  // namespace strata::ucx
