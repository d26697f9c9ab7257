"""qsdpa: CPU scaled-dot-product attention over an int8 KV cache, with one compiled kernel module per
instruction set (scalar, AVX2, AVX-512, AVX-512 VNNI, NEON, NEON dotprod) and a runtime choice of
the best one this CPU can safely run.

Importing qsdpa is cheap on purpose: it imports no kernel module and does not run py-cpuinfo. The
variant is chosen on first use (``get_isa()`` or any kernel call); set ``QSDPA_ISA`` to a lower
variant's name to force it.
"""
from ._dispatch import get_isa
from ._errors import VariantUnavailableError
from ._show import show_runtime
from ._version import __version__

__all__ = [
    "VariantUnavailableError",
    "__version__",
    "get_isa",
    "show_runtime",
]
