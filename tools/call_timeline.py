"""Where does one decode call's time go, from Python to the threads' work and back? Timestamps of
each phase of qsdpa's call, after the bench's pause and back to back, on the bench's inputs.

    cmake -S . -B /tmp/trace -G Ninja -DCMAKE_BUILD_TYPE=Release -DQSDPA_AB_SUFFIX=_trace \\
          -DQSDPA_EXTRA_FLAGS=-DQSDPA_TRACE -Dpybind11_DIR=$(python -m pybind11 --cmakedir)
    ninja -C /tmp/trace _kernels_avx512_vnni
    python tools/call_timeline.py /tmp/trace/_kernels_avx512_vnni_trace.*.so [--ctx 2048] \\
          [--threads 2] [--regime cold] [--rounds 120] [--peer "torch fp32"]

The traced build (csrc/call_trace.h) stamps the binding's entry, the point where the kernel is
called (arguments parsed and checked, plan made, arena leased), and per thread the start of its
work, the end of its items and the end of the merge. Python stamps the same clock just before the
public qsdpa.quantized_sdpa call (as the bench makes it: positional qparams, out=) and just after.
The call goes through the installed package's Python code with the traced module in place of the
selected variant. Printed: the median time of each stamp since the Python-side one (µs), with the
10th and 90th percentiles, each after the bench's pause (_settle) and back to back; then how late
the last thread started after the first, how far apart the threads' items ended, and the merge.

On the Zen 4 VM of 2026-12-03 (docs/benchmarks-history.md), llama3-8b decode, cold, medians after the
pause (back to back), µs since the Python stamp. 2 threads, 2048 keys: binding entered 35 (3.6),
kernel called 54 (12), first thread started 81 (13), the second 35 later (0.4); the threads'
items took ~420 µs each (~217), ended 29 apart (p90 190; 16), back in Python at 540 (242).
8192 keys: kernel called 81 (37: the serial check of the 8192 x 8 x 2 scales and zero points reads
640 KB), the second thread 34 later, items ended 102 apart (36), back at 1261 (955). 1 thread,
2048 keys: kernel called 72 (13), back at 529 (416). In a later run, with the host busier, the
second thread started a median 871 µs after the first (its vCPU had been given away while it
slept) and calls took 1.6 ms against 268 back to back.

With --peer, the second column has that bench peer run before each call's pause instead of back to
back calls. On 2026-12-04 (the same VM, prefetch into L2 as then), 8192 keys, 2 threads, cold:
after a PyTorch fp32 SDPA both threads' items ended at 1142 / 1128 µs against 767 / 871 with the
pause alone, the threads starting as before (34 and 49 µs): the time went into the items, not the
start (tools/prefetch_after_work.py then showed it was the prefetches into L2).
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
import types

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ab_decode import load_b  # noqa: E402

from qsdpa import _bench, _dispatch  # noqa: E402
from qsdpa._bench import SETTLE_S, Case, ThreadClocks, _Inputs, _qsdpa_call, _settle  # noqa: E402
from qsdpa._threads import set_num_threads  # noqa: E402

# csrc/call_trace.h's slots.
ENTRY, READY, KERNEL_END, START, ITEMS_END, THREAD_END = 0, 1, 2, 8, 16, 24


def clock_ghz(module) -> float:
    """The trace clock's rate, against perf_counter over 0.2 s."""
    t0, c0 = time.perf_counter(), module._trace_clock()
    time.sleep(0.2)
    c1, t1 = module._trace_clock(), time.perf_counter()
    return (c1 - c0) / (t1 - t0) / 1e9


def timeline(module, call, layers: int, threads: int, pause: bool, rounds: int, ghz: float, peer=None):
    """Per call: {phase: µs since the Python-side stamp}. With `peer` (fn(layer)), it runs before
    each call's pause, as the bench's other implementations do."""
    clocks = ThreadClocks()
    rows = []
    for i in range(rounds):
        layer = i % layers
        if peer is not None:
            peer(layer)
        if pause:
            clocks.refresh()
            _settle(SETTLE_S, threads, clocks)
        p0 = module._trace_clock()
        call(layer)
        p1 = module._trace_clock()
        t = module._trace()

        def us(stamp: int) -> float:
            return (stamp - p0) / ghz / 1e3 if stamp else math.nan

        row = {"binding entered": us(t[ENTRY]), "kernel called": us(t[READY])}
        for th in range(threads):
            row[f"thread {th} started"] = us(t[START + th])
        for th in range(threads):
            row[f"thread {th} items done"] = us(t[ITEMS_END + th])
        ends_merge = [us(t[THREAD_END + th]) for th in range(threads)]
        row["merge done"] = math.nan if any(map(math.isnan, ends_merge)) else max(ends_merge)
        row["kernel returned"] = us(t[KERNEL_END])
        row["back in Python"] = us(p1)
        starts = [row[f"thread {th} started"] for th in range(threads)]
        ends = [row[f"thread {th} items done"] for th in range(threads)]
        row["last thread's start after the first's"] = max(starts) - min(starts)
        row["threads' items ended apart by"] = max(ends) - min(ends)
        row["merge (after the last items)"] = row["merge done"] - max(ends)
        rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("module", help="a traced build of the selected variant (see above)")
    ap.add_argument("--ctx", type=int, default=2048, help="cached tokens (llama3-8b decode)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--regime", choices=("hot", "cold"), default="cold")
    ap.add_argument("--rounds", type=int, default=120)
    ap.add_argument("--peer", choices=("none", "torch fp32", "ET int8", "ET fp32"), default="none",
                    help="a bench peer run (on the next layer) before each call's pause")
    args = ap.parse_args(argv)

    selected = _dispatch.selection()
    traced = load_b(args.module, selected.name)
    if not hasattr(traced, "_trace"):
        raise SystemExit(f"{args.module} was built without -DQSDPA_TRACE")
    # The package's Python path, with the traced module as the selected variant's.
    _dispatch._selection = types.SimpleNamespace(module=traced, name=selected.name)
    set_num_threads(args.threads)
    x = _Inputs(Case("llama3-8b", "decode", args.ctx, 1, args.threads, args.regime), np.random.default_rng(0),
                _bench.last_level_cache_bytes())
    call = _qsdpa_call(x)
    call(0)
    call(0)
    ghz = clock_ghz(traced)
    layers = x.n_layers if args.regime == "cold" else 1
    modes = {"pause": None, "b2b": None}
    if args.peer != "none":
        case = Case("llama3-8b", "decode", args.ctx, 1, args.threads, args.regime)
        peer_fn = _bench._Peers().callables(case, x)[args.peer]
        modes = {"pause": None, "peer+pause": lambda i: peer_fn((i + 1) % x.n_layers)}
    with _bench._quiet_stderr():
        results = {mode: timeline(traced, call, layers, args.threads, mode != "b2b", args.rounds, ghz, peer)
                   for mode, peer in modes.items()}
    print(f"llama3-8b decode, {args.ctx} keys, {args.threads} thread(s), {args.regime}, {args.rounds} calls each; "
          f"µs since the Python-side stamp, median [p10, p90] (trace clock {ghz:.3f} GHz)")
    print(f"  {'':40s} " + " ".join(f"{m:>28s}" for m in modes))
    for phase in results["pause"][0]:
        cells = []
        for mode in modes:
            v = sorted(r[phase] for r in results[mode] if not math.isnan(r[phase]))
            cells.append(f"{statistics.median(v):8.1f} [{v[len(v) // 10]:7.1f}, {v[9 * len(v) // 10]:7.1f}]"
                         if v else f"{'-':>26s}")
        print(f"  {phase:40s} " + " ".join(f"{c:>28s}" for c in cells))
    _dispatch._selection = selected
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
