"""qsdpa.QuantizedKVCache: one attention layer's int8 K/V cache, written in float, read by the kernel."""
from __future__ import annotations

import math
from typing import Any, Dict, NamedTuple, Optional, Tuple

import numpy as np

from . import _attention, _dispatch, _interop
from ._args import as_int
from ._attention import ArrayT
from ._interop import Array
from ._quantize import _NOT_FINITE
from ._threads import call_threads

_LAYOUTS = ("bshd", "bhsd")
_ALIGN = 64  # a cache line: rows of H·D int8 bytes then start on line boundaries, so no load straddles two


def _aligned_block(specs: Tuple[Tuple[Tuple[int, ...], Any], ...]) -> Tuple[np.ndarray, Tuple[np.ndarray, ...]]:
    """Zero-filled arrays of the given (shape, dtype)s carved out of ONE allocation, each at a 64-byte
    boundary (numpy only promises 16), and that allocation's bytes. One block lets ``update`` ask
    whether an input overlaps any of the cache's arrays with a single bounds check. Pages are
    committed when first written."""
    offsets, total = [], 0
    for shape, dtype in specs:
        offsets.append(total)
        total += -(-math.prod(shape) * np.dtype(dtype).itemsize // _ALIGN) * _ALIGN
    raw = np.zeros(total + _ALIGN, np.uint8)
    block = raw[-raw.ctypes.data % _ALIGN:][:total]
    arrays = tuple(block[o:o + math.prod(shape) * np.dtype(dtype).itemsize].view(dtype).reshape(shape)
                   for o, (shape, dtype) in zip(offsets, specs))
    return block, arrays


class KVCacheTensors(NamedTuple):
    """The cache's arrays under ExecuTorch's names: int8 ``key``/``value``, float32 ``k_scales``/``v_scales``
    and int8 ``k_zero_points``/``v_zero_points`` (last dimension 1)."""

    key: Any
    value: Any
    k_scales: Any
    k_zero_points: Any
    v_scales: Any
    v_zero_points: Any


class QuantizedKVCache:
    """One attention layer's K/V cache, stored as per-token asymmetric int8 as ExecuTorch stores it.

    ``QuantizedKVCache(batch, max_seq_len, n_kv_heads, head_dim, *, layout="bshd")`` holds, for
    every (batch, position, KV head), ``head_dim`` int8 values with one float32 scale and one int8
    zero point: ``value = (x8 - zero_point) * scale``. Memory: ``2·B·S·H·(D + 5)`` bytes, against
    ``2·B·S·H·D·4`` for float32 (``nbytes``).

    ``layout`` is the order of every array the cache holds or takes (``k``/``v`` in ``update``, ``q``
    and the result in ``attend``): ``"bshd"`` = ``[B, S, H, D]`` (ExecuTorch's, and the fastest for
    decode: the kernel reads all KV heads of a block of positions as one contiguous stretch) or
    ``"bhsd"`` = ``[B, H, S, D]`` (``is_seq_at_dim_2=True``; each head's positions contiguous).

    No per-token K row sums are stored, although the integer dot-product identity
    ``Σ(q−zq)(k−zk) = Σqk − zk·Σq − zq·Σk + D·zq·zk`` seems to want ``Σk``: the kernel shifts the
    query once per call instead, ``Σ(q−zq)(k−zk) = dot(q−zq, k) − zk·Σ(q−zq)``, which needs only a
    sum over the query. Storing ``Σk`` would cost 4 bytes per row and buy nothing.

    The arrays are allocated once, zero-filled (scales 1), on 64-byte boundaries; positions
    ``[0, length)`` have been written. One ``start_pos`` applies to every batch row, as in
    ExecuTorch's op.
    """

    def __init__(self, batch: int, max_seq_len: int, n_kv_heads: int, head_dim: int, *,
                 layout: str = "bshd") -> None:
        self._batch = as_int("batch", batch, 1)
        self._max_seq_len = as_int("max_seq_len", max_seq_len, 1)
        self._n_kv_heads = as_int("n_kv_heads", n_kv_heads, 1)
        self._head_dim = as_int("head_dim", head_dim, 1)
        if not isinstance(layout, str):
            raise TypeError(f"layout must be a str, got {type(layout).__name__}")
        if layout not in _LAYOUTS:
            raise ValueError(f"layout must be 'bshd' or 'bhsd', got {layout!r}")
        self._layout = layout
        self._seq_dim2 = layout == "bhsd"
        shape = self._shape(self._max_seq_len, self._head_dim)
        qshape = self._shape(self._max_seq_len, 1)
        # Every array the cache writes lives in self._block: update's alias check is one bounds test.
        self._block, (self._k, self._v, self._k_scales, self._k_zero_points, self._v_scales,
                      self._v_zero_points) = _aligned_block(((shape, np.int8), (shape, np.int8), (qshape, np.float32),
                                                             (qshape, np.int8), (qshape, np.float32), (qshape, np.int8)))
        self._k_scales.fill(1.0)  # unwritten rows then hold valid zeros, not an invalid scale of 0
        self._v_scales.fill(1.0)
        self._length = 0
        # Each array as the quantize kernel's 3-D rows, made once: (B, Smax*H, last), or (B*H, Smax,
        # last) for "bhsd"; a slice of one is the rows of a range of positions (_positions_of).
        self._rows = KVCacheTensors(*(self._as_rows(a) for a in self._arrays()))

    def _shape(self, seq: int, last: int, heads: Optional[int] = None) -> Tuple[int, int, int, int]:
        h = self._n_kv_heads if heads is None else heads
        return (self._batch, h, seq, last) if self._seq_dim2 else (self._batch, seq, h, last)

    def _seq_len_of(self, shape: Tuple[int, ...]) -> int:
        return shape[2] if self._seq_dim2 else shape[1]

    def _heads_of(self, shape: Tuple[int, ...]) -> int:
        return shape[1] if self._seq_dim2 else shape[2]

    def _positions(self, start: int, stop: int) -> Tuple[slice, ...]:
        return (slice(None), slice(None), slice(start, stop)) if self._seq_dim2 else (slice(None), slice(start, stop))

    # -- description ------------------------------------------------------------------------------
    @property
    def batch(self) -> int:
        """Batch size B."""
        return self._batch

    @property
    def max_seq_len(self) -> int:
        """Positions the cache can hold (S)."""
        return self._max_seq_len

    @property
    def n_kv_heads(self) -> int:
        """KV heads H."""
        return self._n_kv_heads

    @property
    def head_dim(self) -> int:
        """Head dimension D."""
        return self._head_dim

    @property
    def layout(self) -> str:
        """``"bshd"`` (``[B, S, H, D]``) or ``"bhsd"`` (``[B, H, S, D]``)."""
        return self._layout

    @property
    def length(self) -> int:
        """Positions ``[0, length)`` have been written by ``update``."""
        return self._length

    @property
    def nbytes(self) -> int:
        """Bytes held by the int8 K/V, their scales and zero points (not counting alignment padding)."""
        return sum(a.nbytes for a in self._arrays())

    def _arrays(self) -> KVCacheTensors:
        return KVCacheTensors(self._k, self._v, self._k_scales, self._k_zero_points, self._v_scales,
                              self._v_zero_points)

    def __repr__(self) -> str:
        return (f"QuantizedKVCache(batch={self._batch}, max_seq_len={self._max_seq_len}, "
                f"n_kv_heads={self._n_kv_heads}, head_dim={self._head_dim}, layout={self._layout!r}; "
                f"length={self._length}, nbytes={self.nbytes})")

    # -- writing ----------------------------------------------------------------------------------
    def _float_rows(self, name: str, x: Array) -> np.ndarray:
        a = _interop.as_ndarray(name, x)
        if a.dtype != np.float32:
            raise TypeError(f"{name} must have dtype float32, got {a.dtype}")
        want = self._shape(-1, self._head_dim)
        if a.ndim != 4 or a.shape[0] != want[0] or a.shape[3] != want[3] or self._heads_of(a.shape) != self._n_kv_heads:
            raise ValueError(f"{name} must have shape {self._describe(want)} ({self._layout}), got {tuple(a.shape)}")
        return a

    def _describe(self, shape: Tuple[int, ...]) -> str:
        return "(" + ", ".join("S" if n == -1 else str(n) for n in shape) + ")"

    def update(self, start_pos: int, k: Array, v: Array) -> None:
        """Quantize float ``k``/``v`` and store them at positions ``[start_pos, start_pos + S)``.

        ``k``, ``v``: float32, ``[B, S, H_kv, D]`` (``[B, H_kv, S, D]`` for layout ``"bhsd"``), any
        array kind ``quantized_sdpa`` takes, any strides (reversed, broadcast and unaligned views are
        copied first, as ``quantized_sdpa`` copies them). Each (batch, position, head) row is quantized
        exactly as ``qsdpa.quantize_per_token`` (and PyTorch's ``quantize_per_token``) would, bit for bit.

        ``start_pos`` may rewrite earlier positions but may not leave a gap: ``0 <= start_pos <=
        length`` and ``start_pos + S <= max_seq_len``. On any error nothing is written.

        ``k``/``v`` may even be views of the cache's own memory (its scales, say): they are then
        copied before anything is written, so the result is that of ``update(start_pos, k.copy(),
        v.copy())``, as numpy's operations behave with overlapping operands.
        """
        start = as_int("start_pos", start_pos, 0)
        k_rows = self._float_rows("k", k)
        v_rows = self._float_rows("v", v)
        if k_rows.shape != v_rows.shape:
            raise ValueError(f"k and v must have the same shape, got {tuple(k_rows.shape)} and {tuple(v_rows.shape)}")
        stop = start + self._seq_len_of(k_rows.shape)
        if start > self._length:
            raise ValueError(f"start_pos must be <= length ({self._length}): positions [{self._length}, {start}) "
                             "would be left unwritten")
        if stop > self._max_seq_len:
            raise ValueError(f"start_pos + S ({start} + {stop - start}) must not exceed max_seq_len "
                             f"({self._max_seq_len})")
        # The variant's quantize kernel writes straight into the cache rows, each row as
        # quantize_per_token would. It checks every row of its input before writing any, so: k is
        # checked, then v is quantized (or rejected), then k: on a NaN or Inf nothing is written.
        # _input_rows has made k_in/v_in rows the kernel reads as they are and that share no byte with
        # the cache, so neither pass can be refused after the v pass wrote, nor read what it wrote.
        module, threads, r = _dispatch.selection().module, call_threads(), self._rows
        k_in, v_in = self._input_rows(k_rows), self._input_rows(v_rows)
        for name, x, outs in (("k", k_in, None), ("v", v_in, (r.value, r.v_scales, r.v_zero_points)),
                              ("k", k_in, (r.key, r.k_scales, r.k_zero_points))):
            try:
                if outs is None:  # check only
                    bad = module.quantize_rows(x, None, None, None, threads, True)
                else:
                    bad = module.quantize_rows(x, *(self._positions_of(rows, start, stop) for rows in outs), threads,
                                               False)
            except ValueError as exc:  # the kernel calls its input x; the caller passed k or v
                message = str(exc)
                raise ValueError(name + message[1:] if message.startswith("x") else message) from None
            if bad >= 0:
                raise ValueError(name + " " + _NOT_FINITE)
        self._length = max(self._length, stop)

    def _input_rows(self, x: np.ndarray) -> np.ndarray:
        """``x`` ([B, S, H, D] or [B, H, S, D]) as the 3-D rows the quantize kernel takes, in the order of
        ``_as_rows``: (B, S*H, D), or (B*H, S, D) for ``"bhsd"``. A view of ``x`` when the kernel can read
        it as it is (rows contiguous, non-negative aligned strides) and it shares no memory with the
        cache; otherwise a contiguous copy. The common case, a contiguous array or a slice of one,
        costs a few hundred ns and allocates nothing."""
        b, d1, d2, d = x.shape
        rows = x.reshape((b * d1, d2, d) if self._seq_dim2 else (b, d1 * d2, d))  # copies if it must
        s0, s1, s2 = rows.strides
        if (s2 != 4 and d > 1) or s0 < 0 or s1 < 0 or not rows.flags.aligned:
            # Reversed or broadcast rows, a negative stride, or a view of a byte buffer at an odd
            # offset (the kernel reads float*): copied, like quantized_sdpa's inputs. A fresh copy
            # cannot overlap the cache.
            return np.array(rows, order="C")
        if np.may_share_memory(rows, self._block):
            # A view of the cache's own memory (bounds test against the one block all six arrays
            # live in, so a rare false positive costs only a copy): copied so that no write of this
            # update can change what it reads, and the kernel's own overlap check never fires.
            return np.array(rows, order="C")
        return rows

    def _as_rows(self, a: np.ndarray) -> np.ndarray:
        """All of ``a`` as a writable 3-D view, rows in ``_input_rows``'s order. Built from the strides
        the cache allocated, so it is always a view (a reshape that had to copy would take the writes
        with it)."""
        s = a.strides
        if self._seq_dim2:  # [B, H, Smax, last]: batch and head merge (stride_B = H * stride_H)
            shape, strides = (a.shape[0] * a.shape[1], a.shape[2], a.shape[3]), (s[1], s[2], s[3])
        else:  # [B, Smax, H, last]: position and head merge (stride_S = H * stride_H)
            shape, strides = (a.shape[0], a.shape[1] * a.shape[2], a.shape[3]), (s[0], s[2], s[3])
        return np.lib.stride_tricks.as_strided(a, shape=shape, strides=strides)

    def _positions_of(self, rows: np.ndarray, start: int, stop: int) -> np.ndarray:
        """Positions [start, stop) of one of ``_rows``' arrays."""
        if self._seq_dim2:
            return rows[:, start:stop]
        h = self._n_kv_heads
        return rows[:, start * h:stop * h]

    def reset(self) -> None:
        """Forget every position (``length`` becomes 0); the memory is kept for reuse."""
        self._length = 0

    # -- reading ----------------------------------------------------------------------------------
    def attend(self, q: ArrayT, start_pos: int, *, is_causal: bool = True, scale: Optional[float] = None,
               q_scales: Optional[Array] = None, q_zero_points: Optional[Array] = None,
               out: Optional[Array] = None) -> ArrayT:
        """Attention of ``q`` over the cached positions: ``qsdpa.quantized_sdpa`` on this cache.

        ``q``: float32 ``[B, S_q, H_q, D]`` (``[B, H_q, S_q, D]`` for ``"bhsd"``), ``H_q`` a multiple of
        ``n_kv_heads``; or int8 with ``q_scales`` float32 and ``q_zero_points`` int8 shaped
        ``[B, S_q, H_q, 1]``. Query row ``i`` is at position ``start_pos + i``; with ``is_causal`` it
        sees keys ``[0, start_pos + i]``, without it keys ``[0, start_pos + S_q)``. Those positions must
        have been written: ``start_pos + S_q <= length``.

        Returns float32 shaped like ``q``, in ``q``'s kind (numpy, torch, ...); into ``out`` when
        given (numpy ``q`` and ``out`` make no allocation on the way to the kernel).
        """
        if type(q) is not np.ndarray:
            result = self.attend(_interop.as_ndarray("q", q), start_pos, is_causal=is_causal, scale=scale,
                                 q_scales=q_scales, q_zero_points=q_zero_points, out=out)
            return out if out is not None else _interop.like(q, result)
        shape = q.shape
        if len(shape) != 4 or shape[0] != self._batch or shape[3] != self._head_dim:
            dims = ("H_q", "S_q") if self._seq_dim2 else ("S_q", "H_q")
            raise ValueError(f"q must have shape ({self._batch}, {dims[0]}, {dims[1]}, {self._head_dim}) "
                             f"({self._layout}), got {shape}")
        if q.dtype.char not in "fb":  # float32, int8
            raise TypeError(f"q must have dtype float32 or int8, got {q.dtype}")
        q_heads = self._heads_of(shape)
        if q_heads % self._n_kv_heads:
            raise ValueError(f"q's head count ({q_heads}) must be a multiple of n_kv_heads ({self._n_kv_heads})")
        start = start_pos if type(start_pos) is int and start_pos >= 0 else as_int("start_pos", start_pos, 0)
        q_len = self._seq_len_of(shape)
        if start + q_len > self._length:
            raise ValueError(f"start_pos + S_q ({start} + {q_len}) must not exceed the written length "
                             f"({self._length}): call update first")
        return _attention.quantized_sdpa(q, self._k, self._v, start, None, 0.0, is_causal, scale, q_zero_points,
                                         q_scales, self._k_zero_points, self._k_scales, self._v_zero_points,
                                         self._v_scales, self._seq_dim2, out=out)

    # -- interop ----------------------------------------------------------------------------------
    def sdpa_args(self, *, as_torch: bool = False) -> Dict[str, Any]:
        """Keyword arguments for ``qsdpa.quantized_sdpa``, ``torch.ops.qsdpa.custom_quantized_sdpa`` and
        ExecuTorch's ``torch.ops.llama.custom_quantized_sdpa``: ``key``, ``value``, ``k_/v_scales``,
        ``k_/v_zero_points`` (the cache's own arrays, in its layout, no copy; torch tensors sharing
        the memory with ``as_torch=True``) and ``is_seq_at_dim_2``. Pass ``start_pos`` and the query
        yourself; the positions read must have been written."""
        arrays = self._arrays()._asdict()
        if as_torch:
            arrays = {name: _torch().from_numpy(a) for name, a in arrays.items()}
        arrays["is_seq_at_dim_2"] = self._seq_dim2
        return arrays

    def to_bshd(self, *, as_torch: bool = False) -> KVCacheTensors:
        """The cache as ExecuTorch's ``[B, S, H, D]`` arrays (scales and zero points ``[B, S, H, 1]``),
        views sharing the cache's memory (torch tensors with ``as_torch=True``). For a ``"bhsd"`` cache
        they are transposed, non-contiguous views; ``.copy()``/``.contiguous()`` them if a consumer
        needs contiguous memory, or pass the cache as it is with ``sdpa_args()``."""
        arrays = self._arrays()
        if self._seq_dim2:
            arrays = KVCacheTensors(*(a.transpose(0, 2, 1, 3) for a in arrays))
        if as_torch:
            arrays = KVCacheTensors(*(_torch().from_numpy(a) for a in arrays))
        return arrays


def _torch():
    try:
        import torch
    except ImportError:
        raise ImportError("as_torch=True needs PyTorch (pip install torch)") from None
    return torch
