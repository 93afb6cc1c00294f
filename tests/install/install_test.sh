#!/bin/sh
# Driven by tests/install/CMakeLists.txt through ctest; the environment
# (CPOOL_*) comes from there. One argument, the step:
#   install_prefix        install the build tree into $CPOOL_PREFIX
#   install_find_package  configure, build and run consumer/ with find_package
#   install_pkg_config    compile consumer/consumer.c with pkg-config, against the
#                         shared and the static library, and run both
# Exit 0: passed; 77: skipped (the reason is printed); anything else: failed.
set -eu

step=${1:?usage: install_test.sh install_prefix|install_find_package|install_pkg_config}
prefix=$CPOOL_PREFIX
case $CPOOL_LIBDIR in
/*) libdir=$CPOOL_LIBDIR ;;
*) libdir=$prefix/$CPOOL_LIBDIR ;;
esac
work=$CPOOL_WORK/$step

# The installed library and, in a CUDA build, its libcudart.
LD_LIBRARY_PATH=$libdir${CPOOL_CUDA_LIBDIR:+:$CPOOL_CUDA_LIBDIR}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH

run() {
    echo "+ $*"
    "$@"
}

case $step in
install_prefix)
    rm -rf "$prefix"
    run "$CPOOL_CMAKE" --install "$CPOOL_BUILD_DIR" --prefix "$prefix"
    for f in "$prefix/${CPOOL_INCLUDEDIR}/capturepool.h" \
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
        -DCPOOL_EXPECTED_VERSION="$CPOOL_VERSION"
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
    ;;

*)
    echo "unknown step: $step"
    exit 2
    ;;
esac
