"""Every class of bad input to quantized_sdpa raises TypeError/ValueError naming the argument, and
leaves `out` untouched (ExecuTorch's op aborts the process or returns garbage on most of these)."""
from __future__ import annotations

import numpy as np
import pytest

import qsdpa
from attention_reference import make_case

B, HQ, HKV, SQ, SKV, D, START = 1, 4, 2, 2, 20, 16, 10


def _args():
    case = make_case(np.random.default_rng(7), B, HQ, HKV, SQ, SKV, D)
    kw = case.kwargs()
    kw.update(query=case.query, key=case.key, value=case.value, start_pos=START)
    return kw


def _replace(name, make):
    def edit(kw):
        kw[name] = make(kw)
    return edit


def _drop(*names):
    def edit(kw):
        for n in names:
            kw[n] = None
    return edit


def _poke(name, index, value):
    def edit(kw):
        x = kw[name].copy()
        x[index] = value
        kw[name] = x
    return edit


def _float_query_with_qparams(kw):
    kw["query"] = np.zeros((B, SQ, HQ, D), np.float32)


def _float_query_holding(value):
    """A float32 query (no q qparams) with one non-finite element: before the check it returned
    finite rows (zeros for NaN, one V row for inf, and for -inf zeros on scalar, a V row on SIMD)."""
    def edit(kw):
        q = np.random.default_rng(3).standard_normal((B, SQ, HQ, D)).astype(np.float32)
        q[0, 1, 2, 5] = value
        kw.update(query=q, q_scales=None, q_zero_points=None)
    return edit


def _float_query_of(value):
    def edit(kw):
        kw.update(query=np.full((B, SQ, HQ, D), value, np.float32), q_scales=None, q_zero_points=None)
    return edit


def _both(*edits):
    def edit(kw):
        for e in edits:
            e(kw)
    return edit


BAD = {
    # name: (edit, exception, message fragment)
    "query rank": (_replace("query", lambda kw: kw["query"][0]), ValueError, "query must be 4-D"),
    "query dtype": (_replace("query", lambda kw: kw["query"].astype(np.float64)), TypeError, "query"),
    "query type": (_replace("query", lambda kw: kw["query"].tolist()), TypeError, "query"),
    "key dtype": (_replace("key", lambda kw: kw["key"].astype(np.float32)), TypeError, "key"),
    "value rank": (_replace("value", lambda kw: kw["value"][..., None]), ValueError, "value"),
    "head dim mismatch": (_replace("value", lambda kw: np.zeros((B, SKV, HKV, D + 1), np.int8)), ValueError, "head dim"),
    "batch mismatch": (_replace("key", lambda kw: np.zeros((B + 1, SKV, HKV, D), np.int8)), ValueError, "batch"),
    "k/v shape mismatch": (_replace("value", lambda kw: np.zeros((B, SKV + 1, HKV, D), np.int8)), ValueError, "key and value"),
    "heads not a multiple": (lambda kw: kw.update(key=np.zeros((B, SKV, 3, D), np.int8), value=np.zeros((B, SKV, 3, D), np.int8),
                                                  k_scales=np.ones((B, SKV, 3, 1), np.float32), v_scales=np.ones((B, SKV, 3, 1), np.float32),
                                                  k_zero_points=np.zeros((B, SKV, 3, 1), np.int8),
                                                  v_zero_points=np.zeros((B, SKV, 3, 1), np.int8)), ValueError, "multiple"),
    "negative start_pos": (_replace("start_pos", lambda kw: -1), ValueError, "start_pos"),
    "start_pos past cache": (_replace("start_pos", lambda kw: SKV - SQ + 1), ValueError, "start_pos"),
    "float start_pos": (_replace("start_pos", lambda kw: 1.0), TypeError, "start_pos"),
    "bool start_pos": (_replace("start_pos", lambda kw: True), TypeError, "start_pos"),
    "missing q qparams": (_drop("q_scales"), ValueError, "q_scales"),
    "float query with qparams": (_float_query_with_qparams, ValueError, "q_scales"),
    "NaN in float query": (_float_query_holding(np.nan), ValueError, "query must be finite"),
    "inf in float query": (_float_query_holding(np.inf), ValueError, "query must be finite"),
    "-inf in float query": (_float_query_holding(-np.inf), ValueError, "query must be finite"),
    "missing k qparams": (_drop("k_zero_points"), ValueError, "k_zero_points"),
    "missing v scales": (_drop("v_scales"), ValueError, "v_scales"),
    "missing v zero points": (_drop("v_zero_points"), ValueError, "v_zero_points"),
    "qparams last dim": (_replace("k_scales", lambda kw: np.ones((B, SKV, HKV, 2), np.float32)), ValueError, "k_scales"),
    "qparams length": (_replace("v_zero_points", lambda kw: np.zeros((B, SKV - 1, HKV, 1), np.int8)), ValueError, "v_zero_points"),
    "qparams dtype": (_replace("q_scales", lambda kw: kw["q_scales"].astype(np.float64)), TypeError, "q_scales"),
    "zero point dtype": (_replace("k_zero_points", lambda kw: kw["k_zero_points"].astype(np.int32)), TypeError, "k_zero_points"),
    "NaN k scale": (_poke("k_scales", (0, 3, 1, 0), np.nan), ValueError, "k_scales"),
    "inf v scale": (_poke("v_scales", (0, 0, 0, 0), np.inf), ValueError, "v_scales"),
    "zero q scale": (_poke("q_scales", (0, 1, 2, 0), 0.0), ValueError, "q_scales"),
    "negative v scale": (_poke("v_scales", (0, 5, 1, 0), -1.0), ValueError, "v_scales"),
    "mask with causal": (lambda kw: kw.update(attn_mask=np.zeros((SQ, SKV), np.float32), is_causal=True), ValueError, "is_causal"),
    "mask shape": (lambda kw: kw.update(attn_mask=np.zeros((SQ, SKV - 1), np.float32)), ValueError, "attn_mask"),
    "mask rank": (lambda kw: kw.update(attn_mask=np.zeros((1, SQ, SKV), np.float32)), ValueError, "attn_mask"),
    "mask dtype": (lambda kw: kw.update(attn_mask=np.zeros((SQ, SKV), np.int32)), TypeError, "attn_mask"),
    "mask NaN": (lambda kw: kw.update(attn_mask=np.full((SQ, SKV), np.nan, np.float32)), ValueError, "attn_mask"),
    "dropout": (lambda kw: kw.update(dropout_p=0.1), ValueError, "dropout_p"),
    "scale NaN": (lambda kw: kw.update(scale=float("nan")), ValueError, "scale"),
    "scale beyond float32": (lambda kw: kw.update(scale=1e300), ValueError, "scale must be finite in float32"),
    "start_pos beyond int64": (_replace("start_pos", lambda kw: 2**64), ValueError, "start_pos"),
    "scale type": (lambda kw: kw.update(scale="0.1"), TypeError, "scale"),
    "scale int beyond float": (lambda kw: kw.update(scale=10**400), ValueError, "scale must be finite in float32"),
    # Finite values whose scores or output would overflow float32 (tests/test_overflow_guards.py).
    "scale x q scale overflow": (_both(_poke("q_scales", (0, 1, 2, 0), 1e30), lambda kw: kw.update(scale=1e10)),
                                 ValueError, "scale x q_scales can overflow float32 scores"),
    "k scale overflow": (_poke("k_scales", (0, 4, 1, 0), 1e35), ValueError, "k_scales can overflow float32 scores"),
    "v scale overflow": (_poke("v_scales", (0, 6, 0, 0), 1e36), ValueError, "v_scales can overflow the float32 output"),
    "float query overflow": (_float_query_of(3e38), ValueError, "query can overflow float32 scores"),
    "is_causal type": (lambda kw: kw.update(is_causal=1), TypeError, "is_causal"),
    "layout type": (lambda kw: kw.update(is_seq_at_dim_2="no"), TypeError, "is_seq_at_dim_2"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_raises_and_out_is_untouched(name):
    edit, exc, fragment = BAD[name]
    kw = _args()
    edit(kw)
    out = np.full((B, SQ, HQ, D), 123.0, dtype=np.float32)
    with pytest.raises(exc, match=fragment):
        qsdpa.quantized_sdpa(out=out, **kw)
    assert (out == 123.0).all(), "out was written although the call failed"


@pytest.mark.parametrize("make_out,exc,fragment", [
    (lambda: np.zeros((B, SQ, HQ, D + 1), np.float32), ValueError, "out must have the query's shape"),
    (lambda: np.zeros((B, SQ, HQ, D), np.float64), TypeError, "out must have dtype float32"),
    (lambda: np.zeros((B, HQ, SQ, D), np.float32).swapaxes(1, 2), ValueError, "out must be C-contiguous"),
    (lambda: [0.0], TypeError, "out must be a numpy.ndarray"),
    (lambda: _unaligned(np.zeros((B, SQ, HQ, D), np.float32)), ValueError, "out must be aligned"),
])
def test_bad_out(make_out, exc, fragment):
    with pytest.raises(exc, match=fragment):
        qsdpa.quantized_sdpa(out=make_out(), **_args())


def test_readonly_and_aliased_out():
    out = np.zeros((B, SQ, HQ, D), np.float32)
    out.setflags(write=False)
    with pytest.raises(ValueError, match="writeable"):
        qsdpa.quantized_sdpa(out=out, **_args())
    kw = _args()
    kw["query"] = np.zeros((B, SQ, HQ, D), np.float32)
    kw["q_scales"] = kw["q_zero_points"] = None
    with pytest.raises(ValueError, match="overlap"):
        qsdpa.quantized_sdpa(out=kw["query"], **kw)


def test_number_of_bad_input_classes():
    """The issue asks for every class; keep the list from shrinking unnoticed."""
    assert len(BAD) >= 35


def _unaligned(x):
    """x's values in an array at an odd address (numpy: flags.aligned is False)."""
    buf = np.zeros(x.nbytes + 1, np.uint8)
    y = np.frombuffer(buf.data, dtype=x.dtype, count=x.size, offset=1).reshape(x.shape)
    y[...] = x
    return y


def test_unaligned_inputs_are_copied_not_misread():
    """Reading a float32 array at an odd address through a float* is undefined behaviour (UBSan
    reports it): such inputs take the copying path and give the same result."""
    kw = _args()
    expected = qsdpa.quantized_sdpa(**kw)
    kw["k_scales"] = _unaligned(kw["k_scales"])
    kw["q_scales"] = _unaligned(kw["q_scales"])
    assert not kw["k_scales"].flags.aligned
    np.testing.assert_array_equal(qsdpa.quantized_sdpa(**kw), expected)
