"""capturepool: memory and lifetimes for captured CUDA graphs, from Python.

The C library's API in Python's terms, over ctypes (docs/PYTHON.md):

    import capturepool as cp
    with cp.Device() as dev, cp.Stream(dev) as s, cp.Pool(dev) as pool:
        with cp.capture(s, pool) as c:
            buf = pool.alloc(1024, s)
            cp.memset_async(s, buf, 7, 1024)
        c.graph.launch(s)

Each object holds exactly one reference of the C object it wraps; close(),
release() and destroy() drop it once (a second call does nothing), and a
use after that raises cp.Error. Every failing call of the library raises
cp.Error. Importing this package never imports torch: capturepool.torch
is the PyTorch bridge.
"""
import atexit
import ctypes
import enum
import itertools
import json
import operator
import os
import sys
import tempfile
import threading
import weakref

from . import _lib
from ._lib import lib as _c

__all__ = ["Error", "Status", "Device", "Stream", "Pool", "PoolStats", "Graph", "GraphStats", "Capture", "capture",
           "GraphCache", "GraphCacheStats",
           "capture_attach", "capture_detach",
           "memcpy_async", "memset_async", "launch_host", "wait_deferred", "library_path", "__version__"]

__version__ = _c.cpool_version_string().decode()
library_path = _lib.path


class Status(enum.IntEnum):
    """The library's statuses (cpool_status), with their C values."""
    OK = 0
    ERR_INVALID_ARGUMENT = 1
    ERR_OUT_OF_MEMORY = 2
    ERR_SEALED = 3
    ERR_NOT_CAPTURING = 4
    ERR_ALREADY_CAPTURING = 5
    ERR_CAPTURE_INVALIDATED = 6
    ERR_STALE_GRAPH = 7
    ERR_NO_DEVICE = 8
    ERR_BACKEND = 9
    ERR_UNSUPPORTED = 10
    ERR_NOT_READY = 11
    ERR_OUTPUT_LIVE = 12
    ERR_IO = 13
    ERR_SUSPENDED = 14


class Error(Exception):
    """A failing call of the library.

    .status is the cpool_status (an int; a Status where the value is
    known), .name its C name ("CPOOL_ERR_SEALED"), and str() the library's
    cpool_last_error() text of the failure."""

    def __init__(self, status, message=""):
        try:
            status = Status(status)
        except ValueError:
            status = int(status)
        self.status = status
        self.name = "CPOOL_" + status.name if isinstance(status, Status) else f"CPOOL_STATUS_{int(status)}"
        super().__init__(message or _c.cpool_status_string(int(status)).decode())

    def __str__(self):
        return self.args[0]


def _last_error():
    return (_c.cpool_last_error() or b"").decode(errors="replace")


def _check(st):
    if st != 0:
        raise Error(st, _last_error())


def _dead(what):
    return Error(Status.ERR_INVALID_ARGUMENT, f"{what}: used after it was released, closed or destroyed")


def _size(name, value, *, allow_zero=True):
    """A size or an address: an int in [0, 2**64)."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, not bool")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, not {type(value).__name__}") from None
    if value < 0 or value >= 1 << 64:
        raise ValueError(f"{name} must be in [0, 2**64), got {value}")
    if not allow_zero and value == 0:
        raise ValueError(f"{name} must not be 0")
    return value


def _expect(name, value, cls):
    if not isinstance(value, cls):
        raise TypeError(f"{name} must be a capturepool.{cls.__name__}, not {type(value).__name__}")
    return value


# ---- interpreter exit -------------------------------------------------------
# Drops of recorded objects and host functions are Python callbacks that the
# library may run on its own threads. Before the interpreter finalizes, the
# work that could still call them is finished here (every live stream's
# queue, the deferred teardowns); from then on releases made by finalizers
# keep their references (the process is ending), so that no callback can
# come after the interpreter is gone.
class _State:
    finalizing = False


_state = _State()
_live_streams = weakref.WeakSet()


@atexit.register
def _at_exit():
    for s in list(_live_streams):
        h = s._h
        if h is not None:
            _c.cpool_stream_synchronize(h)
    _c.cpool_wait_deferred()
    _state.finalizing = True


class _Handle:
    """One reference of a C object; _end(h) drops it, once."""
    _what = "object"

    def __init__(self):
        self._h = None
        self._lock = threading.Lock()

    def _handle(self, fn=None):
        h = self._h
        if h is None:
            raise _dead(f"capturepool.{type(self).__name__}" + (f".{fn}" if fn else ""))
        return h

    def _drop(self):
        with self._lock:
            h, self._h = self._h, None
        if h is not None and not _state.finalizing:
            self._end(h)

    @property
    def closed(self):
        """Whether this object's reference was dropped."""
        return self._h is None

    def __enter__(self):
        self._handle()
        return self

    def __exit__(self, *exc):
        self._drop()
        return False

    def __del__(self):
        try:
            self._drop()
        except Exception:  # during interpreter teardown
            pass

    def __repr__(self):
        state = "released" if self._h is None else hex(self._h)
        return f"<capturepool.{type(self).__name__} {state}>"


# ---- devices and streams ----------------------------------------------------
_BACKENDS = {"auto": 0, "cuda": 1, "host": 2}
_BACKEND_NAMES = {1: "cuda", 2: "host"}


class Device(_Handle):
    """A device: CUDA device `ordinal`, or the CPU (the host backend).

    backend "auto" takes the GPU where one is usable and the host backend
    otherwise (CPOOL_BACKEND=host or cuda in the environment overrides it).
    """

    def __init__(self, backend="auto", ordinal=0):
        super().__init__()
        if not isinstance(backend, str):
            raise TypeError(f"backend must be a str, not {type(backend).__name__}")
        if backend not in _BACKENDS:
            raise ValueError(f"backend must be one of 'auto', 'cuda', 'host', not {backend!r}")
        if isinstance(ordinal, bool) or not isinstance(ordinal, int):
            raise TypeError(f"ordinal must be an int, not {type(ordinal).__name__}")
        if ordinal < 0 or ordinal >= 1 << 31:
            raise ValueError(f"ordinal must be in [0, 2**31), got {ordinal}")
        out = ctypes.c_void_p()
        _check(_c.cpool_device_open(_BACKENDS[backend], ordinal, ctypes.byref(out)))
        self._h = out.value
        self.ordinal = ordinal

    @property
    def backend(self):
        """"cuda" or "host"."""
        return _BACKEND_NAMES[_c.cpool_device_backend(self._handle("backend"))]

    def close(self):
        """Drops this object's reference to the device; a second call does nothing."""
        self._drop()

    def _end(self, h):
        _c.cpool_device_close(h)


class Stream(_Handle):
    """An in-order queue of work: a stream of its own (Stream(device)) or a
    borrowed CUDA stream (Stream.wrap(device, native))."""

    def __init__(self, device):
        super().__init__()
        _expect("device", device, Device)
        out = ctypes.c_void_p()
        _check(_c.cpool_stream_create(device._handle("Stream"), ctypes.byref(out)))
        self._setup(out.value, device)

    def _setup(self, h, device):
        self._h = h
        self.device = device
        self._capture = None  # the cp.capture running on it, if any
        _live_streams.add(self)

    @classmethod
    def wrap(cls, device, native):
        """Borrows an existing cudaStream_t (an int, 0 for the legacy default
        stream, or an object with a .cuda_stream such as a torch stream);
        destroy() never destroys it. The host backend has no CUDA streams:
        cp.Error (CPOOL_ERR_UNSUPPORTED)."""
        _expect("device", device, Device)
        if hasattr(native, "cuda_stream") and not isinstance(native, int):
            native = native.cuda_stream
        native = _size("native", native)
        out = ctypes.c_void_p()
        _check(_c.cpool_stream_wrap(device._handle("Stream.wrap"), native or None, ctypes.byref(out)))
        self = cls.__new__(cls)
        _Handle.__init__(self)
        self._setup(out.value, device)
        return self

    @property
    def native(self):
        """The cudaStream_t as an int; 0 on the host backend."""
        return _c.cpool_stream_native(self._handle("native")) or 0

    def synchronize(self):
        """Waits until all work enqueued on the stream has finished."""
        h = self._handle("synchronize")
        _check(_c.cpool_stream_synchronize(h))

    def destroy(self):
        """Ends the stream once its work has finished; a second call does nothing."""
        self._drop()

    close = destroy

    def _end(self, h):
        _c.cpool_stream_destroy(h)


# ---- callbacks --------------------------------------------------------------
# The library calls two C trampolines with an integer key as their argument;
# the key finds the Python object in a registry. The trampolines are made
# once and never freed (the library may hold their address until the
# process ends).
_keys = itertools.count(1)
_records = {}    # key -> recorded object, until the pool drops it
_host_fns = {}   # key -> [callable, one_shot]
_forever = set()  # keys of host functions captured where their graph cannot be known


def _unraisable_type():
    found = []
    old = sys.unraisablehook
    sys.unraisablehook = found.append

    class _Probe:
        def __del__(self):
            raise RuntimeError("probe")
    try:
        _Probe()
    finally:
        sys.unraisablehook = old
    return type(found[0]) if found else None


_UnraisableHookArgs = _unraisable_type()


def _report_unraisable(fn, message):
    exc_type, exc, tb = sys.exc_info()
    try:
        args = _UnraisableHookArgs((exc_type, exc, tb, message, fn))
        sys.unraisablehook(args)
    except BaseException:
        pass
    finally:
        del exc, tb


def _drop_trampoline(arg):
    obj = _records.pop(arg, None)
    try:
        del obj  # the last reference may run the object's finalizer
    except BaseException:
        _report_unraisable(None, "Exception ignored while capturepool dropped a recorded object")


def _host_trampoline(arg):
    entry = _host_fns.get(arg)
    if entry is None:
        return
    fn, one_shot = entry
    if one_shot:
        _host_fns.pop(arg, None)
    try:
        fn()
    except BaseException:
        _report_unraisable(fn, "Exception ignored in a capturepool.launch_host function")
    finally:
        del fn, entry


_DROP = _lib.DROP_FN(_drop_trampoline)
_HOST = _lib.HOST_FN(_host_trampoline)
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_DROP))
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_HOST))


# ---- pools ------------------------------------------------------------------
class PoolStats:
    """A pool's counters: the fields of cpool_pool_stats, as attributes."""
    __slots__ = _lib.POOL_STATS_FIELDS

    def __init__(self, c):
        for name in self.__slots__:
            setattr(self, name, getattr(c, name))

    def as_dict(self):
        return {name: getattr(self, name) for name in self.__slots__}

    def __repr__(self):
        return "PoolStats(" + ", ".join(f"{k}={v}" for k, v in self.as_dict().items()) + ")"


class GraphStats(PoolStats):
    """A graph's share of its pools: the fields of cpool_graph_stats."""
    __slots__ = _lib.GRAPH_STATS_FIELDS

    def __repr__(self):
        return "GraphStats(" + ", ".join(f"{k}={v}" for k, v in self.as_dict().items()) + ")"


# The C pools suspended through this package (Pool.suspend, until
# Pool.resume): a check cheap enough for every replay of capturepool.torch,
# where the C query would cost a call through ctypes.
_suspended_pools = set()


class Pool(_Handle):
    """A capture pool: memory and recorded objects that graphs captured
    with it keep alive (reference counted; graphs hold references of
    their own)."""

    def __init__(self, device, *, reserve_bytes=0, max_reserved_bytes=0, plain_segments=False):
        super().__init__()
        _expect("device", device, Device)
        if not isinstance(plain_segments, bool):
            raise TypeError(f"plain_segments must be a bool, not {type(plain_segments).__name__}")
        opts = _lib.PoolOptions(ctypes.sizeof(_lib.PoolOptions), _size("reserve_bytes", reserve_bytes),
                                _size("max_reserved_bytes", max_reserved_bytes), plain_segments)
        out = ctypes.c_void_p()
        _check(_c.cpool_pool_create(device._handle("Pool"), ctypes.byref(opts), ctypes.byref(out)))
        self._h = out.value
        self.device = device

    @classmethod
    def _retained(cls, h, device):
        self = cls.__new__(cls)
        _Handle.__init__(self)
        self._h = _c.cpool_pool_retain(h)
        if not self._h:
            raise Error(Status.ERR_INVALID_ARGUMENT, _last_error())
        self.device = device
        return self

    def seal(self):
        """From now on alloc raises cp.Error (CPOOL_ERR_SEALED)."""
        _c.cpool_pool_seal(self._handle("seal"))

    def unseal(self):
        _c.cpool_pool_unseal(self._handle("unseal"))

    @property
    def sealed(self):
        return bool(_c.cpool_pool_is_sealed(self._handle("sealed")))

    @property
    def grows_in_place(self):
        return bool(_c.cpool_pool_grows_in_place(self._handle("grows_in_place")))

    def record(self, obj):
        """Keeps obj alive until clear_buffers() or the pool's last reference
        (this object's or a graph's) goes; objects go in registration order.
        Returns obj's index among the recorded ones."""
        h = self._handle("record")
        key = next(_keys)
        _records[key] = obj
        index = ctypes.c_size_t()
        st = _c.cpool_pool_record(h, key, _DROP, ctypes.byref(index))
        if st != 0:
            _records.pop(key, None)
            _check(st)
        return index.value

    @property
    def buffer_count(self):
        """Objects recorded since creation or the last clear."""
        return _c.cpool_pool_buffer_count(self._handle("buffer_count"))

    def clear_buffers(self):
        """Drops the recorded objects once the device is done with them;
        graphs captured before become stale (launch raises CPOOL_ERR_STALE_GRAPH)."""
        _c.cpool_pool_clear_buffers(self._handle("clear_buffers"))

    def _alloc(self, fn, name, nbytes, stream):
        nbytes = _size("nbytes", nbytes)
        _expect("stream", stream, Stream)
        out = ctypes.c_void_p()
        _check(fn(self._handle(name), nbytes, stream._handle(name), ctypes.byref(out)))
        return out.value

    def alloc(self, nbytes, stream):
        """Allocates nbytes, stream ordered on `stream`; returns the address."""
        return self._alloc(_c.cpool_alloc, "alloc", nbytes, stream)

    def alloc_output(self, nbytes, stream):
        """alloc for a graph's output: packed with the pool's other outputs under capture."""
        return self._alloc(_c.cpool_alloc_output, "alloc_output", nbytes, stream)

    def free(self, ptr, stream):
        """Frees an address from alloc, stream ordered on `stream`."""
        ptr = _size("ptr", ptr)
        _expect("stream", stream, Stream)
        _check(_c.cpool_free(self._handle("free"), ptr or None, stream._handle("free")))

    def stats(self):
        """The pool's counters now (cp.PoolStats)."""
        c = _lib.PoolStatsC(ctypes.sizeof(_lib.PoolStatsC))
        _check(_c.cpool_pool_get_stats(self._handle("stats"), ctypes.byref(c)))
        return PoolStats(c)

    def trim(self):
        """Gives cached, unused memory back to the device."""
        h = self._handle("trim")
        _check(_c.cpool_pool_trim(h))

    def suspend(self, keep_contents=True):
        """Gives every page back, keeping the addresses (and, with
        keep_contents, the bytes of live blocks, in host memory)."""
        if not isinstance(keep_contents, bool):
            raise TypeError(f"keep_contents must be a bool, not {type(keep_contents).__name__}")
        h = self._handle("suspend")
        _check(_c.cpool_pool_suspend(h, 0 if keep_contents else 1))
        _suspended_pools.add(h)

    def resume(self):
        """Maps the memory back at the same addresses."""
        h = self._handle("resume")
        _check(_c.cpool_pool_resume(h))
        _suspended_pools.discard(h)

    @property
    def suspended(self):
        return bool(_c.cpool_pool_is_suspended(self._handle("suspended")))

    def write_snapshot(self, path):
        """Writes the pool's memory as JSON to path (docs/SNAPSHOT.md)."""
        path = os.fsencode(os.fspath(path))
        if b"\0" in path:
            raise ValueError("path must not contain a NUL byte")
        _check(_c.cpool_pool_write_snapshot(self._handle("write_snapshot"), path))

    def snapshot(self):
        """The pool's snapshot as a dict (write_snapshot to a temporary file, read back)."""
        fd, path = tempfile.mkstemp(suffix=".json", prefix="capturepool-")
        os.close(fd)
        try:
            self.write_snapshot(path)
            with open(path) as f:
                return json.load(f)
        finally:
            os.unlink(path)

    def release(self):
        """Drops this object's reference; the last one (graphs hold their own)
        waits for the device, drops the recorded objects and gives the
        memory back. A second call does nothing."""
        self._drop()

    close = release

    def _end(self, h):
        _c.cpool_pool_release(h)


# ---- capture and graphs -----------------------------------------------------
_MODES = {"global": 0, "thread_local": 1, "relaxed": 2}


def _mode(mode):
    """A capture mode's C value."""
    if not isinstance(mode, str):
        raise TypeError(f"mode must be a str, not {type(mode).__name__}")
    if mode not in _MODES:
        raise ValueError(f"mode must be one of 'global', 'thread_local', 'relaxed', not {mode!r}")
    return _MODES[mode]


class Graph(_Handle):
    """A launchable graph (from cp.capture); holds its pools."""

    def __init__(self, h, device):
        super().__init__()
        self._h = h
        self.device = device
        self._pool = None

    def launch(self, stream):
        """Launches the graph on `stream` (cp.Error CPOOL_ERR_STALE_GRAPH,
        CPOOL_ERR_SUSPENDED where it cannot run)."""
        _expect("stream", stream, Stream)
        _check(_c.cpool_graph_launch(self._handle("launch"), stream._handle("launch")))

    def upload(self, stream):
        _expect("stream", stream, Stream)
        _check(_c.cpool_graph_upload(self._handle("upload"), stream._handle("upload")))

    @property
    def replays(self):
        """Successful launches."""
        return _c.cpool_graph_replays(self._handle("replays"))

    @property
    def id(self):
        return _c.cpool_graph_id(self._handle("id"))

    @property
    def native(self):
        """The cudaGraphExec_t as an int; 0 on the host backend."""
        return _c.cpool_graph_native(self._handle("native")) or 0

    def stats(self):
        """The graph's share of its pools' memory (cp.GraphStats)."""
        c = _lib.GraphStatsC(ctypes.sizeof(_lib.GraphStatsC))
        _check(_c.cpool_graph_get_stats(self._handle("stats"), ctypes.byref(c)))
        return GraphStats(c)

    @property
    def pool(self):
        """The pool it was captured with, as a cp.Pool holding a reference of
        its own (the same object each time until released); None if none."""
        h = _c.cpool_graph_pool(self._handle("pool"))
        if not h:
            return None
        p = self._pool
        if p is None or p._h != h:
            p = self._pool = Pool._retained(h, self.device)
        return p

    def release(self):
        """Drops this object's reference; a second call does nothing."""
        self._drop()

    close = release

    def _end(self, h):
        _c.cpool_graph_release(h)


def capture_attach(stream, pool):
    """Serves a capture that someone else began on `stream` (a CUDA
    capture begun with the runtime, e.g. by torch.cuda.graph) from `pool`:
    allocations on the stream are that capture's graph memory until
    capture_detach (cpool_capture_attach). cp.Error: CPOOL_ERR_NOT_CAPTURING
    when the stream does not capture, CPOOL_ERR_ALREADY_CAPTURING when it is
    attached already or captures with capturepool (cp.capture)."""
    _expect("stream", stream, Stream)
    _expect("pool", pool, Pool)
    _check(_c.cpool_capture_attach(stream._handle("capture_attach"), pool._handle("capture_attach")))


def capture_detach(stream):
    """Ends capture_attach before the capture's owner ends it; returns a
    cp.Graph that holds the capture's memory and cannot be launched:
    release it only once the owner's graph is destroyed
    (cpool_capture_detach)."""
    _expect("stream", stream, Stream)
    out = ctypes.c_void_p()
    _check(_c.cpool_capture_detach(stream._handle("capture_detach"), ctypes.byref(out)))
    return Graph(out.value, stream.device)


class Capture:
    """cp.capture(stream, pool, mode): the work enqueued on the stream inside
    the with block is captured into .graph. An exception inside discards
    the capture and propagates."""

    def __init__(self, stream, pool=None, mode="global"):
        _expect("stream", stream, Stream)
        if pool is not None:
            _expect("pool", pool, Pool)
        _mode(mode)
        self.stream, self.pool, self.mode = stream, pool, mode
        self.graph = None
        self._keeper = None
        self._active = False

    def __enter__(self):
        if self._active or self.graph is not None:
            raise RuntimeError("a cp.capture object is used once")
        s = self.stream._handle("capture")
        p = self.pool._handle("capture") if self.pool is not None else None
        _check(_c.cpool_capture_begin(s, p, _MODES[self.mode]))
        self._active = True
        self.stream._capture = self
        return self

    def _keep(self, key):
        """Keeps host function `key` alive as long as the graph: recorded in
        a pool of the capture's own that the graph holds."""
        if self._keeper is None:
            keeper = Pool(self.stream.device)
            try:
                ptr = keeper.alloc(1, self.stream)  # under the capture: the graph now holds keeper
                keeper.free(ptr, self.stream)
            except BaseException:
                keeper.release()
                raise
            self._keeper = keeper
        h = self._keeper._handle()
        _check(_c.cpool_pool_record(h, key, _KEEPER_DROP, None))

    def __exit__(self, exc_type, exc, tb):
        self._active = False
        self.stream._capture = None
        keeper, self._keeper = self._keeper, None
        try:
            out = ctypes.c_void_p()
            st = _c.cpool_capture_end(self.stream._handle("capture"), ctypes.byref(out))
            if exc_type is not None:
                if st == 0:
                    _c.cpool_graph_release(out.value)  # never launched: discarded
                return False
            _check(st)
            self.graph = Graph(out.value, self.stream.device)
        finally:
            if keeper is not None:
                keeper.release()
        return False


def _keeper_trampoline(arg):
    _host_fns.pop(arg, None)


_KEEPER_DROP = _lib.DROP_FN(_keeper_trampoline)
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_KEEPER_DROP))


def capture(stream, pool=None, mode="global"):
    """Captures the work enqueued on `stream` in the with block into a
    graph (bound to `pool`, which may be None); the graph is .graph of the
    object it returns. mode: "global", "thread_local" or "relaxed"."""
    return Capture(stream, pool, mode)


# ---- graph cache ------------------------------------------------------------
# cpool_graph_cache_launch calls a C body on a miss and cpool_graph_cache's
# on_evict as graphs leave; both are trampolines made once and never freed,
# whose context argument is an integer key: a launch's key finds its body
# (for the length of the call), a cache's key finds its on_evict (until the
# C cache is destroyed, the last call that can run it).
class _CacheCall:
    """One GraphCache.launch: the body, the stream it captures on, what
    cp.launch_host under the capture keeps, and the body's exception."""
    __slots__ = ("body", "stream", "capture", "exc")

    def __init__(self, body, stream):
        self.body, self.stream = body, stream
        self.capture = _CacheCapture(stream)
        self.exc = None


class _CacheCapture:
    """What cp.launch_host finds on the stream (Stream._capture) while a
    GraphCache body captures: host functions are kept as long as the graph,
    as under cp.capture."""

    def __init__(self, stream):
        self.stream = stream
        self._keeper = None

    _keep = Capture._keep


class _CacheState:
    """What a C cache's on_evict needs: the callable and the device of the
    graphs it is handed."""
    __slots__ = ("on_evict", "device")

    def __init__(self, on_evict, device):
        self.on_evict, self.device = on_evict, device


_cache_calls = {}  # key -> _CacheCall, during GraphCache.launch
_caches = {}       # key -> _CacheState, until the C cache is destroyed


def _body_trampoline(s, ctx):
    call = _cache_calls.get(ctx)
    if call is None:
        return int(Status.ERR_INVALID_ARGUMENT)
    stream = call.stream
    prev, stream._capture = stream._capture, call.capture
    try:
        call.body(stream)
    except BaseException as e:
        # Any failing status discards the capture (nothing is kept or
        # counted); launch raises the exception itself.
        call.exc = e
        st = e.status if isinstance(e, Error) else 0
        return int(st) if st else int(Status.ERR_CAPTURE_INVALIDATED)
    finally:
        stream._capture = prev
    return 0


def _evict_trampoline(key, graph, user):
    state = _caches.get(user)
    if state is None or _state.finalizing:
        return
    fn = state.on_evict
    g = None
    try:
        h = _c.cpool_graph_retain(graph)
        if not h:
            raise Error(Status.ERR_INVALID_ARGUMENT, _last_error())
        g = Graph(h, state.device)
        fn(key, g)
    except BaseException:
        _report_unraisable(fn, "Exception ignored in a capturepool.GraphCache on_evict function")
    finally:
        del g, fn  # the graph's reference goes here unless on_evict kept it


_BODY = _lib.CAPTURE_FN(_body_trampoline)
_EVICT = _lib.EVICT_FN(_evict_trampoline)
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_BODY))
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_EVICT))


class GraphCacheStats(PoolStats):
    """A graph cache's counters: the fields of cpool_graph_cache_stats
    (graphs kept, hits, misses, evictions, and graph_bytes: the pool's
    graph_reserved_bytes now)."""
    __slots__ = _lib.GRAPH_CACHE_STATS_FIELDS

    def __repr__(self):
        return "GraphCacheStats(" + ", ".join(f"{k}={v}" for k, v in self.as_dict().items()) + ")"


def _cache_bounds(max_bytes, max_graphs, on_evict):
    """Checks a graph cache's bounds and on_evict (cp.GraphCache and
    capturepool.torch.TorchGraphCache); returns max_bytes as a size."""
    max_bytes = _size("max_bytes", max_bytes)
    if isinstance(max_graphs, bool) or not isinstance(max_graphs, int):
        raise TypeError(f"max_graphs must be an int, not {type(max_graphs).__name__}")
    if not 0 <= max_graphs < 1 << 32:
        raise ValueError(f"max_graphs must be in [0, 2**32), got {max_graphs}")
    if on_evict is not None and not callable(on_evict):
        raise TypeError(f"on_evict must be callable or None, not {type(on_evict).__name__}")
    return max_bytes


class GraphCache(_Handle):
    """Graphs of one pool kept by key (cpool_graph_cache_*): launch(key, ...)
    launches the key's graph, or captures body(stream) into the pool on a
    miss and keeps it; then the least recently launched other graphs are
    evicted until the pool's graph_reserved_bytes is at most max_bytes and
    at most max_graphs graphs are kept (0: no bound). A graph that alone
    needs more than max_bytes is kept alone.

    on_evict(key, graph) is called as a graph leaves the cache (evicted, or
    the cache closed), on the thread of the call that evicts, with a
    cp.Graph holding a reference of its own: the place to free the graph's
    outputs. An exception it raises goes to sys.unraisablehook.

    The cache holds a reference to the C pool until closed (close() calls
    on_evict for every graph kept); a context manager."""

    def __init__(self, pool, *, max_bytes=0, max_graphs=0, on_evict=None):
        super().__init__()
        self._user = None
        _expect("pool", pool, Pool)
        max_bytes = _cache_bounds(max_bytes, max_graphs, on_evict)
        h = pool._handle("GraphCache")
        user = next(_keys)
        opts = _lib.GraphCacheOptions(ctypes.sizeof(_lib.GraphCacheOptions), max_bytes, max_graphs,
                                      _EVICT if on_evict is not None else _lib.EVICT_FN(), user)
        _caches[user] = _CacheState(on_evict, pool.device)
        out = ctypes.c_void_p()
        st = _c.cpool_graph_cache_create(h, ctypes.byref(opts), ctypes.byref(out))
        if st != 0:
            _caches.pop(user, None)
            _check(st)
        self._h, self._user = out.value, user
        self.pool, self.device = pool, pool.device
        self.max_bytes, self.max_graphs = max_bytes, max_graphs

    def launch(self, key, stream, body, mode="global"):
        """Launches the graph kept under key (an int in [0, 2**64)) on
        stream; on a miss, first captures body(stream) on it (mode as
        cp.capture) and keeps it. Returns True for a hit, False for a miss.
        An exception raised by body discards the capture (nothing is kept,
        evicted or counted) and propagates; memory it allocated in the
        capture and did not free is the caller's, as after cp.capture."""
        key = _size("key", key)
        _expect("stream", stream, Stream)
        if not callable(body):
            raise TypeError(f"body must be callable, not {type(body).__name__}")
        m = _mode(mode)
        h = self._handle("launch")
        sh = stream._handle("launch")
        call = _CacheCall(body, stream)
        ctx = next(_keys)
        _cache_calls[ctx] = call
        hit = ctypes.c_bool(False)
        try:
            st = _c.cpool_graph_cache_launch(h, key, sh, m, _BODY, ctx, ctypes.byref(hit))
        finally:
            _cache_calls.pop(ctx, None)
            keeper = call.capture._keeper
            if keeper is not None:
                keeper.release()  # the graph holds it, if one was made
        exc, call.exc = call.exc, None
        if exc is not None:
            try:
                raise exc
            finally:
                del exc
        _check(st)
        return hit.value

    def get(self, key):
        """The graph kept under key as a cp.Graph with a reference of its own,
        or None. Not a launch: the order of eviction and the counters stay."""
        key = _size("key", key)
        out = ctypes.c_void_p()
        _check(_c.cpool_graph_cache_get(self._handle("get"), key, ctypes.byref(out)))
        return Graph(out.value, self.device) if out.value else None

    def evict(self, key):
        """Evicts the graph kept under key (on_evict, then the cache's
        reference goes); nothing where none is kept."""
        key = _size("key", key)
        _check(_c.cpool_graph_cache_evict(self._handle("evict"), key))

    def stats(self):
        """The cache's counters now (cp.GraphCacheStats)."""
        c = _lib.GraphCacheStatsC(ctypes.sizeof(_lib.GraphCacheStatsC))
        _check(_c.cpool_graph_cache_get_stats(self._handle("stats"), ctypes.byref(c)))
        return GraphCacheStats(c)

    def predict_bytes(self, scratch_bytes, output_bytes):
        """The pool's graph_reserved_bytes with one more graph that allocates
        output_bytes of outputs, then scratch_bytes of scratch it frees
        before its capture ends (cpool_graph_cache_predict_bytes)."""
        scratch_bytes = _size("scratch_bytes", scratch_bytes)
        output_bytes = _size("output_bytes", output_bytes)
        out = ctypes.c_uint64()
        _check(_c.cpool_graph_cache_predict_bytes(self._handle("predict_bytes"), scratch_bytes, output_bytes,
                                                  ctypes.byref(out)))
        return out.value

    def close(self):
        """Ends the cache: on_evict for every graph kept, then the cache's
        references (graphs, pool) go. A second call does nothing."""
        self._drop()

    def _end(self, h):
        try:
            _c.cpool_graph_cache_destroy(h)
        finally:
            _caches.pop(self._user, None)


# ---- stream work ------------------------------------------------------------
def memcpy_async(stream, dst, src, nbytes):
    """Stream-ordered copy of nbytes from address src to address dst."""
    _expect("stream", stream, Stream)
    dst, src, nbytes = _size("dst", dst), _size("src", src), _size("nbytes", nbytes)
    _check(_c.cpool_memcpy_async(stream._handle("memcpy_async"), dst or None, src or None, nbytes))


def memset_async(stream, dst, value, nbytes):
    """Stream-ordered fill of nbytes at address dst with the byte value."""
    _expect("stream", stream, Stream)
    dst, nbytes = _size("dst", dst), _size("nbytes", nbytes)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"value must be an int, not {type(value).__name__}")
    if not 0 <= value <= 255:
        raise ValueError(f"value must be a byte (0-255), got {value}")
    _check(_c.cpool_memset_async(stream._handle("memset_async"), dst or None, value, nbytes))


def launch_host(stream, fn):
    """Enqueues fn() on the stream. Under cp.capture it runs on every replay
    and is kept alive as long as the graph; an exception it raises goes to
    sys.unraisablehook."""
    _expect("stream", stream, Stream)
    if not callable(fn):
        raise TypeError(f"fn must be callable, not {type(fn).__name__}")
    h = stream._handle("launch_host")
    cap = stream._capture
    captured = cap is not None
    if not captured:
        state = ctypes.c_int()
        captured = _c.cpool_capture_status(h, ctypes.byref(state)) == 0 and state.value != 0
    key = next(_keys)
    _host_fns[key] = [fn, not captured]
    try:
        if cap is not None:
            cap._keep(key)
        elif captured:
            # A capture begun outside cp.capture (a fork, or CUDA's own):
            # its graph is not known here, so fn is kept for good.
            _forever.add(key)
        _check(_c.cpool_launch_host(h, _HOST, key))
    except BaseException:
        if cap is None:
            _host_fns.pop(key, None)
            _forever.discard(key)
        # else: the keeper's drop takes it out when the capture ends
        raise


def wait_deferred():
    """Waits until every teardown the library handed to its own thread has
    finished (drops of pools whose last reference a graph held)."""
    _c.cpool_wait_deferred()
