#!/usr/bin/env python3
"""Decode loop of a toy transformer's attention with qsdpa int8 KV caches, against fp32 caches
with PyTorch SDPA.

The model: random weights, --layers attention layers (32), Llama-3-8B's heads (32 query heads,
8 KV heads, head dim 128) over a small residual stream (--dim), RMS-normed input, no MLP:

    x += attention(rmsnorm(x) @ Wq, @ Wk, @ Wv) @ Wo         per layer, per token

The prompt (--context tokens) is prefilled through every layer in one causal pass, then --steps
tokens are decoded one at a time. Both backends run the same weights and tokens, step by step in
turn (so load on the machine hits both alike), and share the projections (numpy); only the caches
and the attention differ:

    qsdpa   one qsdpa.QuantizedKVCache per layer ([B, S, H, D] int8 + per-token scales and zero
            points); update() quantizes the new K/V, attend() runs the kernel (out= given), with
            the query quantized per token as ExecuTorch does (--query int8) or as is (float32)
    torch   fp32 K/V tensors [B, H, S, D] per layer; torch.nn.functional.scaled_dot_product_attention
            with enable_gqa=True over the positions so far

It prints per backend: prefill seconds, decode tokens/s, the decode time spent in attention per
token (cache write + attention: update/attend, or the fp32 copy + SDPA) and the caches' memory.

    python examples/decode_loop.py --context 2048 --steps 64 --threads 2
"""
from __future__ import annotations

import argparse
import os
import sys
import time


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=32, help="tokens to decode (default 32)")
    ap.add_argument("--context", type=int, default=2048, help="prompt length, prefilled first (default 2048)")
    ap.add_argument("--threads", type=int, default=None, help="threads for qsdpa and torch (default: all; BLAS, "
                    "for the tiny projections, always 1)")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--q-heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--dim", type=int, default=128, help="residual stream width (small: the projections are "
                    "not what is measured)")
    ap.add_argument("--query", choices=("int8", "float32"), default="int8",
                    help="query type for qsdpa: int8, quantized per token as ExecuTorch's graphs do (default), "
                    "or float32 as projected")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch baseline")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    for name in ("steps", "context", "layers", "q_heads", "kv_heads", "head_dim", "dim"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.threads is not None and args.threads < 1:
        ap.error("--threads must be >= 1")
    if args.q_heads % args.kv_heads:
        ap.error("--q-heads must be a multiple of --kv-heads")
    return args


ARGS = parse_args() if __name__ == "__main__" else None
if ARGS is not None:
    # BLAS sizes its thread pool when numpy is imported, so this must come first. The projections
    # here are one token's row times a small matrix: BLAS threads would gain nothing and, spinning
    # between calls, take the cores qsdpa's and torch's threads need (measured: qsdpa's 2-thread
    # decode attention went from ~0.5 to ~4 ms a call with numpy's OpenBLAS on 2 threads).
    os.environ["OPENBLAS_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
    if ARGS.threads is not None:
        os.environ["OMP_NUM_THREADS"] = str(ARGS.threads)

import numpy as np  # noqa: E402

import qsdpa  # noqa: E402


class Model:
    """Random weights; the residual stream, the norm and the projections (numpy, shared by both backends)."""

    def __init__(self, args: argparse.Namespace):
        rng = np.random.default_rng(args.seed)
        self.args = args
        self.hq, self.hkv, self.d = args.q_heads, args.kv_heads, args.head_dim

        def weight(rows, cols):
            return (rng.standard_normal((rows, cols), dtype=np.float32) / np.float32(np.sqrt(rows)))

        self.layers = [(weight(args.dim, self.hq * self.d), weight(args.dim, self.hkv * self.d),
                        weight(args.dim, self.hkv * self.d), weight(self.hq * self.d, args.dim))
                       for _ in range(args.layers)]
        self.embedding = rng.standard_normal((1000, args.dim), dtype=np.float32)

    def qkv(self, layer: int, x: np.ndarray):
        """x [S, dim] -> q [1, S, Hq, D], k and v [1, S, Hkv, D], float32."""
        wq, wk, wv, _ = self.layers[layer]
        h = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(1e-6))
        s = x.shape[0]
        return ((h @ wq).reshape(1, s, self.hq, self.d), (h @ wk).reshape(1, s, self.hkv, self.d),
                (h @ wv).reshape(1, s, self.hkv, self.d))

    def residual(self, layer: int, x: np.ndarray, attn: np.ndarray) -> np.ndarray:
        """x + attn @ Wo, attn [1, S, Hq, D]."""
        return x + attn.reshape(x.shape[0], -1) @ self.layers[layer][3]


class QsdpaBackend:
    def __init__(self, model: Model, max_len: int):
        a = model.args
        self.caches = [qsdpa.QuantizedKVCache(1, max_len, a.kv_heads, a.head_dim) for _ in range(a.layers)]
        self.out = np.empty((1, 1, a.q_heads, a.head_dim), np.float32)
        self.int8_query = a.query == "int8"
        self.name = f"qsdpa int8 cache, {a.query} q"

    def attention(self, layer: int, pos: int, q, k, v):
        cache = self.caches[layer]
        cache.update(pos, k, v)
        qparams = {}
        if self.int8_query:
            q, q_scales, q_zero_points = qsdpa.quantize_per_token(q)
            qparams = dict(q_scales=q_scales, q_zero_points=q_zero_points)
        if q.shape[1] == 1:
            return cache.attend(q, pos, out=self.out, **qparams)  # decode: no allocation inside attend
        return cache.attend(q, pos, **qparams)

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.caches)


class TorchBackend:
    name = "torch fp32 cache + SDPA"

    def __init__(self, model: Model, max_len: int, torch):
        a = model.args
        self.torch, self.sdpa = torch, torch.nn.functional.scaled_dot_product_attention
        shape = (1, a.kv_heads, max_len, a.head_dim)
        self.k = [torch.zeros(shape) for _ in range(a.layers)]
        self.v = [torch.zeros(shape) for _ in range(a.layers)]

    def attention(self, layer: int, pos: int, q, k, v):
        t = self.torch
        n = q.shape[1]
        # numpy [1, S, H, D] -> torch [1, H, S, D], views (from_numpy shares memory)
        self.k[layer][:, :, pos:pos + n] = t.from_numpy(k).transpose(1, 2)
        self.v[layer][:, :, pos:pos + n] = t.from_numpy(v).transpose(1, 2)
        y = self.sdpa(t.from_numpy(q).transpose(1, 2), self.k[layer][:, :, :pos + n], self.v[layer][:, :, :pos + n],
                      is_causal=n > 1, enable_gqa=True)
        return y.transpose(1, 2).numpy()

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)


class Run:
    """One backend's hidden state and its time, total and in attention."""

    def __init__(self, backend):
        self.backend = backend
        self.prefill_s = self.decode_s = self.attention_s = 0.0
        self.x = None

    def forward(self, model: Model, pos: int, x: np.ndarray) -> np.ndarray:
        for layer in range(len(model.layers)):
            q, k, v = model.qkv(layer, x)
            t0 = time.perf_counter()
            attn = self.backend.attention(layer, pos, q, k, v)
            self.attention_s += time.perf_counter() - t0
            x = model.residual(layer, x, attn)
        return x


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def main(args: argparse.Namespace) -> int:
    try:
        import torch
    except ImportError:
        torch = None
    if args.threads is not None:
        qsdpa.set_num_threads(args.threads)
        if torch is not None:
            torch.set_num_threads(args.threads)
    threads = qsdpa.get_num_threads()
    model = Model(args)
    max_len = args.context + args.steps
    runs = [Run(QsdpaBackend(model, max_len))]
    if torch is not None and not args.no_torch:
        runs.append(Run(TorchBackend(model, max_len, torch)))

    print(f"qsdpa {qsdpa.__version__} ({qsdpa.get_isa()}), {threads} thread(s); {args.layers} layers, "
          f"{args.q_heads} q / {args.kv_heads} kv heads, head dim {args.head_dim}, model dim {args.dim}")
    print(f"prompt {args.context} tokens (prefilled), then {args.steps} decode steps")
    if torch is None:
        print("PyTorch is not installed: no fp32 SDPA baseline (pip install torch to compare)")
    elif args.no_torch:
        print("PyTorch baseline skipped (--no-torch)")

    rng = np.random.default_rng(args.seed + 1)
    prompt = model.embedding[rng.integers(0, len(model.embedding), args.context)]
    tokens = rng.integers(0, len(model.embedding), args.steps)
    for run in runs:
        t0 = time.perf_counter()
        run.x = run.forward(model, 0, prompt)[-1:]
        run.prefill_s = time.perf_counter() - t0
        run.attention_s = 0.0
    for step in range(args.steps):
        # Both decode the same (random) token: a toy has no logits to sample the next one from.
        x = model.embedding[tokens[step]][None, :]
        for run in runs:  # in turn, so machine load hits both alike
            t0 = time.perf_counter()
            run.x = run.forward(model, args.context + step, x)
            run.decode_s += time.perf_counter() - t0

    print()
    print(f"{'backend':<30} {'prefill s':>10} {'decode tok/s':>13} {'attention ms/tok':>17} {'KV cache':>12}")
    for run in runs:
        print(f"{run.backend.name:<30} {run.prefill_s:>10.2f} {args.steps / run.decode_s:>13.1f} "
              f"{1e3 * run.attention_s / args.steps:>17.2f} {_size(run.backend.nbytes):>12}")
    if len(runs) == 2:
        ours, theirs = runs
        print(f"qsdpa vs torch: {theirs.decode_s / ours.decode_s:.2f}x the decode tokens/s, attention "
              f"{theirs.attention_s / ours.attention_s:.2f}x as fast, cache {theirs.backend.nbytes / ours.backend.nbytes:.2f}x "
              "smaller")
        err = float(np.abs(ours.x - theirs.x).max() / np.abs(theirs.x).max())
        quantized = "int8 q, K, V" if args.query == "int8" else "int8 K, V"
        print(f"final hidden state: max|qsdpa - torch| / max|torch| = {err:.2e} ({quantized} against fp32)")
    return 0


if __name__ == "__main__":
    sys.exit(main(ARGS))
