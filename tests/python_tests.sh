#!/usr/bin/env bash
# The Python package's tests, run by ctest (tests/CMakeLists.txt).
#   python_tests.sh pytest  SOURCE_DIR LIBRARY SHIM "C_FLAGS"
#       python/tests with pytest against the built LIBRARY and SHIM (no
#       install), on the host backend. pytest is installed (pip --user) where
#       it is missing and the network allows. In a build with
#       -fsanitize=address the interpreter, which is not instrumented,
#       runs with the ASan runtime preloaded and leak detection off.
#   python_tests.sh example SOURCE_DIR LIBRARY SHIM "C_FLAGS" SCRIPT
#       runs SCRIPT (examples/python/) the same way, with python/ on the path.
#   python_tests.sh install SOURCE_DIR BINARY_DIR
#       `pip install SOURCE_DIR[test]` into a fresh venv, then a smoke run and
#       python/tests against the installed package.
# Prints "SKIPPED: <why>" and exits 77 where the test cannot run here.
set -uo pipefail
mode=$1
src=$2
py=${CPOOL_PYTHON:-python3}
skip() { echo "SKIPPED: $*"; exit 77; }

command -v "$py" >/dev/null 2>&1 || skip "no $py"

network() { # whether PyPI answers
    "$py" - <<'PY' >/dev/null 2>&1
import urllib.request
urllib.request.urlopen("https://pypi.org/simple/pytest/", timeout=10)
PY
}

if [[ $mode == pytest || $mode == example ]]; then
    lib=$3 shim=$4 cflags=${5:-} script=${6:-}
    if [[ $mode == pytest ]] && ! "$py" -c 'import pytest' >/dev/null 2>&1; then
        if network; then
            echo "python_tests: installing pytest (pip --user)"
            PIP_BREAK_SYSTEM_PACKAGES=1 "$py" -m pip install --user --quiet pytest ||
                echo "python_tests: pip could not install pytest"
        fi
        "$py" -c 'import pytest' >/dev/null 2>&1 ||
            skip "pytest is not installed and could not be (no pip or no network); .ci/run installs it"
    fi
    export CAPTUREPOOL_LIBRARY=$lib CAPTUREPOOL_TORCH_LIBRARY=$shim CPOOL_BACKEND=host
    export PYTHONDONTWRITEBYTECODE=1
    if [[ $cflags == *-fsanitize=thread* ]]; then
        skip "the interpreter is not built with ThreadSanitizer, which cannot see its locks (the GIL) and would report races inside it; the C suite runs under TSan"
    fi
    if [[ $cflags == *-fsanitize=address* ]]; then
        cc=${CC:-cc}
        asan=$("$cc" -print-file-name=libasan.so)
        [[ -f $asan ]] || skip "the library is built with ASan but $cc does not name its runtime (libasan.so)"
        export LD_PRELOAD=$asan${LD_PRELOAD:+:$LD_PRELOAD}
        # The interpreter's own allocations are not ASan's to judge: no leak
        # report at exit; the library's errors still abort.
        export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0:allocator_may_return_null=1
        export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
        echo "python_tests: LD_PRELOAD=$LD_PRELOAD ASAN_OPTIONS=$ASAN_OPTIONS"
    fi
    cd "$src" || exit 1
    if [[ $mode == example ]]; then
        PYTHONPATH=$src/python${PYTHONPATH:+:$PYTHONPATH} exec "$py" "$script"
    fi
    exec "$py" -m pytest -q -p no:cacheprovider python/tests
fi

if [[ $mode == install ]]; then
    bin=$3
    venv=$bin/python-install-venv
    rm -rf "$venv"
    "$py" -m venv "$venv" >/dev/null 2>&1 || skip "$py -m venv does not work here (python3-venv missing?)"
    export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
    if ! "$venv/bin/python" -m pip install "$src[test]" >"$bin/python-install.log" 2>&1; then
        if ! network; then
            skip "pip install needs scikit-build-core and pytest from PyPI, which is not reachable"
        fi
        tail -n 40 "$bin/python-install.log"
        echo "python_install: pip install $src failed (log: $bin/python-install.log)"
        exit 1
    fi
    echo "python_install: installed into $venv"
    cd "$bin" || exit 1
    env -u CAPTUREPOOL_LIBRARY -u CAPTUREPOOL_TORCH_LIBRARY -u PYTHONPATH CPOOL_BACKEND=host \
        "$venv/bin/python" - <<'PY' || exit 1
import os, capturepool as cp
here = os.path.dirname(cp.__file__)
assert cp.library_path.startswith(here), cp.library_path   # the package's own library
from capturepool import _shim
assert os.path.dirname(_shim.shim_path()) == here
with cp.Device() as dev, cp.Stream(dev) as s, cp.Pool(dev) as pool:
    with cp.capture(s, pool) as c:
        cp.memset_async(s, pool.alloc(4096, s), 3, 4096)
    c.graph.launch(s)
    s.synchronize()
    print("python_install: capturepool", cp.__version__, "on", dev.backend, "from", here,
          "replays", c.graph.replays)
PY
    env -u CAPTUREPOOL_LIBRARY -u CAPTUREPOOL_TORCH_LIBRARY -u PYTHONPATH CPOOL_BACKEND=host \
        PYTHONDONTWRITEBYTECODE=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider --rootdir "$src/python/tests" \
        "$src/python/tests"
    exit $?
fi
echo "python_tests.sh: unknown mode $mode" >&2
exit 2
