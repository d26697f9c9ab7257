"""Exceptions of the public API (kept apart so any module can raise them without import cycles)."""
from __future__ import annotations

from typing import Optional


class VariantUnavailableError(RuntimeError):
    """A kernel variant cannot be used here: built for another architecture, not built in this
    installation, or needing CPU/OS features this machine does not enable.

    Raised *instead of* importing the module, so a variant the CPU cannot run never gets the chance
    to die with SIGILL. ``variant`` is the variant's name (None when the request named none)."""

    def __init__(self, message: str, variant: Optional[str] = None) -> None:
        super().__init__(message)
        self.variant = variant


# Show (and pickle) it as the public name, qsdpa.VariantUnavailableError, not the private module's.
VariantUnavailableError.__module__ = "qsdpa"
