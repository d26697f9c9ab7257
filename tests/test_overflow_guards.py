"""Finite inputs that would overflow float32 are refused, on every variant, before `out` is written.

Before these guards, accepted finite inputs whose scores overflowed float32 (q_scales 1e30 with
scale 1e10, a float32 query of 3e38, a scale near FLT_MAX) gave finite, wrong rows that differed
between scalar and the SIMD variants (tools/repro/score_overflow_garbage.py, scale_overflow.py);
quantize_per_token gave a row whose range exceeds float32 an infinite scale
(quantize_range_inf_scale.py); scale=10**400 raised OverflowError (scale_bigint_overflowerror.py);
and scratch_layout wrapped on 64-bit overflow (scratch_layout_wrap.py). The bound is conservative
(from maxima, csrc/attention_binding.h): large inputs inside it still compute correctly.
"""
from __future__ import annotations

import fractions

import numpy as np
import pytest

import qsdpa
from qsdpa import _attention
from qsdpa._quantize import quantize_per_token_reference
from attention_reference import Case, error_over_tolerance, make_case

FLT_MAX = float(np.finfo(np.float32).max)
SENTINEL = 123.0


def _prepared(case, start_pos, scale=None, out=None):
    return _attention._prepare(case.query, case.key, case.value, start_pos, None, 0.0, False, scale,
                               case.q_zero_points, case.q_scales, case.k_zero_points, case.k_scales,
                               case.v_zero_points, case.v_scales, case.seq_dim2, out)


def _run(kmod, case, start_pos, scale=None, threads=1):
    """One call of this variant at an explicit thread count, into a sentinel-filled out; returns
    (out, whether the kernel itself checked the K/V scales: the deferred path)."""
    out = np.full(case.query.shape, SENTINEL, np.float32)
    arr, start, causal, scale_value, seq_dim2, out = _prepared(case, start_pos, scale, out)
    args = (arr["query"], arr["q_scales"], arr["q_zero_points"], arr["key"], arr["k_scales"], arr["k_zero_points"],
            arr["value"], arr["v_scales"], arr["v_zero_points"], None, start, causal, scale_value, seq_dim2, out)
    try:
        kernel_checks = kmod.attention_plan(*args, threads, 0)["kernel_checks_kv_scales"]
    except ValueError:
        kernel_checks = None  # the query side is refused before any plan
    kmod.quantized_sdpa(*args, threads, 0)
    return out, kernel_checks


def _expect_refused(kmod, case, start_pos, fragment, scale=None, threads=1):
    out = np.full(case.query.shape, SENTINEL, np.float32)
    arr, start, causal, scale_value, seq_dim2, out = _prepared(case, start_pos, scale, out)
    args = (arr["query"], arr["q_scales"], arr["q_zero_points"], arr["key"], arr["k_scales"], arr["k_zero_points"],
            arr["value"], arr["v_scales"], arr["v_zero_points"], None, start, causal, scale_value, seq_dim2, out)
    with pytest.raises(ValueError, match=fragment) as info:
        kmod.quantized_sdpa(*args, threads, 0)
    assert (out == SENTINEL).all(), "out was written although the call was refused"
    return str(info.value)


# tools/repro/score_overflow_garbage.py's inputs: 4 keys, key 1 the clear winner.
def _garbage_case(float_query):
    b, s, h, d = 1, 4, 1, 8
    k8 = np.zeros((b, s, h, d), np.int8)
    k8[0, 1] = 3
    k8[0, 2] = -2
    kz = np.zeros((b, s, h, 1), np.int8)
    ks = np.ones((b, s, h, 1), np.float32)
    v8 = np.arange(s * d, dtype=np.int8).reshape(b, s, h, d)
    if float_query:
        q = np.full((b, 1, h, d), 3e38, np.float32)
        return Case(q, k8, v8, None, None, ks, kz, ks.copy(), kz.copy(), False)
    q8 = np.ones((b, 1, h, d), np.int8)
    qs = np.full((b, 1, h, 1), 1e30, np.float32)
    return Case(q8, k8, v8, qs, np.zeros((b, 1, h, 1), np.int8), ks, kz, ks.copy(), kz.copy(), False)


def test_int8_query_score_overflow_is_refused(kmod):
    msg = _expect_refused(kmod, _garbage_case(False), 3, r"scale x q_scales can overflow float32 scores", scale=1e10)
    assert "1e+10" in msg and "1e+30" in msg


def test_float_query_overflow_is_refused(kmod):
    msg = _expect_refused(kmod, _garbage_case(True), 3, r"query can overflow float32 scores", scale=2.0)
    assert "3e+38" in msg


@pytest.mark.parametrize("scale", [1e38, 3e38])
def test_scale_near_flt_max_is_refused(kmod, scale):
    # tools/repro/scale_overflow.py: a float query, |scale| <= FLT_MAX, scores past it.
    case = make_case(np.random.default_rng(0), 1, 1, 1, 1, 16, 8, float_query=True)
    _expect_refused(kmod, case, 15, r"scale x query x k_scales can overflow float32 scores: k_scales holds",
                    scale=scale)


# Decode on a [B, S, H, D] cache at 1 thread is one work item: the kernel checks the K/V scales as it
# gathers them (kernel_checks_kv_scales). Prefill rows on a [B, H, S, D] cache make several items
# without KV splits: the binding checks them before the call. Both must apply the overflow limits.
PATHS = {"kernel-checked": dict(q_len=1, seq_dim2=False, kernel_checks=True),
         "binding-checked": dict(q_len=40, seq_dim2=True, kernel_checks=False)}


def _path_case(path, seed=1):
    p = PATHS[path]
    return make_case(np.random.default_rng(seed), 1, 8, 2, p["q_len"], 300, 64, seq_dim2=p["seq_dim2"])


def _where(case, pos, head):
    return (0, head, pos, 0) if case.seq_dim2 else (0, pos, head, 0)


@pytest.mark.parametrize("path", list(PATHS))
def test_k_scale_overflow_is_refused_on_both_check_paths(kmod, path):
    case = _path_case(path)
    start = 300 - case.query.shape[2 if case.seq_dim2 else 1]
    _, kernel_checks = _run(kmod, case, start)
    assert kernel_checks is PATHS[path]["kernel_checks"]
    case.k_scales[_where(case, 200, 1)] = 1e34  # finite: accepted before
    msg = _expect_refused(kmod, case, start, r"scale x q_scales x k_scales can overflow float32 scores: k_scales "
                                             r"holds 1e\+34 at batch 0, head 1, position 200")
    assert "head_dim (64)" in msg
    # A NaN earlier in the cache is still named as such.
    case.k_scales[_where(case, 100, 0)] = np.nan
    _expect_refused(kmod, case, start, r"k_scales must be finite and > 0; found nan at batch 0, head 0, position 100")


@pytest.mark.parametrize("path", list(PATHS))
def test_v_scale_overflow_is_refused_on_both_check_paths(kmod, path):
    case = _path_case(path, seed=2)
    start = 300 - case.query.shape[2 if case.seq_dim2 else 1]
    case.v_scales[_where(case, 299, 0)] = 1e36
    _expect_refused(kmod, case, start, r"v_scales can overflow the float32 output: v_scales holds 1e\+36 at "
                                       r"batch 0, head 0, position 299, and keys \(300\)")


@pytest.mark.parametrize("threads", [1, 2])
def test_large_but_safe_inputs_still_compute_correctly(kmod, threads):
    # Scales some 20-30 orders of magnitude past realistic ones, inside the bound: the same result
    # (to the attention tests' tolerance) as float64 attention on the dequantized inputs.
    case = make_case(np.random.default_rng(5), 1, 8, 2, 3, 50, 32)
    case.q_scales *= np.float32(1e10)
    case.k_scales *= np.float32(1e-8)   # scores ~1e2 x the usual: a sharp but not one-hot softmax
    case.v_scales *= np.float32(1e30)   # outputs ~1e30; limit 2^125 / (50 x 255) ~ 3e33
    out, _ = _run(kmod, case, 47, threads=threads)
    assert np.isfinite(out).all() and np.abs(out).max() > 1e28
    assert (error_over_tolerance(case, out, case.reference(47)) <= 1).all()


def test_large_but_safe_float_query_still_computes_correctly(kmod):
    case = make_case(np.random.default_rng(6), 1, 4, 2, 1, 40, 16, float_query=True)
    case.query[...] = case.query * np.float32(1e30)  # max|q| x D x 256 ~ 1.5e34 < 2^125
    case.k_scales *= np.float32(1e-30)               # scores of ordinary size
    out, _ = _run(kmod, case, 39)
    assert (error_over_tolerance(case, out, case.reference(39)) <= 1).all()


def test_zero_scale_accepts_any_finite_k_scale(kmod):
    case = make_case(np.random.default_rng(7), 1, 4, 2, 1, 20, 16)
    case.k_scales[...] = np.float32(FLT_MAX)
    out, _ = _run(kmod, case, 19, scale=0.0)  # every score 0: a plain average of V
    assert (error_over_tolerance(case, out, case.reference(19, scale=0.0)) <= 1).all()


def test_public_entry_and_torch_op_refuse_too():
    # The C fast path (out=, a float scale), the Python fast path (no out=), the complete path (an
    # int or numpy scale) and the torch op all reach the same checks.
    case = _garbage_case(False)
    kw = dict(case.kwargs(), start_pos=3)
    for scale in (1e10, 10**10, np.float64(1e10)):
        out = np.full(case.query.shape, SENTINEL, np.float32)
        with pytest.raises(ValueError, match="scale x q_scales can overflow float32 scores"):
            qsdpa.quantized_sdpa(case.query, case.key, case.value, scale=scale, out=out, **kw)
        assert (out == SENTINEL).all()
        with pytest.raises(ValueError, match="scale x q_scales can overflow float32 scores"):
            qsdpa.quantized_sdpa(case.query, case.key, case.value, scale=scale, **kw)
    torch = pytest.importorskip("torch")
    pytest.importorskip("qsdpa.torch")  # registers the op
    t = torch.from_numpy
    out = torch.full(case.query.shape, SENTINEL)
    with pytest.raises(ValueError, match="scale x q_scales can overflow float32 scores"):
        torch.ops.qsdpa.custom_quantized_sdpa.out(t(case.query), t(case.key), t(case.value), 3, None, 0.0, False, 1e10,
                                                  t(case.q_zero_points), t(case.q_scales), t(case.k_zero_points),
                                                  t(case.k_scales), t(case.v_zero_points), t(case.v_scales), False,
                                                  out=out)
    assert (out == SENTINEL).all()


@pytest.mark.parametrize("scale", [10**400, -(10**400), fractions.Fraction(10**400, 3)])
def test_scale_beyond_float_range_is_a_value_error(scale):
    case = make_case(np.random.default_rng(8), 1, 2, 1, 1, 8, 8)
    out = np.full(case.query.shape, SENTINEL, np.float32)
    with pytest.raises(ValueError, match=r"scale must be finite in float32 .* too large for float"):
        qsdpa.quantized_sdpa(case.query, case.key, case.value, 7, scale=scale, out=out, **case.kwargs())
    assert (out == SENTINEL).all()


# quantize: a row of finite values whose range (max - min) exceeds float32.

def _quantize_outputs(shape):
    return (np.full(shape, 7, np.int8), np.full(shape[:-1] + (1,), 5.0, np.float32),
            np.full(shape[:-1] + (1,), 3, np.int8))


@pytest.mark.parametrize("row", [[3e38, -3e38, 1.0, 0.0], [FLT_MAX, -1e38, 0.0, 2.0], [-FLT_MAX, 1e32, 5.0, 1.0]])
@pytest.mark.parametrize("threads", [1, 2])
def test_quantize_row_range_beyond_float32_is_refused(kmod, row, threads):
    x = np.zeros((1, 3, 4), np.float32)
    x[0, 1] = row
    outs = _quantize_outputs(x.shape)
    with pytest.raises(ValueError, match=r"x's range \(max - min, with 0\) must fit in float32 .* row 1 spans"):
        kmod.quantize_rows(x, *outs, threads, False)
    for o, v in zip(outs, (7, 5.0, 3)):
        assert (o == v).all(), "an output was written although the call was refused"
    with pytest.raises(ValueError, match="row 1 spans"):
        kmod.quantize_rows(x, None, None, None, threads, True)


def test_quantize_first_bad_row_decides(kmod):
    # Rows are checked in order, in parallel too: a NaN row first is reported as before (its index),
    # a range row first raises.
    for threads in (1, 2):
        x = np.zeros((1, 5000, 16), np.float32)  # 80 000 floats: the parallel check
        x[0, 4000, :2] = (3e38, -3e38)
        x[0, 4500, 3] = np.nan
        with pytest.raises(ValueError, match="row 4000 spans"):
            kmod.quantize_rows(x, None, None, None, threads, True)
        x[0, 3000, 5] = np.inf
        assert kmod.quantize_rows(x, *_quantize_outputs(x.shape), threads, False) == 3000


def test_quantize_per_token_and_cache_update_refuse_the_row():
    x = np.array([[3e38, -3e38, 1.0, 0.0]], np.float32)
    with pytest.raises(ValueError, match=r"x's range .* must fit in float32"):
        qsdpa.quantize_per_token(x)
    cache = qsdpa.QuantizedKVCache(1, 4, 1, 4)
    with pytest.raises(ValueError, match=r"^k's range .* must fit in float32"):
        cache.update(0, x.reshape(1, 1, 1, 4), np.ones((1, 1, 1, 4), np.float32))
    assert cache.length == 0


@pytest.mark.parametrize("row", [[1.7e38, -1.7e38, 0.0, 1.0], [FLT_MAX, 0.0, 1.0, 2.0], [-FLT_MAX, -1.0, 0.0, 0.0]])
def test_quantize_row_range_at_the_float32_edge_is_accepted(kmod, row):
    x = np.array([[row]], np.float32)
    q8, s, z = _quantize_outputs(x.shape)
    assert kmod.quantize_rows(x, q8, s, z, 1, False) == -1
    assert np.isfinite(s).all() and s[0, 0, 0] > 1e35
    ref_q8, ref_s, ref_z = quantize_per_token_reference(x)
    np.testing.assert_array_equal(q8, ref_q8)
    np.testing.assert_array_equal(s, ref_s)
    np.testing.assert_array_equal(z, ref_z)


# scratch_layout: checked 64-bit arithmetic.

@pytest.mark.parametrize("args,fragment", [
    ((2**63, 1, 1, 1), "threads x the slice size overflows 64 bits"),
    ((2**62, 2**20, 256, 1024), "threads x the slice size overflows 64 bits"),
    ((1, 2**62, 256, 1024), r"the slice size \(from rows, kv_block, head_dim and heads\) overflows 64 bits"),
    ((1, 1, 2**61, 1), "the slice size"),
    ((1, 1, 1, 2**64 - 1), "the slice size"),
])
def test_scratch_layout_overflow_is_a_value_error(args, fragment):
    with pytest.raises(ValueError, match=fragment) as info:
        qsdpa.scratch_layout(*args)
    assert f"threads={args[0]}, rows={args[1]}, kv_block={args[2]}, head_dim={args[3]}" in str(info.value)


def test_scratch_layout_partials_and_argument_range():
    with pytest.raises(ValueError, match="partial_items x the partial record size"):
        qsdpa.scratch_layout(1, 4, 64, 128, partial_items=2**60)
    with pytest.raises(ValueError, match=r"threads must be >= 1 and < 2\*\*64"):
        qsdpa.scratch_layout(2**64, 1, 1, 1)
    with pytest.raises(ValueError, match=r"partial_items must be an int >= 0 and < 2\*\*64"):
        qsdpa.scratch_layout(1, 1, 1, 1, partial_items=2**64)
    for bad in (1.5, "2", True, None):  # a wrong type is a TypeError, as for the other sizes
        with pytest.raises(TypeError, match="partial_items must be an int, got"):
            qsdpa.scratch_layout(1, 1, 1, 1, partial_items=bad)
    # Large sizes that fit are still laid out exactly.
    L = qsdpa.scratch_layout(2**20, 64, 256, 128, partial_items=2**20)
    assert L["total_bytes"] == L["partials_offset"] + 2**20 * L["partial_record_bytes"]
    assert L["partials_offset"] == 2**20 * L["slice_bytes"]


# An additive mask above the score limit could take score + mask past float32; up to it, and any
# negative value down to -inf, it computes what float64 does on the same dequantized inputs.
def _mask_case():
    return make_case(np.random.default_rng(7), 1, 4, 2, 1, 16, 32, float_query=True)


def _masked(case, mask, out=None):
    return qsdpa.quantized_sdpa(case.query, case.key, case.value, 15, attn_mask=mask, k_zero_points=case.k_zero_points,
                                k_scales=case.k_scales, v_zero_points=case.v_zero_points, v_scales=case.v_scales,
                                out=out)


@pytest.mark.parametrize("value", [np.inf, np.nan, 3e38, 2.0**125 * 1.0000001])
def test_mask_value_past_the_score_limit_is_refused(value):
    case = _mask_case()
    mask = np.zeros((1, 16), np.float32)
    mask[0, 5] = value
    out = np.full(case.query.shape, SENTINEL, np.float32)
    with pytest.raises(ValueError, match=r"attn_mask must not contain NaN or values above 2\^125"):
        _masked(case, mask, out)
    assert (out == SENTINEL).all()


@pytest.mark.parametrize("value", [2.0**125, 1e30, -3e38, -np.inf])
def test_mask_value_within_the_limit_matches_float64(value):
    case = _mask_case()
    mask = np.zeros((1, 16), np.float32)
    mask[0, 5] = value
    got = _masked(case, mask)
    v = qsdpa.dequantize_per_token(case.value, case.v_scales, case.v_zero_points).astype(np.float64)
    k = qsdpa.dequantize_per_token(case.key, case.k_scales, case.k_zero_points).astype(np.float64)
    q = case.query.astype(np.float64)
    for h in range(q.shape[2]):
        s = k[0, :, h // 2] @ q[0, 0, h] / np.sqrt(32) + mask[0].astype(np.float64)
        w = np.exp(s - s.max())
        want = (w / w.sum()) @ v[0, :, h // 2]
        np.testing.assert_allclose(got[0, 0, h], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    if value > 0:  # the masked-up key takes all the weight
        np.testing.assert_allclose(got[0, 0, 0], v[0, 5, 0], rtol=1e-5, atol=1e-5 * np.abs(v[0, 5, 0]).max())
