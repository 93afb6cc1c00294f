"""PyTorch's side of examples/data_parallel: the same data-parallel step on
every visible GPU (gradient x * w + x / 4 of the GPU's own shard, an NCCL
all-reduce through torch.distributed, w -= 0.01 / GPUs * grad), run
eagerly and as a CUDA graph captured once per GPU (torch.cuda.graph), one
process per GPU. Prints the time per step of both on every GPU, and csv
lines `csv,dp_torch,RANK,GPUS,EAGER_US,GRAPH_US`.
Usage: python3 bench/data_parallel_torch.py [steps]"""
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

N = 1 << 22


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(shard, n):
    i = torch.arange(N, device="cuda", dtype=torch.float32)
    w = (i % 97) * 0.01
    x = ((i + 31 * shard) % 89) * 0.02 - 0.5
    return w, x


def step(w, x, n):
    grad = x * w + 0.25 * x
    dist.all_reduce(grad)
    w.sub_(grad, alpha=0.01 / n)


def per_step_us(fn, steps):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / steps * 1e6


def run(rank, n, port, steps, results):
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n)
    w, x = start(rank, n)
    step(w, x, n)  # NCCL's communicator set up before timing and capture
    w.copy_(start(rank, n)[0])
    eager = per_step_us(lambda: step(w, x, n), steps)
    w_eager = w.clone()
    w.copy_(start(rank, n)[0])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream, as torch.cuda.graph asks
        step(w, x, n)
    torch.cuda.current_stream().wait_stream(side)
    w.copy_(start(rank, n)[0])
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step(w, x, n)
    w.copy_(start(rank, n)[0])
    graph = per_step_us(g.replay, steps)
    diff = ((w - w_eager).abs() / w_eager.abs().clamp(min=1)).max().item()
    results[rank] = (eager, graph, diff)
    dist.destroy_process_group()


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    n = torch.cuda.device_count()
    if n == 0:
        print("data_parallel_torch: no GPU: nothing to run")
        return
    port = free_port()
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(run, args=(n, port, steps, results), nprocs=n, join=True)
        print(f"data_parallel_torch: {n} GPU(s), {steps} steps of {N} weights each; torch.distributed all-reduce (NCCL)")
        print(f"  {'GPU':6s} {'eager us/step':>14s} {'graph us/step':>14s} {'eager/graph':>12s} {'graph vs eager':>15s}")
        worst = 0.0
        for rank in range(n):
            eager, graph, diff = results[rank]
            worst = max(worst, diff)
            print(f"  {rank:<6d} {eager:14.1f} {graph:14.1f} {eager / graph:11.2f}x {diff:15.2g}")
            print(f"csv,dp_torch,{rank},{n},{eager:.2f},{graph:.2f}")
        if worst > 1e-5:
            print("FAILED: PyTorch's replays and eager steps differ")
            sys.exit(1)


if __name__ == "__main__":
    main()
