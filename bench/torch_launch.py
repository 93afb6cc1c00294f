"""PyTorch's side of launch_bench: a CUDAGraph of N tiny in-place kernels
(x.add_(1) on 32 floats), for N in 1, 10, 100, 1000. Measures the CPU cost
of CUDAGraph.replay() in batches and the device time per replay with CUDA
events, medians of 15 repeats; prints csv lines for scripts/bench_report.py."""
import statistics
import time

import torch

REPEATS = 15


def measure(kernels):
    x = torch.zeros(32, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):  # warm-up outside capture
            x.add_(1.0)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        for _ in range(kernels):
            x.add_(1.0)
    g.replay()
    torch.cuda.synchronize()
    launches = 20 if kernels >= 1000 else 100 if kernels >= 100 else 400
    cpu = []
    for _ in range(REPEATS):
        t0 = time.perf_counter_ns()
        for _ in range(launches):
            g.replay()
        cpu.append((time.perf_counter_ns() - t0) / launches / 1e3)
        torch.cuda.synchronize()
    replays = 10 if kernels >= 1000 else 100
    dev = []
    for _ in range(REPEATS):
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        cur = torch.cuda.current_stream()
        e0.record(cur)
        for _ in range(replays):
            g.replay()
        e1.record(cur)
        e1.synchronize()
        dev.append(e0.elapsed_time(e1) * 1e3 / replays)
    return statistics.median(cpu), statistics.median(dev)


def main():
    print("torch_launch: CUDAGraph.replay of N x.add_ kernels; us, medians of 15 repeats")
    print(f"{'kernels':>7} | {'replay-cpu':>10} {'dev/replay':>10}")
    rows = []
    for n in (1, 10, 100, 1000):
        cpu, dev = measure(n)
        rows.append((n, cpu, dev))
        print(f"{n:7d} | {cpu:10.3f} {dev:10.2f}")
    for n, cpu, dev in rows:
        print(f"csv,torch,cuda,{n},{cpu:.4f},{dev:.4f}")


if __name__ == "__main__":
    main()
