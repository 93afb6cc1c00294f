"""PyTorch's side of multistream_memory_bench: the same multi-stream capture
pattern, the same sizes (the same splitmix64 generator and seed, integers
only) and the same window, in torch.cuda.graph with its private pool.

One capture a case: the capture stream O forks streams-1 side streams
(torch.cuda.Stream(), s.wait_stream(O)); allocation i of allocs goes to
branch i % streams (O is branch 0) as a uint8 tensor made inside
`with torch.cuda.stream(s)` and filled on that stream; a branch drops (del)
its own tensor from WINDOW allocations earlier, and everything it still
holds at the end; then O waits for every side stream (O.wait_stream(s)).

Reserved memory: torch.cuda.memory_reserved() after the capture less before
it, with torch.cuda.synchronize() and torch.cuda.empty_cache() before the
first reading, so that the difference is what the graph's private pool
took. Prints a small table and csv lines with the keys of the C side's
(streams, allocs); run on a GPU machine.
Usage: python3 bench/multistream_memory_torch.py [allocs ...]"""
import sys

MAX_STREAMS = 4
WINDOW = 4
SEED = 42
MASK = (1 << 64) - 1


class SplitMix64:
    """splitmix64, as ms_next in multistream_memory_bench.c."""

    def __init__(self, seed):
        self.state = seed & MASK

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def size(self):
        """4 KiB to 4 MiB - 1: a uniform octave, a uniform size within it."""
        r = self.next()
        span = 4096 << (r % 10)
        return span + (r >> 4) % span


def pattern(streams, allocs):
    """The sizes in issue order, the sum of the branches' peaks of live bytes,
    and the total, computed without a GPU (the C side computes the same)."""
    gen = SplitMix64(SEED)
    sizes = [gen.size() for _ in range(allocs)]
    live = [[] for _ in range(streams)]
    cur = [0] * streams
    peak = [0] * streams
    for i, nbytes in enumerate(sizes):
        b = i % streams
        live[b].append(nbytes)
        cur[b] += nbytes
        peak[b] = max(peak[b], cur[b])
        if len(live[b]) > WINDOW:
            cur[b] -= live[b].pop(0)
    return sizes, sum(peak), sum(sizes)


def run_case(torch, streams, allocs):
    sizes, peak_live, total = pattern(streams, allocs)
    side = [torch.cuda.Stream() for _ in range(streams - 1)]
    g = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_reserved()
    live = [[] for _ in range(streams)]
    with torch.cuda.graph(g):
        origin = torch.cuda.current_stream()
        for s in side:
            s.wait_stream(origin)
        branch_streams = [origin] + side
        for i, nbytes in enumerate(sizes):
            b = i % streams
            with torch.cuda.stream(branch_streams[b]):
                t = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
                t.fill_(1 + i % 255)
            live[b].append(t)
            del t
            if len(live[b]) > WINDOW:
                del live[b][0]
        for b in range(streams):
            live[b].clear()
        for s in side:
            origin.wait_stream(s)
    torch.cuda.synchronize()
    reserved = torch.cuda.memory_reserved() - base
    g.replay()
    torch.cuda.synchronize()
    del g
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return reserved, peak_live, total


def main():
    import torch

    counts = [int(a) for a in sys.argv[1:]] or [1000, 10000]
    mib = float(1 << 20)
    print(f"multistream_memory_torch: PyTorch {torch.__version__}, torch.cuda.graph with its private pool; "
          f"reserved: memory_reserved() after the capture less before (empty_cache() before)")
    print(f"{'streams':>7} {'allocs':>7} | {'total MiB':>10} {'peak live MiB':>14} {'PyTorch MiB':>12} "
          f"{'torch/peak live':>15}")
    for allocs in counts:
        for streams in range(1, MAX_STREAMS + 1):
            reserved, peak_live, total = run_case(torch, streams, allocs)
            print(f"{streams:7d} {allocs:7d} | {total / mib:10.1f} {peak_live / mib:14.1f} {reserved / mib:12.1f} "
                  f"{reserved / peak_live:14.3f}x")
            print(f"csv,msmem,torch,cuda,{streams},{allocs},{reserved},{peak_live},{total}", flush=True)


if __name__ == "__main__":
    main()
