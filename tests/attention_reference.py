"""float64 numpy reference for quantized_sdpa, on the dequantized tensors, and input builders."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

import qsdpa


def dequant64(q8, scales, zps) -> np.ndarray:
    return (q8.astype(np.float64) - zps.astype(np.float64)) * scales.astype(np.float64)


def sdpa_reference(q, k, v, start_pos: int, mask=None, is_causal=False, scale=None) -> np.ndarray:
    """q [B, Hq, Sq, D], k/v [B, Hkv, Skv, D] in float64 -> [B, Hq, Sq, D], ExecuTorch semantics,
    with a fully masked row giving 0."""
    b, hq, sq, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    n_keys = start_pos + sq if mask is None else skv
    k = np.repeat(k[:, :, :n_keys], hq // hkv, axis=1)
    v = np.repeat(v[:, :, :n_keys], hq // hkv, axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
    if mask is not None:
        m = np.broadcast_to(mask, (b, hq, sq, skv))[..., :n_keys]
        s = np.where(m, s, -np.inf) if m.dtype == np.bool_ else s + m.astype(np.float64)
    if is_causal:
        pos = start_pos + np.arange(sq)[:, None]
        s = np.where(np.arange(n_keys)[None, :] > pos, -np.inf, s)
    row_max = s.max(axis=-1, keepdims=True)
    dead = ~np.isfinite(row_max)
    p = np.exp(s - np.where(dead, 0.0, row_max))
    p = np.where(np.isfinite(s), p, 0.0)
    denom = p.sum(axis=-1, keepdims=True)
    out = (p @ v) / np.where(denom > 0, denom, 1.0)
    return np.where(dead, 0.0, out)


@dataclass
class Case:
    query: np.ndarray
    key: np.ndarray
    value: np.ndarray
    q_scales: Optional[np.ndarray]
    q_zero_points: Optional[np.ndarray]
    k_scales: np.ndarray
    k_zero_points: np.ndarray
    v_scales: np.ndarray
    v_zero_points: np.ndarray
    seq_dim2: bool

    def kwargs(self):
        return dict(q_zero_points=self.q_zero_points, q_scales=self.q_scales, k_zero_points=self.k_zero_points,
                    k_scales=self.k_scales, v_zero_points=self.v_zero_points, v_scales=self.v_scales,
                    is_seq_at_dim_2=self.seq_dim2)

    def to_bhsd(self, x):
        return x if self.seq_dim2 else np.swapaxes(x, 1, 2)

    def reference(self, start_pos, mask=None, is_causal=False, scale=None):
        if self.q_scales is None:
            q = self.query.astype(np.float64)
        else:
            q = dequant64(self.query, self.q_scales, self.q_zero_points)
        k = dequant64(self.key, self.k_scales, self.k_zero_points)
        v = dequant64(self.value, self.v_scales, self.v_zero_points)
        ref = sdpa_reference(self.to_bhsd(q), self.to_bhsd(k), self.to_bhsd(v), start_pos, mask, is_causal, scale)
        return self.to_bhsd(ref)  # back to the input layout (swapaxes is its own inverse)


# The attention tests' tolerance (see tests/test_attention.py): |out - ref| <= ATOL * max|V| + RTOL * |ref|.
RTOL = ATOL = 3e-5


def error_over_tolerance(case: "Case", out, ref) -> np.ndarray:
    """|out - ref| over the tolerance, elementwise: <= 1 passes; NaN in out gives NaN, which fails."""
    vmax = float(np.abs(qsdpa.dequantize_per_token(case.value, case.v_scales, case.v_zero_points)).max())
    return np.abs(np.asarray(out, np.float64) - ref) / (ATOL * vmax + RTOL * np.abs(ref))


def make_case(rng, batch, q_heads, kv_heads, q_len, kv_len, head_dim, *, float_query=False, seq_dim2=False,
              spread=1.0) -> Case:
    def shape(h, s, d):
        return (batch, h, s, d) if seq_dim2 else (batch, s, h, d)

    q = (rng.standard_normal(shape(q_heads, q_len, head_dim)) * spread).astype(np.float32)
    k = (rng.standard_normal(shape(kv_heads, kv_len, head_dim)) * spread).astype(np.float32)
    v = rng.standard_normal(shape(kv_heads, kv_len, head_dim)).astype(np.float32)
    k8, ks, kz = qsdpa.quantize_per_token(k)
    v8, vs, vz = qsdpa.quantize_per_token(v)
    if float_query:
        return Case(q, k8, v8, None, None, ks, kz, vs, vz, seq_dim2)
    q8, qs, qz = qsdpa.quantize_per_token(q)
    return Case(q8, k8, v8, qs, qz, ks, kz, vs, vz, seq_dim2)
