"""Workloads that need a fresh process, run by tests/test_threads.py and tests/test_leaks.py.

    python tests/child_workloads.py threads --threads 8 --calls 1000
    python tests/child_workloads.py rss --calls 10000 --warmup 2000
    OMP_THREAD_LIMIT=1 python tests/child_workloads.py few-threads --threads 3

A fresh process has a fresh scratch arena: the thread workload then makes the arena grow while
other threads' calls are running (a sanitizer build would report a slice freed under a running
call), and the RSS workload is not disturbed by what other tests allocated. Each prints one JSON
line; the variant is the dispatcher's (QSDPA_ISA picks one).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Dict, List

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qsdpa  # noqa: E402
from attention_reference import error_over_tolerance, make_case  # noqa: E402

# Mixed shapes (batch, q_heads, kv_heads, q_len, kv_len, head_dim, float query, [B,H,S,D], mask),
# smallest first so that the arena keeps growing while the threads run.
SHAPES = [
    (1, 4, 2, 1, 40, 16, False, False, None),
    (1, 8, 2, 1, 200, 64, True, False, None),
    (2, 4, 4, 5, 77, 33, False, True, None),
    (1, 8, 1, 3, 129, 32, False, False, "bool"),
    (1, 9, 3, 1, 300, 64, False, False, None),      # KV splits with 2+ threads
    (1, 8, 2, 9, 90, 64, True, True, "float"),
    (2, 16, 2, 1, 260, 64, False, False, None),     # two KV blocks
    (1, 4, 2, 12, 100, 128, False, False, None),
]


def problems(seed: int = 0) -> List[Dict]:
    rng = np.random.default_rng(seed)
    out = []
    for b, hq, hkv, sq, skv, d, fq, seq2, mask in SHAPES:
        case = make_case(rng, b, hq, hkv, sq, skv, d, float_query=fq, seq_dim2=seq2)
        kw = case.kwargs()
        kw.update(query=case.query, key=case.key, value=case.value, start_pos=skv - sq)
        if mask == "bool":
            kw.update(attn_mask=rng.random((sq, skv)) < 0.8)
        elif mask == "float":
            kw.update(attn_mask=rng.standard_normal((b, hq, sq, skv)).astype(np.float32))
        else:
            kw.update(is_causal=sq > 1)
        out.append(kw)
    return out


def threads_workload(n_threads: int, calls: int) -> Dict:
    probs = problems()
    schedule = [[(t * 5 + j) % len(probs) for j in range(calls)] for t in range(n_threads)]
    results: List[List[np.ndarray]] = [[None] * calls for _ in range(n_threads)]
    spans: List[List[tuple]] = [[] for _ in range(n_threads)]
    growth_before = qsdpa.arena_stats()["growths"]
    start = threading.Barrier(n_threads)

    def worker(t: int) -> None:
        start.wait()
        for j, p in enumerate(schedule[t]):
            t0 = time.perf_counter()
            results[t][j] = qsdpa.quantized_sdpa(**probs[p])
            spans[t].append((t0, time.perf_counter()))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    growths_concurrent = qsdpa.arena_stats()["growths"] - growth_before
    # The same calls again, one at a time, in this thread.
    mismatches = 0
    for t in range(n_threads):
        for j, p in enumerate(schedule[t]):
            if not np.array_equal(qsdpa.quantized_sdpa(**probs[p]), results[t][j]):
                mismatches += 1
    # Calls whose [start, end] windows overlap a call of another thread: they really ran concurrently.
    events = sorted((s, e, t) for t in range(n_threads) for s, e in spans[t])
    overlapping, latest_end, latest_thread = 0, -1.0, -1
    for s, e, t in events:
        if s < latest_end and t != latest_thread:
            overlapping += 1
        if e > latest_end:
            latest_end, latest_thread = e, t
    return {"variant": qsdpa.get_isa(), "threads": n_threads, "calls_per_thread": calls,
            "total_calls": n_threads * calls, "shapes": len(probs), "mismatches": mismatches,
            "overlapping_calls": overlapping, "arena_growths_while_concurrent": growths_concurrent,
            "kernel_threads": qsdpa.get_num_threads()}


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def rss_workload(calls: int, warmup: int) -> Dict:
    """Decode/prefill calls, with and without out=, plus calls that fail in C++ (exception paths)."""
    probs = problems()
    outs = [np.empty(p["query"].shape, np.float32) for p in probs]
    bad = dict(probs[0], start_pos=10**6)  # raises ValueError in C++, after the arrays were parsed

    def one(i: int) -> None:
        k = i % (len(probs) + 1)
        if k == len(probs):
            try:
                qsdpa.quantized_sdpa(**bad)
            except ValueError:
                pass
        elif i % 2:
            qsdpa.quantized_sdpa(out=outs[k], **probs[k])
        else:
            qsdpa.quantized_sdpa(**probs[k])

    for i in range(warmup):
        one(i)
    before = rss_bytes()
    samples = []
    for i in range(calls):
        one(i)
        if i % 1000 == 999:
            samples.append(rss_bytes() - before)
    after = rss_bytes()
    return {"variant": qsdpa.get_isa(), "calls": calls, "warmup": warmup, "rss_before": before, "rss_after": after,
            "growth_bytes": after - before, "samples": samples}


def few_threads_workload(n_threads: int) -> Dict:
    """Decode calls planned for n_threads kernel threads, whose KV range is split (flash-decoding),
    against the float64 reference. Run with OMP_THREAD_LIMIT=1 (or from inside another parallel
    region), OpenMP gives the kernel fewer threads than it planned for: the threads it does get
    must run every split and every part of the merge."""
    from qsdpa import _attention

    qsdpa.set_num_threads(n_threads)
    rng = np.random.default_rng(11)
    worst, splits = 0.0, []
    for b, hq, hkv, skv, d, seq2 in [(1, 8, 2, 1000, 64, False), (1, 8, 2, 1000, 64, True), (2, 9, 3, 700, 32, False),
                                     (1, 32, 8, 300, 128, False)]:
        case = make_case(rng, b, hq, hkv, 1, skv, d, seq_dim2=seq2)
        arr, start, causal, scale, sd2, out = _attention._prepare(
            case.query, case.key, case.value, skv - 1, None, 0.0, False, None, case.q_zero_points, case.q_scales,
            case.k_zero_points, case.k_scales, case.v_zero_points, case.v_scales, seq2, None)
        module = qsdpa._dispatch.selection().module
        plan = module.attention_plan(arr["query"], arr["q_scales"], arr["q_zero_points"], arr["key"], arr["k_scales"],
                                     arr["k_zero_points"], arr["value"], arr["v_scales"], arr["v_zero_points"], None,
                                     start, causal, scale, sd2, out, n_threads, 0)
        splits.append(plan["kv_splits"])
        got = qsdpa.quantized_sdpa(case.query, case.key, case.value, skv - 1, **case.kwargs())
        ratio = error_over_tolerance(case, got, case.reference(skv - 1))
        worst = max(worst, float(ratio.max()) if np.isfinite(ratio).all() else float("inf"))  # NaN fails too
    return {"variant": qsdpa.get_isa(), "threads": n_threads, "omp_thread_limit": os.environ.get("OMP_THREAD_LIMIT"),
            "kv_splits": splits, "worst_error_over_tolerance": worst}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=("threads", "rss", "few-threads"))
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=2000)
    args = ap.parse_args()
    if args.workload == "threads":
        print(json.dumps(threads_workload(args.threads, args.calls)))
    elif args.workload == "few-threads":
        print(json.dumps(few_threads_workload(args.threads)))
    else:
        print(json.dumps(rss_workload(args.calls, args.warmup)))


if __name__ == "__main__":
    main()
