"""Draws the memory benchmarks of a GPU run (the logs scripts/gpu-check.sh
writes) as one picture: for every real-model trace, peak reserved memory
over the trace's peak live bytes for capturepool and for PyTorch's
allocator (default and expandable segments), and the capture-order
benchmark's graph memory over the largest graph's, both orders.
Usage: python3 scripts/memory_plot.py LOGDIR OUT.png [TITLE]"""
import glob
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def rows(logdir, kind):
    found = []
    for path in sorted(glob.glob(os.path.join(logdir, "*.log"))):
        with open(path, errors="replace") as f:
            found += [l.strip().split(",")[2:] for l in f if l.startswith("csv," + kind + ",")]
    return found


def main():
    logdir, png = sys.argv[1], sys.argv[2]
    title = sys.argv[3] if len(sys.argv) > 3 else ""
    ours = {r[1]: (int(r[3]), int(r[7])) for r in rows(logdir, "trace") if r[0] == "cuda" and len(r) >= 8}
    torch = {(r[0], r[1]): int(r[2]) for r in rows(logdir, "torch_trace")}
    models = sorted(ours)
    fig, ax = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [max(len(models), 1), 2]})
    series = [("capturepool", lambda m: ours[m][0]),
              ("PyTorch default", lambda m: torch.get(("default", m))),
              ("PyTorch expandable segments", lambda m: torch.get(("expandable", m)))]
    width = 0.27
    for k, (label, value) in enumerate(series):
        xs, ys = [], []
        for i, m in enumerate(models):
            v = value(m)
            if v:
                xs.append(i + (k - 1) * width)
                ys.append(v / ours[m][1])
        bars = ax[0].bar(xs, ys, width, label=label)
        ax[0].bar_label(bars, fmt="%.3f", fontsize=7, rotation=90, padding=2)
    ax[0].axhline(1.0, color="black", linewidth=0.8)
    ax[0].set_xticks(range(len(models)), models, rotation=15)
    ax[0].set_ylim(0.95, max([1.3] + [torch[k] / ours[k[1]][1] + 0.05 for k in torch if k[1] in ours]))
    ax[0].set_ylabel("peak reserved / peak live")
    ax[0].set_title("Real-model traces")
    ax[0].legend(fontsize=8, loc="upper left")

    # Both over the largest graph's scratch (its peak live bytes), as the
    # benchmarks print them.
    order = {r[0]: float(r[1]) for r in rows(logdir, "capture_order") if r[-1] == "cuda"}
    torch_order = {(r[0], r[1]): float(r[2]) for r in rows(logdir, "capture_order_torch")}
    labels = ["smallest-first", "largest-first", "largest-alone"]
    cols = [("capturepool", lambda o: order.get(o))]
    for mode in ("default", "expandable"):
        cols.append((f"PyTorch {mode}", lambda o, mode=mode: torch_order.get((mode, o))))
    for k, (label, value) in enumerate(cols):
        xs, ys = [], []
        for i, o in enumerate(labels):
            v = value(o)
            if v:
                xs.append(i + (k - 1) * width)
                ys.append(v)
        bars = ax[1].bar(xs, ys, width, label=label)
        ax[1].bar_label(bars, fmt="%.2f", fontsize=7, padding=2)
    ax[1].set_xticks(range(len(labels)), labels)
    ax[1].set_ylabel("graph memory / largest graph's scratch")
    ax[1].set_title("16 graphs captured into one pool")
    ax[1].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print(f"wrote {png}")


if __name__ == "__main__":
    main()
