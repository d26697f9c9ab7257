#!/usr/bin/env python3
"""Build the AVX-512 and NEON variants' generated sources as pybind11 modules that run on this x86_64 CPU.

    python tests/emulated/build.py [OUT_DIR] [--asan] [--jobs N] [--generated DIR] [--isa NAME ...]

Emulated here (SIMDe), each compiled from the same generated sources as the package build
(registry.sources_for / extra_sources_for) and with the same module name (_kernels_avx512, ...):
  - every x86_64 variant of codegen/registry.py whose flags include -mavx512f, with
    -DQSDPA_X86_VIA_SIMDE: the generated prelude then includes tests/emulated/simde_x86_shim.h
    instead of <immintrin.h>, and every AVX-512 intrinsic is SIMDe's portable implementation (or
    the shim's);
  - every aarch64 NEON variant (family "neon": neon, neon_dotprod), with -DQSDPA_NEON_VIA_SIMDE:
    the prelude includes tests/emulated/simde_neon_shim.h instead of <arm_neon.h>, and every NEON
    intrinsic is SIMDe's x86 implementation (or the shim's).
The registry's ISA flags are not used for them (-mavx512* / -march=armv8*); ISA flags are only those
of this machine up to AVX2 (never -mavx512*), so the modules import and run on any x86_64 CPU with them.
--isa picks a subset (e.g. --isa neon --isa neon_dotprod).

This tests the generated source's logic (masked tails, the VNNI +128 bias, madd_s16, the NEON
smull/sadalp and sdot schemes, ...), not the native instructions. --asan adds
-fsanitize=address,undefined so that an out-of-bounds access in tail code (AVX-512 masked lanes, NEON
stack copies) is reported; python is not sanitized, so run it with
LD_PRELOAD="$(g++ -print-file-name=libasan.so) $(g++ -print-file-name=libstdc++.so)" and
ASAN_OPTIONS=detect_leaks=0 (the command is printed at the end of the build).

Every variant module imports its sibling _kernels_scalar at init (it owns the scratch arena; see
attach_arena in templates/module.cpp.j2), so the scalar module is built too, with the registry's
scalar flags (none beyond the common ones), as a support module: it is not under test here.

OUT_DIR (default build/emulated, or build/emulated-asan with --asan) receives the modules, the shim
self-tests (one per emulated family built) and a manifest, emulated.json, read by
tests/emulated/emulated_modules.py.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import pathlib
import shlex
import subprocess
import sys
import sysconfig
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from codegen import registry  # noqa: E402

# Host flags SIMDe may use underneath (it then implements 512-bit operations as 2 x 256-bit).
# Kept only when this CPU has them; -mno-avx512f makes sure no AVX-512 code is ever generated.
HOST_FLAGS = (("-mavx2", "avx2"), ("-mfma", "fma"), ("-mf16c", "f16c"))
# --asan: ASan + UBSan, fatal on the first report. -O1 (after the registry's -O3, so it wins) is
# ASan's recommended level and compiles ~5x faster here; the -O3 code is covered by the plain build.
SANITIZE_FLAGS = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g1",
                  "-O1")
SUPPORT_ISA = "scalar"  # owner of the scratch arena every variant module attaches to at import

# Per emulated family: the define that makes the generated prelude include the shim, and the shim's
# self-test (source in tests/emulated, executable name in OUT_DIR).
FAMILIES = {
    "x86": dict(define="-DQSDPA_X86_VIA_SIMDE", selftest=("shim_selftest.cpp", "shim_selftest")),
    "neon": dict(define="-DQSDPA_NEON_VIA_SIMDE", selftest=("shim_neon_selftest.cpp", "shim_neon_selftest")),
}


def is_emulated(isa) -> bool:
    return ((isa.arch == "x86_64" and isa.family == "x86" and "-mavx512f" in isa.cflags)
            or (isa.arch == "aarch64" and isa.family == "neon"))


def emulated_isas(only=None):
    isas = [i for i in registry.ISAS if is_emulated(i)]
    if only:
        unknown = set(only) - {i.name for i in isas}
        if unknown:
            sys.exit(f"not an emulated (AVX-512 or NEON) variant: {', '.join(sorted(unknown))}; "
                     f"choose from {', '.join(i.name for i in isas)}")
        isas = [i for i in isas if i.name in only]
    return isas


def cpu_flags() -> set:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def simde_version(cxx: str) -> str:
    probe = "#include <simde/simde-common.h>\nSIMDE_VERSION_MAJOR.SIMDE_VERSION_MINOR.SIMDE_VERSION_MICRO\n"
    try:
        out = subprocess.run([cxx, "-E", "-P", "-x", "c++", "-"], input=probe, capture_output=True, text=True,
                             check=True).stdout
        return out.strip().splitlines()[-1].replace(" ", "")
    except (subprocess.CalledProcessError, IndexError, OSError):
        sys.exit("SIMDe headers not found: install libsimde-dev (Debian) or put simde/ on the include path")


def has_openmp(cxx: str) -> bool:
    """The package build links OpenMP when CMake finds it; do the same when the compiler has it."""
    proc = subprocess.run([cxx, "-fopenmp", "-x", "c++", "-", "-fsyntax-only"], input="#include <omp.h>\n",
                          capture_output=True, text=True)
    return proc.returncode == 0


def run(cmd):
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    return proc, time.monotonic() - t0


def rel(path: pathlib.Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", help="output directory (default build/emulated[-asan])")
    ap.add_argument("--asan", action="store_true", help="build with -fsanitize=address,undefined")
    ap.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--generated", default=str(ROOT / "generated"),
                    help="rendered source tree (default: the repository's generated/)")
    ap.add_argument("--isa", action="append", help="build only this variant (repeatable)")
    ap.add_argument("--cxx", default=os.environ.get("CXX", "g++"))
    args = ap.parse_args()

    out = pathlib.Path(args.out or (ROOT / "build" / ("emulated-asan" if args.asan else "emulated"))).resolve()
    gen = pathlib.Path(args.generated).resolve()
    isas = emulated_isas(args.isa)
    host = [flag for flag, feature in HOST_FLAGS if feature in cpu_flags()]
    pybind_inc = shlex.split(subprocess.run([sys.executable, "-m", "pybind11", "--includes"], capture_output=True,
                                            text=True, check=True).stdout)
    ext = sysconfig.get_config_var("EXT_SUFFIX")
    simde = simde_version(args.cxx)
    openmp = ["-fopenmp"] if has_openmp(args.cxx) else []
    sanitize = list(SANITIZE_FLAGS) if args.asan else []

    # As CMakeLists.txt: C++17 without extensions, PIC, hidden visibility, the registry's common flags.
    base = (["-std=c++17", "-fPIC", "-fvisibility=hidden", "-fvisibility-inlines-hidden"]
            + list(registry.COMMON_CFLAGS) + openmp)
    includes = [f"-I{gen}", f"-I{ROOT / 'csrc'}"] + pybind_inc
    # Without AVX-512, SIMDe's 512-bit vectors are passed by value in memory (-Wno-psabi), 64-byte
    # aligned, and GCC 12 lets a callee rely on that alignment for its own frame. A caller that
    # kept only 16 did not honour it: an out-of-line mm512_mask_storeu_ps (shim) called from
    # flash_attention's run_item faulted on an aligned load from its frame (SIGSEGV, si_addr 0, in
    # the property test). Every call site here keeps 64 bytes; entry points still assume only the
    # ABI's 16 (they are called from Python).
    emu_common = base + host + ["-mno-avx512f", "-Wno-psabi", "-mpreferred-stack-boundary=6",
                                "-mincoming-stack-boundary=4", f"-I{HERE}"]
    emu_flags = {fam: emu_common + [spec["define"]] + includes + sanitize for fam, spec in FAMILIES.items()}
    families = [fam for fam in FAMILIES if any(isa.family == fam for isa in isas)]
    support = registry.isa_by_name(SUPPORT_ISA)
    support_flags = base + list(support.cflags) + includes + sanitize
    ldflags = ["-shared"] + openmp + (["-fsanitize=address,undefined"] if args.asan else [])

    # (label, module or None, sources, flags); the self-test is an executable.
    targets = [(isa.name, isa, isa.module, emu_flags[isa.family]) for isa in isas]
    targets.append((f"{support.name} (support)", support, support.module, support_flags))
    jobs, links = [], []
    for label, isa, module, flags in targets:
        objdir = out / "obj" / isa.name
        objdir.mkdir(parents=True, exist_ok=True)
        srcs = [gen / s for s in registry.sources_for(isa)] + [ROOT / s for s in registry.extra_sources_for(isa)]
        missing = [rel(s) for s in srcs if not s.is_file()]
        if missing:
            sys.exit(f"missing sources for {isa.name}: {', '.join(missing)}\n"
                     f"({rel(gen)} is stale against codegen/registry.py: run `python -m codegen`)")
        objs = [objdir / (s.name + ".o") for s in srcs]
        jobs += [(label, [args.cxx] + flags + ["-c", str(s), "-o", str(o)]) for s, o in zip(srcs, objs)]
        links.append((label, isa, [args.cxx] + ldflags + [str(o) for o in objs] + ["-o", str(out / (module + ext))]))
    selftests = {}
    for fam in families:
        src, exe = FAMILIES[fam]["selftest"]
        obj = out / "obj" / (exe + ".o")
        jobs.append((f"{fam} shim self-test", [args.cxx] + emu_flags[fam] + ["-c", str(HERE / src), "-o", str(obj)]))
        links.append((f"{fam} shim self-test", None, [args.cxx] + openmp
                      + (["-fsanitize=address,undefined"] if args.asan else []) + [str(obj), "-o", str(out / exe)]))
        selftests[fam] = exe

    # Longest first (the pybind11 bindings), so that the workers finish together.
    jobs.sort(key=lambda job: "/module-" not in job[1][job[1].index("-c") + 1])
    print(f"emulated build: SIMDe {simde}; {len(jobs)} translation units, {args.jobs} jobs; host flags "
          f"{' '.join(host) or '(none)'}{' -fopenmp' if openmp else ''}{'; ASan+UBSan' if args.asan else ''}",
          flush=True)
    t0 = time.monotonic()
    failed = False
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for (label, cmd), (proc, dt) in zip(jobs, pool.map(lambda j: run(j[1]), jobs)):
            print(f"  [{dt:5.1f}s] {label}: {rel(pathlib.Path(cmd[cmd.index('-c') + 1]))}", flush=True)
            if proc.returncode != 0:
                failed = True
                print(shlex.join(cmd), proc.stdout, proc.stderr, sep="\n", file=sys.stderr)
    if failed:
        print("emulated build FAILED", file=sys.stderr)
        return 1
    for label, _, cmd in links:
        proc, _ = run(cmd)
        if proc.returncode != 0:
            print(shlex.join(cmd), proc.stdout, proc.stderr, sep="\n", file=sys.stderr)
            return 1

    manifest = dict(simde=simde, asan=args.asan, cxx=args.cxx, generated=str(gen),
                    cflags={fam: emu_flags[fam] for fam in families},
                    modules={isa.name: dict(module=isa.module, path=isa.module + ext, family=isa.family)
                             for isa in isas},
                    support={support.name: dict(module=support.module, path=support.module + ext)},
                    selftests=selftests)
    (out / "emulated.json").write_text(json.dumps(manifest, indent=2) + "\n")

    print(f"built in {time.monotonic() - t0:.1f}s (wall) into {out}:")
    for isa in isas:
        native = "AVX-512" if isa.family == "x86" else "NEON"
        print(f"  {isa.module + ext}  = {isa.name} via SIMDe {simde} (emulated, not native {native})")
    print(f"  {support.module + ext}  = support module ({support.name}: owns the scratch arena; not under test)")
    for fam, exe in selftests.items():
        print(f"  {exe}  = {fam} shim self-test (run by tests/emulated/test_shim.py)")
    if args.asan:
        # libstdc++ too: python is not linked with it, and without it ASan's __cxa_throw interceptor
        # aborts on the first C++ exception (a pybind11 argument error). --capture=sys: a sanitizer
        # report goes to fd 2 and ends the process at once; pytest's default fd capture would hide it.
        print(f'run tests with: LD_PRELOAD="$({args.cxx} -print-file-name=libasan.so) '
              f'$({args.cxx} -print-file-name=libstdc++.so)" ASAN_OPTIONS=detect_leaks=0 '
              f'QSDPA_TEST_EMULATED_DIR={out} python -m pytest --capture=sys tests/emulated')
    else:
        print(f"run tests with: QSDPA_TEST_EMULATED_DIR={out} python -m pytest tests/emulated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
