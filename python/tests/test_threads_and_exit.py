"""Threads, callbacks on the library's threads, and interpreter exit with
work still pending."""
import os
import subprocess
import sys
import textwrap
import threading

import pytest

import capturepool as cp

HERE = os.path.dirname(os.path.abspath(__file__))


def test_threads_share_a_pool(dev, pool):
    errors = []

    def work():
        try:
            with cp.Stream(dev) as s:
                for i in range(200):
                    a = pool.alloc(64 + i, s)
                    cp.memset_async(s, a, i & 0xFF, 64 + i)
                    pool.free(a, s)
                s.synchronize()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    st = pool.stats()
    assert st.allocated_bytes == 0 and st.alloc_count == st.free_count == 1600


def test_concurrent_release_drops_once(dev):
    for _ in range(20):
        p = cp.Pool(dev)
        log = []
        p.record(log)
        barrier = threading.Barrier(6)

        def rel():
            barrier.wait()
            p.release()
        threads = [threading.Thread(target=rel) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert p.closed


def test_records_from_many_threads_dropped_in_order(dev):
    p = cp.Pool(dev)
    order = []
    lock = threading.Lock()

    class Obj:
        def __init__(self, i):
            self.i = i

        def __del__(self):
            order.append(self.i)

    indexes = {}

    def rec(k):
        for j in range(50):
            with lock:  # registration order = index order
                i = p.record(Obj(k * 100 + j))
                indexes[i] = k * 100 + j
    threads = [threading.Thread(target=rec, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    p.release()
    assert order == [indexes[i] for i in range(200)]


def test_graph_released_inside_its_callback(dev, stream):
    """The Python reference goes inside a host function. The graph's last
    reference goes there or as its launch call returns: the teardown never
    runs inside the stream's callback (it is handed to the library's thread
    there), and the drop runs Python once (taking the GIL), on whichever
    thread the teardown ran."""
    p = cp.Pool(dev)
    where = []
    in_callback = []

    class Obj:
        def __del__(self):
            where.append(threading.get_ident())

    def release_inside():
        in_callback.append(threading.get_ident())
        holder["g"].release()
    p.record(Obj())
    holder = {}
    with cp.capture(stream, p) as c:
        cp.launch_host(stream, release_inside)
    holder["g"] = c.graph
    p.release()
    c.graph.launch(stream)
    stream.synchronize()
    cp.wait_deferred()
    assert len(in_callback) == 1
    assert len(where) == 1 and where[0] != in_callback[0]


def test_launches_from_threads_with_callbacks(dev, pool):
    counts = []
    with cp.Stream(dev) as s0:
        with cp.capture(s0, pool) as c:
            cp.launch_host(s0, lambda: counts.append(1))
    g = c.graph

    def launcher():
        with cp.Stream(dev) as s:
            for _ in range(25):
                g.launch(s)
                s.synchronize()
    threads = [threading.Thread(target=launcher) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(counts) == 100 and g.replays == 100
    g.release()


def run_child(code):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                       timeout=120)
    return r


@pytest.mark.parametrize("case", ["pending_launches", "deferred_drop", "objects_left_alive"])
def test_exit_with_pending_work(case):
    code = """
        import capturepool as cp, time
        dev = cp.Device("host"); s = cp.Stream(dev); p = cp.Pool(dev)
        class Obj:
            def __del__(self): time.sleep(0.001)
        for i in range(50): p.record(Obj())
        with cp.capture(s, p) as c:
            cp.launch_host(s, lambda: time.sleep(0.0005))
        g = c.graph
        CASE = %r
        if CASE == "pending_launches":
            p.release()
            for i in range(200): g.launch(s)
            g.release()          # the pool's teardown waits for the launches
        elif CASE == "deferred_drop":
            holder = [g]
            p.release()
            with cp.capture(s) as c2:
                cp.launch_host(s, lambda: holder.pop().release() if holder else None)
            for i in range(20): g.launch(s)
            c2.graph.launch(s)   # the last reference goes inside a callback
        else:
            for i in range(100): g.launch(s)   # nothing released, nothing synchronized
        print("exiting")
    """ % case
    r = run_child(code)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "exiting" in r.stdout
    assert "Fatal" not in r.stderr and "Traceback" not in r.stderr, r.stderr
