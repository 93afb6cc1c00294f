"""capturepool.torch on a GPU: skipped unless torch with CUDA is present.
Run on a GPU machine (scripts/gpu-check.sh does) with
    PYTHONPATH=python CAPTUREPOOL_LIBRARY=<build>/src/libcapturepool.so python3 -m pytest python/tests/test_torch.py
"""
import gc
import random
import sys
import weakref

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("torch.cuda.is_available() is False: capturepool.torch needs a GPU", allow_module_level=True)

import capturepool as cp  # noqa: E402
from capturepool.torch import TorchGraphCache, TorchPool  # noqa: E402


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
def test_outputs_pack_together(tp):
    """tp.output(t) inside tp.graph(g): small outputs of many graphs share
    pages, so graph memory is about the largest graph's scratch plus the
    outputs, not a page a graph; replays in any order leave every other
    graph's output as it was. Misuse is refused."""
    m = model(seed=5, width=512, depth=3)
    graphs = []
    for b in range(1, 17):
        x = torch.randn(b, 512, device="cuda")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            m(x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with tp.graph(g):
            y = tp.output(m(x))
        graphs.append((g, x, y, m(x).clone()))
    st = tp.stats()
    per = [tp.graph_stats(g) for g, *_ in graphs]
    outputs = sum(y.numel() * y.element_size() for _, _, y, _ in graphs)
    print(f"graph_reserved {st.graph_reserved_bytes >> 10} KiB for 16 graphs; outputs {outputs >> 10} KiB; "
          f"own {sum(p.own_bytes for p in per) >> 10} KiB")
    assert st.graph_reserved_bytes <= max(p.write_bytes for p in per) + outputs + 2 * (2 << 20)
    order = list(range(len(graphs)))
    random.Random(3).shuffle(order)
    for i in order + order[::-1]:
        tp.replay(graphs[i][0])
    torch.cuda.synchronize()
    for g, x, y, ref in graphs:
        assert torch.equal(y, ref)
    with pytest.raises(cp.Error, match="only inside tp.graph"):
        tp.output(torch.ones(4, device="cuda"))
    with pytest.raises(TypeError):
        g = torch.cuda.CUDAGraph()
        with tp.graph(g):
            tp.output([1, 2])
    del graphs, per, g, x, y, ref
    gc.collect()


@torch.no_grad()
def test_output_outlives_its_tensor_while_its_graph_lives(tp):
    """tp.output's block is freed with its last tensor, and while its graph
    lives stays the graph's: a later graph's output never lands on it, so
    the first graph's replays cannot overwrite that output. Outputs of any
    dtype and shape, a 0-d one and an empty one included, are copies of
    what they were made from."""
    m = model(seed=6, width=256, depth=2)
    x1, x2 = torch.randn(4, 256, device="cuda"), torch.randn(4, 256, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside capture
        m(x1)
    torch.cuda.current_stream().wait_stream(s)
    g1 = torch.cuda.CUDAGraph()
    with tp.graph(g1):
        y1 = tp.output(m(x1))
    first = (y1.data_ptr(), y1.data_ptr() + y1.numel() * y1.element_size())
    del y1
    gc.collect()
    g2 = torch.cuda.CUDAGraph()
    with tp.graph(g2):
        h = m(x2)
        y2 = tp.output(h)
        extras = [tp.output(h.to(torch.bfloat16)), tp.output(h.sum()), tp.output(h[:0]),
                  tp.output(h.t())]  # a view that is not contiguous: the copy is
    for y in [y2] + extras:
        lo = y.data_ptr()
        assert lo + y.numel() * y.element_size() <= first[0] or first[1] <= lo, "an output on g1's output"
    ref2 = m(x2).clone()
    for g in (g2, g1, g1):
        tp.replay(g)
    torch.cuda.synchronize()
    assert torch.equal(y2, ref2), "the first graph's replay wrote the second graph's output"
    bf, total, empty, transposed = extras
    assert bf.dtype == torch.bfloat16 and torch.equal(bf, ref2.to(torch.bfloat16))
    assert total.shape == () and torch.allclose(total, ref2.sum())
    assert empty.shape == (0, 256) and transposed.is_contiguous() and torch.equal(transposed, ref2.t())
    live = tp._slot.counts()["live"]
    del y, y2, extras, bf, total, empty, transposed  # y: the check loop's last, the transposed one
    gc.collect()
    assert tp._slot.counts()["live"] == live - 5  # each block's free, at its last tensor
    tp.replay(g2)  # the pool still keeps them for g2
    torch.cuda.synchronize()


@torch.no_grad()
def test_graph_cache_capture_fn_returns_packed_outputs(tp):
    """A TorchGraphCache capture_fn may return tp.output(...): its eager
    warm-up runs get the tensor itself, its capture a packed copy that
    every launch, hit or miss, writes again."""
    m = model(seed=7)
    xs = {b: torch.randn(b, 256, device="cuda") for b in (2, 4, 8)}
    with TorchGraphCache(tp) as cache:
        for i, b in enumerate((2, 4, 8, 2, 4, 8)):
            xs[b].normal_()
            hit, y = cache.launch(b, lambda b=b: tp.output(m(xs[b])))
            torch.cuda.synchronize()
            assert hit == (i >= 3)
            assert torch.equal(y, m(xs[b]))
        assert cache.stats().hits == 3
    with pytest.raises(cp.Error, match="only inside tp.graph"):
        tp.output(torch.ones(4, device="cuda"))  # outside a warm-up, misuse as before


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


@torch.no_grad()
def test_graph_cache_keeps_its_byte_budget(tp):
    """TorchGraphCache under max_bytes: graphs of six batch sizes, with a
    budget between what the largest holds alone and what all six hold
    together. After every launch tp's graph memory is within it (or one
    graph is kept alone), on_evict gets the least recently launched keys
    with their graph and outputs, an evicted graph is gone at once, and
    every launch, hits included, gives outputs bit-identical to eager."""
    m = model(seed=6, width=1024, depth=4)
    batches = [2048, 1024, 512, 256, 128, 64]
    xs = {b: torch.randn(b, 1024, device="cuda") for b in batches}
    refs = {b: m(x).clone() for b, x in xs.items()}

    def step(b):
        return lambda: m(xs[b])
    # What the largest graph holds alone and all six hold together, in a
    # pool of their own.
    probe = TorchPool()
    try:
        with TorchGraphCache(probe) as c:
            c.launch(batches[0], step(batches[0]))
            alone = c.stats().graph_bytes
            for b in batches[1:]:
                c.launch(b, step(b))
            together = c.stats().graph_bytes
    finally:
        probe.close()
    print(f"largest graph alone {alone >> 20} MiB, six together {together >> 20} MiB")
    assert together > alone
    max_bytes = (alone + together) // 2

    evicted = []
    lru = []  # the keys kept, least recently launched first
    returned = {}  # key -> weak reference to the outputs its miss returned

    def on_evict(key, graph, outputs):  # an exception here would only be reported: None marks a wrong call
        ref = returned.pop(key, None)
        right = isinstance(graph, torch.cuda.CUDAGraph) and ref is not None and outputs is ref()
        evicted.append(key if right else None)
    rng = random.Random(6)
    trace = batches + [b for b in rng.choices(batches, k=20) for _ in range(2)]  # each a miss or a hit, then a hit
    shared_after_evictions = 0
    with TorchGraphCache(tp, max_bytes=max_bytes, on_evict=on_evict) as cache:
        for i, b in enumerate(trace):
            before = cache.stats()
            done = len(evicted)
            kept = b in lru
            if kept:  # a hit must write its outputs again
                returned[b]().zero_()
            hit, out = cache.launch(b, step(b))
            assert hit == kept, f"launch {i} (batch {b})"
            if hit:
                assert out is returned[b]()
                lru.remove(b)
            else:
                returned[b] = weakref.ref(out)
            lru.append(b)
            gone = evicted[done:]
            assert gone == lru[:len(gone)] and b not in gone, f"launch {i} (batch {b}): evicted {gone}, kept {lru}"
            del lru[:len(gone)]
            st = cache.stats()
            assert (st.hits, st.misses) == (before.hits + hit, before.misses + (not hit))
            assert st.evictions == len(evicted) and st.graphs == len(lru)
            assert sorted(k for k in batches if cache.get(k) is not None) == sorted(lru)
            assert st.graph_bytes <= max_bytes or st.graphs == 1, f"launch {i} (batch {b}): {st}, max {max_bytes}"
            assert tp.stats().graph_count == st.graphs  # the evicted graphs are gone
            if evicted and st.graphs > 1:
                shared_after_evictions += 1
            torch.cuda.synchronize()
            assert torch.equal(out, refs[b]), f"launch {i} (batch {b}, hit {hit})"
            del out
        st = cache.stats()
        print(f"{st}, max_bytes {max_bytes >> 20} MiB")
        assert st.evictions == len(evicted) > 0
        assert st.hits >= 20 and st.hits + st.misses == len(trace)
        # Evicted memory came back: the budget holds several graphs between evictions.
        assert shared_after_evictions > 0
        last = list(lru)
    # close: on_evict for the graphs kept, least recently launched first.
    assert evicted[-len(last):] == last and returned == {}
    gc.collect()
    assert tp.stats().graph_count == 0
    tp.pool.trim()
    assert tp.stats().graph_reserved_bytes == 0


@torch.no_grad()
def test_graph_cache_max_graphs(tp):
    """max_graphs: the least recently launched graph leaves at the next
    miss, through on_evict; get is no launch; a hit calls nothing of
    capture_fn; a miss warms up twice, then captures."""
    m = model(seed=7)
    batches = (1, 2, 4, 8)
    xs = {b: torch.randn(b, 256, device="cuda") for b in batches}
    refs = {b: m(x).clone() for b, x in xs.items()}
    calls = {b: 0 for b in batches}
    handed = []

    def step(b):
        def fn():
            calls[b] += 1
            return m(xs[b])
        return fn

    def on_evict(key, graph, outputs):  # None marks a wrong call
        handed.append(key if isinstance(graph, torch.cuda.CUDAGraph) and torch.is_tensor(outputs) else None)
    cache = TorchGraphCache(tp, max_graphs=2, on_evict=on_evict)
    assert cache.stats().as_dict() == dict(graphs=0, hits=0, misses=0, evictions=0, graph_bytes=0)
    first = {}

    def launch(b, expect_hit):
        hit, out = cache.launch(b, step(b))
        assert hit == expect_hit
        if hit:
            assert out is first[b]()
        else:
            first[b] = weakref.ref(out)
        assert tp.stats().graph_count == cache.stats().graphs  # an evicted graph is gone at once
        torch.cuda.synchronize()
        assert torch.equal(out, refs[b])
    launch(1, False)
    assert calls[1] == 3  # two warm-up calls, one captured
    launch(2, False)
    launch(1, True)
    assert calls[1] == 3
    launch(4, False)  # evicts 2, the least recently launched
    assert handed == [2] and cache.get(2) is None
    for _ in range(3):  # get is no launch: 1 stays the least recent, nothing is counted
        g, out = cache.get(1)
        assert isinstance(g, torch.cuda.CUDAGraph) and out is first[1]()
        del g, out
    st = cache.stats()
    assert (st.graphs, st.hits, st.misses, st.evictions) == (2, 1, 3, 1)
    assert st.graph_bytes == tp.stats().graph_reserved_bytes > 0
    launch(8, False)
    assert handed == [2, 1]
    # evict: on_evict once; an absent key is no error and counts nothing.
    cache.evict(4)
    cache.evict(4)
    cache.evict(40)
    assert handed == [2, 1, 4] and tp.stats().graph_count == 1
    launch(2, False)  # captured again
    assert calls[2] == 6
    st = cache.stats()
    assert (st.graphs, st.hits, st.misses, st.evictions) == (2, 1, 5, 3)
    cache.close()
    assert handed == [2, 1, 4, 8, 2] and cache.closed
    cache.close()
    assert handed == [2, 1, 4, 8, 2]
    gc.collect()
    assert tp.stats().graph_count == 0


@torch.no_grad()
def test_graph_cache_misuse(tp):
    """Bad arguments raise and change nothing; a capture_fn that raises
    keeps nothing; a suspended TorchPool, a closed cache and a closed
    TorchPool are refused with cp.Error."""
    m = model(seed=8)
    x = torch.randn(4, 256, device="cuda")
    ref = m(x).clone()
    calls = []

    def fn():
        calls.append(1)
        return m(x)
    cache = TorchGraphCache(tp, max_graphs=2)
    cache.launch(1, fn)
    before, made = cache.stats().as_dict(), len(calls)
    bad = [
        (TypeError, lambda: TorchGraphCache(None)),
        (TypeError, lambda: TorchGraphCache(tp.pool)),
        (TypeError, lambda: TorchGraphCache(tp, 0)),  # keyword-only bounds
        (ValueError, lambda: TorchGraphCache(tp, max_bytes=-1)),
        (TypeError, lambda: TorchGraphCache(tp, max_bytes="1")),
        (ValueError, lambda: TorchGraphCache(tp, max_graphs=-1)),
        (ValueError, lambda: TorchGraphCache(tp, max_graphs=1 << 32)),
        (TypeError, lambda: TorchGraphCache(tp, max_graphs=2.0)),
        (TypeError, lambda: TorchGraphCache(tp, on_evict=3)),
        (ValueError, lambda: TorchGraphCache(tp, warmup=-1)),
        (TypeError, lambda: TorchGraphCache(tp, warmup=True)),
        (TypeError, lambda: TorchGraphCache(tp, warmup=1.0)),
        (ValueError, lambda: cache.launch(-1, fn)),
        (ValueError, lambda: cache.launch(1 << 64, fn)),
        (TypeError, lambda: cache.launch("1", fn)),
        (TypeError, lambda: cache.launch(1.0, fn)),
        (TypeError, lambda: cache.launch(True, fn)),
        (TypeError, lambda: cache.launch(None, fn)),
        (TypeError, lambda: cache.launch(2, None)),
        (TypeError, lambda: cache.launch(2, 42)),
        (TypeError, lambda: cache.launch(1, "fn")),  # also on a hit
        (ValueError, lambda: cache.get(-1)),
        (TypeError, lambda: cache.get("1")),
        (ValueError, lambda: cache.evict(-1)),
        (TypeError, lambda: cache.evict(1.5)),
    ]
    for exc, call in bad:
        with pytest.raises(exc):
            call()
    assert len(calls) == made and cache.stats().as_dict() == before

    # A capture_fn that raises, in the warm-up or in the capture: the
    # exception itself propagates, nothing is kept or counted, and the
    # half-captured graph goes with the exception.
    def raises_in_warmup():
        raise KeyError("in the warm-up")

    def raises_in_capture():
        y = m(x)
        if torch.cuda.is_current_stream_capturing():
            raise KeyError("in the capture")
        return y
    counters = ("graphs", "hits", "misses", "evictions")
    for capture_fn, text in ((raises_in_warmup, "in the warm-up"), (raises_in_capture, "in the capture")):
        with pytest.raises(KeyError) as e:
            cache.launch(3, capture_fn)
        assert e.value.args == (text,)
        assert cache.get(3) is None
        assert {k: cache.stats().as_dict()[k] for k in counters} == {k: before[k] for k in counters}
        del e
        gc.collect()
        assert tp.stats().graph_count == 1

    # Suspended: launches (hits and misses) and evict are refused, counting
    # nothing; get and stats answer.
    tp.suspend()
    for call in (lambda: cache.launch(1, fn), lambda: cache.launch(5, fn), lambda: cache.evict(1)):
        with pytest.raises(cp.Error) as e:
            call()
        assert e.value.name == "CPOOL_ERR_SUSPENDED"
    assert cache.get(1) is not None
    assert {k: cache.stats().as_dict()[k] for k in counters} == {k: before[k] for k in counters}
    tp.resume()
    hit, y = cache.launch(1, fn)
    assert hit
    torch.cuda.synchronize()
    assert torch.equal(y, ref)
    del y

    # A closed cache refuses everything but close.
    with cache:
        pass
    assert cache.closed
    cache.close()
    for call in (lambda: cache.launch(1, fn), lambda: cache.get(1), lambda: cache.evict(1), cache.stats,
                 cache.__enter__):
        with pytest.raises(cp.Error) as e:
            call()
        assert e.value.name == "CPOOL_ERR_INVALID_ARGUMENT"
    # So does a cache whose TorchPool was closed; and no cache is made on one.
    other = TorchGraphCache(tp)
    gc.collect()
    assert tp.stats().graph_count == 0
    tp.close()
    for call in (lambda: other.launch(1, fn), lambda: other.get(1), lambda: other.evict(1), other.stats,
                 lambda: TorchGraphCache(tp)):
        with pytest.raises(cp.Error) as e:
            call()
        assert e.value.name == "CPOOL_ERR_INVALID_ARGUMENT"
    other.close()
    assert len(calls) == made  # hits and refused launches call nothing


@torch.no_grad()
def test_graph_cache_on_evict_exception_goes_to_unraisablehook(tp, monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda args: seen.append((args.exc_type, args.object)))
    m = model(seed=9)
    x = torch.randn(4, 256, device="cuda")

    def on_evict(key, graph, outputs):
        raise ValueError(f"on_evict {key}")
    with TorchGraphCache(tp, max_graphs=1, on_evict=on_evict) as cache:
        cache.launch(1, lambda: m(x))
        assert seen == []
        assert cache.launch(2, lambda: m(x))[0] is False  # the exception does not reach launch
        assert seen == [(ValueError, on_evict)]
        assert cache.stats().evictions == 1 and cache.get(1) is None
    assert seen == [(ValueError, on_evict)] * 2
    gc.collect()
    assert tp.stats().graph_count == 0
