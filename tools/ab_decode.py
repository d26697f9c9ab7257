"""Paired A/B timing of two builds of one variant on a decode step, in one process.

A is the installed variant module; B is a build of the working tree (or of any revision) made with
CMake's QSDPA_AB_SUFFIX, so that its module has another name and loads beside A (a second build
under the same name would come back as the installed one, and an A/B would time a build against
itself):

    cmake -S . -B /tmp/ab -G Ninja -DCMAKE_BUILD_TYPE=Release -DQSDPA_AB_SUFFIX=_ab \
          -Dpybind11_DIR="$(python -m pybind11 --cmakedir)"
    ninja -C /tmp/ab _kernels_avx512_vnni
    python tools/ab_decode.py /tmp/ab/_kernels_avx512_vnni_ab.*.so --regime cold --threads 1

Both run on the same inputs, alternating call by call (ABBA order), and their outputs must be the
same bits unless --allow-diff (a difference is reported as max |A - B| / max |A| either way).
Printed: each build's median time and the median over pairs of B/A (below 1: B is faster). Cold: the caches of --layers layers in rotation, back to back (each
call's K/V last read --layers calls ago); hot: an untimed call on the same layer before each timed
one. Each layer's arrays are allocated as the bench's are (--numpy-arrays: as numpy's). On a
shared VM, repeat a comparison a few times: ratios move by a few percent between runs.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time

import numpy as np

from qsdpa import _bench, _dispatch, quantize_per_token

MODELS = {"llama3-8b": (32, 8, 128), "llama3.2-1b": (32, 8, 64), "small": (9, 3, 64)}


def load_b(path: str, isa: str):
    name = os.path.basename(path).split(".")[0]
    if not name.startswith(f"_kernels_{isa}") or name == f"_kernels_{isa}":
        raise SystemExit(f"{path}: expected a module named _kernels_{isa}<suffix> (build with -DQSDPA_AB_SUFFIX)")
    spec = importlib.util.spec_from_file_location(f"qsdpa.{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if module.ISA != isa:
        raise SystemExit(f"{path} is variant {module.ISA!r}, not {isa!r}")
    return module


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("b", help="the B build's module (.so), named _kernels_<isa><suffix>")
    ap.add_argument("--isa", default=None, help="variant (default: the dispatched one)")
    ap.add_argument("--model", default="llama3-8b", choices=sorted(MODELS))
    ap.add_argument("--ctx", type=int, default=2048, help="cached tokens (the step attends ctx + 1 keys)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--regime", default="cold", choices=("hot", "cold"))
    ap.add_argument("--layers", type=int, default=16, help="cold: layers in rotation")
    ap.add_argument("--calls", type=int, default=200, help="timed calls of each build")
    ap.add_argument("--pause-ms", type=float, default=0.0,
                    help="before each timed call (and its hot re-warm), the bench's pause (_settle: quiet threads, "
                         "then busy cores) of this length; 0: back to back")
    ap.add_argument("--allow-diff", action="store_true", help="do not require bit-identical outputs")
    ap.add_argument("--numpy-arrays", action="store_true",
                    help="each layer's arrays as numpy allocates them (large ones start 16 bytes past a page: "
                         "every 64-byte load of K straddles two lines; 4 KiB pages) instead of the bench's "
                         "(64-byte aligned, on 2 MiB pages where the OS grants them: _bench.on_huge_pages)")
    ap.add_argument("--b-prefetch", default=None, metavar="SETTING",
                    help="run B with this decode prefetch setting (prefetch_after_work.py's names: L1/4, "
                         "L2+walk/8, ...; A keeps its CPU's default): with B a build of the same source, an A/B "
                         "of the setting alone")
    args = ap.parse_args(argv)

    isa = args.isa or _dispatch.get_isa()
    builds = {"A": _dispatch.load_variant(isa), "B": load_b(args.b, isa)}
    if args.b_prefetch:
        from prefetch_after_work import parse_tuning

        builds["B"]._set_prefetch_tuning(*parse_tuning(args.b_prefetch))
    hq, hkv, d = MODELS[args.model]
    rng = np.random.default_rng(0)
    s_kv = args.ctx + 1
    k8, ks, kz = quantize_per_token(rng.standard_normal((1, s_kv, hkv, d), dtype=np.float32))
    v8, vs, vz = quantize_per_token(rng.standard_normal((1, s_kv, hkv, d), dtype=np.float32))
    q8, qs, qz = quantize_per_token(rng.standard_normal((1, 1, hq, d), dtype=np.float32))
    n_layers = args.layers if args.regime == "cold" else 1
    arrays = (k8, ks, kz, v8, vs, vz)
    layers = [[np.copy(a) for a in arrays] if args.numpy_arrays else _bench.on_huge_pages(arrays)
              for _ in range(n_layers)]
    outs = {n: np.empty(q8.shape, np.float32) for n in builds}
    scale = 1.0 / np.sqrt(d)

    def call(name: str, layer: int) -> None:
        k, kscale, kzp, v, vscale, vzp = layers[layer]
        builds[name].quantized_sdpa(q8, qs, qz, k, kscale, kzp, v, vscale, vzp, None, s_kv - 1, True, scale, False,
                                    outs[name], args.threads, 0)

    for name in builds:
        for layer in range(n_layers):
            call(name, layer)
    if not np.array_equal(outs["A"], outs["B"]):
        gap = float(np.max(np.abs(outs["A"].astype(np.float64) - outs["B"]))) / float(np.max(np.abs(outs["A"])))
        print(f"A and B give different outputs: max |A - B| / max |A| = {gap:.2e}", file=sys.stderr)
    if not args.allow_diff and not np.array_equal(outs["A"], outs["B"]):
        print("(--allow-diff to time them anyway)", file=sys.stderr)
        return 1
    times = {n: [] for n in builds}
    layer = 0
    clocks = _bench.ThreadClocks()
    for i in range(args.calls):
        for name in ("A", "B") if i % 2 == 0 else ("B", "A"):
            if args.pause_ms > 0:
                clocks.refresh()
                _bench._settle(args.pause_ms * 1e-3, args.threads, clocks)
            if args.regime == "hot":
                call(name, 0)
            t0 = time.perf_counter()
            call(name, layer % n_layers if args.regime == "cold" else 0)
            times[name].append(time.perf_counter() - t0)
            layer += 1
    med = {n: statistics.median(t) * 1e6 for n, t in times.items()}
    ratio = statistics.median(b / a for a, b in zip(times["A"], times["B"]))
    pause = f", after a {args.pause_ms:g} ms pause" if args.pause_ms > 0 else ""
    print(f"{isa} {args.model} decode ctx={args.ctx} t={args.threads} {args.regime}{pause}: A {med['A']:.1f} us, "
          f"B {med['B']:.1f} us; B/A median of {args.calls} pairs {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
