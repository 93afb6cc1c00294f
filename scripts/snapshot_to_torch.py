"""Converts a pool snapshot (the JSON object cpool_pool_write_snapshot
writes) into the pickle that PyTorch's memory visualizer opens
(https://pytorch.org/memory_viz, or python -m torch.cuda._memory_viz): the
dict that torch.cuda.memory._snapshot() returns and
torch.cuda.memory._dump_snapshot() pickles, in the format of PyTorch 2.1 to
2.5 (torch/csrc/cuda/memory_snapshot.cpp), reduced to the fields the
visualizer reads:

  {"segments": [{"device", "address", "total_size", "allocated_size",
                 "active_size", "requested_size", "stream", "segment_type",
                 "segment_pool_id", "is_expandable", "frames",
                 "blocks": [{"address", "size", "requested_size", "state",
                             "frames"}]}],
   "device_traces": [[]]}

Mapping: live and graph_live blocks are "active_allocated", free and
graph_free ones "inactive". Graph memory (graph_free and graph_live blocks,
every block of a packed segment and of an arena's range) goes in pool
(1, 0), the rest in (0, 0), so that the visualizer shows it as a pool of
its own, as PyTorch does for a CUDA graph's private pool. Each range of an
arena (a graph's addresses, version 2) becomes a segment at its own
address, as a graph sees it: PyTorch knows no pages seen at several
addresses, so where graphs share physical pages its segments add up to
more than stats.reserved_bytes, by the bytes printed at the end. A
PyTorch segment belongs to one pool, while a capturepool segment may hold
both kinds of blocks: such a segment becomes one PyTorch segment per run of
consecutive blocks of one kind, each at the address of its first block.
Segments of at most 2 MiB are "small" (PyTorch's small-pool segment size),
larger ones "large", by the capturepool segment's size. There are no
stack frames and no trace of events: the visualizer's allocator state views
show the segments and blocks, its timelines stay empty. Everything is on
device 0. The snapshot's sums are checked first (snapshot_check.py), one
warning line per check that fails. Standard library only.
Usage: python3 scripts/snapshot_to_torch.py SNAPSHOT.json OUT.pickle"""
import os
import pickle
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import snapshot_check  # noqa: E402

SMALL_SEGMENT = 2 << 20  # PyTorch's kSmallBuffer: segments of the small pool
ACTIVE = ("live", "graph_live")
GRAPH = ("graph_free", "graph_live")
EAGER_POOL, GRAPH_POOL = (0, 0), (1, 0)


def segment_stream(seg):
    """The stream of a segment's first block that names one: PyTorch gives
    each segment the stream it was allocated for; the snapshot has one per
    block, the one it was last used on (0: none)."""
    for b in seg["blocks"]:
        if b.get("stream"):
            return b["stream"]
    return 0


def runs(blocks, all_graph=False):
    """The blocks cut into runs of consecutive graph or non-graph blocks
    (all graph memory with all_graph)."""
    out = []
    for b in blocks:
        graph = all_graph or b.get("state") in GRAPH
        if out and out[-1][0] == graph:
            out[-1][1].append(b)
        else:
            out.append((graph, [b]))
    return out


def address_runs(snap):
    """Every segment and every arena's range, with whether all its memory
    is graph memory (packed segments and ranges), by address."""
    out = [(seg, seg.get("kind") == "packed") for seg in snap["segments"]]
    out += [(rng, True) for arena in snap.get("arenas", []) for rng in arena["ranges"]]
    return sorted(out, key=lambda r: r[0]["address"])


def convert(snap):
    segments = []
    for seg, all_graph in address_runs(snap):
        for graph, run in runs(seg["blocks"], all_graph):
            blocks = []
            for b in run:
                active = b.get("state") in ACTIVE
                blocks.append({
                    "address": seg["address"] + b["offset"],
                    "size": b["size"],
                    "requested_size": b["requested"] if active else 0,
                    "state": "active_allocated" if active else "inactive",
                    "frames": [],
                })
            allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
            segments.append({
                "device": 0,
                "address": blocks[0]["address"],
                "total_size": sum(b["size"] for b in blocks),
                "allocated_size": allocated,
                "active_size": allocated,  # no block is pending a free
                "requested_size": sum(b["requested_size"] for b in blocks),
                "stream": segment_stream({"blocks": run}),
                "segment_type": "small" if seg["size"] <= SMALL_SEGMENT else "large",
                "segment_pool_id": GRAPH_POOL if graph else EAGER_POOL,
                "is_expandable": False,
                "frames": [],
                "blocks": blocks,
            })
    return {"segments": segments, "device_traces": [[]]}


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.rsplit("\n", 1)[-1])
    path, out = sys.argv[1], sys.argv[2]
    try:
        snap = snapshot_check.load(path)
    except snapshot_check.SnapshotError as e:
        sys.exit(f"snapshot_to_torch: {e}")
    for w in snapshot_check.check(snap):
        print(f"snapshot_to_torch: warning: {w}", file=sys.stderr)
    torch_snap = convert(snap)
    # Protocol 4 is what torch.cuda.memory._dump_snapshot writes (pickle's
    # default from Python 3.8 to 3.13) and what the visualizer's reader knows.
    with open(out, "wb") as f:
        pickle.dump(torch_snap, f, protocol=4)
    graph_segs = sum(s["segment_pool_id"] == GRAPH_POOL for s in torch_snap["segments"])
    ranges = sum(len(arena["ranges"]) for arena in snap["arenas"])
    seen_twice = (sum(rng["size"] for arena in snap["arenas"] for rng in arena["ranges"])
                  - snapshot_check.physical_bytes(snap))
    print(f"snapshot_to_torch: wrote {out}: {len(torch_snap['segments'])} PyTorch segments from "
          f"{len(snap['segments'])} segments and {ranges} ranges, {graph_segs} of them graph memory "
          f"(pool {GRAPH_POOL}); {seen_twice} bytes of shared pages counted once per graph that maps them")


if __name__ == "__main__":
    main()
