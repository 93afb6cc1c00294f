"""Loading libcapturepool and declaring its functions for ctypes.

The library is looked for, in order, at $CAPTUREPOOL_LIBRARY (a path to a
libcapturepool.so, e.g. in a build tree) and in this package's folder, where
`pip install .` puts the one it built. Every prototype is declared here, so
that ctypes converts and checks arguments instead of guessing.
"""
import ctypes
import os

_HERE = os.path.dirname(os.path.abspath(__file__))
_NAMES = ("libcapturepool.so.0", "libcapturepool.so")


def _find_library():
    env = os.environ.get("CAPTUREPOOL_LIBRARY")
    if env:
        if not os.path.isfile(env):
            raise ImportError(f"capturepool: CAPTUREPOOL_LIBRARY={env!r} is not a file")
        return env
    for name in _NAMES:
        path = os.path.join(_HERE, name)
        if os.path.isfile(path):
            return path
    raise ImportError(
        "capturepool: libcapturepool.so is not in the package folder "
        f"({_HERE}); install the package with `pip install .` or set "
        "CAPTUREPOOL_LIBRARY to a built libcapturepool.so")


path = _find_library()
# CDLL (not PyDLL): every call releases the GIL, so the library's own
# threads can run Python callbacks (drops, host functions) meanwhile.
lib = ctypes.CDLL(path)

c_void_p = ctypes.c_void_p
c_int = ctypes.c_int
c_size_t = ctypes.c_size_t
c_bool = ctypes.c_bool
c_uint64 = ctypes.c_uint64
status_t = ctypes.c_int

DROP_FN = ctypes.CFUNCTYPE(None, c_void_p)
HOST_FN = ctypes.CFUNCTYPE(None, c_void_p)
CAPTURE_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p)           # cpool_capture_fn
EVICT_FN = ctypes.CFUNCTYPE(None, c_uint64, c_void_p, c_void_p)    # cpool_graph_cache_evict_fn


class PoolOptions(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("reserve_bytes", c_uint64),
                ("max_reserved_bytes", c_uint64), ("plain_segments", c_bool)]


POOL_STATS_FIELDS = ("reserved_bytes", "reserved_bytes_peak", "allocated_bytes", "allocated_bytes_peak",
                     "graph_reserved_bytes", "alloc_count", "free_count", "segment_count", "cached_bytes",
                     "graph_count", "host_kept_bytes", "host_reserved_bytes")


class PoolStatsC(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t)] + [(n, c_uint64) for n in POOL_STATS_FIELDS]


GRAPH_STATS_FIELDS = ("write_bytes", "shared_write_bytes", "live_output_bytes", "live_outputs", "pool_count",
                      "own_bytes")


class GraphStatsC(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t)] + [(n, c_uint64) for n in GRAPH_STATS_FIELDS]


class GraphCacheOptions(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("max_bytes", c_uint64), ("max_graphs", ctypes.c_uint32),
                ("on_evict", EVICT_FN), ("user", c_void_p)]


GRAPH_CACHE_STATS_FIELDS = ("graphs", "hits", "misses", "evictions", "graph_bytes")


class GraphCacheStatsC(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t)] + [(n, c_uint64) for n in GRAPH_CACHE_STATS_FIELDS]


def _proto(name, restype, *argtypes):
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return fn


P = c_void_p
_proto("cpool_version_string", ctypes.c_char_p)
_proto("cpool_status_string", ctypes.c_char_p, c_int)
_proto("cpool_last_error", ctypes.c_char_p)
_proto("cpool_wait_deferred", None)
_proto("cpool_device_open", status_t, c_int, c_int, ctypes.POINTER(P))
_proto("cpool_device_close", None, P)
_proto("cpool_device_backend", c_int, P)
_proto("cpool_stream_create", status_t, P, ctypes.POINTER(P))
_proto("cpool_stream_wrap", status_t, P, P, ctypes.POINTER(P))
_proto("cpool_stream_native", P, P)
_proto("cpool_stream_synchronize", status_t, P)
_proto("cpool_stream_destroy", None, P)
_proto("cpool_launch_host", status_t, P, HOST_FN, P)
_proto("cpool_memcpy_async", status_t, P, P, P, c_size_t)
_proto("cpool_memset_async", status_t, P, P, c_int, c_size_t)
_proto("cpool_pool_create", status_t, P, ctypes.POINTER(PoolOptions), ctypes.POINTER(P))
_proto("cpool_pool_retain", P, P)
_proto("cpool_pool_release", None, P)
_proto("cpool_pool_seal", None, P)
_proto("cpool_pool_unseal", None, P)
_proto("cpool_pool_is_sealed", c_bool, P)
_proto("cpool_pool_grows_in_place", c_bool, P)
_proto("cpool_pool_record", status_t, P, P, DROP_FN, ctypes.POINTER(c_size_t))
_proto("cpool_pool_buffer_count", c_size_t, P)
_proto("cpool_pool_clear_buffers", None, P)
_proto("cpool_alloc", status_t, P, c_size_t, P, ctypes.POINTER(P))
_proto("cpool_alloc_output", status_t, P, c_size_t, P, ctypes.POINTER(P))
_proto("cpool_free", status_t, P, P, P)
_proto("cpool_pool_get_stats", status_t, P, ctypes.POINTER(PoolStatsC))
_proto("cpool_pool_trim", status_t, P)
_proto("cpool_pool_suspend", status_t, P, c_int)
_proto("cpool_pool_resume", status_t, P)
_proto("cpool_pool_is_suspended", c_bool, P)
_proto("cpool_pool_write_snapshot", status_t, P, ctypes.c_char_p)
_proto("cpool_capture_begin", status_t, P, P, c_int)
_proto("cpool_capture_end", status_t, P, ctypes.POINTER(P))
_proto("cpool_capture_status", status_t, P, ctypes.POINTER(c_int))
_proto("cpool_capture_attach", status_t, P, P)
_proto("cpool_capture_detach", status_t, P, ctypes.POINTER(P))
_proto("cpool_graph_launch", status_t, P, P)
_proto("cpool_graph_upload", status_t, P, P)
_proto("cpool_graph_id", c_uint64, P)
_proto("cpool_graph_replays", c_uint64, P)
_proto("cpool_graph_get_stats", status_t, P, ctypes.POINTER(GraphStatsC))
_proto("cpool_graph_pool", P, P)
_proto("cpool_graph_native", P, P)
_proto("cpool_graph_retain", P, P)
_proto("cpool_graph_release", None, P)
_proto("cpool_graph_cache_create", status_t, P, ctypes.POINTER(GraphCacheOptions), ctypes.POINTER(P))
_proto("cpool_graph_cache_destroy", None, P)
_proto("cpool_graph_cache_launch", status_t, P, c_uint64, P, c_int, CAPTURE_FN, P, ctypes.POINTER(c_bool))
_proto("cpool_graph_cache_get", status_t, P, c_uint64, ctypes.POINTER(P))
_proto("cpool_graph_cache_evict", status_t, P, c_uint64)
_proto("cpool_graph_cache_get_stats", status_t, P, ctypes.POINTER(GraphCacheStatsC))
_proto("cpool_graph_cache_predict_bytes", status_t, P, c_uint64, c_uint64, ctypes.POINTER(c_uint64))
