"""QuantizedKVCache allocates nothing per decode call, like quantized_sdpa's fast path: every malloc
in a child process is counted (tools/malloc_count) over 1000 calls at 1 thread, for
``attend(..., out=out)`` (float32 and int8 queries, llama3-8b decode heads over a 512-token cache)
and for a one-token ``update`` (contiguous and sliced inputs: its stride and alias checks copy only
an input it cannot read in place or one that shares memory with the cache)."""
from __future__ import annotations

import os
import subprocess
import sys

from test_allocations import ca, pytestmark  # noqa: F401  (the same skips: Linux, a C compiler, no qemu)

PRELUDE = """
import ctypes, sys, numpy as np, qsdpa
lib = ctypes.CDLL(sys.argv[1])                # the preloaded shim
lib.malloc_count_total.restype = ctypes.c_ulonglong
qsdpa.set_num_threads(1)
rng = np.random.default_rng(0)

def counted(call):
    for _ in range(50):                       # warm-up: the arena and every cache are sized
        call()
    lib.malloc_count_reset(); lib.malloc_count_enable(1)
    for _ in range(1000):
        call()
    lib.malloc_count_enable(0)
    return lib.malloc_count_total()

def control():
    lib.malloc_count_reset(); lib.malloc_count_enable(1); blob = bytearray(1 << 20); lib.malloc_count_enable(0)
    return lib.malloc_count_total()
"""

ATTEND = PRELUDE + """
cache = qsdpa.QuantizedKVCache(1, 512, 8, 128)
cache.update(0, rng.standard_normal((1, 512, 8, 128), dtype=np.float32),
             rng.standard_normal((1, 512, 8, 128), dtype=np.float32))
q = rng.standard_normal((1, 1, 32, 128), dtype=np.float32)
out = np.empty_like(q)
q8, qs, qz = qsdpa.quantize_per_token(q)
print("float32", counted(lambda: cache.attend(q, 511, out=out)))
print("int8", counted(lambda: cache.attend(q8, 511, q_scales=qs, q_zero_points=qz, out=out)))
print("control", control())
"""

UPDATE = PRELUDE + """
for layout in ("bshd", "bhsd"):
    cache = qsdpa.QuantizedKVCache(1, 64, 8, 128, layout=layout)
    shape = (1, 1, 8, 128) if layout == "bshd" else (1, 8, 1, 128)
    k, v = (rng.standard_normal(shape, dtype=np.float32) for _ in range(2))
    wide = rng.standard_normal((1, 8, 8, 128), dtype=np.float32)   # a slice of it: strided for bhsd
    k_slice = wide[:, 3:4] if layout == "bshd" else wide[:, :, 3:4]
    cache.update(0, *(np.zeros((1, 5, 8, 128) if layout == "bshd" else (1, 8, 5, 128), np.float32),) * 2)
    print(layout + "-contiguous", counted(lambda: cache.update(5, k, v)))
    print(layout + "-slice", counted(lambda: cache.update(5, k_slice, v)))
# The kernel binding alone, as update calls it (a check-only pass, then two writing passes).
m, x = qsdpa._dispatch.selection().module, k.reshape(1, 8, 128)
outs = (np.zeros((1, 8, 128), np.int8), np.zeros((1, 8, 1), np.float32), np.zeros((1, 8, 1), np.int8))
print("kernel", counted(lambda: (m.quantize_rows(x, None, None, None, 1, True), m.quantize_rows(x, *outs, 1, False),
                                 m.quantize_rows(x, *outs, 1, False))))
print("control", control())
"""


def _counts(tmp_path, child):
    shim = ca.build_shim(str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", child, shim], env={**os.environ, "LD_PRELOAD": shim},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    counts = dict(line.split() for line in proc.stdout.splitlines())
    assert int(counts.pop("control")) >= 1, "the shim counted nothing: LD_PRELOAD not in effect?"
    return counts


def test_attend_with_out_allocates_nothing(tmp_path):
    counts = _counts(tmp_path, ATTEND)
    assert counts == {"float32": "0", "int8": "0"}, counts


def test_update_of_a_non_aliased_input_allocates_nothing(tmp_path):
    counts = _counts(tmp_path, UPDATE)
    # The quantize binding itself: pybind11 stores up to 6 call arguments inline, so a 7th would
    # make every call allocate.
    assert counts.pop("kernel") == "0", "the quantize kernel binding allocates per call"
    # update's Python layer (argument, stride and alias checks) adds nothing to its kernel calls.
    assert set(counts.values()) == {"0"} and len(counts) == 4, counts
