"""Tests scripts/snapshot_plot.py and scripts/snapshot_to_torch.py (ctest:
snapshot_plot_fixture and snapshot_picture). Each script is run on a
snapshot; the test checks that the PNG and the SVG were written and are
what they claim to be, that the snapshot adds up (no warning line), and
loads the pickle back and checks it against the snapshot: segment and block
sizes, addresses, states, requested bytes, graph memory in pool (1, 0), and
the sums in physical bytes (the arenas' ranges, at each graph's addresses,
less the bytes of pages seen at several addresses).

  fixture SNAPSHOT.json OUTDIR   the committed example snapshot; also a
                                 corrupted copy (each of the four sums must
                                 be reported), a segment of graph and other
                                 memory, an empty pool, and a version 2
                                 snapshot made from the example whose two
                                 graphs share a physical page (and a copy
                                 of it where an own page is mapped twice)
  demo DEMO SNAPSHOT.json        runs DEMO --quick --snapshot SNAPSHOT.json
                                 first; its snapshot must add up and hold
                                 the demo's graph

Exits 77 (skipped) where matplotlib is not installed.
Usage: python3 tests/check_snapshot_scripts.py fixture SNAPSHOT.json OUTDIR
       python3 tests/check_snapshot_scripts.py demo DEMO SNAPSHOT.json"""
import copy
import json
import os
import pickle
import subprocess
import sys

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "scripts")
failures = []


def fail(msg):
    print(f"FAIL: {msg}")
    failures.append(msg)


def run(args):
    """Runs a command; its output is shown, and returned as (status, stderr)."""
    print("$ " + " ".join(args), flush=True)
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sys.stdout.write(p.stdout + p.stderr)
    return p.returncode, p.stderr


def script(name, *args):
    return run([sys.executable, os.path.join(SCRIPTS, name), *args])


def remove(*paths):
    for path in paths:
        if os.path.exists(path):
            os.remove(path)


def check_pictures(snapshot, base, expect_warnings=()):
    """Draws snapshot into base.png and base.svg; every string of
    expect_warnings must be in a warning line, and there must be no warning
    if there are none expected."""
    remove(base + ".png", base + ".svg")
    status, err = script("snapshot_plot.py", snapshot, base)
    if status != 0:
        fail(f"snapshot_plot.py {snapshot} exited {status}")
    warnings = [line for line in err.splitlines() if line.startswith("snapshot_plot: warning: ")]
    if not expect_warnings and warnings:
        fail(f"{snapshot}: {len(warnings)} warning(s) from snapshot_plot.py, none expected")
    for text in expect_warnings:
        if not any(text in w for w in warnings):
            fail(f"{snapshot}: no warning naming {text!r}")
    for ext, magic in (("png", b"\x89PNG\r\n\x1a\n"), ("svg", b"<svg")):
        path = f"{base}.{ext}"
        if not os.path.isfile(path) or os.path.getsize(path) == 0:
            fail(f"{path} was not written")
            continue
        with open(path, "rb") as f:
            head = f.read(4096)
        if (ext == "png" and not head.startswith(magic)) or (ext == "svg" and magic not in head):
            fail(f"{path} is not a {ext.upper()} file")


def expected_torch_segments(snap):
    """(address, size, pool id, blocks) of the PyTorch segments the snapshot
    should give: each segment cut where its blocks turn from graph memory
    to other memory or back."""
    out = []
    runs = [(seg, seg.get("kind") == "packed") for seg in snap["segments"]]
    runs += [(rng, True) for arena in snap.get("arenas", []) for rng in arena["ranges"]]
    for seg, all_graph in sorted(runs, key=lambda r: r[0]["address"]):
        last = None
        for b in seg["blocks"]:
            graph = all_graph or b["state"] in ("graph_free", "graph_live")
            if graph != last:
                out.append([seg["address"] + b["offset"], 0, (1, 0) if graph else (0, 0), []])
                last = graph
            out[-1][1] += b["size"]
            out[-1][3].append(b)
    return out


def check_pickle(snapshot, out, torch_segments=None):
    """Converts snapshot into out and checks the pickle against it (and, if
    given, that it has that many PyTorch segments)."""
    remove(out)
    status, _ = script("snapshot_to_torch.py", snapshot, out)
    if status != 0:
        fail(f"snapshot_to_torch.py {snapshot} exited {status}")
        return
    with open(snapshot) as f:
        snap = json.load(f)
    with open(out, "rb") as f:
        torch_snap = pickle.load(f)
    if sorted(torch_snap) != ["device_traces", "segments"] or torch_snap["device_traces"] != [[]]:
        fail(f"{out}: top-level keys {sorted(torch_snap)}, device_traces {torch_snap.get('device_traces')!r}")
    want = expected_torch_segments(snap)
    tsegs = torch_snap["segments"]
    if len(tsegs) != len(want) or (torch_segments is not None and len(tsegs) != torch_segments):
        fail(f"{out}: {len(tsegs)} segments, want {len(want)}" +
             ("" if torch_segments is None else f" (and {torch_segments})"))
        return
    seg_keys = ["active_size", "address", "allocated_size", "blocks", "device", "frames", "is_expandable",
                "requested_size", "segment_pool_id", "segment_type", "stream", "total_size"]
    for i, ((address, size, pool, blocks), t) in enumerate(zip(want, tsegs)):
        where = f"{out}: segment {i}"
        if sorted(t) != seg_keys:
            fail(f"{where}: keys {sorted(t)}")
            continue
        if (t["address"], t["total_size"], t["segment_pool_id"], len(t["blocks"])) != (address, size, pool,
                                                                                         len(blocks)):
            fail(f"{where}: address {t['address']:#x}, size {t['total_size']}, pool {t['segment_pool_id']}, "
                 f"{len(t['blocks'])} blocks; want {address:#x}, {size}, {pool}, {len(blocks)}")
            continue
        addr, allocated, requested = address, 0, 0
        for j, (b, tb) in enumerate(zip(blocks, t["blocks"])):
            active = b["state"] in ("live", "graph_live")
            want_state = "active_allocated" if active else "inactive"
            if sorted(tb) != ["address", "frames", "requested_size", "size", "state"]:
                fail(f"{where} block {j}: keys {sorted(tb)}")
                continue
            if tb["address"] != addr or tb["size"] != b["size"] or tb["state"] != want_state:
                fail(f"{where} block {j}: address {tb['address']:#x} (want {addr:#x}), size {tb['size']} "
                     f"(want {b['size']}), state {tb['state']} (want {want_state})")
            addr += tb["size"]
            if active:
                allocated += tb["size"]
                requested += tb["requested_size"]
        if (t["allocated_size"], t["active_size"], t["requested_size"]) != (allocated, allocated, requested):
            fail(f"{where}: allocated/active/requested {t['allocated_size']}/{t['active_size']}/"
                 f"{t['requested_size']}, blocks give {allocated}/{allocated}/{requested}")
    # PyTorch sees each graph's addresses; the stats count physical pages once.
    pages = {}
    for arena in snap.get("arenas", []):
        for rng in arena["ranges"]:
            for page in rng["pages"]:
                if not page.get("packed"):  # else a packed segment's, counted there
                    pages[page["physical"]] = True
    page_size = snap.get("physical", {}).get("page_size", 2 << 20)
    plain = sum(rng["size"] for arena in snap.get("arenas", []) for rng in arena["ranges"] if not rng["pages"])
    seen_twice = (sum(rng["size"] for arena in snap.get("arenas", []) for rng in arena["ranges"])
                  - len(pages) * page_size - plain)
    for key, total in (("reserved_bytes", sum(t["total_size"] for t in tsegs) - seen_twice),
                       ("allocated_bytes", sum(t["requested_size"] for t in tsegs)),
                       ("graph_reserved_bytes",
                        sum(t["total_size"] for t in tsegs if t["segment_pool_id"] == (1, 0)) - seen_twice)):
        if total != snap["stats"][key]:
            fail(f"{out}: the PyTorch segments give {total} for stats.{key}, the snapshot says {snap['stats'][key]}")


def corrupted(snap):
    """A copy in which each of the four sums is off."""
    bad = copy.deepcopy(snap)
    bad["stats"]["reserved_bytes"] += 4096
    bad["stats"]["allocated_bytes"] += 1
    bad["stats"]["graph_reserved_bytes"] += 512
    last = bad["segments"][0]["blocks"][-1]
    last["size"] -= 256  # the segment's blocks no longer fill it
    return bad


PAGE = 2 << 20


def with_shared_pages(snap):
    """The example as version 2: its eager segment, and its two graphs each
    in an arena of two pages at addresses of its own, their scratch on one
    shared physical page (id 1), each output on a page of its own."""
    v2 = copy.deepcopy(snap)
    v2["version"] = 2
    eager = v2["segments"][0]
    eager["kind"] = "eager"
    v2["segments"] = [eager]
    v2["arenas"] = []
    base = eager["address"] + (64 << 30)
    for graph, (out, requested, own_id) in enumerate(((4096, 4000, 101), (1024, 500, 102)), start=1):
        block = {"stream": 3, "param": False}
        v2["arenas"].append({"id": graph, "graph": graph, "state": "graph", "ranges": [{
            "address": base + (graph - 1) * (1 << 30), "size": 2 * PAGE,
            "pages": [{"offset": 0, "physical": 1, "own": False}, {"offset": PAGE, "physical": own_id, "own": True}],
            "blocks": [dict(block, offset=0, size=PAGE, requested=0, state="graph_free", graphs=[graph], output=False),
                       dict(block, offset=PAGE, size=out, requested=requested, state="graph_live", graphs=[graph],
                            output=True),
                       dict(block, offset=PAGE + out, size=PAGE - out, requested=0, state="graph_free",
                            graphs=[graph], output=False)]}]})
    eager_live = sum(b["requested"] for b in eager["blocks"] if b["state"] == "live")
    v2["physical"] = {"page_size": PAGE, "shared_pages": 1, "own_pages": 2, "plain_bytes": 0, "bytes": 3 * PAGE}
    v2["stats"].update(reserved_bytes=eager["size"] + 3 * PAGE, graph_reserved_bytes=3 * PAGE,
                       allocated_bytes=eager_live + 4000 + 500, segment_count=3)
    for g in v2["graphs"]:
        g.update(write_bytes=2 * PAGE, shared_write_bytes=PAGE, own_bytes=PAGE)
    return v2


def fixture(snapshot, outdir):
    os.makedirs(outdir, exist_ok=True)
    check_pictures(snapshot, os.path.join(outdir, "snapshot-example"))
    check_pickle(snapshot, os.path.join(outdir, "snapshot-example.pickle"), torch_segments=2)

    with open(snapshot) as f:
        snap = json.load(f)
    bad_path = os.path.join(outdir, "snapshot-corrupted.json")
    with open(bad_path, "w") as f:
        json.dump(corrupted(snap), f)
    check_pictures(bad_path, os.path.join(outdir, "snapshot-corrupted"),
                   expect_warnings=("stats.reserved_bytes", "the segment's size", "stats.allocated_bytes",
                                    "stats.graph_reserved_bytes"))

    # A segment that holds graph and other memory: live, graph_free, free
    # becomes three PyTorch segments, the middle one in the graph pool.
    mixed = copy.deepcopy(snap)
    mixed["segments"][0]["blocks"][1].update(state="graph_free", graphs=[1])
    mixed["stats"]["graph_reserved_bytes"] += mixed["segments"][0]["blocks"][1]["size"]
    mixed_path = os.path.join(outdir, "snapshot-mixed.json")
    with open(mixed_path, "w") as f:
        json.dump(mixed, f)
    check_pictures(mixed_path, os.path.join(outdir, "snapshot-mixed"))
    check_pickle(mixed_path, os.path.join(outdir, "snapshot-mixed.pickle"), torch_segments=4)

    empty = {"version": 1, "backend": "host", "stats": {k: 0 for k in snap["stats"]}, "segments": [], "graphs": []}
    empty["stats"]["struct_size"] = snap["stats"]["struct_size"]
    empty_path = os.path.join(outdir, "snapshot-empty.json")
    with open(empty_path, "w") as f:
        json.dump(empty, f)
    check_pictures(empty_path, os.path.join(outdir, "snapshot-empty"))
    check_pickle(empty_path, os.path.join(outdir, "snapshot-empty.pickle"), torch_segments=0)

    # Version 2: two graphs' ranges over one shared physical page; the
    # pickle has the eager segment's two runs and one segment per range.
    shared = with_shared_pages(snap)
    shared_path = os.path.join(outdir, "snapshot-shared-pages.json")
    with open(shared_path, "w") as f:
        json.dump(shared, f)
    check_pictures(shared_path, os.path.join(outdir, "snapshot-shared-pages"))
    check_pickle(shared_path, os.path.join(outdir, "snapshot-shared-pages.pickle"), torch_segments=3)
    # An own page given the shared page's id: counted once, the physical
    # sums are a page short, and the page is both own and shared.
    twice = copy.deepcopy(shared)
    twice["arenas"][1]["ranges"][0]["pages"][1]["physical"] = 101
    twice_path = os.path.join(outdir, "snapshot-own-twice.json")
    with open(twice_path, "w") as f:
        json.dump(twice, f)
    check_pictures(twice_path, os.path.join(outdir, "snapshot-own-twice"),
                   expect_warnings=("stats.reserved_bytes", "stats.graph_reserved_bytes", "physical.own_pages",
                                    "mapped more than once"))
    # Graph memory called "free" (reusable outside capture, which no
    # arena's memory is), and a stream that is an internal key past 2^53.
    keyed = copy.deepcopy(shared)
    keyed["arenas"][0]["ranges"][0]["blocks"][0]["state"] = "free"
    keyed["arenas"][1]["ranges"][0]["blocks"][1]["stream"] = (1 << 62) + 2
    keyed_path = os.path.join(outdir, "snapshot-keyed.json")
    with open(keyed_path, "w") as f:
        json.dump(keyed, f)
    check_pictures(keyed_path, os.path.join(outdir, "snapshot-keyed"),
                   expect_warnings=("graph memory in state(s) ['free']", "past 2^53"))


def demo(program, snapshot):
    remove(snapshot)
    status, _ = run([program, "--quick", "--snapshot", snapshot])
    if status != 0 or not os.path.isfile(snapshot):
        fail(f"{program} --quick --snapshot {snapshot} exited {status}" +
             ("" if os.path.isfile(snapshot) else ", no snapshot written"))
        return
    with open(snapshot) as f:
        snap = json.load(f)
    if not snap.get("graphs") or not snap["stats"].get("graph_reserved_bytes"):
        fail(f"{snapshot}: the demo's graph holds the pool, yet the snapshot lists "
             f"{len(snap.get('graphs', []))} graphs and {snap['stats'].get('graph_reserved_bytes')} "
             "graph-reserved bytes")
    base = os.path.splitext(snapshot)[0]
    check_pictures(snapshot, base)
    check_pickle(snapshot, base + ".pickle")


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("fixture", "demo"):
        sys.exit(__doc__.split("Usage: ", 1)[1])
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        print(f"SKIPPED: matplotlib cannot be imported by {sys.executable} ({e}); "
              "python3 -m pip install --user matplotlib")
        sys.exit(77)
    if sys.argv[1] == "fixture":
        fixture(sys.argv[2], sys.argv[3])
    else:
        demo(sys.argv[2], sys.argv[3])
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("OK")


if __name__ == "__main__":
    main()
