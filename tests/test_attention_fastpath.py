"""quantized_sdpa's fast path (plain argument types, no mask) and its complete path agree.

The fast path skips _prepare for the usual decode call and leaves the contiguity check to C++; any
other spelling of the same arguments (numpy scalars, subclasses, strided views, a float scale, no
out) takes the complete path. Both must give bit-identical results (same kernel, same inputs), and
the usual call must really take the fast path (it is what keeps the per-call overhead low).
"""
from __future__ import annotations

import numpy as np
import pytest

import qsdpa
from qsdpa import _attention

B, HQ, HKV, D, S = 1, 4, 2, 16, 40


class _Sub(np.ndarray):
    pass


def _case():
    rng = np.random.default_rng(11)
    q8, qs, qz = qsdpa.quantize_per_token(rng.standard_normal((B, 1, HQ, D), dtype=np.float32))
    k8, ks, kz = qsdpa.quantize_per_token(rng.standard_normal((B, S, HKV, D), dtype=np.float32))
    v8, vs, vz = qsdpa.quantize_per_token(rng.standard_normal((B, S, HKV, D), dtype=np.float32))
    return dict(query=q8, key=k8, value=v8, start_pos=S - 1, attn_mask=None, dropout_p=0.0, is_causal=True,
                scale=None, q_zero_points=qz, q_scales=qs, k_zero_points=kz, k_scales=ks, v_zero_points=vz,
                v_scales=vs, is_seq_at_dim_2=False)


def _strided(x):
    wide = np.zeros(x.shape[:-1] + (2 * x.shape[-1],), x.dtype)
    wide[..., ::2] = x
    view = wide[..., ::2]
    assert not view.flags.c_contiguous
    return view


def _call(kw, out=None):
    return qsdpa.quantized_sdpa(*[kw[k] for k in ("query", "key", "value", "start_pos", "attn_mask", "dropout_p",
                                                  "is_causal", "scale", "q_zero_points", "q_scales", "k_zero_points",
                                                  "k_scales", "v_zero_points", "v_scales", "is_seq_at_dim_2")], out=out)


def test_plain_decode_call_takes_the_fast_path(monkeypatch):
    kw = _case()
    expected = _call(kw)

    def complete_path(*args, **kwargs):
        raise AssertionError("the plain decode call went through _prepare")

    monkeypatch.setattr(_attention, "_prepare", complete_path)
    out = np.full(expected.shape, 7.0, np.float32)
    assert _call(kw, out=out) is out
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(_call(kw), expected)  # out=None allocates on the fast path too


VARIANTS = {
    "numpy bool is_causal": lambda kw: kw.update(is_causal=np.bool_(True)),
    "numpy int start_pos": lambda kw: kw.update(start_pos=np.int64(kw["start_pos"])),
    "int dropout": lambda kw: kw.update(dropout_p=0),
    "numpy float dropout": lambda kw: kw.update(dropout_p=np.float32(0.0)),
    "explicit default scale": lambda kw: kw.update(scale=1.0 / np.sqrt(D).item()),
    "numpy float scale": lambda kw: kw.update(scale=np.float64(1.0 / np.sqrt(D))),
    "subclass arrays": lambda kw: kw.update(query=kw["query"].view(_Sub), key=kw["key"].view(_Sub)),
    "strided key": lambda kw: kw.update(key=_strided(kw["key"])),
    "strided query and scales": lambda kw: kw.update(query=_strided(kw["query"]), v_scales=_strided(kw["v_scales"])),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_other_spellings_give_the_same_result(name):
    kw = _case()
    expected = _call(kw)
    VARIANTS[name](kw)
    for out in (None, np.full(expected.shape, 7.0, np.float32)):
        np.testing.assert_array_equal(_call(kw, out=out), expected)


def test_fast_path_errors_leave_out_untouched():
    kw = _case()
    kw["start_pos"] = S  # start_pos + 1 > S: C++ rejects it on the fast path, the complete path reports it
    out = np.full((B, 1, HQ, D), 123.0, np.float32)
    with pytest.raises(ValueError, match="start_pos"):
        _call(kw, out=out)
    assert (out == 123.0).all()


def _low_level_args(kw, out):
    return [kw["query"], kw["q_scales"], kw["q_zero_points"], kw["key"], kw["k_scales"], kw["k_zero_points"],
            kw["value"], kw["v_scales"], kw["v_zero_points"], None, kw["start_pos"], True, D ** -0.5, False, out, 1]


def test_low_level_entry_errors_are_python_exceptions(kmod):
    # Each variant's quantized_sdpa is a plain CPython function that translates C++ exceptions itself
    # (csrc/python_errors.h), not through pybind11's dispatcher: each kind must still arrive as the
    # Python exception it names, with out untouched.
    kw = _case()
    out = np.full((B, 1, HQ, D), 7.0, np.float32)
    args = _low_level_args(kw, out)
    assert kmod.quantized_sdpa(*args) is out
    np.testing.assert_allclose(out, _call(kw), rtol=1e-5, atol=1e-6)  # the dispatched variant's, up to fp order
    out[...] = 7.0
    with pytest.raises(TypeError, match="16 or 17 positional arguments"):
        kmod.quantized_sdpa(*args[:15])
    with pytest.raises(TypeError, match="keyword"):
        kmod.quantized_sdpa(*args, force_splits=0)
    bad_dtype = list(args)
    bad_dtype[3] = kw["key"].astype(np.int16)
    with pytest.raises(TypeError, match="key must have dtype int8"):
        kmod.quantized_sdpa(*bad_dtype)
    bad_start = list(args)
    bad_start[10] = 10 * S
    with pytest.raises(ValueError, match="start_pos"):
        kmod.quantized_sdpa(*bad_start)
    bad_threads = args[:15] + [0]
    with pytest.raises(ValueError, match="threads must be >= 1"):
        kmod.quantized_sdpa(*bad_threads)
    with pytest.raises(RuntimeError):  # pybind11's cast_error, as its dispatcher reports it
        kmod.quantized_sdpa(*(args[:10] + ["not an int"] + args[11:]))
    np.testing.assert_array_equal(out, 7.0)
