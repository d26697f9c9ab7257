"""QuantizedKVCache.attend(..., out=out) allocates nothing per call, like quantized_sdpa's fast path:
every malloc in the child process is counted (tools/malloc_count) over 1000 calls, float32 and int8
queries, llama3-8b decode heads over a 512-token cache, 1 thread."""
from __future__ import annotations

import os
import subprocess
import sys

from test_allocations import ca, pytestmark  # noqa: F401  (the same skips: Linux, a C compiler, no qemu)

CHILD = """
import ctypes, sys, numpy as np, qsdpa
lib = ctypes.CDLL(sys.argv[1])                # the preloaded shim
lib.malloc_count_total.restype = ctypes.c_ulonglong
qsdpa.set_num_threads(1)
cache = qsdpa.QuantizedKVCache(1, 512, 8, 128)
rng = np.random.default_rng(0)
cache.update(0, rng.standard_normal((1, 512, 8, 128), dtype=np.float32),
             rng.standard_normal((1, 512, 8, 128), dtype=np.float32))
q = rng.standard_normal((1, 1, 32, 128), dtype=np.float32)
out = np.empty_like(q)
q8, qs, qz = qsdpa.quantize_per_token(q)
calls = {"float32": lambda: cache.attend(q, 511, out=out),
         "int8": lambda: cache.attend(q8, 511, q_scales=qs, q_zero_points=qz, out=out)}
for name, call in calls.items():
    for _ in range(50):
        call()
    lib.malloc_count_reset(); lib.malloc_count_enable(1)
    for _ in range(1000):
        call()
    lib.malloc_count_enable(0)
    print(name, lib.malloc_count_total())
lib.malloc_count_reset(); lib.malloc_count_enable(1); blob = bytearray(1 << 20); lib.malloc_count_enable(0)
print("control", lib.malloc_count_total())
"""


def test_attend_with_out_allocates_nothing(tmp_path):
    shim = ca.build_shim(str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", CHILD, shim], env={**os.environ, "LD_PRELOAD": shim},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    counts = dict(line.split() for line in proc.stdout.splitlines())
    assert int(counts["control"]) >= 1, "the shim counted nothing: LD_PRELOAD not in effect?"
    assert counts["float32"] == "0" and counts["int8"] == "0", counts
