"""capturepool.torch: PyTorch's CUDA allocations and graphs served by a
capture pool (docs/PYTHON.md, "PyTorch").

    from capturepool.torch import TorchPool
    tp = TorchPool()
    g = torch.cuda.CUDAGraph()
    with tp.graph(g):
        y = model(x)          # the graph's memory comes from tp.pool
    tp.suspend()              # the pool's pages go back to the device
    tp.resume()               # same addresses: g replays as captured
    tp.replay(g)

    # One graph per batch size, within a budget of the pool's graph memory:
    cache = TorchGraphCache(tp, max_bytes=512 << 20)
    hit, y = cache.launch(b, lambda: model(x[:b]))

How it fits together. PyTorch's caching allocator sits above the pool: a
torch.cuda.MemPool with a pluggable allocator (libcapturepool_torch.so, one
slot of it per TorchPool) asks the pool for whole segments with
cpool_alloc on the stream torch names, and caches them. tp.mempool serves
allocations outside graphs (tp.allocating()); each tp.graph(g) gets a
MemPool of its own, so that every graph has addresses of its own, as
torch.cuda.graph's private pools do, while all of them take their memory
from the same capture pool, which suspend and resume move as one.
torch.cuda.graph begins the CUDA capture itself; tp.graph(g) then attaches
the capture pool to it (cpool_capture_attach on the stream the shim wraps
for torch's capture stream), so the graph's segments are graph memory in
an arena of that capture. Before torch ends the capture, the segments in
which torch holds no live tensor are freed in the capture (scratch, on
pages shared with the pool's other graphs: C graphs and other torch
graphs alike); in the segments that still hold tensors (the graph's
outputs), torch's inactive blocks are noted as scratch
(cpool_capture_note_scratch), and the pool is detached: only the pages of
live tensors become the graph's own. A hold (a cp.Graph without an
executable) keeps that memory until g is collected. docs/PYTHON.md,
"Graphs that share pages", says why this is safe and what would break it.
"""
import collections
import contextlib
import gc
import sys
import threading
import types
import weakref

try:
    import torch as _torch
except ImportError as e:  # pragma: no cover - depends on the machine
    raise ImportError("capturepool.torch needs PyTorch (import torch failed: " + str(e) + ")") from e

from . import Device, Error, GraphCacheStats, Pool, Status, _cache_bounds, _report_unraisable, _size, _suspended_pools
from ._shim import Slot

__all__ = ["TorchPool", "TorchGraphCache"]


def _require_cuda():
    if not _torch.cuda.is_available():
        raise RuntimeError("capturepool.torch needs PyTorch with CUDA and a usable GPU "
                           f"(torch {_torch.__version__}: torch.cuda.is_available() is False)")
    if not hasattr(_torch.cuda, "MemPool") or not hasattr(_torch.cuda.memory, "CUDAPluggableAllocator"):
        raise RuntimeError(f"capturepool.torch needs torch.cuda.MemPool (torch >= 2.6; this is {_torch.__version__})")


def _ordinal(device):
    if device is None:
        return _torch.cuda.current_device()
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    if isinstance(device, (str, _torch.device)):
        d = _torch.device(device)
        if d.type != "cuda":
            raise ValueError(f"device must be a CUDA device, not {d}")
        return _torch.cuda.current_device() if d.index is None else d.index
    raise TypeError(f"device must be None, an int, a str or a torch.device, not {type(device).__name__}")


def _release_hold(device, hold):
    """g was collected: once its replays are over (torch launches them, the
    library does not see them), its memory goes back to the pool."""
    try:
        _torch.cuda.synchronize(device)
    finally:
        hold.release()


class TorchPool:
    """A capture pool on torch's CUDA device, serving torch.cuda.MemPools.

    keep_contents: suspend() keeps the bytes of live memory (weights, graph
    outputs, the graphs' segments) in host memory and restores them at
    resume(); False gives them back without a copy (their bytes are then
    unspecified after resume, their addresses kept)."""

    def __init__(self, device=None, *, keep_contents=True, reserve_bytes=0, max_reserved_bytes=0):
        _require_cuda()
        if not isinstance(keep_contents, bool):
            raise TypeError(f"keep_contents must be a bool, not {type(keep_contents).__name__}")
        self.ordinal = _ordinal(device)
        self.device = _torch.device("cuda", self.ordinal)
        self.keep_contents = keep_contents
        self._lock = threading.Lock()
        self._closed = False
        self._device = Device("cuda", self.ordinal)
        try:
            self.pool = Pool(self._device, reserve_bytes=reserve_bytes, max_reserved_bytes=max_reserved_bytes)
            self._pool_h = self.pool._h
            self._slot = Slot(self.pool, "cuda", self.ordinal)
        except BaseException:
            getattr(self, "pool", None) and self.pool.release()
            self._device.close()
            raise
        self._allocator = _torch.cuda.memory.CUDAPluggableAllocator(self._slot.path, self._slot.alloc_name,
                                                                    self._slot.free_name)
        self.mempool = self._new_mempool()
        self._capturing = threading.local()  # .native: the stream tp.graph captures on, in this thread
        # Each graph's MemPool lives as long as the graph (or until close).
        self._graph_pools = weakref.WeakKeyDictionary()
        # Graphs whose memory went back at a failed detach: never replayed.
        self._broken = weakref.WeakSet()
        self._any_broken = False  # replay's fast path reads this, not the WeakSet
        # Each attached graph's hold (a cp.Graph without an executable).
        self._holds = weakref.WeakKeyDictionary()

    def _new_mempool(self):
        with _torch.cuda.device(self.ordinal):
            return _torch.cuda.MemPool(self._allocator.allocator())

    def _check_open(self, what):
        if self._closed:
            raise Error(Status.ERR_INVALID_ARGUMENT, f"TorchPool.{what}: the TorchPool was closed")

    def _check_awake(self, what):
        self._check_open(what)
        if self.pool.suspended:
            raise Error(Status.ERR_SUSPENDED,
                        f"TorchPool.{what}: the pool is suspended (TorchPool.resume gives it memory again)")

    @contextlib.contextmanager
    def graph(self, g, **kwargs):
        """torch.cuda.graph(g, **kwargs), with the graph's memory from the
        capture pool: a MemPool of g's own, attached to the capture, so
        that its scratch shares pages with the pool's other graphs and its
        outputs (tensors still live at the end of the block) get pages of
        their own. kwargs naming a pool (a MemPool's id or another graph's
        g.pool(), to share torch's way) take the memory from the capture
        pool without an attach: eager segments, no page shared."""
        self._check_awake("graph")
        own = kwargs.get("pool") is None
        mp = None
        if own:
            mp = self._new_mempool()
            try:
                self._graph_pools[g] = mp
            except TypeError:  # a graph object without weak references
                self._graph_pools = dict(self._graph_pools)
                self._graph_pools[g] = mp
            kwargs["pool"] = mp.id
        capture = _torch.cuda.graph(g, **kwargs)
        capture.__enter__()
        # Inside, the current stream is torch's capture stream.
        native = _torch.cuda.current_stream(self.device).cuda_stream
        attached = False
        try:
            if own:
                self._slot.attach(native)
                attached = True
                self._capturing.native = native
            yield g
        except BaseException:
            try:  # the capture's memory stays with g, which its owner may replay
                self._finish(g, native, attached, None)
            except Error:
                pass
            if not capture.__exit__(*sys.exc_info()):
                raise
        else:
            try:
                self._finish(g, native, attached, mp)
            except BaseException:
                capture.__exit__(*sys.exc_info())
                raise
            capture.__exit__(None, None, None)

    def _finish(self, g, native, attached, mp):
        """Before torch ends the capture: the scratch segments freed in it
        (with mp, g's MemPool), then the detach; a failed detach gave the
        memory back, and g is never replayed (TorchPool.replay refuses)."""
        self._capturing.native = None
        if not attached:
            return
        try:
            if mp is not None:
                self._free_scratch(mp, native)
        finally:
            try:
                self._keep(g, self._slot.detach(native, self._device))
            except Error:
                self._broken.add(g)
                self._any_broken = True
                raise

    def _free_scratch(self, mp, native):
        """Frees, inside the capture, the segments of g's MemPool that hold
        no active block (every tensor in them was freed during the capture):
        scratch for g's replays; in the others, notes the inactive blocks
        as scratch (their whole pages stay shared, the pages of the graph's
        outputs become its own). On failure g is marked broken."""
        pool_id = tuple(mp.id)
        for seg in _torch.cuda.memory_snapshot():
            if tuple(seg.get("segment_pool_id", ())) != pool_id or seg.get("stream") != native:
                continue
            if seg.get("active_size", 1) == 0:
                self._slot.scratch(native, seg["address"])
                continue
            # Tensors live in it (the graph's outputs): its inactive blocks
            # are scratch, whose whole pages stay shared.
            for block in seg.get("blocks", ()):
                if block.get("state") == "inactive":
                    self._slot.note_scratch(native, seg["address"], block["address"] - seg["address"], block["size"])

    def output(self, t):
        """Inside tp.graph(g): a copy of tensor t, made by g at every replay,
        in a block of exactly its size packed with the outputs of the
        pool's other graphs (cpool_alloc_output). An output returned as it
        is (t itself) keeps the pages it lies on for its graph alone, 2 MiB
        at least, as the rest of the page is that graph's scratch; through
        output() small outputs (a batch's logits) of many graphs share
        pages, and t becomes scratch once dropped. The copy is one kernel
        more in g (docs/PYTHON.md, "Small outputs"). In the eager warm-up
        runs of a TorchGraphCache's capture_fn it returns t itself."""
        self._check_awake("output")
        if not isinstance(t, _torch.Tensor):
            raise TypeError(f"TorchPool.output: t must be a torch.Tensor, not {type(t).__name__}")
        if getattr(self._capturing, "warming", False):
            return t  # a TorchGraphCache's eager warm-up: nothing is captured
        native = getattr(self._capturing, "native", None)
        if native is None or _torch.cuda.current_stream(self.device).cuda_stream != native:
            raise Error(Status.ERR_INVALID_ARGUMENT,
                        "TorchPool.output: only inside tp.graph(g), on its capture stream")
        if t.device != self.device:
            raise Error(Status.ERR_INVALID_ARGUMENT, f"TorchPool.output: t is on {t.device}, the pool on {self.device}")
        nbytes = t.numel() * t.element_size()
        # The block is freed with its last tensor; while g lives the pool
        # keeps it for g (g's replays write it).
        raw = self._slot.output(max(nbytes, t.element_size()), self.ordinal, native, _torch.from_dlpack)
        out = raw[:nbytes].view(t.dtype).view(t.shape)
        out.copy_(t)
        return out

    def _keep(self, g, hold):
        """The hold keeps g's memory until g is collected."""
        weakref.finalize(g, _release_hold, self.device, hold)
        try:
            self._holds[g] = hold
        except TypeError:  # a graph object without weak references: no stats
            pass

    def graph_stats(self, g):
        """The capture pool's memory of graph g (cp.GraphStats: write_bytes
        it writes, shared_write_bytes on pages shared with other graphs,
        own_bytes its outputs' pages), or None for a graph not captured by
        tp.graph with a MemPool of its own."""
        self._check_open("graph_stats")
        hold = self._holds.get(g)
        return hold.stats() if hold is not None else None

    def replay(self, g):
        """g.replay(), or cp.Error (CPOOL_ERR_SUSPENDED) while suspended: a
        replay of a suspended pool's graph would fault the CUDA context.
        The check sees suspends made through capturepool's Python API
        (tp.suspend, tp.pool.suspend), at the cost of a few attribute reads
        (bench/torch_bridge_replay.py)."""
        if self._closed or self._any_broken or self._pool_h in _suspended_pools:
            self._replay_checked(g)
        else:
            g.replay()

    def _replay_checked(self, g):
        """replay's slow path: the full checks, and the pool's state from C
        (resumed elsewhere: the note of its suspension goes)."""
        self._check_awake("replay")
        if g in self._broken:
            raise Error(Status.ERR_INVALID_ARGUMENT,
                        "TorchPool.replay: the graph's memory went back to the pool when its capture failed")
        _suspended_pools.discard(self._pool_h)
        g.replay()

    @contextlib.contextmanager
    def allocating(self):
        """This thread's torch allocations inside the block come from the pool
        (torch.cuda.use_mem_pool(tp.mempool))."""
        self._check_awake("allocating")
        with _torch.cuda.use_mem_pool(self.mempool, device=self.device):
            yield self

    def suspend(self):
        """Waits for the device, then gives every page of the pool back
        (keeping its addresses, and with keep_contents its live bytes)."""
        self._check_open("suspend")
        _torch.cuda.synchronize(self.device)
        self.pool.suspend(keep_contents=self.keep_contents)

    def resume(self):
        """Maps the pool's memory back at the same addresses."""
        self._check_open("resume")
        self.pool.resume()

    @property
    def suspended(self):
        self._check_open("suspended")
        return self.pool.suspended

    def stats(self):
        """The capture pool's counters (cp.PoolStats)."""
        self._check_open("stats")
        return self.pool.stats()

    def write_snapshot(self, path):
        self._check_open("write_snapshot")
        self.pool.write_snapshot(path)

    def close(self):
        """Ends the TorchPool: drops its MemPools and its pool reference. The
        memory goes back once torch has freed every segment it took (its
        tensors and graphs gone); a second call does nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self.pool.suspended:
            self.pool.resume()  # torch's frees must find mapped memory
        _torch.cuda.synchronize(self.device)
        self._graph_pools = {}
        self.mempool = None
        _torch.cuda.empty_cache()
        self._slot.unbind()
        self.pool.release()
        self._device.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class _CacheEntry:
    """A kept graph: the graph, what its capture_fn returned, and the
    launches under way that have not replayed it yet (not evicted then)."""
    __slots__ = ("graph", "outputs", "launching")

    def __init__(self, graph, outputs):
        self.graph, self.outputs, self.launching = graph, outputs, 0


class TorchGraphCache:
    """Torch CUDA graphs captured through one TorchPool, kept by key (a batch
    size: an int in [0, 2**64)) as capturepool.GraphCache keeps the
    library's graphs; a context manager.

    launch(key, capture_fn) replays the key's graph; on a miss it first
    calls capture_fn() `warmup` times on a side stream (the eager runs
    torch asks for before a capture; 0: none), then once inside tp.graph(g)
    for a new torch.cuda.CUDAGraph g, and keeps g with what that call
    returned (its outputs: a tensor, a tuple, anything). Then the least
    recently launched other graphs are evicted until tp's
    graph_reserved_bytes is at most max_bytes and at most max_graphs graphs
    are kept (0: no bound), before the replay. A graph that alone needs
    more than max_bytes is kept alone. Only a miss adds graph memory, so
    only a miss evicts.

    Evicting calls on_evict(key, graph, outputs), then drops the cache's
    references: the outputs, the graph, then the graph's MemPool, whose end
    frees its unused segments to the pool once no graph uses it. Memory
    that something else still refers to stays (tensors of the outputs, a
    graph from get()): on_evict is where the caller drops those. What it
    costs, where capturepool.GraphCache never waits:
    - the graph's end waits for the device: TorchPool synchronizes before
      it lets a graph's memory go, since the library cannot see torch's
      replays;
    - where the graph outlives the drop, a gc.collect(): a reference cycle
      may hold it;
    - with max_bytes, tp.pool.trim() after each eviction, and once before
      the first where the bound is not met. The pool's idle graph memory
      comes back only through a trim, which waits for the device's stream
      work and gives back the pool's other idle memory too (cached
      segments, a resume's host buffer); the C cache gives it back after a
      query instead, through a function outside the library's API.
    A miss also costs what torch.cuda.graph costs at every capture (a
    device synchronize, gc.collect(), torch.cuda.empty_cache()) and the
    warm-up; a hit costs a lookup and tp.replay(g).

    A capture_fn that raises keeps, evicts and counts nothing, and the
    exception propagates; the graph it half captured lives in the
    exception's frames, and its memory comes back after them (at the next
    eviction's trim, or tp.pool.trim()).

    There is no predict_bytes: the library predicts through a C cache
    only, and for a capture that allocates block by block, outputs first;
    torch's caching allocator takes whole segments (2 MiB, 20 MiB, or the
    request rounded up) and places outputs among the scratch in them, so
    the figure would not hold to a page. stats().graph_bytes before and
    after a key's first launch measures a key.

    on_evict runs on the thread whose call evicts, with no lock of the
    cache held; an exception it raises goes to sys.unraisablehook. A lock
    covers the bookkeeping, so get, evict and stats may come from any
    thread; launches are meant to come from one thread at a time (a graph
    that another launch has not replayed yet is not evicted, and the
    bounds may then be unmet until the next miss). launch and evict raise
    cp.Error while tp is suspended (CPOOL_ERR_SUSPENDED); every call but
    close raises it (CPOOL_ERR_INVALID_ARGUMENT) once the cache or tp is
    closed. close() calls on_evict for every graph kept, least recently
    launched first, and drops them; their idle memory serves the next
    capture or goes back at a trim. A cache that is garbage collected
    without close() drops its graphs without on_evict."""

    def __init__(self, tp, *, max_bytes=0, max_graphs=0, on_evict=None, warmup=2):
        if not isinstance(tp, TorchPool):
            raise TypeError(f"tp must be a capturepool.torch.TorchPool, not {type(tp).__name__}")
        max_bytes = _cache_bounds(max_bytes, max_graphs, on_evict)
        if isinstance(warmup, bool) or not isinstance(warmup, int):
            raise TypeError(f"warmup must be an int, not {type(warmup).__name__}")
        if warmup < 0:
            raise ValueError(f"warmup must be at least 0, got {warmup}")
        if tp._closed:
            raise Error(Status.ERR_INVALID_ARGUMENT, "TorchGraphCache: the TorchPool was closed")
        self.tp = tp
        self.max_bytes, self.max_graphs, self.warmup = max_bytes, max_graphs, warmup
        self._on_evict = on_evict
        self._lock = threading.Lock()
        self._closed = False
        # Least recently launched first: a hit moves its key to the end.
        self._entries = collections.OrderedDict()
        self._hits = self._misses = self._evictions = 0

    def _check(self, what, awake=False):
        if self._closed:
            raise Error(Status.ERR_INVALID_ARGUMENT, f"TorchGraphCache.{what}: the cache was closed")
        if self.tp._closed:
            raise Error(Status.ERR_INVALID_ARGUMENT, f"TorchGraphCache.{what}: its TorchPool was closed")
        if awake and self.tp.pool.suspended:
            raise Error(Status.ERR_SUSPENDED,
                        f"TorchGraphCache.{what}: the TorchPool is suspended (TorchPool.resume gives it memory again)")

    @property
    def closed(self):
        """Whether close() was called."""
        return self._closed

    def launch(self, key, capture_fn):
        """Replays the graph kept under key (tp.replay, on the current
        stream), or captures capture_fn() first and keeps it (see the
        class). Returns (hit, outputs): whether the graph was kept, and
        what capture_fn returned when it was captured, which every replay
        of the graph writes again."""
        key = _size("key", key)
        if not callable(capture_fn):
            raise TypeError(f"capture_fn must be callable, not {type(capture_fn).__name__}")
        with self._lock:
            self._check("launch", awake=True)
            e = self._entries.get(key)
            if e is not None:
                self._entries.move_to_end(key)
                self._hits += 1
                e.launching += 1
                g, outputs = e.graph, e.outputs
        if e is not None:
            try:
                self.tp.replay(g)
            finally:
                with self._lock:
                    e.launching -= 1
            return True, outputs
        return self._launch_miss(key, capture_fn)

    def _launch_miss(self, key, capture_fn):
        made = _CacheEntry(*self._capture(capture_fn))
        with self._lock:
            closed = self._closed
            e = None if closed else self._entries.get(key)
            if not closed:
                if e is None:  # else another thread captured key first: its graph is kept
                    e = self._entries[key] = made
                self._entries.move_to_end(key)
                self._misses += 1
                e.launching += 1
                g, outputs = e.graph, e.outputs
        if closed:
            self._leave(key, made)
            raise Error(Status.ERR_INVALID_ARGUMENT, "TorchGraphCache.launch: the cache was closed during the capture")
        if e is not made:
            self._leave(key, made)
        try:
            self._evict_to_bounds(key)
            self.tp.replay(g)
        finally:
            with self._lock:
                e.launching -= 1
        return False, outputs

    def _capture(self, capture_fn):
        """The warm-up on a side stream, as torch asks before a capture,
        then the capture into tp; returns (graph, outputs)."""
        tp = self.tp
        with _torch.cuda.device(tp.ordinal):
            if self.warmup:
                side = _torch.cuda.Stream(tp.device)
                side.wait_stream(_torch.cuda.current_stream(tp.device))
                tp._capturing.warming = True  # tp.output returns its tensor as it is
                try:
                    with _torch.cuda.stream(side):
                        for _ in range(self.warmup):
                            capture_fn()
                finally:
                    tp._capturing.warming = False
                _torch.cuda.current_stream(tp.device).wait_stream(side)
            g = _torch.cuda.CUDAGraph()
            with tp.graph(g):
                outputs = capture_fn()
        return g, outputs

    def _evict_to_bounds(self, keep):
        """Evicts the least recently launched graphs but keep's until both
        bounds hold (or only graphs being launched are left); with
        max_bytes, trims after each, as the bytes are to be seen back."""
        trimmed = False
        while True:
            with self._lock:
                over = self.max_graphs != 0 and len(self._entries) > self.max_graphs
            if not over and self.max_bytes:
                over = self.tp.stats().graph_reserved_bytes > self.max_bytes
                if over and not trimmed:
                    # Idle memory (of graphs dropped outside the cache, or a
                    # failed capture's) goes back before any kept graph does.
                    self.tp.pool.trim()
                    trimmed = True
                    continue
            if not over:
                return
            with self._lock:
                key = next((k for k, e in self._entries.items() if k != keep and not e.launching), None)
                if key is None:
                    return
                victim = self._entries.pop(key)
                self._evictions += 1
            self._leave(key, victim)
            if self.max_bytes:
                self.tp.pool.trim()
                trimmed = True

    def _leave(self, key, entry):
        """A graph leaves the cache: on_evict, then the cache's references
        go, outputs first, then the graph, then its MemPool, whose end
        frees its unused segments only once no graph uses it. entry is
        emptied (the caller holds no other reference)."""
        graph, outputs = entry.graph, entry.outputs
        entry.graph = entry.outputs = None
        mempool = self.tp._graph_pools.get(graph)
        if self._on_evict is not None:
            try:
                self._on_evict(key, graph, outputs)
            except Exception:
                _report_unraisable(self._on_evict,
                                   "Exception ignored in a capturepool.torch.TorchGraphCache on_evict function")
        try:
            alive = weakref.ref(graph)
        except TypeError:  # a graph object without weak references
            alive = None
        del outputs, graph
        if alive is not None and alive() is not None:
            gc.collect()  # a reference cycle may hold it; else its owner does
        del mempool

    def get(self, key):
        """(graph, outputs) kept under key, or None. Not a launch: the
        order of eviction and the counters stay. A graph or outputs kept
        from here keep their memory after an eviction."""
        key = _size("key", key)
        with self._lock:
            self._check("get")
            e = self._entries.get(key)
            return None if e is None else (e.graph, e.outputs)

    def evict(self, key):
        """Evicts the graph kept under key (on_evict, then the cache's
        references go, then tp.pool.trim()); nothing where none is kept."""
        key = _size("key", key)
        with self._lock:
            self._check("evict", awake=True)
            entry = self._entries.pop(key, None)
            if entry is not None:
                self._evictions += 1
        if entry is not None:
            self._leave(key, entry)
            self.tp.pool.trim()

    def stats(self):
        """The cache's counters now (cp.GraphCacheStats: graphs kept, hits,
        misses, evictions, and graph_bytes, tp's graph_reserved_bytes)."""
        with self._lock:
            self._check("stats")
            counts = dict(graphs=len(self._entries), hits=self._hits, misses=self._misses,
                          evictions=self._evictions)
        return GraphCacheStats(types.SimpleNamespace(graph_bytes=self.tp.stats().graph_reserved_bytes, **counts))

    def close(self):
        """Ends the cache: on_evict for every graph kept, least recently
        launched first, and the cache's references go. A second call does
        nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            entries = list(self._entries.items())
            self._entries.clear()
        for key, entry in entries:
            self._leave(key, entry)

    def __enter__(self):
        with self._lock:
            self._check("__enter__")
        return self

    def __exit__(self, *exc):
        self.close()
        return False
