"""numpy references for the GEMM kernels, and the tolerances we hold them to.

qk_gemm (int8 x int8) is exact: d = sum_k (a - za)(b - zb) in integers, then the kernel's fixed
float32 epilogue c = float32(d) * (float32(sa * alpha) * sb). The reference computes the same
epilogue in float32, so kernel and reference must agree bit for bit.

dequant_gemm and qk_gemm_f32a accumulate in float32 in an ISA-dependent order. They are checked
against float64 on the dequantized operands, within the standard error bound of a k-term float32
dot product: |error| <= (k + 4) * eps32 * sum_t |terms_t|, with the terms taken as the kernel
forms them (w*B and w*z separately for the zero-point fold).
"""
from __future__ import annotations

import numpy as np

EPS32 = float(np.finfo(np.float32).eps)


def quantized_rows(rng: np.random.Generator, rows: int, cols: int, *, extreme: bool = False):
    """Random int8 rows with per-row fp32 scales and int8 zero points over the full range."""
    if extreme:
        data = rng.choice(np.array([-128, -127, 0, 126, 127], dtype=np.int8), size=(rows, cols))
        zp = rng.choice(np.array([-128, 127], dtype=np.int8), size=rows)
        scales = rng.choice(np.array([1e-8, 1.0, 3e4], dtype=np.float32), size=rows)
    else:
        data = rng.integers(-128, 128, size=(rows, cols), dtype=np.int8)
        zp = rng.integers(-128, 128, size=rows, dtype=np.int8)
        scales = rng.uniform(1e-3, 0.1, size=rows).astype(np.float32)
    return data, scales.astype(np.float32), zp.astype(np.int8)


def qk_exact_dot(a, za, b, zb) -> np.ndarray:
    """sum_k (a - za)(b - zb), exactly, as int64."""
    a64 = a.astype(np.int64) - za.astype(np.int64)[:, None]
    b64 = b.astype(np.int64) - zb.astype(np.int64)[:, None]
    return a64 @ b64.T


def qk_gemm_ref(a, sa, za, b, sb, zb, alpha: float) -> np.ndarray:
    d = qk_exact_dot(a, za, b, zb)
    assert np.abs(d).max(initial=0) < 2**31, "reference outside the kernel's exact range"
    coef = sa.astype(np.float32) * np.float32(alpha)
    return d.astype(np.float32) * (coef[:, None] * sb.astype(np.float32)[None, :])


def dequant_gemm_ref(a, b, sb, zb, c0=None, beta: float = 0.0):
    """float64 reference and the per-element error bound of the kernel's float32 evaluation."""
    k = a.shape[1]
    w = a.astype(np.float64) * sb.astype(np.float64)[None, :]
    bd = b.astype(np.float64) - zb.astype(np.float64)[:, None]
    ref = w @ bd
    bound = np.abs(w) @ (np.abs(b.astype(np.float64)) + np.abs(zb.astype(np.float64))[:, None])
    tol = (k + 4) * EPS32 * bound
    if beta:
        ref = ref + c0.astype(np.float64)
        tol = tol + EPS32 * (np.abs(ref) + np.abs(c0))
    return ref, tol + np.finfo(np.float32).tiny


def qk_gemm_f32a_ref(a, b, sb, zb, alpha: float):
    k = a.shape[1]
    s = sb.astype(np.float64) * np.float64(np.float32(alpha))
    a64 = a.astype(np.float64)
    ref = (a64 @ (b.astype(np.float64) - zb.astype(np.float64)[:, None]).T) * s[None, :]
    bound = (np.abs(a64) @ (np.abs(b.astype(np.float64)) + np.abs(zb.astype(np.float64))[:, None]).T) * np.abs(s)[None, :]
    return ref, (k + 4) * EPS32 * bound + np.finfo(np.float32).tiny


def assert_within(actual, ref, tol, what: str):
    err = np.abs(actual.astype(np.float64) - ref)
    bad = err > tol
    if bad.any():
        i = np.unravel_index(np.argmax(err - tol), err.shape)
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.size} outside tolerance; worst at {i}: "
                             f"got {actual[i]!r}, want {ref[i]!r} +- {tol[i]:.3g}")
