"""cp.GraphCache on the host backend: counting, the bounds, outputs of kept
graphs, on_evict, bodies that raise, the prediction, argument errors, and
threads (include/capturepool.h, "Graph cache"; tests/test_graph_cache.c is
the C side)."""
import ctypes
import gc
import random
import sys
import threading
import weakref

import pytest

import capturepool as cp

KiB = 1 << 10
MiB = 1 << 20
PAGE = 2 * MiB


def read(addr, n):
    return ctypes.string_at(addr, n)


def pattern(key):
    return (0x11 + key * 7) & 0xFF


class World:
    """Keys with an output each: a key's body allocates its output first,
    then scratch it frees, fills both, and keeps the output in .outs;
    on_evict frees the output on the stream it was captured on, ordered
    after that stream's launches of the graph."""

    def __init__(self, pool, out_bytes=64 * KiB, scratch_bytes=256 * KiB):
        self.pool = pool
        self.sizes = {}  # key -> (out_bytes, scratch_bytes), default otherwise
        self.default = (out_bytes, scratch_bytes)
        self.outs = {}  # key -> (address, stream)
        self.captures = {}  # key -> bodies that returned
        self.evicted = {}  # key -> on_evict calls
        self.graphs = []  # what on_evict was handed, where it keeps them
        self.keep_graphs = False
        self.lock = threading.Lock()

    def size(self, key):
        return self.sizes.get(key, self.default)

    def body(self, key):
        def body(s):
            out_bytes, scratch_bytes = self.size(key)
            out = self.pool.alloc(out_bytes, s)
            scratch = self.pool.alloc(scratch_bytes, s)
            cp.memset_async(s, scratch, 0xEE, scratch_bytes)
            cp.memset_async(s, out, pattern(key), out_bytes)
            self.pool.free(scratch, s)
            with self.lock:
                self.keep_output(key, out, s)
                self.captures[key] = self.captures.get(key, 0) + 1
        return body

    def keep_output(self, key, out, s):
        """Where a body's output goes (under the lock)."""
        assert key not in self.outs
        self.outs[key] = (out, s)

    def on_evict(self, key, graph):
        assert isinstance(graph, cp.Graph) and not graph.closed
        with self.lock:
            self.evicted[key] = self.evicted.get(key, 0) + 1
            out, s = self.outs.pop(key)
            self.pool.free(out, s)
            if self.keep_graphs:
                self.graphs.append((key, graph))

    def check_outputs(self, keys=None):
        """Each kept output holds its key's pattern (its streams synchronized)."""
        with self.lock:
            for key, (out, _) in self.outs.items():
                if keys is None or key in keys:
                    n = self.size(key)[0]
                    assert read(out, n) == bytes([pattern(key)]) * n, f"key {key}"


def stats_dict(cache):
    return cache.stats().as_dict()


def test_hits_misses_evictions_counted(dev, stream, pool):
    w = World(pool)
    cache = cp.GraphCache(pool, max_graphs=3, on_evict=w.on_evict)
    assert stats_dict(cache) == dict(graphs=0, hits=0, misses=0, evictions=0, graph_bytes=0)
    assert [cache.launch(k, stream, w.body(k)) for k in (1, 2, 3)] == [False] * 3
    assert cache.launch(1, stream, w.body(1)) is True
    assert cache.launch(4, stream, w.body(4), mode="thread_local") is False  # evicts 2, the least recently launched
    assert w.evicted == {2: 1}
    assert cache.get(2) is None
    for _ in range(3):  # get is no launch: 3 stays the least recent, nothing is counted
        g = cache.get(3)
        assert isinstance(g, cp.Graph) and g.replays == 1
        g.release()
    st = cache.stats()
    assert (st.graphs, st.hits, st.misses, st.evictions) == (3, 1, 4, 1)
    assert st.graph_bytes == pool.stats().graph_reserved_bytes > 0
    assert cache.launch(5, stream, w.body(5), mode="relaxed") is False
    assert w.evicted == {2: 1, 3: 1}
    # The graphs launched wrote their outputs.
    stream.synchronize()
    assert sorted(w.outs) == [1, 4, 5]
    w.check_outputs()
    # evict: on_evict once; an absent key is no error and counts nothing.
    cache.evict(4)
    cache.evict(4)
    cache.evict(40)
    assert w.evicted == {2: 1, 3: 1, 4: 1}
    st = cache.stats()
    assert (st.graphs, st.hits, st.misses, st.evictions) == (2, 1, 5, 3)
    # close: on_evict for every graph kept, then nothing is left.
    cache.close()
    assert w.evicted == {k: 1 for k in (1, 2, 3, 4, 5)} and w.outs == {}
    stream.synchronize()
    assert pool.stats().allocated_bytes == 0 and pool.stats().graph_count == 0


@pytest.mark.parametrize("max_bytes,max_graphs", [(0, 4), (12 * MiB, 0), (8 * MiB, 3), (3 * MiB, 0)])
def test_bounds_hold_after_every_launch(dev, stream, pool, max_bytes, max_graphs):
    rng = random.Random(max_bytes + max_graphs)
    w = World(pool)
    for k in range(16):  # outputs of 0.25 to 2 MiB, scratch of 0.5 to 6 MiB
        w.sizes[k] = (rng.randrange(1, 9) * MiB // 4, rng.randrange(1, 13) * MiB // 2 - rng.randrange(64) * 512)
    alone = 0
    with cp.GraphCache(pool, max_bytes=max_bytes, max_graphs=max_graphs, on_evict=w.on_evict) as cache:
        for i in range(120):
            key = rng.randrange(16)
            before = cache.stats()
            if key in w.outs:  # a hit must write its output again
                cp.memset_async(stream, w.outs[key][0], 0, w.size(key)[0])
            hit = cache.launch(key, stream, w.body(key))
            st = cache.stats()
            assert hit == (key in w.outs and before.misses == st.misses)
            assert (st.hits, st.misses) == (before.hits + hit, before.misses + (not hit))
            if max_graphs:
                assert st.graphs <= max_graphs
            if max_bytes and st.graph_bytes > max_bytes:
                assert st.graphs == 1, f"launch {i}: {st}"
                alone += 1
            assert cache.get(key) is not None
            stream.synchronize()
            assert st.graphs == len(w.outs)
            w.check_outputs()
        st = cache.stats()
        assert st.evictions == sum(w.evicted.values())
        assert st.hits + st.misses == 120
        if max_bytes or max_graphs:
            assert st.evictions > 0
        if max_bytes == 3 * MiB:
            assert alone > 0  # most keys alone are over 3 MiB: kept alone
    # Every graph captured left through on_evict once.
    assert w.outs == {} and w.captures == w.evicted


def test_on_evict_gets_a_usable_graph(dev, stream, pool):
    w = World(pool)
    handed = []  # (key, graph, output): on_evict keeps the graph and its output

    def on_evict(key, graph):
        assert isinstance(graph, cp.Graph) and not graph.closed
        handed.append((key, graph, w.outs.pop(key)[0]))
    cache = cp.GraphCache(pool, max_graphs=2, on_evict=on_evict)
    ids = {}
    for k in (1, 2, 3, 4, 2, 5):
        cache.launch(k, stream, w.body(k))
        g = cache.get(k)
        ids.setdefault(k, []).append(g.id)
        g.release()
    cache.evict(2)
    assert [k for k, _, _ in handed] == [1, 2, 3, 4, 2]
    cache.close()
    assert [k for k, _, _ in handed] == [1, 2, 3, 4, 2, 5]
    # One call per graph that left, each with the graph of that capture.
    assert [g.id for _, g, _ in handed] == [ids[1][0], ids[2][0], ids[3][0], ids[4][0], ids[2][1], ids[5][0]]
    # The cache's references went; on_evict's own keep the graphs launchable.
    assert pool.stats().graph_count == 6
    stream.synchronize()
    for key, g, out in handed:
        assert not g.closed and g.stats().live_outputs == 1
        cp.memset_async(stream, out, 0, 64 * KiB)
        g.launch(stream)
    stream.synchronize()
    for key, g, out in handed:
        assert read(out, 64 * KiB) == bytes([pattern(key)]) * (64 * KiB)
        assert g.replays == 2
        pool.free(out, stream)
        g.release()
        g.release()
    assert pool.stats().graph_count == 0


def test_on_evict_exception_goes_to_unraisablehook(dev, stream, pool, monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda args: seen.append((args.exc_type, args.object)))
    w = World(pool)

    def on_evict(key, graph):
        w.on_evict(key, graph)
        raise ValueError(f"on_evict {key}")
    cache = cp.GraphCache(pool, max_graphs=1, on_evict=on_evict)
    cache.launch(1, stream, w.body(1))
    assert seen == []
    assert cache.launch(2, stream, w.body(2)) is False  # the exception does not reach launch
    assert seen == [(ValueError, on_evict)]
    cache.launch(3, stream, w.body(3))
    assert cache.stats().evictions == 2 and len(seen) == 2
    cache.evict(3)
    cache.close()
    assert seen == [(ValueError, on_evict)] * 3
    assert w.evicted == {1: 1, 2: 1, 3: 1}


def test_body_exception_propagates_and_keeps_nothing(dev, stream, pool):
    w = World(pool)
    cache = cp.GraphCache(pool, max_graphs=1, on_evict=w.on_evict)
    cache.launch(1, stream, w.body(1))
    before = stats_dict(cache)
    graphs_before = pool.stats().graph_count
    left = []
    ran = []

    class Fn:
        def __call__(self):
            ran.append(1)
    fn = Fn()
    fn_ref = weakref.ref(fn)
    err = KeyError("inside the body")

    def body(s):
        p = pool.alloc(128 * KiB, s)
        left.append(p)
        cp.memset_async(s, p, 9, 128 * KiB)
        cp.launch_host(s, fn)
        raise err
    with pytest.raises(KeyError) as e:
        cache.launch(9, stream, body)
    assert e.value is err  # the exception itself, not a cp.Error
    del fn
    gc.collect()
    assert fn_ref() is None  # the discarded capture keeps nothing
    counters = ("graphs", "hits", "misses", "evictions")
    assert {k: stats_dict(cache)[k] for k in counters} == {k: before[k] for k in counters}
    assert cache.get(9) is None and w.evicted == {}  # nothing evicted either: 1 is still kept
    assert pool.stats().graph_count == graphs_before
    # What the body allocated and did not free is the caller's, as after
    # cp.capture; the discarded capture's pages are kept for the next
    # capture, as a released graph's are, until a trim.
    pool.free(left[0], stream)
    stream.synchronize()
    pool.trim()
    assert stats_dict(cache) == before

    # A cp.Error raised inside the body propagates as it was raised.
    def body_error(s):
        pool.alloc(0, s)
    with pytest.raises(cp.Error) as e:
        cache.launch(9, stream, body_error)
    assert e.value.name == "CPOOL_ERR_INVALID_ARGUMENT" and str(e.value).startswith("cpool_alloc")
    assert stats_dict(cache) == before

    # The stream is usable and not capturing: the key is captured now.
    assert cache.launch(9, stream, w.body(9)) is False
    stream.synchronize()
    w.check_outputs()
    assert w.evicted == {1: 1}
    assert cache.stats().misses == before["misses"] + 1
    assert ran == []
    cache.close()


def test_launch_host_in_body_lives_with_the_graph(dev, stream, pool):
    calls = []

    class Fn:
        def __call__(self):
            calls.append(1)
    fn = Fn()
    ref = weakref.ref(fn)
    bodies = []

    def body(s):
        bodies.append(s)
        cp.launch_host(s, fn)
    cache = cp.GraphCache(pool)
    assert cache.launch(1, stream, body) is False
    del fn
    for _ in range(3):
        assert cache.launch(1, stream, body) is True  # a hit never calls the body
    assert bodies == [stream]  # the cp.Stream that was passed
    stream.synchronize()
    assert len(calls) == 4
    gc.collect()
    assert ref() is not None  # kept by the graph
    assert pool.buffer_count == 0  # not a record of the cache's pool
    cache.evict(1)
    cp.wait_deferred()
    gc.collect()
    assert ref() is None
    cache.close()


@pytest.mark.parametrize("out_bytes,scratch_bytes", [(64 * KiB, 256 * KiB), (3 * MiB, 5 * MiB), (0, 7 * MiB),
                                                     (1 * MiB, 0)])
def test_predict_bytes_on_an_empty_pool(dev, stream, pool, out_bytes, scratch_bytes):
    w = World(pool, out_bytes or 256, scratch_bytes or 256)
    with cp.GraphCache(pool, on_evict=w.on_evict) as cache:
        before = stats_dict(cache)
        predicted = cache.predict_bytes(scratch_bytes or 256, out_bytes or 256)
        assert stats_dict(cache) == before  # changes nothing
        assert cache.predict_bytes(scratch_bytes or 256, out_bytes or 256) == predicted
        cache.launch(1, stream, w.body(1))
        stream.synchronize()
        measured = cache.stats().graph_bytes
        assert measured > 0 and abs(measured - predicted) <= PAGE, (predicted, measured)
        # A second key on the pool that holds one graph now.
        predicted = cache.predict_bytes(scratch_bytes or 256, out_bytes or 256)
        cache.launch(2, stream, w.body(2))
        stream.synchronize()
        measured = cache.stats().graph_bytes
        assert abs(measured - predicted) <= PAGE, (predicted, measured)


def test_bad_arguments_change_nothing(dev, stream, pool):
    w = World(pool)
    calls = []

    def body(s):
        calls.append(s)
    cache = cp.GraphCache(pool, max_graphs=2, on_evict=w.on_evict)
    cache.launch(1, stream, w.body(1))
    before, pool_before = stats_dict(cache), pool.stats().as_dict()
    bad = [
        (ValueError, lambda: cache.launch(-1, stream, body)),
        (ValueError, lambda: cache.launch(1 << 64, stream, body)),
        (TypeError, lambda: cache.launch("1", stream, body)),
        (TypeError, lambda: cache.launch(1.0, stream, body)),
        (TypeError, lambda: cache.launch(None, stream, body)),
        (TypeError, lambda: cache.launch(True, stream, body)),
        (TypeError, lambda: cache.launch(2, pool, body)),
        (TypeError, lambda: cache.launch(2, None, body)),
        (TypeError, lambda: cache.launch(2, stream, 42)),
        (TypeError, lambda: cache.launch(2, stream, None)),
        (TypeError, lambda: cache.launch(1, stream, "body")),  # also on a hit
        (ValueError, lambda: cache.launch(2, stream, body, mode="local")),
        (TypeError, lambda: cache.launch(2, stream, body, mode=0)),
        (ValueError, lambda: cache.get(-5)),
        (TypeError, lambda: cache.get("1")),
        (ValueError, lambda: cache.evict(-1)),
        (TypeError, lambda: cache.evict(1.5)),
        (ValueError, lambda: cache.predict_bytes(-1, 0)),
        (TypeError, lambda: cache.predict_bytes(0, "1")),
        (TypeError, lambda: cp.GraphCache(stream)),
        (TypeError, lambda: cp.GraphCache(None)),
        (ValueError, lambda: cp.GraphCache(pool, max_bytes=-1)),
        (TypeError, lambda: cp.GraphCache(pool, max_bytes="1")),
        (ValueError, lambda: cp.GraphCache(pool, max_graphs=1 << 32)),
        (ValueError, lambda: cp.GraphCache(pool, max_graphs=-1)),
        (TypeError, lambda: cp.GraphCache(pool, max_graphs=2.0)),
        (TypeError, lambda: cp.GraphCache(pool, on_evict=3)),
        (TypeError, lambda: cp.GraphCache(pool, 0)),  # keyword-only bounds
    ]
    for exc, call in bad:
        with pytest.raises(exc):
            call()
    # The library's refusals: a stream that is capturing, a released stream or pool.
    with cp.capture(stream, pool) as c:
        with pytest.raises(cp.Error) as e:
            cache.launch(2, stream, body)
        assert e.value.name == "CPOOL_ERR_INVALID_ARGUMENT"
    c.graph.release()
    dead = cp.Stream(dev)
    dead.destroy()
    with pytest.raises(cp.Error) as e:
        cache.launch(2, dead, body)
    assert e.value.name == "CPOOL_ERR_INVALID_ARGUMENT"
    released = cp.Pool(dev)
    released.release()
    with pytest.raises(cp.Error) as e:
        cp.GraphCache(released)
    assert e.value.name == "CPOOL_ERR_INVALID_ARGUMENT"
    assert calls == []
    assert stats_dict(cache) == before
    after = pool.stats().as_dict()
    assert {k: after[k] for k in ("allocated_bytes", "graph_reserved_bytes", "alloc_count")} == \
        {k: pool_before[k] for k in ("allocated_bytes", "graph_reserved_bytes", "alloc_count")}
    assert w.evicted == {} and sorted(w.outs) == [1]
    cache.close()


def test_closed_cache_refuses_and_close_twice(dev, stream, pool):
    w = World(pool)
    calls = []
    with cp.GraphCache(pool, on_evict=w.on_evict) as cache:
        cache.launch(1, stream, w.body(1))
        cache.launch(2, stream, w.body(2))
        assert not cache.closed
    assert cache.closed and w.evicted == {1: 1, 2: 1}
    cache.close()
    cache.close()
    assert w.evicted == {1: 1, 2: 1}
    for call in (lambda: cache.launch(1, stream, calls.append), lambda: cache.get(1), lambda: cache.evict(1),
                 lambda: cache.stats(), lambda: cache.predict_bytes(0, 0), lambda: cache.__enter__()):
        with pytest.raises(cp.Error) as e:
            call()
        assert e.value.name == "CPOOL_ERR_INVALID_ARGUMENT"
    assert calls == [] and w.evicted == {1: 1, 2: 1}
    # The cache's reference kept the pool for its graphs; the pool works on.
    assert pool.stats().graph_count == 0
    pool.free(pool.alloc(64, stream), stream)


class Evictor:
    """An on_evict whose going can be seen."""

    def __init__(self, w):
        self.w = w

    def __call__(self, key, graph):
        self.w.on_evict(key, graph)


@pytest.mark.parametrize("how", ["close", "garbage collected"])
def test_cache_ends_with_its_graphs_and_drops_on_evict(dev, stream, pool, how):
    w = World(pool)
    evictor = Evictor(w)
    evictor_ref = weakref.ref(evictor)
    cache = cp.GraphCache(pool, on_evict=evictor)
    del evictor
    cache.launch(1, stream, w.body(1))
    cache.launch(2, stream, w.body(2))
    cache_ref = weakref.ref(cache)
    if how == "close":
        cache.close()
        assert w.evicted == {1: 1, 2: 1}
    del cache
    gc.collect()
    assert cache_ref() is None
    assert w.evicted == {1: 1, 2: 1} and w.outs == {}
    assert pool.stats().graph_count == 0
    assert evictor_ref() is None  # nothing keeps on_evict once the C cache is gone


def test_cache_keeps_the_pool(dev, stream):
    pool = cp.Pool(dev)
    w = World(pool)
    cache = cp.GraphCache(pool, on_evict=w.on_evict)
    cache.launch(1, stream, w.body(1))
    held = cache.get(1).pool  # a cp.Pool of its own on the same C pool
    w.pool = held
    pool.release()
    with pytest.raises(cp.Error):
        pool.stats()
    # The C pool lives on in the cache: a miss captures into it.
    assert cache.launch(2, stream, w.body(2)) is False
    stream.synchronize()
    w.check_outputs()
    assert cache.stats().graphs == 2
    cache.close()
    assert w.outs == {}
    held.release()
    cp.wait_deferred()


class OwnedWorld(World):
    """World for launches that overlap in several threads, each on a stream
    of its own. There the key does not tell which output on_evict(key,
    graph) is to free: the cache takes a graph out before it calls
    on_evict, without a lock, so the key may be captured again first. And
    the output must not be freed while a launch of the graph may still
    run: an eviction may come between a hit's lookup and its launch, and a
    released graph's freed output is taken by the next capture at once,
    even where the free was ordered after that launch on its stream. So
    each key is launched from one thread (its owner), which after each
    launch, once its stream is synchronized, maps the graph kept under the
    key to the output (by graph id), or frees the output of a graph already
    gone; on_evict hands the output of the graph it gets to the owner,
    which frees it then (tests/test_graph_cache.c frees on the owner's side
    too)."""

    def __init__(self, pool):
        super().__init__(pool)
        self.fresh = {}  # key -> (address, stream): the last capture's output, until mapped
        self.by_graph = {}  # graph id -> (key, address, stream)
        self.pending = {}  # stream -> outputs of graphs gone, for its owner to free

    def keep_output(self, key, out, s):
        self.fresh[key] = (out, s)

    def launched(self, cache, key, s, hit):
        """The owner's part after each launch of key on s, s synchronized."""
        with self.lock:
            if not hit:
                out, _ = self.fresh.pop(key)
                g = cache.get(key)  # this launch's graph: no other thread captures key
                if g is not None:
                    self.by_graph[g.id] = (key, out, s)
                    self.outs[key] = (out, s)
                    g.release()
                else:  # evicted already: its on_evict found nothing to hand over
                    self.pool.free(out, s)
            for out in self.pending.pop(s, []):
                self.pool.free(out, s)

    def on_evict(self, key, graph):
        assert isinstance(graph, cp.Graph) and not graph.closed
        with self.lock:
            self.evicted[key] = self.evicted.get(key, 0) + 1
            found = self.by_graph.pop(graph.id, None)
            if found is not None:
                assert found[0] == key
                _, out, s = found
                if self.outs.get(key) == (out, s):
                    del self.outs[key]
                self.pending.setdefault(s, []).append(out)

    def free_pending(self, s):
        """Every owner's pending outputs, on s, once all streams are idle."""
        with self.lock:
            for outs in self.pending.values():
                for out in outs:
                    self.pool.free(out, s)
            self.pending.clear()


def test_threads_on_their_own_streams(dev, stream, pool):
    """Four threads, each with a stream and keys of its own, launching at
    once; between rounds, with every stream idle, the bounds hold."""
    nthreads, rounds, per_round = 4, 3, 15
    max_bytes, max_graphs = 10 * MiB, 6
    w = OwnedWorld(pool)
    rng = random.Random(7)
    for k in range(64):
        w.sizes[k] = (rng.randrange(1, 5) * MiB // 4, rng.randrange(1, 7) * MiB // 2)
    cache = cp.GraphCache(pool, max_bytes=max_bytes, max_graphs=max_graphs, on_evict=w.on_evict)
    barrier = threading.Barrier(nthreads + 1, timeout=120)
    errors = []
    streams = [cp.Stream(dev) for _ in range(nthreads)]
    launches = [0] * nthreads

    def launch(key, s):
        hit = cache.launch(key, s, w.body(key), mode="thread_local")
        s.synchronize()
        w.launched(cache, key, s, hit)

    def work(i):
        s = streams[i]
        r = random.Random(100 + i)
        mine = range(i, 64, nthreads)  # keys of this thread's own: one key, one stream
        try:
            for _ in range(rounds):
                for _ in range(per_round):
                    launch(r.choice(mine), s)
                    launches[i] += 1
                    w.check_outputs(mine)
                barrier.wait()
                barrier.wait()  # the main thread checks the bounds meanwhile
        except threading.BrokenBarrierError:
            pass  # another thread failed
        except BaseException as e:
            errors.append(e)
            barrier.abort()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(nthreads)]
    for t in threads:
        t.start()
    try:
        try:
            for _ in range(rounds):
                barrier.wait()
                # Every stream is idle: a launch gives back what waited on
                # their work, and the outputs of graphs gone are freed.
                launch(1000, stream)
                w.free_pending(stream)
                st = cache.stats()
                assert st.graphs <= max_graphs
                assert st.graphs == 1 or st.graph_bytes <= max_bytes, st
                w.check_outputs()
                barrier.wait()
        except BaseException:
            barrier.abort()
            for t in threads:
                t.join()
            assert errors == []  # a thread's error first, where one failed
            raise
        for t in threads:
            t.join()
        assert errors == []
        st = cache.stats()
        assert st.hits + st.misses == sum(launches) + rounds
        assert st.evictions == sum(w.evicted.values()) > 0
    finally:
        cache.close()
        for s in streams:
            s.synchronize()
        w.free_pending(stream)
        stream.synchronize()
    # Every graph captured left through on_evict once.
    assert w.outs == {} and w.captures == w.evicted
    for s in streams:
        s.destroy()
    assert pool.stats().allocated_bytes == 0
