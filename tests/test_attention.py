"""quantized_sdpa on every compiled variant against a float64 numpy reference on the dequantized
tensors (ExecuTorch semantics), plus quantize_per_token, scratch layout and arena behaviour.

Tolerance: |out - ref| <= 3e-5 * max|V| + 3e-5 * |ref| (absolute against the largest value a
convex combination of V rows can reach). Its sources: float32 dot products over D (exact for
int8 queries), float32 accumulation of P.V over the keys, and the vectorised exp (< 1 ulp,
test_vexp_accuracy). Observed errors are around 1e-6 of max|V|.
"""
from __future__ import annotations

import os
import zlib

import numpy as np
import pytest

import qsdpa
from qsdpa import _attention
from attention_reference import error_over_tolerance, make_case


def _rng(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def run_variant(kmod, case, start_pos, *, mask=None, is_causal=False, scale=None, out=None, force_splits=0):
    prepared = _attention._prepare(case.query, case.key, case.value, start_pos, mask, 0.0, is_causal, scale,
                                   case.q_zero_points, case.q_scales, case.k_zero_points, case.k_scales,
                                   case.v_zero_points, case.v_scales, case.seq_dim2, out)
    return _attention._run(kmod, *prepared, force_splits=force_splits)


def check(kmod, case, start_pos, *, mask=None, is_causal=False, scale=None, force_splits=0):
    out = run_variant(kmod, case, start_pos, mask=mask, is_causal=is_causal, scale=scale, force_splits=force_splits)
    ref = case.reference(start_pos, mask, is_causal, scale)
    assert out.shape == case.query.shape and out.dtype == np.float32
    ratio = error_over_tolerance(case, out, ref)
    assert (ratio <= 1).all(), (f"max error {np.abs(out.astype(np.float64) - ref).max():.3g}, "
                                f"{np.nanmax(ratio):.3g}x the tolerance")
    return out


SHAPES = [
    # (batch, q_heads, kv_heads, q_len, kv_len, head_dim, start_pos, causal)   what it covers
    (1, 32, 8, 1, 2048, 128, 2047, False),   # decode deep into the cache, Llama-3-like GQA 4
    (1, 8, 2, 64, 64, 64, 0, True),          # prefill
    (1, 8, 2, 37, 333, 64, 200, True),       # chunked prefill, start_pos > 0, odd lengths
    (1, 8, 2, 40, 300, 64, 250, True),       # chunked prefill: a KV block starts on a query block's diagonal (row tiles with no key in it)
    (2, 4, 4, 5, 77, 80, 60, True),          # B > 1, MHA, D = 80
    (1, 8, 1, 3, 129, 96, 100, False),       # MQA, non-causal, D = 96
    (2, 16, 2, 1, 700, 8, 500, False),       # GQA 8, tiny head dim, decode with KV splits
    (1, 2, 1, 17, 290, 256, 273, True),      # D = 256
    (1, 9, 3, 1, 1000, 64, 999, False),      # small model 9/3 heads: splits with 2 threads
    (1, 9, 1, 1, 300, 72, 299, False),       # MQA decode: 9 rows of one KV head (a row-tile tail), D = 72
    (1, 71, 1, 1, 300, 64, 299, False),      # MQA decode, Falcon-7B-like 71 heads: more rows than a work item's 64
    (1, 32, 16, 1, 1001, 64, 1000, False),   # 16 KV heads: two 8-head groups of the qparam transpose, 1001 keys (a tail)
]


@pytest.mark.parametrize("seq_dim2", [False, True], ids=["bshd", "bhsd"])
@pytest.mark.parametrize("float_query", [False, True], ids=["q8", "qf32"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s[:6])) + f"-p{s[6]}{'c' if s[7] else ''}")
def test_matches_reference(kmod, shape, float_query, seq_dim2):
    b, hq, hkv, sq, skv, d, start, causal = shape
    case = make_case(_rng(shape, float_query, seq_dim2), b, hq, hkv, sq, skv, d, float_query=float_query,
                     seq_dim2=seq_dim2)
    check(kmod, case, start, is_causal=causal)


@pytest.mark.parametrize("ratio", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("head_dim", [8, 37, 52, 64, 80, 96, 128, 256])
def test_gqa_ratios_and_head_dims(kmod, ratio, head_dim):
    case = make_case(_rng("gqa", ratio, head_dim), 1, 16, 16 // ratio, 3, 150, head_dim)
    check(kmod, case, 100, is_causal=True)


# Under qemu-user (TCG, ~30x native a call; prefetches are no-ops there) three settings that still
# take each knob through each of its values; the native run tries all six.
PREFETCH_TUNINGS = (((False, False, 0), (True, True, 4), (False, True, 8))
                    if os.environ.get("QSDPA_CI_PYTHON_WRAPPER") else
                    ((False, False, 0), (False, True, 3), (False, False, 4), (True, True, 4), (True, False, 8),
                     (False, True, 8)))


@pytest.mark.parametrize("shape", [
    (1, 32, 8, 1, 2049, 128, 2048, False),   # llama3-8b decode: all-heads blocks, keys-outer Q.K^T
    (1, 32, 8, 1, 1001, 64, 1000, False),    # D 64, a tail block
    (1, 9, 3, 1, 300, 72, 299, False),       # rows not a whole Q.K^T tile: head by head
    (1, 8, 2, 37, 333, 64, 200, True),       # chunked prefill (one head per item)
], ids=lambda s: "x".join(map(str, s[:6])))
@pytest.mark.parametrize("float_query", [False, True], ids=["q8", "qf32"])
def test_prefetch_tuning_changes_no_bit(kmod, shape, float_query):
    """Where the next block's lines are prefetched to, whether its pages are walked first, and how
    much of its K goes during Q.K^T is per-CPU tuning (flash_attention's prefetch_tuning): every
    setting gives the same bits, with and without KV splits, and the reference's answer."""
    b, hq, hkv, sq, skv, d, start, causal = shape
    case = make_case(_rng("pf", shape, float_query), b, hq, hkv, sq, skv, d, float_query=float_query)
    saved = kmod._prefetch_tuning()
    assert set(saved) == {"to_l1", "walk_pages", "k_during_qk_eighths"} and 0 <= saved["k_during_qk_eighths"] <= 8
    outs = []
    try:
        for to_l1, walk_pages, eighths in PREFETCH_TUNINGS:
            kmod._set_prefetch_tuning(to_l1, walk_pages, eighths)
            assert kmod._prefetch_tuning() == {"to_l1": to_l1, "walk_pages": walk_pages, "k_during_qk_eighths": eighths}
            for splits in (1, 3):
                run = check if not outs[2:] else run_variant  # the reference once; then the same bits
                outs.append(run(kmod, case, start, is_causal=causal, force_splits=splits if sq == 1 else 0))
    finally:
        kmod._set_prefetch_tuning(**saved)
    assert kmod._prefetch_tuning() == saved
    for splits in (0, 1):
        for o in outs[splits::2]:
            np.testing.assert_array_equal(o, outs[splits])
    with pytest.raises(ValueError, match="k_during_qk_eighths"):
        kmod._set_prefetch_tuning(False, False, 9)
    with pytest.raises(ValueError, match="k_during_qk_eighths"):
        kmod._set_prefetch_tuning(True, True, -1)
    assert kmod._prefetch_tuning() == saved


@pytest.mark.parametrize("shape", [
    # (batch, q_heads, kv_heads, kv_len, head_dim)   decode's keys-outer Q.K^T for each GQA group
    (1, 9, 3, 1003, 64),     # GQA 3: lane tiles of 3 rows (a zero fourth row), a 3-key tail
    (2, 24, 8, 517, 128),    # GQA 3 at D 128 (the rotated lane tiles), B = 2, a 1-key tail
    (1, 12, 2, 301, 64),     # GQA 6: two 3-row lane tiles a head
    (1, 28, 4, 1001, 128),   # GQA 7 (Qwen2-7B-like): a 4-row and a 3-row lane tile a head
    (1, 64, 8, 259, 128),    # GQA 8: two 4-row lane tiles a head
    (1, 18, 2, 203, 64),     # GQA 9: three 3-row lane tiles
    (1, 63, 9, 501, 64),     # GQA 7 on 9 heads: more lane tiles than a block keeps, row tiles and a 3-row rest
    (1, 9, 3, 299, 96),      # GQA 3 at D 96 (no lane tiles): keys-outer row tiles with a 3-row rest
    (1, 10, 2, 130, 64),     # GQA 5: a 4-row lane tile and a one-row qk_tile
    (1, 26, 2, 170, 128),    # GQA 13: a 4-row lane tile and three 3-row ones
    (1, 16, 16, 333, 128),   # MHA: 1-row tiles, keys outer over 16 heads
    (2, 8, 4, 259, 64),      # GQA 2 (2-row lane tiles), B = 2
    (1, 16, 8, 515, 128),    # GQA 2 at D 128
], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("splits", [1, 3])
def test_decode_gqa_groups(kmod, shape, splits):
    """Decode of every GQA group size's keys-outer Q.K^T form (lane tiles of 4, 3 and 2 rows, one-row
    tiles beside them or alone, row tiles with a remainder tile), with and without KV splits: the
    reference's answer."""
    b, hq, hkv, skv, d = shape
    case = make_case(_rng("gqa-decode", shape), b, hq, hkv, 1, skv, d)
    check(kmod, case, skv - 1, force_splits=splits)


@pytest.mark.parametrize("splits", [1, 2, 3, 7])
def test_kv_splits_agree(kmod, splits):
    """Flash-decoding: any split of the KV range gives the same attention."""
    case = make_case(_rng("splits"), 1, 8, 2, 1, 1500, 64)
    check(kmod, case, 1499, force_splits=splits)


@pytest.mark.parametrize("kind", ["float", "bool"])
@pytest.mark.parametrize("rank", [2, 4])
def test_masks(kmod, kind, rank):
    """An explicit mask covers the whole cache (ExecuTorch: kv length = the key length)."""
    b, hq, hkv, sq, skv, d = 2, 4, 2, 6, 90, 64
    rng = _rng("mask", kind, rank)
    case = make_case(rng, b, hq, hkv, sq, skv, d)
    shape = (sq, skv) if rank == 2 else (b, hq, sq, skv)
    if kind == "bool":
        mask = rng.random(shape) < 0.7
        mask[..., 0] = True
    else:
        mask = rng.standard_normal(shape).astype(np.float32)
        mask[rng.random(shape) < 0.3] = -np.inf
        mask[..., 0] = 0.0
    check(kmod, case, 40, mask=mask)


def test_fully_masked_rows_give_zero(kmod):
    sq, skv = 4, 50
    case = make_case(_rng("dead"), 1, 4, 2, sq, skv, 32)
    mask = np.ones((sq, skv), dtype=bool)
    mask[1] = False
    out = check(kmod, case, 0, mask=mask)
    assert (out[:, 1] == 0).all() and np.isfinite(out).all()
    fmask = np.zeros((sq, skv), dtype=np.float32)
    fmask[2] = -np.inf
    out = check(kmod, case, 0, mask=fmask)
    assert (out[:, 2] == 0).all()


def test_keys_past_the_window_are_never_read(kmod):
    """Without a mask only keys < start_pos + q_len matter: garbage beyond them changes nothing."""
    case = make_case(_rng("window"), 1, 4, 2, 2, 300, 64)
    first = run_variant(kmod, case, 100, is_causal=True).copy()
    case.key[:, 102:] = 127
    case.value[:, 102:] = -128
    case.k_scales[:, 102:] = np.nan  # not read, so not rejected either
    case.v_scales[:, 102:] = np.inf
    np.testing.assert_array_equal(run_variant(kmod, case, 100, is_causal=True), first)


@pytest.mark.parametrize("seq_dim2", [False, True], ids=["bshd", "bhsd"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 0.0, -1.0], ids=["nan", "inf", "-inf", "zero", "negative"])
def test_every_scale_read_is_checked(kmod, seq_dim2, bad):
    """The K/V scale check is one vectorised pass over the scales a call reads: a bad scale at the
    first key, inside the vector body or at the last key read, in any batch and head, is a
    ValueError naming the argument and its position, and `out` is left untouched."""
    start = 60  # decode: keys [0, 61) are read
    for name in ("k_scales", "v_scales"):
        for b, h, pos in [(0, 0, 0), (1, 1, 37), (1, 0, start), (0, 1, 59)]:
            case = make_case(_rng("scale-check", seq_dim2), 2, 4, 2, 1, 70, 16, seq_dim2=seq_dim2)
            scales = getattr(case, name)
            scales[(b, h, pos, 0) if seq_dim2 else (b, pos, h, 0)] = bad
            out = np.full(case.query.shape, 7.0, np.float32)
            with pytest.raises(ValueError, match=f"{name} must be finite and > 0.* at batch {b}, head {h}, position {pos}$"):
                run_variant(kmod, case, start, out=out)
            assert (out == 7.0).all()


def _call_with_plan(kmod, case, start_pos, out, threads, force_splits, mask=None, is_causal=False):
    """One call of the variant at an explicit thread count and split count; returns its plan."""
    arr, start, causal, scale, seq_dim2, out = _attention._prepare(
        case.query, case.key, case.value, start_pos, mask, 0.0, is_causal, None, case.q_zero_points, case.q_scales,
        case.k_zero_points, case.k_scales, case.v_zero_points, case.v_scales, case.seq_dim2, out)
    args = (arr["query"], arr["q_scales"], arr["q_zero_points"], arr["key"], arr["k_scales"], arr["k_zero_points"],
            arr["value"], arr["v_scales"], arr["v_zero_points"], arr["attn_mask"], start, causal, scale, seq_dim2, out)
    plan = kmod.attention_plan(*args, threads, force_splits)
    return plan, lambda: kmod.quantized_sdpa(*args, threads, force_splits)


# (batch, threads, force_splits) -> whether the kernel checks the K/V scales in its gather, for a
# [B, S, H, D] cache (one item takes both KV heads) and a [B, H, S, D] one (an item per KV head).
SCALE_CHECK_PLANS = {
    "before-call": ((2, 1, 0), (False, False)),  # items write `out` as they finish: checked before the call
    "one-item": ((1, 1, 0), (True, False)),      # one item writes `out` at its end
    "kv-splits": ((1, 2, 0), (True, True)),      # flash-decoding: `out` written in the merge after the barrier
    "kv-splits-1t": ((1, 1, 5), (True, True)),   # the same on one thread
    "batch-splits": ((2, 2, 3), (True, True)),
}


@pytest.mark.parametrize("seq_dim2", [False, True], ids=["bshd", "bhsd"])
@pytest.mark.parametrize("where", sorted(SCALE_CHECK_PLANS))
def test_bad_scale_stops_every_plan_with_nothing_written(kmod, where, seq_dim2):
    """Whether the K/V scales are checked before the call or by the kernel as it gathers each
    block's qparams (decode plans that write `out` only once every item is done), a bad scale
    anywhere in the range read is the same ValueError naming it, and `out` stays untouched."""
    (batch, threads, splits), expected = SCALE_CHECK_PLANS[where]
    in_kernel = expected[seq_dim2]
    start = 600  # decode: keys [0, 601) are read, in 64-key (bshd) or 256-key (bhsd) blocks
    for name in ("k_scales", "v_scales"):
        for bad in (np.nan, -np.inf, 0.0):
            for b, h, pos in [(0, 0, 0), (batch - 1, 1, 300), (batch - 1, 0, start), (0, 1, 63)]:
                case = make_case(_rng("scale-plan", seq_dim2), batch, 4, 2, 1, 610, 16, seq_dim2=seq_dim2)
                getattr(case, name)[(b, h, pos, 0) if seq_dim2 else (b, pos, h, 0)] = bad
                out = np.full(case.query.shape, 7.0, np.float32)
                plan, call = _call_with_plan(kmod, case, start, out, threads, splits)
                assert plan["kernel_checks_kv_scales"] is in_kernel, plan
                with pytest.raises(ValueError, match=f"{name} must be finite and > 0.* at batch {b}, head {h}, position {pos}$"):
                    call()
                assert (out == 7.0).all()
    # The same plans with good scales give the reference's result.
    case = make_case(_rng("scale-plan-ok", seq_dim2), batch, 4, 2, 1, 610, 16, seq_dim2=seq_dim2)
    out = np.full(case.query.shape, 7.0, np.float32)
    _, call = _call_with_plan(kmod, case, start, out, threads, splits)
    call()
    ratio = error_over_tolerance(case, out, case.reference(start, None, False, None))
    assert (ratio <= 1).all()


def test_scale_argument(kmod):
    case = make_case(_rng("scale"), 1, 4, 4, 3, 40, 64)
    check(kmod, case, 30, scale=0.3)
    check(kmod, case, 30, scale=-0.05)


def test_extreme_qparams(kmod):
    """Zero points at both ends, constant rows, rows of +-127: quantize_per_token's corner cases."""
    rng = _rng("extreme")
    case = make_case(rng, 1, 4, 2, 2, 64, 32)
    case.key[0, :8] = 127
    case.key[0, 8:16] = -128
    case.k_zero_points[0, :8] = -128
    case.k_zero_points[0, 8:16] = 127
    case.value[0, 16:24] = 5
    check(kmod, case, 62)


def _plan(kmod, case, start_pos, is_causal, threads=None):
    arr, start, causal, scale, seq_dim2, out = _attention._prepare(
        case.query, case.key, case.value, start_pos, None, 0.0, is_causal, None, case.q_zero_points, case.q_scales,
        case.k_zero_points, case.k_scales, case.v_zero_points, case.v_scales, case.seq_dim2, None)
    return kmod.attention_plan(arr["query"], arr["q_scales"], arr["q_zero_points"], arr["key"], arr["k_scales"],
                               arr["k_zero_points"], arr["value"], arr["v_scales"], arr["v_zero_points"], None, start,
                               causal, scale, seq_dim2, out, threads or qsdpa.get_num_threads(), 0)


@pytest.mark.parametrize("seq_dim2", [False, True], ids=["bshd", "bhsd"])
def test_prefill_converts_each_v_block_once(kmod, seq_dim2):
    """16+ query rows per KV head (prefill): P.V reads V blocks converted to fp32 in the slice;
    decode widens V on the fly. Both are the same attention."""
    case = make_case(_rng("convert-v", seq_dim2), 1, 8, 2, 48, 300, 128, seq_dim2=seq_dim2)
    plan = _plan(kmod, case, 252, True)
    assert plan["convert_v"] and plan["heads_per_item"] == 1
    assert plan["scratch"]["slice"]["value_f32"][1] == 4 * plan["kv_block"] * 128
    assert plan["scratch"]["slice"]["value_rows"][1] == 0
    check(kmod, case, 252, is_causal=True)
    decode = make_case(_rng("convert-v-decode", seq_dim2), 1, 8, 2, 1, 300, 128, seq_dim2=seq_dim2)
    assert not _plan(kmod, decode, 299, False)["convert_v"]
    check(kmod, decode, 299)


@pytest.mark.parametrize("head_dim,kv_len,q_len", [(128, 300, 48), (68, 77, 20), (4, 33, 33), (66, 90, 40)])
def test_prefill_gemm_qk_key_panels(kmod, head_dim, kv_len, q_len):
    """Variants with a GEMM-form Q.K^T (kmod.GEMM_QK) pack each K block of a prefill into key panels
    when the head dim is whole 4-byte groups: the tails of a block's keys (under 16) and of a row
    (under 64 bytes), and the zero padding to 32 keys, all give the exact dots."""
    case = make_case(_rng("pack-keys", head_dim, kv_len, q_len), 1, 8, 2, q_len, kv_len, head_dim)
    start = kv_len - q_len
    plan = _plan(kmod, case, start, True)
    packs = bool(kmod.GEMM_QK) and head_dim % 4 == 0
    assert plan["convert_v"] and plan["pack_keys"] == packs
    panel_keys = -(-plan["kv_block"] // 32) * 32
    assert plan["scratch"]["slice"]["key_panels"][1] == (panel_keys * (head_dim + 4) if packs else 0)
    check(kmod, case, start, is_causal=True)
    check(kmod, case, start)


def test_variants_agree(kmod, isa_name):
    """Every variant against the scalar variant on one decode and one prefill case."""
    scalar = qsdpa._dispatch.load_variant("scalar")
    for seed, shape, causal in (("agree-d", (1, 8, 2, 1, 513, 64), False), ("agree-p", (1, 8, 2, 20, 70, 64), True)):
        case = make_case(_rng(seed), *shape)
        start = shape[4] - shape[3]
        a = run_variant(kmod, case, start, is_causal=causal)
        b = run_variant(scalar, case, start, is_causal=causal)
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * float(np.abs(b).max()), err_msg=isa_name)


def test_vexp_accuracy(kmod):
    """The softmax's exp: < 2 ulp relative error on [-87.3, 0], exactly 0 below, 1 at 0."""
    x = np.linspace(-87.33, 0.0, 400_003, dtype=np.float32)[None, :]
    y = kmod._vexp(x.copy())
    ref = np.exp(x.astype(np.float64))
    rel = np.abs(y - ref) / ref
    assert rel.max() < 2 * 2.0**-23, rel.max()
    edge = kmod._vexp(np.array([[-np.inf, -1000.0, -88.0, 0.0]], dtype=np.float32))
    np.testing.assert_array_equal(edge, [[0.0, 0.0, 0.0, 1.0]])


# ---------------------------------------------------------------------------------- dispatched API
def test_public_api_uses_the_selected_variant():
    case = make_case(_rng("api"), 1, 8, 2, 1, 100, 64)
    out = qsdpa.quantized_sdpa(case.query, case.key, case.value, 99, **case.kwargs())
    ref = run_variant(qsdpa._dispatch.selection().module, case, 99)
    np.testing.assert_array_equal(out, ref)


def test_out_argument_is_filled_in_place():
    case = make_case(_rng("out"), 1, 8, 2, 1, 100, 64)
    out = np.full(case.query.shape, np.nan, dtype=np.float32)
    res = qsdpa.quantized_sdpa(case.query, case.key, case.value, 99, out=out, **case.kwargs())
    assert res is out and np.isfinite(out).all()


def test_non_contiguous_inputs_are_read_correctly():
    case = make_case(_rng("noncontig"), 1, 4, 2, 3, 50, 32, seq_dim2=True)
    expected = qsdpa.quantized_sdpa(case.query, case.key, case.value, 40, **case.kwargs())
    # The same tensors as [B, S, H, D] transposed views of [B, H, S, D]: strides are not C order.
    kw = case.kwargs()
    views = {k: (np.swapaxes(np.ascontiguousarray(np.swapaxes(v, 1, 2)), 1, 2) if isinstance(v, np.ndarray) else v)
             for k, v in kw.items()}
    q = np.swapaxes(np.ascontiguousarray(np.swapaxes(case.query, 1, 2)), 1, 2)
    k = np.swapaxes(np.ascontiguousarray(np.swapaxes(case.key, 1, 2)), 1, 2)
    v = np.swapaxes(np.ascontiguousarray(np.swapaxes(case.value, 1, 2)), 1, 2)
    assert not q.flags.c_contiguous
    np.testing.assert_array_equal(qsdpa.quantized_sdpa(q, k, v, 40, **views), expected)


def test_empty_query():
    case = make_case(_rng("empty"), 1, 4, 2, 0, 50, 32)
    out = qsdpa.quantized_sdpa(case.query, case.key, case.value, 10, **case.kwargs())
    assert out.shape == case.query.shape


def test_threads_do_not_change_the_result_beyond_rounding():
    case = make_case(_rng("threads"), 1, 8, 2, 1, 3000, 64)
    before = qsdpa.get_num_threads()
    try:
        qsdpa.set_num_threads(1)
        one = qsdpa.quantized_sdpa(case.query, case.key, case.value, 2999, **case.kwargs())
        qsdpa.set_num_threads(2)
        two = qsdpa.quantized_sdpa(case.query, case.key, case.value, 2999, **case.kwargs())
    finally:
        qsdpa.set_num_threads(before)
    np.testing.assert_allclose(one, two, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError):
        qsdpa.set_num_threads(0)
    with pytest.raises(TypeError):
        qsdpa.set_num_threads(1.5)


def test_omp_num_threads_sets_the_default():
    import os
    import subprocess
    import sys

    env = dict(os.environ, OMP_NUM_THREADS="1")
    try:
        res = subprocess.run([sys.executable, "-c", "import qsdpa; print(qsdpa.get_num_threads())"], env=env,
                             capture_output=True, text=True, timeout=120)
    except OSError as exc:  # qemu-user without binfmt cannot exec a child interpreter
        pytest.skip(f"cannot run a child interpreter here: {exc}")
    assert res.returncode == 0 and res.stdout.strip() == "1", res.stdout + res.stderr


# --------------------------------------------------------------------------- scratch and the arena
@pytest.mark.parametrize("threads,rows,kv_block,head_dim,float_query,partials,heads,convert_v,pack_keys",
                         [(1, 4, 256, 128, False, 0, 1, False, False), (2, 64, 256, 128, True, 0, 1, True, False),
                          (2, 3, 256, 80, False, 9, 1, False, False), (8, 1, 16, 8, False, 33, 1, False, False),
                          (3, 96, 512, 256, True, 12, 1, True, False), (2, 32, 64, 128, False, 8, 8, False, False),
                          (2, 64, 256, 128, False, 0, 1, True, True), (1, 40, 200, 68, False, 5, 1, True, True)])
def test_scratch_layout(threads, rows, kv_block, head_dim, float_query, partials, heads, convert_v, pack_keys):
    L = qsdpa.scratch_layout(threads, rows, kv_block, head_dim, float_query=float_query, partial_items=partials,
                             heads=heads, convert_v=convert_v, pack_keys=pack_keys)
    # int8 queries are kept as int16 (q - zq), each row zero-padded to a multiple of 64 elements.
    qbytes = rows * head_dim * 4 if float_query else rows * -(-head_dim // 64) * 64 * 2
    i8 = 0 if float_query else 1
    expected = {"query": qbytes, "query_scales": i8 * 4 * rows, "query_sums": i8 * 8 * rows,
                "dots": i8 * 4 * rows * kv_block, "scores": 4 * rows * kv_block, "block_params": 16 * kv_block * heads,
                "value_rows": 0 if convert_v else kv_block * head_dim, "value_f32": 4 * kv_block * head_dim if convert_v else 0,
                # K panels of keys padded to 32, head_dim to 4 bytes, then an int32 sum per key
                "key_panels": -(-kv_block // 32) * 32 * (-(-head_dim // 4) * 4 + 4) if pack_keys else 0,
                "row_terms": 8 * rows,
                # split items (any partials) keep their running max, sum and accumulator in the record
                "row_max": 0 if partials else 4 * rows, "row_sum": 0 if partials else 4 * rows,
                "accumulator": 0 if partials else 4 * rows * head_dim}
    parts = sorted(L["slice"].items(), key=lambda kv: kv[1][0])
    end = 0
    for name, (off, size) in parts:
        assert size == expected[name], name            # exactly what the kernel touches
        assert off % 64 == 0, name                     # 64-byte aligned
        assert off >= end, name                        # no overlap with the previous part
        end = off + size
    assert L["slice_bytes"] % 64 == 0 and end <= L["slice_bytes"] < end + 64 * len(parts)
    assert L["partials_offset"] == L["slice_bytes"] * threads
    record = 2 * (-(-4 * rows // 64) * 64) + -(-4 * rows * head_dim // 64) * 64
    assert L["partial_record_bytes"] == (record if partials else 0)
    assert L["total_bytes"] == L["partials_offset"] + partials * L["partial_record_bytes"]


def test_plan_matches_layout_and_arena_is_reused():
    case = make_case(_rng("arena"), 1, 8, 2, 1, 900, 64)
    mod = qsdpa._dispatch.selection().module
    prepared = _attention._prepare(case.query, case.key, case.value, 899, None, 0.0, False, None,
                                   case.q_zero_points, case.q_scales, case.k_zero_points, case.k_scales,
                                   case.v_zero_points, case.v_scales, False, None)
    arr, start, causal, scale, seq_dim2, out = prepared
    plan = mod.attention_plan(arr["query"], arr["q_scales"], arr["q_zero_points"], arr["key"], arr["k_scales"],
                              arr["k_zero_points"], arr["value"], arr["v_scales"], arr["v_zero_points"], None, start,
                              causal, scale, seq_dim2, out, qsdpa.get_num_threads(), 0)
    # Decode on a [B, S, H, D] cache: one item takes both KV heads (2 x 4 rows), block-major.
    assert plan["heads_per_item"] == 2 and plan["rows_per_item"] == 8 and plan["items"] == plan["kv_splits"]
    assert not plan["convert_v"]  # 4 rows per KV head: V is widened on the fly
    assert plan["scratch"] == qsdpa.scratch_layout(plan["threads"], plan["rows_per_item"], plan["kv_block"], 64,
                                                   partial_items=plan["items"] if plan["kv_splits"] > 1 else 0,
                                                   heads=plan["heads_per_item"])
    qsdpa.quantized_sdpa(case.query, case.key, case.value, 899, out=out, **case.kwargs())
    stats = qsdpa.arena_stats()
    assert stats["capacity_bytes"] >= plan["scratch"]["total_bytes"]
    for _ in range(20):
        qsdpa.quantized_sdpa(case.query, case.key, case.value, 899, out=out, **case.kwargs())
    assert qsdpa.arena_stats()["growths"] == stats["growths"], "same shape again must not grow the arena"


@pytest.mark.parametrize("threads", [2, 3])
def test_decode_split_counts(kmod, threads):
    # An all-heads decode item ([B, S, H, D] cache) is split two ways per thread; one-head items
    # ([B, H, S, D] cache, 2 of them here) up to four items per thread.
    grouped = _plan(kmod, make_case(_rng("plan"), 1, 8, 2, 1, 4000, 64), 3999, False, threads)
    assert grouped["heads_per_item"] == 2 and grouped["kv_splits"] == 2 * threads
    per_head = _plan(kmod, make_case(_rng("plan"), 1, 8, 2, 1, 4000, 64, seq_dim2=True), 3999, False, threads)
    assert per_head["heads_per_item"] == 1 and per_head["kv_splits"] == -(-4 * threads // 2)
    assert per_head["items"] == 2 * per_head["kv_splits"]
    # Never more splits than KV blocks.
    short = _plan(kmod, make_case(_rng("plan"), 1, 8, 2, 1, 70, 64), 69, False, threads)
    assert short["kv_splits"] == -(-70 // short["kv_block"])


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("n_keys", [70, 2049, 4000, 8193])
def test_decode_split_ranges(kmod, threads, n_keys):
    # KV splits cover the keys once, in order, in 16-key steps; the first `threads` splits (the
    # ones the threads start on together) are 16x the rest, which go to whoever finishes first.
    # The big splits are equal and the small ones even, so each thread's share is too.
    plan = _plan(kmod, make_case(_rng("plan"), 1, 8, 2, 1, n_keys, 64), n_keys - 1, False, threads)
    firsts = plan["split_first_keys"]
    splits = plan["kv_splits"]
    assert len(firsts) == splits + 1 and firsts[0] == 0 and firsts[-1] == n_keys
    assert all(a <= b for a, b in zip(firsts, firsts[1:]))
    assert all(f % 16 == 0 for f in firsts[:-1])
    sizes = [b - a for a, b in zip(firsts, firsts[1:])]
    if splits > threads:
        big, small = sizes[:threads], sizes[threads:]
        assert len(set(big)) == 1 and max(small) - min(small) <= 32, sizes  # two roundings to 16 keys
        assert 8 * max(small) <= min(big) and max(big) <= 32 * min(small), sizes  # ~16x, boundaries rounded
    else:
        assert max(sizes) - min(sizes) <= 16, sizes


def test_arena_holds_exactly_the_layout_in_a_fresh_process():
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import sys, numpy as np, qsdpa
        from qsdpa import _attention
        sys.path.insert(0, sys.argv[1])
        from attention_reference import make_case
        case = make_case(np.random.default_rng(0), 1, 8, 2, 1, 900, 64)
        args = _attention._prepare(case.query, case.key, case.value, 899, None, 0.0, False, None,
                                   case.q_zero_points, case.q_scales, case.k_zero_points, case.k_scales,
                                   case.v_zero_points, case.v_scales, False, None)
        arr, start, causal, scale, seq_dim2, out = args
        mod = qsdpa._dispatch.selection().module
        plan = mod.attention_plan(arr["query"], arr["q_scales"], arr["q_zero_points"], arr["key"], arr["k_scales"],
                                  arr["k_zero_points"], arr["value"], arr["v_scales"], arr["v_zero_points"], None,
                                  start, causal, scale, seq_dim2, out, qsdpa.get_num_threads(), 0)
        assert qsdpa.arena_stats() == {"growths": 0, "capacity_bytes": 0}
        for _ in range(5):
            _attention._run(mod, *args)
        stats = qsdpa.arena_stats()
        assert stats == {"growths": 1, "capacity_bytes": plan["scratch"]["total_bytes"]}, (stats, plan)
        print("ok")
    """)
    import pathlib

    try:
        res = subprocess.run([sys.executable, "-c", code, str(pathlib.Path(__file__).parent)], capture_output=True,
                             text=True, timeout=120)
    except OSError as exc:  # qemu-user without binfmt cannot exec a child interpreter
        pytest.skip(f"cannot run a child interpreter here: {exc}")
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stdout + res.stderr


# ------------------------------------------------------------------------------- quantize_per_token
def test_quantize_per_token_roundtrip():
    rng = _rng("quant")
    x = (rng.standard_normal((3, 5, 7, 64)) * rng.uniform(0.01, 100, size=(3, 5, 7, 1))).astype(np.float32)
    q8, s, z = qsdpa.quantize_per_token(x)
    assert (q8.dtype, s.dtype, z.dtype) == (np.int8, np.float32, np.int8)
    assert q8.shape == x.shape and s.shape == z.shape == x.shape[:-1] + (1,)
    err = np.abs(qsdpa.dequantize_per_token(q8, s, z).astype(np.float64) - x)
    assert (err <= 0.5 * s * (1 + 1e-5) + 1e-6 * np.abs(x)).all()


def test_quantize_per_token_corner_rows():
    x = np.array([[0.0] * 4, [3.0] * 4, [-2.0] * 4, [-1.0, 0.0, 1.0, 2.0], [1e-30, 0, 0, 0], [1e30, -1e30, 0, 1]],
                 dtype=np.float32)
    q8, s, z = qsdpa.quantize_per_token(x)
    assert (s > 0).all() and np.isfinite(s).all()
    assert z[0, 0] in (-128, 127)  # an all-zero row keeps zero exact: x = 0 <=> q8 = zp
    np.testing.assert_array_equal(q8[0], z[0, 0])


@pytest.mark.parametrize("bad,exc", [([1.0, 2.0], TypeError), (np.ones(3, np.float64), TypeError),
                                     (np.array([np.nan, 1.0], np.float32), ValueError),
                                     (np.zeros((2, 0), np.float32), ValueError)])
def test_quantize_per_token_rejects(bad, exc):
    with pytest.raises(exc):
        qsdpa.quantize_per_token(bad)


def test_quantize_per_token_is_bit_identical_to_pytorch():
    torch = pytest.importorskip("torch")
    from torch.ao.quantization.fx._decomposed import quantized_decomposed_lib  # noqa: F401  (registers the ops)

    qd = torch.ops.quantized_decomposed
    rng = _rng("torch")
    rows = [rng.standard_normal((64, 128)) * 3, rng.uniform(0, 5, (32, 64)), -rng.uniform(0, 5, (32, 64)),
            rng.standard_normal((16, 8)) * 1e-6, rng.standard_normal((16, 8)) * 1e6, np.zeros((2, 8)),
            np.full((2, 8), 7.0), rng.standard_normal((8, 3)) + 100]
    for x in rows:
        x = x.astype(np.float32)
        t = torch.from_numpy(x)
        s, z = qd.choose_qparams_per_token_asymmetric.default(t, torch.int8)
        t8 = qd.quantize_per_token(t, s, z, -128, 127, torch.int8)
        q8, ours_s, ours_z = qsdpa.quantize_per_token(x)
        np.testing.assert_array_equal(q8, t8.numpy())
        np.testing.assert_array_equal(ours_s, s.to(torch.float32).numpy())
        np.testing.assert_array_equal(ours_z, z.to(torch.int8).numpy())
