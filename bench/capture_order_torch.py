"""PyTorch's side of capture_order_bench: the same 16 forwards (batch 1 to
256; LAYERS layers of activations of b * 64, b * 256 and b * 128 KiB, each
made before the one before it is dropped and filled with fill_, the last
dropped before the capture ends), each captured with
torch.cuda.graph(g, pool=shared, stream=side) into one pool from
torch.cuda.graph_pool_handle(), every graph kept: smallest batch first,
then largest first with a fresh pool, then the largest graph alone.

The figure of an order is torch.cuda.memory_reserved() after its captures
less before them (torch.cuda.synchronize() and torch.cuda.empty_cache()
before the first reading), over the largest graph's scratch (its peak live
bytes, b * 384 KiB at b = 256); every graph is then replayed once. Each
configuration of the caching allocator, the default and
expandable_segments:True, runs in a child process of its own
(bench/torch_alloc_modes.py). Prints a table and, per mode and order,
    csv,capture_order_torch,MODE,ORDER,RATIO,RESERVED_BYTES,LARGEST_SCRATCH_BYTES
Run on a GPU machine.
Usage: python3 bench/capture_order_torch.py"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_alloc_modes  # noqa: E402 (the folder is put on the path first)

BATCHES = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 208, 224, 256]
ACT_KIB = [64, 256, 128]
LAYERS = 4
ORDERS = ("smallest-first", "largest-first", "largest-alone")


def act_bytes(batch, k):
    return batch * ACT_KIB[k % len(ACT_KIB)] << 10


def forward_scratch(batch):
    """A forward's peak of live bytes: an activation and the one before it."""
    sizes = [act_bytes(batch, k) for k in range(LAYERS * len(ACT_KIB))]
    return max(a + b for a, b in zip([0] + sizes, sizes))


def forward(torch, batch):
    prev = None
    for k in range(LAYERS * len(ACT_KIB)):
        cur = torch.empty(act_bytes(batch, k), dtype=torch.uint8, device="cuda")
        cur.fill_(k + 1)
        prev = cur  # drops the one before, now that the next exists
    del cur, prev


def order_batches(order):
    if order == "smallest-first":
        return list(BATCHES)
    if order == "largest-first":
        return sorted(BATCHES, reverse=True)
    return [max(BATCHES)]


def reserved_for_order(torch, order):
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_reserved()
    pool = torch.cuda.graph_pool_handle()
    graphs = []
    for batch in order_batches(order):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool, stream=side):
            forward(torch, batch)
        graphs.append(g)
    torch.cuda.synchronize()
    reserved = torch.cuda.memory_reserved() - base
    for g in graphs:
        g.replay()
    torch.cuda.synchronize()
    del graphs, g
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return reserved


def child(mode):
    import torch

    if not torch.cuda.is_available():
        sys.exit("capture_order_torch: no CUDA device")
    torch.cuda.init()
    torch_alloc_modes.check_mode(torch, mode)
    # One eager forward first, so that nothing lazy (the fill kernel's
    # module) happens under capture; its memory is given back before the
    # first reading.
    forward(torch, 1)
    torch.cuda.synchronize()
    largest = max(forward_scratch(b) for b in BATCHES)
    for order in ORDERS:
        reserved = reserved_for_order(torch, order)
        print(f"{mode}: {order}: reserved {reserved / 2**20:.1f} MiB", flush=True)
        print(f"csv,capture_order_torch,{mode},{order},{reserved / largest:.4f},{reserved},{largest}", flush=True)


def summary(rows):
    mib = float(1 << 20)
    largest = max(forward_scratch(b) for b in BATCHES)
    print(f"capture_order_torch: {len(BATCHES)} graphs, batch {BATCHES[0]} to {BATCHES[-1]}, one shared graph pool; "
          f"largest graph's scratch {largest / mib:.1f} MiB; reserved MiB and x largest")
    print(f"{'order':16s} | {'default':>10s} {'x largest':>10s} | {'expandable':>10s} {'x largest':>10s}")
    for order in ORDERS:
        parts = [f"{order:16s}"]
        for mode in torch_alloc_modes.MODES:
            r = next((r for r in rows.get(mode, []) if len(r) >= 4 and r[1] == order), None)
            parts.append(f"{int(r[3]) / mib:10.1f} {float(r[2]):9.3f}x" if r else f"{'n/a':>10s} {'n/a':>10s}")
        print(" | ".join(parts))


def main():
    mode, rest = torch_alloc_modes.parse_mode(sys.argv[1:])
    if mode:
        child(mode)
        return
    rows, failed = torch_alloc_modes.run_modes(os.path.abspath(__file__), rest)
    summary(rows)
    if failed:
        sys.exit(f"capture_order_torch: failed modes: {', '.join(failed)}")


if __name__ == "__main__":
    main()
