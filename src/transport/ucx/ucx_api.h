// The slice of UCP that the UCX transport calls, loaded with dlopen the first time a UCX connection is made.
//
// Strata is compiled against UCX's headers but does not link libucp: a process that never asks for
// STRATA_TRANSPORT=ucx / STRATA_NET=ucx never loads UCX. Loading it has side effects (libucs installs
// its own SIGSEGV/SIGBUS/... handlers and memory hooks when it is loaded), and libstrata.so keeps running on
// machines without UCX installed.
#pragma once

#include <ucp/api/ucp.h>

namespace strata::ucx {

struct Api {
  decltype(&::ucp_get_version) get_version;
  decltype(&::ucp_config_read) config_read;
  decltype(&::ucp_config_release) config_release;
  decltype(&::ucp_init_version) init_version;
  decltype(&::ucp_cleanup) cleanup;
  decltype(&::ucp_worker_create) worker_create;
  decltype(&::ucp_worker_destroy) worker_destroy;
  decltype(&::ucp_worker_get_address) worker_get_address;
  decltype(&::ucp_worker_release_address) worker_release_address;
  decltype(&::ucp_worker_progress) worker_progress;
  decltype(&::ucp_ep_create) ep_create;
  decltype(&::ucp_ep_close_nbx) ep_close_nbx;
  decltype(&::ucp_ep_flush_nbx) ep_flush_nbx;
  decltype(&::ucp_tag_send_nbx) tag_send_nbx;
  decltype(&::ucp_tag_recv_nbx) tag_recv_nbx;
  decltype(&::ucp_tag_recv_request_test) tag_recv_request_test;
  decltype(&::ucp_request_check_status) request_check_status;
  decltype(&::ucp_request_cancel) request_cancel;
  decltype(&::ucp_request_free) request_free;
  decltype(&::ucs_status_string) status_string;
  /// libucs's global options (log level); may be null in a UCX that does not export it.
  ucs_status_t (*global_opts_set_value)(const char* name, const char* value);
  unsigned major = 0, minor = 0, release = 0;
};

/// The loaded API. Throws InvalidUsage naming the library when UCX cannot be loaded or is older than
/// the 1.10 API (the *_nbx calls) it needs.
const Api& api();

}  // namespace strata::ucx
