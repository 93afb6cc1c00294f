"""Reads a pool snapshot (the JSON object cpool_pool_write_snapshot writes)
and checks that it adds up: segment sizes to stats.reserved_bytes, block
sizes to their segment's size, requested bytes of live and graph_live
blocks to stats.allocated_bytes, sizes of graph_free and graph_live blocks
to stats.graph_reserved_bytes; and that blocks follow one another without
gaps, states are known and the counts match. snapshot_plot.py and
snapshot_to_torch.py use it; run on its own it prints one warning line per
check that fails and exits 1 if there was any.
Usage: python3 scripts/snapshot_check.py SNAPSHOT.json"""
import json
import sys

STATES = ("free", "live", "graph_free", "graph_live")
STATS = ("struct_size", "reserved_bytes", "reserved_bytes_peak", "allocated_bytes", "allocated_bytes_peak",
         "graph_reserved_bytes", "alloc_count", "free_count", "segment_count", "cached_bytes", "graph_count")


class SnapshotError(Exception):
    """The file is not a snapshot that can be read at all (missing keys, wrong types)."""


def load(path):
    """The snapshot as a dict, with the keys every reader needs checked."""
    try:
        with open(path) as f:
            snap = json.load(f)
    except (OSError, ValueError) as e:
        raise SnapshotError(f"{path}: {e}")
    if not isinstance(snap, dict):
        raise SnapshotError(f"{path}: not a JSON object")
    for key, kind in (("stats", dict), ("segments", list), ("graphs", list)):
        if not isinstance(snap.get(key), kind):
            raise SnapshotError(f"{path}: no \"{key}\" {kind.__name__}")
    for i, seg in enumerate(snap["segments"]):
        if not isinstance(seg, dict) or not isinstance(seg.get("blocks"), list):
            raise SnapshotError(f"{path}: segment {i} has no \"blocks\" list")
        for key in ("address", "size"):
            if not isinstance(seg.get(key), int):
                raise SnapshotError(f"{path}: segment {i} has no integer \"{key}\"")
        for j, b in enumerate(seg["blocks"]):
            for key in ("offset", "size", "requested"):
                if not isinstance(b.get(key), int):
                    raise SnapshotError(f"{path}: segment {i} block {j} has no integer \"{key}\"")
    return snap


def check(snap):
    """One message per check that fails; an empty list if the snapshot adds up."""
    stats = snap["stats"]
    warnings = [f"stats.{name} is missing or not an integer" for name in STATS
                if not isinstance(stats.get(name), int)]
    if snap.get("version") != 1:
        warnings.append(f"version is {snap.get('version')!r}, this reader knows version 1")
    if snap.get("backend") not in ("host", "cuda"):
        warnings.append(f"backend is {snap.get('backend')!r}, not \"host\" or \"cuda\"")

    segs = snap["segments"]
    blocks = [b for seg in segs for b in seg["blocks"]]

    # The four sums the snapshot promises.
    total = sum(seg["size"] for seg in segs)
    want = stats.get("reserved_bytes")
    if total != want:
        warnings.append(f"segment sizes add up to {total} bytes, stats.reserved_bytes is {want}")
    for i, seg in enumerate(segs):
        total = sum(b["size"] for b in seg["blocks"])
        if total != seg["size"]:
            warnings.append(f"segment {i} (address {seg['address']:#x}): block sizes add up to {total} bytes, "
                            f"the segment's size is {seg['size']}")
    total = sum(b["requested"] for b in blocks if b.get("state") in ("live", "graph_live"))
    want = stats.get("allocated_bytes")
    if total != want:
        warnings.append(f"requested bytes of live and graph_live blocks add up to {total}, "
                        f"stats.allocated_bytes is {want}")
    total = sum(b["size"] for b in blocks if b.get("state") in ("graph_free", "graph_live"))
    want = stats.get("graph_reserved_bytes")
    if total != want:
        warnings.append(f"sizes of graph_free and graph_live blocks add up to {total} bytes, "
                        f"stats.graph_reserved_bytes is {want}")

    # What the pictures rely on: blocks in order without gaps, known states
    # and graphs, counts that match the arrays.
    graph_ids = {g.get("id") for g in snap["graphs"]}
    for i, seg in enumerate(segs):
        offset = 0
        for j, b in enumerate(seg["blocks"]):
            where = f"segment {i} block {j}"
            if b["offset"] != offset:
                warnings.append(f"{where}: offset {b['offset']}, the blocks before it end at {offset}")
            offset = b["offset"] + b["size"]
            if b.get("state") not in STATES:
                warnings.append(f"{where}: state {b.get('state')!r} is none of {', '.join(STATES)}")
            if b["requested"] > b["size"]:
                warnings.append(f"{where}: requested {b['requested']} bytes of a {b['size']}-byte block")
            unknown = sorted(set(b.get("graphs", [])) - graph_ids)
            if unknown:
                warnings.append(f"{where}: written by graph(s) {unknown} that \"graphs\" does not list")
    if isinstance(stats.get("segment_count"), int) and stats["segment_count"] != len(segs):
        warnings.append(f"stats.segment_count is {stats['segment_count']}, \"segments\" has {len(segs)}")
    if isinstance(stats.get("graph_count"), int) and stats["graph_count"] != len(snap["graphs"]):
        warnings.append(f"stats.graph_count is {stats['graph_count']}, \"graphs\" has {len(snap['graphs'])}")
    return warnings


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.rsplit("\n", 1)[-1])
    try:
        snap = load(sys.argv[1])
    except SnapshotError as e:
        sys.exit(f"snapshot_check: {e}")
    warnings = check(snap)
    for w in warnings:
        print(f"snapshot_check: warning: {w}", file=sys.stderr)
    if warnings:
        sys.exit(1)
    print(f"snapshot_check: {sys.argv[1]}: {len(snap['segments'])} segments, "
          f"{sum(len(s['blocks']) for s in snap['segments'])} blocks, {len(snap['graphs'])} graphs: adds up")


if __name__ == "__main__":
    main()
