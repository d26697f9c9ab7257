"""Array kinds other than numpy: torch tensors, DLPack arrays, buffer-protocol objects.

The C++ entry reads numpy arrays only. Everything else is viewed as a numpy array without a copy
(a CPU torch tensor's ``.numpy()``, ``np.from_dlpack``, a memoryview) and the result is handed back
in the caller's kind, again without a copy.

torch is never imported here: a torch tensor can only exist if the caller has imported torch, so
``sys.modules`` tells whether to look for one. ``import qsdpa`` therefore never pulls torch in.
"""
from __future__ import annotations

import sys
from typing import Any, Protocol, Union

import numpy as np


class DLPackArray(Protocol):
    """Anything with the DLPack protocol: numpy arrays, torch tensors, JAX, CuPy, ... (CPU ones here)."""

    def __dlpack__(self) -> Any: ...  # no parameters, so implementations with optional ones match

    def __dlpack_device__(self) -> Any: ...


# What the public functions take for an array (see as_ndarray).
Array = Union[np.ndarray, DLPackArray, memoryview]

_KINDS = "a numpy.ndarray, a torch.Tensor, or a DLPack or buffer-protocol array"


def _torch_tensor_type():
    torch = sys.modules.get("torch")
    return getattr(torch, "Tensor", None) if torch is not None else None


def is_torch_tensor(x: Any) -> bool:
    tensor = _torch_tensor_type()
    return tensor is not None and isinstance(x, tensor)


def torch_to_numpy(name: str, t: Any, *, detach: bool = False) -> np.ndarray:
    """The numpy view of a CPU strided tensor: same memory, same strides (``.numpy()``).

    ``detach`` is for callers below autograd (the torch.library kernels); the public API refuses a
    tensor that requires grad instead, because qsdpa computes no gradients and silently cutting the
    graph would hide that.
    """
    if t.device.type != "cpu":
        raise ValueError(f"{name} must be a CPU tensor, got device {t.device}")
    if t.layout is not _torch_strided():
        raise TypeError(f"{name} must be a dense (strided) tensor, got layout {t.layout}")
    if t.requires_grad:
        if not detach:
            raise ValueError(f"{name} requires grad, but qsdpa computes no gradients: call it under "
                             f"torch.no_grad() or torch.inference_mode(), or pass {name}.detach()")
        t = t.detach()
    try:
        return t.numpy()
    except (TypeError, RuntimeError) as exc:  # e.g. bfloat16, which numpy cannot hold
        raise TypeError(f"{name} cannot be viewed as a numpy array (dtype {t.dtype}): {exc}") from None


def _torch_strided():
    return sys.modules["torch"].strided


def as_ndarray(name: str, x: Any, *, writable: bool = False) -> np.ndarray:
    """``x`` as a numpy array sharing its memory; TypeError naming ``name`` when that is impossible."""
    if isinstance(x, np.ndarray):
        a = x
    elif is_torch_tensor(x):
        a = torch_to_numpy(name, x)
    elif hasattr(type(x), "__dlpack__"):
        try:
            a = np.from_dlpack(x)
        except (TypeError, ValueError, RuntimeError, BufferError) as exc:
            raise TypeError(f"{name} cannot be read through DLPack as a CPU array: {exc}") from None
    else:
        try:
            view = memoryview(x)
        except TypeError:
            raise TypeError(f"{name} must be {_KINDS}, got {type(x).__name__}") from None
        a = np.asarray(view)
    if writable and not a.flags.writeable:
        raise ValueError(f"{name} must be writeable, got a read-only {type(x).__name__}")
    return a


def like(template: Any, result: np.ndarray) -> Any:
    """``result`` in the kind of ``template`` (the caller's query), sharing memory.

    numpy in, numpy out; torch in, torch out (``torch.from_numpy``); a memoryview in, a memoryview
    out; any other array with an array-API namespace gets ``namespace.from_dlpack(result)``. A bare
    DLPack or buffer object with no namespace gets the numpy array (there is no way to make one).
    """
    if type(template) is np.ndarray:
        return result
    if is_torch_tensor(template):
        return sys.modules["torch"].from_numpy(result)
    if isinstance(template, memoryview):
        return memoryview(result)
    namespace = getattr(template, "__array_namespace__", None)
    if namespace is not None and not isinstance(template, np.ndarray):
        return namespace().from_dlpack(result)
    return result
