"""Every compiled variant's GEMM kernels against the numpy reference (per-ISA matrix).

Shapes straddle every vector width in the registry: f32 lanes 1/4/8/16 and int8 dot steps
1/16/32/64, each below, at and above, and not multiples of them; m crosses the kernels' row tiles
and their 64-row chunk.
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from qsdpa._quantize import quantize_per_token

from kernel_reference import (assert_within, dequant_gemm_ref, qk_exact_dot, qk_gemm_f32a_ref, qk_gemm_ref,
                              quantized_rows)

K_VALUES = [1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 257]
MN_VALUES = [(1, 1), (1, 17), (3, 5), (4, 4), (5, 9), (9, 33), (66, 7)]
N_COLS = [1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 80, 96, 128, 129]


def _rng(*key) -> np.random.Generator:
    """A generator seeded from the test's own parameters: reproducible, independent per case."""
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


# ---------------------------------------------------------------------------------------- qk_gemm
@pytest.mark.parametrize("k", K_VALUES)
@pytest.mark.parametrize("m,n", MN_VALUES)
def test_qk_gemm_bit_exact(kmod, m, n, k):
    rng = _rng("qk", m, n, k)
    a, sa, za = quantized_rows(rng, m, k)
    b, sb, zb = quantized_rows(rng, n, k)
    c = np.full((m, n), np.nan, dtype=np.float32)
    out = kmod.qk_gemm(a, sa, za, b, sb, zb, c, alpha=0.125)
    assert out is c
    np.testing.assert_array_equal(c, qk_gemm_ref(a, sa, za, b, sb, zb, 0.125))


@pytest.mark.parametrize("k", [1, 16, 63, 64, 65, 300])
def test_qk_gemm_extreme_values(kmod, k):
    """Zero points at both ends of int8, data at the corners, tiny and huge scales."""
    rng = _rng("qk-extreme", k)
    a, sa, za = quantized_rows(rng, 7, k, extreme=True)
    b, sb, zb = quantized_rows(rng, 6, k, extreme=True)
    c = np.empty((7, 6), dtype=np.float32)
    kmod.qk_gemm(a, sa, za, b, sb, zb, c)
    np.testing.assert_array_equal(c, qk_gemm_ref(a, sa, za, b, sb, zb, 1.0))


@pytest.mark.parametrize("sign", [1, -1])
def test_qk_gemm_largest_exact_k(kmod, sign):
    """k = MAX_DOT_K with every |a - za| = |b - zb| = 255: the int32 result is near its limit."""
    k = kmod.MAX_DOT_K
    a = np.full((2, k), -128, dtype=np.int8)
    za = np.array([127, 127], dtype=np.int8)
    b = np.full((3, k), 127 if sign > 0 else -128, dtype=np.int8)
    zb = np.array([-128, -128, -128] if sign > 0 else [127, 127, 127], dtype=np.int8)
    sa = np.ones(2, dtype=np.float32)
    sb = np.ones(3, dtype=np.float32)
    d = qk_exact_dot(a, za, b, zb)
    assert abs(int(d[0, 0])) == k * 255 * 255
    c = np.empty((2, 3), dtype=np.float32)
    kmod.qk_gemm(a, sa, za, b, sb, zb, c)
    np.testing.assert_array_equal(c, qk_gemm_ref(a, sa, za, b, sb, zb, 1.0))


def test_qk_gemm_strided(kmod):
    """Row strides wider than k, qparams with a stride (the [B, S, H, D] cache layout), strided c."""
    rng = _rng("qk-strided")
    m, n, k, heads = 5, 19, 40, 3
    a_big, sa_big, za_big = quantized_rows(rng, m, 3 * k)
    b_big, sb_big, zb_big = quantized_rows(rng, n * heads, k + 9)
    a = a_big[:, 5:5 + k]
    b = b_big[1::heads, 2:2 + k]
    sb, zb = sb_big[1::heads], zb_big[1::heads]
    c_big = np.full((m, n + 11), -7.0, dtype=np.float32)
    c = c_big[:, 3:3 + n]
    kmod.qk_gemm(a, sa_big, za_big, b, sb, zb, c, alpha=0.5)
    np.testing.assert_array_equal(c, qk_gemm_ref(a, sa_big, za_big, b, sb, zb, 0.5))
    assert (c_big[:, :3] == -7.0).all() and (c_big[:, 3 + n:] == -7.0).all(), "wrote outside c"


def test_qk_gemm_k_limit(kmod):
    k = kmod.MAX_DOT_K + 1
    a = np.zeros((1, k), np.int8)
    c = np.zeros((1, 1), np.float32)
    with pytest.raises(ValueError, match="k"):
        kmod.qk_gemm(a, np.ones(1, np.float32), np.zeros(1, np.int8), a, np.ones(1, np.float32),
                     np.zeros(1, np.int8), c)


# ----------------------------------------------------------------------------------- qk_gemm_f32a
@pytest.mark.parametrize("k", K_VALUES)
@pytest.mark.parametrize("m,n", MN_VALUES)
def test_qk_gemm_f32a(kmod, m, n, k):
    rng = _rng("qkf", m, n, k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b, sb, zb = quantized_rows(rng, n, k)
    c = np.full((m, n), np.nan, dtype=np.float32)
    kmod.qk_gemm_f32a(a, b, sb, zb, c, alpha=0.3)
    ref, tol = qk_gemm_f32a_ref(a, b, sb, zb, 0.3)
    assert_within(c, ref, tol, f"qk_gemm_f32a m={m} n={n} k={k}")


def test_qk_gemm_f32a_extreme_and_strided(kmod):
    rng = _rng("qkf-extreme")
    m, n, k = 6, 10, 70
    a_big = (rng.standard_normal((m, k + 5)) * 1e3).astype(np.float32)
    a = a_big[:, 5:]
    b_big, sb_big, zb_big = quantized_rows(rng, 2 * n, k, extreme=True)
    b, sb, zb = b_big[::2], sb_big[::2], zb_big[::2]
    c = np.empty((m, n), dtype=np.float32)
    kmod.qk_gemm_f32a(a, b, sb, zb, c)
    ref, tol = qk_gemm_f32a_ref(a, b, sb, zb, 1.0)
    assert_within(c, ref, tol, "qk_gemm_f32a extreme")


# ----------------------------------------------------------------------------------- dequant_gemm
@pytest.mark.parametrize("n", N_COLS)
@pytest.mark.parametrize("m,k", [(1, 1), (1, 37), (2, 16), (4, 5), (5, 64), (9, 33)])
def test_dequant_gemm(kmod, m, k, n):
    rng = _rng("dq", m, k, n)
    a = rng.random((m, k), dtype=np.float32)  # softmax weights are in [0, 1]
    b, sb, zb = quantized_rows(rng, k, n)
    c = np.full((m, n), np.nan, dtype=np.float32)  # beta = 0 must not read c
    out = kmod.dequant_gemm(a, b, sb, zb, c, beta=0.0)
    assert out is c
    ref, tol = dequant_gemm_ref(a, b, sb, zb)
    assert_within(c, ref, tol, f"dequant_gemm m={m} k={k} n={n}")


@pytest.mark.parametrize("n", [3, 16, 33, 128])
def test_dequant_gemm_accumulates(kmod, n):
    rng = _rng("dq-acc", n)
    m, k = 3, 21
    a = rng.standard_normal((m, k)).astype(np.float32)
    b, sb, zb = quantized_rows(rng, k, n, extreme=True)
    c0 = rng.standard_normal((m, n)).astype(np.float32)
    c = c0.copy()
    kmod.dequant_gemm(a, b, sb, zb, c, beta=1.0)
    ref, tol = dequant_gemm_ref(a, b, sb, zb, c0, beta=1.0)
    assert_within(c, ref, tol, "dequant_gemm beta=1")


def test_dequant_gemm_strided(kmod):
    """V rows of one head inside a [S, H, D] cache: row stride H*D, qparams stride H; strided c."""
    rng = _rng("dq-strided")
    s, h, d, m = 23, 4, 24, 5
    cache, scales, zps = quantized_rows(rng, s * h, d)
    cache = cache.reshape(s, h, d)
    scales, zps = scales.reshape(s, h), zps.reshape(s, h)
    head = 2
    b, sb, zb = cache[:, head, :], scales[:, head], zps[:, head]
    a_big = rng.random((m, s + 4), dtype=np.float32)
    a = a_big[:, 4:]
    c_big = np.full((m, d + 6), 5.0, dtype=np.float32)
    c = c_big[:, 2:2 + d]
    kmod.dequant_gemm(a, b, sb, zb, c)
    ref, tol = dequant_gemm_ref(a, b, sb, zb)
    assert_within(c, ref, tol, "dequant_gemm strided")
    assert (c_big[:, :2] == 5.0).all() and (c_big[:, 2 + d:] == 5.0).all(), "wrote outside c"


# ------------------------------------------------------------------------------------- bad input
def _qk_args(m=2, n=3, k=8):
    rng = _rng("bad")
    a, sa, za = quantized_rows(rng, m, k)
    b, sb, zb = quantized_rows(rng, n, k)
    return dict(a=a, a_scales=sa, a_zero_points=za, b=b, b_scales=sb, b_zero_points=zb,
                c=np.full((m, n), 3.0, np.float32))


@pytest.mark.parametrize("field,value,exc,match", [
    ("a", np.zeros((2, 8), np.int16), TypeError, "a must have dtype int8"),
    ("a", [[1, 2]], TypeError, "a must be a numpy.ndarray"),
    ("a_scales", np.ones(2, np.float64), TypeError, "a_scales must have dtype float32"),
    ("b_scales", np.ones(2, np.float32), ValueError, "b_scales must have 3 elements"),
    ("b_zero_points", np.zeros((3, 1), np.int8), ValueError, "b_zero_points must be 1-D"),
    ("b", np.zeros((3, 7), np.int8), ValueError, "b must have a.shape"),
    ("b", np.zeros((3, 16), np.int8)[:, ::2], ValueError, "b must have contiguous rows"),
    ("c", np.zeros((2, 4), np.float32), ValueError, "c must have shape"),
    ("c", np.zeros((2, 3), np.float32).T.copy().T, ValueError, "c must have contiguous rows"),
    ("c", np.zeros((2, 3), np.float32).astype(">f4"), TypeError, "c must have dtype float32"),
])
def test_qk_gemm_rejects_bad_input(kmod, field, value, exc, match):
    args = _qk_args()
    args[field] = value
    c_before = args["c"].copy()
    with pytest.raises(exc, match=match):
        kmod.qk_gemm(**args)
    if field != "c":
        np.testing.assert_array_equal(args["c"], c_before)


def test_rejects_readonly_and_aliased_output(kmod):
    args = _qk_args()
    args["c"].setflags(write=False)
    with pytest.raises(ValueError, match="writeable"):
        kmod.qk_gemm(**args)
    a = np.zeros((4, 4), np.float32)
    b, sb, zb = quantized_rows(_rng("alias"), 4, 4)
    with pytest.raises(ValueError, match="overlap"):
        kmod.dequant_gemm(a, b, sb, zb, a)


def test_dequant_gemm_rejects_bad_beta(kmod):
    b, sb, zb = quantized_rows(_rng("beta"), 4, 4)
    c = np.full((2, 4), 9.0, np.float32)
    with pytest.raises(ValueError, match="beta"):
        kmod.dequant_gemm(np.ones((2, 4), np.float32), b, sb, zb, c, beta=0.5)
    assert (c == 9.0).all()


def test_empty_shapes(kmod):
    b, sb, zb = quantized_rows(_rng("empty"), 4, 5)
    c = np.empty((0, 5), np.float32)
    assert kmod.dequant_gemm(np.empty((0, 4), np.float32), b, sb, zb, c) is c
    c = np.full((2, 5), 7.0, np.float32)
    kmod.dequant_gemm(np.empty((2, 0), np.float32), np.empty((0, 5), np.int8), np.empty(0, np.float32),
                      np.empty(0, np.int8), c)
    assert (c == 0.0).all(), "k = 0 with beta = 0 gives zeros"


# ------------------------------------------------------------------ the least-work decode step
# The bench's machine probe for the cold decode targets (qsdpa/_bench.py StepProbe): a step that
# does only the work no kernel of these semantics can skip. Tested here with the kernels, so that
# every compiled variant runs it (natively, under qemu and through SIMDe).

def _step_inputs(rng, keys, hq, hkv, d):
    q = quantize_per_token(rng.standard_normal((1, 1, hq, d), dtype=np.float32))
    k = quantize_per_token(rng.standard_normal((1, keys, hkv, d), dtype=np.float32))
    v = quantize_per_token(rng.standard_normal((1, keys, hkv, d), dtype=np.float32))
    return q + k + v


@pytest.mark.parametrize("keys,hq,hkv,d", [(1, 16, 2, 128), (65, 8, 8, 64), (300, 9, 3, 64), (2049, 32, 8, 128)])
def test_decode_step_probe_every_variant(kmod, keys, hq, hkv, d):
    """The least-work step's totals show it read every byte of K and V and used each as the step
    says: its dots (exact integers, in this variant's scheme: u8 q + 128 with the key sums, or
    s16 q - zq), and P.V with weights exp(0) * V scale, at 1 and 2 threads and both prefetch forms."""
    rng = np.random.default_rng(keys)
    q8, qs, qz, k8, ks, kz, v8, vs, vz = _step_inputs(rng, keys, hq, hkv, d)
    out = np.full((1, 1, hq, d), 7.0, np.float32)
    rep = hq // hkv
    qg = q8[0, 0].astype(np.int64).reshape(hkv, rep, d)
    k64 = k8[0].astype(np.int64)
    pv_want = rep * float((vs[0, :, :, 0].astype(np.float64) * v8[0].astype(np.float64).sum(-1)).sum())
    pv_scale = rep * float(np.abs(vs[0, :, :, 0, None] * v8[0]).sum())
    for threads in (1, 2):
        for to_l1 in (True, False):
            dots, key_sums, pv, scheme = kmod._decode_step_probe(q8, qs, qz, k8, ks, kz, v8, vs, vz, keys - 1, out,
                                                                 threads, to_l1)
            assert scheme in ("u8", "s16")
            if scheme == "u8":
                assert dots == int(np.einsum("grd,sgd->", qg + 128, k64)) and key_sums == int(k64.sum())
            else:
                zq = qz[0, 0].astype(np.int64).reshape(hkv, rep, 1)
                assert dots == int(np.einsum("grd,sgd->", qg - zq, k64)) and key_sums == 0
            assert abs(pv - pv_want) <= 1e-5 * pv_scale, (threads, to_l1)
    assert (out == 7.0).all()  # it writes nothing


def test_decode_step_probe_refuses_what_it_does_not_take(kmod):
    rng = np.random.default_rng(0)
    q8, qs, qz, k8, ks, kz, v8, vs, vz = _step_inputs(rng, 16, 8, 2, 64)
    out = np.empty((1, 1, 8, 64), np.float32)
    args = (q8, qs, qz, k8, ks, kz, v8, vs, vz, 15, out)
    with pytest.raises(ValueError, match="threads"):
        kmod._decode_step_probe(*args, 0)
    q2, qs2, qz2 = quantize_per_token(rng.standard_normal((1, 2, 8, 64), dtype=np.float32))
    with pytest.raises(ValueError, match="batch 1"):  # two query positions: not a decode step
        kmod._decode_step_probe(q2, qs2, qz2, k8, ks, kz, v8, vs, vz, 14, np.empty((1, 2, 8, 64), np.float32))
    with pytest.raises(ValueError, match="contiguous"):  # a [1, H, S, D] cache seen as [1, S, H, D]
        kt, vt = (np.ascontiguousarray(a.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3) for a in (k8, v8))
        kmod._decode_step_probe(q8, qs, qz, kt, ks, kz, vt, vs, vz, 15, out)
    with pytest.raises(ValueError, match="8 query heads"):
        qw, qsw, qzw = _step_inputs(rng, 1, 18, 2, 64)[:3]
        kmod._decode_step_probe(qw, qsw, qzw, k8, ks, kz, v8, vs, vz, 15, np.empty((1, 1, 18, 64), np.float32))
    with pytest.raises(TypeError, match="key"):
        kmod._decode_step_probe(q8, qs, qz, k8.astype(np.float32), ks, kz, v8, vs, vz, 15, out)
