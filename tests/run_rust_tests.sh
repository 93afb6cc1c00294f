#!/bin/sh
# Driven by tests/CMakeLists.txt (the test rust_bindings): runs
# `cargo test --offline` in bindings/rust against this build's
# libcapturepool.a (CAPTUREPOOL_LIB_DIR: build.rs does not build the library
# again), then the Rust examples (the seed's usage and examples/rust) and
# the Rust benchmark as a smoke run (bench/rust). The
# environment (CPOOL_*) comes from there.
# In a sanitizer build (CPOOL_C_FLAGS with -fsanitize=...) the tests are
# linked with the same -fsanitize flags, which bring the sanitizer runtimes
# the instrumented library needs; ThreadSanitizer is skipped (see below).
# Exit 0: passed; 77: skipped (the reason is printed); anything else: failed.
set -eu

cargo=${CPOOL_CARGO:-cargo}
if ! command -v "$cargo" >/dev/null 2>&1; then
    echo "SKIPPED: cargo was not found, the Rust bindings are not tested"
    exit 77
fi

link_args=
for flag in $CPOOL_C_FLAGS; do
    case $flag in
    -fsanitize=*thread*)
        echo "SKIPPED: ThreadSanitizer needs the Rust standard library instrumented too (nightly -Zsanitizer=thread with -Zbuild-std); the plain and ASan builds run the Rust tests"
        exit 77
        ;;
    -fsanitize=*)
        # rustc links with -nodefaultlibs, which drops the runtimes that
        # -fsanitize adds at the link: name them as well.
        link_args="$link_args -Clink-arg=$flag"
        case $flag in *address*) link_args="$link_args -Clink-arg=-lasan" ;; esac
        case $flag in *undefined*) link_args="$link_args -Clink-arg=-lubsan" ;; esac
        ;;
    esac
done
if [ -n "$link_args" ]; then
    RUSTFLAGS="${RUSTFLAGS:-}$link_args"
    export RUSTFLAGS
    echo "RUSTFLAGS=$RUSTFLAGS"
    # ASan's runtime must come first in the program's library list, which
    # rustc's link line cannot order: the test programs (not cargo or rustc)
    # run with it preloaded, through cargo's runner.
    case $link_args in
    *-lasan*)
        asan_rt=$("${CPOOL_CC:-cc}" -print-file-name=libasan.so)
        CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER="env LD_PRELOAD=$asan_rt"
        export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER
        echo "runner: $CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER"
        ;;
    esac
fi

CAPTUREPOOL_LIB_DIR=$CPOOL_LIB_DIR
CARGO_TARGET_DIR=$CPOOL_CARGO_TARGET_DIR
CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2}
export CAPTUREPOOL_LIB_DIR CARGO_TARGET_DIR CARGO_BUILD_JOBS

cd "$CPOOL_SOURCE_DIR/bindings/rust"
set -x
# One test at a time: on the CUDA backend a capture in global mode (the
# tests' default) makes CUDA refuse unsafe calls on every other thread
# (cudaErrorStreamCaptureUnsupported), so tests running side by side in one
# process would break each other's calls. Tests that use threads start them.
"$cargo" test --offline --workspace -- --test-threads=1
"$cargo" run --offline --example seed_usage
"$cargo" run --offline -p capturepool-demo -- --steps 5
"$cargo" run --offline -p capturepool-bench -- --smoke
