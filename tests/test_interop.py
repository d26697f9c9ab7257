"""qsdpa.quantized_sdpa on array kinds other than numpy: torch tensors, DLPack and buffer-protocol
objects, read in place and answered in the caller's kind; and qsdpa without torch.

The torch tests skip where torch is absent; the rest runs everywhere (small shapes: CI also runs the
suite under qemu).
"""
from __future__ import annotations

import subprocess
import sys
import types

import numpy as np
import pytest

import qsdpa
from attention_reference import make_case

ARRAYS = ("query", "key", "value", "q_zero_points", "q_scales", "k_zero_points", "k_scales", "v_zero_points",
          "v_scales")


def _case(float_query=False):
    return make_case(np.random.default_rng(3), 1, 4, 2, 2, 24, 16, float_query=float_query)


def _call(case, convert, **extra):
    arrays = {n: getattr(case, n) for n in ARRAYS}
    converted = {n: (None if a is None else convert(a)) for n, a in arrays.items()}
    query, key, value = converted.pop("query"), converted.pop("key"), converted.pop("value")
    return qsdpa.quantized_sdpa(query, key, value, 20, is_causal=True, **converted, **extra)


def _expected(case):
    return _call(case, lambda a: a)


class DLPackOnly:
    """An array that offers nothing but the DLPack protocol (no buffer, no __array__)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


class WithNamespace(DLPackOnly):
    """A DLPack array with an array-API namespace, as JAX or CuPy arrays have."""

    def __array_namespace__(self, api_version=None):
        return types.SimpleNamespace(from_dlpack=lambda a: WithNamespace(np.from_dlpack(a)))


@pytest.mark.parametrize("float_query", [False, True], ids=["q8", "qf32"])
def test_dlpack_and_buffer_arrays(float_query):
    case = _case(float_query)
    expected = _expected(case)
    got = _call(case, DLPackOnly)
    assert type(got) is np.ndarray  # a bare DLPack object has no kind to answer in
    np.testing.assert_array_equal(got, expected)
    got = _call(case, WithNamespace)
    assert type(got) is WithNamespace  # answered through its namespace's from_dlpack
    np.testing.assert_array_equal(np.from_dlpack(got), expected)
    got = _call(case, memoryview)
    assert isinstance(got, memoryview) and got.shape == expected.shape and got.format == "f"
    np.testing.assert_array_equal(np.asarray(got), expected)
    out = np.full(expected.shape, 9.0, np.float32)
    assert _call(case, memoryview, out=memoryview(out)).obj is out  # written through, the caller's object back
    np.testing.assert_array_equal(out, expected)


def test_unusable_kinds_name_the_argument():
    case = _case()
    with pytest.raises(TypeError, match="key must be a numpy.ndarray, a torch.Tensor, or a DLPack"):
        qsdpa.quantized_sdpa(case.query, case.key.tolist(), case.value, 20, **_qparams(case))
    out = np.zeros(case.query.shape, np.float32)
    with pytest.raises(ValueError, match="out must be writeable"):
        qsdpa.quantized_sdpa(case.query, case.key, case.value, 20, **_qparams(case),
                             out=memoryview(out.tobytes()).cast("B").cast("f", out.shape))


def _qparams(case):
    return {n: getattr(case, n) for n in ARRAYS[3:]}


def test_import_qsdpa_does_not_import_torch_and_works_without_it():
    """With torch made unimportable, qsdpa and the cache run and qsdpa.torch says what is missing."""
    code = """
import sys
sys.modules["torch"] = None          # any `import torch` now raises ImportError
import numpy as np, qsdpa
c = qsdpa.QuantizedKVCache(1, 4, 1, 8)
c.update(0, np.ones((1, 2, 1, 8), np.float32), np.ones((1, 2, 1, 8), np.float32))
print(float(c.attend(np.ones((1, 1, 2, 8), np.float32), 1).sum()))
try:
    import qsdpa.torch
except ImportError as exc:
    print("ImportError")
try:
    c.to_bshd(as_torch=True)
except ImportError as exc:
    print(exc)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:3] == ["16.0", "ImportError", "as_torch=True needs PyTorch (pip install torch)"]
    proc = subprocess.run([sys.executable, "-c", "import sys, qsdpa; qsdpa.get_isa(); print('torch' in sys.modules)"],
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "False", proc.stderr


# -- torch ------------------------------------------------------------------------------------


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("float_query", [False, True], ids=["q8", "qf32"])
def test_torch_in_torch_out(torch, float_query):
    case = _case(float_query)
    expected = _expected(case)
    got = _call(case, torch.from_numpy)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    np.testing.assert_array_equal(got.numpy(), expected)
    out = torch.full(expected.shape, 3.0)
    assert _call(case, torch.from_numpy, out=out) is out
    np.testing.assert_array_equal(out.numpy(), expected)
    # A non-contiguous tensor is copied once, like a strided numpy array, and gives the same answer.
    strided = {n: getattr(case, n) for n in ARRAYS}
    key_t = torch.from_numpy(np.ascontiguousarray(np.swapaxes(case.key, 1, 2))).transpose(1, 2)
    assert not key_t.is_contiguous()
    got = qsdpa.quantized_sdpa(torch.from_numpy(strided["query"]), key_t, strided["value"], 20, is_causal=True,
                               **_qparams(case))
    np.testing.assert_array_equal(got.numpy(), expected)


def test_torch_tensors_that_cannot_be_read_in_place(torch):
    case = _case(float_query=True)
    out = torch.full(case.query.shape, 3.0)
    query = torch.from_numpy(case.query)
    bad = [
        (query.requires_grad_(True) * 1.0, ValueError, "query requires grad"),
        (query.detach().to("meta"), ValueError, "query must be a CPU tensor"),
        (query.detach().to(torch.bfloat16), TypeError, "query cannot be viewed as a numpy array"),
        (query.detach().to_sparse(), TypeError, "query must be a dense"),
    ]
    for q, exc, fragment in bad:
        with pytest.raises(exc, match=fragment):
            qsdpa.quantized_sdpa(q, case.key, case.value, 20, **_qparams(case), out=out)
    strided_out = torch.full((1, 4, 2, 16), 3.0).transpose(1, 2)  # the query's shape, not contiguous
    with pytest.raises(ValueError, match="out must be C-contiguous"):
        qsdpa.quantized_sdpa(query.detach(), case.key, case.value, 20, **_qparams(case), out=strided_out)
    assert (out == 3.0).all() and (strided_out == 3.0).all()
