"""PyTorch's side of graph_memory_bench: 8 graphs, each allocating a 256 MiB
scratch inside its capture and dropping it before the capture ends, first
with one private memory pool per graph (PyTorch's default), then with one
pool shared by all graphs (torch.cuda.graph_pool_handle()). Prints csv lines
like graph_memory_bench's and a small table; run on a GPU machine."""
import sys

import torch


def reserved_for_graphs(graphs, scratch_bytes, shared):
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_reserved()
    pool = torch.cuda.graph_pool_handle() if shared else None
    kept = []
    stream = torch.cuda.Stream()
    for i in range(graphs):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool, stream=stream):
            scratch = torch.empty(scratch_bytes, dtype=torch.uint8, device="cuda")
            scratch.fill_(i + 1)
            del scratch
        kept.append(g)
    for g in kept:
        g.replay()
    torch.cuda.synchronize()
    used = torch.cuda.memory_reserved() - base
    del kept
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return used / scratch_bytes


def main():
    graphs = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    mib = int(sys.argv[2]) if len(sys.argv) > 2 else 256
    scratch = mib << 20
    private = reserved_for_graphs(graphs, scratch, shared=False)
    shared = reserved_for_graphs(graphs, scratch, shared=True)
    print(f"{'PyTorch, one private pool per graph':44s} {private * mib:14.1f} {private:9.3f}x")
    print(f"{'PyTorch, one shared pool':44s} {shared * mib:14.1f} {shared:9.3f}x")
    print(f"csv,graphmem,torch-private,{graphs},{mib},{private:.4f}")
    print(f"csv,graphmem,torch-shared,{graphs},{mib},{shared:.4f}")


if __name__ == "__main__":
    main()
