"""A step captured once per batch size and replayed, with only capturepool
(no torch, no GPU needed: it runs on the host backend, and in ctest).

Weights live in one pool (suspended with their contents kept), each batch
size's step is a graph in a second pool whose memory is given back without
a copy. The pools sleep and wake; every graph then replays in shuffled
order and must write bit for bit what it wrote before. Run:
    PYTHONPATH=python CAPTUREPOOL_LIBRARY=build/src/libcapturepool.so python3 examples/python/host_pipeline.py
"""
import ctypes
import random
import sys

import capturepool as cp

WIDTH = 64          # floats per row
BATCHES = range(1, 9)
CYCLES = 5


def floats(addr, n):
    return (ctypes.c_float * n).from_address(addr)


def main():
    dev = cp.Device()
    if dev.backend != "host":
        print("host_pipeline reads device memory from Python: it runs on the host backend "
              "(CPOOL_BACKEND=host)")
        return 77
    s = cp.Stream(dev)
    weights = cp.Pool(dev)                      # kept across sleep
    graphs = cp.Pool(dev)                       # given back without a copy
    w = weights.alloc(WIDTH * 4, s)
    rng = random.Random(1)
    src = (ctypes.c_float * WIDTH)(*[rng.uniform(-1, 1) for _ in range(WIDTH)])
    cp.memcpy_async(s, w, ctypes.addressof(src), WIDTH * 4)
    inputs = {b: (ctypes.c_float * (b * WIDTH))(*[rng.uniform(-1, 1) for _ in range(b * WIDTH)]) for b in BATCHES}

    def layer(x_addr, y_addr, b):
        def run():  # y = tanh-like(x * w), row by row, on the stream's thread
            x, y, wv = floats(x_addr, b * WIDTH), floats(y_addr, b * WIDTH), floats(w, WIDTH)
            for i in range(b * WIDTH):
                v = x[i] * wv[i % WIDTH]
                y[i] = v / (1.0 + abs(v))
        return run

    step = {}
    for b in BATCHES:
        with cp.capture(s, graphs) as c:
            x = graphs.alloc(b * WIDTH * 4, s)                 # scratch: shared between the graphs
            cp.memcpy_async(s, x, ctypes.addressof(inputs[b]), b * WIDTH * 4)
            out = graphs.alloc_output(b * WIDTH * 4, s)        # the graph's output
            cp.launch_host(s, layer(x, out, b))
            graphs.free(x, s)
        step[b] = (c.graph, out)
    expect = {}
    for b, (g, out) in step.items():
        g.launch(s)
        s.synchronize()
        expect[b] = bytes(floats(out, b * WIDTH))
    st = graphs.stats()
    print(f"{len(step)} graphs: graph memory {st.graph_reserved_bytes >> 10} KiB, "
          f"outputs {st.allocated_bytes} B, weights pool {weights.stats().reserved_bytes >> 10} KiB")

    for cycle in range(CYCLES):
        weights.suspend(keep_contents=True)
        graphs.suspend(keep_contents=False)
        asleep = weights.stats().reserved_bytes + graphs.stats().reserved_bytes
        weights.resume()
        graphs.resume()
        order = list(BATCHES)
        random.Random(cycle).shuffle(order)
        for b in order:
            g, out = step[b]
            g.launch(s)
            s.synchronize()
            if bytes(floats(out, b * WIDTH)) != expect[b]:
                print(f"cycle {cycle}: batch {b} differs after wake")
                return 1
        print(f"cycle {cycle}: asleep {asleep} B held; {len(order)} graphs replayed bit for bit")
    for g, out in step.values():
        graphs.free(out, s)
        g.release()
    weights.free(w, s)
    weights.release()
    graphs.release()
    s.destroy()
    dev.close()
    print("host_pipeline: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
