"""A standalone check of capturepool and capturepool.torch on a GPU machine
(no pytest needed):
    PYTHONPATH=python CAPTUREPOOL_LIBRARY=<build>/src/libcapturepool.so python3 python/tests/gpu_smoke.py
Exits 0 when every check passes, 1 at the first failure, 77 where torch with
CUDA is missing (after the checks that need no torch)."""
import sys
import time

import capturepool as cp


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        sys.exit(1)


def main():
    dev = cp.Device()
    print("capturepool", cp.__version__, "backend", dev.backend, "library", cp.library_path)
    with cp.Stream(dev) as s, cp.Pool(dev) as pool:
        with cp.capture(s, pool) as c:
            buf = pool.alloc(1 << 20, s)
            cp.memset_async(s, buf, 7, 1 << 20)
        c.graph.launch(s)
        s.synchronize()
        check(c.graph.replays == 1, "C-level capture and launch")
        c.graph.release()
    try:
        import torch
    except ImportError:
        print("SKIPPED: torch is not installed")
        return 77
    if not torch.cuda.is_available():
        print("SKIPPED: torch.cuda.is_available() is False")
        return 77
    from capturepool.torch import TorchPool
    print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())
    check(dev.backend == "cuda", "the library sees the GPU")
    tp = TorchPool()
    torch.manual_seed(0)
    with tp.allocating(), torch.no_grad():
        m = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 1024)).cuda()
        x = torch.randn(32, 1024, device="cuda")
    with torch.no_grad():
        eager = m(x).clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            m(x)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with tp.graph(g):
            y = m(x)
            head = tp.output(y[:, :8])  # a small output of its own, through DLPack
    tp.replay(g)
    torch.cuda.synchronize()
    check(torch.equal(y, eager), "torch graph replay matches eager")
    check(torch.equal(head, eager[:, :8]), "tp.output holds the graph's copy")
    reserved = tp.stats().reserved_bytes
    free0 = torch.cuda.mem_get_info()[0]
    t = time.perf_counter()
    tp.suspend()
    t_suspend = time.perf_counter() - t
    free1 = torch.cuda.mem_get_info()[0]
    check(tp.stats().reserved_bytes == 0, "suspend gives every page back")
    print(f"     free memory rose by {(free1 - free0) >> 20} MiB; the pool held {reserved >> 20} MiB")
    try:
        tp.replay(g)
        check(False, "replay while suspended is refused")
    except cp.Error as e:
        check(e.name == "CPOOL_ERR_SUSPENDED", "replay while suspended is refused")
    t = time.perf_counter()
    tp.resume()
    tp.replay(g)
    torch.cuda.synchronize()
    t_wake = time.perf_counter() - t
    check(torch.equal(y, eager) and torch.equal(head, eager[:, :8]),
          "after resume the replay matches eager bit for bit")
    check(torch.equal(m(x), eager), "weights kept across suspend")
    print(f"     suspend {t_suspend * 1e3:.2f} ms, resume + first replay {t_wake * 1e3:.2f} ms")
    del head
    tp.close()
    tp.close()
    print("gpu_smoke: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
