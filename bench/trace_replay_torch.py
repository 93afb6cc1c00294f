"""PyTorch's side of trace_replay: replays each allocation trace
(bench/traces/*.trace, format in bench/traces/record_traces.py) through
PyTorch's caching allocator, torch.cuda.caching_allocator_alloc(size,
device, stream) and torch.cuda.caching_allocator_delete(ptr) on one
stream, once with the allocator's default configuration and once with
expandable_segments:True, each in a child process of its own
(bench/torch_alloc_modes.py says why).

For each trace and mode: the peak reserved bytes, torch.cuda.max_memory_reserved()
after the replay, counted from torch.cuda.reset_peak_memory_stats() with an
empty cache before it (less what was reserved then, normally nothing), and
the trace's peak live bytes: the most its live allocations ever add up to,
by their sizes in the trace, the least any allocator could reserve
(trace_replay computes the same). Prints, per trace and mode,
    csv,torch_trace,MODE,MODEL,PEAK_RESERVED,PEAK_LIVE
and a table of both modes side by side. Run on a GPU machine.
Usage: python3 bench/trace_replay_torch.py FILE.trace [...]"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_alloc_modes  # noqa: E402 (the folder is put on the path first)


def load(path):
    """(model, header fields, events): an event is (id, bytes), bytes 0 for
    a free, as trace_replay reads them."""
    model, header, events = os.path.basename(path).rsplit(".", 1)[0], {}, []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            if parts[0] == "#":
                header.update(p.split("=", 1) for p in parts[1:] if "=" in p)
            elif parts[0] == "a" and len(parts) >= 3:
                events.append((int(parts[1]), int(parts[2])))
            elif parts[0] == "f" and len(parts) >= 2:
                events.append((int(parts[1]), 0))
    return header.get("model", model), header, events


def peak_live(events):
    """The most bytes live at once, counted as the replay treats the events
    (trace_replay's peak_live is the same)."""
    live, now, peak = {}, 0, 0
    for ident, nbytes in events:
        if nbytes:
            now += nbytes
            live[ident] = nbytes
            peak = max(peak, now)
        else:
            now -= live.pop(ident, 0)
    return peak


def replay(torch, events, device, stream):
    """Allocates and frees as the trace does; frees what it left live. An id
    allocated twice keeps both blocks until the end, as trace_replay's
    replay does (record_traces.py never writes one)."""
    ptrs, extra = {}, []
    for ident, nbytes in events:
        if nbytes:
            if ident in ptrs:
                extra.append(ptrs[ident])
            ptrs[ident] = torch.cuda.caching_allocator_alloc(nbytes, device, stream)
        elif ident in ptrs:
            torch.cuda.caching_allocator_delete(ptrs.pop(ident))
    for ptr in list(ptrs.values()) + extra:
        torch.cuda.caching_allocator_delete(ptr)


def peak_reserved(torch, events):
    """Peak reserved bytes of one replay from an empty cache."""
    device = torch.cuda.current_device()
    stream = torch.cuda.current_stream(device)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_reserved(device)
    replay(torch, events, device, stream)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_reserved(device) - base
    torch.cuda.empty_cache()
    return peak, base


def child(mode, paths):
    import torch

    if not torch.cuda.is_available():
        sys.exit("trace_replay_torch: no CUDA device")
    torch.cuda.init()
    torch_alloc_modes.check_mode(torch, mode)
    for path in paths:
        model, _, events = load(path)
        peak, base = peak_reserved(torch, events)
        note = f" (less {base} bytes reserved before it)" if base else ""
        print(f"{mode}: {model}: {len(events)} events, peak reserved {peak / 2**20:.1f} MiB{note}", flush=True)
        print(f"csv,torch_trace,{mode},{model},{peak},{peak_live(events)}", flush=True)


def cell(rows, mode, model):
    """The csv fields of one mode's row of a model, or None."""
    return next((r for r in rows.get(mode, []) if len(r) >= 4 and r[0] == mode and r[1] == model), None)


def reserved_cells(row, live):
    mib = float(1 << 20)
    if not row or not live:
        return f"{'n/a':>10s} {'n/a':>8s}"
    return f"{int(row[2]) / mib:10.1f} {int(row[2]) / live:7.3f}x"


def summary(rows, paths):
    mib = float(1 << 20)
    print("trace_replay_torch: peak reserved MiB through PyTorch's caching allocator; x live: over the trace's "
          "peak live bytes; recorded: PyTorch's peak reserved when the trace was recorded")
    print(f"{'trace':18s} | {'peak live':>10s} | {'default':>10s} {'x live':>8s} | {'expandable':>10s} "
          f"{'x live':>8s} | {'recorded':>10s}")
    for path in paths:
        model, header, events = load(path)
        live = peak_live(events)
        recorded = header.get("torch_peak_reserved", "")
        print(" | ".join([f"{model:18s}", f"{live / mib:10.1f}",
                          reserved_cells(cell(rows, "default", model), live),
                          reserved_cells(cell(rows, "expandable", model), live),
                          f"{int(recorded) / mib:10.1f}" if recorded.isdigit() else f"{'n/a':>10s}"]))


def main():
    mode, paths = torch_alloc_modes.parse_mode(sys.argv[1:])
    if not paths:
        sys.exit("usage: python3 bench/trace_replay_torch.py FILE.trace [...]")
    if mode:
        child(mode, paths)
        return
    rows, failed = torch_alloc_modes.run_modes(os.path.abspath(__file__), paths)
    summary(rows, paths)
    if failed:
        sys.exit(f"trace_replay_torch: failed modes: {', '.join(failed)}")


if __name__ == "__main__":
    main()
