#!/usr/bin/env bash
# The format check can fail: a tree with one badly formatted file fails and names it; formatted, it passes.
# usage: test_format_check.sh SOURCE_DIR
set -euo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$src/.clang-format" "$tmp/"
mkdir -p "$tmp/src"
printf 'int  f( int x ){return x+1;}\n' > "$tmp/src/bad.cc"
printf 'int f(int x) { return x + 1; }\n' > "$tmp/src/good.cc"
rc=0
out=$(bash "$src/scripts/check_format.sh" --root "$tmp" 2>&1) || rc=$?
if [[ $rc -eq 77 ]]; then echo "$out"; exit 77; fi
if [[ $rc -ne 1 || $out != *"src/bad.cc: not formatted"* || $out == *"src/good.cc"* ]]; then
  echo "FAIL: expected exactly src/bad.cc to be reported (rc=$rc):"
  echo "$out"
  exit 1
fi
bash "$src/scripts/check_format.sh" --root "$tmp" --fix >/dev/null
bash "$src/scripts/check_format.sh" --root "$tmp"
echo "the misformatted file was caught, and passes once formatted"
