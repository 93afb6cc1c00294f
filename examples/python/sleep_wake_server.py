"""A decoder server that sleeps and wakes between requests (needs torch with
CUDA): the memory of weights, KV cache and CUDA graphs goes back to the
device while it sleeps, and every graph replays after waking without being
captured again.

- weights (a small decoder from torch.nn, random weights, in bfloat16 as
  servers run) in a KEEP pool:
  their bytes go to pinned host memory at sleep and come back at wake;
- the static KV cache and the static inputs in a DISCARD pool: their pages
  go back without a copy and are written again after waking (a prefill);
- one CUDA graph per batch size 1-64 in a graph pool (DISCARD: a replay
  rewrites everything it reads from it), their logits returned through
  tp.output so that the 64 outputs share pages, all of them kept
  (capturepool.torch.TorchGraphCache keeps them under a byte budget).
50 cycles of sleep / another allocation taking the memory the pools gave
back / wake / every graph replayed in shuffled order, each replay's logits
compared bit for bit with those before the first sleep.
Prints: the free memory that sleep gives the device against what the pools
held, wake (every pool resumed) + the first replay of every graph against
capturing them all again (a second capture of every graph, as a server
that dropped its graphs would do, with torch's kernels already chosen: the
first capture pays for that once), the wake's time by pool beside the
same replays awake, and the KEEP pool's bandwidth against a plain copy to
and from pinned memory, its wake alone against the copy in (medians).

    PYTHONPATH=python CAPTUREPOOL_LIBRARY=build/src/libcapturepool.so python3 examples/python/sleep_wake_server.py
"""
import random
import sys
import time

try:
    import torch
except ImportError:
    print("SKIPPED: sleep_wake_server needs torch")
    sys.exit(77)
if not torch.cuda.is_available():
    print("SKIPPED: sleep_wake_server needs a GPU (torch.cuda.is_available() is False)")
    sys.exit(77)

from capturepool.torch import TorchPool  # noqa: E402

VOCAB, WIDTH, HEADS, LAYERS, CONTEXT = 4096, 512, 8, 4, 128
BATCHES = range(1, 65)
DTYPE = torch.bfloat16


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(WIDTH), torch.nn.LayerNorm(WIDTH)
        self.qkv = torch.nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = torch.nn.Linear(WIDTH, WIDTH)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.GELU(),
                                       torch.nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x, k_cache, v_cache, pos):
        # x: [B, WIDTH], one new token per sequence; caches: [B, HEADS, CONTEXT, D]
        b = x.shape[0]
        q, k, v = self.qkv(self.norm1(x)).view(b, 3, HEADS, WIDTH // HEADS).unbind(1)
        k_cache[:, :, pos] = k
        v_cache[:, :, pos] = v
        att = torch.nn.functional.scaled_dot_product_attention(q.unsqueeze(2), k_cache[:, :, :pos + 1],
                                                               v_cache[:, :, :pos + 1])
        x = x + self.proj(att.reshape(b, WIDTH))
        return x + self.mlp(self.norm2(x))


class Decoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.layers = torch.nn.ModuleList(Layer() for _ in range(LAYERS))
        self.head = torch.nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens, caches, pos):
        x = self.embed(tokens)
        for layer, (k, v) in zip(self.layers, caches):
            x = layer(x, k, v, pos)
        return self.head(x)


def median(xs):
    return sorted(xs)[len(xs) // 2]


def pool_bytes(*tps):
    return sum(tp.stats().reserved_bytes for tp in tps)


@torch.no_grad()
def main(cycles=50):
    dev = torch.device("cuda")
    keep = TorchPool(keep_contents=True)      # weights
    kv = TorchPool(keep_contents=False)       # KV cache, static inputs
    graphs = TorchPool(keep_contents=False)   # the graphs' memory
    torch.manual_seed(0)
    with keep.allocating():
        model = Decoder().to(dev, DTYPE).eval()
    pos = CONTEXT - 1  # the step writes the last slot, after a prefill of the rest
    bmax = max(BATCHES)
    with kv.allocating():
        caches = [(torch.empty(bmax, HEADS, CONTEXT, WIDTH // HEADS, device=dev, dtype=DTYPE),
                   torch.empty(bmax, HEADS, CONTEXT, WIDTH // HEADS, device=dev, dtype=DTYPE))
                  for _ in range(LAYERS)]
        tokens = torch.empty(bmax, dtype=torch.long, device=dev)
    gen = torch.Generator(device="cpu").manual_seed(1)
    prefill_k = [torch.randn(bmax, HEADS, CONTEXT, WIDTH // HEADS, generator=gen) for _ in range(LAYERS)]
    prefill_tokens = torch.randint(0, VOCAB, (bmax,), generator=gen)

    def prefill():
        for (k, v), pk in zip(caches, prefill_k):
            k.copy_(pk, non_blocking=False)
            v.copy_(pk.flip(-1), non_blocking=False)
        tokens.copy_(prefill_tokens)

    def step(b):
        return model(tokens[:b], [(k[:b], v[:b]) for k, v in caches], pos)

    prefill()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for b in (1, bmax):
            step(b)
    torch.cuda.current_stream().wait_stream(side)

    def capture_all(tp, outputs):
        t = time.perf_counter()
        done = {}
        for b in BATCHES:
            g = torch.cuda.CUDAGraph()
            with tp.graph(g):
                # The logits are the graph's output: through tp.output the
                # outputs of all 64 graphs share pages (docs/PYTHON.md,
                # "Small outputs") instead of holding 2 MiB each.
                outputs[b] = tp.output(step(b))
            done[b] = g
        torch.cuda.synchronize()
        return done, (time.perf_counter() - t) * 1e3 / len(BATCHES)

    logits, reference = {}, {}
    captured, first_capture_ms = capture_all(graphs, logits)
    # What a wake saves: capturing every graph again, in a pool of its own
    # (dropped at once), the kernels already chosen by the first capture.
    again = TorchPool(keep_contents=False)
    again_graphs, capture_ms = capture_all(again, {})
    again_graphs.clear()
    again.close()
    for b in BATCHES:
        prefill()  # each step writes the cache's last slot; start each from the same state
        graphs.replay(captured[b])
        torch.cuda.synchronize()
        reference[b] = logits[b].clone()
    held = pool_bytes(keep, kv, graphs)
    weight_bytes = keep.stats().allocated_bytes
    print(f"{len(captured)} graphs, {capture_ms:.2f} ms each to capture again ({first_capture_ms:.2f} the first "
          f"time); pools hold {held >> 20} MiB "
          f"(weights {keep.stats().reserved_bytes >> 20}, KV {kv.stats().reserved_bytes >> 20}, "
          f"graphs {graphs.stats().reserved_bytes >> 20})")

    rises, wakes, keep_s, keep_wake_s, resumes, awake = [], [], [], [], [], []
    kv_wake, graphs_wake = [], []
    for cycle in range(cycles):
        torch.cuda.synchronize()
        free_awake = torch.cuda.mem_get_info()[0]
        t0 = time.perf_counter()
        keep.suspend()
        t1 = time.perf_counter()
        kv.suspend()
        graphs.suspend()
        free_asleep = torch.cuda.mem_get_info()[0]
        rises.append((free_asleep - free_awake, held))
        # Asleep, the memory serves others: an allocation outside the pools
        # takes what they gave back, writes it, and gives it back.
        other = torch.empty(held, dtype=torch.uint8, device=dev)
        other.fill_(cycle)
        torch.cuda.synchronize()
        del other
        torch.cuda.empty_cache()
        t2 = time.perf_counter()
        keep.resume()
        t3 = time.perf_counter()
        kv.resume()
        t4 = time.perf_counter()
        graphs.resume()
        t5 = time.perf_counter()
        resumes.append((t5 - t2) * 1e3)
        kv_wake.append((t4 - t3) * 1e3)
        graphs_wake.append((t5 - t4) * 1e3)
        # Awake: every graph replays once, in shuffled order (each writes
        # its own logits and the cache's last slot, which the checks below
        # write again after a prefill).
        order = list(BATCHES)
        random.Random(cycle).shuffle(order)
        for b in order:
            graphs.replay(captured[b])
        torch.cuda.synchronize()
        wakes.append((time.perf_counter() - t2) * 1e3)
        keep_s.append((t1 - t0) + (t3 - t2))
        keep_wake_s.append(t3 - t2)
        for b in order:
            prefill()
            graphs.replay(captured[b])
            torch.cuda.synchronize()
            if not torch.equal(logits[b], reference[b]):
                print(f"FAIL: cycle {cycle}, batch {b}: logits differ after wake")
                return 1
        t = time.perf_counter()  # the same replays, awake: what the wake adds to them
        for b in order:
            graphs.replay(captured[b])
        torch.cuda.synchronize()
        awake.append((time.perf_counter() - t) * 1e3)
    rise, held_then = rises[-1]
    print(f"{cycles} cycles: every graph replayed bit for bit after each wake")
    print(f"sleep: free memory rose by {rise >> 20} MiB; the pools held {held_then >> 20} MiB, which an allocation "
          f"outside them took and wrote while they slept")
    wakes.sort()
    wake_ms, recapture_ms = wakes[len(wakes) // 2], capture_ms * len(BATCHES)
    print(f"wake + first replay of all {len(BATCHES)} graphs: median {wake_ms:.2f} ms; capturing them again: "
          f"{recapture_ms:.2f} ms ({recapture_ms / wake_ms:.1f}x); of the wake, resuming the three pools: median "
          f"{median(resumes):.2f} ms (weights {median(keep_wake_s) * 1e3:.2f}, KV {median(kv_wake):.2f}, graphs "
          f"{median(graphs_wake):.2f}); the same replays awake: median {median(awake):.2f} ms")
    # The KEEP pool against a plain copy of the same bytes to pinned memory and back.
    pinned = torch.empty(weight_bytes, dtype=torch.uint8, pin_memory=True)
    with keep.allocating():
        scratch = torch.empty(weight_bytes, dtype=torch.uint8, device=dev)
    copies, copies_in = [], []
    for _ in range(5):
        torch.cuda.synchronize()
        t = time.perf_counter()
        pinned.copy_(scratch, non_blocking=True)
        torch.cuda.synchronize()
        t_in = time.perf_counter()
        scratch.copy_(pinned, non_blocking=True)
        torch.cuda.synchronize()
        copies.append(time.perf_counter() - t)
        copies_in.append(time.perf_counter() - t_in)
    copy_s, copy_in_s = sorted(copies)[len(copies) // 2], sorted(copies_in)[len(copies_in) // 2]
    k, kw = sorted(keep_s)[len(keep_s) // 2], sorted(keep_wake_s)[len(keep_wake_s) // 2]
    print(f"KEEP pool, {weight_bytes >> 20} MiB of weights: suspend + resume {k * 1e3:.2f} ms "
          f"({2 * weight_bytes / k / 1e9:.1f} GB/s); pinned copy out and back {copy_s * 1e3:.2f} ms "
          f"({2 * weight_bytes / copy_s / 1e9:.1f} GB/s)")
    print(f"KEEP pool wake (resume alone) {kw * 1e3:.2f} ms ({weight_bytes / kw / 1e9:.1f} GB/s); pinned copy in "
          f"{copy_in_s * 1e3:.2f} ms ({weight_bytes / copy_in_s / 1e9:.1f} GB/s): {copy_in_s / kw:.2f}x of its bandwidth")
    del scratch
    captured.clear()
    logits.clear()
    for tp in (graphs, kv, keep):
        tp.close()
    print("sleep_wake_server: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 50))
