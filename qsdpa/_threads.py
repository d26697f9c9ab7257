"""How many threads the attention kernels use.

The kernels run an OpenMP parallel region with an explicit thread count taken from here on every
call, so a setting made in one Python thread applies to calls from every thread (an
omp_set_num_threads() would only reach the thread that made it). The default is OpenMP's own
(``OMP_NUM_THREADS``, else the CPU count), read on first use.
"""
from __future__ import annotations

import operator
import threading
from typing import Optional

_lock = threading.Lock()
_num_threads: Optional[int] = None


def get_num_threads() -> int:
    """Threads the kernels use: the last ``set_num_threads`` value, else OpenMP's default."""
    global _num_threads
    if _num_threads is None:
        with _lock:
            if _num_threads is None:
                from . import _dispatch

                _num_threads = max(1, int(_dispatch.load_variant("scalar").omp_max_threads()))
    return _num_threads


def set_num_threads(n: int) -> None:
    """Use ``n`` (>= 1) threads in every later kernel call, from any Python thread."""
    global _num_threads
    try:
        value = operator.index(n)
    except TypeError:
        raise TypeError(f"n must be an int, got {type(n).__name__}") from None
    if isinstance(n, bool) or value < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    with _lock:
        _num_threads = value
