"""qsdpa.quantized_sdpa: ExecuTorch's llama::custom_quantized_sdpa on numpy arrays (and, off the fast
path, torch tensors and DLPack / buffer-protocol arrays, viewed without a copy by _interop).

This layer settles what the C++ entry cannot see: argument types and presence, the default scale,
copies of non-contiguous inputs (never read with the wrong strides), and the output allocation.
Everything about shapes, dtypes and qparam values is checked in C++ (csrc/attention_binding.h),
before anything is written.

Per-call cost matters (a decode step calls this once per layer), so quantized_sdpa first tries a
fast path for the usual call: every argument of exactly the expected Python type (ndarray, int,
bool, float, None), no mask. It checks what it needs itself and hands the arrays to C++ as they are;
C++ rejects a non-C-contiguous array with a ValueError before writing anything, and any ValueError
sends the call down the complete path (_prepare, which copies such arrays), which then either runs or
raises exactly the error it always raised. Every other call takes the complete path directly.

The fast path exists twice: in _quantized_sdpa_py below, and in C (csrc/public_entry.cpp, the
function `quantized_sdpa` here is), which makes the same checks for the call with out= and passes
every other call to _quantized_sdpa_py. tests/test_attention_fastpath.py holds them to each other.
"""
from __future__ import annotations

import math
import numbers
from typing import Optional, TypeVar

import numpy as np

from . import _dispatch, _entry, _interop, _threads
from ._args import as_int
from ._interop import Array

ArrayT = TypeVar("ArrayT", bound=Array)  # the result comes back in the query's kind

_ARRAY_ARGS = ("query", "key", "value", "q_zero_points", "q_scales", "k_zero_points", "k_scales", "v_zero_points",
               "v_scales", "attn_mask")


def _as_array(name: str, x, optional: bool):
    if x is None:
        if optional:
            return None
        raise TypeError(f"{name} must be a numpy.ndarray, got None")
    if not isinstance(x, np.ndarray):
        x = _interop.as_ndarray(name, x)
    # A strided view is copied rather than read with the wrong strides; caches are contiguous anyway.
    # So is an unaligned one (a view of a byte buffer at an odd offset): the kernels read float*.
    flags = x.flags
    return x if flags.c_contiguous and flags.aligned else np.array(x, order="C")


def _as_bool(name: str, x) -> bool:
    if not isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(x).__name__}")
    return bool(x)


def _quantized_sdpa_py(query: ArrayT, key: Array, value: Array, start_pos: int, attn_mask: Optional[Array] = None,
                   dropout_p: float = 0.0, is_causal: bool = False, scale: Optional[float] = None,
                   q_zero_points: Optional[Array] = None, q_scales: Optional[Array] = None,
                   k_zero_points: Optional[Array] = None, k_scales: Optional[Array] = None,
                   v_zero_points: Optional[Array] = None, v_scales: Optional[Array] = None,
                   is_seq_at_dim_2: bool = False, *, out: Optional[Array] = None) -> ArrayT:
    """Scaled-dot-product attention over an int8 K/V cache, as ExecuTorch's ``custom_quantized_sdpa``.

    Shapes are ``[B, S, H, D]`` (or ``[B, H, S, D]`` with ``is_seq_at_dim_2=True``):

    - ``query``: int8 ``[B, S_q, H_q, D]`` with ``q_scales`` (float32) and ``q_zero_points`` (int8)
      shaped ``[B, S_q, H_q, 1]``; or float32 with no q qparams.
    - ``key``, ``value``: int8 ``[B, S_kv, H_kv, D]``, the whole cache; ``k_/v_scales`` float32 and
      ``k_/v_zero_points`` int8 shaped ``[B, S_kv, H_kv, 1]``. Row values are ``(x - zp) * scale``.
      ``H_q`` must be a multiple of ``H_kv`` (GQA / MQA).
    - ``start_pos``: absolute position of query row 0; ``start_pos + S_q <= S_kv``.
    - ``attn_mask``: None, additive float32 or boolean keep-mask, ``[S_q, S_kv]`` or
      ``[B, H_q, S_q, S_kv]``; not together with ``is_causal``.
    - ``is_causal``: query row i sees keys ``[0, start_pos + i]``. Without a mask, keys past
      ``start_pos + S_q`` are never read.
    - ``scale``: defaults to ``1/sqrt(D)``. ``dropout_p`` must be 0.

    Returns float32 shaped like ``query`` (written into ``out`` when given: a C-contiguous float32
    array of that shape, filled without allocating). A row whose keys are all masked gives 0.
    Bad arguments raise ``TypeError``/``ValueError`` naming the argument, and ``out`` is untouched.

    Arrays may also be CPU torch tensors (not requiring grad), DLPack arrays or buffer-protocol
    objects: they are read in place (no copy unless non-contiguous) and the result comes back in the
    query's kind (a torch tensor for a torch query), or as ``out`` itself when ``out`` is given.
    numpy arrays with ``out=`` take the allocation-free fast path; the other kinds cost a few
    microseconds more per call.
    """
    nd = _ndarray
    if (attn_mask is None and type(query) is nd and type(key) is nd and type(value) is nd
            and type(q_zero_points) in _ARRAY_OR_NONE and type(q_scales) in _ARRAY_OR_NONE
            and type(k_zero_points) in _ARRAY_OR_NONE and type(k_scales) in _ARRAY_OR_NONE
            and type(v_zero_points) in _ARRAY_OR_NONE and type(v_scales) in _ARRAY_OR_NONE
            and type(out) in _ARRAY_OR_NONE and type(start_pos) is int and type(dropout_p) is float
            and dropout_p == 0.0 and (is_causal is True or is_causal is False)
            and (is_seq_at_dim_2 is False or is_seq_at_dim_2 is True)):
        # Fast path: the checks _prepare would make, for these argument types.
        if scale is None:
            shape = query.shape
            if len(shape) != 4:
                raise ValueError(f"query must be 4-D, got {len(shape)}-D")
            head_dim = shape[3]
            scale_value = 1.0 / _sqrt(head_dim) if head_dim > 0 else 1.0
        elif type(scale) is float and _isfinite(scale) and query.ndim == 4:
            scale_value = scale
        else:
            scale_value = None  # anything unusual: the complete path checks and reports it
        if scale_value is not None:
            result = _empty(query.shape, _float32) if out is None else out
            selected = _dispatch._selection  # fixed once resolved; selection() resolves it
            module = selected.module if selected is not None else _dispatch.selection().module
            threads = _threads._num_threads or _threads.call_threads()
            try:
                module.quantized_sdpa(query, q_scales, q_zero_points, key, k_scales, k_zero_points, value, v_scales,
                                      v_zero_points, None, start_pos, is_causal, scale_value, is_seq_at_dim_2, result,
                                      threads, 0)
                return result
            except (ValueError, RuntimeError):
                # e.g. a non-contiguous input, or a start_pos beyond int64 (pybind11's cast error is a
                # RuntimeError): nothing was written; the complete path copies or raises its own error
                pass
    return _complete_path(query, key, value, start_pos, attn_mask, dropout_p, is_causal, scale, q_zero_points, q_scales,
                          k_zero_points, k_scales, v_zero_points, v_scales, is_seq_at_dim_2, out)


def _complete_path(query, key, value, start_pos, attn_mask, dropout_p, is_causal, scale, q_zero_points, q_scales,
                   k_zero_points, k_scales, v_zero_points, v_scales, is_seq_at_dim_2, out):
    """Every check and conversion, then the kernel: the calls the fast path does not take or hands back."""
    prepared = _prepare(query, key, value, start_pos, attn_mask, dropout_p, is_causal, scale, q_zero_points,
                        q_scales, k_zero_points, k_scales, v_zero_points, v_scales, is_seq_at_dim_2, out)
    result = _run(_dispatch.selection().module, *prepared)
    if out is not None:
        return out  # the caller's own array, whatever its kind
    return _interop.like(query, result)  # the query's kind: torch in, torch out


_ndarray = np.ndarray
_ARRAY_OR_NONE = frozenset((np.ndarray, type(None)))
_empty = np.empty
_float32 = np.float32
_sqrt = math.sqrt
_isfinite = math.isfinite
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_MASK_MAX = np.float32(2.0**125)  # csrc/attention_binding.h's kOverflowLimit: scores stay within it


def _prepare(query, key, value, start_pos, attn_mask, dropout_p, is_causal, scale, q_zero_points, q_scales,
             k_zero_points, k_scales, v_zero_points, v_scales, is_seq_at_dim_2, out):
    """Check and normalise the Python-level arguments; returns _run's arguments after the module."""
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, numbers.Real):
        raise TypeError(f"dropout_p must be a float, got {type(dropout_p).__name__}")
    if dropout_p != 0.0:
        raise ValueError(f"dropout_p must be 0.0 (qsdpa is an inference kernel), got {dropout_p}")
    start = as_int("start_pos", start_pos)
    if not 0 <= start < 2**63:  # C++ takes an int64; its own check says why a value is out of range
        raise ValueError(f"start_pos must be >= 0 and < 2**63, got {start}")
    causal = _as_bool("is_causal", is_causal)
    seq_dim2 = _as_bool("is_seq_at_dim_2", is_seq_at_dim_2)
    args = dict(query=query, key=key, value=value, q_zero_points=q_zero_points, q_scales=q_scales,
                k_zero_points=k_zero_points, k_scales=k_scales, v_zero_points=v_zero_points, v_scales=v_scales,
                attn_mask=attn_mask)
    arr = {name: _as_array(name, args[name], optional=name not in ("query", "key", "value")) for name in _ARRAY_ARGS}
    if arr["attn_mask"] is not None and causal:
        raise ValueError("attn_mask and is_causal cannot be used together")
    mask = arr["attn_mask"]
    if mask is not None and mask.dtype == np.float32 and not (mask <= _MASK_MAX).all():
        # NaN or +inf would poison a whole row's softmax, and a finite value above 2^125 could take
        # score + mask past float32 (the binding keeps scores within 2^125); -inf (masked out) is fine.
        raise ValueError("attn_mask must not contain NaN or values above 2^125 (4.25e+37), +inf included: "
                         "score + mask could overflow float32 (use -inf or a bool mask to mask out keys)")
    if arr["query"].ndim != 4:
        raise ValueError(f"query must be 4-D, got {arr['query'].ndim}-D")
    if scale is None:
        head_dim = arr["query"].shape[3]
        scale_value = 1.0 / math.sqrt(head_dim) if head_dim > 0 else 1.0
    else:
        if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
            raise TypeError(f"scale must be a float or None, got {type(scale).__name__}")
        try:
            scale_value = float(scale)
        except OverflowError:  # an int (or Fraction) beyond float range
            raise ValueError("scale must be finite in float32 (|scale| <= 3.4028235e38), got a value of type "
                             f"{type(scale).__name__} too large for float") from None
        if not (math.isfinite(scale_value) and abs(scale_value) <= _FLOAT32_MAX):
            raise ValueError(f"scale must be finite in float32 (|scale| <= 3.4028235e38), got {scale_value}")
    if out is None:
        result = np.empty(arr["query"].shape, dtype=np.float32)
    else:
        result = out if isinstance(out, np.ndarray) else _interop.as_ndarray("out", out, writable=True)
    return arr, start, causal, scale_value, seq_dim2, result


def _run(module, arr, start: int, causal: bool, scale_value: float, seq_dim2: bool, result: np.ndarray,
         force_splits: int = 0) -> np.ndarray:
    """Run one variant module's kernel (tests call every variant through here)."""
    module.quantized_sdpa(arr["query"], arr["q_scales"], arr["q_zero_points"], arr["key"], arr["k_scales"],
                          arr["k_zero_points"], arr["value"], arr["v_scales"], arr["v_zero_points"], arr["attn_mask"],
                          start, causal, scale_value, seq_dim2, result, _threads.call_threads(), force_splits)
    return result


# What `qsdpa.quantized_sdpa` is: csrc/public_entry.cpp makes the fast path's checks at the C level
# (after other work has emptied the caches, the interpreter took ~20 us over them) and hands every
# other call to _quantized_sdpa_py above, every refused one to _complete_path. Same signature and doc.
_SIGNATURE = ("quantized_sdpa(query, key, value, start_pos, attn_mask=None, dropout_p=0.0, is_causal=False, "
              "scale=None, q_zero_points=None, q_scales=None, k_zero_points=None, k_scales=None, v_zero_points=None, "
              "v_scales=None, is_seq_at_dim_2=False, *, out=None)\n--\n\n")
quantized_sdpa = _entry.make_entry(_SIGNATURE + (_quantized_sdpa_py.__doc__ or ""), _quantized_sdpa_py, _complete_path,
                                   _dispatch, _threads)
