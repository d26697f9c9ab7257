"""qsdpa: CPU scaled-dot-product attention over an int8 KV cache, with one compiled kernel module per
instruction set (scalar, AVX2, AVX-512, AVX-512 VNNI, NEON, NEON dotprod) and a runtime choice of
the best one this CPU can safely run.

Importing qsdpa is cheap on purpose: it imports no kernel module and does not run py-cpuinfo. The
variant is chosen on first use (``get_isa()`` or any kernel call); set ``QSDPA_ISA`` to a lower
variant's name to force it. ``import qsdpa.torch`` adds the PyTorch custom op (it needs torch;
``import qsdpa`` alone never imports torch).
"""
from ._attention import quantized_sdpa
from ._dispatch import get_isa
from ._errors import VariantUnavailableError
from ._kv_cache import KVCacheTensors, QuantizedKVCache
from ._quantize import dequantize_per_token, quantize_per_token
from ._scratch import arena_stats, scratch_layout
from ._show import show_runtime
from ._threads import get_num_threads, set_num_threads
from ._version import __version__

__all__ = [
    "KVCacheTensors",
    "QuantizedKVCache",
    "VariantUnavailableError",
    "__version__",
    "arena_stats",
    "dequantize_per_token",
    "get_isa",
    "get_num_threads",
    "quantize_per_token",
    "quantized_sdpa",
    "scratch_layout",
    "set_num_threads",
    "show_runtime",
]
