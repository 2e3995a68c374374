"""Which tests of PyTorch's DistributedTest._DistTestBase the runner runs, and which are gated by name.

Used by suite_worker.py (see run_torch_suite.py for how to run the suite). Tests are chosen by name over the
class's test methods, so a torch upgrade that adds a collective test picks it up without an edit here.
"""
from __future__ import annotations

import fnmatch
import inspect
import re

# ---- full: the collective, group, p2p, monitored-barrier and CPU DDP tests ------------------------------------
# (torch 2.15's _DistTestBase has no sequence_num* or new_group* test; those patterns are there for other versions.)
_COLLECTIVES = (
    "all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all", "gather", "scatter",
    "barrier", "send_recv", "isend", "irecv", "batch_isend_irecv", "monitored_barrier", "sequence_num",
)
_GROUPS = (
    "new_group", "new_subgroups", "get_backend", "destroy_group", "destroy_full_group", "get_rank_size_group",
    "get_rank_size_full_group",
)
FULL_NAME = re.compile(r"^test_(%s)" % "|".join(_COLLECTIVES + _GROUPS))
# DDP tests: by name, or by a body that builds a DistributedDataParallel model.
DDP_NAME = re.compile(r"ddp|DistributedDataParallel|SyncBatchNorm|sync_bn|accumulate_gradients|static_graph"
                      r"|unused_param|output_unused|across_rank|post_localSGD|undefined_grad", re.IGNORECASE)
# Tests that need a GPU (by name or decorator): they would only skip on a CPU machine, so they are left out.
CUDA_NAME = re.compile(r"cuda|nccl|gpu", re.IGNORECASE)

# ---- ci: a bounded subset (26 tests, about 2.5 minutes per backend at 2 ranks on 2 cores) ---------------------
# One or two tests per collective and feature rather than every op and group variant (the full selection has
# those). Four are gated on gloo's name: for strata they run as gloo (suite_worker.AS_GLOO). Left out: the
# all_to_all tests (torch runs them on CPU only for MPI: they skip for gloo too), tests that skip for gloo as
# well at 2 ranks (object lists at world size != 4, NCCL-only batch p2p, the *_group tests, which need 8 ranks),
# and recv from any source (in the full selection; the ci subset keeps one send/recv test per form).
CI_TESTS = (
    "test_all_reduce_sum", "test_all_reduce_sum_async", "test_all_reduce_product", "test_all_reduce_sum_complex",
    "test_all_reduce_complex_unsupported_ops", "test_all_reduce_coalesced_sum",
    "test_all_gather", "test_all_gather_coalesced_simple", "test_all_gather_coalesced_with_empty",
    "test_all_gather_object_default_pg",
    "test_broadcast", "test_reduce_sum", "test_gather", "test_gather_checks", "test_scatter",
    "test_barrier", "test_barrier_timeout_global", "test_monitored_barrier_gloo",
    "test_send_recv", "test_send_recv_with_tag", "test_isend", "test_irecv",
    "test_batch_isend_irecv_gloo", "test_get_backend",
    "test_DistributedDataParallelCPU", "test_ddp_logging_data_cpu",
)

# ---- gated by name -------------------------------------------------------------------------------------------
# Tests that run for gloo but whose decorator compares BACKEND with literal backend names (not a DistTestCases
# set the worker can extend), so they skip for strata and cannot run without editing torch's file. Found by
# comparing `suite_worker.py --select full --list` for BACKEND=gloo and BACKEND=strata (torch 2.15); the
# reason quotes the decorator.
_TIMEOUTS = 'skip_but_pass_in_sandcastle_if(BACKEND != "gloo", "Only gloo backend supports timeouts")'
_BATCH_P2P = 'skip_but_pass_in_sandcastle_if(BACKEND != "gloo", "GLOO Batch Send Recv CPU")'
_GET_FUTURE = ('skip_but_pass_in_sandcastle_if(BACKEND not in mpi/nccl/gloo, '
               '"get_future is only supported on mpi, nccl and gloo")')
_GLOO_ONLY = 'require_backend_is_available({"gloo"})'
GATED_BY_NAME = {
    **dict.fromkeys(("test_barrier_timeout_global", "test_barrier_timeout_group", "test_barrier_timeout_full_group"),
                    _TIMEOUTS),
    **dict.fromkeys(("test_batch_isend_irecv_gloo", "test_batch_isend_irecv_gloo_tags"), _BATCH_P2P),
    **dict.fromkeys(("test_accumulate_gradients_no_sync", "test_accumulate_gradients_no_sync_allreduce_hook",
                     "test_accumulate_gradients_no_sync_allreduce_with_then_hook",
                     "test_accumulate_gradients_no_sync_grad_is_view"), _GET_FUTURE),
    **dict.fromkeys([f"test_all_reduce_coalesced_{g}{op}" for g in ("", "group_", "full_group_")
                     for op in ("sum", "product", "min", "max")], _GLOO_ONLY),
    **dict.fromkeys(("test_monitored_barrier_gloo", "test_monitored_barrier_gloo_subgroup",
                     "test_monitored_barrier_gloo_rank_0_timeout", "test_monitored_barrier_failure_order",
                     "test_monitored_barrier_wait_all_ranks"), _GLOO_ONLY),
    **dict.fromkeys(("test_scatter_object_list", "test_grads_same_across_ranks_with_no_sync"), _GLOO_ONLY),
}


def _source(fn) -> str:
    try:
        return inspect.getsource(fn)  # unwraps decorators; the text starts at the first decorator
    except (OSError, TypeError):
        return ""


def _decorators(fn) -> list[str]:
    lines = [line.strip() for line in _source(fn).splitlines()]
    return lines[:next((i for i, line in enumerate(lines) if line.startswith("def ")), 0)]


def needs_cuda(name: str, fn) -> bool:
    def gpu_only(decorator: str) -> bool:
        return decorator.startswith("@skip_if_no_gpu") or (
            decorator.startswith("@skip_if_lt_x_gpu") and "allow_cpu=True" not in decorator)

    return bool(CUDA_NAME.search(name)) or any(gpu_only(d) for d in _decorators(fn))


def in_full(name: str, fn) -> bool:
    if needs_cuda(name, fn):
        return False
    return bool(FULL_NAME.match(name) or DDP_NAME.search(name) or "DistributedDataParallel(" in _source(fn))


def select(test_class, selection: str, patterns: list[str]) -> list[str]:
    """The test names of `test_class` in `selection` ("ci" or "full") that match any of `patterns` (a
    substring, or a shell pattern when it holds * ? or [); all of them when `patterns` is empty."""
    names = sorted(n for n in dir(test_class) if n.startswith("test_"))
    if selection == "ci":
        missing = set(CI_TESTS) - set(names)
        if missing:
            raise SystemExit(f"ci selection names tests this torch does not have: {sorted(missing)}")
        names = [n for n in names if n in CI_TESTS]
    elif selection == "full":
        names = [n for n in names if in_full(n, getattr(test_class, n))]
    else:
        raise SystemExit(f"unknown selection {selection!r} (ci or full)")

    def matches(name: str, pattern: str) -> bool:
        return fnmatch.fnmatchcase(name, pattern) if any(c in pattern for c in "*?[") else pattern in name

    return [n for n in names if not patterns or any(matches(n, p) for p in patterns)]
