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
torch.cuda.graph begins the CUDA capture itself, so the library sees the
graph's segments as allocations on a stream, not as a capture of its own:
they are the pool's live blocks, kept (KEEP_CONTENTS) or dropped (DISCARD)
at suspend like any other, and a replay after resume finds them at the same
addresses. Pages are not shared between torch graphs in this version (see
docs/PYTHON.md, "What the bridge does not do yet").
"""
import contextlib
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
        capture pool: a MemPool of g's own unless kwargs name a pool (a
        MemPool's id or another graph's g.pool(), to share torch's way)."""
        self._check_awake("graph")
        if "pool" not in kwargs or kwargs["pool"] is None:
            mp = self._new_mempool()
            try:
                self._graph_pools[g] = mp
            except TypeError:  # a graph object without weak references
                self._graph_pools = dict(self._graph_pools)
                self._graph_pools[g] = mp
            kwargs["pool"] = mp.id
        with _torch.cuda.graph(g, **kwargs):
            yield g

    def replay(self, g):
        """g.replay(), or cp.Error (CPOOL_ERR_SUSPENDED) while suspended: a
        replay of a suspended pool's graph would fault the CUDA context."""
        self._check_awake("replay")
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
