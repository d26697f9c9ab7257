"""The bench's per-thread CPU clocks (qsdpa/_thread_cpu.py): which threads they read, and that a
window between two samples holds another thread's work even while that thread is still running."""
from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from qsdpa import _dispatch
from qsdpa._thread_cpu import ThreadClocks

# The worker's measured stretch: 2-4 ms natively. Under qemu-user TCG emulates each FMA in software
# (the test took 88 s there, the stretch and the worker's last 4x-long call), so a tenth as many
# steps: still about a second, far above the 20 us slack.
STEPS = 200_000 if os.environ.get("QSDPA_CI_PYTHON_WRAPPER") else 2_000_000
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread clocks: Linux")


def _probe():
    """A busy loop that releases the GIL (the FMA probe of the selected variant)."""
    return _dispatch.load_variant(_dispatch.get_isa())._fma_probe


class _Worker:
    """A thread that, once told to go, reads its own CPU clock (x0), spins in the probe for `steps`,
    reads it again (x1), says so, and keeps spinning until told to stop."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.started, self.go = threading.Event(), threading.Event()
        self.measured, self.stop = threading.Event(), threading.Event()
        self.x0 = self.x1 = 0
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        probe = _probe()
        self.started.set()
        self.go.wait()
        self.x0 = time.thread_time_ns()
        probe(self.steps)
        self.x1 = time.thread_time_ns()
        self.measured.set()
        while not self.stop.is_set():
            # Long calls: between two, the thread would take the GIL back and could block on it,
            # and a thread that blocks is accounted right then.
            probe(self.steps * 4)


@linux_only
def test_a_running_threads_work_is_in_the_window():
    # The worker's measured stretch [x0, x1] of its own clock lies inside the window of the two
    # samples (x0 after the first, x1 before the second), and the worker is still running when the
    # second is taken: what it has run since the scheduler last accounted it must be in the sample.
    w = _Worker(steps=STEPS)
    w.thread.start()
    try:
        w.started.wait()
        clocks = ThreadClocks()  # after the start: the worker is listed
        assert clocks.exact
        s0 = clocks.sample()
        w.go.set()
        w.measured.wait()
        s1 = clocks.sample()
    finally:
        w.stop.set()
        w.go.set()
        w.thread.join()
    assert w.x1 > w.x0
    # 20 us: read from another CPU, a running thread's clock may lag its own reading slightly.
    assert ThreadClocks.elapsed(s0, s1) * 1e9 >= (w.x1 - w.x0) - 20_000


@linux_only
def test_threads_that_end_are_left_out():
    done = threading.Event()
    t = threading.Thread(target=done.wait)
    t.start()
    clocks = ThreadClocks()
    i = clocks.tids.index(t.native_id)
    me = clocks.tids.index(threading.get_native_id())
    s0 = clocks.sample()
    assert s0[i] is not None and s0[me] is not None
    done.set()
    t.join()
    # join() returns when the thread's Python work is over; the OS thread goes a moment later.
    deadline = time.monotonic() + 5.0
    while str(t.native_id) in os.listdir("/proc/self/task") and time.monotonic() < deadline:
        time.sleep(0.001)
    s1 = clocks.sample()  # the ended thread's clock can no longer be read: None, not an error
    assert s1[i] is None and s1[me] >= s0[me]
    assert ThreadClocks.elapsed(s0, s1) >= 0.0
    clocks.refresh()
    assert t.native_id not in clocks.tids


def test_without_proc_it_falls_back_to_process_time(monkeypatch):
    import qsdpa._thread_cpu as mod

    def no_proc(path):
        raise FileNotFoundError(path)

    monkeypatch.setattr(mod.os, "listdir", no_proc)
    clocks = ThreadClocks()
    assert not clocks.exact
    a = clocks.sample()
    assert isinstance(a, float)
    sum(i * i for i in range(200_000))  # some CPU time on this thread
    assert ThreadClocks.elapsed(a, clocks.sample()) > 0.0
