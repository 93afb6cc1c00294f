"""The PyTorch allocator shim (libcapturepool_torch.so) without torch: its
entry points called as torch calls them, on the host backend."""
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
