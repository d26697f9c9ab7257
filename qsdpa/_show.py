"""show_runtime(): a plain-text report of what qsdpa found on this machine and why it chose as it did.

It must work when the selection fails (an invalid QSDPA_ISA, an incomplete build): that is when
people need it, so it reports the error in place instead of raising.
"""
from __future__ import annotations

import os
import platform
import sys
from typing import List, Optional, TextIO

from . import _dispatch, _entry, _threads
from ._version import __version__


def _yes(value: object) -> str:
    return "?" if value is None else ("yes" if value else "no")


def _hex(value: object) -> str:
    return "n/a" if value is None else f"{int(value):#x}"  # type: ignore[call-overload]


# Shared-library names of the OpenMP runtimes a process may hold (GNU, LLVM, Intel).
_OPENMP_RUNTIMES = ("libgomp", "libomp", "libiomp5")


def openmp_runtimes() -> Optional[List[str]]:
    """Paths of the OpenMP runtimes mapped into this process (Linux; None where /proc/self/maps is
    not there). One libgomp serves the whole process: torch's wheel ships its own libgomp.so.1, and
    whichever of it and the system's is loaded first is the one qsdpa's kernels run on."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if len(line.split()) >= 6}
    except OSError:
        return None
    return sorted(p for p in paths if os.path.basename(p).startswith(_OPENMP_RUNTIMES))


def _native_lines(p: _dispatch.Probe) -> List[str]:
    raw = p.native_raw
    if p.native_error is not None:
        return [f"native check: unavailable ({p.native_error})"]
    if p.native_source == "cpuid+xgetbv":
        xcr0 = "n/a (OSXSAVE off, so no AVX state)" if raw.get("xcr0") is None else _hex(raw["xcr0"])
        return [
            f"native check: CPUID + XGETBV; vendor {raw.get('vendor')}, max leaf {_hex(raw.get('max_leaf'))}, "
            f"osxsave {_yes(raw.get('osxsave'))}, xcr0 {xcr0}",
            f"  OS-enabled register state: YMM (AVX) {_yes(raw.get('ymm_state'))}, "
            f"ZMM/opmask (AVX-512) {_yes(raw.get('zmm_state'))}",
        ]
    if p.native_source == "getauxval":
        return [f"native check: getauxval; AT_HWCAP {_hex(raw.get('hwcap'))}, AT_HWCAP2 {_hex(raw.get('hwcap2'))}"]
    return [f"native check: no detector for {p.arch}; only the portable variant is considered"]


def _feature_lines(p: _dispatch.Probe) -> List[str]:
    lines = [f"features (decided by the native check; py-cpuinfo shown beside it, '?' = unavailable):",
             f"  {'feature':<12} {'native':<7} py-cpuinfo"]
    for f in p.features.values():
        mark = "  <- disagrees, native wins" if f.disagreement else ""
        lines.append(f"  {f.name:<12} {_yes(f.native):<7} {_yes(f.cpuinfo):<3}{mark}")
    disagreements = [f"  {f.name}: {f.disagreement}" for f in p.features.values() if f.disagreement]
    lines.append("disagreements between py-cpuinfo and the native check:" + ("" if disagreements else " none"))
    return lines + disagreements


def _variant_lines(p: _dispatch.Probe, selected: Optional[str]) -> List[str]:
    lines = [f"variants for {p.arch} (highest rank first):",
             f"  {'name':<14} {'rank':>4} {'built':<6} {'supported':<10} status"]
    for s in p.variants:
        if s.name == selected:
            state = "SELECTED"
        elif s.usable:
            state = "available"
        else:
            state = "rejected: " + s.reason.partition(": ")[2]
        lines.append(f"  {s.name:<14} {s.rank:>4} {_yes(s.built):<6} {_yes(s.supported):<10} {state}")
    usable = [s.name for s in p.usable]
    lines.append(f"built: {', '.join(s.name for s in p.variants if s.built) or 'none'}; "
                 f"built and supported: {', '.join(usable) or 'none'}")
    return lines


def runtime_report() -> str:
    """The text show_runtime() prints."""
    p = _dispatch.probe()
    try:
        sel: Optional[_dispatch.Selection] = _dispatch.selection()
        error = None
    except (ValueError, RuntimeError) as exc:  # RuntimeError covers VariantUnavailableError
        sel, error = None, f"{type(exc).__name__}: {exc}"
    info = p.cpuinfo
    brand = info.brand or str(p.native_raw.get("brand", "") or "unknown")
    lines = [
        f"qsdpa {__version__}",
        f"python {platform.python_version()} ({platform.python_implementation()}) on {platform.platform()}",
        f"machine {p.machine} -> arch {p.arch}",
        f"cpu: {brand}",
    ]
    if info.ok:
        lines.append(f"py-cpuinfo {info.version or '?'}: {info.raw_count} flags in {info.seconds:.2f} s"
                     + (f", arch {info.arch}" if info.arch else ""))
    else:
        lines.append(f"py-cpuinfo: unavailable ({info.error}); relying on the native check alone")
    lines += _native_lines(p)
    lines += _feature_lines(p)
    lines += _variant_lines(p, sel.name if sel else None)
    env_isa = os.environ.get(_dispatch.ENV_ISA)
    lines.append(f"{_dispatch.ENV_ISA}: {'(unset)' if env_isa is None else repr(env_isa)}")
    if sel is not None:
        lines.append(f"selected: {sel.name} ({sel.reason})")
        mod = _dispatch.load_variant(sel.name)
        pf = mod._prefetch_tuning()
        lines.append(f"decode prefetch (chosen for this CPU's vendor): next block into "
                     f"{'L1' if pf['to_l1'] else 'L2'}{', pages walked first' if pf['walk_pages'] else ''}, "
                     f"{pf['k_during_qk_eighths']}/8 of its K during Q.K^T")
        lines.append("prefill int8 Q.K^T: " + ("GEMM form on K packed once a block into key panels (registry gemm_qk)"
                                               if mod.GEMM_QK else "register tiles with per-key reductions"))
    else:
        lines.append(f"selected: none -- {error}")
    n = _entry.counts()
    lines.append(f"quantized_sdpa calls so far: {n['fast']} checked and run at the C level, {n['delegated']} by the "
                 f"Python function, {n['refused']} refused by the variant and run by the complete path")
    omp = "n/a" if p.omp_max_threads is None else str(p.omp_max_threads)
    built_with = f"OpenMP {p.openmp}" if p.openmp else "without OpenMP"
    lines.append(f"threads: OpenMP max threads {omp} (kernels built {built_with}), "
                 f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(unset)')}, cpu count {os.cpu_count()}")
    lines.append(f"qsdpa kernel threads: {_threads.describe()}")
    runtimes = openmp_runtimes()
    if runtimes is None:
        lines.append("OpenMP runtime in this process: n/a (no /proc/self/maps)")
    else:
        lines.append("OpenMP runtime in this process: " + (", ".join(runtimes) if runtimes else "none loaded"))
    return "\n".join(lines) + "\n"


def show_runtime(file: Optional[TextIO] = None) -> None:
    """Print qsdpa's runtime report: version, platform, CPU features with their source, the native
    check's raw values, built/supported/selected variants with rejection reasons, QSDPA_ISA, threads."""
    (file if file is not None else sys.stdout).write(runtime_report())
