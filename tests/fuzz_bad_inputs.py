"""Bad-input fuzzer for qsdpa.quantized_sdpa, run in a child process by tests/test_fuzz_bad_inputs.py.

    python tests/fuzz_bad_inputs.py --calls N --seed S [--json FILE]

Each call starts from a valid decode or prefill problem and applies 1 to 3 mutations drawn from
MUTATIONS (a bad-input class each: wrong types, dtypes, ranks, shapes, strides, alignment, sizes
whose byte counts overflow 64 bits, NaN/Inf/zero scales, read-only or aliased `out`, bad scalars).
The call must return (then the output must have the query's shape and dtype) or raise a Python
exception; when it raises and `out` was passed, `out` must be untouched. A raise of anything but
TypeError, ValueError, MemoryError or OverflowError is recorded as "unexpected" (the README promises
TypeError/ValueError naming the argument). The process dying (signal, abort, sanitizer report) is
what the parent test checks; before each call the mutation names are written to stderr, so the
parent can say which input killed it. The variant is the dispatcher's (QSDPA_ISA picks one).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
from collections import Counter
from typing import Callable, Dict, List

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qsdpa  # noqa: E402
from attention_reference import make_case  # noqa: E402

ARRAYS = ("query", "key", "value", "q_scales", "q_zero_points", "k_scales", "k_zero_points", "v_scales",
          "v_zero_points")
QPARAMS = ("q_scales", "q_zero_points", "k_scales", "k_zero_points", "v_scales", "v_zero_points")
SCALES = ("q_scales", "k_scales", "v_scales")
EXPECTED = (TypeError, ValueError, MemoryError, OverflowError)
# Accepted inputs whose true result can exceed float32 (a scale near FLT_MAX): inf/NaN is allowed.
MAY_OVERFLOW = {"qparam value: huge scale", "scalar: scale = float32 max"}


def base_problem(rng) -> Dict:
    """A valid call: decode or prefill, either layout, int8 or fp32 query, sometimes a mask and out."""
    b, hkv = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    hq, d = hkv * int(rng.choice([1, 2, 4])), int(rng.choice([1, 3, 8, 16, 33]))
    sq = int(rng.choice([1, 1, 3, 8]))
    skv = sq + int(rng.integers(0, 40))
    case = make_case(rng, b, hq, hkv, sq, skv, d, float_query=bool(rng.random() < 0.3), seq_dim2=bool(rng.random() < 0.3))
    kw = case.kwargs()
    kw.update(query=case.query, key=case.key, value=case.value, start_pos=int(rng.integers(0, skv - sq + 1)),
              attn_mask=None, dropout_p=0.0, is_causal=bool(rng.random() < 0.5), scale=None, out=None)
    if rng.random() < 0.3:
        kw["out"] = np.zeros(case.query.shape, np.float32)
    return kw


def _unaligned(x: np.ndarray) -> np.ndarray:
    buf = np.zeros(x.nbytes + 1, np.uint8)
    y = np.frombuffer(buf.data, dtype=x.dtype, count=x.size, offset=1).reshape(x.shape)
    y[...] = x
    return y


def _pick(rng, names) -> str:
    return str(rng.choice(names))


def _arr(kw, rng, names=ARRAYS):
    name = _pick(rng, [n for n in names if isinstance(kw.get(n), np.ndarray)] or ["key"])
    return name, kw[name]


# A mutation: (kw, rng) -> None, editing kw in place. Each is one bad-input class.
MUTATIONS: Dict[str, Callable] = {}


def mutation(name: str):
    def register(fn):
        MUTATIONS[name] = fn
        return fn
    return register


def _type_mutation(label, make):
    @mutation(f"type: {label} for an array")
    def fn(kw, rng):
        kw[_pick(rng, ARRAYS + ("attn_mask", "out"))] = make(kw, rng)


for _label, _make in {
    "list": lambda kw, rng: kw["key"].tolist(), "tuple": lambda kw, rng: (1, 2), "int": lambda kw, rng: 3,
    "float": lambda kw, rng: 1.5, "str": lambda kw, rng: "key", "bytes": lambda kw, rng: b"\x00" * 64,
    "None": lambda kw, rng: None, "dict": lambda kw, rng: {"a": 1}, "object": lambda kw, rng: object(),
    "memoryview": lambda kw, rng: memoryview(kw["key"].tobytes()), "numpy scalar": lambda kw, rng: np.float32(1),
    "0-d array": lambda kw, rng: np.array(1, np.int8), "matrix subclass": lambda kw, rng: np.matrix([[1, 2]]),
    "masked array": lambda kw, rng: np.ma.masked_array(kw["key"]),
}.items():
    _type_mutation(_label, _make)


def _dtype_mutation(dtype):
    @mutation(f"dtype: {np.dtype(dtype).str if dtype != object else 'object'}")
    def fn(kw, rng):
        name, x = _arr(kw, rng, ARRAYS + ("out",))
        kw[name] = np.zeros(x.shape, dtype) if dtype == object else x.astype(dtype)


for _dt in (np.float64, np.float16, np.int16, np.int32, np.uint8, np.bool_, np.complex64, object, ">f4", ">i2",
            "datetime64[s]", [("a", np.int8), ("b", np.int8)]):
    _dtype_mutation(_dt)


@mutation("dtype: int8 view as uint8")
def _(kw, rng):
    name, x = _arr(kw, rng, ("query", "key", "value", "q_zero_points", "k_zero_points", "v_zero_points"))
    kw[name] = x.view(np.uint8)


@mutation("rank: 0-D")
def _(kw, rng):
    name, x = _arr(kw, rng, ARRAYS + ("out",))
    kw[name] = np.array(x.flat[0] if x.size else 0, x.dtype)


@mutation("rank: fewer dims")
def _(kw, rng):
    name, x = _arr(kw, rng, ARRAYS + ("out",))
    kw[name] = x.reshape(x.shape[0], -1) if x.size else x[0]


@mutation("rank: more dims")
def _(kw, rng):
    name, x = _arr(kw, rng, ARRAYS + ("out",))
    kw[name] = x[..., None] if rng.random() < 0.5 else x[None]


@mutation("shape: one dim +-1")
def _(kw, rng):
    name, x = _arr(kw, rng, ARRAYS + ("out",))
    shape = list(x.shape)
    axis = int(rng.integers(len(shape)))
    shape[axis] = max(0, shape[axis] + int(rng.choice([-1, 1])))
    kw[name] = np.resize(x, shape) if x.size and all(shape) else np.zeros(shape, x.dtype)


@mutation("shape: a zero-size dim")
def _(kw, rng):
    name, x = _arr(kw, rng, ARRAYS + ("out",))
    shape = list(x.shape)
    shape[int(rng.integers(len(shape)))] = 0
    kw[name] = np.zeros(shape, x.dtype)


@mutation("shape: heads not a multiple")
def _(kw, rng):
    x = kw["query"]
    ax = 1 if kw["is_seq_at_dim_2"] else 2
    shape = list(x.shape)
    shape[ax] += 1
    kw["query"] = np.resize(x, shape)


@mutation("shape: head dim 0 everywhere")
def _(kw, rng):
    for n in ("query", "key", "value"):
        kw[n] = kw[n][..., :0]


@mutation("shape: huge zero-stride (byte count overflows 64 bits)")
def _(kw, rng):
    name, x = _arr(kw, rng, ARRAYS)
    shape = list(x.shape)
    ax = int(rng.integers(len(shape)))
    # 2**62 elements of 4 bytes: the byte count wraps in 64 bits; numpy allows it with stride 0.
    # As close to numpy's 2**63-byte limit as the other dims allow: any x4 (float32 scratch) or x2
    # (int16 query rows) of it, or a sum of two such sizes, wraps in 64 bits.
    others = int(np.prod([s for i, s in enumerate(shape) if i != ax])) or 1
    shape[ax] = max(1, (2**63 - 1) // (x.itemsize * others))
    kw[name] = np.lib.stride_tricks.as_strided(x, shape=shape, strides=[0] * len(shape))


@mutation("shape: huge cache length, zero stride")
def _(kw, rng):
    seq = 2 if kw["is_seq_at_dim_2"] else 1
    for n in ("key", "value", "k_scales", "k_zero_points", "v_scales", "v_zero_points"):
        x = kw[n]
        shape, strides = list(x.shape), list(x.strides)
        shape[seq], strides[seq] = 2**40, 0
        kw[n] = np.lib.stride_tricks.as_strided(x, shape=shape, strides=strides)


@mutation("strides: every other element")
def _(kw, rng):
    name, x = _arr(kw, rng, ARRAYS + ("out",))
    big = np.repeat(x, 2, axis=-1)
    kw[name] = big[..., ::2]


@mutation("strides: negative")
def _(kw, rng):
    name, x = _arr(kw, rng, ARRAYS + ("out",))
    kw[name] = x[..., ::-1] if rng.random() < 0.5 else x[::-1]


@mutation("strides: zero (broadcast)")
def _(kw, rng):
    name, x = _arr(kw, rng, ARRAYS + ("out",))
    kw[name] = np.broadcast_to(x[..., :1], x.shape)


@mutation("strides: transposed")
def _(kw, rng):
    name, x = _arr(kw, rng, ARRAYS + ("out",))
    kw[name] = np.ascontiguousarray(np.swapaxes(x, 1, 2)).swapaxes(1, 2) if x.ndim == 4 else x.T


@mutation("strides: overlapping rows")
def _(kw, rng):
    name, x = _arr(kw, rng, ARRAYS + ("out",))
    if x.ndim == 4 and x.shape[-1] > 1:
        shape = x.shape
        strides = x.strides[:3] + (x.strides[3],)
        strides = (strides[0], strides[1], x.itemsize, x.itemsize)  # rows overlap one another
        kw[name] = np.lib.stride_tricks.as_strided(x, shape=shape, strides=strides)


@mutation("alignment: misaligned float32 array")
def _(kw, rng):
    name = _pick(rng, [n for n in ("query", "q_scales", "k_scales", "v_scales", "out")
                       if isinstance(kw.get(n), np.ndarray) and kw[n].dtype == np.float32] or ["k_scales"])
    kw[name] = _unaligned(kw[name])


@mutation("alignment: misaligned float32 mask")
def _(kw, rng):
    s = kw["key"].shape[2 if kw["is_seq_at_dim_2"] else 1]
    sq = kw["query"].shape[2 if kw["is_seq_at_dim_2"] else 1]
    kw["is_causal"] = False
    kw["attn_mask"] = _unaligned(np.zeros((sq, s), np.float32))


def _scale_value_mutation(label, value):
    @mutation(f"qparam value: {label} scale")
    def fn(kw, rng):
        name = _pick(rng, [n for n in SCALES if isinstance(kw.get(n), np.ndarray)])
        x = kw[name].copy()
        x.flat[int(rng.integers(x.size))] = value
        kw[name] = x


for _label, _v in {"NaN": np.nan, "+inf": np.inf, "-inf": -np.inf, "zero": 0.0, "negative": -1.0,
                   "denormal": 1e-45, "huge": 3e38}.items():
    _scale_value_mutation(_label, _v)


@mutation("qparam value: every zero point -128 or 127")
def _(kw, rng):
    for n in ("q_zero_points", "k_zero_points", "v_zero_points"):
        if isinstance(kw.get(n), np.ndarray):
            kw[n] = np.full_like(kw[n], rng.choice([-128, 127]))


@mutation("qparams: missing (None)")
def _(kw, rng):
    kw[_pick(rng, QPARAMS)] = None


@mutation("qparams: float query given int8 qparams")
def _(kw, rng):
    kw["query"] = np.zeros(kw["query"].shape, np.float32)
    kw["q_scales"] = np.ones(kw["query"].shape[:-1] + (1,), np.float32)
    kw["q_zero_points"] = np.zeros(kw["query"].shape[:-1] + (1,), np.int8)


def _scalar_mutation(arg, label, value):
    @mutation(f"scalar: {arg} = {label}")
    def fn(kw, rng):
        kw[arg] = value


for _arg, _vals in {
    "start_pos": {"-1": -1, "past the cache": 10**6, "2**63-1": 2**63 - 1, "2**63": 2**63, "2**64": 2**64,
                  "-2**63": -(2**63), "-2**64": -(2**64), "float": 1.0, "bool": True, "None": None, "str": "0",
                  "np.int64": np.int64(0), "np.uint64 max": np.uint64(2**64 - 1), "nan": float("nan")},
    "scale": {"NaN": float("nan"), "+inf": float("inf"), "-inf": float("-inf"), "0": 0.0, "1e300": 1e300,
              "-1e300": -1e300, "1e-300": 1e-300, "float32 max": float(np.finfo(np.float32).max), "str": "1",
              "complex": 1j, "np.float64 NaN": np.float64("nan"), "np.float32": np.float32(0.5), "bool": True,
              "int": 2, "huge int": 10**400},
    "dropout_p": {"0.5": 0.5, "NaN": float("nan"), "-1": -1.0, "str": "0", "None": None, "bool": False, "int 0": 0},
    "is_causal": {"int": 1, "str": "yes", "None": None, "np.bool_": np.bool_(True), "array": np.array([True])},
    "is_seq_at_dim_2": {"int": 0, "str": "no", "None": None, "np.bool_": np.bool_(False)},
}.items():
    for _label, _v in _vals.items():
        _scalar_mutation(_arg, _label, _v)


def _mask_mutation(label, make):
    @mutation(f"mask: {label}")
    def fn(kw, rng):
        seq = 2 if kw["is_seq_at_dim_2"] else 1
        sq, skv = kw["query"].shape[seq], kw["key"].shape[seq]
        b, hq = kw["query"].shape[0], kw["query"].shape[1 if kw["is_seq_at_dim_2"] else 2]
        kw["is_causal"] = bool(rng.random() < 0.2)
        kw["attn_mask"] = make(rng, b, hq, sq, skv)


for _label, _make in {
    "NaN": lambda rng, b, h, sq, skv: np.full((sq, skv), np.nan, np.float32),
    "+inf": lambda rng, b, h, sq, skv: np.full((sq, skv), np.inf, np.float32),
    "all -inf": lambda rng, b, h, sq, skv: np.full((sq, skv), -np.inf, np.float32),
    "3-D": lambda rng, b, h, sq, skv: np.zeros((h, sq, skv), np.float32),
    "4-D wrong heads": lambda rng, b, h, sq, skv: np.zeros((b, h + 1, sq, skv), bool),
    "2-D short": lambda rng, b, h, sq, skv: np.zeros((sq, max(skv - 1, 0)), bool),
    "int32": lambda rng, b, h, sq, skv: np.zeros((sq, skv), np.int32),
    "float64": lambda rng, b, h, sq, skv: np.zeros((sq, skv), np.float64),
    "broadcast 4-D": lambda rng, b, h, sq, skv: np.broadcast_to(np.zeros((1, 1, sq, skv), np.float32), (b, h, sq, skv)),
    "valid float": lambda rng, b, h, sq, skv: rng.standard_normal((sq, skv)).astype(np.float32),
    "valid bool 4-D": lambda rng, b, h, sq, skv: rng.random((b, h, sq, skv)) < 0.5,
}.items():
    _mask_mutation(_label, _make)


@mutation("out: read-only")
def _(kw, rng):
    out = np.zeros(kw["query"].shape, np.float32)
    out.setflags(write=False)
    kw["out"] = out


@mutation("out: aliases the float query")
def _(kw, rng):
    kw["query"] = np.ones(kw["query"].shape, np.float32)
    kw["q_scales"] = kw["q_zero_points"] = None
    kw["out"] = kw["query"]


@mutation("out: overlaps K's bytes")
def _(kw, rng):
    shape = kw["query"].shape
    n = int(np.prod(shape))
    buf = np.zeros(n * 4 + kw["key"].nbytes, np.uint8)
    key = np.frombuffer(buf.data, np.int8, count=kw["key"].size, offset=0).reshape(kw["key"].shape)
    key[...] = kw["key"]
    kw["key"] = key
    kw["out"] = np.frombuffer(buf.data, np.float32, count=n, offset=0).reshape(shape)


@mutation("out: overlaps a scale array")
def _(kw, rng):
    name = _pick(rng, [n for n in SCALES if isinstance(kw.get(n), np.ndarray)])
    shape = kw["query"].shape
    n = int(np.prod(shape))
    buf = np.ones(max(n, kw[name].size) + 1, np.float32)
    kw[name] = buf[: kw[name].size].reshape(kw[name].shape)
    kw["out"] = buf[1 : n + 1].reshape(shape)


@mutation("out: overlaps the mask")
def _(kw, rng):
    seq = 2 if kw["is_seq_at_dim_2"] else 1
    sq, skv = kw["query"].shape[seq], kw["key"].shape[seq]
    n = int(np.prod(kw["query"].shape))
    buf = np.zeros(n + sq * skv, np.float32)
    kw["is_causal"] = False
    kw["attn_mask"] = buf[: sq * skv].reshape(sq, skv)
    kw["out"] = buf[sq * skv // 2 : sq * skv // 2 + n].reshape(kw["query"].shape)


@mutation("out: non-contiguous")
def _(kw, rng):
    kw["out"] = np.zeros(kw["query"].shape + (2,), np.float32)[..., 0]


@mutation("out: wrong shape")
def _(kw, rng):
    kw["out"] = np.zeros(kw["query"].shape[:-1] + (kw["query"].shape[-1] + 1,), np.float32)


@mutation("call: positional garbage")
def _(kw, rng):
    kw["__positional__"] = [object()] * int(rng.integers(0, 20))


@mutation("call: unknown keyword")
def _(kw, rng):
    kw["bogus"] = 1


SNAPSHOT_CAP = 1 << 28  # bytes


def snapshot(out: np.ndarray):
    """What `out`'s memory holds before a call, to tell afterwards whether a refused call wrote it:
    a copy of the array, or, for an array far larger than its memory (zero strides: a 2**40-row
    view of a few bytes), a copy of the bytes it spans. None if even those are too many."""
    if out.nbytes <= SNAPSHOT_CAP:
        return ("array", out.copy())
    lo, hi = np.lib.array_utils.byte_bounds(np.asarray(out))
    return ("bytes", lo, ctypes.string_at(lo, hi - lo)) if hi - lo <= SNAPSHOT_CAP else None


def unchanged(before, out: np.ndarray) -> bool:
    if before[0] == "bytes":
        _, lo, data = before
        return ctypes.string_at(lo, len(data)) == data
    copy = before[1]
    if copy.shape != out.shape:
        return True
    try:
        return np.array_equal(copy, out, equal_nan=True)
    except TypeError:  # dtypes without NaN
        return np.array_equal(copy, out)


def run(calls: int, seed: int, log) -> Dict:
    rng = np.random.default_rng(seed)
    names = sorted(MUTATIONS)
    outcomes: Counter = Counter()
    per_class: Dict[str, Counter] = {n: Counter() for n in names}
    unexpected: List[str] = []
    out_written: List[str] = []
    for i in range(calls):
        kw = base_problem(rng)
        # every class at least once, in order; then random 1-3 class combinations
        chosen = [names[i]] if i < len(names) else [str(n) for n in rng.choice(names, size=int(rng.integers(1, 4)))]
        try:
            for n in chosen:
                MUTATIONS[n](kw, rng)
        except Exception as exc:  # the garbage itself could not be built (numpy refused); not a call
            log.write(f"call {i}: {' + '.join(chosen)}: not built ({type(exc).__name__}: {exc})\n")
            outcomes["not built"] += 1
            continue
        log.write(f"call {i}: {' + '.join(chosen)}\n")
        log.flush()
        positional = kw.pop("__positional__", None)
        out = kw.get("out")
        before = snapshot(out) if isinstance(out, np.ndarray) and not np.shares_memory(out, kw["query"]) else None
        try:
            res = qsdpa.quantized_sdpa(*positional) if positional is not None else qsdpa.quantized_sdpa(**kw)
            if not (isinstance(res, np.ndarray) and res.dtype == np.float32 and res.shape == np.shape(kw["query"])):
                unexpected.append(f"{chosen}: returned {type(res).__name__} {getattr(res, 'shape', '')}")
            elif not np.isfinite(res).all() and not set(chosen) & MAY_OVERFLOW:
                # Finite, accepted inputs must give a finite answer; a NaN here is a wrong answer.
                unexpected.append(f"{chosen}: returned non-finite values")
            outcome = "returned"
        except EXPECTED as exc:
            outcome = type(exc).__name__
            if before is not None and not unchanged(before, out):
                out_written.append(f"{chosen}: {outcome} but out was written")
        except Exception as exc:  # a Python exception, so no crash, but not the documented kind
            outcome = type(exc).__name__
            unexpected.append(f"{chosen}: {type(exc).__name__}: {exc}")
        outcomes[outcome] += 1
        for n in chosen:
            per_class[n][outcome] += 1
    return {"calls": calls, "classes": len(names), "classes_tried": sum(1 for n in names if per_class[n]),
            "outcomes": dict(outcomes), "unexpected": unexpected[:50], "unexpected_count": len(unexpected),
            "out_written": out_written[:50], "variant": qsdpa.get_isa(),
            "per_class": {n: dict(c) for n, c in per_class.items()}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import warnings

    warnings.simplefilter("ignore")  # numpy's cast warnings for the garbage we build on purpose
    summary = run(args.calls, args.seed, sys.stderr)
    text = json.dumps(summary, indent=1, sort_keys=True)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
