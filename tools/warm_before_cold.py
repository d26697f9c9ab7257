"""What a cold decode call pays for the bench's pause beyond its memory: the same cold call after
the pause, after the pause and a tiny call of the same shape, and back to back, in one process.

    python tools/warm_before_cold.py [--threads 1] [--ctx 2048] [--rounds 100]

llama3-8b decode (32 query / 8 KV heads, D 128) through the dispatched variant module's own entry
(no Python wrapper), on the bench's inputs (_Inputs: the cold layers of ctx + 1 keys spanning twice
the LLC, in rotation, so every timed call reads its layer from memory). The tiny call (64 keys, a
hot case of its own) runs the same
code on the same threads right before the timed call: whatever it recovers of the pause's cost is
the call's code, scratch and thread state, not its K and V. Modes interleaved round by round.

On the Zen 4 VM, 2026-12-07 (2048 keys, medians of 100, us, pause / pause + tiny / back to back):
1 thread 378.0 / 371.1 / 370.1 and 375.3 / 368.0 / 363.6; 2 threads 243.1 / 209.1 / 205.2 and
249.4 / 216.7 / 213.4 (8192 keys, 40 rounds: 804.7 / 786.5 / 781.4). At 1 thread the pause costs
the call ~8 us; at 2 threads 38 us, 34 of which a tiny call just before recovers: the OpenMP
worker asleep after the pause (the tiny call leaves it spinning). Those runs used 16 layers of
their own; on the bench's inputs, as now (60 rounds): 1 thread 377.2 / 372.2 / 368.3, 2 threads
227.9 / 200.6 / 199.2.
"""
from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np

from qsdpa import _bench, _dispatch
from qsdpa._bench import SETTLE_S, Case, ThreadClocks, _Inputs, _settle
from qsdpa._threads import set_num_threads


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--pause-ms", type=float, default=SETTLE_S * 1e3)
    args = ap.parse_args(argv)

    module = _dispatch.load_variant(_dispatch.get_isa())
    set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    llc = _bench.last_level_cache_bytes()
    cold = _Inputs(Case("llama3-8b", "decode", args.ctx, 1, args.threads, "cold"), rng, llc)
    tiny = _Inputs(Case("llama3-8b", "decode", 63, 1, args.threads, "hot"), rng, llc)
    scale = 1.0 / math.sqrt(cold.q8.shape[-1])

    def call(x: _Inputs, layer: int) -> None:
        k8, ks, kz, v8, vs, vz = x.layers[layer][:6]
        module.quantized_sdpa(x.q8, x.qs, x.qz, k8, ks, kz, v8, vs, vz, None, x.start_pos, True, scale, False, x.out,
                              args.threads, 0)

    n = cold.n_layers
    for layer in range(n):
        call(cold, layer)
    clocks = ThreadClocks()
    modes = ("pause", "pause + tiny", "back to back")
    times = {m: [] for m in modes}
    turn = 0
    for r in range(args.rounds):
        for mode in modes if r % 2 == 0 else modes[::-1]:
            if mode == "back to back":
                call(cold, (turn + n // 2) % n)  # another cold layer just before
            else:
                clocks.refresh()
                _settle(args.pause_ms * 1e-3, args.threads, clocks)
                if mode == "pause + tiny":
                    call(tiny, 0)
            t0 = time.perf_counter()
            call(cold, turn % n)
            times[mode].append(time.perf_counter() - t0)
            turn += 1
    print(f"llama3-8b decode, {args.ctx} keys, {args.threads} thread(s), cold, medians of {args.rounds} (us):")
    for mode in modes:
        print(f"  {mode:13s} {statistics.median(times[mode]) * 1e6:8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
