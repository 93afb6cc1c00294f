"""The allocator shim that capturepool.torch hands to PyTorch
(libcapturepool_torch.so, from python/bridge/capturepool_torch.c).

It has CPOOL_TORCH_SLOTS slots, each a pair of entry points
(cpool_torch_alloc_<n>, cpool_torch_free_<n>) with PyTorch's pluggable
allocator signatures, bound to one capture pool. Looked for at
$CAPTUREPOOL_TORCH_LIBRARY, then beside libcapturepool.so (the package
folder), then in a build tree's python/ folder. Loading it needs no torch.
"""
import ctypes
import os
import threading

from . import Error, Graph, Pool, Status, _lib
from ._lib import lib as _c

_lock = threading.Lock()
_shim = None
_taken = set()


def shim_path():
    env = os.environ.get("CAPTUREPOOL_TORCH_LIBRARY")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(_lib.path))
    for path in (os.path.join(here, "libcapturepool_torch.so"),
                 os.path.join(os.path.dirname(here), "python", "libcapturepool_torch.so")):
        if os.path.isfile(path):
            return path
    raise ImportError(f"capturepool: libcapturepool_torch.so is not beside {_lib.path}; "
                      "set CAPTUREPOOL_TORCH_LIBRARY to it")


def shim():
    """The loaded shim (ctypes), loaded once."""
    global _shim
    with _lock:
        if _shim is None:
            so = ctypes.CDLL(shim_path())
            so.cpool_torch_slot_count.restype = ctypes.c_int
            so.cpool_torch_bind.restype = ctypes.c_int
            so.cpool_torch_bind.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
            so.cpool_torch_unbind.restype = ctypes.c_uint64
            so.cpool_torch_unbind.argtypes = [ctypes.c_int]
            so.cpool_torch_slot_busy.restype = ctypes.c_bool
            so.cpool_torch_slot_busy.argtypes = [ctypes.c_int]
            so.cpool_torch_counts.restype = None
            so.cpool_torch_counts.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)]
            so.cpool_torch_attach.restype = ctypes.c_int
            so.cpool_torch_attach.argtypes = [ctypes.c_int, ctypes.c_void_p]
            so.cpool_torch_scratch.restype = ctypes.c_int
            so.cpool_torch_scratch.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
            so.cpool_torch_note_scratch.restype = ctypes.c_int
            so.cpool_torch_note_scratch.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                                    ctypes.c_size_t]
            so.cpool_torch_output.restype = ctypes.c_int
            so.cpool_torch_output.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p,
                                              ctypes.POINTER(ctypes.c_void_p)]
            so.cpool_torch_output_drop.restype = None
            so.cpool_torch_output_drop.argtypes = [ctypes.c_void_p]
            so.cpool_torch_detach.restype = ctypes.c_int
            so.cpool_torch_detach.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
            _shim = so
        return _shim


# DLPack's capsule: torch.from_dlpack takes a PyCapsule named "dltensor"
# holding a DLManagedTensor, and renames it once it owns the tensor.
_DLTENSOR = b"dltensor"
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype, _capsule_new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype, _capsule_valid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]


class Slot:
    """One slot of the shim bound to `pool` (a reference of the slot's own,
    held until torch gave every segment back after close())."""

    def __init__(self, pool, backend, ordinal):
        if not isinstance(pool, Pool):
            raise TypeError(f"pool must be a capturepool.Pool, not {type(pool).__name__}")
        so = shim()
        code = {"cuda": 1, "host": 2}[backend]
        with _lock:
            for n in range(so.cpool_torch_slot_count()):
                if n in _taken or so.cpool_torch_slot_busy(n):
                    continue
                st = so.cpool_torch_bind(n, pool._handle("Slot"), code, ordinal)
                if st != 0:
                    raise Error(st, f"cpool_torch_bind: slot {n} could not be bound")
                _taken.add(n)
                self.index = n
                break
            else:
                raise Error(Status.ERR_OUT_OF_MEMORY,
                            f"capturepool.torch: all {so.cpool_torch_slot_count()} allocator slots are in use "
                            "(close a TorchPool, and free its tensors, to give one back)")
        self.path = shim_path()
        self.alloc_name = f"cpool_torch_alloc_{self.index}"
        self.free_name = f"cpool_torch_free_{self.index}"
        self._so = so

    def entry(self, name):
        """An entry point as a ctypes function (for tests)."""
        fn = getattr(self._so, name)
        if name.startswith("cpool_torch_alloc_"):
            fn.restype, fn.argtypes = ctypes.c_void_p, [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        else:
            fn.restype, fn.argtypes = None, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        return fn

    def counts(self):
        """{'live', 'allocs', 'frees', 'failures', 'last_status'} of the slot."""
        c = (ctypes.c_uint64 * 5)()
        self._so.cpool_torch_counts(self.index, c)
        return dict(zip(("live", "allocs", "frees", "failures", "last_status"), list(c)))

    def attach(self, native):
        """Attaches the slot's pool to the capture running on the CUDA
        stream `native` (an int), through the cpool_stream the slot's
        allocations on it use (cpool_capture_attach)."""
        st = self._so.cpool_torch_attach(self.index, native or None)
        if st != 0:
            raise Error(st, f"cpool_torch_attach: {_c.cpool_last_error().decode()}")

    def scratch(self, native, ptr):
        """Frees segment `ptr` in the attached capture on `native`: it is
        scratch; torch's own free of it later is dropped."""
        st = self._so.cpool_torch_scratch(self.index, native or None, ptr)
        if st != 0:
            raise Error(st, f"cpool_torch_scratch: {_c.cpool_last_error().decode()}")

    def note_scratch(self, native, ptr, offset, nbytes):
        """Says that [offset, offset + nbytes) of segment `ptr`, which holds
        live tensors too, is scratch: its whole pages stay shared."""
        st = self._so.cpool_torch_note_scratch(self.index, native or None, ptr, offset, nbytes)
        if st != 0:
            raise Error(st, f"cpool_torch_note_scratch: {_c.cpool_last_error().decode()}")

    def output(self, nbytes, device, native, take):
        """Allocates nbytes for a graph's output on the CUDA stream `native`
        (cpool_torch_output: packed with other graphs' outputs under an
        attached capture) and returns take(capsule): the block as a DLPack
        capsule of nbytes uint8 whose deleter frees it. A capsule that take
        did not consume (it raised) is freed here."""
        dl = ctypes.c_void_p()
        st = self._so.cpool_torch_output(self.index, nbytes, device, native or None, ctypes.byref(dl))
        if st != 0:
            raise Error(st, f"cpool_torch_output: {_c.cpool_last_error().decode()}")
        capsule = None
        try:
            capsule = _capsule_new(dl.value, _DLTENSOR, None)
            return take(capsule)
        except BaseException:
            if capsule is None or _capsule_valid(capsule, _DLTENSOR):
                self._so.cpool_torch_output_drop(dl.value)
            raise

    def detach(self, native, device):
        """Detaches before torch ends the capture; returns the cp.Graph
        holding the graph's memory (cpool_capture_detach)."""
        out = ctypes.c_void_p()
        st = self._so.cpool_torch_detach(self.index, native or None, ctypes.byref(out))
        if st != 0:
            raise Error(st, f"cpool_torch_detach: {_c.cpool_last_error().decode()}")
        return Graph(out.value, device)

    def unbind(self):
        """Lets the slot go (with torch's last free); returns the segments torch still holds."""
        with _lock:
            if self.index not in _taken:
                return 0
            _taken.discard(self.index)
            return self._so.cpool_torch_unbind(self.index)
