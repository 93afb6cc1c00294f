"""Draws the memory benchmarks of a GPU run (the logs scripts/gpu-check.sh
writes) as one picture: for every real-model trace, peak reserved memory
over the trace's peak live bytes for capturepool and for PyTorch's
allocator (default and expandable segments), and the capture-order
benchmark's graph memory over the largest graph's scratch.
Usage: python3 scripts/memory_plot.py LOGDIR OUT.png [TITLE]"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bench_report import csv_rows as rows, prefer_cuda


def grouped_bars(ax, groups, series, fmt, **label_args):
    """One bar per (group, series) that has a value; series are
    (label, function of a group giving a value or None)."""
    width = 0.27
    for k, (label, value) in enumerate(series):
        points = [(i + (k - 1) * width, value(g)) for i, g in enumerate(groups)]
        points = [(x, y) for x, y in points if y]
        bars = ax.bar([x for x, _ in points], [y for _, y in points], width, label=label)
        ax.bar_label(bars, fmt=fmt, fontsize=7, padding=2, **label_args)
    ax.set_xticks(range(len(groups)), groups, rotation=15)
    ax.legend(fontsize=8, loc="best")


def main():
    logdir, png = sys.argv[1], sys.argv[2]
    title = sys.argv[3] if len(sys.argv) > 3 else ""
    # trace rows: backend, model, events, ours peak reserved, the recording's
    # peak, ours peak allocated, ns/op, the trace's peak live
    traces = prefer_cuda([r for r in rows(logdir, "trace") if len(r) >= 8], lambda r: r[0])
    ours = {r[1]: (int(r[3]), int(r[7])) for r in traces}
    torch = {(r[0], r[1]): int(r[2]) for r in rows(logdir, "torch_trace")}
    models = sorted(ours)

    def over_live(value):
        return lambda m: value(m) / ours[m][1] if value(m) else None

    fig, ax = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [max(len(models), 1), 2]})
    grouped_bars(ax[0], models, [("capturepool", over_live(lambda m: ours[m][0])),
                                 ("PyTorch default", over_live(lambda m: torch.get(("default", m)))),
                                 ("PyTorch expandable segments", over_live(lambda m: torch.get(("expandable", m))))],
                 "%.3f", rotation=90)
    ax[0].axhline(1.0, color="black", linewidth=0.8)
    ax[0].set_ylim(0.95, max([1.3] + [torch[k] / ours[k[1]][1] + 0.05 for k in torch if k[1] in ours]))
    ax[0].set_ylabel("peak reserved / peak live")
    ax[0].set_title("Real-model traces")

    # Both over the largest graph's scratch (its peak live bytes), as the
    # benchmarks print them.
    order = {r[0]: float(r[1]) for r in prefer_cuda(rows(logdir, "capture_order"), lambda r: r[-1])}
    torch_order = {(r[0], r[1]): float(r[2]) for r in rows(logdir, "capture_order_torch")}
    grouped_bars(ax[1], ["smallest-first", "largest-first", "largest-alone"],
                 [("capturepool", order.get)] +
                 [(f"PyTorch {mode}", lambda o, mode=mode: torch_order.get((mode, o))) for mode in ("default", "expandable")],
                 "%.2f")
    ax[1].set_ylabel("graph memory / largest graph's scratch")
    ax[1].set_title("16 graphs captured into one pool")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print(f"wrote {png}")


if __name__ == "__main__":
    main()
