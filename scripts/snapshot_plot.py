"""Draws a pool snapshot (the JSON object cpool_pool_write_snapshot writes)
as a picture: one horizontal bar per segment, its blocks coloured by state
(free, live, graph_free, graph_live; graph outputs hatched), and under each
segment one thin band row per graph marking the blocks that graph's replays
write. Then one bar per range of each graph's arena (version 2: a graph's
own addresses), its blocks coloured the same way, and under it a strip of
its pages, each naming the physical page behind it (P1, P2, ... in order
of appearance): a page shared with other graphs is coloured by its
physical page, the same colour wherever it is mapped, and says how many
ranges map it; a page of the graph's own (its outputs) is white and
hatched. Below, each shared physical page lists the graphs that map it.
The title names the backend and the reserved, allocated and graph-reserved
MiB, and the physical pages. Writes OUT_BASENAME.png and OUT_BASENAME.svg.
Before drawing it checks that the snapshot adds up (snapshot_check.py: the
physical sums, block and page order) and prints one warning line per check
that fails; the picture is drawn all the same.
Needs matplotlib (python3 -m pip install --user matplotlib).
Usage: python3 scripts/snapshot_plot.py SNAPSHOT.json OUT_BASENAME"""
import os
import sys
import textwrap

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
PAGE_H = 0.42  # height of a range's strip of pages
PAGE_COLOURS = ["#a6cee3", "#b2df8a", "#fb9a99", "#cab2d6", "#ffff99", "#fdbf6f", "#8dd3c7", "#bebada"]
MAX_SHARED_LINES = 12  # shared pages listed under the picture, at most
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
    for arena in snap.get("arenas", []):
        if arena.get("graph") and arena["graph"] not in ids:
            ids.append(arena["graph"])
    return ids


def page_names(snap):
    """Short names of the physical pages behind the arenas (P1, P2, ... in
    order of appearance), and what snapshot_check knows of each."""
    pages, _ = snapshot_check.physical_pages(snap)
    names = {}
    for arena in snap.get("arenas", []):
        for rng in arena["ranges"]:
            for page in rng["pages"]:
                names.setdefault(page["physical"], f"P{len(names) + 1}")
    return names, pages


def draw_blocks(ax, plt, blocks, y, length, widened_out, hatched):
    """One bar of blocks from y - BAR_H to y; returns each block's (x, width)."""
    bsizes = [b["size"] for b in blocks]
    widths = block_widths(bsizes, length)
    total = sum(bsizes)
    widened_out[0] |= any(total and abs(w - length * s / total) > 1e-9 for w, s in zip(widths, bsizes))
    x, placed = 0.0, []
    for b, w in zip(blocks, widths):
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
        placed.append((x, w))
        x += w
    return placed


def draw(snap, out_base):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    stats, segs = snap["stats"], snap["segments"]
    ranges = [(arena, rng) for arena in snap.get("arenas", []) for rng in arena["ranges"]]
    graphs = graph_order(snap)
    colour_of = {g: GRAPH_COLOURS[i % len(GRAPH_COLOURS)] for i, g in enumerate(graphs)}
    names, pages = page_names(snap)
    psize = snapshot_check.page_size(snap)
    seg_row_h = BAR_H + BAND_H * len(graphs) + ROW_GAP
    range_row_h = BAR_H + PAGE_H + 0.08 + ROW_GAP
    shared = [pid for pid, p in pages.items() if not p["own"] and not p["packed"]]
    shared_lines = min(len(shared), MAX_SHARED_LINES) + (len(shared) > MAX_SHARED_LINES)
    fig_h = (1.6 + max(len(segs), 1) * (0.55 + 0.16 * len(graphs)) + len(ranges) * 0.85 + 0.16 * shared_lines
             + 0.4)
    fig, ax = plt.subplots(figsize=(12, fig_h))

    sizes = [seg["size"] for seg in segs] + [rng["size"] for _, rng in ranges]
    to_scale = bool(sizes) and min(sizes) > 0 and max(sizes) <= SCALE_RATIO * min(sizes)
    widened = [False]
    hatched = {"output": False, "param": False, "own": False}
    y = 0.0
    for i, seg in enumerate(segs):
        length = seg["size"] / max(sizes) if to_scale else 1.0
        placed = draw_blocks(ax, plt, seg["blocks"], y, length, widened, hatched)
        for b, (x, w) in zip(seg["blocks"], placed):
            for k, g in enumerate(graphs):
                if g in b.get("graphs", []):
                    top = y - BAR_H - 0.04 - k * BAND_H
                    ax.add_patch(plt.Rectangle((x, top - BAND_H * 0.75), w, BAND_H * 0.75,
                                               facecolor=colour_of[g], linewidth=0))
        for k, g in enumerate(graphs):
            top = y - BAR_H - 0.04 - k * BAND_H
            ax.add_patch(plt.Rectangle((0, top - BAND_H * 0.75), length, BAND_H * 0.75, facecolor="#f3f3f3",
                                       linewidth=0, zorder=0))
            ax.text(-0.005, y - BAR_H - 0.04 - (k + 0.375) * BAND_H, f"graph {g}", ha="right", va="center",
                    fontsize=6, color=colour_of[g])
        kind = f" ({seg['kind']})" if seg.get("kind") not in (None, "eager") else ""
        ax.text(-0.01, y - BAR_H / 2, f"segment {i}{kind}\n{seg['address']:#x}\n{human(seg['size'])}", ha="right",
                va="center", fontsize=8, family="monospace")
        y -= seg_row_h

    # Each graph's ranges: blocks at its addresses, then the physical page
    # behind each of its pages, to scale (blocks may be widened, pages not).
    for arena, rng in ranges:
        length = rng["size"] / max(sizes) if to_scale else 1.0
        draw_blocks(ax, plt, rng["blocks"], y, length, widened, hatched)
        top = y - BAR_H - 0.08
        for page in rng["pages"]:
            x = length * page["offset"] / rng["size"]
            w = length * min(psize, rng["size"] - page["offset"]) / rng["size"]
            pid, own = page["physical"], bool(page.get("own"))
            name = names[pid]
            maps = len(pages[pid]["maps"])
            colour = "white" if own else PAGE_COLOURS[(int(name[1:]) - 1) % len(PAGE_COLOURS)]
            hatched["own"] |= own
            ax.add_patch(plt.Rectangle((x, top - PAGE_H), w, PAGE_H, facecolor=colour, edgecolor="#333333",
                                       linewidth=0.5, hatch=".." if own else None))
            label = f"{name} own" if own else (f"{name} x{maps}" if maps > 1 else name)
            if pages[pid]["packed"]:
                label = f"{name} packed"
            if w >= 0.03:
                ax.text(x + w / 2, top - PAGE_H / 2, label, ha="center", va="center", fontsize=6,
                        bbox=dict(boxstyle="square,pad=0.1", facecolor="white", linewidth=0) if own else None)
        if not rng["pages"]:
            ax.text(length / 2, top - PAGE_H / 2, "plain memory of its own (no pages)", ha="center", va="center",
                    fontsize=6, color="#555555")
        graph = arena.get("graph", 0)
        who = f"graph {graph}" if graph else f"arena {arena.get('id')} ({arena.get('state', '?')})"
        ax.text(-0.01, y - (BAR_H + PAGE_H) / 2, f"{who} range\n{rng['address']:#x}\n{human(rng['size'])}",
                ha="right", va="center", fontsize=8, family="monospace",
                color=colour_of.get(graph, "black") if graph else "black")
        ax.text(-0.005, top - PAGE_H / 2, "pages", ha="right", va="center", fontsize=6, color="#555555")
        y -= range_row_h

    # Who maps each shared physical page.
    for n, pid in enumerate(shared[:MAX_SHARED_LINES]):
        who = ", ".join(f"graph {g}" if g else f"arena {a}" for a, g, _ in pages[pid]["maps"])
        ax.text(0.0, y - 0.1 - n * 0.3, f"{names[pid]} (shared, physical id {pid}): mapped by {who}",
                ha="left", va="center", fontsize=7)
    if len(shared) > MAX_SHARED_LINES:
        ax.text(0.0, y - 0.1 - MAX_SHARED_LINES * 0.3, f"... and {len(shared) - MAX_SHARED_LINES} more shared pages",
                ha="left", va="center", fontsize=7)
    y -= 0.3 * shared_lines

    if not segs and not ranges:
        ax.text(0.5, 0.5, "the pool has no segments", ha="center", va="center", fontsize=12, color="#555555",
                transform=ax.transAxes)

    ax.set_xlim(-0.17, 1.01)
    bottom = y if (segs or ranges) else -seg_row_h
    ax.set_ylim(bottom - 0.2, 0.15)
    ax.axis("off")

    def mib(key):
        v = stats.get(key) or 0
        return f"{v / MIB:.2f} MiB" + (f" ({human(v)})" if 0 < v < MIB // 10 else "")

    title = (f"capturepool pool snapshot, {snap.get('backend', '?')} backend: reserved {mib('reserved_bytes')}, "
             f"allocated {mib('allocated_bytes')}, graph-reserved {mib('graph_reserved_bytes')}")
    def count(n, thing):
        return f"{n} {thing}" + ("" if n == 1 else "s")

    notes = [f"{count(len(segs), 'segment')}, {count(len(ranges), 'graph range')}, "
             f"{count(len(snap['graphs']), 'graph')}"]
    if pages:
        own = sum(1 for p in pages.values() if p["own"])
        packed = sum(1 for p in pages.values() if p["packed"])
        notes.append(f"graph pages: {len(pages) - own - packed} shared, {own} own"
                     + (f", {packed} borrowed from packed segments" if packed else "")
                     + f" ({human((len(pages) - packed) * psize)} physical beyond the segments)")
    if segs or ranges:
        notes.append("bars to one scale" if to_scale else
                     f"bars differ more than {SCALE_RATIO}x in size: each drawn full width")
    if widened[0]:
        notes.append(f"blocks under {MIN_BLOCK:.1%} of the width widened to it")
    # A line a note, each wrapped to the figure's width: one long line is
    # cut off at both ends.
    width = max(60, int(fig.get_figwidth() * 13))
    lines = [line for text in [title] + notes for line in textwrap.wrap(text, width)]
    ax.set_title("\n".join(lines), fontsize=10)

    handles = [Patch(facecolor=c, edgecolor="#333333", linewidth=0.5, label=s) for s, c in STATE_COLOURS.items()]
    if hatched["output"]:
        handles.append(Patch(facecolor="white", edgecolor="#333333", hatch="////", label="graph output"))
    if hatched["param"]:
        handles.append(Patch(facecolor="white", edgecolor="#333333", hatch="xxx", label="pool parameter"))
    if shared:
        handles.append(Patch(facecolor=PAGE_COLOURS[0], edgecolor="#333333", label="shared page (xN: N ranges)"))
    if hatched["own"]:
        handles.append(Patch(facecolor="white", edgecolor="#333333", hatch="..", label="page of a graph's own"))
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
