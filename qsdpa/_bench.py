"""``python -m qsdpa bench``: qsdpa against the attention a user would otherwise run, in one process.

Every case times qsdpa and each installed peer on the same inputs, interleaved round by round (so
drift on a shared machine hits all of them alike), and reports medians, the spread (interquartile
range over the median) and ratios. Peers: PyTorch fp32 SDPA (``enable_gqa=True``) on the
dequantized cache, ExecuTorch's ``llama::custom_quantized_sdpa`` (int8) and ``custom_sdpa`` (fp32)
on the same inputs, and the numpy float64 reference on small shapes. A peer that is not installed
is reported as missing, never silently dropped.

Decode runs hot (the same K/V every call) and cold (rotating through enough layers' caches to
exceed the last-level cache), with the int8 bytes read over the measured streaming-read bandwidth
as the floor. Not implemented yet: the PNG plot (issue 4).
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
    regime: str = "hot"  # "hot": the same K/V every call; "cold": rotate through layers past the LLC

    @property
    def label(self) -> str:
        return (f"{self.kind:7s} {self.model:11s} B={self.batch} ctx={self.context:<6d} t={self.threads} "
                f"{self.regime:4s}")


@dataclass
class Result:
    case: Case
    median_us: Dict[str, float] = field(default_factory=dict)
    spread: Dict[str, float] = field(default_factory=dict)     # IQR / median
    missing: Dict[str, str] = field(default_factory=dict)      # peer -> why it did not run
    layers: int = 1
    floor_us: Optional[float] = None                           # decode: int8 bytes read / bandwidth


def plan_cases(quick: bool, threads: Sequence[int]) -> List[Case]:
    if quick:
        return ([Case("small", "decode", 512, 1, t) for t in threads]
                + [Case("small", "decode", 512, 1, threads[-1], "cold"), Case("small", "prefill", 128, 1, threads[-1])])
    cases = []
    for model in MODELS:
        for t in threads:
            for ctx in (512, 2048, 8192, 32768):
                for regime in ("hot", "cold"):
                    cases.append(Case(model, "decode", ctx, 1, t, regime))
            cases.append(Case(model, "decode", 2048, 8, t))
            for n in (128, 512, 2048):
                cases.append(Case(model, "prefill", n, 1, t))
    return cases


def last_level_cache_bytes() -> int:
    """The largest CPU cache (Linux sysfs), or 32 MiB when it cannot be read."""
    best = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in os.listdir(base):
            with open(os.path.join(base, entry, "size")) as f:
                text = f.read().strip()
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            best = max(best, int(text.rstrip("KMG")) * mult)
    except (OSError, ValueError):
        pass
    return best or 32 << 20


def stream_read_bandwidth(threads: int, nbytes: int = 256 << 20, repeats: int = 7) -> float:
    """Median streaming-read bandwidth in bytes/s: numpy sums over a buffer far larger than the LLC,
    split over `threads` Python threads (numpy releases the GIL in its reduction loops)."""
    from concurrent.futures import ThreadPoolExecutor

    data = np.ones(nbytes // 4, dtype=np.float32)
    chunks = np.array_split(data, threads)
    rates = []
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(np.sum, chunks))
        for _ in range(repeats):
            t0 = time.perf_counter()
            list(pool.map(np.sum, chunks))
            rates.append(data.nbytes / (time.perf_counter() - t0))
    return statistics.median(rates)


class _Inputs:
    """One case's tensors: int8 caches ExecuTorch-style [B, S, H, D] and the fp32 copies peers use.

    Cold regime: as many copies ("layers") as it takes for the int8 caches alone to span twice the
    last-level cache; call r uses layer r mod n, as a model's layers do between two tokens."""

    def __init__(self, case: Case, rng: np.random.Generator, llc_bytes: int):
        hq, hkv, d = MODELS[case.model]
        s_q = 1 if case.kind == "decode" else case.context
        s_kv = case.context + 1 if case.kind == "decode" else case.context
        self.start_pos = s_kv - s_q
        k = rng.standard_normal((case.batch, s_kv, hkv, d), dtype=np.float32)
        v = rng.standard_normal((case.batch, s_kv, hkv, d), dtype=np.float32)
        q = rng.standard_normal((case.batch, s_q, hq, d), dtype=np.float32)
        k8, ks, kz = quantize_per_token(k)
        v8, vs, vz = quantize_per_token(v)
        self.q8, self.qs, self.qz = quantize_per_token(q)
        self.out = np.empty(q.shape, dtype=np.float32)
        self.qf = q
        n_keys = self.start_pos + s_q
        # Bytes a decode step must read: int8 K and V rows plus their scales and zero points.
        self.bytes_read = 2 * case.batch * n_keys * hkv * (d + 4 + 1)
        layer_bytes = k8.nbytes + v8.nbytes + ks.nbytes + kz.nbytes + vs.nbytes + vz.nbytes
        self.n_layers = 1 if case.regime == "hot" else max(2, -(-2 * llc_bytes // layer_bytes))
        self.layers = []
        for i in range(self.n_layers):
            copy = (lambda a: a) if i == 0 else np.copy
            layer = [copy(a) for a in (k8, ks, kz, v8, vs, vz)]
            layer += [dequantize_per_token(layer[0], layer[1], layer[2]), dequantize_per_token(layer[3], layer[4], layer[5])]
            self.layers.append(layer)


def _numpy_decode(x: _Inputs) -> np.ndarray:
    """The float64 numpy reference of one decode step (the oracle the tests use), as a peer."""
    q = dequantize_per_token(x.q8, x.qs, x.qz).astype(np.float64)[:, 0]          # [B, Hq, D]
    k = x.layers[0][6].astype(np.float64)                                         # [B, S, Hkv, D]
    v = x.layers[0][7].astype(np.float64)
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
    """The installed peers; callables() gives every implementation's one-call function for a case."""

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

    def callables(self, case: Case, x: _Inputs) -> Dict[str, Callable[[int], object]]:
        """name -> fn(layer): one call on that layer's cache."""
        fns: Dict[str, Callable[[int], object]] = {}
        L = x.layers

        # Bottom-right causal: for decode (the query is the last position) it sees the whole cache.
        def ours(i):
            k8, ks, kz, v8, vs, vz = L[i][:6]
            return quantized_sdpa(x.q8, k8, v8, x.start_pos, None, 0.0, True, None, x.qz, x.qs, kz, ks, vz, vs, out=x.out)

        fns["qsdpa"] = ours
        torch = self.torch
        if torch is not None:
            torch.set_num_threads(case.threads)
            n_keys = x.start_pos + x.q8.shape[1]
            # What a user with an fp32 cache runs: [B, H, S, D], keys up to the current position.
            tq = torch.from_numpy(np.ascontiguousarray(x.qf.transpose(0, 2, 1, 3)))
            tkv = [(torch.from_numpy(np.ascontiguousarray(l[6][:, :n_keys].transpose(0, 2, 1, 3))),
                    torch.from_numpy(np.ascontiguousarray(l[7][:, :n_keys].transpose(0, 2, 1, 3)))) for l in L]
            sdpa = torch.nn.functional.scaled_dot_product_attention
            is_causal = case.kind == "prefill"  # torch's causal is top-left: right for a square prefill only
            fns["torch fp32"] = lambda i: sdpa(tq, tkv[i][0], tkv[i][1], is_causal=is_causal, enable_gqa=True)
        if self.llama is not None:
            if self.et_threads is not None:
                self.et_threads(case.threads)
            t = torch.from_numpy
            q8, qz, qs, qf = t(x.q8), t(x.qz), t(x.qs), t(x.qf)
            et = [[t(a) for a in l] for l in L]
            llama = self.llama
            fns["ET int8"] = lambda i: llama.custom_quantized_sdpa(
                q8, et[i][0], et[i][3], x.start_pos, None, 0.0, True, None, qz, qs, et[i][2], et[i][1], et[i][5],
                et[i][4], False)
            fns["ET fp32"] = lambda i: llama.custom_sdpa(qf, et[i][6], et[i][7], x.start_pos, None, 0.0, True, None)
        if case.kind == "decode" and case.context <= 2048 and case.batch == 1 and case.regime == "hot":
            fns["numpy"] = lambda i: _numpy_decode(x)
        return fns


def run_case(case: Case, peers: _Peers, rounds: int, budget_s: float, rng, llc_bytes: int = 32 << 20,
             bandwidth: Optional[float] = None) -> Result:
    x = _Inputs(case, rng, llc_bytes)
    set_num_threads(case.threads)
    result = Result(case)
    result.missing = {k: v for k, v in peers.missing.items() if k != "ET threads"}
    fns = peers.callables(case, x)
    samples: Dict[str, List[float]] = {name: [] for name in fns}
    with _quiet_stderr():
        for fn in fns.values():  # warm-up: first-call costs (arena growth, thread pools) excluded
            fn(0)
        start = time.perf_counter()
        call = 0
        for r in range(rounds):
            for name, fn in fns.items():
                layer = call % x.n_layers
                call += 1
                t0 = time.perf_counter()
                fn(layer)
                samples[name].append(time.perf_counter() - t0)
            if r >= 4 and time.perf_counter() - start > budget_s:
                break
    for name, s in samples.items():
        med, spread = _median_spread(s)
        result.median_us[name] = med * 1e6
        result.spread[name] = spread
    result.layers = x.n_layers
    if case.kind == "decode" and bandwidth:
        result.floor_us = x.bytes_read / bandwidth * 1e6
    return result


def format_row(res: Result) -> str:
    ours = res.median_us["qsdpa"]
    parts = [f"{res.case.label}  qsdpa {ours:10.1f} us (±{100 * res.spread['qsdpa']:.0f}%)"]
    if res.floor_us:
        parts.append(f"{ours / res.floor_us:6.2f}x floor")
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
    llc = last_level_cache_bytes()
    bandwidth = {t: stream_read_bandwidth(t) for t in threads}
    print(f"qsdpa bench: variant {_dispatch.get_isa()}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cpus, threads {threads}, {len(cases)} cases, LLC {llc >> 20} MiB")
    print("  streaming-read bandwidth (numpy sums, median): "
          + ", ".join(f"{t} thread(s) {bw / 1e9:.1f} GB/s" for t, bw in bandwidth.items()))
    print("  floor (decode) = (int8 K/V bytes + qparams read) / bandwidth; 'Nx floor' = qsdpa's time / floor")
    for name, why in peers.missing.items():
        print(f"  peer {name}: MISSING — {why}")
    print("  ratios are peer time / qsdpa time (> 1: qsdpa faster); medians of interleaved rounds")
    rng = np.random.default_rng(0)
    results = []
    for i, case in enumerate(cases, 1):
        res = run_case(case, peers, args.rounds, args.budget, rng, llc, bandwidth.get(case.threads))
        results.append(res)
        print(f"[{i}/{len(cases)}] {format_row(res)}", flush=True)
    set_num_threads(all_threads)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"isa": _dispatch.get_isa(), "machine": platform.machine(), "cpus": os.cpu_count(),
                       "llc_bytes": llc, "bandwidth_bytes_per_s": bandwidth, "peers_missing": peers.missing,
                       "results": [dict(asdict(r.case), median_us=r.median_us, spread=r.spread, layers=r.layers,
                                        floor_us=r.floor_us) for r in results]},
                      f, indent=1)
        print(f"wrote {args.json}")
    return 0
