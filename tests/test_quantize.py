"""The quantize kernel (templates/quantize.cpp.j2) of every variant against the numpy reference,
qsdpa._quantize.quantize_per_token_reference, which test_attention.py holds to PyTorch bit for bit.

Bit-identical int8 values, scales and zero points on random and corner rows (ties, signed zeros,
subnormals, values near the float32 limit, every row length 1..70), through strided outputs (the KV
cache's own slices), at 1 and 2 threads; a row holding a NaN or an infinity makes it report the
first such row and write nothing, and a row whose range overflows float32 (PyTorch would give it an
infinite scale) makes kernel and reference both raise.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import qsdpa
from qsdpa._quantize import quantize_per_token_reference as reference


def _outputs(shape, fill=0):
    q8 = np.full(shape, fill, np.int8)
    scales = np.full(shape[:-1] + (1,), fill, np.float32)
    zero_points = np.full(shape[:-1] + (1,), fill, np.int8)
    return q8, scales, zero_points


def _quantize(kmod, x, threads=1):
    q8, scales, zero_points = _outputs(x.shape)
    assert kmod.quantize_rows(x, q8, scales, zero_points, threads, False) == -1
    return q8, scales, zero_points


def _assert_same(got, x):
    for name, a, b in zip(("q8", "scales", "zero_points"), got, reference(x)):
        np.testing.assert_array_equal(a, b, err_msg=name)


def _assert_kernel_matches_reference(kmod, x):
    """Same bits as the reference, or, where the reference refuses x (a row's range overflows
    float32), the kernel refuses it too, with the same message and nothing written."""
    try:
        want = reference(x)
    except ValueError as e:
        assert "range" in str(e)
        q8, scales, zero_points = _outputs(x.shape, fill=3)
        with pytest.raises(ValueError, match=r"^x's range \(max - min, with 0\) must fit in float32"):
            kmod.quantize_rows(x, q8, scales, zero_points, 1, False)
        assert (q8 == 3).all() and (scales == 3).all() and (zero_points == 3).all()
        return False
    for name, a, b in zip(("q8", "scales", "zero_points"), _quantize(kmod, x), want):
        np.testing.assert_array_equal(a, b, err_msg=name)
    return True


def _corner_rows(d: int) -> np.ndarray:
    rng = np.random.default_rng(d)
    tiny = np.float32(1e-45)  # the smallest subnormal
    big = np.float32(3.0e38)
    rows = [
        np.zeros(d), np.full(d, -0.0), np.full(d, 7.0), np.full(d, -2.5), np.full(d, tiny),
        np.linspace(-1.0, 1.0, d), np.linspace(0.0, 255.0, d), np.linspace(-128.0, 127.0, d),
        np.arange(d) % 2 * 0.5 - 0.25,  # ties once scaled (scale 1/255-ish)
        rng.standard_normal(d) * 1e-38, rng.standard_normal(d) * 1e30,
        np.where(np.arange(d) % 3 == 0, big, 0.0), np.where(np.arange(d) % 2, big / 2, -big / 2), rng.uniform(0, 1, d), -rng.uniform(0, 1, d),
        rng.standard_normal(d) + 1000.0,
    ]
    return np.stack(rows).astype(np.float32)[None]


@pytest.mark.parametrize("d", [1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 67, 128, 200])
def test_corner_rows_match_the_reference(kmod, d):
    x = _corner_rows(d)
    _assert_same(_quantize(kmod, x), x)


@pytest.mark.parametrize("d", [2, 3, 16, 17, 67])
def test_a_row_whose_range_overflows_float32_is_refused_like_the_reference(kmod, d):
    big = np.float32(3.0e38)
    x = np.stack([np.linspace(-1.0, 1.0, d), np.where(np.arange(d) % 2, big, -big)]).astype(np.float32)[None]
    assert not _assert_kernel_matches_reference(kmod, x)


@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 5, 128), (2, 9, 67), (4, 33, 64), (1, 300, 96)])
def test_random_rows_match_the_reference(kmod, shape):
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * 10.0 ** rng.uniform(-6, 6, size=shape[:-1] + (1,))).astype(np.float32)
    _assert_same(_quantize(kmod, x), x)


@st.composite
def finite_rows(draw):
    """1-6 rows of 1-70 float32 values, drawn by numpy from a hypothesis seed (hypothesis drawing
    each float itself costs ~100x more): any finite bit pattern (subnormals, +-0, up to +-3.4e38),
    normals at one scale 1e-40..1e37 (activations), or those with special values mixed in."""
    d, rows, seed = draw(st.integers(1, 70)), draw(st.integers(1, 6)), draw(st.integers(0, 2**32 - 1))
    kind, exponent = draw(st.sampled_from(["bits", "normal", "mixed"])), draw(st.integers(-40, 37))
    rng = np.random.default_rng(seed)
    if kind == "bits":
        x = rng.integers(0, 2**32, size=(1, rows, d), dtype=np.uint32).view(np.float32)
        return np.where(np.isfinite(x), x, np.float32(0.0))
    x = (rng.standard_normal((1, rows, d)) * 10.0 ** exponent).astype(np.float32)
    if kind == "mixed":
        special = np.array([0.0, -0.0, 1e-45, -1e-45, 3.4e38, -3.4e38, 0.5, -0.5, 1.0, 127.0, -128.0], np.float32)
        pick = rng.random(x.shape) < 0.3
        x[pick] = rng.choice(special, size=int(pick.sum()))
    return x


def test_any_finite_rows_match_the_reference(kmod, request):
    ran = 0

    @given(finite_rows())
    def run(x):
        nonlocal ran
        ran += 1
        _assert_kernel_matches_reference(kmod, x)

    run()
    print(f"{request.node.name}: {ran} cases, 0 mismatches")
    assert ran >= settings().max_examples, f"only {ran} cases ran (profile asks for {settings().max_examples})"


def test_threads_change_no_bits(kmod):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((2, 1500, 64)) * rng.uniform(0.01, 100, size=(2, 1500, 1))).astype(np.float32)
    one, two = _quantize(kmod, x, 1), _quantize(kmod, x, 2)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
    _assert_same(two, x)


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_writes_strided_cache_slices_in_place(kmod, layout):
    """The outputs as QuantizedKVCache passes them: 3-D views of positions [5, 9) of a larger cache,
    everything around them untouched."""
    rng = np.random.default_rng(5)
    B, S, H, D, start, n = 2, 16, 3, 40, 5, 4
    full = (B, H, S, D) if layout == "bhsd" else (B, S, H, D)
    cache = [np.full(full, 99, np.int8), np.full(full[:3] + (1,), 99.0, np.float32), np.full(full[:3] + (1,), 99, np.int8)]
    x = rng.standard_normal((B, H, n, D) if layout == "bhsd" else (B, n, H, D)).astype(np.float32)

    def rows(a):
        s = a.strides
        if layout == "bhsd":
            return np.lib.stride_tricks.as_strided(a[:, :, start:start + n], (B * H, n, a.shape[3]), (s[1], s[2], s[3]))
        return np.lib.stride_tricks.as_strided(a[:, start:start + n], (B, n * H, a.shape[3]), (s[0], s[2], s[3]))

    x3 = x.reshape((B * H, n, D) if layout == "bhsd" else (B, n * H, D))
    assert kmod.quantize_rows(x3, *(rows(a) for a in cache), 2, False) == -1
    expect = reference(x)
    sl = (slice(None), slice(None), slice(start, start + n)) if layout == "bhsd" else (slice(None), slice(start, start + n))
    for a, e in zip(cache, expect):
        np.testing.assert_array_equal(a[sl], e)
        outside = np.ones(a.shape, bool)
        outside[sl] = False
        assert (a[outside] == 99).all()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("rows,threads", [(7, 1), (4000, 2)])
def test_non_finite_rows_are_reported_and_nothing_is_written(kmod, bad, rows, threads):
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((1, rows, 32)).astype(np.float32)
    first = rows // 2
    x[0, first, 31] = bad
    x[0, rows - 1, 0] = bad
    outs = _outputs(x.shape, fill=55)
    assert kmod.quantize_rows(x, *outs, threads, False) == first
    assert kmod.quantize_rows(x, None, None, None, threads, True) == first
    for a in outs:
        assert (a == 55).all()
    x[0, [first, rows - 1]] = 0.0
    assert kmod.quantize_rows(x, None, None, None, threads, True) == -1
    for a in outs:
        assert (a == 55).all()  # check_only writes nothing either


def test_bad_arguments_raise_naming_them(kmod):
    x = np.zeros((1, 4, 8), np.float32)
    q8, s, z = _outputs(x.shape)
    with pytest.raises(TypeError, match="x must have dtype float32"):
        kmod.quantize_rows(x.astype(np.float64), q8, s, z, 1, False)
    with pytest.raises(TypeError, match="q8 must have dtype int8"):
        kmod.quantize_rows(x, q8.astype(np.int16), s, z, 1, False)
    with pytest.raises(ValueError, match="x must be 3-D"):
        kmod.quantize_rows(x[0], q8, s, z, 1, False)
    with pytest.raises(ValueError, match="q8 must have the shape of x"):
        kmod.quantize_rows(x, q8[:, :3], s, z, 1, False)
    with pytest.raises(ValueError, match="scales must have shape"):
        kmod.quantize_rows(x, q8, np.zeros((1, 4, 2), np.float32), z, 1, False)
    with pytest.raises(ValueError, match="x must have contiguous rows"):
        kmod.quantize_rows(np.zeros((1, 4, 16), np.float32)[:, :, ::2], q8, s, z, 1, False)
    with pytest.raises(ValueError, match="zero_points must be writeable"):
        ro = z.copy()
        ro.flags.writeable = False
        kmod.quantize_rows(x, q8, s, ro, 1, False)
    with pytest.raises(ValueError, match="q8 has an unsupported stride"):
        kmod.quantize_rows(x, np.lib.stride_tricks.as_strided(q8, strides=(0, 0, 1)), s, z, 1, False)
    with pytest.raises(ValueError, match="must not overlap"):
        both = np.zeros(8, np.int8)
        kmod.quantize_rows(np.zeros((1, 1, 8), np.float32), both.reshape(1, 1, 8), np.zeros((1, 1, 1), np.float32),
                           both[:1].reshape(1, 1, 1), 1, False)
    with pytest.raises(ValueError, match="threads must be >= 1"):
        kmod.quantize_rows(x, q8, s, z, 0, False)
    assert not q8.any() and not s.any() and not z.any()


def test_public_function_uses_the_kernel_on_any_layout():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 6, 5, 48)).astype(np.float32)
    for view in (x, x.transpose(0, 2, 1, 3), x[:, ::2], x[..., 0:1]):
        got = qsdpa.quantize_per_token(view)
        assert got[0].shape == view.shape and got[1].shape == got[2].shape == view.shape[:-1] + (1,)
        _assert_same(got, view)
    raw = np.zeros(4 * 4 * 48 + 1, np.uint8)
    unaligned = raw[1:].view(np.float32).reshape(4, 48)  # a float32 view at an odd address
    unaligned[...] = rng.standard_normal((4, 48))
    assert not unaligned.flags.aligned
    _assert_same(qsdpa.quantize_per_token(unaligned), np.array(unaligned))
    with pytest.raises(ValueError, match="x must be finite"):
        qsdpa.quantize_per_token(np.array([[1.0, np.inf]], np.float32))


# -- dequantize_per_token ----------------------------------------------------------------------------


def test_dequantize_per_token_values_and_broadcast_qparams():
    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 3, 4, 40)).astype(np.float32)
    q8, s, z = qsdpa.quantize_per_token(x)
    got = qsdpa.dequantize_per_token(q8, s, z)
    want = (q8.astype(np.float64) - z) * s  # exact in float64, then one rounding like float32's
    assert got.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_array_equal(got, want.astype(np.float32))
    # [..., 1] qparams that broadcast to q8.shape[:-1] + (1,): one per head, shared by batch and tokens.
    s1, z1 = s[:1, :1], z[:1, :1]
    got = qsdpa.dequantize_per_token(q8, s1, z1)
    np.testing.assert_array_equal(got, ((q8.astype(np.float64) - z1) * s1).astype(np.float32))
    # Strided views are read as they are.
    np.testing.assert_array_equal(qsdpa.dequantize_per_token(q8[:, ::-1], s[:, ::-1], z[:, ::-1]),
                                  qsdpa.dequantize_per_token(q8, s, z)[:, ::-1])


def test_dequantize_per_token_takes_torch_tensors():
    torch = pytest.importorskip("torch")
    q8, s, z = qsdpa.quantize_per_token(np.random.default_rng(13).standard_normal((3, 16)).astype(np.float32))
    got = qsdpa.dequantize_per_token(torch.from_numpy(q8), torch.from_numpy(s), torch.from_numpy(z))
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, qsdpa.dequantize_per_token(q8, s, z))


def test_dequantize_per_token_bad_arguments_raise_naming_them():
    q8 = np.array([[1, -2, 3], [4, 5, 6]], np.int8)
    s = np.full((2, 1), 0.5, np.float32)
    z = np.ones((2, 1), np.int8)
    bad = [
        (([1, 2, 3], s, z), TypeError, r"^q8 must be a numpy\.ndarray, a torch\.Tensor, or a DLPack or buffer-protocol "
                                       r"array, got list"),
        (("abc", s, z), TypeError, "^q8 must be a numpy.ndarray.*got str"),
        ((q8, None, z), TypeError, "^scales must be a numpy.ndarray.*got NoneType"),
        ((q8, s, 3), TypeError, "^zero_points must be a numpy.ndarray.*got int"),
        # Other integer dtypes are refused, not narrowed: int32 300 used to wrap.
        ((np.array([[300, 0, 0]], np.int32), s[:1], z[:1]), TypeError, "^q8 must have dtype int8, got int32"),
        ((q8.astype(np.int16), s, z), TypeError, "^q8 must have dtype int8, got int16"),
        ((q8.astype(np.uint8), s, z), TypeError, "^q8 must have dtype int8, got uint8"),
        ((q8, s.astype(np.float64), z), TypeError, "^scales must have dtype float32, got float64"),
        ((q8, s.astype(">f4"), z), TypeError, "^scales must have dtype float32, got >f4"),
        ((q8, s, z.astype(np.int32)), TypeError, "^zero_points must have dtype int8, got int32"),
        ((np.int8(3), s, z), ValueError, r"^q8 must have at least 1 dimension \(\[\.\.\., D\]\), got shape \(\)"),
        ((q8, np.float32(0.5), z), ValueError, r"^scales must have shape \(2, 1\)"),
        ((q8, s.reshape(2), z), ValueError, r"^scales must have shape \(2, 1\) \(q8's with a last dimension of 1\), "
                                            r"or a \[\.\.\., 1\] shape that broadcasts to it, got \(2,\)"),
        ((q8, np.full((2, 3), 0.5, np.float32), z), ValueError, r"^scales must have shape \(2, 1\)"),
        ((q8, np.full((3, 1), 0.5, np.float32), z), ValueError, r"^scales must have shape \(2, 1\)"),
        ((q8, s, np.ones((1, 2, 1), np.int8)), ValueError, r"^zero_points must have shape \(2, 1\)"),
        ((q8, np.array([[0.5], [np.nan]], np.float32), z), ValueError,
         r"^scales must be finite and > 0; found nan at index \(1, 0\)"),
        ((q8, np.array([[np.inf], [0.5]], np.float32), z), ValueError, r"^scales must be finite and > 0; found inf"),
        ((q8, np.array([[0.5], [0.0]], np.float32), z), ValueError, r"^scales must be finite and > 0; found 0\.0"),
        ((q8, np.array([[-0.5], [0.5]], np.float32), z), ValueError, r"^scales must be finite and > 0; found -0\.5"),
    ]
    for args, exc, pattern in bad:
        with pytest.raises(exc, match=pattern):
            qsdpa.dequantize_per_token(*args)
