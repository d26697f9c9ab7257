"""Property-based test (hypothesis): every variant against the float64 reference on random problems.

Random batch, GQA/MQA ratios, query length, start_pos, head dim (1..17, odd, and the usual sizes),
both layouts, every mask kind (causal, additive / bool, 2-D / 4-D, fully masked rows), int8 and
fp32 queries, 1-3 kernel threads, forced flash-decoding splits, and qparams at their extremes: zero points at -128 and
127, per-tensor scales from 1e-30 to 1e30 (Q and K chosen so that the scores stay representable
in float32), constant rows, rows of +-127 / -128, raw int8 rows and quantize_per_token rows.

Tolerance: test_attention.py's `3e-5 * max|V| + 3e-5 * |ref|`, plus the two terms a float32 kernel
cannot avoid on badly conditioned problems. (1) V's zero point: the kernels fold it into one term per
output row, sum_j w_j v8_j - sum_j w_j zp_j with w_j = p_j s_j (README), so their float32 rounding
scales with max s_j |zp_j| as well as max|V|; it shows where V rows sit on a large zero point and
dequantize to ~0 (constant rows with data == zp: max|V| = 0, yet a SIMD variant, whose two sums
round differently, gives ~1e-5 s |zp|). So the 3e-5 applies to max|V| + max s_j |zp_j| over the
keys read. (2) Scores rounded to float32 (int8 queries: exact integer
dots, then a few roundings, <= 8 eps |s|; fp32 queries: a D-term float32 dot, <= (D + 16) eps
sum|q||k|; an additive mask adds 2 eps |m|). Perturbing every score by at most delta moves each
softmax weight by a factor within exp(+-2 delta), so the output by at most expm1(2 delta) * max|V|.
For ordinary problems that term is far below 3e-5 * max|V|.

Case counts: the hypothesis profile in tests/conftest.py (QSDPA_HYPOTHESIS_PROFILE; "ci" runs
10 000 cases per variant). The test counts the cases it ran and fails if fewer than the profile's
max_examples, so the figure cannot silently shrink.
"""
from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings, strategies as st

import qsdpa
from qsdpa import _attention
from attention_reference import Case, dequant64

ATOL = RTOL = 3e-5
EPS32 = 2.0**-23
REFERENCE_BUDGET = 400_000  # B * H_q * S_q * S_kv * D multiply-adds per case, to keep cases cheap

ROW_KINDS = ("raw", "quantized", "zp_extreme", "constant", "saturated")
REGIMES = {"realistic": (0, 1, 0, 0, 0), "raw": (1, 0, 0, 0, 0), "extreme": (0, 0, 1, 1, 1), "mixed": (1, 1, 1, 1, 1)}
MASKS = ("none", "causal", "add2", "add4", "bool2", "bool4")
HEAD_DIMS = st.one_of(st.integers(1, 17), st.sampled_from([31, 32, 33, 63, 64, 65, 80, 96, 127, 128, 129, 256]))


@st.composite
def problems(draw):
    hkv = draw(st.integers(1, 4))
    p = dict(
        batch=draw(st.integers(1, 3)), kv_heads=hkv, q_heads=hkv * draw(st.sampled_from([1, 2, 3, 4, 8])),
        head_dim=draw(HEAD_DIMS), q_len=draw(st.one_of(st.just(1), st.integers(0, 40))),
        start=draw(st.one_of(st.integers(0, 8), st.integers(0, 700))), extra=draw(st.integers(0, 80)),
        seq_dim2=draw(st.booleans()), float_query=draw(st.booleans()), mask=draw(st.sampled_from(MASKS)),
        scale=draw(st.one_of(st.none(), st.floats(1e-3, 4.0), st.floats(-4.0, -1e-3))),
        splits=draw(st.sampled_from([0, 0, 0, 1, 2, 3, 7])),
        # mostly 1 (no OpenMP region, cheap on a busy machine); 2 and 3 for the split and merge paths
        threads=draw(st.sampled_from([1, 1, 1, 2, 3])),
        # log10 of: the K scales, the typical |score|, the V scales
        k_exp=draw(st.integers(-20, 20)), score_exp=draw(st.integers(-10, 1)), v_exp=draw(st.integers(-30, 30)),
        regimes=[draw(st.sampled_from(sorted(REGIMES))) for _ in "qkv"],
        seed=draw(st.integers(0, 2**32 - 1)))
    # Bound the reference's cost: shorten the query block, then the cache.
    def cost():
        return p["batch"] * p["q_heads"] * max(p["q_len"], 1) * (p["start"] + p["q_len"] + p["extra"]) * p["head_dim"]
    while cost() > REFERENCE_BUDGET and p["q_len"] > 1:
        p["q_len"] //= 2
    while cost() > REFERENCE_BUDGET and p["start"] > 0:
        p["start"] //= 2
    return p


def int8_rows(rng, shape, regime):
    """int8 data and per-row zero points, each row of a kind drawn with the regime's weights."""
    weights = np.array(REGIMES[regime], dtype=float)
    kinds = rng.choice(len(ROW_KINDS), size=shape[:-1], p=weights / weights.sum())
    data = rng.integers(-128, 128, size=shape, dtype=np.int16)
    zp = rng.integers(-128, 128, size=shape[:-1], dtype=np.int16)
    quantized, qzp, _ = None, None, None
    if (kinds == 1).any():
        quantized, _, qzp = qsdpa.quantize_per_token(rng.standard_normal(shape).astype(np.float32))
        data[kinds == 1] = quantized[kinds == 1]
        zp[kinds == 1] = qzp[..., 0][kinds == 1]
    ext = kinds == 2
    zp[ext] = rng.choice([-128, 127], size=int(ext.sum()))
    const = kinds == 3
    data[const] = rng.integers(-128, 128, size=(int(const.sum()), 1))
    zp[const] = np.where(rng.random(int(const.sum())) < 0.3, data[const][:, 0], zp[const])  # some all-zero rows
    sat = kinds == 4
    top = rng.random(int(sat.sum())) < 0.5
    data[sat] = np.where(top, 127, rng.choice([-127, -128], size=int(sat.sum())))[:, None]
    zp[sat] = np.where(top, -128, 127)
    return data.astype(np.int8), zp.astype(np.int8)[..., None]


def row_scales(rng, shape, exponent):
    """Per-row scales around 10**exponent (one decade of spread), float32, all > 0."""
    return (10.0 ** (exponent - rng.random(shape[:-1] + (1,)))).astype(np.float32)


def build(p):
    rng = np.random.default_rng(p["seed"])
    b, hq, hkv, d, sq = p["batch"], p["q_heads"], p["kv_heads"], p["head_dim"], p["q_len"]
    skv = p["start"] + sq + p["extra"]

    def shape(h, s):
        return (b, h, s, d) if p["seq_dim2"] else (b, s, h, d)

    k8, kz = int8_rows(rng, shape(hkv, skv), p["regimes"][1])
    v8, vz = int8_rows(rng, shape(hkv, skv), p["regimes"][2])
    ks = row_scales(rng, k8.shape, p["k_exp"])
    vs = row_scales(rng, v8.shape, p["v_exp"])
    # Query magnitude such that |score| is around 10**score_exp for typical rows.
    q_exp = p["score_exp"] - p["k_exp"] - math.log10(100.0 * math.sqrt(d))
    if p["float_query"]:
        q = (rng.standard_normal(shape(hq, sq)) * 10.0**q_exp).astype(np.float32)
        case = Case(q, k8, v8, None, None, ks, kz, vs, vz, p["seq_dim2"])
    else:
        q8, qz = int8_rows(rng, shape(hq, sq), p["regimes"][0])
        case = Case(q8, k8, v8, row_scales(rng, q8.shape, q_exp - 2), qz, ks, kz, vs, vz, p["seq_dim2"])
    mask = None
    kind = p["mask"]
    if kind.startswith(("add", "bool")):
        mshape = (sq, skv) if kind.endswith("2") else (b, hq, sq, skv)
        if kind.startswith("bool"):
            mask = rng.random(mshape) < rng.uniform(0.05, 1.0)
        else:
            mask = (rng.standard_normal(mshape) * 10.0 ** rng.uniform(-1, 1)).astype(np.float32)
            mask[rng.random(mshape) < rng.uniform(0.0, 0.6)] = -np.inf
        if sq > 0 and rng.random() < 0.3:  # a fully masked row
            mask[..., rng.integers(sq), :] = False if mask.dtype == np.bool_ else -np.inf
    return case, mask


def score_perturbation_bound(case, p, mask, n_keys):
    """Per query row, the largest float32 rounding of any of its scores, [B, H_q, S_q, 1] (BHSD)."""
    if case.q_scales is None:
        qa = np.abs(case.to_bhsd(case.query).astype(np.float64))
    else:
        qa = np.abs(case.to_bhsd(dequant64(case.query, case.q_scales, case.q_zero_points)))
    ka = np.abs(case.to_bhsd(dequant64(case.key, case.k_scales, case.k_zero_points)))[:, :, :n_keys]
    ka = np.repeat(ka, p["q_heads"] // p["kv_heads"], axis=1)
    scale = 1.0 / math.sqrt(p["head_dim"]) if p["scale"] is None else p["scale"]
    abs_scores = np.einsum("bhqd,bhkd->bhqk", qa, ka) * abs(scale)
    coef = (p["head_dim"] + 16) if case.q_scales is None else 8
    delta = coef * EPS32 * abs_scores.max(axis=-1, keepdims=True, initial=0.0)
    if mask is not None and mask.dtype == np.float32:
        m = np.abs(np.where(np.isfinite(mask), mask, 0.0)).astype(np.float64)
        m = np.broadcast_to(m, (p["batch"], p["q_heads"], p["q_len"], mask.shape[-1]))[..., :n_keys]
        delta = delta + 2 * EPS32 * m.max(axis=-1, keepdims=True, initial=0.0)
    return delta


def check_case(kmod, p):
    case, mask = build(p)
    causal = p["mask"] == "causal"
    arr, start, causal, scale, seq_dim2, out = _attention._prepare(
        case.query, case.key, case.value, p["start"], mask, 0.0, causal, p["scale"], case.q_zero_points,
        case.q_scales, case.k_zero_points, case.k_scales, case.v_zero_points, case.v_scales, case.seq_dim2, None)
    kmod.quantized_sdpa(arr["query"], arr["q_scales"], arr["q_zero_points"], arr["key"], arr["k_scales"],
                        arr["k_zero_points"], arr["value"], arr["v_scales"], arr["v_zero_points"], arr["attn_mask"],
                        start, causal, scale, seq_dim2, out, p["threads"], p["splits"])
    assert out.shape == case.query.shape and out.dtype == np.float32
    if out.size == 0:
        return
    ref = case.reference(p["start"], mask, causal, p["scale"])
    n_keys = case.key.shape[2 if case.seq_dim2 else 1] if mask is not None else p["start"] + p["q_len"]
    v = case.to_bhsd(dequant64(case.value, case.v_scales, case.v_zero_points))[:, :, :n_keys]
    vmax = float(np.abs(v).max())
    # The zero-point term's magnitude (docstring): the largest s_j |zp_j| among the V rows read.
    vzp = np.abs(case.to_bhsd(case.v_zero_points).astype(np.float64)) * case.to_bhsd(case.v_scales).astype(np.float64)
    zmax = float(vzp[:, :, :n_keys].max())
    delta = case.to_bhsd(score_perturbation_bound(case, p, mask, n_keys))
    tol = ATOL * (vmax + zmax) + RTOL * np.abs(ref) + np.expm1(2 * delta) * vmax
    err = np.abs(out.astype(np.float64) - ref)
    bad = ~(err <= tol)  # NaN fails too
    assert not bad.any(), (f"{int(bad.sum())} of {out.size} outputs off: max error {np.nanmax(err):.3g}, "
                           f"tolerance there {tol[bad].min():.3g}, max|V| {vmax:.3g}, max s|zp| {zmax:.3g}; "
                           f"problem {p}")


def test_matches_reference_on_random_problems(kmod, request):
    ran = 0

    @given(problems())
    def run(p):
        nonlocal ran
        ran += 1
        check_case(kmod, p)

    run()
    print(f"{request.node.name}: {ran} cases, 0 mismatches")
    assert ran >= settings().max_examples, f"only {ran} cases ran (profile asks for {settings().max_examples})"
