"""What a cold decode call pays for the bench's pause beyond its memory: the same cold call after
the pause, after the pause and a tiny call of the same shape, and back to back, in one process.

    python tools/warm_before_cold.py [--threads 1] [--ctx 2048] [--rounds 100]

llama3-8b decode (32 query / 8 KV heads, D 128) through the dispatched variant module's own entry
(no Python wrapper), on 16 layers of ctx + 1 keys in rotation, so every timed call reads a layer
last read 16 calls ago (from memory). The tiny call (64 keys, its own small cache) runs the same
code on the same threads right before the timed call: whatever it recovers of the pause's cost is
the call's code, scratch and thread state, not its K and V. Modes interleaved round by round.

On the Zen 4 VM, 2026-12-07 (2048 keys, medians of 100, us, pause / pause + tiny / back to back):
1 thread 378.0 / 371.1 / 370.1 and 375.3 / 368.0 / 363.6; 2 threads 243.1 / 209.1 / 205.2 and
249.4 / 216.7 / 213.4 (8192 keys, 40 rounds: 804.7 / 786.5 / 781.4). At 1 thread the pause costs
the call ~8 us; at 2 threads 38 us, 34 of which a tiny call just before recovers: the OpenMP
worker asleep after the pause (the tiny call leaves it spinning).
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from qsdpa import _bench, _dispatch, quantize_per_token


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--pause-ms", type=float, default=_bench.SETTLE_S * 1e3)
    args = ap.parse_args(argv)

    module = _dispatch.load_variant(_dispatch.get_isa())
    rng = np.random.default_rng(0)
    hq, hkv, d = 32, 8, 128

    def cache(keys: int):
        k = quantize_per_token(rng.standard_normal((1, keys, hkv, d), dtype=np.float32))
        v = quantize_per_token(rng.standard_normal((1, keys, hkv, d), dtype=np.float32))
        return _bench.on_huge_pages((*k, *v)), keys

    q8, qs, qz = quantize_per_token(rng.standard_normal((1, 1, hq, d), dtype=np.float32))
    layers = [cache(args.ctx + 1) for _ in range(16)]
    tiny = cache(64)
    out = np.empty(q8.shape, np.float32)
    scale = 1.0 / np.sqrt(d)

    def call(layer) -> None:
        (k, ks, kz, v, vs, vz), keys = layer
        module.quantized_sdpa(q8, qs, qz, k, ks, kz, v, vs, vz, None, keys - 1, True, scale, False, out, args.threads, 0)

    for layer in layers:
        call(layer)
    clocks = _bench.ThreadClocks()
    modes = ("pause", "pause + tiny", "back to back")
    times = {m: [] for m in modes}
    turn = 0
    for r in range(args.rounds):
        for mode in modes if r % 2 == 0 else modes[::-1]:
            if mode == "back to back":
                call(layers[(turn + 7) % len(layers)])  # another cold layer just before
            else:
                clocks.refresh()
                _bench._settle(args.pause_ms * 1e-3, args.threads, clocks)
                if mode == "pause + tiny":
                    call(tiny)
            t0 = time.perf_counter()
            call(layers[turn % len(layers)])
            times[mode].append(time.perf_counter() - t0)
            turn += 1
    print(f"llama3-8b decode, {args.ctx} keys, {args.threads} thread(s), cold, medians of {args.rounds} (us):")
    for mode in modes:
        print(f"  {mode:13s} {statistics.median(times[mode]) * 1e6:8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
