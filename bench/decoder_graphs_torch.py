"""Graph memory of a decoder's 64 batch-size graphs (1 to 64), PyTorch's
shared graph pool against capturepool.torch's TorchPool, in one run.

The decoder is examples/python/sleep_wake_server.py's (bfloat16, random
weights), one decode step per graph, its logits kept by the script as long
as the graph (the outputs). Each system and capture order runs in a child
process of its own, so that no cache of the caching allocator carries over:

  torch   torch.cuda.graph(g, pool=torch.cuda.graph_pool_handle()) for
          every graph; memory: torch.cuda.memory_reserved() after the
          captures less before them;
  ours    TorchPool.graph(g) for every graph; memory: the pool's
          graph_reserved_bytes;
  output  the same, the logits returned through TorchPool.output (on
          pages the graphs' outputs share).

Orders: ascending, descending and a fixed shuffle. The lower bound is the
largest graph's memory alone (batch 64 captured by itself, torch and
ours each measured so, the smaller taken; output's alone is printed
beside them) plus the bytes of every other graph's logits. Then 300
replays in a fixed random order: after each, the replayed graph's logits
are noted; every 10 replays every noted graph's logits are compared with
its note, and a graph whose logits changed without being replayed counts
as overwritten (another graph's replay wrote them).
For ours and output the table also says where the bytes are (the pool's
snapshot): pages shared by the graphs, pages of a graph's own (what
outlived its capture: an output returned as it is, or a buffer torch keeps
past the capture, such as the cuBLAS workspace it makes in the first
capture on its capture stream), and the packed region.
Prints a table last and, per system and order,
    csv,decoder_graphs,SYSTEM,ORDER,BYTES,BOUND,RATIO,OVERWRITTEN
Needs torch with CUDA; exits 77 without it.
Usage: python3 bench/decoder_graphs_torch.py"""
import importlib.util
import os
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BATCHES = list(range(1, 65))
ORDERS = {"ascending": BATCHES, "descending": BATCHES[::-1],
          "shuffled": random.Random(7).sample(BATCHES, len(BATCHES))}
REPLAYS, CHECK_EVERY = 300, 10


def page_breakdown(snapshot):
    """Bytes on the pages the pool's graphs share, on pages of a graph's
    own, and in the packed region, from a pool's snapshot (docs/SNAPSHOT.md)."""
    physical = snapshot["physical"]
    packed = sum(seg["size"] for seg in snapshot["segments"] if seg.get("kind") == "packed")
    return physical["shared_pages"] * physical["page_size"], physical["own_pages"] * physical["page_size"], packed


def split(run):
    """A child's shared / own / packed MiB."""
    return " / ".join(f"{b / 2**20:.1f}" for b in run[3:])


def decoder_module():
    path = os.path.join(HERE, "..", "examples", "python", "sleep_wake_server.py")
    spec = importlib.util.spec_from_file_location("sleep_wake_server", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def child(system, order_name):
    """One system, one order (or "alone": batch 64 by itself); prints
    BYTES OUTPUT_BYTES OVERWRITTEN SHARED OWN PACKED (the last three in
    bytes, 0 for torch)."""
    import torch
    sws = decoder_module()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = sws.Decoder().to(dev, sws.DTYPE).eval()
    bmax, heads, context = max(BATCHES), sws.HEADS, sws.CONTEXT
    caches = [(torch.zeros(bmax, heads, context, sws.WIDTH // heads, device=dev, dtype=sws.DTYPE),
               torch.zeros(bmax, heads, context, sws.WIDTH // heads, device=dev, dtype=sws.DTYPE))
              for _ in range(sws.LAYERS)]
    tokens = torch.randint(0, sws.VOCAB, (bmax,), device=dev)

    def step(b):
        return model(tokens[:b], [(k[:b], v[:b]) for k, v in caches], context - 1)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        for b in (1, bmax):
            step(b)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    order = [bmax] if order_name == "alone" else ORDERS[order_name]
    graphs, outputs = {}, {}
    before = torch.cuda.memory_reserved()
    if system == "torch":
        pool = torch.cuda.graph_pool_handle()
        for b in order:
            g = torch.cuda.CUDAGraph()
            with torch.no_grad(), torch.cuda.graph(g, pool=pool):
                outputs[b] = step(b)
            graphs[b] = g
        torch.cuda.synchronize()
        held = torch.cuda.memory_reserved() - before
        where = (0, 0, 0)
        replay = lambda g: g.replay()  # noqa: E731
    else:
        from capturepool.torch import TorchPool
        tp = TorchPool(keep_contents=False)
        for b in order:
            g = torch.cuda.CUDAGraph()
            with torch.no_grad(), tp.graph(g):
                outputs[b] = tp.output(step(b)) if system == "output" else step(b)
            graphs[b] = g
        torch.cuda.synchronize()
        held = tp.stats().graph_reserved_bytes
        where = page_breakdown(tp.pool.snapshot())
        replay = tp.replay
    output_bytes = sum(o.numel() * o.element_size() for b, o in outputs.items() if b != bmax)
    noted, overwritten = {}, set()
    rng = random.Random(42)
    for n in range(REPLAYS if order_name != "alone" else 0):
        b = rng.choice(order)
        replay(graphs[b])
        torch.cuda.synchronize()
        noted[b] = outputs[b].clone()
        if (n + 1) % CHECK_EVERY == 0:
            for c, want in noted.items():
                if not torch.equal(outputs[c], want):
                    overwritten.add(c)
                    noted[c] = outputs[c].clone()
    print(held, output_bytes, len(overwritten), *where)


def run_child(system, order):
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", system, order],
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        sys.stderr.write(out.stdout + out.stderr)
        raise SystemExit(f"decoder_graphs_torch: the {system} {order} run failed")
    return tuple(map(int, out.stdout.split()[-6:]))


def main():
    try:
        import torch
    except ImportError:
        print("SKIPPED: decoder_graphs_torch needs torch")
        return 77
    if not torch.cuda.is_available():
        print("SKIPPED: decoder_graphs_torch needs a GPU")
        return 77
    alone_runs = {s: run_child(s, "alone") for s in ("torch", "ours", "output")}
    alone = {s: alone_runs[s][0] for s in ("torch", "ours")}  # the bound's (output's is shown)
    rows = []
    for order in ORDERS:
        for system in ("torch", "ours", "output"):
            rows.append((system, order, run_child(system, order)))
    largest = min(alone.values())
    print(f"decoder_graphs_torch: 64 graphs (batch 1-64) of examples/python/sleep_wake_server.py's decoder; "
          f"batch 64 alone: torch {alone['torch'] / 2**20:.1f} MiB, ours {alone['ours'] / 2**20:.1f} MiB "
          f"({split(alone_runs['ours'])} shared / own / packed), output {alone_runs['output'][0] / 2**20:.1f} MiB "
          f"({split(alone_runs['output'])}); "
          f"bound: the smaller plus the other graphs' logits; overwritten: graphs whose logits another graph's "
          f"replay changed, of 64, over {REPLAYS} replays")
    print(f"{'system':<7} {'order':<11} | {'MiB':>8} {'bound':>8} {'x bound':>8} | overwritten | "
          f"MiB shared / own / packed")
    for system, order, run in rows:
        held, output_bytes, overwritten = run[:3]
        bound = largest + output_bytes
        print(f"csv,decoder_graphs,{system},{order},{held},{bound},{held / bound:.4f},{overwritten}")
        print(f"{system:<7} {order:<11} | {held / 2**20:8.1f} {bound / 2**20:8.1f} {held / bound:7.3f}x | "
              f"{overwritten:>11} | {split(run) if system != 'torch' else '-'}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
    else:
        sys.exit(main())
