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
import contextlib
import sys
import threading
import weakref

try:
    import torch as _torch
except ImportError as e:  # pragma: no cover - depends on the machine
    raise ImportError("capturepool.torch needs PyTorch (import torch failed: " + str(e) + ")") from e

from . import Device, Error, Pool, Status
from ._shim import Slot

__all__ = ["TorchPool"]


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
            self._slot = Slot(self.pool, "cuda", self.ordinal)
        except BaseException:
            getattr(self, "pool", None) and self.pool.release()
            self._device.close()
            raise
        self._allocator = _torch.cuda.memory.CUDAPluggableAllocator(self._slot.path, self._slot.alloc_name,
                                                                    self._slot.free_name)
        self.mempool = self._new_mempool()
        # Each graph's MemPool lives as long as the graph (or until close).
        self._graph_pools = weakref.WeakKeyDictionary()
        # Graphs whose memory went back at a failed detach: never replayed.
        self._broken = weakref.WeakSet()
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
        replay of a suspended pool's graph would fault the CUDA context."""
        self._check_awake("replay")
        if g in self._broken:
            raise Error(Status.ERR_INVALID_ARGUMENT,
                        "TorchPool.replay: the graph's memory went back to the pool when its capture failed")
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
