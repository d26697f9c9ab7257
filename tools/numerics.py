"""How far qsdpa's int8 pipeline is from attention on the original fp32 tensors, next to a q8_0 scheme.

    python tools/numerics.py                              # print the table
    python tools/numerics.py --markdown docs/numerics.md  # and write it (with this command) there

For each activation scenario (Llama-3-8B-like heads: 32 query / 8 KV heads, D = 128), the truth is
float64 attention on the ORIGINAL float32 Q, K, V (never dequantized). Against it:

- qsdpa, int8 Q: quantize_per_token on Q, K and V (per (token, head) row: asymmetric int8, one fp32
  scale and one int8 zero point, ExecuTorch's KV-cache scheme), then qsdpa.quantized_sdpa, i.e. the
  real kernels with their float32 arithmetic.
- qsdpa, fp32 Q: the same int8 K/V cache, the query left in float32.
- q8_0 K/V (fp32 Q), q8_0 Q/K/V: llama.cpp's q8_0 layout, per 32-element block symmetric int8
  (scale = max|x| / 127, round to nearest, an fp16 scale per block); computed as float64 attention
  on the dequantized tensors, so these rows carry the scheme's quantization error only (an ideal
  kernel), a slight advantage over the qsdpa rows, which include their kernel's rounding.
- per-token asym. int8 K/V, fp32 Q (ideal kernel): qsdpa's scheme computed the same ideal way, so
  the q8_0 rows have a like-for-like partner and the gap to the qsdpa fp32-Q row is the kernel's.

Errors are over all outputs: relative RMS error |out - ref|_2 / |ref|_2 and the largest absolute
error relative to max|ref|. Storage is bytes per cached K/V element including the qparams.
"""
from __future__ import annotations

import argparse
import datetime
import platform
import sys
from typing import Callable, Dict, List, Tuple

import numpy as np

import qsdpa

HQ, HKV, D = 32, 8, 128


def attention64(q, k, v, start_pos: int, causal: bool) -> np.ndarray:
    """float64 attention, [B, S, H, D] layout, GQA, ExecuTorch's causal convention; keys past
    start_pos + S_q are not attended (as quantized_sdpa without a mask)."""
    q, k, v = (np.swapaxes(x.astype(np.float64), 1, 2) for x in (q, k, v))
    sq = q.shape[2]
    n = start_pos + sq
    rep = q.shape[1] // k.shape[1]
    k = np.repeat(k[:, :, :n], rep, axis=1)
    v = np.repeat(v[:, :, :n], rep, axis=1)
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.arange(n)[None, :] > start_pos + np.arange(sq)[:, None], -np.inf, s)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return np.swapaxes((p @ v) / p.sum(axis=-1, keepdims=True), 1, 2)


def q8_0(x: np.ndarray) -> np.ndarray:
    """Quantize-dequantize with llama.cpp's q8_0: blocks of 32 along the last dim, symmetric int8,
    an fp16 scale max|x|/127 per block (the dequantization uses the fp16-rounded scale)."""
    blocks = x.astype(np.float32).reshape(x.shape[:-1] + (-1, 32))
    amax = np.abs(blocks).max(axis=-1, keepdims=True)
    d = (amax / 127.0).astype(np.float16).astype(np.float32)
    inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1.0), 0.0)
    q = np.clip(np.round(blocks * inv), -127, 127)
    return (q * d).reshape(x.shape).astype(np.float64)


# ------------------------------------------------------------------------------------- scenarios
def _outlier_channels(rng, x: np.ndarray, n: int, gain: float) -> np.ndarray:
    """Multiply n fixed channels per head by `gain` (the same channels for every token), as
    LLM key caches show (KIVI, KVQuant: a few channels carry most of the key magnitude)."""
    x = x.copy()
    for h in range(x.shape[2]):
        x[:, :, h, rng.choice(x.shape[3], size=n, replace=False)] *= gain
    return x


def scenario(name: str, rng, s_q: int, s_kv: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    g = lambda h, s: rng.standard_normal((1, s, h, D)).astype(np.float32)  # noqa: E731
    token_scale = lambda h, s: np.exp(0.5 * rng.standard_normal((1, s, h, 1))).astype(np.float32)  # noqa: E731
    if name == "gaussian":
        return g(HQ, s_q), g(HKV, s_kv), g(HKV, s_kv)
    if name == "K outlier channels":
        k = _outlier_channels(rng, g(HKV, s_kv) * token_scale(HKV, s_kv), 4, 20.0)
        return g(HQ, s_q), k, g(HKV, s_kv)
    if name == "K outliers, heavy-tailed V":
        k = _outlier_channels(rng, g(HKV, s_kv) * token_scale(HKV, s_kv), 4, 20.0)
        v = rng.standard_t(3, size=(1, s_kv, HKV, D)).astype(np.float32)
        return g(HQ, s_q), k, v
    if name == "K outliers, sharp softmax":
        k = _outlier_channels(rng, g(HKV, s_kv) * token_scale(HKV, s_kv), 4, 20.0)
        return 3.0 * g(HQ, s_q), k, g(HKV, s_kv)
    raise ValueError(name)


SCENARIOS = ("gaussian", "K outlier channels", "K outliers, heavy-tailed V", "K outliers, sharp softmax")
CASES = (("decode, 2048 cached", 1, 2048, False), ("prefill, 256 causal", 256, 256, True))


def schemes() -> Dict[str, Tuple[float, Callable]]:
    """name -> (bytes per cached element at D = 128, f(q, k, v, start, causal) -> output)."""
    def qsdpa_int8_q(q, k, v, start, causal):
        q8, qs, qz = qsdpa.quantize_per_token(q)
        k8, ks, kz = qsdpa.quantize_per_token(k)
        v8, vs, vz = qsdpa.quantize_per_token(v)
        return qsdpa.quantized_sdpa(q8, k8, v8, start, None, 0.0, causal, None, qz, qs, kz, ks, vz, vs)

    def qsdpa_f32_q(q, k, v, start, causal):
        k8, ks, kz = qsdpa.quantize_per_token(k)
        v8, vs, vz = qsdpa.quantize_per_token(v)
        return qsdpa.quantized_sdpa(q, k8, v8, start, is_causal=causal, k_zero_points=kz, k_scales=ks,
                                    v_zero_points=vz, v_scales=vs)

    return {
        "qsdpa, int8 Q (per-token asym. int8 Q/K/V)": (1 + 5 / D, qsdpa_int8_q),
        "qsdpa, fp32 Q (per-token asym. int8 K/V)": (1 + 5 / D, qsdpa_f32_q),
        "per-token asym. int8 K/V, fp32 Q (ideal kernel)": (1 + 5 / D, lambda q, k, v, s, c: attention64(
            q, qsdpa.dequantize_per_token(*qsdpa.quantize_per_token(k)),
            qsdpa.dequantize_per_token(*qsdpa.quantize_per_token(v)), s, c)),
        "q8_0 K/V, fp32 Q (ideal kernel)": (1 + 2 / 32, lambda q, k, v, s, c: attention64(q, q8_0(k), q8_0(v), s, c)),
        "q8_0 Q/K/V (ideal kernel)": (1 + 2 / 32, lambda q, k, v, s, c: attention64(q8_0(q), q8_0(k), q8_0(v), s, c)),
    }


def measure(seed: int = 0) -> List[Dict]:
    rows = []
    for case, s_q, s_kv, causal in CASES:
        for name in SCENARIOS:
            rng = np.random.default_rng([seed, SCENARIOS.index(name), s_q])
            q, k, v = scenario(name, rng, s_q, s_kv)
            start = s_kv - s_q
            ref = attention64(q, k, v, start, causal)
            for scheme, (bytes_per, fn) in schemes().items():
                out = np.asarray(fn(q, k, v, start, causal), dtype=np.float64)
                err = out - ref
                rows.append({"case": case, "scenario": name, "scheme": scheme, "bytes": bytes_per,
                             "rel_rms": float(np.sqrt((err**2).sum() / (ref**2).sum())),
                             "max_rel": float(np.abs(err).max() / np.abs(ref).max())})
    return rows


def markdown(rows: List[Dict], command: str) -> str:
    lines = [
        "# Numerics: the int8 pipeline against fp32 attention on the original tensors",
        "",
        f"Produced by `{command}` on {datetime.date.today().isoformat()} "
        f"({platform.machine()}, numpy {np.__version__}, qsdpa {qsdpa.__version__}, variant "
        f"`{qsdpa.get_isa()}`). What each row computes is in the docstring of `tools/numerics.py`.",
        "",
        f"Heads {HQ} query / {HKV} KV, D = {D}, layout [B, S, H, D], default scale 1/sqrt(D). Truth: float64",
        "attention on the original float32 Q, K, V. *rel RMS* = |out - ref|_2 / |ref|_2 over all outputs;",
        "*max* = max |out - ref| / max |ref|. *B/elt*: bytes per cached K/V element, qparams included.",
        "",
        "Scenarios: *gaussian* N(0, 1) for Q, K, V; *K outlier channels*: keys with a log-normal per-token",
        "magnitude and 4 of 128 channels per head x20 for every token (the outlier channels of LLM key",
        "caches); *heavy-tailed V*: values Student-t (3 dof); *sharp softmax*: queries x3 (peaked attention).",
        "",
        "| case | scenario | scheme | B/elt | rel RMS | max |",
        "|---|---|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['case']} | {r['scenario']} | {r['scheme']} | {r['bytes']:.3f} | {r['rel_rms']:.2e} | "
                     f"{r['max_rel']:.2e} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--markdown", help="write the table (with the command and date) to this file")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rows = measure(args.seed)
    command = "python tools/numerics.py" + (f" --markdown {args.markdown}" if args.markdown else "") + \
        (f" --seed {args.seed}" if args.seed else "")
    text = markdown(rows, command)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
