#!/usr/bin/env bash
# One command for a GPU machine (no network needed): builds capturepool, runs
# the whole test suite on both backends, the CUDA part under
# compute-sanitizer (memcheck, racecheck, synccheck), the demo on both
# backends, and every benchmark with its PyTorch counterpart; writes every
# log and one results file
# (results.md, plus plots) into OUTDIR (default: build-gpu/results).
# Usage: scripts/gpu-check.sh [OUTDIR]
# CPOOL_GPU_CHECK_ONLY=REGEX runs only the steps whose names match (the
# builds included when they match), for a machine lent in short turns:
# e.g. "^(configure|build|ctest)" first, then the rest.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# The test binaries run outside ctest too (compute-sanitizer): the full
# debug walks, as ctest asks for them (src/support/debug.h).
export CPOOL_DEBUG_FULL=${CPOOL_DEBUG_FULL:-1}
root=$PWD
out=$(mkdir -p "${1:-build-gpu/results}" && cd "${1:-build-gpu/results}" && pwd)
jobs=$(nproc 2>/dev/null || echo 4)
gen=(); keep_going=(); command -v ninja >/dev/null 2>&1 && gen=(-G Ninja) && keep_going=(-- -k 0)
failed=()

step() { # step NAME COMMAND...: runs it, logs to OUTDIR/NAME.log, records failure
    local name=$1; shift
    [[ -n ${CPOOL_GPU_CHECK_ONLY:-} && ! $name =~ $CPOOL_GPU_CHECK_ONLY ]] && return 0
    echo "=== $name: $*"
    local start=$SECONDS
    if "$@" >"$out/$name.log" 2>&1; then
        echo "    ok ($((SECONDS - start)) s)"
    else
        echo "    FAILED ($((SECONDS - start)) s); last lines:"; tail -n 25 "$out/$name.log"
        failed+=("$name")
    fi
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/gpu.txt" 2>&1
cat "$out/gpu.txt"

# Tests: internal checks on, warnings as errors. Benchmarks: Release.
step configure-test cmake -S . -B build-gpu/test "${gen[@]}" -DCMAKE_BUILD_TYPE=Debug \
    -DCPOOL_WERROR=ON -DCPOOL_DEBUG_CHECKS=ON -DCPOOL_FAULT_INJECTION=ON -DCPOOL_CUDA=ON
# A target that fails to build fails its step; the others still build and run.
step build-test cmake --build build-gpu/test -j "$jobs" "${keep_going[@]}"
step configure-rel cmake -S . -B build-gpu/rel "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCPOOL_CUDA=ON \
    -DCPOOL_BUILD_TESTS=OFF
step build-rel cmake --build build-gpu/rel -j "$jobs" "${keep_going[@]}"

step ctest bash -c "cd build-gpu/test && ctest --output-on-failure -j 4"
sanitize() { # sanitize TOOL [ARGS...]: every test binary under compute-sanitizer
    local tool=$1 status=0 rc; shift
    for t in build-gpu/test/tests/test_*; do
        [[ -x $t && ! -d $t ]] || continue
        # Under a tool, the eight-thread stress test now and then sees a
        # graph launch return cudaErrorUnknown for a launch that did run:
        # about one run in twelve under racecheck and synccheck, which look
        # for hazards inside kernels and so leave it out, and about one in
        # twenty under memcheck (none in 182 runs without a tool).
        [[ $tool != memcheck && $t == */test_stress ]] && continue
        # The interleaving test runs no kernel of its own, only copies and
        # host work, many rounds: racecheck and synccheck, which look inside
        # kernels, would only take minutes over it. memcheck runs it.
        [[ $tool != memcheck && $t == */test_interleave ]] && continue
        echo "--- $tool $t"
        # API errors are not reported: the suite provokes them on purpose
        # (a sync under capture, an invalidated capture's end).
        # Binaries that never touch CUDA (the C++ header test) are fine too.
        # One pass of the interleaving test's schedule (27 rounds a case).
        INTERLEAVE_ROUNDS=27 compute-sanitizer --tool "$tool" "$@" --report-api-errors no --require-cuda-init no \
            --error-exitcode 99 "$t"
        rc=$?
        if ((rc != 0 && rc != 99)) && [[ $t == */test_stress ]]; then
            # A failed check with no error from the tool: run it once more;
            # a second failure, or any error the tool finds, fails the step.
            echo "--- $tool $t again: the run above failed a check, the tool found no error"
            compute-sanitizer --tool "$tool" "$@" --report-api-errors no --require-cuda-init no \
                --error-exitcode 99 "$t"
            rc=$?
        fi
        ((rc == 0)) || status=1
    done
    return $status
}
# A graph released inside its own replay's host callback: the library must
# make no CUDA call there (CUDA refuses them in host functions), so this one
# case runs with API errors reported.
step api-errors compute-sanitizer --tool memcheck --report-api-errors all --error-exitcode 99 \
    build-gpu/test/tests/test_safety graph_released_in_callback_torn_down_later
step memcheck sanitize memcheck --leak-check full
step racecheck sanitize racecheck
step synccheck sanitize synccheck

step demo-cuda env CPOOL_BACKEND=cuda build-gpu/rel/examples/demo
step demo-host env CPOOL_BACKEND=host build-gpu/rel/examples/demo
step two-stream-cuda env CPOOL_BACKEND=cuda build-gpu/rel/examples/two_stream
step two-stream-host env CPOOL_BACKEND=host build-gpu/rel/examples/two_stream
# The other program of suspend_resume takes nearly all the GPU's memory:
# it runs here alone, not in ctest beside other tests (ctest runs it on the
# host backend).
step suspend-resume-cuda env CPOOL_BACKEND=cuda build-gpu/rel/examples/suspend_resume
step suspend-resume-host env CPOOL_BACKEND=host build-gpu/rel/examples/suspend_resume
# Built where NCCL is found (NCCL_ROOT, or Python's nvidia-nccl package).
if [[ -x build-gpu/rel/examples/data_parallel ]]; then
    step data-parallel build-gpu/rel/examples/data_parallel
    step data-parallel-torch python3 bench/data_parallel_torch.py
fi

# The Python package against the Release library: capturepool.torch's
# tests (skipped without torch with CUDA) and the standalone smoke check
# and the sleep/wake example (each exits 77 without torch, which counts as
# passed here); the host-backend
# Python tests run in the ctest step above.
python_env=(env PYTHONPATH="$root/python" CAPTUREPOOL_LIBRARY="$root/build-gpu/rel/src/libcapturepool.so"
    CAPTUREPOOL_TORCH_LIBRARY="$root/build-gpu/rel/python/libcapturepool_torch.so")
step python-torch "${python_env[@]}" python3 -m pytest -v -p no:cacheprovider python/tests/test_torch.py
step python-gpu-smoke bash -c '"$@"; rc=$?; ((rc == 0 || rc == 77))' _ "${python_env[@]}" python3 python/tests/gpu_smoke.py
# The bridge's smoke check under memcheck: the shim's segments and the
# outputs it hands torch through DLPack, read and written by torch's kernels.
step bridge-memcheck bash -c '"$@"; rc=$?; ((rc == 0 || rc == 77))' _ "${python_env[@]}" compute-sanitizer \
    --tool memcheck --error-exitcode 99 python3 python/tests/gpu_smoke.py
step python-sleep-wake bash -c '"$@"; rc=$?; ((rc == 0 || rc == 77))' _ "${python_env[@]}" python3 \
    examples/python/sleep_wake_server.py
step decoder-graphs bash -c '"$@"; rc=$?; ((rc == 0 || rc == 77))' _ "${python_env[@]}" python3 \
    bench/decoder_graphs_torch.py
step alloc-bench build-gpu/rel/bench/alloc_bench
step alloc-bench-host env CPOOL_BACKEND=host build-gpu/rel/bench/alloc_bench
step page-bench build-gpu/rel/bench/page_bench 200
step page-bench-host env CPOOL_BACKEND=host build-gpu/rel/bench/page_bench 200
step launch-bench build-gpu/rel/bench/launch_bench
step torch-launch python3 bench/torch_launch.py
step torch-bridge-replay bash -c '"$@"; rc=$?; ((rc == 0 || rc == 77))' _ "${python_env[@]}" python3 \
    bench/torch_bridge_replay.py
step update-bench build-gpu/rel/bench/update_bench
step graph-memory bash -c "build-gpu/rel/bench/graph_memory_bench && python3 bench/graph_memory_torch.py"
step event-bench build-gpu/rel/bench/event_bench
# PyTorch's side runs also when capturepool's fails, so that its log has both
# (here and in capture-order).
step multistream-memory bash -c 'build-gpu/rel/bench/multistream_memory_bench; rc=$?
    python3 bench/multistream_memory_torch.py && exit $rc'
step capture-order bash -c 'build-gpu/rel/bench/capture_order_bench; rc=$?
    python3 bench/capture_order_torch.py && exit $rc'
# engine_bench exits 1 where an output was overwritten; refusals only show
# in its table.
step engine bash -c 'build-gpu/rel/bench/engine_bench; rc=$?
    python3 bench/engine_torch.py && exit $rc'
step capture-cost build-gpu/rel/bench/capture_cost_bench
step suspend-bench build-gpu/rel/bench/suspend_bench
# The snapshot file (about 11 MiB) goes to /tmp, not into OUTDIR.
[[ -x build-gpu/rel/bench/vmm_probe ]] && step vmm-probe build-gpu/rel/bench/vmm_probe
[[ -x build-gpu/rel/bench/wake_bench ]] && step wake-bench build-gpu/rel/bench/wake_bench 4
step snapshot-bench build-gpu/rel/bench/snapshot_bench 100000 /tmp/capturepool_snapshot_bench.json
if [[ ! -s bench/traces/resnet50_train.trace || ${CPOOL_RECORD_TRACES:-0} == 1 ]]; then
    step record-traces python3 bench/traces/record_traces.py "$out/traces"
    traces=("$out"/traces/*.trace)
else
    traces=(bench/traces/*.trace)
    # A model whose trace is not in bench/traces yet is recorded alone into
    # OUTDIR/traces (to be committed from there) and replayed with the rest.
    for model in llama_decode; do
        [[ -s bench/traces/$model.trace ]] && continue
        step "record-$model" python3 bench/traces/record_traces.py "$out/traces" "$model"
        [[ -s $out/traces/$model.trace ]] && traces+=("$out/traces/$model.trace")
    done
fi
step trace-replay build-gpu/rel/bench/trace_replay "${traces[@]}"
step trace-replay-host env CPOOL_BACKEND=host build-gpu/rel/bench/trace_replay "${traces[@]}"
step trace-replay-torch python3 bench/trace_replay_torch.py "${traces[@]}"

python3 scripts/bench_report.py "$out" >"$out/report.log" 2>&1 || failed+=(report)
echo
cat "$out/results.md" 2>/dev/null
if ((${#failed[@]})); then
    echo "FAILED: ${failed[*]}"
    exit 1
fi
echo "gpu-check: all steps passed"
