#!/usr/bin/env bash
# Installs Strata into a temporary prefix, builds consumers against the installed files only
# (CMake package, pkg-config, and an MPI program), and runs the MPI comparison for N = 1..5.
# usage: test_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
prefix=$(mktemp -d)
work=$(mktemp -d)
trap 'rm -rf "$prefix" "$work"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
test -f "$prefix/include/strata/strata.h"
test -f "$prefix/include/strata/strata.hpp"
libdir=$(dirname "$(find "$prefix" -name 'libstrata.so' | head -1)")
test -f "$libdir/pkgconfig/strata.pc"
test -f "$libdir/cmake/strata/strataConfig.cmake"

# CMake package consumer.
cmake -S "$src/tests/install" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cmake" >/dev/null
LD_LIBRARY_PATH="$libdir" "$work/cmake/consumer_cxx"

# pkg-config consumer.
PKG_CONFIG_PATH="$libdir/pkgconfig" g++ -std=c++17 "$src/tests/install/consumer.cc" -o "$work/consumer_pc" \
  $(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs strata) -Wl,-rpath,"$libdir"
"$work/consumer_pc"

# MPI program against the installed header and library; unique id passed by MPI_Bcast.
if ! command -v mpicc >/dev/null; then
  echo "mpicc not found: install openmpi (scripts/install_deps.sh)"; exit 1
fi
mpicc -O2 -Wall -Werror "$src/tests/install/mpi_compat.c" -I"$prefix/include" -L"$libdir" -lstrata \
  -Wl,-rpath,"$libdir" -o "$work/mpi_compat"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
for n in 1 2 3 4 5; do
  mpirun -n "$n" --oversubscribe --mca btl self,vader,tcp "$work/mpi_compat" 60
done
echo "install test passed"
