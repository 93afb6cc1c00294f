"""Fixtures for the package's tests: they run on the host backend (no GPU
needed), against $CAPTUREPOOL_LIBRARY where set (a build tree's library),
else the installed package's."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if os.environ.get("CAPTUREPOOL_LIBRARY") and os.path.join(ROOT, "python") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "python"))

import pytest  # noqa: E402

import capturepool as cp  # noqa: E402


@pytest.fixture
def dev():
    d = cp.Device("host")
    yield d
    d.close()


@pytest.fixture
def stream(dev):
    s = cp.Stream(dev)
    yield s
    s.destroy()


@pytest.fixture
def pool(dev):
    p = cp.Pool(dev)
    yield p
    p.release()
    cp.wait_deferred()
