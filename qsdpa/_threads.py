"""How many threads the attention kernels use.

The kernels run an OpenMP parallel region with an explicit thread count taken from here on every
call, so a setting made in one Python thread applies to calls from every thread (an
omp_set_num_threads() would only reach the thread that made it). The default is OpenMP's own
(``OMP_NUM_THREADS``, else the CPU count), read on first use.

fork(). libgomp keeps a pool of threads per thread that started a parallel region; after fork()
the child has a copy of the pool's bookkeeping but not its threads, and its next region of more
than one thread waits for them forever (1-thread regions, and the kernels' ``threads == 1`` paths,
never touch the pool). So a process forked (``os.fork``, multiprocessing's "fork" start method)
after a kernel call of this process, or of an ancestor, was handed more than one thread runs
every kernel call on 1 thread: ``get_num_threads()`` says 1, and ``set_num_threads(n > 1)`` is
clamped with a RuntimeWarning (once per process), as PyTorch's DataLoader workers simply call
``torch.set_num_threads(1)``. A process that never ran one (a server that imports qsdpa and then
forks its workers) keeps its threads, and so do its children. Only Python-level forks are seen
(``os.register_at_fork``); a fork() made by C code runs no Python handler.

Per-call cost: the kernel call sites read ``_num_threads`` (the C entry, csrc/public_entry.cpp,
reads the attribute itself) or call ``call_threads()``, which returns it when set. It holds an int
above 1 only once ``_parallel_ran`` is True, so no call site needs a check of its own: after import
or a ``set_num_threads(n > 1)`` in a process that has not yet run such a call, it is None, and the
next kernel call resolves it through ``call_threads()``, which records the multi-threaded call first.
"""
from __future__ import annotations

import operator
import os
import threading
import warnings
from typing import Optional

# Upper limit of set_num_threads. The kernels take a C int (2**31 - 1), but no Linux system can run
# more than PID_MAX_LIMIT = 2**22 tasks (threads count) at once, so a larger team can never be
# made: libgomp exits the process when it cannot create a thread. Far above any core count, so
# oversubscription stays the caller's choice.
MAX_THREADS = 2**22

_lock = threading.Lock()
_num_threads: Optional[int] = None   # what kernel calls use; None: resolved by the next call_threads()
_requested: Optional[int] = None     # the last set_num_threads(n); None: OpenMP's default
_default: Optional[int] = None       # OpenMP's default, read once
_parallel_ran = False                # a kernel call here (or in an ancestor, before fork) got > 1 threads
_forked_after_parallel = False       # this process was forked after that: every kernel call runs on 1 thread
_warned = False                      # the clamp's RuntimeWarning was given in this process

FORK_REASON = ("this process was forked (os.fork, or multiprocessing's 'fork' start method) after qsdpa had run a "
               "multi-threaded OpenMP call, and libgomp's threads do not survive fork(): more than 1 thread would "
               "hang")


def _setting_locked() -> int:
    """The count set_num_threads / OpenMP's default ask for (call with _lock held)."""
    global _default
    if _requested is not None:
        return _requested
    if _default is None:
        from . import _dispatch

        _default = max(1, min(MAX_THREADS, int(_dispatch.load_variant("scalar").omp_max_threads())))
    return _default


def get_num_threads() -> int:
    """Threads the kernels use: the last ``set_num_threads`` value, else OpenMP's default; 1 in a
    process forked after qsdpa ran a multi-threaded call (libgomp's threads do not survive fork)."""
    n = _num_threads
    if n is not None:
        return n
    with _lock:
        n = _num_threads
        return n if n is not None else _setting_locked()


def call_threads() -> int:
    """The thread count for a kernel call about to run (the kernel call sites' get_num_threads)."""
    global _num_threads, _parallel_ran
    n = _num_threads
    if n is not None:
        return n
    with _lock:
        n = _num_threads
        if n is None:
            n = _setting_locked()
            if n > 1:
                _parallel_ran = True  # before the call: a fork from here on must not use the pool
            _num_threads = n
        return n


def set_num_threads(n: int) -> None:
    """Use ``n`` threads (1 <= n <= 2**22) in every later kernel call, from any Python thread.

    In a process forked after qsdpa ran a multi-threaded call the kernels stay on 1 thread, and
    ``n > 1`` gives a RuntimeWarning (once): libgomp's threads do not survive fork(). Start such
    workers with multiprocessing's 'spawn' or 'forkserver' method to use more threads there."""
    global _num_threads, _requested, _warned
    try:
        value = operator.index(n)
    except TypeError:
        value = None
    if value is None or isinstance(n, bool):
        raise TypeError(f"n must be an int, got {type(n).__name__}")
    if not 1 <= value <= MAX_THREADS:
        shown = value if value.bit_length() <= 64 else f"an int of {value.bit_length()} bits"
        raise ValueError(f"n must be an int from 1 to {MAX_THREADS} (2**22, the most threads Linux can have), "
                         f"got {shown}")
    warn = False
    with _lock:
        _requested = value
        if _forked_after_parallel:
            _num_threads = 1
            if value > 1 and not _warned:
                warn = _warned = True
        else:
            # An unrecorded count above 1 waits for call_threads() to record the first such call.
            _num_threads = value if value == 1 or _parallel_ran else None
    if warn:
        warnings.warn(f"qsdpa.set_num_threads({value}): the kernels run on 1 thread: {FORK_REASON}; start workers "
                      f"with multiprocessing's 'spawn' or 'forkserver' method to use more", RuntimeWarning,
                      stacklevel=2)


def describe() -> str:
    """The thread count and where it comes from, for show_runtime()."""
    n = get_num_threads()
    with _lock:
        setting = _setting_locked()
        source = f"set_num_threads({_requested})" if _requested is not None else "OpenMP's default"
        if _forked_after_parallel:
            return f"{n}{'' if setting == 1 else f', not {setting}'} ({source}): {FORK_REASON}"
        if _parallel_ran:
            return f"{n} ({source}); a multi-threaded call has run: a process forked from here runs on 1 thread"
        return f"{n} ({source}); no multi-threaded call yet: a process forked from here keeps its threads"


def _after_fork_in_child() -> None:
    global _lock, _num_threads, _forked_after_parallel, _warned
    _lock = threading.Lock()  # another thread may have held it at fork(): it would stay locked here
    if _parallel_ran:  # inherited by grandchildren too: their libgomp state is the same copy
        _forked_after_parallel = True
        _num_threads = 1
        _warned = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
