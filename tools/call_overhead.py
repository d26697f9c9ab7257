#!/usr/bin/env python3
"""Per-call time of qsdpa.quantized_sdpa(..., out=out) and how much of it is Python.

Two shapes, 1 thread, `out` given, positional qparams as a decode loop passes them:
  tiny    B=1, S_q=1, one head, D=8, one cached key: almost all of the time is call overhead;
  decode  llama3-8b decode (32 q / 8 kv heads, D=128, 2048 cached tokens).
For each: the public call, the variant module's C++ entry called directly with the same (already
checked) arguments, and the Python layer alone: the public call with the selected module swapped for
a no-op stub, minus the stub's own call cost (public - C++ entry says the same, but at the decode
shape the kernel's run-to-run noise swamps it). Times are the minimum over interleaved rounds of
the median over blocks of calls (per call), which holds up on a busy machine.

    python tools/call_overhead.py [--blocks 200] [--block 200] [--json]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time

import numpy as np

import qsdpa
from qsdpa import _dispatch


def _case(hq, hkv, d, tokens, seed=0):
    rng = np.random.default_rng(seed)
    q8, qs, qz = qsdpa.quantize_per_token(rng.standard_normal((1, 1, hq, d), dtype=np.float32))
    k8, ks, kz = qsdpa.quantize_per_token(rng.standard_normal((1, tokens, hkv, d), dtype=np.float32))
    v8, vs, vz = qsdpa.quantize_per_token(rng.standard_normal((1, tokens, hkv, d), dtype=np.float32))
    out = np.empty((1, 1, hq, d), np.float32)
    return (q8, k8, v8, tokens - 1, None, 0.0, True, None, qz, qs, kz, ks, vz, vs), out


def _median_per_call(fn, blocks, block):
    for _ in range(max(3, block // 10)):
        fn()
    times = []
    for _ in range(blocks):
        t0 = time.perf_counter_ns()
        for _ in range(block):
            fn()
        times.append((time.perf_counter_ns() - t0) / block)
    return statistics.median(times) / 1000.0  # microseconds


class _Stub:
    """Stands in for a variant module: the C++ entry, doing nothing."""

    @staticmethod
    def quantized_sdpa(*args):
        return None


def measure(blocks: int = 200, block: int = 200):
    qsdpa.set_num_threads(1)
    module = _dispatch.selection().module
    sdpa = qsdpa.quantized_sdpa
    results = {"variant": qsdpa.get_isa()}
    for name, shape, scale_blocks in (("tiny", (1, 1, 8, 1), 1), ("decode", (32, 8, 128, 2048), 20)):
        args, out = _case(*shape)
        q8, k8, v8, start, _, _, causal, _, qz, qs, kz, ks, vz, vs = args
        scale = 1.0 / np.sqrt(shape[2])
        nb, bl = max(5, blocks // scale_blocks), max(5, block // scale_blocks)

        def public():
            sdpa(*args, out=out)

        def direct():
            module.quantized_sdpa(q8, qs, qz, k8, ks, kz, v8, vs, vz, None, start, causal, scale, False, out, 1, 0)

        seventeen = tuple(range(17))

        def stub_alone():
            _Stub.quantized_sdpa(*seventeen)

        # Interleave so a burst of load on the machine hits all alike.
        pub, cpp, stubbed, stub = [], [], [], []
        selected = _dispatch.selection()
        for _ in range(3):
            pub.append(_median_per_call(public, nb, bl))
            cpp.append(_median_per_call(direct, nb, bl))
            _dispatch._selection = dataclasses.replace(selected, module=_Stub())
            try:
                stubbed.append(_median_per_call(public, blocks, block))
            finally:
                _dispatch._selection = selected
            stub.append(_median_per_call(stub_alone, blocks, block))
        results[name] = {"public_us": min(pub), "cpp_entry_us": min(cpp), "python_us": min(stubbed) - min(stub)}
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=200)
    ap.add_argument("--block", type=int, default=200)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    r = measure(args.blocks, args.block)
    if args.json:
        print(json.dumps(r))
        return 0
    print(f"variant {r['variant']}, 1 thread, out= given; median per call (best of 3 interleaved rounds)")
    for name in ("tiny", "decode"):
        x = r[name]
        print(f"  {name:>6}: public {x['public_us']:8.2f} us   C++ entry {x['cpp_entry_us']:8.2f} us   "
              f"Python layer (C++ stubbed) {x['python_us']:6.2f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
