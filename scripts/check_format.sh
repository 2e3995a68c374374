#!/usr/bin/env bash
# Fails when a C, C++ or CUDA source of the repository is not formatted as .clang-format says (Google base, 120
# columns), naming each file; `scripts/check_format.sh --fix` formats them in place.
# usage: scripts/check_format.sh [--fix] [--root DIR]
# clang-format 14 (Debian 12's, installed by scripts/install_deps.sh) is the reference: other versions format
# some constructs differently, so with another version the check is skipped (exit 77) rather than wrong.
set -euo pipefail
fix=0
root=$(cd "$(dirname "$0")/.." && pwd)
while (($#)); do
  case $1 in
    --fix) fix=1 ;;
    --root) root=$(cd "$2" && pwd); shift ;;
    *) echo "usage: $0 [--fix] [--root DIR]" >&2; exit 2 ;;
  esac
  shift
done
cf=""
for c in clang-format-14 clang-format; do
  if command -v "$c" >/dev/null && "$c" --version | grep -q "version 14\."; then cf=$c; break; fi
done
if [[ -z $cf ]]; then
  echo "check_format: clang-format 14 not found (scripts/install_deps.sh installs it); skipped"
  exit 77
fi
cd "$root"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1 && [[ $(git rev-parse --show-toplevel) == "$root" ]]; then
  mapfile -t files < <(git ls-files -co --exclude-standard -- '*.c' '*.cc' '*.h' '*.hpp' '*.cu' | sort)
else
  mapfile -t files < <(find . -type d \( -name 'build*' -o -name .git \) -prune -o -type f \
    \( -name '*.c' -o -name '*.cc' -o -name '*.h' -o -name '*.hpp' -o -name '*.cu' \) -print | sed 's|^\./||' | sort)
fi
existing=()
for f in "${files[@]}"; do [[ -f $f ]] && existing+=("$f"); done
if ((fix)); then
  "$cf" -i --style=file "${existing[@]}"
  echo "check_format: formatted ${#existing[@]} files"
  exit 0
fi
bad=0
for f in "${existing[@]}"; do
  if ! "$cf" --style=file --dry-run -Werror "$f" >/dev/null 2>&1; then
    echo "$f: not formatted (scripts/check_format.sh --fix formats it)"
    bad=$((bad + 1))
  fi
done
if ((bad)); then
  echo "check_format: $bad of ${#existing[@]} files not formatted as .clang-format says"
  exit 1
fi
echo "check_format: ${#existing[@]} files formatted"
