"""capturepool.torch on a GPU: skipped unless torch with CUDA is present.
Run on a GPU machine (scripts/gpu-check.sh does) with
    PYTHONPATH=python CAPTUREPOOL_LIBRARY=<build>/src/libcapturepool.so python3 -m pytest python/tests/test_torch.py
"""
import gc

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("torch.cuda.is_available() is False: capturepool.torch needs a GPU", allow_module_level=True)

import capturepool as cp  # noqa: E402
from capturepool.torch import TorchPool  # noqa: E402


def model(seed=0, width=256, depth=3):
    torch.manual_seed(seed)
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers).cuda().eval()


def capture(tp, fn, x):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside capture, as torch asks
        for _ in range(2):
            fn(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with tp.graph(g):
        y = fn(x)
    return g, y


@pytest.fixture
def tp():
    p = TorchPool()
    yield p
    p.close()
    gc.collect()


def test_allocating_uses_the_pool(tp):
    before = tp.stats().allocated_bytes
    with tp.allocating():
        x = torch.ones(1 << 20, device="cuda")
    assert tp.stats().allocated_bytes >= before + x.numel() * 4
    assert tp.stats().alloc_count >= 1
    del x


@torch.no_grad()
def test_graph_matches_eager_and_survives_suspend(tp):
    m = model()
    x = torch.randn(8, 256, device="cuda")
    eager = m(x).clone()
    g, y = capture(tp, m, x)
    tp.replay(g)
    torch.cuda.synchronize()
    assert torch.equal(y, eager)
    assert tp.stats().reserved_bytes > 0
    free_before = torch.cuda.mem_get_info()[0]
    tp.suspend()
    assert tp.suspended and tp.stats().reserved_bytes == 0
    assert torch.cuda.mem_get_info()[0] > free_before
    with pytest.raises(cp.Error) as e:
        tp.replay(g)
    assert e.value.name == "CPOOL_ERR_SUSPENDED"
    tp.resume()
    tp.replay(g)
    torch.cuda.synchronize()
    assert torch.equal(y, eager)


@torch.no_grad()
def test_weights_kept_bitwise(tp):
    with tp.allocating():
        m = model(seed=1)
    x = torch.randn(4, 256, device="cuda")
    eager = m(x).clone()
    tp.suspend()
    tp.resume()
    assert torch.equal(m(x), eager)


@torch.no_grad()
def test_graphs_have_addresses_of_their_own(tp):
    m1, m2 = model(seed=2), model(seed=3)
    x = torch.randn(8, 256, device="cuda")
    g1, y1 = capture(tp, m1, x)
    g2, y2 = capture(tp, m2, x)
    tp.replay(g1)
    tp.replay(g2)  # must not overwrite y1
    torch.cuda.synchronize()
    assert torch.equal(y1, m1(x)) and torch.equal(y2, m2(x))
    assert y1.data_ptr() != y2.data_ptr()


@torch.no_grad()
def test_discard_keeps_addresses():
    tp = TorchPool(keep_contents=False)
    try:
        m = model(seed=4)
        with tp.allocating():
            x = torch.randn(8, 256, device="cuda")
        g, y = capture(tp, m, x)
        tp.replay(g)
        expect = y.clone()
        host_x = x.cpu()
        tp.suspend()
        assert tp.stats().host_kept_bytes == 0
        tp.resume()
        x.copy_(host_x)  # the bytes were not kept: write the input again
        tp.replay(g)
        torch.cuda.synchronize()
        assert torch.equal(y, expect)
    finally:
        tp.close()


def test_out_of_memory_and_empty_cache():
    tp = TorchPool(max_reserved_bytes=64 << 20)
    try:
        with tp.allocating():
            a = torch.empty(16 << 20, dtype=torch.uint8, device="cuda")
            with pytest.raises(torch.cuda.OutOfMemoryError):
                torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
            b = torch.empty(16 << 20, dtype=torch.uint8, device="cuda")  # still serves
        del a, b
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        tp.pool.trim()
    finally:
        tp.close()


def test_close_twice_and_use_after(tp):
    tp.close()
    tp.close()
    with pytest.raises(cp.Error):
        tp.stats()
    with pytest.raises(cp.Error):
        tp.suspend()


def test_write_snapshot(tp, tmp_path):
    with tp.allocating():
        x = torch.ones(1000, device="cuda")
    tp.write_snapshot(tmp_path / "s.json")
    assert (tmp_path / "s.json").stat().st_size > 0
    del x


def test_argument_errors():
    with pytest.raises(TypeError):
        TorchPool(keep_contents="yes")
    with pytest.raises(ValueError):
        TorchPool(device="cpu")


@torch.no_grad()
def test_graphs_of_batch_sizes_share_pages(tp):
    """Graphs per batch size (torch.cuda.graph through tp.graph): their
    scratch shares pages, so the pool's graph memory is about the largest
    graph's plus every graph's outputs, and replays in any order give
    bit-identical results (no graph's scratch overwrites another's output)."""
    m = model(seed=4, width=1024, depth=4)
    batches = [64, 256, 1024, 2048]
    graphs = []
    for b in batches:
        x = torch.randn(b, 1024, device="cuda")
        g, y = capture(tp, m, x)
        graphs.append((g, x, y, m(x).clone()))
    st = tp.stats()
    assert st.graph_count == len(batches)
    per = [tp.graph_stats(g) for g, *_ in graphs]
    assert all(s is not None for s in per)
    writes = [s.write_bytes for s in per]
    own = sum(s.own_bytes for s in per)
    assert all(s.live_outputs >= 1 for s in per)  # y is live in each
    slack = 2 * len(batches) * (2 << 20)  # a page or two a graph of rounding
    print(f"graph_reserved {st.graph_reserved_bytes >> 20} MiB; writes {[w >> 20 for w in writes]} MiB; "
          f"own {own >> 20} MiB")
    assert st.graph_reserved_bytes <= max(writes) + own + slack
    assert st.graph_reserved_bytes < sum(writes)  # shared, not side by side
    for order in (range(len(graphs)), reversed(range(len(graphs))), [3, 0, 2, 1, 3, 0]):
        for i in order:
            tp.replay(graphs[i][0])
        torch.cuda.synchronize()
        for g, x, y, ref in graphs:
            assert torch.equal(y, ref)
    # Released with their graphs: the memory goes back to sharing. The loop
    # names still hold the last graph (and its input and output), so they go
    # too; otherwise that graph lives on and graph_count stays 1.
    del graphs, per, g, x, y, ref
    gc.collect()
    assert tp.stats().graph_count == 0


@torch.no_grad()
def test_suspended_graph_is_not_replayed(tp):
    m = model(seed=5)
    x = torch.randn(8, 256, device="cuda")
    g, y = capture(tp, m, x)
    ref = m(x).clone()
    tp.suspend()
    with pytest.raises(cp.Error) as e:
        tp.replay(g)
    assert e.value.status == cp.Status.ERR_SUSPENDED
    tp.resume()
    tp.replay(g)
    torch.cuda.synchronize()
    assert torch.equal(y, ref)
