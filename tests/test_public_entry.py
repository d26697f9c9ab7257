"""qsdpa.quantized_sdpa is a C function (csrc/public_entry.cpp) that runs the usual call itself and
hands every other call to the Python function (_attention._quantized_sdpa_py). Whatever the
spelling of a call, the two must give the same result bit for bit or the same exception and message,
and leave `out` alike; the usual decode call must be run at the C level (its reason to exist).
"""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import qsdpa
from qsdpa import _attention, _entry

B, HQ, HKV, D, S = 1, 4, 2, 16, 40


def _case(rng=None):
    rng = rng or np.random.default_rng(5)
    q8, qs, qz = qsdpa.quantize_per_token(rng.standard_normal((B, 1, HQ, D), dtype=np.float32))
    k8, ks, kz = qsdpa.quantize_per_token(rng.standard_normal((B, S, HKV, D), dtype=np.float32))
    v8, vs, vz = qsdpa.quantize_per_token(rng.standard_normal((B, S, HKV, D), dtype=np.float32))
    return dict(query=q8, key=k8, value=v8, start_pos=S - 1, q_zero_points=qz, q_scales=qs, k_zero_points=kz,
                k_scales=ks, v_zero_points=vz, v_scales=vs)


_ORDER = ("query", "key", "value", "start_pos", "attn_mask", "dropout_p", "is_causal", "scale", "q_zero_points",
          "q_scales", "k_zero_points", "k_scales", "v_zero_points", "v_scales", "is_seq_at_dim_2")


def _positional(kw, **extra):
    full = dict(attn_mask=None, dropout_p=0.0, is_causal=True, scale=None, is_seq_at_dim_2=False)
    full.update(kw)
    full.update(extra)
    return [full[name] for name in _ORDER]


def _strided(x):
    wide = np.zeros(x.shape[:-1] + (2 * x.shape[-1],), x.dtype)
    wide[..., ::2] = x
    return wide[..., ::2]


# Each spelling: (args, kwargs, gives out=) built from a fresh case.
def _spellings():
    c = _case()
    qs = {k: c[k] for k in ("q_zero_points", "q_scales", "k_zero_points", "k_scales", "v_zero_points", "v_scales")}
    return {
        "positional, out=": (_positional(c), {}, True),
        "keywords only, out=": ((), dict(c, is_causal=True), True),
        "positional head, keyword qparams, out=": ((c["query"], c["key"], c["value"], c["start_pos"]),
                                                   dict(qs, is_causal=True), True),
        "no out": (_positional(c), {}, False),
        "float scale": (_positional(c, scale=0.3), {}, True),
        "non-finite scale": (_positional(c, scale=float("inf")), {}, True),
        "huge scale": (_positional(c, scale=1e300), {}, True),
        "int scale": (_positional(c, scale=1), {}, True),
        "numpy float scale": (_positional(c, scale=np.float32(0.25)), {}, True),
        "numpy int start_pos": (_positional(c, start_pos=np.int64(S - 1)), {}, True),
        "start_pos past the cache": (_positional(c, start_pos=S), {}, True),
        "start_pos beyond int64": (_positional(c, start_pos=2**70), {}, True),
        "numpy bool is_causal": (_positional(c, is_causal=np.True_), {}, True),
        "int is_causal": (_positional(c, is_causal=1), {}, True),
        "dropout 0": (_positional(c, dropout_p=0), {}, True),
        "dropout 0.1": (_positional(c, dropout_p=0.1), {}, True),
        "strided key": (_positional(c, key=_strided(c["key"])), {}, True),
        "float16 key": (_positional(c, key=c["key"].astype(np.float16)), {}, True),
        "key as list": (_positional(c, key=c["key"].tolist()), {}, True),
        "3-D query": (_positional(c, query=c["query"][0]), {}, True),
        "no q qparams (int8 query)": (_positional(c, q_zero_points=None, q_scales=None), {}, True),
        "bool mask": (_positional(c, is_causal=False, attn_mask=np.ones((1, S), bool)), {}, True),
        "mask and causal": (_positional(c, attn_mask=np.ones((1, S), bool)), {}, True),
        "too many positional": (_positional(c) + [None], {}, True),
        "unknown keyword": (_positional(c), dict(bogus=1), True),
        "positional and keyword": (_positional(c), dict(query=c["query"]), True),
        "missing start_pos": ((c["query"], c["key"], c["value"]), {}, True),
        "no arguments": ((), {}, True),
    }


def _outcome(fn, args, kwargs, with_out):
    out = np.full((B, 1, HQ, D), 7.0, np.float32)
    call_kw = dict(kwargs)
    if with_out:
        call_kw["out"] = out
    try:
        result = fn(*args, **call_kw)
    except Exception as exc:  # noqa: BLE001 - the exception is the outcome compared
        return ("raised", type(exc), str(exc), out.copy())
    return ("returned", None if result is None else np.asarray(result).copy(), result is out, out.copy())


@pytest.mark.parametrize("spelling", sorted(_spellings()))
def test_c_entry_and_python_function_agree(spelling):
    args, kwargs, with_out = _spellings()[spelling]
    c_side = _outcome(qsdpa.quantized_sdpa, args, kwargs, with_out)
    args, kwargs, with_out = _spellings()[spelling]
    py_side = _outcome(_attention._quantized_sdpa_py, args, kwargs, with_out)
    assert c_side[0] == py_side[0], (c_side, py_side)
    if c_side[0] == "raised":
        assert c_side[1] is py_side[1] and c_side[2] == py_side[2]
    else:
        np.testing.assert_array_equal(c_side[1], py_side[1])
        assert c_side[2] == py_side[2]  # out returned as itself (or not) alike
    np.testing.assert_array_equal(c_side[3], py_side[3])  # out written alike, or untouched alike


def test_usual_call_runs_at_the_c_level(monkeypatch):
    c = _case()
    qsdpa.quantized_sdpa(*_positional(c), out=np.empty((B, 1, HQ, D), np.float32))  # resolves dispatch, threads

    def complete_path(*args, **kwargs):
        raise AssertionError("the usual call reached the complete path")

    monkeypatch.setattr(_attention, "_prepare", complete_path)
    before = _entry.counts()
    out = np.empty((B, 1, HQ, D), np.float32)
    for _ in range(3):
        assert qsdpa.quantized_sdpa(*_positional(c), out=out) is out
        assert qsdpa.quantized_sdpa(**dict(c, is_causal=True), out=out) is out
    after = _entry.counts()
    assert after["fast"] - before["fast"] == 6
    assert after["delegated"] == before["delegated"] and after["refused"] == before["refused"]


def test_refused_and_delegated_calls_are_counted():
    c = _case()
    out = np.empty((B, 1, HQ, D), np.float32)
    before = _entry.counts()
    qsdpa.quantized_sdpa(*_positional(c, key=_strided(c["key"])), out=out)  # C++ refuses: not contiguous
    qsdpa.quantized_sdpa(*_positional(c))  # no out: the Python function's
    after = _entry.counts()
    assert after["refused"] - before["refused"] == 1
    assert after["delegated"] - before["delegated"] == 1


def test_signature_and_doc_are_the_python_function_s():
    assert inspect.signature(qsdpa.quantized_sdpa) == inspect.signature(_attention._quantized_sdpa_py).replace(
        return_annotation=inspect.Signature.empty,
        parameters=[p.replace(annotation=inspect.Parameter.empty)
                    for p in inspect.signature(_attention._quantized_sdpa_py).parameters.values()])
    assert qsdpa.quantized_sdpa.__doc__ == _attention._quantized_sdpa_py.__doc__
    assert qsdpa.quantized_sdpa.__module__ == "qsdpa"


def test_make_entry_is_once_only():
    with pytest.raises(RuntimeError, match="already made"):
        _entry.make_entry("", _attention._quantized_sdpa_py, _attention._complete_path, None, None)
