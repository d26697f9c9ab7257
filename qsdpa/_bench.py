"""``python -m qsdpa bench``: qsdpa against the attention a user would otherwise run, in one process.

Every case times qsdpa and each installed peer on the same inputs, interleaved round by round (so
drift on a shared machine hits all of them alike), and reports medians, the spread (interquartile
range over the median) and ratios. Peers: PyTorch fp32 SDPA (``enable_gqa=True``) on the
dequantized cache, ExecuTorch's ``llama::custom_quantized_sdpa`` (int8) and ``custom_sdpa`` (fp32)
on the same inputs, and the numpy float64 reference on small shapes. A peer that is not installed
is reported as missing, never silently dropped.

Status: hot-cache decode and prefill with peers, table and JSON. The cold-cache regime, the
bandwidth floor and the plot are not implemented yet (issue 4).
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from . import _dispatch
from ._attention import quantized_sdpa
from ._quantize import dequantize_per_token, quantize_per_token
from ._threads import get_num_threads, set_num_threads

MODELS = {  # name: (q heads, kv heads, head dim)
    "llama3-8b": (32, 8, 128),
    "llama3.2-1b": (32, 8, 64),
    "small": (9, 3, 64),
}


@dataclass(frozen=True)
class Case:
    model: str
    kind: str          # "decode" | "prefill"
    context: int       # decode: cached tokens (the query is the next one); prefill: prompt length
    batch: int
    threads: int

    @property
    def label(self) -> str:
        return f"{self.kind:7s} {self.model:11s} B={self.batch} ctx={self.context:<6d} t={self.threads}"


@dataclass
class Result:
    case: Case
    median_us: Dict[str, float] = field(default_factory=dict)
    spread: Dict[str, float] = field(default_factory=dict)     # IQR / median
    missing: Dict[str, str] = field(default_factory=dict)      # peer -> why it did not run


def plan_cases(quick: bool, threads: Sequence[int]) -> List[Case]:
    if quick:
        return [Case("small", "decode", 512, 1, t) for t in threads] + [Case("small", "prefill", 128, 1, threads[-1])]
    cases = []
    for model in MODELS:
        for t in threads:
            for ctx in (512, 2048, 8192, 32768):
                cases.append(Case(model, "decode", ctx, 1, t))
            cases.append(Case(model, "decode", 2048, 8, t))
            for n in (128, 512, 2048):
                cases.append(Case(model, "prefill", n, 1, t))
    return cases


class _Inputs:
    """One case's tensors: the int8 cache ExecuTorch-style [B, S, H, D], and the fp32 views peers use."""

    def __init__(self, case: Case, rng: np.random.Generator):
        hq, hkv, d = MODELS[case.model]
        s_q = 1 if case.kind == "decode" else case.context
        s_kv = case.context + 1 if case.kind == "decode" else case.context
        self.start_pos = s_kv - s_q
        k = rng.standard_normal((case.batch, s_kv, hkv, d), dtype=np.float32)
        v = rng.standard_normal((case.batch, s_kv, hkv, d), dtype=np.float32)
        q = rng.standard_normal((case.batch, s_q, hq, d), dtype=np.float32)
        self.k8, self.ks, self.kz = quantize_per_token(k)
        self.v8, self.vs, self.vz = quantize_per_token(v)
        self.q8, self.qs, self.qz = quantize_per_token(q)
        self.out = np.empty(q.shape, dtype=np.float32)
        self.qf = q
        self.kf = dequantize_per_token(self.k8, self.ks, self.kz)
        self.vf = dequantize_per_token(self.v8, self.vs, self.vz)


def _numpy_decode(x: _Inputs) -> np.ndarray:
    """The float64 numpy reference of one decode step (the oracle the tests use), as a peer."""
    q = dequantize_per_token(x.q8, x.qs, x.qz).astype(np.float64)[:, 0]          # [B, Hq, D]
    k = x.kf.astype(np.float64)                                                   # [B, S, Hkv, D]
    v = x.vf.astype(np.float64)
    rep = q.shape[1] // k.shape[2]
    qg = q.reshape(q.shape[0], k.shape[2], rep, q.shape[2])                       # [B, Hkv, rep, D]
    s = np.einsum("bgrd,bsgd->bgrs", qg, k) / math.sqrt(q.shape[2])
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    o = np.einsum("bgrs,bsgd->bgrd", p, v) / p.sum(axis=-1)[..., None]
    return o.reshape(q.shape)


def _median_spread(samples: List[float]):
    med = statistics.median(samples)
    if len(samples) >= 4:
        q = statistics.quantiles(samples, n=4)
        return med, (q[2] - q[0]) / med
    return med, float("nan")


@contextlib.contextmanager
def _quiet_stderr():
    """ExecuTorch writes 'No temp allocator provided' on every call; keep it out of the timings."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class _Peers:
    """The implementations to compare, each a factory (inputs, threads) -> zero-arg callable."""

    def __init__(self):
        self.missing: Dict[str, str] = {}
        self.torch = None
        self.llama = None
        self.et_threads: Optional[Callable[[int], None]] = None
        try:
            import torch

            self.torch = torch
        except Exception as exc:  # noqa: BLE001 - any import failure means "missing"
            self.missing["torch fp32"] = f"torch not importable ({type(exc).__name__}: {exc})"
        if self.torch is not None:
            self._load_executorch()
        else:
            self.missing["ET int8"] = self.missing["ET fp32"] = "needs torch"

    def _load_executorch(self):
        import site

        torch = self.torch
        for base in site.getsitepackages():
            so = os.path.join(base, "executorch/extension/llm/custom_ops/libcustom_ops_aot_lib.so")
            if os.path.exists(so):
                try:
                    torch.ops.load_library(so)
                    self.llama = torch.ops.llama
                except Exception as exc:  # noqa: BLE001
                    self.missing["ET int8"] = self.missing["ET fp32"] = f"custom ops failed to load: {exc}"
                    return
                break
        if self.llama is None:
            self.missing["ET int8"] = self.missing["ET fp32"] = "executorch not installed (pip install --no-deps executorch==1.5.1)"
            return
        try:
            from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool

            self.et_threads = _unsafe_reset_threadpool
        except Exception as exc:  # noqa: BLE001
            self.et_threads = None
            self.missing["ET threads"] = (f"cannot set ExecuTorch's thread pool ({type(exc).__name__}: {exc}); "
                                          "its default pool is used")

    def callables(self, case: Case, x: _Inputs) -> Dict[str, Callable[[], object]]:
        fns: Dict[str, Callable[[], object]] = {}
        # Bottom-right causal: for decode (the query is the last position) it sees the whole cache.
        fns["qsdpa"] = lambda: quantized_sdpa(x.q8, x.k8, x.v8, x.start_pos, None, 0.0, True, None, x.qz, x.qs, x.kz,
                                              x.ks, x.vz, x.vs, out=x.out)
        torch = self.torch
        if torch is not None:
            torch.set_num_threads(case.threads)
            n_keys = x.start_pos + x.q8.shape[1]
            # What a user with an fp32 cache runs: [B, H, S, D], keys up to the current position.
            tq = torch.from_numpy(np.ascontiguousarray(x.qf.transpose(0, 2, 1, 3)))
            tk = torch.from_numpy(np.ascontiguousarray(x.kf[:, :n_keys].transpose(0, 2, 1, 3)))
            tv = torch.from_numpy(np.ascontiguousarray(x.vf[:, :n_keys].transpose(0, 2, 1, 3)))
            sdpa = torch.nn.functional.scaled_dot_product_attention
            is_causal = case.kind == "prefill"
            fns["torch fp32"] = lambda: sdpa(tq, tk, tv, is_causal=is_causal, enable_gqa=True)
        if self.llama is not None:
            if self.et_threads is not None:
                self.et_threads(case.threads)
            t = torch.from_numpy
            a = [t(x.q8), t(x.k8), t(x.v8)]
            qp = [t(x.qz), t(x.qs), t(x.kz), t(x.ks), t(x.vz), t(x.vs)]
            llama = self.llama
            fns["ET int8"] = lambda: llama.custom_quantized_sdpa(a[0], a[1], a[2], x.start_pos, None, 0.0, True, None,
                                                                 *qp, False)
            fq, fk, fv = t(x.qf), t(x.kf), t(x.vf)
            fns["ET fp32"] = lambda: llama.custom_sdpa(fq, fk, fv, x.start_pos, None, 0.0, True, None)
        if case.kind == "decode" and case.context <= 2048 and case.batch == 1:
            fns["numpy"] = lambda: _numpy_decode(x)
        return fns


def run_case(case: Case, peers: _Peers, rounds: int, budget_s: float, rng) -> Result:
    x = _Inputs(case, rng)
    set_num_threads(case.threads)
    result = Result(case)
    result.missing = {k: v for k, v in peers.missing.items() if k != "ET threads"}
    fns = peers.callables(case, x)
    samples: Dict[str, List[float]] = {name: [] for name in fns}
    with _quiet_stderr():
        for fn in fns.values():  # warm-up: first-call costs (arena growth, thread pools) excluded
            fn()
        start = time.perf_counter()
        for r in range(rounds):
            for name, fn in fns.items():
                t0 = time.perf_counter()
                fn()
                samples[name].append(time.perf_counter() - t0)
            if r >= 4 and time.perf_counter() - start > budget_s:
                break
    for name, s in samples.items():
        med, spread = _median_spread(s)
        result.median_us[name] = med * 1e6
        result.spread[name] = spread
    return result


def format_row(res: Result) -> str:
    ours = res.median_us["qsdpa"]
    parts = [f"{res.case.label}  qsdpa {ours:10.1f} us (±{100 * res.spread['qsdpa']:.0f}%)"]
    for name, us in res.median_us.items():
        if name != "qsdpa":
            parts.append(f"{name} {us / ours:6.2f}x")
    return "  ".join(parts)


def main(argv: Optional[Sequence[str]] = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m qsdpa bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a few small cases (well under a minute)")
    ap.add_argument("--threads", default=None, help="comma list, default: 1 and all cores")
    ap.add_argument("--rounds", type=int, default=30, help="timing rounds per case (default 30)")
    ap.add_argument("--budget", type=float, default=5.0, help="seconds per case before stopping early")
    ap.add_argument("--json", default=None, help="write results here")
    args = ap.parse_args(argv)
    all_threads = get_num_threads()
    threads = [int(t) for t in args.threads.split(",")] if args.threads else sorted({1, all_threads})
    cases = plan_cases(args.quick, threads)
    peers = _Peers()
    print(f"qsdpa bench: variant {_dispatch.get_isa()}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cpus, threads {threads}, {len(cases)} cases, hot cache")
    for name, why in peers.missing.items():
        print(f"  peer {name}: MISSING — {why}")
    print("  ratios are peer time / qsdpa time (> 1: qsdpa faster); medians of interleaved rounds")
    rng = np.random.default_rng(0)
    results = []
    for i, case in enumerate(cases, 1):
        res = run_case(case, peers, args.rounds, args.budget, rng)
        results.append(res)
        print(f"[{i}/{len(cases)}] {format_row(res)}", flush=True)
    set_num_threads(all_threads)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"isa": _dispatch.get_isa(), "machine": platform.machine(), "cpus": os.cpu_count(),
                       "peers_missing": peers.missing,
                       "results": [dict(asdict(r.case), median_us=r.median_us, spread=r.spread) for r in results]},
                      f, indent=1)
        print(f"wrote {args.json}")
    return 0
