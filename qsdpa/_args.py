"""Argument checks shared by the public functions: each error names the argument."""
from __future__ import annotations

import operator
from typing import Any, Optional

import numpy as np


def as_int(name: str, x: Any, minimum: Optional[int] = None) -> int:
    """``x`` as an int (anything with ``__index__`` but bool), ``>= minimum`` when one is given."""
    if isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int, got bool")
    try:
        value = operator.index(x)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(x).__name__}") from None
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value
