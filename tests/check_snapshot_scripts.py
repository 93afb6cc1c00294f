"""Tests scripts/snapshot_plot.py and scripts/snapshot_to_torch.py (ctest:
snapshot_plot_fixture and snapshot_picture). Each script is run on a
snapshot; the test checks that the PNG and the SVG were written and are
what they claim to be, that the snapshot adds up (no warning line), and
loads the pickle back and checks it against the snapshot: segment and block
sizes, addresses, states, requested bytes, graph memory in pool (1, 0).

  fixture SNAPSHOT.json OUTDIR   the committed example snapshot; also a
                                 corrupted copy (each of the four sums must
                                 be reported), a segment of graph and other
                                 memory, and an empty pool
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
    for seg in sorted(snap["segments"], key=lambda s: s["address"]):
        last = None
        for b in seg["blocks"]:
            graph = b["state"] in ("graph_free", "graph_live")
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
    for key, total in (("reserved_bytes", sum(t["total_size"] for t in tsegs)),
                       ("allocated_bytes", sum(t["requested_size"] for t in tsegs)),
                       ("graph_reserved_bytes", sum(t["total_size"] for t in tsegs if t["segment_pool_id"] == (1, 0)))):
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
