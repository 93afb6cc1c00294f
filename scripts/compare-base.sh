#!/usr/bin/env bash
# Before and after in one run: builds the benchmarks of a base source tree
# (e.g. `git archive <commit> | tar -x -C base-src`) and of this tree in
# Release, runs alloc_bench and launch_bench of both alternately, and prints
# the medians side by side: the cached alloc+free pair (ns) and the launch
# CPU ratio ours/raw cudaGraphLaunch (and capture ours/raw) of each tree.
# Usage: scripts/compare-base.sh BASE_SRC [ROUNDS] [OUTDIR]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
base_src=$(cd "$1" && pwd)
rounds=${2:-5}
out=$(mkdir -p "${3:-build-cmp}" && cd "${3:-build-cmp}" && pwd)
gen=(); command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
for tree in base new; do
    src=$PWD; [[ $tree == base ]] && src=$base_src
    cmake -S "$src" -B "$out/$tree" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCPOOL_BUILD_TESTS=OFF \
        -DCPOOL_BUILD_EXAMPLES=OFF >"$out/$tree.configure.log"
    cmake --build "$out/$tree" -j "$(nproc)" --target alloc_bench launch_bench >"$out/$tree.build.log"
done
for ((i = 0; i < rounds; i++)); do
    for tree in base new; do
        "$out/$tree/bench/alloc_bench" >>"$out/$tree.alloc.log"
        CPOOL_BACKEND=host "$out/$tree/bench/alloc_bench" >>"$out/$tree.alloc-host.log"
        "$out/$tree/bench/launch_bench" 100 >>"$out/$tree.launch.log"
    done
done
python3 - "$out" <<'PY'
import statistics, sys, re
out = sys.argv[1]
def alloc(path):
    rows = {}
    for line in open(path):
        m = re.match(r"\s+(\d+)\s+([\d.]+)\s", line)
        if m: rows.setdefault(int(m.group(1)), []).append(float(m.group(2)))
    return {k: statistics.median(v) for k, v in rows.items()}
def launch(path):
    # csv,capturepool,backend,kernels,eager cpu,eager dev,dev ours,dev raw,launch ours,launch raw,
    # capture ours,capture raw,launch ratio,capture ratio (launch_bench.c)
    rows = {}
    for line in open(path):
        f = line.strip().split(",")
        if f[:2] == ["csv", "capturepool"] and f[2] == "cuda":
            r = rows.setdefault(int(f[3]), ([], []))
            r[0].append(float(f[12]))
            r[1].append(float(f[13]))
    return {k: (statistics.median(a), statistics.median(c)) for k, (a, c) in rows.items()}
print("| measure | base | new | new/base |\n|---|---|---|---|")
for kind in ("alloc", "alloc-host"):
    b, n = alloc(f"{out}/base.{kind}.log"), alloc(f"{out}/new.{kind}.log")
    for size in sorted(b):
        if size in n:
            print(f"| {kind} pair {size} B, ns | {b[size]:.1f} | {n[size]:.1f} | {n[size]/b[size]:.3f}x |")
b, n = launch(f"{out}/base.launch.log"), launch(f"{out}/new.launch.log")
for k in sorted(b):
    if k in n:
        print(f"| launch CPU ours/raw, {k} kernels | {b[k][0]:.3f}x | {n[k][0]:.3f}x | {n[k][0]/b[k][0]:.3f}x |")
        print(f"| capture ours/raw, {k} kernels | {b[k][1]:.3f}x | {n[k][1]:.3f}x | {n[k][1]/b[k][1]:.3f}x |")
PY
echo "launch_bench csv lines: $out/base.launch.log $out/new.launch.log"
