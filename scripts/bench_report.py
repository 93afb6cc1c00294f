"""Collects the logs of scripts/gpu-check.sh into OUTDIR/results.md and
plots (PNG, where matplotlib is installed). Every figure comes from the
benchmarks' "csv," lines of that one run.
Usage: python3 scripts/bench_report.py OUTDIR"""
import glob
import os
import re
import statistics
import sys


def csv_rows(out, kind):
    rows = []
    for path in sorted(glob.glob(os.path.join(out, "*.log"))):
        with open(path, errors="replace") as f:
            for line in f:
                if line.startswith("csv," + kind + ","):
                    rows.append(line.strip().split(",")[2:])
    return rows


def log_text(out, name):
    path = os.path.join(out, name + ".log")
    return open(path, errors="replace").read() if os.path.exists(path) else ""


def ratio(num, den):
    return f"{num / den:.3f}x" if den else "n/a"


def trace_live_cells(r):
    """Peak live MiB and ours over it, from a trace row; logs of a
    trace_replay that did not print the peak live field give n/a."""
    if len(r) < 7:
        return ["n/a", "n/a"]
    live = int(r[6])
    return [f"{live / (1 << 20):.1f}", ratio(int(r[2]), live)]


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def prefer_cuda(rows, backend_of):
    """The rows measured on the CUDA backend, or all of them where none
    was (the host backend runs the same allocator)."""
    cuda = [r for r in rows if backend_of(r) == "cuda"]
    return cuda or rows


def mib_ratio(nbytes, base):
    return f"{nbytes / (1 << 20):.1f} ({ratio(nbytes, base)})"


def capture_order_section(out):
    """16 graphs of batch 1 to 256 in one pool, by capture order: ours
    (capture_order_bench) and PyTorch's shared graph pool, default and with
    expandable segments (capture_order_torch.py)."""
    # ORDER, RATIO, RESERVED_RATIO, GRAPH_RESERVED, RESERVED, LARGEST, SUM, SEGMENTS, BACKEND
    ours = prefer_cuda([r for r in csv_rows(out, "capture_order") if len(r) >= 9], lambda r: r[8])
    # MODE, ORDER, RATIO, RESERVED, LARGEST
    torch = {(r[0], r[1]): r for r in csv_rows(out, "capture_order_torch") if len(r) >= 5}
    orders = [r[0] for r in ours] or sorted({k[1] for k in torch})
    rows = []
    for order in orders:
        o = next((r for r in ours if r[0] == order), None)
        cells = [order] + ([mib_ratio(int(o[3]), int(o[5])), mib_ratio(int(o[4]), int(o[5]))] if o else ["n/a"] * 2)
        for mode in ("default", "expandable"):
            t = torch.get((mode, order))
            cells.append(mib_ratio(int(t[3]), int(t[4])) if t else "n/a")
        rows.append(cells)
    largest = int(ours[0][5]) if ours else (int(next(iter(torch.values()))[4]) if torch else 0)
    backend = ours[0][8] if ours else "n/a"
    return ["## Capture order: 16 graphs (batch 1 to 256) in one pool", "",
            f"MiB (x the largest graph's scratch, {largest / (1 << 20):.1f} MiB); ours on the {backend} backend. "
            "largest-alone: the largest graph captured by itself.", "",
            table(["order", "ours graph-reserved", "ours reserved", "PyTorch shared pool, default",
                   "PyTorch shared pool, expandable segments"], rows), ""]


def engine_section(out):
    """8 graphs with live outputs in one pool (engine_bench, engine_torch.py):
    graph memory over the lower bound, launches refused, outputs overwritten,
    by output style (or PyTorch's allocator mode) and capture order."""
    # STYLE, ORDER, RATIO, GRAPH_RESERVED, BOUND, REFUSED, LAUNCHES, OVERWRITTEN, BACKEND
    ours = prefer_cuda([r for r in csv_rows(out, "engine") if len(r) >= 9], lambda r: r[8])
    # MODE, ORDER, RATIO, RESERVED, BOUND, OVERWRITTEN, LAUNCHES
    torch = [r for r in csv_rows(out, "engine_torch") if len(r) >= 7]
    rows = [[f"ours, {r[0]}", r[1], mib_ratio(int(r[3]), int(r[4])), f"{r[5]} of {r[6]}", r[7]] for r in ours]
    rows += [[f"PyTorch shared pool, {r[0]}", r[1], mib_ratio(int(r[3]), int(r[4])), "n/a", r[5]] for r in torch]
    bound = int((ours or torch or [[0] * 5])[0][4])
    backend = ours[0][8] if ours else "n/a"
    return ["## Engine: 8 graphs with live outputs in one pool", "",
            f"Graph memory MiB (x the lower bound, the largest scratch plus every output: {bound / (1 << 20):.1f} "
            f"MiB; PyTorch: memory_reserved after the captures); launches refused; graphs whose output was found "
            f"overwritten, of 8. Ours on the {backend} backend.", "",
            table(["variant", "capture order", "graph memory", "refused", "overwritten"], rows), ""]


def capture_cost_section(out):
    """Capture + instantiate + first launch of a graph with a scratch, cold
    and warm, ours against CUDA's graph memory nodes (capture_cost_bench)."""
    # BACKEND, BYTES, OURS_COLD, CUDA_COLD, RATIO_COLD, OURS_WARM, CUDA_WARM, RATIO_WARM (us)
    rows = prefer_cuda([r for r in csv_rows(out, "capture_cost") if len(r) >= 8], lambda r: r[0])
    cuda = bool(rows) and rows[0][0] == "cuda"

    def cells(ours, raw, r):
        return [f"{float(ours):.1f}", f"{float(raw):.1f}" if cuda else "n/a", f"{float(r):.3f}x" if cuda else "n/a"]

    return ["## Capture + instantiate + first launch of a graph with a scratch (us; medians)", "",
            f"Cold: a fresh pool (CUDA: graph memory trimmed first); warm: the memory of the previous such graph, "
            f"released, kept. Ours on the {rows[0][0] if rows else 'n/a'} backend; CUDA: graph memory nodes; "
            "ratios: medians of side-by-side rounds.", "",
            table(["scratch MiB", "cold ours", "CUDA", "ours/CUDA", "warm ours", "CUDA", "ours/CUDA"],
                  [[f"{int(r[1]) / (1 << 20):g}", *cells(r[2], r[3], r[4]), *cells(r[5], r[6], r[7])] for r in rows]),
            ""]


def suspend_section(out):
    """Suspend and resume of a pool (suspend_bench): backup and restore
    bandwidth against pinned copies, a pool of graph pages and live blocks
    against raw cuMem* calls, the memory given back, and resume against
    capturing the graphs again."""
    gib = 1 << 30
    # BACKEND, BYTES, D2H_OURS, D2H_RAW, D2H_RATIO, D2H_TOTAL, H2D_OURS, H2D_RAW, H2D_RATIO, H2D_TOTAL (GB/s, x)
    bw = prefer_cuda([r for r in csv_rows(out, "suspend_bw") if len(r) >= 10], lambda r: r[0])
    # BACKEND, GRAPH_BYTES, LIVE_BYTES, SUSPEND, RESUME, RAW_SUSPEND, RAW_RESUME (us), RATIO, RESERVED, FREED (bytes)
    pool = prefer_cuda([r for r in csv_rows(out, "suspend_pool") if len(r) >= 10], lambda r: r[0])
    # BACKEND, GRAPHS, KERNELS, RESUME, CAPTURE (us), RATIO, RESUME+LAUNCH, CAPTURE+LAUNCH (us), RATIO
    rc = prefer_cuda([r for r in csv_rows(out, "suspend_recapture") if len(r) >= 9], lambda r: r[0])
    md = ["## Suspend and resume of a pool (medians; ratios: medians of side-by-side rounds)", "",
          "Backup (suspend with KEEP_CONTENTS) and restore (resume) bandwidth, GB/s, against a pinned "
          "cudaMemcpyAsync of the same bytes; ours: KEEP_CONTENTS less DISCARD of the same pool; total: the "
          "whole call (goal >= 0.9x):", "",
          table(["backend", "live GiB", "D2H ours", "raw", "ours/raw", "total", "H2D ours", "raw", "ours/raw",
                 "total"],
                [[r[0], f"{int(r[1]) / gib:g}", r[2], r[3], f"{float(r[4]):.3f}x", f"{float(r[5]):.3f}x", r[6],
                  r[7], f"{float(r[8]):.3f}x", f"{float(r[9]):.3f}x"] for r in bw]), "",
          "Suspend + resume of a pool with graph pages and live blocks (ms) against raw cuMemCreate + cuMemMap "
          "+ cuMemSetAccess of as many 2 MiB pages, pinned copies, cuMemUnmap + cuMemRelease (goal <= 1.2x); "
          "memory given back: cudaMemGetInfo's gain over reserved_bytes before (goal 1):", "",
          table(["backend", "graph GiB", "live GiB", "suspend", "resume", "raw suspend", "raw resume", "ours/raw",
                 "reserved MiB", "freed MiB", "freed/reserved"],
                [[r[0], f"{int(r[1]) / gib:g}", f"{int(r[2]) / gib:g}", f"{float(r[3]) / 1e3:.2f}",
                  f"{float(r[4]) / 1e3:.2f}", f"{float(r[5]) / 1e3:.2f}", f"{float(r[6]) / 1e3:.2f}",
                  f"{float(r[7]):.3f}x", f"{float(r[8]) / (1 << 20):.1f}", f"{float(r[9]) / (1 << 20):.1f}",
                  ratio(float(r[9]), float(r[8]))] for r in pool]), "",
          "Resume against capturing and instantiating the same graphs again (ms; goal >= 10x):", "",
          table(["backend", "graphs", "kernels each", "resume", "capture", "capture/resume",
                 "resume + first launches", "capture + first launches", "ratio"],
                [[r[0], r[1], r[2], f"{float(r[3]) / 1e3:.3f}", f"{float(r[4]) / 1e3:.3f}", f"{float(r[5]):.2f}x",
                  f"{float(r[6]) / 1e3:.3f}", f"{float(r[7]) / 1e3:.3f}", f"{float(r[8]):.2f}x"] for r in rc]), ""]
    if not bw or not pool or not rc:
        md += ["(suspend_bench gave no figures for some rows: see suspend-bench.log)", ""]
    return md


def traces_three_way_section(out, ours_rows):
    """Peak reserved of each trace: ours, PyTorch's allocator replaying it
    in this run (trace_replay_torch.py) default and with expandable
    segments, each against the trace's peak live bytes."""
    torch = {(r[0], r[1]): r for r in csv_rows(out, "torch_trace") if len(r) >= 4}
    if not ours_rows:
        ours_rows = [r[1:] for r in csv_rows(out, "trace")]
    ours = {r[0]: r for r in ours_rows}
    models = list(ours) + sorted({k[1] for k in torch} - set(ours))
    rows = []
    for model in models:
        o, d, e = ours.get(model), torch.get(("default", model)), torch.get(("expandable", model))
        live = int(o[6]) if o and len(o) >= 7 else int((d or e)[3]) if d or e else 0
        mine = int(o[2]) if o else 0
        cells = [model, f"{live / (1 << 20):.1f}" if live else "n/a", mib_ratio(mine, live) if o and live else "n/a"]
        for t in (d, e):
            cells.append(mib_ratio(int(t[2]), live) if t and live else "n/a")
        for t in (d, e):
            cells.append(ratio(mine, int(t[2])) if o and t else "n/a")
        rows.append(cells)
    return ["## Real-model traces: ours against PyTorch's allocator replaying them in this run", "",
            "Peak reserved MiB (x the trace's peak live bytes).", "",
            table(["trace", "peak live MiB", "ours", "PyTorch default", "PyTorch expandable segments",
                   "ours/default", "ours/expandable"], rows), ""]


def main():
    out = sys.argv[1]
    mib = 1 << 20
    md = ["# capturepool GPU check", ""]
    gpu = open(os.path.join(out, "gpu.txt")).read().strip() if os.path.exists(os.path.join(out, "gpu.txt")) else "?"
    md += [f"GPU: {gpu}", ""]

    ctest = log_text(out, "ctest")
    summary = [l for l in ctest.splitlines() if "tests passed" in l or "tests failed" in l]
    md += ["## Tests", "", "ctest (both backends): " + (summary[-1].strip() if summary else "no summary"), ""]
    for tool in ("memcheck", "racecheck", "synccheck"):
        log = log_text(out, tool)
        errors = re.findall(r"(?:ERROR SUMMARY: |RACECHECK SUMMARY: \d+ hazards displayed \()(\d+) error", log)
        again = len(re.findall(r"^--- \S+ \S+ again:", log, re.M))
        runs = f"{len(errors) - again} binaries" + (f" ({again} run again after a failed check)" if again else "")
        md += [f"compute-sanitizer {tool}: {runs}, {sum(int(e) for e in errors)} errors in all", ""]

    md += ["## Allocator: cached alloc+free pair", "", "```", log_text(out, "alloc-bench").strip(),
           log_text(out, "alloc-bench-host").strip(), "```", ""]

    ours = {int(r[1]): [float(x) for x in r[2:]] for r in csv_rows(out, "capturepool") if r[0] == "cuda"}
    torch = {int(r[1]): [float(x) for x in r[2:]] for r in csv_rows(out, "torch")}
    rows = []
    for n in sorted(ours):
        e_cpu, e_dev, d_ours, d_raw, l_ours, l_raw, c_ours, c_raw, l_ratio, c_ratio = ours[n]
        t_cpu, t_dev = torch.get(n, [float("nan")] * 2)
        rows.append([n, f"{e_dev:.1f}", f"{d_ours:.2f}", f"{d_raw:.2f}", f"{t_dev:.2f}",
                     f"{l_ours:.2f}", f"{l_raw:.2f}", f"{l_ratio:.3f}x", f"{t_cpu:.2f}",
                     f"{c_ours:.2f}", f"{c_raw:.2f}", f"{c_ratio:.3f}x"])
    md += ["## Replay and capture (us; medians; launch and capture ratios: medians of pair ratios)", "",
           table(["kernels", "eager step (dev)", "replay dev: ours", "raw", "PyTorch",
                  "launch CPU: ours", "raw", "ours/raw", "PyTorch replay CPU",
                  "capture+end: ours", "raw", "ours/raw"], rows), ""]
    # The one-kernel capture's noise floor, fence cost and phases.
    capture_notes = [line for line in log_text(out, "launch-bench").splitlines()
                     if line.startswith(("one-kernel", "parts of"))]
    if capture_notes:
        md += ["```", *capture_notes, "```", ""]

    up = [r for r in csv_rows(out, "update") if r[0] == "cuda"]
    md += ["## Graph update vs capturing anew (us; medians)", "",
           table(["kernels", "cpool_graph_update", "release + capture + instantiate", "anew / update"],
                 [[r[1], r[2], r[3], f"{float(r[3]) / float(r[2]):.2f}x"] for r in up]), ""]

    gm = csv_rows(out, "graphmem")
    md += ["## Graph memory: 8 graphs x 256 MiB scratch", "",
           table(["variant", "graphs", "scratch MiB", "reserved / scratch"], [[r[0], r[1], r[2], r[3] + "x"] for r in gm]), ""]

    ev = [r for r in csv_rows(out, "event") if r[0] == "cuda"]
    fj = [r for r in csv_rows(out, "forkjoin") if r[0] == "cuda"]
    md += ["## Events and a 4-branch fork/join graph (us of CPU; medians; ratios: medians of pair ratios)", "",
           table(["measure", "ours", "raw CUDA", "ours/raw"],
                 [["event record + stream wait, a pair", f"{float(r[2]):.3f}", f"{float(r[3]):.3f}",
                   f"{float(r[4]):.3f}x"] for r in ev]
                 + [[f"{r[1]} branches x {r[2]} kernels: capture+end", f"{float(r[3]):.2f}", f"{float(r[4]):.2f}",
                     f"{float(r[5]):.3f}x"] for r in fj]
                 + [[f"{r[1]} branches x {r[2]} kernels: launch", f"{float(r[6]):.3f}", f"{float(r[7]):.3f}",
                     f"{float(r[8]):.3f}x"] for r in fj]), ""]
    # The same captures against raw CUDA with the library's four fence records.
    ff = {(r[1], r[2]): r for r in csv_rows(out, "forkfence") if r[0] == "cuda"}
    rows = [[f"{r[1]} branches x {r[2]} kernels", f"{float(r[3]):.2f}", f"{float(r[4]):.2f}",
             f"{float(ff[(r[1], r[2])][3]):.2f}", f"{float(ff[(r[1], r[2])][4]):.3f}x"]
            for r in fj if (r[1], r[2]) in ff]
    if rows:
        md += ["The same captures against raw CUDA that records the library's four fences too (us; medians):", "",
               table(["capture+end", "ours", "raw", "raw + 4 fence records", "ours / (raw + fences)"], rows), ""]
    if not ev or not fj:
        md += ["(event_bench gave no figures for some rows: see event-bench.log)", ""]
    phases = ["begin", "fork (record + 3 waits)", "branches' work", "join (3 records + waits)", "end + instantiate"]
    fp = {}
    for r in csv_rows(out, "forkphase"):
        if r[0] == "cuda":
            fp.setdefault(int(r[1]), []).append((float(r[2]), float(r[3])))
    if fp:  # several runs of event_bench: the median of each column
        med = {k: [statistics.median(x[i] for x in v) for i in range(2)] for k, v in fp.items()}
        md += ["Where the 4-branch capture's time goes, 1 kernel a branch (us; medians):", "",
               table(["phase", "ours", "raw CUDA", "ours - raw"],
                     [[phases[k], f"{o:.3f}", f"{r:.3f}", f"{o - r:+.3f}"] for k, (o, r) in sorted(med.items())]),
               ""]

    dp = {r[0]: r for r in csv_rows(out, "dp")}
    dpt = {r[0]: r for r in csv_rows(out, "dp_torch")}
    if dp:
        md += ["## Data-parallel step: gradient, NCCL all-reduce, update (us per step; one thread a GPU)", "",
               table(["GPU", "GPUs", "ours eager", "ours graph", "eager/graph", "PyTorch eager", "PyTorch graph",
                      "ours graph / PyTorch graph", "pool MiB", "registrations"],
                     [[k, r[1], r[2], r[3], f"{float(r[2]) / float(r[3]):.2f}x",
                       dpt[k][2] if k in dpt else "n/a", dpt[k][3] if k in dpt else "n/a",
                       ratio(float(r[3]), float(dpt[k][3])) if k in dpt else "n/a",
                       f"{int(r[4]) / (1 << 20):.1f}", r[5]] for k, r in sorted(dp.items())]), ""]

    # Multi-stream graph memory, ours and PyTorch's by (streams, allocs).
    ms = {}
    for r in csv_rows(out, "msmem"):
        if r[1] != "cuda":
            continue
        ms.setdefault((int(r[2]), int(r[3])), {})[r[0]] = [int(x) for x in r[4:7]]
    rows = []
    for key in sorted(ms, key=lambda k: (k[1], k[0])):
        ours_ms, torch_ms = ms[key].get("capturepool"), ms[key].get("torch")
        base = ours_ms or torch_ms
        same = not (ours_ms and torch_ms) or ours_ms[1:] == torch_ms[1:]
        rows.append([key[0], key[1], f"{base[1] / mib:.1f}" + ("" if same else " (patterns differ!)"),
                     f"{ours_ms[0] / mib:.1f}" if ours_ms else "n/a",
                     f"{torch_ms[0] / mib:.1f}" if torch_ms else "n/a",
                     f"{ours_ms[0] / torch_ms[0]:.3f}x" if ours_ms and torch_ms and torch_ms[0] else "n/a"])
    md += ["## Multi-stream graph memory: graph-reserved MiB after one capture", "",
           table(["streams", "allocs", "peak live MiB", "ours MiB", "PyTorch MiB", "ours/PyTorch"], rows), ""]

    md += capture_order_section(out)
    md += engine_section(out)
    md += capture_cost_section(out)
    md += suspend_section(out)

    # Growable segments: a page's growth and give-back (page_bench).
    pg = csv_rows(out, "page")
    md += ["## Growable segments: one 2 MiB page (us; medians)", "",
           table(["backend", "pool grows by a page", "system alloc", "ratio", "pool gives a page back",
                  "system free", "ratio"],
                 [[r[0], f"{float(r[1]) / 1e3:.2f}", f"{float(r[3]) / 1e3:.2f}", ratio(float(r[1]), float(r[3])),
                   f"{float(r[2]) / 1e3:.2f}", f"{float(r[4]) / 1e3:.2f}", ratio(float(r[2]), float(r[4]))]
                  for r in pg]), "",
           "System: cudaMalloc / cudaFree on CUDA, posix_memalign / free on the host backend; the pool's "
           "give-back is a cpool_pool_trim, which first waits for the device's streams.", ""]

    # Stats and snapshots: what looking at a pool costs (snapshot_bench).
    sn = csv_rows(out, "snapshot")
    sp = csv_rows(out, "snapshotpair")
    md += ["## Stats and snapshots (ns; medians)", "",
           table(["backend", "pool_get_stats ns (target well under 1000)", "graph_get_stats ns", "snapshot blocks",
                  "ns per block (target at most 200)", "snapshot ms", "file MiB"],
                 [[r[0], f"{float(r[1]):.1f}", f"{float(r[2]):.1f}", r[3], f"{float(r[4]):.1f}",
                   f"{float(r[5]):.2f}", f"{float(r[6]):.2f}"] for r in sn]), ""]
    md += ["Cached alloc+free pair on the snapshotted pool, alone and while another thread writes snapshots "
           "(ns; medians of windows; ratio: median of side-by-side windows):", "",
           table(["backend", "bytes", "alone", "with snapshots", "ratio", "longest alone us", "longest during us",
                  "snapshots"],
                 [[r[0], r[1], f"{float(r[2]):.1f}", f"{float(r[3]):.1f}", f"{float(r[4]):.2f}x",
                   f"{float(r[5]):.1f}", f"{float(r[6]):.1f}", r[7]] for r in sp]), ""]
    if not sn or not sp:
        md += ["(snapshot_bench gave no figures for some rows: see snapshot-bench.log)", ""]

    tr = [r[1:] for r in csv_rows(out, "trace") if r[0] == "cuda"]
    md += ["## Real-model traces: peak reserved", "",
           table(["trace", "events", "ours MiB", "PyTorch MiB", "ours/PyTorch", "peak in use MiB", "ns/op",
                  "peak live MiB", "ours/peak live"],
                 [[r[0], r[1], f"{int(r[2]) / mib:.1f}", f"{int(r[3]) / mib:.1f}", ratio(int(r[2]), int(r[3])),
                   f"{int(r[4]) / mib:.1f}", r[5], *trace_live_cells(r)] for r in tr]), ""]

    md += traces_three_way_section(out, tr)

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        ns = sorted(ours)
        if ns:
            fig, ax = plt.subplots(1, 2, figsize=(11, 4))
            ax[0].plot(ns, [ours[n][1] for n in ns], "o-", label="eager launches")
            ax[0].plot(ns, [ours[n][2] for n in ns], "o-", label="capturepool replay")
            ax[0].plot(ns, [ours[n][3] for n in ns], "x--", label="raw cudaGraphLaunch")
            if torch:
                ax[0].plot(ns, [torch[n][1] for n in ns], "s:", label="PyTorch CUDAGraph.replay")
            ax[0].set(xscale="log", yscale="log", xlabel="kernels per graph", ylabel="us per step (device)",
                      title="Device time per step")
            ax[0].legend()
            ax[1].plot(ns, [ours[n][4] for n in ns], "o-", label="cpool_graph_launch")
            ax[1].plot(ns, [ours[n][5] for n in ns], "x--", label="cudaGraphLaunch")
            if torch:
                ax[1].plot(ns, [torch[n][0] for n in ns], "s:", label="PyTorch replay()")
            ax[1].set(xscale="log", xlabel="kernels per graph", ylabel="us of CPU per launch",
                      title="CPU cost of one launch")
            ax[1].legend()
            fig.tight_layout()
            fig.savefig(os.path.join(out, "replay.png"), dpi=110)
            md += ["![replay](replay.png)", ""]
    except ImportError:
        md += ["(matplotlib not installed: no plots)", ""]

    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
