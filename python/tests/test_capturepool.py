"""The package's promises on the host backend: names, errors, references,
capture, graphs, stream work, suspend and snapshots."""
import ctypes
import gc
import json
import os
import sys
import weakref

import pytest

import capturepool as cp


def read(addr, n):
    return ctypes.string_at(addr, n)


def test_version_and_library():
    assert cp.__version__.count(".") == 2
    assert all(part.isdigit() for part in cp.__version__.split("."))
    assert cp.library_path


def test_import_does_not_import_torch():
    import subprocess
    code = "import sys, capturepool; assert 'torch' not in sys.modules, 'torch imported'"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_error_fields(dev, stream, pool):
    pool.seal()
    with pytest.raises(cp.Error) as e:
        pool.alloc(64, stream)
    assert e.value.status == 3 and isinstance(e.value.status, int)
    assert e.value.name == "CPOOL_ERR_SEALED"
    assert str(e.value).startswith("cpool_alloc")  # cpool_last_error()'s text
    assert e.value.status == cp.Status.ERR_SEALED
    pool.unseal()
    assert not pool.sealed
    pool.free(pool.alloc(64, stream), stream)


def test_device(dev):
    assert dev.backend == "host"
    assert dev.ordinal == 0
    with cp.Device("host") as d2:
        assert d2.backend == "host"
    with pytest.raises(cp.Error):
        d2.backend
    d2.close()  # a second close does nothing


def test_device_arguments():
    with pytest.raises(ValueError):
        cp.Device("gpu")
    with pytest.raises(TypeError):
        cp.Device(1)
    with pytest.raises(TypeError):
        cp.Device("host", "0")
    with pytest.raises(ValueError):
        cp.Device("host", -1)
    with pytest.raises(cp.Error) as e:
        cp.Device("host", 3)
    assert e.value.name == "CPOOL_ERR_NO_DEVICE"


def test_stream(dev):
    s = cp.Stream(dev)
    assert s.native == 0
    s.synchronize()
    s.destroy()
    s.destroy()
    with pytest.raises(cp.Error) as e:
        s.synchronize()
    assert e.value.name == "CPOOL_ERR_INVALID_ARGUMENT"
    with pytest.raises(cp.Error) as e:
        cp.Stream.wrap(dev, 0)
    assert e.value.name == "CPOOL_ERR_UNSUPPORTED"
    with pytest.raises(TypeError):
        cp.Stream(None)
    with pytest.raises(TypeError):
        cp.Stream.wrap(dev, "stream")


def test_alloc_free_stats(dev, stream, pool):
    a = pool.alloc(1000, stream)
    assert a % 256 == 0
    cp.memset_async(stream, a, 0xAB, 1000)
    stream.synchronize()
    assert read(a, 1000) == b"\xab" * 1000
    st = pool.stats()
    assert st.allocated_bytes == 1000 and st.alloc_count == 1
    assert st.reserved_bytes >= 1000
    assert set(st.as_dict()) >= {"reserved_bytes", "graph_reserved_bytes", "segment_count", "host_kept_bytes"}
    b = pool.alloc_output(10, stream)
    pool.free(b, stream)
    pool.free(a, stream)
    with pytest.raises(cp.Error) as e:
        pool.free(a, stream)  # twice
    assert e.value.name == "CPOOL_ERR_INVALID_ARGUMENT"
    with pytest.raises(cp.Error) as e:
        pool.alloc(0, stream)
    assert e.value.name == "CPOOL_ERR_INVALID_ARGUMENT"
    assert pool.stats().allocated_bytes == 0
    pool.trim()
    assert pool.stats().reserved_bytes == 0


def test_argument_errors(dev, stream, pool):
    for bad in (-1, 1 << 64):
        with pytest.raises(ValueError):
            pool.alloc(bad, stream)
    for bad in ("1", 1.5, None, True):
        with pytest.raises(TypeError):
            pool.alloc(bad, stream)
    with pytest.raises(TypeError):
        pool.alloc(8, pool)
    with pytest.raises(TypeError):
        pool.free("0x10", stream)
    with pytest.raises(TypeError):
        cp.Pool(stream)
    with pytest.raises(TypeError):
        cp.Pool(dev, plain_segments=1)
    with pytest.raises(TypeError):
        cp.capture(pool)
    with pytest.raises(TypeError):
        cp.capture(stream, stream)
    with pytest.raises(ValueError):
        cp.capture(stream, pool, mode="local")
    with pytest.raises(TypeError):
        cp.launch_host(stream, 42)
    with pytest.raises(TypeError):
        cp.launch_host(None, print)
    with pytest.raises(ValueError):
        cp.memset_async(stream, 16, 256, 1)
    with pytest.raises(TypeError):
        cp.memcpy_async(stream, b"x", 0, 1)
    with pytest.raises(TypeError):
        pool.suspend(keep_contents="yes")
    with pytest.raises(ValueError):
        pool.write_snapshot("a\0b")
    with pytest.raises(cp.Error) as e:
        cp.memcpy_async(stream, 0, 0, 16)  # NULL pointers: the library's refusal
    assert e.value.name == "CPOOL_ERR_INVALID_ARGUMENT"


def test_release_twice_and_use_after(dev, stream):
    p = cp.Pool(dev)
    p.release()
    p.release()
    for call in (lambda: p.alloc(8, stream), lambda: p.stats(), lambda: p.seal(), lambda: p.record(1),
                 lambda: p.buffer_count, lambda: p.suspended, lambda: cp.capture(stream, p).__enter__()):
        with pytest.raises(cp.Error) as e:
            call()
        assert e.value.name == "CPOOL_ERR_INVALID_ARGUMENT"
    with cp.Pool(dev) as p2:
        pass
    assert p2.closed
    p2.release()


class Tracked:
    """An object that reports when it goes."""

    def __init__(self, name, log):
        self.name, self.log = name, log

    def __del__(self):
        self.log.append(self.name)


def test_record_keeps_alive_and_drops_in_order(dev):
    log = []
    p = cp.Pool(dev)
    assert [p.record(Tracked(i, log)) for i in range(5)] == [0, 1, 2, 3, 4]
    gc.collect()
    assert log == [] and p.buffer_count == 5
    p.release()
    assert log == [0, 1, 2, 3, 4]


def test_clear_buffers(dev, pool):
    log = []
    for i in range(3):
        pool.record(Tracked(i, log))
    pool.clear_buffers()
    assert log == [0, 1, 2] and pool.buffer_count == 0
    assert pool.record(Tracked(9, log)) == 0


def test_graph_keeps_pool_alive(dev, stream):
    log = []
    p = cp.Pool(dev)
    p.record(Tracked("a", log))
    p.record(Tracked("b", log))
    with cp.capture(stream, p) as c:
        x = p.alloc(256, stream)
        cp.memset_async(stream, x, 5, 256)
    g = c.graph
    p.release()
    with pytest.raises(cp.Error):
        p.stats()
    assert log == []
    g.launch(stream)
    stream.synchronize()
    assert read(x, 256) == b"\x05" * 256
    gp = g.pool
    assert gp is g.pool and gp.buffer_count == 2
    gp.release()
    gp.release()
    assert g.replays == 1 and g.id > 0
    g.upload(stream)
    g.release()
    cp.wait_deferred()
    assert log == ["a", "b"]
    with pytest.raises(cp.Error):
        g.launch(stream)
    g.release()


def test_capture_exception_discards_and_propagates(dev, stream, pool):
    log = []
    with pytest.raises(KeyError):
        with cp.capture(stream, pool) as c:
            pool.alloc(128, stream)
            cp.launch_host(stream, lambda: log.append("ran"))
            raise KeyError("inside")
    assert c.graph is None
    # The stream is usable and not capturing.
    with cp.capture(stream, pool) as c2:
        cp.memset_async(stream, pool.alloc(64, stream), 1, 64)
    c2.graph.launch(stream)
    stream.synchronize()
    c2.graph.release()


def test_capture_error_from_library(dev, stream, pool):
    with pytest.raises(cp.Error) as e:
        with cp.capture(stream, pool):
            with cp.capture(stream, pool):
                pass
    assert e.value.name == "CPOOL_ERR_ALREADY_CAPTURING"
    with pytest.raises(cp.Error) as e:
        with cp.capture(stream, pool):
            stream.synchronize()  # breaks the capture
    assert e.value.name == "CPOOL_ERR_CAPTURE_INVALIDATED"
    with cp.capture(stream, pool, mode="relaxed") as c:
        pass
    c.graph.launch(stream)
    c.graph.release()


def test_memcpy_and_outputs(dev, stream, pool):
    src = (ctypes.c_ubyte * 512)(*range(256), *range(256))
    with cp.capture(stream, pool, mode="thread_local") as c:
        out = pool.alloc_output(512, stream)
        cp.memcpy_async(stream, out, ctypes.addressof(src), 512)
    g = c.graph
    for _ in range(3):
        g.launch(stream)
    stream.synchronize()
    assert read(out, 512) == bytes(src)
    st = g.stats()
    assert st.live_outputs == 1 and st.live_output_bytes >= 512 and st.pool_count >= 1
    pool.free(out, stream)
    g.release()


def test_launch_host_eager_and_captured(dev, stream, pool):
    calls = []
    cp.launch_host(stream, lambda: calls.append("eager"))
    stream.synchronize()
    assert calls == ["eager"]

    class Fn:
        def __call__(self):
            calls.append("replay")
    fn = Fn()
    ref = weakref.ref(fn)
    with cp.capture(stream, pool) as c:
        cp.launch_host(stream, fn)
    del fn
    gc.collect()
    assert ref() is not None  # kept by the graph
    g = c.graph
    for _ in range(4):
        g.launch(stream)
    stream.synchronize()
    assert calls.count("replay") == 4
    assert pool.buffer_count == 0  # the graph's hold on fn is not a record of the pool
    g.release()
    cp.wait_deferred()
    gc.collect()
    assert ref() is None


def test_launch_host_exception_goes_to_unraisablehook(dev, stream, monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda args: seen.append((args.exc_type, args.object)))

    def boom():
        raise ValueError("boom")
    cp.launch_host(stream, boom)
    cp.launch_host(stream, lambda: seen.append("after"))
    stream.synchronize()
    assert seen == [(ValueError, boom), "after"]


def test_captured_exceptions_every_replay(dev, stream, pool, monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda args: seen.append(args.exc_type))
    with cp.capture(stream, pool) as c:
        cp.launch_host(stream, lambda: 1 / 0)
    for _ in range(3):
        c.graph.launch(stream)
    stream.synchronize()
    assert seen == [ZeroDivisionError] * 3
    c.graph.release()


def test_drop_exception_goes_to_unraisablehook(dev, monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda args: seen.append(args.exc_type))

    class Bad:
        def __del__(self):
            raise RuntimeError("in drop")
    p = cp.Pool(dev)
    p.record(Bad())
    log = []
    p.record(Tracked("next", log))
    p.release()
    assert seen == [RuntimeError] and log == ["next"]


def test_stale_graph(dev, stream, pool):
    pool.record(object())
    with cp.capture(stream, pool) as c:
        pass
    pool.clear_buffers()
    with pytest.raises(cp.Error) as e:
        c.graph.launch(stream)
    assert e.value.name == "CPOOL_ERR_STALE_GRAPH"
    c.graph.release()


def test_suspend_resume(dev, stream, pool):
    a = pool.alloc(4096, stream)
    cp.memset_async(stream, a, 0x5A, 4096)
    with cp.capture(stream, pool) as c:
        out = pool.alloc_output(64, stream)
        cp.memset_async(stream, out, 0x11, 64)
    g = c.graph
    g.launch(stream)
    stream.synchronize()
    pool.suspend()
    assert pool.suspended
    pool.suspend()  # again: nothing changes
    st = pool.stats()
    assert st.reserved_bytes == 0 and st.host_kept_bytes > 0
    for call in (lambda: g.launch(stream), lambda: pool.alloc(8, stream)):
        with pytest.raises(cp.Error) as e:
            call()
        assert e.value.name == "CPOOL_ERR_SUSPENDED"
    pool.resume()
    assert not pool.suspended
    assert read(a, 4096) == b"\x5a" * 4096
    assert read(out, 64) == b"\x11" * 64
    g.launch(stream)
    stream.synchronize()
    pool.suspend(keep_contents=False)
    assert pool.stats().host_kept_bytes == 0
    pool.resume()
    g.release()


def test_plain_segments_refuse_suspend(dev):
    with cp.Pool(dev, plain_segments=True, reserve_bytes=1 << 20) as p:
        assert not p.grows_in_place
        assert p.stats().reserved_bytes >= 1 << 20
        with pytest.raises(cp.Error) as e:
            p.suspend()
        assert e.value.name == "CPOOL_ERR_UNSUPPORTED"


def test_max_reserved_bytes(dev, stream):
    with cp.Pool(dev, max_reserved_bytes=4 << 20) as p:
        with pytest.raises(cp.Error) as e:
            p.alloc(64 << 20, stream)
        assert e.value.name == "CPOOL_ERR_OUT_OF_MEMORY"


def test_snapshot(dev, stream, pool, tmp_path):
    a = pool.alloc(1000, stream)
    snap = pool.snapshot()
    assert snap["stats"]["allocated_bytes"] == 1000
    assert {"segments", "graphs", "stats"} <= set(snap)
    path = tmp_path / "s.json"
    pool.write_snapshot(path)
    assert json.loads(path.read_text())["stats"]["allocated_bytes"] == 1000
    with pytest.raises(cp.Error) as e:
        pool.write_snapshot(tmp_path / "no" / "such" / "dir.json")
    assert e.value.name == "CPOOL_ERR_IO"
    pool.free(a, stream)


def test_graph_arguments(dev, stream, pool):
    with cp.capture(stream, pool) as c:
        pass
    g = c.graph
    with pytest.raises(TypeError):
        g.launch(pool)
    with pytest.raises(TypeError):
        g.upload("s")
    with g:
        g.launch(stream)
    assert g.closed
    with pytest.raises(cp.Error):
        g.replays
    with cp.capture(stream) as c:  # no pool
        pass
    assert c.graph.pool is None
    c.graph.release()


def test_capture_attach_refusals(dev, stream, pool):
    # On the host backend a stream captures only through capturepool, whose
    # captures need no attach: the attach is reached from C there
    # (tests/test_attach.c); here, what it refuses.
    with pytest.raises(cp.Error) as e:
        cp.capture_attach(stream, pool)
    assert e.value.status == cp.Status.ERR_NOT_CAPTURING
    with pytest.raises(cp.Error) as e:
        cp.capture_detach(stream)
    assert e.value.status == cp.Status.ERR_NOT_CAPTURING
    with cp.capture(stream, pool) as c:
        with pytest.raises(cp.Error) as e:
            cp.capture_attach(stream, pool)
        assert e.value.status == cp.Status.ERR_ALREADY_CAPTURING
        with pytest.raises(cp.Error) as e:
            cp.capture_detach(stream)
        assert e.value.status == cp.Status.ERR_INVALID_ARGUMENT
    c.graph.release()
    with pytest.raises(TypeError):
        cp.capture_attach(stream, None)
