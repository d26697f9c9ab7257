"""QuantizedKVCache.update with inputs that alias the cache's own memory, or that the quantize kernel
cannot read as they are (reversed, broadcast, unaligned views), on every variant's kernel.

update copies such inputs before writing anything: an aliased k/v gives exactly the cache an
``update(start_pos, k.copy(), v.copy())`` gives (tools/repro/update_alias_*.py), and a rejected one
(a NaN in it) leaves every array of the cache unchanged; a strided view gives the cache its
contiguous copy gives (tools/repro/update_strided_input.py). No error of update names the kernel's
internal ``x``. (That the common path, a contiguous or sliced non-aliased input, still allocates
nothing is in tests/test_kv_cache_allocations.py.)
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import qsdpa
from qsdpa import _dispatch

LAYOUTS = pytest.mark.parametrize("layout", ["bshd", "bhsd"])
NAMES = ("key", "value", "k_scales", "k_zero_points", "v_scales", "v_zero_points")
B, S_MAX, H = 1, 16, 2


@pytest.fixture
def variant(kmod, isa_name, monkeypatch):
    """Make update (which calls the dispatcher's module) run the variant under test."""
    monkeypatch.setattr(_dispatch, "_selection", dataclasses.replace(_dispatch.selection(), name=isa_name,
                                                                      module=kmod))
    assert _dispatch.selection().module is kmod
    return kmod


def _shape(layout, s, d, h=H):
    return (B, h, s, d) if layout == "bhsd" else (B, s, h, d)


def _snapshot(cache):
    """Every array of the cache, bit for bit (a NaN equals itself), and its length."""
    return {n: cache.sdpa_args()[n].tobytes() for n in NAMES}, cache.length


def _assert_same_cache(a, b):
    (arrays_a, len_a), (arrays_b, len_b) = _snapshot(a), _snapshot(b)
    assert len_a == len_b
    for n in NAMES:
        assert arrays_a[n] == arrays_b[n], n


def _history(layout, d, seed=0):
    """A cache with 8 positions written."""
    rng = np.random.default_rng(seed)
    cache = qsdpa.QuantizedKVCache(B, S_MAX, H, d, layout=layout)
    cache.update(0, rng.standard_normal(_shape(layout, 8, d), dtype=np.float32),
                 rng.standard_normal(_shape(layout, 8, d), dtype=np.float32) * 2)
    return cache


def _alias(cache, target, shape, offset_bytes=0):
    """A float32 array of ``shape`` over the bytes of the cache's array ``target`` (any dtype)."""
    flat = cache.sdpa_args()[target].reshape(-1).view(np.uint8)
    n = int(np.prod(shape)) * 4
    assert offset_bytes + n <= flat.size
    a = flat[offset_bytes:offset_bytes + n].view(np.float32).reshape(shape)
    assert np.shares_memory(a, cache.sdpa_args()[target])
    return a


def _fits(target, d, s):
    """Whether an [B, s, H, d] float32 array fits inside ``target``'s bytes."""
    per_row = d if target in ("key", "value") else (4 if "scales" in target else 1)
    return s * d * 4 <= S_MAX * per_row


def _alias_cases():
    cases = []
    for d in (1, 8):
        for target in NAMES:
            fitting = [s for s in (4, 2, 1) if _fits(target, d, s)]
            if not fitting:
                continue
            s = fitting[0]
            for role in ("k", "v", "both"):
                cases.append(pytest.param(d, s, target, role, id=f"D{d}-{role}-over-{target}"))
    return cases


@LAYOUTS
@pytest.mark.parametrize("d, s, target, role", _alias_cases())
def test_aliased_input_gives_what_a_copy_gives(variant, layout, d, s, target, role):
    """k and/or v a view of one of the cache's six arrays: the result is update(k.copy(), v.copy())'s,
    whether the overlap is with arrays the v pass writes before k is read, or ones the k pass writes."""
    shape = _shape(layout, s, d)
    rng = np.random.default_rng(hash((layout, d, target, role)) % 2**32)
    for start in (0, 1, 8 - s, 8):
        got, want = _history(layout, d), _history(layout, d)
        # The same finite float32 values written into the same bytes of both caches: afterwards their
        # memory is identical, and `aliased` holds the values a copied input would hold.
        values = (rng.standard_normal(shape) * 3).astype(np.float32)
        aliased = _alias(got, target, shape)
        aliased[...] = values
        _alias(want, target, shape)[...] = values
        _assert_same_cache(got, want)
        other = rng.standard_normal(shape, dtype=np.float32)
        k, v = {"k": (aliased, other), "v": (other, aliased), "both": (aliased, aliased)}[role]
        k_copy, v_copy = {"k": (values, other), "v": (other, values), "both": (values, values)}[role]
        got.update(start, k, v)
        want.update(start, k_copy.copy(), v_copy.copy())
        _assert_same_cache(got, want)
        # And what was stored is the quantization of the values passed, not of what the other pass wrote.
        for name, x in (("key", k_copy), ("value", v_copy)):
            stored = got.sdpa_args()[name]
            sl = (slice(None), slice(None), slice(start, start + s)) if layout == "bhsd" else (slice(None), slice(start, start + s))
            assert np.array_equal(stored[sl], qsdpa.quantize_per_token(x)[0]), name


@LAYOUTS
@pytest.mark.parametrize("target", ["k_scales", "v_scales", "value", "key"])
@pytest.mark.parametrize("role", ["k", "v"])
def test_rejected_aliased_input_writes_nothing(variant, layout, target, role):
    """An aliased input that is refused (it holds a NaN) leaves every array of the cache as it was:
    the refusal comes before the first write (the v pass used to run before k's overlap was seen)."""
    d, s = 1, 4
    cache = _history(layout, d)
    aliased = _alias(cache, target, _shape(layout, s, d))
    aliased[...] = 0.5
    aliased.reshape(-1)[-1] = np.nan
    before = _snapshot(cache)
    other = np.ones(_shape(layout, s, d), np.float32)
    k, v = (aliased, other) if role == "k" else (other, aliased)
    with pytest.raises(ValueError, match=f"^{role} must be finite"):
        cache.update(0, k, v)
    after = _snapshot(cache)
    assert before[1] == after[1] and before[0] == after[0]


def test_the_repro_cases():
    """tools/repro/update_alias_partial_write.py and update_alias_silent.py, as assertions."""
    rng = np.random.default_rng(0)
    for target in ("k_scales", "v_scales"):
        caches = [qsdpa.QuantizedKVCache(1, 8, 2, 1) for _ in range(2)]
        k0, v0 = rng.standard_normal((2, 1, 4, 2, 1), dtype=np.float32)
        for c in caches:
            c.update(0, k0, v0)
        k = getattr(caches[0].to_bshd(), target)[:, :4]
        v = np.full((1, 4, 2, 1), 7.0, np.float32)
        caches[1].update(0, k.copy(), v)
        caches[0].update(0, k, v)
        _assert_same_cache(caches[0], caches[1])


def _strided_views(layout, d, rng):
    """(label, view) pairs of float32 [B, S, H, D] (or [B, H, S, D]) views the kernel cannot read as
    they are, or only through their strides, with S = 3."""
    s = 3
    shape = _shape(layout, s, d)
    x = rng.standard_normal(shape, dtype=np.float32)
    seq_axis = 2 if layout == "bhsd" else 1
    views = []
    for axis in range(4):
        idx = [slice(None)] * 4
        idx[axis] = slice(None, None, -1)
        views.append((f"reversed axis {axis}", rng.standard_normal(shape, dtype=np.float32)[tuple(idx)]))
    views.append(("broadcast scalar", np.broadcast_to(np.float32(1.5), shape)))
    views.append(("broadcast row", np.broadcast_to(x[:1, :1, :1], shape)))
    for axis in range(4):
        one = list(shape)
        one[axis] = 1
        views.append((f"broadcast along axis {axis}", np.broadcast_to(x[tuple(slice(0, n) for n in one)], shape)))
    views.append(("every other element", np.repeat(x, 2, axis=3)[..., ::2]))
    views.append(("every other position", np.repeat(x, 2, axis=seq_axis)[(slice(None),) * seq_axis + (slice(None, None, 2),)]))
    views.append(("transposed storage", np.ascontiguousarray(x.transpose(3, 2, 1, 0)).transpose(3, 2, 1, 0)))
    views.append(("fortran order", np.asfortranarray(x)))
    raw = np.zeros(x.nbytes + 1, np.uint8)
    unaligned = raw[1:].view(np.float32).reshape(shape)
    unaligned[...] = x
    assert not unaligned.flags.aligned
    views.append(("unaligned", unaligned))
    return views


@LAYOUTS
@pytest.mark.parametrize("d", [1, 8, 33])
def test_strided_inputs_give_the_cache_of_their_contiguous_copies(variant, layout, d):
    rng = np.random.default_rng(d)
    ok = rng.standard_normal(_shape(layout, 3, d), dtype=np.float32)
    for label, view in _strided_views(layout, d, rng):
        for role in ("k", "v"):
            got, want = _history(layout, d), _history(layout, d)
            k, v = (view, ok) if role == "k" else (ok, view)
            got.update(5, k, v)
            want.update(5, np.ascontiguousarray(k), np.ascontiguousarray(v))
            try:
                _assert_same_cache(got, want)
            except AssertionError as exc:
                raise AssertionError(f"{label} as {role}: {exc}") from None


def test_strided_torch_inputs():
    torch = pytest.importorskip("torch")
    x = torch.randn(1, 1, 2, 8)
    for k in (x.expand(1, 3, 2, 8), torch.randn(1, 8, 2, 3).transpose(1, 3), torch.randn(1, 3, 2, 16)[..., ::2]):
        got, want = _history("bshd", 8), _history("bshd", 8)
        got.update(2, k, k)
        want.update(2, k.contiguous().numpy(), k.contiguous().numpy())
        _assert_same_cache(got, want)


@LAYOUTS
def test_update_errors_name_its_arguments_never_x(layout):
    cache = _history(layout, 8)
    ok = np.ones(_shape(layout, 2, 8), np.float32)
    bad = [(0, ok.astype(np.float64), ok), (0, ok, ok[..., ::2]), (0, ok[..., None], ok), (0, ok, "v"),
           (0, ok, None), (0, ok, ok.astype(">f4")), (0, ok, ok[::-1, ::-1][..., :4]), (-1, ok, ok), (9, ok, ok),
           (0, np.full(ok.shape, np.inf, np.float32)[..., ::-1], ok), (0, ok, np.broadcast_to(np.float32(np.nan), ok.shape)),
           (0, ok, np.ones(_shape(layout, 3, 8), np.float32))]
    before = _snapshot(cache)
    for args in bad:
        with pytest.raises((TypeError, ValueError)) as info:
            cache.update(*args)
        message = str(info.value)
        assert message.split()[0] in ("k", "v", "start_pos", "start_pos:"), message
        assert not message.startswith("x "), message
    after = _snapshot(cache)
    assert before[1] == after[1] and before[0] == after[0]


@LAYOUTS
def test_a_refusal_by_the_kernel_names_k_or_v_and_writes_nothing(layout):
    """A row of finite values whose range overflows float32 ([3e38, -3e38]): the quantize kernel
    refuses it (it calls its input "x"), update's message names k or v, and nothing is written."""
    cache = _history(layout, 4)
    wide = np.ones(_shape(layout, 2, 4), np.float32)
    wide.reshape(-1, 4)[1] = [3e38, -3e38, 1.0, 0.0]
    ok = np.ones_like(wide)
    before = _snapshot(cache)
    for role, (k, v) in (("k", (wide, ok)), ("v", (ok, wide))):
        with pytest.raises(ValueError, match="^" + role + r"'s range \(max - min, with 0\) must fit in float32"):
            cache.update(3, k, v)
        assert _snapshot(cache) == before
