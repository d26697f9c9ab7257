"""Where does a cold decode call's time go? qsdpa and the bandwidth floor, each after the bench's
pause and back to back, in one process.

    python tools/cold_decompose.py [--ctx 2048] [--threads 1] [--pause-ms 5] [--rounds 150] [--step]

The bench's cold rows (qsdpa._bench.run_case) time each call after its pause (_settle: a wait until
the process's thread pools stop spinning, then busy cores) on the next of the layers whose caches
span twice the LLC, and divide by the floor: a plain read of as many bytes, also after the pause
(FloorReads). This times, interleaved round by round on the bench's own
inputs (_Inputs: 2 MiB pages, one allocation per layer):
  qsdpa hot   the same layer every call       qsdpa cold  the next layer every call
  floor       the read probe on the next of the floor's buffers
  step hot / step cold   with --step: the bench's least-work step (StepProbe, prefetching into L1)
              on qsdpa hot's layer / the cold layers (the next one of the one rotation every
              call, never a layer another call has just read)
each both after the pause ("pause") and straight after the previous call of the same kind ("b2b").
hot b2b is the call's compute with its data in the caches; cold b2b - hot b2b, what the prefetches
leave of the memory time unhidden; pause - b2b, what the pause costs (on a VM whose neighbours
empty the caches meanwhile, it is paid by hot calls too).

On the Zen 4 VM of 2026-12-03 (docs/benchmarks-history.md), medians in us (hot pause / hot b2b / cold pause /
cold b2b / floor pause / floor b2b): 1 thread, 2048 keys 517 / 394 / 527 / 455 / 215 / 167 and
428 / 337 / 405 / 355 / 167 / 143; 8192 keys 1525 / 1425 / 1682 / 1631 / 667 / 628 and
1533 / 1453 / 1532 / 1500 / 625 / 624. 2 threads: 2048 keys 328 / 201 / 319 / 243 / 147 / 121 and
398 / 287 / 389 / 319 / 171 / 139; 8192 keys 1023 / 867 / 1005 / 894 / 557 / 526. At 1 thread
even a hot call back to back took 1.8-2.3x the floor after the pause: to meet the issue's 1.5x a
cold call after the pause would have to beat it. At 2 threads the hot call back to back was
1.4-1.7x (2048 keys) and 1.6x (8192), at the limit; what the cold call adds after the pause
(100-140 us) is what puts it at 2.2x and 1.8x.

With --step, 2026-12-07 (2048 keys; pause / b2b, us): 1 thread, qsdpa hot 421.2 / 309.9, step hot
328.8 / 260.7, qsdpa cold 414.0 / 379.3, step cold 360.8 / 331.6, floor 147.5 / 130.6: the
least-work step with its data in the caches and no pause took 1.77x the floor after the pause.
2 threads (80 rounds), qsdpa hot 329.4 / 213.5, step hot 294.4 / 176.4, qsdpa cold 322.4 / 249.6,
step cold 295.8 / 232.8, floor 156.4 / 124.1: the pause cost the step 63 us cold, the read 32.
Those "step cold" numbers are too low: the tool then kept a count per name, so the step read the
two layers qsdpa cold had just read, from L3. With one count (below), on the Intel Xeon VM of
2026-12-07 (2 MiB L2, 480 MiB L3 reported), 2048 keys, 1 thread, 40 rounds: qsdpa hot 400.1 / 301.8,
step hot 277.5 / 234.2, qsdpa cold 434.5 / 395.1, step cold 410.9 / 387.1 (362.0 / 313.4 with
the count per name, the same hour), floor 273.2 / 257.4.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from qsdpa import _bench
from qsdpa._bench import SETTLE_S, Case, FloorReads, StepProbe, ThreadClocks, _Inputs, _qsdpa_call, _settle
from qsdpa._threads import set_num_threads


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ctx", type=int, default=2048, help="cached tokens (llama3-8b decode)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--pause-ms", type=float, default=SETTLE_S * 1e3, help="busy pause before each 'pause' call")
    ap.add_argument("--rounds", type=int, default=150)
    ap.add_argument("--step", action="store_true", help="also the least-work step (StepProbe, L1 prefetch)")
    args = ap.parse_args(argv)

    set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    llc = _bench.last_level_cache_bytes()
    calls = {}
    for regime in ("hot", "cold"):
        x = _Inputs(Case("llama3-8b", "decode", args.ctx, 1, args.threads, regime), rng, llc)
        calls[f"qsdpa {regime}"] = (_qsdpa_call(x), x.n_layers)
        if args.step:
            calls[f"step {regime}"] = (StepProbe(x, args.threads, True), x.n_layers)
        if regime == "cold":
            calls["floor"] = (FloorReads(x.bytes_read, args.threads, llc), 1)
    times = {(name, mode): [] for name in calls for mode in ("pause", "b2b")}
    # One count over every call, as the bench's rotation: each cold call reads a layer no other call
    # read in the last n_layers calls. (A count per name, until 2026-12-07, had "step cold" read the
    # two layers qsdpa cold had just read, from L3 where it holds 8.7 MB.)
    turn = 0
    for fn, _ in calls.values():
        fn(0)
    clocks = ThreadClocks()
    for _ in range(args.rounds):
        for name, (fn, layers) in calls.items():
            for mode in ("pause", "b2b"):
                layer = turn % layers
                turn += 1
                if mode == "pause":  # as the bench pauses: a wait for spinning pools, then busy cores
                    clocks.refresh()
                    _settle(args.pause_ms * 1e-3, args.threads, clocks)
                t0 = time.perf_counter()
                fn(layer)
                times[(name, mode)].append(time.perf_counter() - t0)
    print(f"llama3-8b decode, {args.ctx} keys, {args.threads} thread(s), {args.pause_ms:g} ms pause, "
          f"median of {args.rounds} (us):")
    for (name, mode), t in times.items():
        print(f"  {name:11s} {mode:6s} {statistics.median(t) * 1e6:9.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
