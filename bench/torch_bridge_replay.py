"""What capturepool.torch adds to a replay: the CPU time of tp.replay(g)
against g.replay() of the same graph (captured through a TorchPool), side
by side in rounds that alternate which goes first; batches of replays,
each synchronized after, so that the device's queue never fills. Prints
the medians per call and the median of the rounds' ratios (goal <= 1.05x).

    PYTHONPATH=python CAPTUREPOOL_LIBRARY=build/src/libcapturepool.so \\
        CAPTUREPOOL_TORCH_LIBRARY=build/python/libcapturepool_torch.so python3 bench/torch_bridge_replay.py
"""
import statistics
import sys
import time

try:
    import torch
except ImportError:
    print("SKIPPED: torch_bridge_replay needs torch")
    sys.exit(77)
if not torch.cuda.is_available():
    print("SKIPPED: torch_bridge_replay needs a GPU")
    sys.exit(77)

from capturepool.torch import TorchPool  # noqa: E402

ROUNDS, BATCH = 41, 200


def per_call_us(replay, g):
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(BATCH):
        replay(g)
    elapsed = time.perf_counter() - t
    torch.cuda.synchronize()
    return elapsed * 1e6 / BATCH


def main():
    with TorchPool() as tp:
        for kernels in (1, 100):
            x = torch.zeros(32, device="cuda")
            side = torch.cuda.Stream()
            with torch.cuda.stream(side):
                x.add_(1.0)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with tp.graph(g):
                for _ in range(kernels):
                    x.add_(1.0)
            ours, raw, ratios = [], [], []
            for r in range(ROUNDS):
                if r % 2:
                    a = per_call_us(tp.replay, g)
                    b = per_call_us(torch.cuda.CUDAGraph.replay, g)
                else:
                    b = per_call_us(torch.cuda.CUDAGraph.replay, g)
                    a = per_call_us(tp.replay, g)
                ours.append(a)
                raw.append(b)
                ratios.append(a / b)
            print(f"{kernels:4d} kernels: tp.replay {statistics.median(ours):.2f} us, g.replay "
                  f"{statistics.median(raw):.2f} us per call: {statistics.median(ratios):.3f}x (goal <= 1.05x)")
            print(f"csv,torch_bridge_replay,{kernels},{statistics.median(ours):.3f},{statistics.median(raw):.3f},"
                  f"{statistics.median(ratios):.4f}")
            del g


if __name__ == "__main__":
    main()
