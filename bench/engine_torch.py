"""PyTorch's side of engine_bench: 8 graphs captured into one pool from
torch.cuda.graph_pool_handle(), each with torch.cuda.graph(g, pool=shared,
stream=side). Graph i's capture makes a uint8 scratch of (1 << i) MiB,
fills it with a byte unique to i (fill_), clones its first (64 << i) KiB
into the output, which it returns and the script keeps as long as the
graph, and drops the scratch. Capture orders as engine_bench's: ascending,
descending, a fixed shuffle.

Memory: torch.cuda.memory_reserved() after the captures less before them
(torch.cuda.synchronize() and torch.cuda.empty_cache() before the first
reading), over engine_bench's lower bound (the largest scratch plus every
output). Then 300 replays in the same random order as engine_bench's (the
same splitmix64 and seed): after a replay its graph's output is checked,
and every replayed graph's every 10 replays; a graph whose output no longer
holds its byte counts as overwritten (PyTorch refuses no replay). Each
configuration of the caching allocator, the default and
expandable_segments:True, runs in a child process of its own
(bench/torch_alloc_modes.py). Prints a table last and, per mode and order,
    csv,engine_torch,MODE,ORDER,RATIO,RESERVED_BYTES,BOUND_BYTES,OVERWRITTEN,LAUNCHES
Run on a GPU machine.
Usage: python3 bench/engine_torch.py [smallest-scratch-KiB (1024)] [launches (300)]"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_alloc_modes  # noqa: E402 (the folder is put on the path first)

GRAPHS = 8
CHECK_EVERY = 10
OUTPUT_DIVISOR = 16
MIXED_ORDER = [3, 7, 0, 5, 2, 6, 1, 4]
ORDERS = {"ascending": list(range(GRAPHS)), "descending": list(reversed(range(GRAPHS))), "mixed": MIXED_ORDER}
SEED = 42
MASK = (1 << 64) - 1


def launch_order(launches):
    """The graphs to replay, drawn as next_random in engine_bench.c."""
    state, order = SEED, []
    for _ in range(launches):
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        order.append((z ^ (z >> 31)) % GRAPHS)
    return order


def sizes(unit):
    """Per graph: (scratch bytes, output bytes, fill byte)."""
    return [(unit << i, (unit << i) // OUTPUT_DIVISOR, 0x11 * (i + 1)) for i in range(GRAPHS)]


def lower_bound(unit):
    return max(s for s, _, _ in sizes(unit)) + sum(o for _, o, _ in sizes(unit))


def engine_step(torch, scratch_bytes, output_bytes, value):
    scratch = torch.empty(scratch_bytes, dtype=torch.uint8, device="cuda")
    scratch.fill_(value)
    out = scratch[:output_bytes].clone()
    del scratch
    return out


def run_order(torch, unit, order, launches):
    """(reserved bytes after the captures, graphs found overwritten)."""
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_reserved()
    pool = torch.cuda.graph_pool_handle()
    graphs, outputs = [None] * GRAPHS, [None] * GRAPHS
    for i in ORDERS[order]:
        scratch_bytes, output_bytes, value = sizes(unit)[i]
        graphs[i] = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graphs[i], pool=pool, stream=side):
            outputs[i] = engine_step(torch, scratch_bytes, output_bytes, value)
    torch.cuda.synchronize()
    reserved = torch.cuda.memory_reserved() - base
    values = [value for _, _, value in sizes(unit)]
    launched, overwritten = set(), set()
    for n, i in enumerate(launch_order(launches)):
        graphs[i].replay()
        launched.add(i)
        for j in sorted(launched) if (n + 1) % CHECK_EVERY == 0 else [i]:
            if not bool((outputs[j] == values[j]).all()):
                overwritten.add(j)
    torch.cuda.synchronize()
    del graphs, outputs
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return reserved, len(overwritten)


def child(mode, unit, launches):
    import torch

    if not torch.cuda.is_available():
        sys.exit("engine_torch: no CUDA device")
    torch.cuda.init()
    torch_alloc_modes.check_mode(torch, mode)
    # One eager step first, so that nothing lazy (the kernels' modules)
    # happens under capture; its memory is given back before the first reading.
    engine_step(torch, unit, unit // OUTPUT_DIVISOR, 1)
    torch.cuda.synchronize()
    bound = lower_bound(unit)
    for order in ORDERS:
        reserved, overwritten = run_order(torch, unit, order, launches)
        print(f"{mode}: {order}: reserved {reserved / 2**20:.1f} MiB, {overwritten} outputs overwritten", flush=True)
        print(f"csv,engine_torch,{mode},{order},{reserved / bound:.4f},{reserved},{bound},{overwritten},{launches}",
              flush=True)


def summary(rows, unit, launches):
    mib = float(1 << 20)
    print(f"engine_torch: {GRAPHS} graphs, one shared graph pool, scratch {unit / mib:.3g} to "
          f"{(unit << (GRAPHS - 1)) / mib:.4g} MiB, {launches} replays in one random order; lower bound (the "
          f"largest scratch plus every output) {lower_bound(unit) / mib:.1f} MiB; overwritten: graphs, of {GRAPHS}")
    print(f"{'order':11s} | {'default MiB':>11s} {'x bound':>8s} {'overwritten':>11s} | "
          f"{'expandable MiB':>14s} {'x bound':>8s} {'overwritten':>11s}")
    for order in ORDERS:
        parts = [f"{order:11s}"]
        for mode, width in zip(torch_alloc_modes.MODES, (11, 14)):
            r = next((r for r in rows.get(mode, []) if len(r) >= 7 and r[1] == order), None)
            parts.append(f"{int(r[3]) / mib:{width}.1f} {float(r[2]):7.3f}x {int(r[5]):11d}" if r else
                         f"{'n/a':>{width}s} {'n/a':>8s} {'n/a':>11s}")
        print(" | ".join(parts))


def main():
    mode, rest = torch_alloc_modes.parse_mode(sys.argv[1:])
    unit = (int(rest[0]) if rest else 1024) << 10
    launches = int(rest[1]) if len(rest) > 1 else 300
    if mode:
        child(mode, unit, launches)
        return
    rows, failed = torch_alloc_modes.run_modes(os.path.abspath(__file__), rest)
    summary(rows, unit, launches)
    if failed:
        sys.exit(f"engine_torch: failed modes: {', '.join(failed)}")


if __name__ == "__main__":
    main()
