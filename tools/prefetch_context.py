"""Does a cold decode call's prefetching depend on what ran before it? The bench's cold rotation
(its layers, its pause, its peers), with a chosen sequence of qsdpa calls under given prefetch
settings and least-work steps, each timed where it stands in the sequence.

    python tools/prefetch_context.py --ctx 8192 --threads 2 --rounds 50 \\
        --sequence step:L2 step:L2 step:L1 step:L2 [--no-peers]

Entries: `qsdpa:L1:4` (qsdpa with its decode blocks prefetching into L1, 4 eighths of the next
block's K during Q.K^T: the kernel's _set_prefetch_tuning; the setting is restored after each
call), `qsdpa` (the CPU's default tuning), `step:L1` / `step:L2` (the bench's StepProbe). Each
round runs the sequence, then the floor's read, then the installed peers (unless --no-peers), each
call after the bench's pause (_settle) on the next layer; medians and 10/25/75/90th percentiles.

On the Zen 4 VM of 2026-12-06 (docs/benchmarks-history.md, session of 17:56), 8192 keys, 2
threads, 50 rounds, floor 466 us: step:L2 1000.6 us first (after ExecuTorch's fp32 op), 632.8
and 630.1 after our own calls, step:L1 756.4; qsdpa:L2:8 right after the peers 1202-1214 us
against qsdpa:L1:4 840-869.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from qsdpa import _bench, _dispatch
from qsdpa._bench import SETTLE_S, Case, FloorReads, StepProbe, ThreadClocks, _Inputs, _qsdpa_call, _settle
from qsdpa._threads import set_num_threads


def entry(spec: str, x: _Inputs, threads: int):
    kind, *rest = spec.split(":")
    if kind == "step":
        return StepProbe(x, threads, rest == ["L1"])
    if kind != "qsdpa":
        raise SystemExit(f"unknown entry {spec!r}")
    call = _qsdpa_call(x)
    if not rest:
        return call
    mod = _dispatch.load_variant(_dispatch.get_isa())
    base = mod._prefetch_tuning()
    to_l1, eighths = rest[0] == "L1", int(rest[1]) if len(rest) > 1 else base["k_during_qk_eighths"]

    def tuned(layer: int):
        mod._set_prefetch_tuning(to_l1, base["walk_pages"], eighths)
        try:
            return call(layer)
        finally:
            mod._set_prefetch_tuning(base["to_l1"], base["walk_pages"], base["k_during_qk_eighths"])
    return tuned


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ctx", type=int, default=8192, help="cached tokens (llama3-8b decode)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--sequence", nargs="+", default=["step:L2", "step:L2", "step:L1", "step:L2"])
    ap.add_argument("--no-peers", action="store_true")
    args = ap.parse_args(argv)

    set_num_threads(args.threads)
    llc = _bench.last_level_cache_bytes()
    case = Case("llama3-8b", "decode", args.ctx, 1, args.threads, "cold")
    x = _Inputs(case, np.random.default_rng(0), llc)
    fns = [(f"{i} {spec}", entry(spec, x, args.threads)) for i, spec in enumerate(args.sequence)]
    fns.append(("floor", FloorReads(x.bytes_read, args.threads, llc)))
    if not args.no_peers:
        fns += [(n, f) for n, f in _bench._Peers().callables(case, x).items() if n != "qsdpa"]
    clocks = ThreadClocks()
    times = {name: [] for name, _ in fns}
    with _bench._quiet_stderr():
        for _, fn in fns:
            fn(0)
        call = 0
        for _ in range(args.rounds):
            for name, fn in fns:
                layer = call % x.n_layers
                call += 1
                clocks.refresh()
                _settle(SETTLE_S, args.threads, clocks)
                t0 = time.perf_counter()
                fn(layer)
                times[name].append(time.perf_counter() - t0)
    print(f"llama3-8b decode, {args.ctx} keys, {args.threads} threads, {args.rounds} rounds, "
          f"{x.n_layers} layers (µs: median; 10/25/75/90th percentiles)")
    for name, t in times.items():
        us = np.array(t) * 1e6
        p = np.percentile(us, [10, 25, 75, 90])
        print(f"  {name:16s} {statistics.median(us):8.1f}   " + " / ".join(f"{v:.0f}" for v in p))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
