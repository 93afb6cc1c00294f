#!/bin/sh
# Driven by tests/install/CMakeLists.txt through ctest; the environment
# (CPOOL_*) comes from there. One argument, the step:
#   install_prefix        install the build tree into $CPOOL_PREFIX
#   install_find_package  configure, build and run consumer/ with find_package
#                         (the C consumers, and the C++ one of capturepool.hpp)
#   install_pkg_config    compile consumer/consumer.c with pkg-config, against the
#                         shared and the static library, and run both
#   install_no_cuda       compile consumer/consumer.c against the shared library
#                         and run it with no CUDA library in reach: AUTO must
#                         give the host backend
# Exit 0: passed; 77: skipped (the reason is printed); anything else: failed.
set -eu

step=${1:?usage: install_test.sh install_prefix|install_find_package|install_pkg_config|install_no_cuda}
prefix=$CPOOL_PREFIX
case $CPOOL_LIBDIR in
/*) libdir=$CPOOL_LIBDIR ;;
*) libdir=$prefix/$CPOOL_LIBDIR ;;
esac
work=$CPOOL_WORK/$step

# The installed library, and nothing else: it needs no CUDA library (the
# CUDA runtime is linked into it).
LD_LIBRARY_PATH=$libdir
export LD_LIBRARY_PATH

run() {
    echo "+ $*"
    "$@"
}

# Whether the dynamic linker can find the CUDA driver (libcuda.so.1) with
# LD_LIBRARY_PATH=$libdir: in its cache or a default directory.
driver_reachable() {
    ldconfig=$(command -v ldconfig || echo /sbin/ldconfig)
    if "$ldconfig" -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
        return 0
    fi
    for d in /lib /lib64 /usr/lib /usr/lib64 /lib/*-linux-gnu /usr/lib/*-linux-gnu; do
        [ -e "$d/libcuda.so.1" ] && return 0
    done
    return 1
}

# Runs the program $1 with an environment of PATH and LD_LIBRARY_PATH=$libdir
# and the assignments after it; its output must name the host backend.
run_expecting_host() {
    exe=$1
    shift
    out=$work/run.out
    if ! run env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$libdir" "$@" "$exe" >"$out" 2>&1; then
        cat "$out"
        echo "FAIL: $exe failed"
        exit 1
    fi
    cat "$out"
    if ! grep -q ', host backend,' "$out"; then
        echo "FAIL: $exe did not use the host backend${1:+ with $*}"
        exit 1
    fi
}

# Runs the program $1 as a machine without CUDA would: it must load no CUDA
# library (ldd), and CPOOL_BACKEND_AUTO must give the host backend where the
# driver is out of reach, and also where it is in reach but
# CUDA_VISIBLE_DEVICES hides every device.
check_without_cuda() {
    echo "+ ldd $1"
    deps=$(ldd "$1")
    echo "$deps"
    if echo "$deps" | grep -E 'libcuda|libcudart' >/dev/null; then
        echo "FAIL: $1 needs a CUDA library at load time"
        exit 1
    fi
    if driver_reachable; then
        echo "note: libcuda.so.1 is in the dynamic linker's reach here; the run without the driver happens where it is not"
    else
        run_expecting_host "$1"
    fi
    run_expecting_host "$1" CUDA_VISIBLE_DEVICES=-1
}

case $step in
install_prefix)
    rm -rf "$prefix"
    run "$CPOOL_CMAKE" --install "$CPOOL_BUILD_DIR" --prefix "$prefix"
    # The shared library needs no CUDA library to load.
    echo "+ readelf -d $libdir/libcapturepool.so"
    needed=$(readelf -d "$libdir/libcapturepool.so" | grep NEEDED)
    echo "$needed"
    if echo "$needed" | grep -E 'libcuda|libcudart' >/dev/null; then
        echo "FAIL: libcapturepool.so needs a CUDA library at load time"
        exit 1
    fi
    for f in "$prefix/${CPOOL_INCLUDEDIR}/capturepool.h" "$prefix/${CPOOL_INCLUDEDIR}/capturepool.hpp" \
        "$libdir/cmake/capturepool/capturepoolConfig.cmake" \
        "$libdir/cmake/capturepool/capturepoolConfigVersion.cmake" \
        "$libdir/pkgconfig/capturepool.pc"; do
        if [ ! -f "$f" ]; then
            echo "FAIL: not installed: $f"
            exit 1
        fi
    done
    if ! ls "$libdir"/libcapturepool.so* >/dev/null 2>&1 || [ ! -f "$libdir/libcapturepool.a" ]; then
        echo "FAIL: libcapturepool.so / libcapturepool.a missing in $libdir"
        exit 1
    fi
    echo "installed into $prefix:"
    (cd "$prefix" && find . -type f -o -type l | sort)
    ;;

install_find_package)
    rm -rf "$work"
    set -- -S "$CPOOL_CONSUMER_SRC" -B "$work" -G "$CPOOL_GENERATOR" \
        -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$CPOOL_CC" \
        -DCPOOL_EXPECTED_VERSION="$CPOOL_VERSION" -DCPOOL_EXPECTED_HAS_CUDA="$CPOOL_HAS_CUDA"
    if [ -n "$CPOOL_MAKE_PROGRAM" ]; then
        set -- "$@" -DCMAKE_MAKE_PROGRAM="$CPOOL_MAKE_PROGRAM"
    fi
    if [ -n "$CPOOL_CUDA_ROOT" ]; then
        set -- "$@" -DCUDAToolkit_ROOT="$CPOOL_CUDA_ROOT"
    fi
    run "$CPOOL_CMAKE" "$@"
    run "$CPOOL_CMAKE" --build "$work"
    run "$work/consumer"
    run "$work/consumer_static"
    # The C++ consumer of capturepool.hpp, built where CMake found a C++ compiler.
    if [ -x "$work/consumer_cpp" ]; then
        run "$work/consumer_cpp"
    else
        echo "note: no C++ compiler for the consumer: consumer_cpp not built"
    fi
    ;;

install_pkg_config)
    if ! command -v pkg-config >/dev/null 2>&1; then
        echo "SKIPPED: pkg-config is not installed"
        exit 77
    fi
    rm -rf "$work"
    mkdir -p "$work"
    PKG_CONFIG_PATH=$libdir/pkgconfig
    export PKG_CONFIG_PATH
    unset PKG_CONFIG_LIBDIR PKG_CONFIG_SYSROOT_DIR 2>/dev/null || true
    run pkg-config --print-errors --exists capturepool
    version=$(pkg-config --modversion capturepool)
    if [ "$version" != "$CPOOL_VERSION" ]; then
        echo "FAIL: pkg-config --modversion capturepool says '$version', expected '$CPOOL_VERSION'"
        exit 1
    fi
    case $(pkg-config --variable=cuda_backend capturepool) in
    yes | no) ;;
    *)
        echo "FAIL: pkg-config --variable=cuda_backend capturepool is neither yes nor no"
        exit 1
        ;;
    esac
    # The .pc file finds its prefix relative to where it was installed, so
    # it must resolve to this --prefix without any override.
    pc_prefix=$(pkg-config --variable=prefix capturepool)
    if [ "$(cd "$pc_prefix" && pwd -P)" != "$(cd "$prefix" && pwd -P)" ]; then
        echo "FAIL: capturepool.pc resolves prefix=$pc_prefix, installed at $prefix"
        exit 1
    fi
    cuda_backend=$(pkg-config --variable=cuda_backend capturepool)
    case $CPOOL_HAS_CUDA in
    ON) expected=yes ;;
    *) expected=no ;;
    esac
    if [ "$cuda_backend" != "$expected" ]; then
        echo "FAIL: pkg-config --variable=cuda_backend capturepool says '$cuda_backend', expected '$expected'"
        exit 1
    fi
    echo "cuda_backend=$cuda_backend"
    set --
    cflags=$(pkg-config "$@" --cflags capturepool)
    libs=$(pkg-config "$@" --libs capturepool)
    # Word splitting of the pkg-config output is intended.
    # shellcheck disable=SC2086
    run "$CPOOL_CC" -std=c11 -Wall -Wextra -Wpedantic -Werror \
        -DCPOOL_EXPECTED_VERSION="\"$CPOOL_VERSION\"" \
        "$CPOOL_CONSUMER_SRC/consumer.c" $cflags $libs -o "$work/consumer_pc"
    run "$work/consumer_pc"
    # The static library with the dependencies the .pc file lists (Libs.private).
    static_libs=$(pkg-config "$@" --static --libs capturepool | sed 's/-lcapturepool\b/-l:libcapturepool.a/')
    # shellcheck disable=SC2086
    run "$CPOOL_CC" -std=c11 -Wall -Wextra -Wpedantic -Werror \
        -DCPOOL_EXPECTED_VERSION="\"$CPOOL_VERSION\"" \
        "$CPOOL_CONSUMER_SRC/consumer.c" $cflags $static_libs -o "$work/consumer_pc_static"
    run "$work/consumer_pc_static"
    # Linked statically, the program carries the CUDA runtime and still needs
    # no CUDA library to run.
    check_without_cuda "$work/consumer_pc_static"
    ;;

install_no_cuda)
    rm -rf "$work"
    mkdir -p "$work"
    run "$CPOOL_CC" -std=c11 -Wall -Wextra -Wpedantic -Werror \
        -DCPOOL_EXPECTED_VERSION="\"$CPOOL_VERSION\"" -I"$prefix/$CPOOL_INCLUDEDIR" \
        "$CPOOL_CONSUMER_SRC/consumer.c" -L"$libdir" -lcapturepool -o "$work/consumer_no_cuda"
    check_without_cuda "$work/consumer_no_cuda"
    ;;

*)
    echo "unknown step: $step"
    exit 2
    ;;
esac
