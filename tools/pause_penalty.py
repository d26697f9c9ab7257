"""What does a call cost right after a pause, on this machine? The first call after a few
milliseconds of other work, against a second call straight after it.

    python tools/pause_penalty.py [--pause-ms 5] [--rounds 200]

The bench pauses before every timed call (qsdpa._bench._settle: the cores kept busy, then a wait
for spinning thread pools), as a model's other layers would come between two attention calls. On
a machine whose caches keep their contents through a pause, the first call and the second take
the same time. On a VM whose private caches another tenant shares, they do not, and a short call
pays for every line of code and data it touches: the interpreter's, numpy's, pybind11's and the
kernel's. Printed per probe: median first call, median second call (µs).

Probes: a 50-iteration Python loop; np.add of 1000 floats; a sum over 64 KB; qsdpa's low-level
call on a 1-key llama3-8b decode (32 query / 8 KV heads, D 128) at 1 and at 2 threads (the second
also wakes the OpenMP worker, asleep after the pause).

On the Zen 4 VM of 2026-12-03 (docs/benchmarks-history.md), 5 ms pause: Python loop 14.5 / 1.5 us,
np.add 34 / 1.6, 64 KB sum 53 / 5.2, qsdpa 1 thread 58-67 / 4-8, 2 threads 104 / 16; a 4.2 MB
read from L3 (tools/decode_ideal_stream.cpp, layers=1) took 42 us back to back, 57 after 1 ms,
84 after 2 ms, 142 after 5 ms and 233 after 20 ms, as much as a read from memory.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from qsdpa import _bench, _dispatch, quantize_per_token


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pause-ms", type=float, default=5.0, help="busy pause before each first call")
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args(argv)

    module = _dispatch.load_variant(_dispatch.get_isa())
    rng = np.random.default_rng(0)
    k8, ks, kz = quantize_per_token(rng.standard_normal((1, 1, 8, 128), dtype=np.float32))
    v8, vs, vz = quantize_per_token(rng.standard_normal((1, 1, 8, 128), dtype=np.float32))
    q8, qs, qz = quantize_per_token(rng.standard_normal((1, 1, 32, 128), dtype=np.float32))
    out = np.empty(q8.shape, np.float32)
    a, b = np.ones(1000, np.float32), np.ones(1000, np.float32)
    buf = np.ones(16384, np.float32)

    def loop() -> int:
        s = 0
        for i in range(50):
            s += i
        return s

    def sdpa(threads: int):
        return lambda: module.quantized_sdpa(q8, qs, qz, k8, ks, kz, v8, vs, vz, None, 0, True, 128 ** -0.5, False,
                                             out, threads, 0)

    probes = {"python loop": loop, "np.add 1000": lambda: np.add(a, b), "sum 64 KB": buf.sum,
              "qsdpa 1-key t=1": sdpa(1), "qsdpa 1-key t=2": sdpa(2)}
    times = {name: ([], []) for name in probes}
    for fn in probes.values():
        fn()
    for _ in range(args.rounds):
        for name, fn in probes.items():
            _bench._settle(args.pause_ms * 1e-3, 2 if name.endswith("t=2") else 1)
            t0 = time.perf_counter()
            fn()
            t1 = time.perf_counter()
            fn()
            t2 = time.perf_counter()
            times[name][0].append(t1 - t0)
            times[name][1].append(t2 - t1)
    print(f"after a {args.pause_ms:g} ms busy pause, median of {args.rounds}: first call / second call")
    for name, (first, second) in times.items():
        print(f"  {name:18s} {statistics.median(first) * 1e6:8.1f} us  {statistics.median(second) * 1e6:8.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
