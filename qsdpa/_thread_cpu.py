"""CPU time of all of this process's threads, up to date when read (Linux; elsewhere approximate).

The bench reports how many threads each implementation kept busy during its timed calls (CPU time
over wall time). ``time.process_time()`` cannot say that for calls under a few milliseconds: it
adds up each thread's CPU time as the scheduler last accounted it, and a thread still running on
another core is brought up to date only at a scheduler tick or when it sleeps. A worker thread
that does half of a 300 us call and then spins or sleeps is accounted after the call's window has
closed, so the call looks single-threaded (measured: a 2-thread llama3-8b decode with 2048 keys,
5 ms busy-wait before each call, gave 1.04 from process_time() against 2.14 from these clocks; a
tight loop of the same calls keeps both cores busy, 1.98). A thread's own CPU clock, read from any
thread of the process, includes the time it has run since it was last accounted.
"""
from __future__ import annotations

import os
import threading
import time
from typing import List, Optional, Tuple, Union

_TASKS = "/proc/self/task"

Sample = Union[float, Tuple[Optional[int], ...]]  # process_time() seconds, or ns per listed thread


def _thread_clock_id(tid: int) -> int:
    """Linux's clock id for thread ``tid``'s CPU time: ~tid << 3 | CPUCLOCK_PERTHREAD (4) |
    CPUCLOCK_SCHED (2), as glibc's pthread_getcpuclockid builds it (Python has no call for a thread
    it did not start, such as an OpenMP worker)."""
    return (~tid << 3) | 6


class ThreadClocks:
    """The CPU clocks of the process's threads as listed by the last ``refresh()``.

    ``sample()`` reads them; ``elapsed(a, b)`` is the CPU time between two samples, over the threads
    that exist in both (a thread that ends in between is left out rather than subtracted). Threads
    started after a refresh are not counted until the next one; the kernel refuses the clock of a
    thread that is gone or belongs to another process, so a reused thread id is never misread.
    Without /proc/self/task (not Linux) it falls back to ``time.process_time()`` and ``exact`` is
    False."""

    def __init__(self) -> None:
        self._ids: Optional[List[int]] = None
        self.tids: Optional[List[int]] = None
        self.refresh()

    @property
    def exact(self) -> bool:
        return self._ids is not None

    def refresh(self) -> None:
        try:
            tids = [int(t) for t in os.listdir(_TASKS)]
            ids = [_thread_clock_id(t) for t in tids]
            # Listed is not enough: the clocks must be readable (this thread's own, which exists).
            time.clock_gettime_ns(_thread_clock_id(threading.get_native_id()))
        except (OSError, ValueError, AttributeError):
            self._ids = self.tids = None
            return
        self._ids, self.tids = ids, tids  # tids[i]'s clock is a sample's element i

    def sample(self) -> Sample:
        if self._ids is None:
            return time.process_time()
        out: List[Optional[int]] = []
        for cid in self._ids:
            try:
                out.append(time.clock_gettime_ns(cid))
            except OSError:  # the thread has ended
                out.append(None)
        return tuple(out)

    @staticmethod
    def elapsed(a: Sample, b: Sample) -> float:
        """CPU seconds from sample ``a`` to sample ``b`` (taken without a refresh in between)."""
        if isinstance(a, float) or isinstance(b, float):
            return float(b) - float(a)
        return sum(y - x for x, y in zip(a, b) if x is not None and y is not None) * 1e-9
