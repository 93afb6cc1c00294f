#!/usr/bin/env bash
# Builds the libFuzzer harness fuzz_api (fuzz/driver.c, model.c, ops_*.c) with
# clang, AddressSanitizer, UndefinedBehaviorSanitizer and the library's
# internal checks in build-fuzz/, then fuzzes the API on a copy of fuzz/corpus
# for a while.
#
#   bash fuzz/run.sh [seconds] [extra libFuzzer arguments...]
#
# seconds defaults to 60. The working corpus (build-fuzz/corpus) and crash
# reproducers (build-fuzz/artifacts/) stay between runs; the full libFuzzer
# log is build-fuzz/fuzz.log. Exits non-zero when libFuzzer finds a crash, a
# leak or a hang. Environment: CPOOL_FUZZ_BUILD_DIR (build directory),
# CPOOL_FUZZ_CC (the clang to use).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

seconds=${1:-60}
if [[ $# -gt 0 ]]; then shift; fi
if ! [[ $seconds =~ ^[0-9]+$ ]]; then
    echo "fuzz/run.sh: the first argument is a number of seconds, not '$seconds'" >&2
    exit 2
fi

build_dir=${CPOOL_FUZZ_BUILD_DIR:-build-fuzz}
cc=${CPOOL_FUZZ_CC:-}
if [[ -z $cc ]]; then
    for candidate in clang clang-19 clang-18 clang-17 clang-16 clang-15 clang-14; do
        if command -v "$candidate" >/dev/null 2>&1; then
            cc=$candidate
            break
        fi
    done
fi
if [[ -z $cc ]] || ! command -v "$cc" >/dev/null 2>&1; then
    echo "fuzz/run.sh: clang with libFuzzer is needed (e.g. apt-get install clang)" >&2
    exit 2
fi

configure_args=(-S . -B "$build_dir" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=Debug
    -DCPOOL_CUDA=OFF -DCPOOL_BUILD_FUZZ=ON -DCPOOL_DEBUG_CHECKS=ON -DCPOOL_FAULT_INJECTION=OFF
    -DCPOOL_BUILD_TESTS=OFF -DCPOOL_BUILD_EXAMPLES=OFF -DCPOOL_BUILD_BENCH=OFF)
if [[ ! -f $build_dir/CMakeCache.txt ]]; then
    if command -v ninja >/dev/null 2>&1; then
        configure_args+=(-G Ninja)
    else
        configure_args+=(-G "Unix Makefiles")
    fi
fi
cmake "${configure_args[@]}" >/dev/null
cmake --build "$build_dir" --target fuzz_api -j "$(nproc 2>/dev/null || echo 2)"

corpus=$build_dir/corpus
artifacts=$build_dir/artifacts
log=$build_dir/fuzz.log
mkdir -p "$corpus" "$artifacts"
cp fuzz/corpus/* "$corpus"/

# The full walk of every pool's memory after each call (src/support/debug.h).
export CPOOL_DEBUG_FULL=${CPOOL_DEBUG_FULL:-1}
echo "fuzz/run.sh: fuzzing for $seconds s (corpus $corpus, log $log)"
status=0
"$build_dir/fuzz/fuzz_api" "$corpus" -max_total_time="$seconds" -max_len=2048 -timeout=30 \
    -detect_leaks=1 -print_final_stats=1 -artifact_prefix="$artifacts/" "$@" >"$log" 2>&1 || status=$?

# The log without the lines for each new input and the recommended
# dictionary; the crash report and the final statistics stay.
sed '/^###### Recommended dictionary/,/^###### End of recommended dictionary/d' "$log" |
    grep -Ev '^#[0-9]+[[:space:]]+(NEW|REDUCE)|NEW_FUNC' | tail -n 60
if [[ $status -ne 0 ]]; then
    echo "fuzz/run.sh: libFuzzer exited with status $status; reproducers in $artifacts/:" >&2
    ls -t "$artifacts" | head -n 5 >&2
    echo "fuzz/run.sh: rerun one with: FUZZ_API_TRACE=1 $build_dir/fuzz/fuzz_api <file>" >&2
    exit "$status"
fi
echo "fuzz/run.sh: no crash in $seconds s"
