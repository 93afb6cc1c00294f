#!/usr/bin/env bash
# Builds capturepool (Release, in build/) and runs the demo. Arguments are
# passed to the demo (e.g. --quick, --n 65536). Safe to run again. It builds
# the installed libraries too, so that `cmake --install build` works after it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir=${CPOOL_BUILD_DIR:-build}
jobs=$(nproc 2>/dev/null || echo 2)

configure_args=(-S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release)
# Pick a generator only for a new build directory: CMake refuses to switch.
if [[ ! -f $build_dir/CMakeCache.txt ]]; then
    if command -v ninja >/dev/null 2>&1; then
        configure_args+=(-G Ninja)
    else
        configure_args+=(-G "Unix Makefiles")
    fi
fi

cmake "${configure_args[@]}"
cmake --build "$build_dir" --target demo capturepool capturepool_static -j "$jobs"
"$build_dir/examples/demo" "$@"
