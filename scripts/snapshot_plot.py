"""Draws a pool snapshot (the JSON object cpool_pool_write_snapshot writes)
as a picture: one horizontal bar per segment, its blocks coloured by state
(free, live, graph_free, graph_live; graph outputs hatched), and under each
segment one thin band row per graph marking the blocks that graph's replays
write. The title names the backend and the reserved, allocated and
graph-reserved MiB. Writes OUT_BASENAME.png and OUT_BASENAME.svg.
Before drawing it checks that the snapshot adds up (snapshot_check.py: the
segment, block, allocated and graph-reserved sums, block order) and prints
one warning line per check that fails; the picture is drawn all the same.
Needs matplotlib (python3 -m pip install --user matplotlib).
Usage: python3 scripts/snapshot_plot.py SNAPSHOT.json OUT_BASENAME"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import snapshot_check  # noqa: E402

MIB = 1 << 20
STATE_COLOURS = {"free": "#d9d9d9", "live": "#1f77b4", "graph_free": "#fdb863", "graph_live": "#d6420f"}
GRAPH_COLOURS = ["#6a3d9a", "#1b9e77", "#e7298a", "#8c564b", "#17becf", "#bcbd22", "#7f7f7f", "#000000"]
# Segment bars are drawn to one scale while the largest is at most this many
# times the smallest. Beyond that (a 2 MiB segment next to a 1 GiB one) the
# small ones would be slivers whose blocks cannot be seen, so every segment
# is drawn full width instead and its label gives its size.
SCALE_RATIO = 16
# Blocks are drawn to scale inside their segment, except that none is drawn
# narrower than this share of the full width: a 512-byte block of a 2 MiB
# segment is 0.02% of it, invisible, while it is often the block one looks
# for. The widened blocks are taken from the larger ones of the segment.
MIN_BLOCK = 0.025
BAR_H = 1.0  # height of a segment's bar, in data units
BAND_H = 0.16  # height of one graph's band row
ROW_GAP = 0.55  # space between one segment's last band and the next bar


def human(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def block_widths(sizes, length):
    """Drawn widths of blocks of the given sizes in a bar of the given length:
    to scale, with none under MIN_BLOCK (or less if the segment has so many
    small blocks that they would take more than half the bar)."""
    total = sum(sizes)
    if total == 0 or not sizes:
        return [length / max(len(sizes), 1)] * len(sizes)
    floor = min(MIN_BLOCK, 0.5 * length / len(sizes))
    widths = [length * s / total for s in sizes]
    small = set()
    # Widening a block narrows the others; a few passes settle which are small.
    for _ in range(len(sizes)):
        new_small = {i for i, w in enumerate(widths) if w < floor} | small
        if new_small == small:
            break
        small = new_small
        big_total = sum(s for i, s in enumerate(sizes) if i not in small)
        rest = length - floor * len(small)
        widths = [floor if i in small else (rest * s / big_total if big_total else 0) for i, s in enumerate(sizes)]
    return widths


def graph_order(snap):
    """Graph ids in the order of "graphs", then any a block names that it lacks."""
    ids = [g.get("id") for g in snap["graphs"]]
    for seg in snap["segments"]:
        for b in seg["blocks"]:
            ids += [g for g in b.get("graphs", []) if g not in ids]
    return ids


def draw(snap, out_base):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    stats, segs = snap["stats"], snap["segments"]
    graphs = graph_order(snap)
    colour_of = {g: GRAPH_COLOURS[i % len(GRAPH_COLOURS)] for i, g in enumerate(graphs)}
    row_h = BAR_H + BAND_H * len(graphs) + ROW_GAP
    fig_h = 1.6 + max(len(segs), 1) * (0.55 + 0.16 * len(graphs)) + 0.4
    fig, ax = plt.subplots(figsize=(12, fig_h))

    sizes = [seg["size"] for seg in segs]
    to_scale = bool(sizes) and min(sizes) > 0 and max(sizes) <= SCALE_RATIO * min(sizes)
    widened = False
    hatched = {"output": False, "param": False}
    for i, seg in enumerate(segs):
        y = -i * row_h  # bar from y - BAR_H to y; bands below it
        length = seg["size"] / max(sizes) if to_scale else 1.0
        bsizes = [b["size"] for b in seg["blocks"]]
        widths = block_widths(bsizes, length)
        total = sum(bsizes)
        widened |= any(total and abs(w - length * s / total) > 1e-9 for w, s in zip(widths, bsizes))
        x = 0.0
        for b, w in zip(seg["blocks"], widths):
            state = b.get("state")
            hatch = "////" if b.get("output") else ("xxx" if b.get("param") else None)
            hatched["output"] |= bool(b.get("output"))
            hatched["param"] |= bool(b.get("param")) and not b.get("output")
            ax.add_patch(plt.Rectangle((x, y - BAR_H), w, BAR_H, facecolor=STATE_COLOURS.get(state, "#ff00ff"),
                                       edgecolor="#333333", linewidth=0.5, hatch=hatch))
            # Wide blocks name their state and size; narrow ones their size, upright.
            dark = state in ("live", "graph_live")
            if w >= 0.07:
                ax.text(x + w / 2, y - BAR_H / 2, f"{state}\n{human(b['size'])}", ha="center", va="center",
                        fontsize=7, color="white" if dark else "black")
            elif w >= 0.015:
                ax.text(x + w / 2, y - BAR_H / 2, human(b["size"]), ha="center", va="center", rotation=90,
                        fontsize=6, color="white" if dark else "black",
                        bbox=dict(boxstyle="square,pad=0.1", facecolor=STATE_COLOURS.get(state, "#ff00ff"),
                                  linewidth=0) if b.get("output") or b.get("param") else None)
            for k, g in enumerate(graphs):
                if g in b.get("graphs", []):
                    top = y - BAR_H - 0.04 - k * BAND_H
                    ax.add_patch(plt.Rectangle((x, top - BAND_H * 0.75), w, BAND_H * 0.75,
                                               facecolor=colour_of[g], linewidth=0))
            x += w
        for k, g in enumerate(graphs):
            top = y - BAR_H - 0.04 - k * BAND_H
            ax.add_patch(plt.Rectangle((0, top - BAND_H * 0.75), length, BAND_H * 0.75, facecolor="#f3f3f3",
                                       linewidth=0, zorder=0))
            ax.text(-0.005, y - BAR_H - 0.04 - (k + 0.375) * BAND_H, f"graph {g}", ha="right", va="center",
                    fontsize=6, color=colour_of[g])
        ax.text(-0.01, y - BAR_H / 2, f"segment {i}\n{seg['address']:#x}\n{human(seg['size'])}", ha="right",
                va="center", fontsize=8, family="monospace")

    if not segs:
        ax.text(0.5, 0.5, "the pool has no segments", ha="center", va="center", fontsize=12, color="#555555",
                transform=ax.transAxes)

    ax.set_xlim(-0.17, 1.01)
    n_rows = max(len(segs), 1)
    ax.set_ylim(-(n_rows - 1) * row_h - BAR_H - BAND_H * len(graphs) - 0.2, 0.15)
    ax.axis("off")

    def mib(key):
        v = stats.get(key) or 0
        return f"{v / MIB:.2f} MiB" + (f" ({human(v)})" if 0 < v < MIB // 10 else "")

    title = (f"capturepool pool snapshot, {snap.get('backend', '?')} backend: reserved {mib('reserved_bytes')}, "
             f"allocated {mib('allocated_bytes')}, graph-reserved {mib('graph_reserved_bytes')}")
    notes = [f"{len(segs)} segments, {len(snap['graphs'])} graphs"]
    if segs:
        notes.append("segments to one scale" if to_scale else
                     f"segments differ more than {SCALE_RATIO}x in size: each drawn full width")
    if widened:
        notes.append(f"blocks under {MIN_BLOCK:.1%} of the width widened to it")
    ax.set_title(title + "\n" + "; ".join(notes), fontsize=10)

    handles = [Patch(facecolor=c, edgecolor="#333333", linewidth=0.5, label=s) for s, c in STATE_COLOURS.items()]
    if hatched["output"]:
        handles.append(Patch(facecolor="white", edgecolor="#333333", hatch="////", label="graph output"))
    if hatched["param"]:
        handles.append(Patch(facecolor="white", edgecolor="#333333", hatch="xxx", label="pool parameter"))
    handles += [Patch(facecolor=colour_of[g], label=f"graph {g}") for g in graphs]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(len(handles), 8),
              fontsize=8, frameon=False)

    fig.tight_layout()
    for ext in ("png", "svg"):
        fig.savefig(f"{out_base}.{ext}", dpi=110)
    plt.close(fig)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.rsplit("\n", 1)[-1])
    path, out_base = sys.argv[1], sys.argv[2]
    try:
        snap = snapshot_check.load(path)
    except snapshot_check.SnapshotError as e:
        sys.exit(f"snapshot_plot: {e}")
    for w in snapshot_check.check(snap):
        print(f"snapshot_plot: warning: {w}", file=sys.stderr)
    try:
        draw(snap, out_base)
    except ImportError:
        sys.exit("snapshot_plot: needs matplotlib (python3 -m pip install --user matplotlib)")
    print(f"snapshot_plot: wrote {out_base}.png and {out_base}.svg")


if __name__ == "__main__":
    main()
