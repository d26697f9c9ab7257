"""Introspection of the attention kernels' scratch memory (one arena per process)."""
from __future__ import annotations

from typing import Any, Dict

from . import _dispatch


def scratch_layout(threads: int, rows: int, kv_block: int, head_dim: int, *, float_query: bool = False,
                   partial_items: int = 0, heads: int = 1, convert_v: bool = False,
                   pack_keys: bool = False) -> Dict[str, Any]:
    """The per-thread slice layout every variant's attention kernel uses (csrc/attention.h).

    Returns ``slice`` ({part: (offset, bytes)} inside one thread's slice), ``slice_bytes``,
    ``partials_offset`` / ``partial_record_bytes`` / ``partials_bytes`` (flash-decoding partials,
    one record per work item) and ``total_bytes`` (what the arena must hold). Every offset is a
    multiple of 64 bytes. ``heads``: KV heads per work item (their block qparams are gathered
    together); ``convert_v``: V blocks are converted to fp32 in the slice (``value_f32``) instead
    of packed as int8 (``value_rows``); ``pack_keys``: each K block is also packed into key panels
    (``key_panels``) for a GEMM-form Q.K^T. An attention plan's ``heads_per_item``, ``convert_v``
    and ``pack_keys`` give the layout its kernel uses.
    """
    for name, value in (("threads", threads), ("rows", rows), ("kv_block", kv_block), ("head_dim", head_dim),
                        ("heads", heads)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if not 1 <= value < 2**64:
            raise ValueError(f"{name} must be >= 1 and < 2**64, got {value}")
    if isinstance(partial_items, bool) or not isinstance(partial_items, int):
        raise TypeError(f"partial_items must be an int, got {type(partial_items).__name__}")
    if not 0 <= partial_items < 2**64:
        raise ValueError(f"partial_items must be an int >= 0 and < 2**64, got {partial_items!r}")
    # Sizes whose layout overflows 64 bits raise ValueError in C++ (csrc/attention.h, checked arithmetic).
    return _dispatch.load_variant("scalar").scratch_layout(threads, rows, kv_block, head_dim, bool(float_query),
                                                          partial_items, heads, bool(convert_v), bool(pack_keys))


def arena_stats() -> Dict[str, int]:
    """``growths`` (times the process-wide scratch arena has grown) and ``capacity_bytes``."""
    return dict(_dispatch.load_variant("scalar").arena_stats())
