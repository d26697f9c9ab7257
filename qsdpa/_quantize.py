"""Per-token asymmetric int8 quantization, bit-identical to PyTorch's quantized_decomposed ops.

ExecuTorch's quantized KV cache quantizes each (token, head) row of D values with
``choose_qparams_per_token_asymmetric`` and ``quantize_per_token``. Reproducing them exactly (not
approximately) matters: a cache written by qsdpa and one written by an ExecuTorch graph must hold the
same bytes. ``quantize_per_token`` runs the selected variant's native kernel (templates/quantize.cpp.j2);
``quantize_per_token_reference`` is the same computation in numpy, PyTorch's float32/float64 steps in
PyTorch's order, which the tests hold every variant to (and to PyTorch itself). On the hot path the
numpy version cost ~100 us for one decode step's llama3-8b query and ~97 ms for a 2048-token
prompt's, against ~7 us and ~8 ms for the kernel (1 thread): numpy's per-op overhead, then its
float64 passes over the data.
"""
from __future__ import annotations

from typing import Tuple

import numpy as np

from . import _dispatch, _interop
from ._threads import call_threads

_QMIN, _QMAX = -128, 127
_EPS32 = np.float32(np.finfo(np.float32).eps)


def choose_qparams_per_token(x: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Per-row scale (float32) and zero point (float32 holding an integer in [-128, 127])."""
    zero = np.float32(0.0)
    lo = np.minimum(x.min(axis=-1, keepdims=True), zero)
    hi = np.maximum(x.max(axis=-1, keepdims=True), zero)
    scale = (hi - lo) / np.float32(_QMAX - _QMIN)
    scale = np.maximum(scale, _EPS32)
    descaled_min = lo / scale
    descaled_max = hi / scale
    from_min = np.float32(_QMIN) + descaled_min
    from_max = np.float32(_QMAX) + descaled_max
    zp = np.where(from_min + from_max > 0, np.float32(_QMIN) - descaled_min, np.float32(_QMAX) - descaled_max)
    zp = np.round(np.clip(zp, np.float32(_QMIN), np.float32(_QMAX)))  # numpy rounds half to even, like torch
    return scale.astype(np.float32), zp.astype(np.float32)


def _check_rows(x) -> None:
    if not isinstance(x, np.ndarray):
        raise TypeError(f"x must be a numpy.ndarray of float32, got {type(x).__name__}")
    if x.dtype != np.float32:
        raise TypeError(f"x must have dtype float32, got {x.dtype}")
    if x.ndim < 1 or x.shape[-1] < 1:
        raise ValueError(f"x must have a last dimension of at least 1, got shape {x.shape}")


_NOT_FINITE = "must be finite (NaN or Inf has no int8 quantization)"
_RANGE_TOO_WIDE = "x's range (max - min, with 0) must fit in float32 (<= 3.4028235e+38) in every row"


def quantize_per_token(x) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Quantize the last dimension of ``x`` per row, as ExecuTorch's quantized KV cache does.

    Parameters
    ----------
    x : float32 array of shape ``[..., D]``, finite, D >= 1.

    Returns
    -------
    (q8, scales, zero_points): int8 ``[..., D]``, float32 ``[..., 1]``, int8 ``[..., 1]``, with
    ``x ≈ (q8 - zero_points) * scales``. Per row: ``lo = min(min(x), 0)``, ``hi = max(max(x), 0)``,
    ``scale = max((hi - lo) / 255, eps32)``, the zero point that minimises the larger end error,
    rounded half to even; values ``clamp(round_half_even(x * (1/scale) + zp), -128, 127)`` with the
    product in float64 — exactly PyTorch's ``choose_qparams_per_token_asymmetric`` followed by
    ``quantize_per_token``. Runs on ``qsdpa.get_num_threads()`` threads when ``x`` is large.
    """
    _check_rows(x)
    d = x.shape[-1]
    # A strided or unaligned view (a byte buffer at an odd offset) is copied: the kernel reads float*.
    rows = x if x.flags.c_contiguous and x.flags.aligned else np.array(x, order="C")
    q8 = np.empty(x.shape, np.int8)
    scales = np.empty(x.shape[:-1] + (1,), np.float32)
    zero_points = np.empty(x.shape[:-1] + (1,), np.int8)
    bad = _dispatch.selection().module.quantize_rows(rows.reshape(1, -1, d), q8.reshape(1, -1, d),
                                                     scales.reshape(1, -1, 1), zero_points.reshape(1, -1, 1),
                                                     call_threads(), False)
    if bad >= 0:
        raise ValueError("x " + _NOT_FINITE)
    return q8, scales, zero_points


def quantize_per_token_reference(x) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``quantize_per_token`` in numpy, step by step as PyTorch computes it: the tests' oracle."""
    _check_rows(x)
    if not np.isfinite(x).all():
        raise ValueError("x " + _NOT_FINITE)
    with np.errstate(over="ignore"):
        span = np.maximum(x.max(axis=-1), np.float32(0.0)) - np.minimum(x.min(axis=-1), np.float32(0.0))
    if not np.isfinite(span).all():
        # PyTorch returns an infinite scale here; qsdpa refuses the row, as its kernel does.
        raise ValueError(_RANGE_TOO_WIDE)
    scale, zp = choose_qparams_per_token(x)
    inv = 1.0 / scale.astype(np.float64)
    q = np.round(x.astype(np.float64) * inv + zp.astype(np.float64))
    q8 = np.clip(q, _QMIN, _QMAX).astype(np.int8)
    return q8, scale, zp.astype(np.int8)


def _dequantize_arg(name: str, x, dtype: type) -> np.ndarray:
    """One of dequantize_per_token's arguments as a numpy array of ``dtype``; TypeError naming it if not.

    The array kinds the rest of the API takes (numpy, CPU torch tensors, DLPack and buffer-protocol
    arrays) are read without a copy; the dtype must be exactly the one the cache and the kernels
    store, as for ``quantize_per_token``'s float32: a wider integer is not narrowed (it would wrap)."""
    a = x if isinstance(x, np.ndarray) else _interop.as_ndarray(name, x)
    if a.dtype != dtype:
        raise TypeError(f"{name} must have dtype {np.dtype(dtype)}, got {a.dtype}")
    return a


def dequantize_per_token(q8, scales, zero_points) -> np.ndarray:
    """``(q8 - zero_points) * scales`` in float32, the value ExecuTorch's kernels compute with.

    Parameters
    ----------
    q8 : int8 array of shape ``[..., D]``.
    scales : float32 ``[..., 1]``, finite and > 0 (as the attention kernels require of K/V scales).
    zero_points : int8 ``[..., 1]``.

    ``scales`` and ``zero_points`` are per token: shape ``q8.shape[:-1] + (1,)`` as
    ``quantize_per_token`` returns them, or any ``[..., 1]`` shape that broadcasts to it (one
    scale for every batch row, say). Any array kind the rest of qsdpa takes (numpy, CPU torch
    tensors, DLPack or buffer-protocol arrays); returns a new float32 numpy array shaped like
    ``q8``. Bad input raises a TypeError (kind, dtype) or ValueError (shape, scale values) naming
    the argument.
    """
    q8 = _dequantize_arg("q8", q8, np.int8)
    scales = _dequantize_arg("scales", scales, np.float32)
    zero_points = _dequantize_arg("zero_points", zero_points, np.int8)
    if q8.ndim < 1:
        raise ValueError(f"q8 must have at least 1 dimension ([..., D]), got shape {q8.shape}")
    per_token = q8.shape[:-1] + (1,)
    for name, a in (("scales", scales), ("zero_points", zero_points)):
        if a.ndim < 1 or a.shape[-1] != 1 or not _broadcasts_to(a.shape, per_token):
            raise ValueError(f"{name} must have shape {per_token} (q8's with a last dimension of 1), or a "
                             f"[..., 1] shape that broadcasts to it, got {a.shape}")
    ok = scales > 0
    ok &= scales < np.inf  # NaN fails both tests
    if not ok.all():
        index = tuple(int(i) for i in np.argwhere(~ok)[0])
        raise ValueError(f"scales must be finite and > 0; found {scales[index]} at index {index}")
    return (q8.astype(np.int16) - zero_points.astype(np.int16)).astype(np.float32) * scales


def _broadcasts_to(shape: Tuple[int, ...], target: Tuple[int, ...]) -> bool:
    """Whether an array of ``shape`` broadcasts to ``target`` without changing it."""
    try:
        return np.broadcast_shapes(shape, target) == tuple(target)
    except ValueError:
        return False
