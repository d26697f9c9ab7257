"""qsdpa.QuantizedKVCache: quantize-on-write bit-identical to quantize_per_token, bounds checks that
write nothing, attend equal to quantized_sdpa on the same arrays, and every variant's kernel on the
cache's own arrays against the float64 reference. Small shapes (CI also runs this under qemu)."""
from __future__ import annotations

import numpy as np
import pytest

import qsdpa
from attention_reference import Case
from test_attention import check

B, S_MAX, H, D, HQ = 2, 48, 2, 24, 6
LAYOUTS = pytest.mark.parametrize("layout", ["bshd", "bhsd"])


def _shape(layout, s, h=H, d=D):
    return (B, h, s, d) if layout == "bhsd" else (B, s, h, d)


def _seq(layout, a, start, stop):
    """Positions [start, stop) of an array in this layout."""
    return a[:, :, start:stop] if layout == "bhsd" else a[:, start:stop]


def _filled(layout, n=40, seed=0):
    """A cache with n positions written in three chunks, and the float K/V that went in."""
    rng = np.random.default_rng(seed)
    k = rng.standard_normal(_shape(layout, n), dtype=np.float32) * 3
    v = rng.standard_normal(_shape(layout, n), dtype=np.float32)
    cache = qsdpa.QuantizedKVCache(B, S_MAX, H, D, layout=layout)
    for start, stop in ((0, 17), (17, 18), (18, n)):
        cache.update(start, _seq(layout, k, start, stop), _seq(layout, v, start, stop))
    return cache, k, v


@LAYOUTS
def test_update_is_bit_identical_to_quantize_per_token(layout):
    cache, k, v = _filled(layout)
    assert cache.length == 40
    args = cache.sdpa_args()
    for data, scales, zps, x in (("key", "k_scales", "k_zero_points", k), ("value", "v_scales", "v_zero_points", v)):
        expected = qsdpa.quantize_per_token(x)
        for name, want in zip((data, scales, zps), expected):
            got = _seq(layout, args[name], 0, 40)
            assert got.dtype == want.dtype and np.array_equal(got, want), name
        # Unwritten positions hold valid zeros (scale 1, zero point 0), never an invalid scale.
        assert (_seq(layout, args[data], 40, S_MAX) == 0).all() and (_seq(layout, args[scales], 40, S_MAX) == 1).all()
    assert args["is_seq_at_dim_2"] is (layout == "bhsd")


@LAYOUTS
def test_layout_shapes_alignment_and_nbytes(layout):
    cache = qsdpa.QuantizedKVCache(B, S_MAX, H, D, layout=layout)
    args = cache.sdpa_args()
    assert args["key"].shape == _shape(layout, S_MAX) and args["k_scales"].shape == _shape(layout, S_MAX, d=1)
    assert args["k_scales"].dtype == np.float32 and args["k_zero_points"].dtype == np.int8
    assert all(a.ctypes.data % 64 == 0 and a.flags.c_contiguous for n, a in args.items() if n != "is_seq_at_dim_2")
    assert cache.nbytes == 2 * B * S_MAX * H * (D + 4 + 1)
    views = cache.to_bshd()
    assert views.key.shape == (B, S_MAX, H, D) and views.v_zero_points.shape == (B, S_MAX, H, 1)
    assert np.shares_memory(views.key, args["key"]) and np.shares_memory(views.v_scales, args["v_scales"])


@LAYOUTS
@pytest.mark.parametrize("float_query", [True, False], ids=["qf32", "q8"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "open"])
def test_attend_equals_quantized_sdpa_on_the_cache_arrays(layout, float_query, causal):
    cache, _, _ = _filled(layout)
    rng = np.random.default_rng(1)
    q = rng.standard_normal(_shape(layout, 3, h=HQ), dtype=np.float32)
    qparams = {}
    if not float_query:
        q, qs, qz = qsdpa.quantize_per_token(q)
        qparams = dict(q_scales=qs, q_zero_points=qz)
    got = cache.attend(q, 37, is_causal=causal, **qparams)
    expected = qsdpa.quantized_sdpa(q, start_pos=37, is_causal=causal, **qparams, **cache.sdpa_args())
    np.testing.assert_array_equal(got, expected)
    out = np.full(q.shape, 4.0, np.float32)
    assert cache.attend(q, 37, is_causal=causal, out=out, **qparams) is out
    np.testing.assert_array_equal(out, expected)


@LAYOUTS
def test_every_variant_reads_the_cache_correctly(kmod, layout):
    """The cache's arrays through each variant's kernel, against float64 attention on them."""
    cache, _, _ = _filled(layout)
    q = np.random.default_rng(2).standard_normal(_shape(layout, 2, h=HQ), dtype=np.float32)
    a = cache.sdpa_args()
    case = Case(q, a["key"], a["value"], None, None, a["k_scales"], a["k_zero_points"], a["v_scales"],
                a["v_zero_points"], a["is_seq_at_dim_2"])
    check(kmod, case, 38, is_causal=True)


def _snapshot(cache):
    return {n: a.copy() for n, a in cache.sdpa_args().items() if n != "is_seq_at_dim_2"}, cache.length


@LAYOUTS
def test_bad_updates_raise_naming_the_argument_and_write_nothing(layout):
    cache, _, _ = _filled(layout)
    ok = np.ones(_shape(layout, 2), np.float32)
    long = np.ones(_shape(layout, S_MAX - 40 + 1), np.float32)
    nan = ok.copy()
    nan[0, 0, 0, 0] = np.nan
    bad = [
        ((41, ok, ok), ValueError, "start_pos must be <= length"),
        ((40, long, long), ValueError, "must not exceed max_seq_len"),
        ((-1, ok, ok), ValueError, "start_pos must be >= 0"),
        ((1.0, ok, ok), TypeError, "start_pos must be an int"),
        ((True, ok, ok), TypeError, "start_pos must be an int, got bool"),
        ((0, ok.astype(np.float64), ok), TypeError, "k must have dtype float32"),
        ((0, ok, ok[..., :-1]), ValueError, "v must have shape"),
        ((0, ok, np.ones(_shape(layout, 2, h=H + 1), np.float32)), ValueError, "v must have shape"),
        ((0, ok, np.ones(_shape(layout, 3), np.float32)), ValueError, "k and v must have the same shape"),
        ((0, ok, nan), ValueError, "v must be finite"),
        ((0, ok[0], ok[0]), ValueError, "k must have shape"),
        ((0, [1.0], ok), TypeError, "k must be a numpy.ndarray"),
    ]
    before, length = _snapshot(cache)
    for args, exc, fragment in bad:
        with pytest.raises(exc, match=fragment):
            cache.update(*args)
    after, after_length = _snapshot(cache)
    assert after_length == length and all(np.array_equal(before[n], after[n]) for n in before)


@LAYOUTS
def test_bad_attends_raise_naming_the_argument(layout):
    cache, _, _ = _filled(layout)
    q = np.ones(_shape(layout, 1, h=HQ), np.float32)
    out = np.full(q.shape, 2.0, np.float32)
    bad = [
        ((q, 40), ValueError, "written length"),
        ((np.ones(_shape(layout, 1, h=HQ, d=D + 1), np.float32), 3), ValueError, "q must have shape"),
        ((np.ones(_shape(layout, 1, h=H + 1), np.float32), 3), ValueError, "multiple of n_kv_heads"),
        ((q.astype(np.float64), 3), TypeError, "q must have dtype float32 or int8"),
        ((q.astype(np.int8), 3), ValueError, "q_scales"),
        ((q, -1), ValueError, "start_pos must be >= 0"),
        ((q, "3"), TypeError, "start_pos must be an int"),
    ]
    for args, exc, fragment in bad:
        with pytest.raises(exc, match=fragment):
            cache.attend(*args, out=out)
    assert (out == 2.0).all()


def test_constructor_checks():
    for args, kwargs, exc, fragment in [
        ((0, 4, 1, 8), {}, ValueError, "batch must be >= 1"),
        ((1, 4.0, 1, 8), {}, TypeError, "max_seq_len must be an int"),
        ((1, 4, True, 8), {}, TypeError, "n_kv_heads must be an int, got bool"),
        ((1, 4, 1, -8), {}, ValueError, "head_dim must be >= 1"),
        ((1, 4, 1, 8), {"layout": "sbhd"}, ValueError, "layout must be 'bshd' or 'bhsd'"),
        ((1, 4, 1, 8), {"layout": None}, TypeError, "layout must be a str"),
    ]:
        with pytest.raises(exc, match=fragment):
            qsdpa.QuantizedKVCache(*args, **kwargs)


def test_rewrite_and_reset():
    cache, k, v = _filled("bshd")
    cache.update(10, k[:, 30:32], v[:, 30:32])  # an earlier position may be rewritten (e.g. rejected draft tokens)
    k8, _, _ = qsdpa.quantize_per_token(k[:, 30:32])
    assert np.array_equal(cache.sdpa_args()["key"][:, 10:12], k8) and cache.length == 40
    cache.reset()
    assert cache.length == 0
    with pytest.raises(ValueError, match="written length"):
        cache.attend(np.ones((B, 1, HQ, D), np.float32), 0)


# -- torch --------------------------------------------------------------------------------------


@LAYOUTS
def test_torch_tensors_in_and_out(layout):
    torch = pytest.importorskip("torch")
    ref_cache, k, v = _filled(layout)
    cache = qsdpa.QuantizedKVCache(B, S_MAX, H, D, layout=layout)
    cache.update(0, torch.from_numpy(k), torch.from_numpy(v))
    mine, theirs = cache.sdpa_args(as_torch=True), ref_cache.sdpa_args()
    for name, t in mine.items():
        if name != "is_seq_at_dim_2":
            assert isinstance(t, torch.Tensor) and np.array_equal(t.numpy(), theirs[name])
    assert mine["key"].data_ptr() == cache.sdpa_args()["key"].ctypes.data  # a view, not a copy
    q = torch.randn(_shape(layout, 1, h=HQ))
    got = cache.attend(q, 39)
    assert isinstance(got, torch.Tensor)
    np.testing.assert_array_equal(got.numpy(), ref_cache.attend(q.numpy(), 39))
    views = cache.to_bshd(as_torch=True)
    assert tuple(views.key.shape) == (B, S_MAX, H, D)
    np.testing.assert_array_equal(views.key.numpy(), ref_cache.to_bshd().key)


def test_matches_executorch_on_exported_tensors():
    """ExecuTorch's op reading the cache's [B, S, H, D] tensors agrees with attend."""
    torch = pytest.importorskip("torch")
    from executorch_ops import load_llama_ops

    llama = load_llama_ops(torch)
    cache, _, _ = _filled("bshd")
    q = np.random.default_rng(5).standard_normal((B, 1, HQ, D), dtype=np.float32)
    q8, qs, qz = qsdpa.quantize_per_token(q)
    t = cache.to_bshd(as_torch=True)
    theirs = llama.custom_quantized_sdpa(torch.from_numpy(q8), t.key, t.value, 39, None, 0.0, True, None,
                                         torch.from_numpy(qz), torch.from_numpy(qs), t.k_zero_points, t.k_scales,
                                         t.v_zero_points, t.v_scales, False).numpy()
    ours = cache.attend(q8, 39, q_scales=qs, q_zero_points=qz)
    vmax = float(np.abs(qsdpa.dequantize_per_token(t.value.numpy(), t.v_scales.numpy(),
                                                    t.v_zero_points.numpy())).max())
    np.testing.assert_allclose(ours, theirs, rtol=3e-5, atol=3e-5 * vmax)
