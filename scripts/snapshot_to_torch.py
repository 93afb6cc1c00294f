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
graph_free ones "inactive"; a segment that holds graph memory (any
graph_free or graph_live block) is put in pool (1, 0), the others in (0, 0),
so that the visualizer shows graph memory as a pool of its own, as PyTorch
does for a CUDA graph's private pool. Segments of at most 2 MiB are "small"
(PyTorch's small-pool segment size), larger ones "large". There are no
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
    """The stream a segment was last used on: PyTorch gives each segment the
    one it was allocated for; the snapshot has one per block, 0 for none."""
    for b in seg["blocks"]:
        if b.get("stream"):
            return b["stream"]
    return 0


def convert(snap):
    segments = []
    for seg in sorted(snap["segments"], key=lambda s: s["address"]):
        blocks = []
        for b in seg["blocks"]:
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
            "address": seg["address"],
            "total_size": seg["size"],
            "allocated_size": allocated,
            "active_size": allocated,  # no block is pending a free
            "requested_size": sum(b["requested_size"] for b in blocks),
            "stream": segment_stream(seg),
            "segment_type": "small" if seg["size"] <= SMALL_SEGMENT else "large",
            "segment_pool_id": GRAPH_POOL if any(b.get("state") in GRAPH for b in seg["blocks"]) else EAGER_POOL,
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
    print(f"snapshot_to_torch: wrote {out}: {len(torch_snap['segments'])} segments "
          f"({graph_segs} of graph memory, pool {GRAPH_POOL})")


if __name__ == "__main__":
    main()
