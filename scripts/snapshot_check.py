"""Reads a pool snapshot (the JSON object cpool_pool_write_snapshot writes)
and checks that it adds up, in physical bytes (version 2): segment sizes
plus the distinct physical pages behind the arenas' ranges to
stats.reserved_bytes; sizes of the eager segments' graph_free and
graph_live blocks, plus the packed segments and those pages, to
stats.graph_reserved_bytes; block sizes to their segment's (or range's)
size; requested bytes of live and graph_live blocks to
stats.allocated_bytes. A version 1 snapshot (no arenas) is checked by its
own sums: segment sizes to reserved_bytes, graph_free and graph_live sizes
to graph_reserved_bytes. Also that blocks follow one another without gaps,
pages cover their range, states are known (graph memory, in packed
segments and arenas, only graph_free or graph_live), every number fits in
2^53 and the counts match.
snapshot_plot.py and snapshot_to_torch.py use it; run on its own it prints
one warning line per check that fails and exits 1 if there was any.
Usage: python3 scripts/snapshot_check.py SNAPSHOT.json"""
import json
import sys

STATES = ("free", "live", "graph_free", "graph_live")
VERSIONS = (1, 2)
PAGE_SIZE = 2 << 20  # where "physical" does not say
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
        check_run(path, f"segment {i}", seg)
    arenas = snap.setdefault("arenas", [])
    if not isinstance(arenas, list):
        raise SnapshotError(f"{path}: \"arenas\" is not a list")
    for a, arena in enumerate(arenas):
        if not isinstance(arena, dict) or not isinstance(arena.get("ranges"), list):
            raise SnapshotError(f"{path}: arena {a} has no \"ranges\" list")
        for r, rng in enumerate(arena["ranges"]):
            check_run(path, f"arena {a} range {r}", rng)
            if not isinstance(rng.get("pages"), list):
                raise SnapshotError(f"{path}: arena {a} range {r} has no \"pages\" list")
            for k, page in enumerate(rng["pages"]):
                if not isinstance(page, dict) or not all(isinstance(page.get(key), int) for key in ("offset", "physical")):
                    raise SnapshotError(f"{path}: arena {a} range {r} page {k} has no integer offset and physical id")
    return snap


def check_run(path, where, run):
    """A segment or a range: an address, a size and a list of blocks with
    integer offsets, sizes and requested bytes."""
    if not isinstance(run, dict) or not isinstance(run.get("blocks"), list):
        raise SnapshotError(f"{path}: {where} has no \"blocks\" list")
    for key in ("address", "size"):
        if not isinstance(run.get(key), int):
            raise SnapshotError(f"{path}: {where} has no integer \"{key}\"")
    for j, b in enumerate(run["blocks"]):
        for key in ("offset", "size", "requested"):
            if not isinstance(b.get(key), int):
                raise SnapshotError(f"{path}: {where} block {j} has no integer \"{key}\"")


def page_size(snap):
    return (snap.get("physical") or {}).get("page_size") or PAGE_SIZE


def physical_pages(snap):
    """The physical pages behind the arenas' ranges: {id: {"own": bool,
    "packed": bool, "maps": [(arena id, graph id, address)]}}, and the bytes
    of ranges with no pages (plain memory of an arena's own). A "packed"
    page is a page of a packed segment that ranges borrow: its bytes count
    in that segment."""
    pages, plain = {}, 0
    for arena in snap.get("arenas", []):
        for rng in arena["ranges"]:
            if not rng["pages"]:
                plain += rng["size"]
            for page in rng["pages"]:
                entry = pages.setdefault(page["physical"], {"own": bool(page.get("own")),
                                                            "packed": bool(page.get("packed")), "maps": []})
                entry["maps"].append((arena.get("id"), arena.get("graph", 0), rng["address"] + page["offset"]))
    return pages, plain


def physical_bytes(snap):
    """Bytes of the distinct physical pages behind the arenas."""
    pages, plain = physical_pages(snap)
    return sum(not p["packed"] for p in pages.values()) * page_size(snap) + plain


def exact_limit_breaches(node, found=None):
    """The integers in the snapshot above 2^53 (where a double, and so the
    PyTorch memory visualizer's JavaScript, rounds them)."""
    found = [] if found is None else found
    if isinstance(node, bool):
        return found
    if isinstance(node, int) and node > 1 << 53:
        found.append(node)
    elif isinstance(node, dict):
        for value in node.values():
            exact_limit_breaches(value, found)
    elif isinstance(node, list):
        for value in node:
            exact_limit_breaches(value, found)
    return found


def check(snap):
    """One message per check that fails; an empty list if the snapshot adds up."""
    stats = snap["stats"]
    warnings = [f"stats.{name} is missing or not an integer" for name in STATS
                if not isinstance(stats.get(name), int)]
    version = snap.get("version")
    if version not in VERSIONS:
        warnings.append(f"version is {version!r}, this reader knows versions {', '.join(map(str, VERSIONS))}")
    if snap.get("backend") not in ("host", "cuda"):
        warnings.append(f"backend is {snap.get('backend')!r}, not \"host\" or \"cuda\"")

    segs = snap["segments"]
    ranges = [rng for arena in snap["arenas"] for rng in arena["ranges"]]
    runs = segs + ranges
    blocks = [b for run in runs for b in run["blocks"]]
    eager = [seg for seg in segs if seg.get("kind", "eager") == "eager"]
    packed = [seg for seg in segs if seg.get("kind") == "packed"]

    # The four sums the snapshot promises: in physical bytes, where graphs
    # map shared pages (the arenas). A suspended pool holds no memory (its
    # stats say 0): its segments and arenas add up to what the resume maps
    # back, which "suspended" says.
    suspended = snap.get("suspended")
    resident = dict(stats, **suspended) if isinstance(suspended, dict) else stats
    physical = physical_bytes(snap)
    total = sum(seg["size"] for seg in segs) + physical
    want = resident.get("reserved_bytes")
    if total != want:
        warnings.append(f"segment sizes and the arenas' physical pages add up to {total} bytes, "
                        f"stats.reserved_bytes is {want}")
    for i, seg in enumerate(segs):
        total = sum(b["size"] for b in seg["blocks"])
        if total != seg["size"]:
            warnings.append(f"segment {i} (address {seg['address']:#x}): block sizes add up to {total} bytes, "
                            f"the segment's size is {seg['size']}")
    for i, rng in enumerate(ranges):
        total = sum(b["size"] for b in rng["blocks"])
        if total != rng["size"]:
            warnings.append(f"range {i} (address {rng['address']:#x}): block sizes add up to {total} bytes, "
                            f"the range's size is {rng['size']}")
        offsets = [page["offset"] for page in rng["pages"]]
        if offsets and offsets != list(range(0, rng["size"], page_size(snap))):
            warnings.append(f"range {i} (address {rng['address']:#x}): its pages do not cover it page by page")
    total = sum(b["requested"] for b in blocks if b.get("state") in ("live", "graph_live"))
    want = stats.get("allocated_bytes")
    if total != want:
        warnings.append(f"requested bytes of live and graph_live blocks add up to {total}, "
                        f"stats.allocated_bytes is {want}")
    total = (sum(b["size"] for seg in eager for b in seg["blocks"] if b.get("state") in ("graph_free", "graph_live"))
             + sum(seg["size"] for seg in packed) + physical)
    want = resident.get("graph_reserved_bytes")
    if total != want:
        warnings.append(f"sizes of graph_free and graph_live blocks, packed segments and the arenas' physical pages "
                        f"add up to {total} bytes, stats.graph_reserved_bytes is {want}")
    counts = snap.get("physical")
    if isinstance(counts, dict):
        pages, plain = physical_pages(snap)
        own = sum(1 for p in pages.values() if p["own"])
        packed = sum(1 for p in pages.values() if p["packed"])
        seen = {"shared_pages": len(pages) - own - packed, "own_pages": own, "plain_bytes": plain, "bytes": physical}
        for key, value in seen.items():
            if key in counts and counts[key] != value:
                warnings.append(f"physical.{key} is {counts[key]}, the arenas' pages give {value}")
        shared_twice = [pid for pid, p in pages.items() if p["own"] and len(p["maps"]) > 1]
        if shared_twice:
            warnings.append(f"own physical page(s) {sorted(shared_twice)} mapped more than once")

    # What the pictures rely on: blocks in order without gaps, known states
    # and graphs, counts that match the arrays.
    graph_ids = {g.get("id") for g in snap["graphs"]}
    for i, seg in enumerate(runs):
        offset = 0
        for j, b in enumerate(seg["blocks"]):
            where = f"segment {i} block {j}" if i < len(segs) else f"range {i - len(segs)} block {j}"
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
    # Graph memory is graph memory free or not: the packed segments' and
    # the arenas' blocks serve captures only.
    packed_segs = [seg for seg in segs if seg.get("kind") == "packed"]
    for i, run in enumerate(packed_segs + ranges):
        where = f"packed segment {i}" if i < len(packed_segs) else f"range {i - len(packed_segs)}"
        wrong = sorted({b.get("state") for b in run["blocks"]} - {"graph_free", "graph_live"})
        if wrong:
            warnings.append(f"{where}: graph memory in state(s) {wrong}")
    big = exact_limit_breaches(snap)
    if big:
        warnings.append(f"{len(big)} number(s) past 2^53, which JavaScript readers do not read exactly, "
                        f"e.g. {big[0]}")
    if isinstance(resident.get("segment_count"), int) and resident["segment_count"] != len(runs):
        warnings.append(f"stats.segment_count is {resident['segment_count']}, \"segments\" and the arenas' ranges "
                        f"have {len(runs)}")
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
    ranges = [rng for arena in snap["arenas"] for rng in arena["ranges"]]
    print(f"snapshot_check: {sys.argv[1]}: {len(snap['segments'])} segments, {len(snap['arenas'])} arenas with "
          f"{len(ranges)} ranges, {sum(len(s['blocks']) for s in snap['segments'] + ranges)} blocks, "
          f"{len(physical_pages(snap)[0])} physical pages, {len(snap['graphs'])} graphs: adds up")


if __name__ == "__main__":
    main()
