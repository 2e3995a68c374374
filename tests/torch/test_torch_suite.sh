#!/usr/bin/env bash
# ctest entry for PyTorch's distributed test suite over strata (see run_torch_suite.py):
#
#     PYTHONPATH=build/python tests/torch/test_torch_suite.sh [run_torch_suite.py options, e.g. --out FILE]
#
# Runs `--select ci` for strata and gloo at world size 2 and exits non-zero iff strata does not pass a test
# that gloo passes, unless the test is gated by name or listed in known_differences.txt beside this script.
# Exits 77 (ctest's SKIP_RETURN_CODE) when torch or expecttest, which torch's test helpers import, is missing.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${PYTHON:-python3}
if ! "$python" -c "import torch, expecttest" 2>/dev/null; then
    echo "skipped: needs torch and expecttest (pip install expecttest)"
    exit 77
fi
exec "$python" "$here/run_torch_suite.py" --backend strata,gloo --world-size 2 --select ci --table \
    --known-differences "$here/known_differences.txt" "$@"
