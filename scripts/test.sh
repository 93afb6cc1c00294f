#!/usr/bin/env bash
# Builds capturepool with warnings as errors, the allocator's internal
# checks and the fault injection hooks (in build-test/), then runs the whole
# test suite with ctest (the fault sweep included), and lists the tests that
# skipped with the reason each printed (its "SKIPPED: " line).
# Extra arguments go to the CMake configure step; CPOOL_BUILD_DIR picks another
# build directory (e.g. for a sanitizer build). Safe to run again.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir=${CPOOL_BUILD_DIR:-build-test}
jobs=$(nproc 2>/dev/null || echo 2)

configure_args=(-S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Debug -DCPOOL_WERROR=ON -DCPOOL_DEBUG_CHECKS=ON
    -DCPOOL_FAULT_INJECTION=ON)
# Pick a generator only for a new build directory: CMake refuses to switch.
if [[ ! -f $build_dir/CMakeCache.txt ]]; then
    if command -v ninja >/dev/null 2>&1; then
        configure_args+=(-G Ninja)
    else
        configure_args+=(-G "Unix Makefiles")
    fi
fi

cmake "${configure_args[@]}" "$@"
cmake --build "$build_dir" -j "$jobs"
cd "$build_dir"
status=0
ctest --output-on-failure -j "$jobs" || status=$?
# ctest shows a skipped test's output nowhere but in its log.
log=Testing/Temporary/LastTest.log
if [[ -f $log ]]; then
    skips=$(awk '/^[0-9]+\/[0-9]+ Test: /{name = $3}
                 /^SKIPPED: /{sub(/^SKIPPED: /, ""); print "  " name ": " $0}' "$log")
    if [[ -n $skips ]]; then
        echo "Skipped tests and why:"
        echo "$skips"
    fi
fi
exit "$status"
