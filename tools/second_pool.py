"""What a second libgomp pool in the process does to qsdpa's 2-thread decode.

libgomp keeps one thread pool per thread that enters a parallel region. Once it manages more
threads than there are CPUs (any other thread of the process has entered a 2-thread region: most
likely one of ExecuTorch's after its ops in the bench's process, a second Python thread calling
qsdpa), it spins only ~100 times before a futex sleep wherever a thread waits (its
gomp_throttled_spin_count_var), and a sleeping vCPU takes tens of microseconds to wake. Here the second pool is a Python thread that made
one 2-thread qsdpa call and stays alive; each measurement runs without it, then with it.

    python tools/second_pool.py scaling [--ctx 8192] [--rounds 40]
        qsdpa._bench.paired_scaling (the bench's thread-scaling procedure): time(t=1) / time(t=2)
        and the t=2 calls' threads busy (CPU / wall)
    python tools/second_pool.py ab B.so [--ctx 2048] [--pause-ms 5] [--calls 200]
        paired A/B of the installed variant (A) against a build of another revision (B, built with
        -DQSDPA_AB_SUFFIX as tools/ab_decode.py explains), hot llama3-8b decode at 2 threads, each
        timed call after the bench's pause (if any) and three untimed calls; outputs must match

On the Zen 4 VM of 2026-12-03 (docs/benchmarks-history.md), with OpenMP barriers in the kernel (ee91e74):
scaling 1.72-1.86 (threads busy 1.89-1.91) without a second pool, 1.72 and 1.56 (busy 1.79) with
one. A/B against that build of the spin-waits that replaced the barriers (6fbd5cb), barriers /
spin-waits: with a second pool 1.057 (8192 keys) and 1.21 (2048) back to back, 1.057 and 1.12 after
the pause; without one 0.995-1.02.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from typing import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ab_decode import load_b  # noqa: E402

from qsdpa import _bench, _dispatch, quantize_per_token, set_num_threads  # noqa: E402


def with_and_without_pool(measure: Callable[[str], None], make_call: Callable[[], None]) -> None:
    """measure("without a second pool"), then the same with a thread that ran a 2-thread call alive."""
    measure("without a second pool")
    release = threading.Event()

    def owner() -> None:
        set_num_threads(2)
        make_call()  # this thread's own 2-thread OpenMP region: a pool of its own, alive until it exits
        release.wait()

    t = threading.Thread(target=owner, daemon=True)
    t.start()
    time.sleep(0.3)
    try:
        measure("with a second pool   ")
    finally:
        release.set()
        t.join()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=("scaling", "ab"))
    ap.add_argument("b", nargs="?", help="ab: the B build's module (.so), named _kernels_<isa><suffix>")
    ap.add_argument("--ctx", type=int, default=None, help="cached tokens (default 8192 for scaling, 2048 for ab)")
    ap.add_argument("--rounds", type=int, default=40, help="scaling: rounds of paired_scaling")
    ap.add_argument("--calls", type=int, default=200, help="ab: timed calls of each build")
    ap.add_argument("--pause-ms", type=float, default=0.0, help="ab: the bench's busy pause before each call")
    args = ap.parse_args(argv)
    isa = _dispatch.get_isa()
    rng = np.random.default_rng(0)
    hq, hkv, d = 32, 8, 128
    ctx = args.ctx or (8192 if args.mode == "scaling" else 2048)
    s_kv = ctx + 1
    k8, ks, kz = quantize_per_token(rng.standard_normal((1, s_kv, hkv, d), dtype=np.float32))
    v8, vs, vz = quantize_per_token(rng.standard_normal((1, s_kv, hkv, d), dtype=np.float32))
    q8, qs, qz = quantize_per_token(rng.standard_normal((1, 1, hq, d), dtype=np.float32))
    builds = {"A": _dispatch.load_variant(isa)}
    if args.mode == "ab":
        if not args.b:
            ap.error("ab needs the B build's module")
        builds["B"] = load_b(args.b, isa)
    outs = {n: np.empty(q8.shape, np.float32) for n in builds}

    def call(name: str) -> None:
        builds[name].quantized_sdpa(q8, qs, qz, k8, ks, kz, v8, vs, vz, None, s_kv - 1, True, 1.0 / np.sqrt(d), False,
                                    outs[name], 2, 0)

    if args.mode == "scaling":
        def measure(tag: str) -> None:
            r = _bench.paired_scaling("decode", ctx, 2, args.rounds, 8.0, rng)
            print(f"{tag}: decode {ctx} t=1 / t=2 {r.t1_us:.0f} / {r.tn_us:.0f} us = {r.ratio:.2f}x, "
                  f"t=2 calls' threads busy {r.tn_cpu:.2f}", flush=True)
    else:
        def measure(tag: str) -> None:
            times = {n: [] for n in builds}
            for i in range(args.calls):
                for name in ("A", "B") if i % 2 == 0 else ("B", "A"):
                    if args.pause_ms:
                        _bench._settle(args.pause_ms * 1e-3, 2)
                    for _ in range(_bench.REWARM_CALLS):
                        call(name)
                    t0 = time.perf_counter()
                    call(name)
                    times[name].append(time.perf_counter() - t0)
            if not np.array_equal(outs["A"], outs["B"]):
                raise SystemExit("A and B give different outputs")
            ratio = statistics.median(b / a for a, b in zip(times["A"], times["B"]))
            print(f"{tag}: {isa} decode {ctx} t=2 pause {args.pause_ms:g} ms: A {statistics.median(times['A']) * 1e6:.0f} us, "
                  f"B {statistics.median(times['B']) * 1e6:.0f} us, B/A median of {args.calls} pairs {ratio:.3f}", flush=True)

    with_and_without_pool(measure, lambda: call("A"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
