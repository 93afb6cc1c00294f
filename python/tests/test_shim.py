"""The PyTorch allocator shim (libcapturepool_torch.so) on the host backend:
its entry points called as torch calls them, without torch (one test takes
the outputs with torch where it is installed)."""
import ctypes
import gc

import pytest

import capturepool as cp
from capturepool import _shim


def test_slot_serves_the_pool(dev, stream):
    pool = cp.Pool(dev)
    slot = _shim.Slot(pool, "host", 0)
    alloc, free = slot.entry(slot.alloc_name), slot.entry(slot.free_name)
    ptrs = [alloc(2 << 20, 0, None) for _ in range(3)]
    assert all(ptrs) and len(set(ptrs)) == 3
    st = pool.stats()
    assert st.allocated_bytes == 6 << 20 and st.alloc_count == 3
    assert slot.counts()["live"] == 3
    free(ptrs[0], 2 << 20, 0, None)
    assert pool.stats().allocated_bytes == 4 << 20
    free(12345, 8, 0, None)  # not the pool's: counted as a failure, nothing else
    c = slot.counts()
    assert c["failures"] == 1 and c["last_status"] == cp.Status.ERR_INVALID_ARGUMENT
    pool.seal()
    assert alloc(1024, 0, None) is None  # torch reads NULL as out of memory
    pool.unseal()
    # Closing while torch holds segments: the slot keeps its pool reference.
    pool.release()
    assert slot.unbind() == 2
    assert _shim.shim().cpool_torch_slot_busy(slot.index)
    assert alloc(64, 0, None) is None  # no new segments once unbinding
    free(ptrs[1], 2 << 20, 0, None)
    free(ptrs[2], 2 << 20, 0, None)  # the last one lets the slot go
    assert not _shim.shim().cpool_torch_slot_busy(slot.index)
    assert slot.unbind() == 0


def test_slots_run_out_and_come_back(dev):
    pool = cp.Pool(dev)
    n = _shim.shim().cpool_torch_slot_count()
    slots = [_shim.Slot(pool, "host", 0) for _ in range(n)]
    assert len({s.index for s in slots}) == n
    with pytest.raises(cp.Error) as e:
        _shim.Slot(pool, "host", 0)
    assert e.value.name == "CPOOL_ERR_OUT_OF_MEMORY"
    for s in slots:
        s.unbind()
    s = _shim.Slot(pool, "host", 0)
    s.unbind()
    pool.release()
    with pytest.raises(TypeError):
        _shim.Slot(dev, "host", 0)


def test_slot_suspended_pool(dev):
    pool = cp.Pool(dev)
    slot = _shim.Slot(pool, "host", 0)
    alloc, free = slot.entry(slot.alloc_name), slot.entry(slot.free_name)
    p = alloc(4096, 0, None)
    pool.suspend()
    assert alloc(4096, 0, None) is None
    assert slot.counts()["last_status"] == cp.Status.ERR_SUSPENDED
    free(p, 4096, 0, None)  # frees work while suspended
    pool.resume()
    slot.unbind()
    pool.release()


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.c_void_p), ("byte_offset", ctypes.c_uint64)]


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype, _get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
_set_name = ctypes.pythonapi.PyCapsule_SetName
_set_name.restype, _set_name.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
_USED = b"used_dltensor"


def _consume(capsule):
    """What torch.from_dlpack does with the capsule: takes the tensor and
    renames the capsule; returns the DLManagedTensor's address."""
    dl = _get_pointer(capsule, b"dltensor")
    assert _set_name(capsule, _USED) == 0
    return dl


def test_outputs_are_dlpack_tensors_of_their_size(dev):
    pool = cp.Pool(dev)
    slot = _shim.Slot(pool, "host", 0)
    drop = _shim.shim().cpool_torch_output_drop
    dls = [slot.output(n, 0, None, _consume) for n in (1000, 24, 3 << 20)]
    for dl, n in zip(dls, (1000, 24, 3 << 20)):
        t = _DLTensor.from_address(dl)
        assert t.data and t.device_type == 1 and t.device_id == 0  # the host backend's memory: kDLCPU
        assert (t.ndim, t.code, t.bits, t.lanes, t.shape[0], t.strides, t.byte_offset) == (1, 1, 8, 1, n, None, 0)
        ctypes.memset(t.data, 0x5A, n)  # host memory, all of it the block's
    st = pool.stats()
    assert st.alloc_count == 3 and st.allocated_bytes >= 1024 + (3 << 20)
    assert slot.counts()["live"] == 3
    drop(dls.pop(0))  # torch's deleter, when the last tensor over the block goes
    held = pool.stats().allocated_bytes
    assert held < st.allocated_bytes and slot.counts()["live"] == 2

    def refuse(capsule):
        raise RuntimeError("no tensor")
    with pytest.raises(RuntimeError, match="no tensor"):
        slot.output(4096, 0, None, refuse)  # the capsule not taken: its block goes back
    assert pool.stats().allocated_bytes == held and slot.counts()["live"] == 2

    with pytest.raises(cp.Error) as e:
        slot.output(0, 0, None, _consume)
    assert e.value.status == cp.Status.ERR_INVALID_ARGUMENT
    pool.seal()
    with pytest.raises(cp.Error) as e:
        slot.output(64, 0, None, _consume)
    assert e.value.status == cp.Status.ERR_SEALED and "sealed" in str(e.value)
    pool.unseal()
    # Outputs keep the slot until their tensors go, as torch's segments do.
    pool.release()
    assert slot.unbind() == 2
    with pytest.raises(cp.Error):
        slot.output(64, 0, None, _consume)
    for dl in dls:
        drop(dl)
    assert not _shim.shim().cpool_torch_slot_busy(slot.index)


def test_torch_takes_outputs_and_frees_them_with_the_last_tensor(dev):
    """Where torch is installed: torch.from_dlpack takes the shim's capsule
    (on the host backend a CPU tensor over the block), views of it keep the
    block, and the last tensor's end frees it; made as TorchPool.output
    makes its outputs (a 0-d and an empty one included)."""
    torch = pytest.importorskip("torch")
    pool = cp.Pool(dev)
    slot = _shim.Slot(pool, "host", 0)
    for src in (torch.arange(24, dtype=torch.float32).reshape(2, 3, 4).to(torch.bfloat16), torch.tensor(3.5),
                torch.zeros(0, 256)):
        nbytes = src.numel() * src.element_size()
        raw = slot.output(max(nbytes, src.element_size()), 0, None, torch.from_dlpack)
        assert raw.dtype == torch.uint8 and raw.device.type == "cpu" and raw.shape == (max(nbytes, src.element_size()),)
        out = raw[:nbytes].view(src.dtype).view(src.shape)
        out.copy_(src)
        assert torch.equal(out, src)
        del raw
        gc.collect()
        assert slot.counts()["live"] == 1  # the view keeps the block
        del out
        gc.collect()
        assert slot.counts()["live"] == 0 and pool.stats().allocated_bytes == 0
    slot.unbind()
    pool.release()
