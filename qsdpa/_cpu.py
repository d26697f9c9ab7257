"""py-cpuinfo, consulted lazily and at most once per process.

py-cpuinfo is the project's CPU detector for reporting, but it is never trusted on its own: it
re-executes the interpreter in a subprocess (about 1.2 s per call, uncached), unions raw CPUID bits
into the kernel's /proc/cpuinfo list without checking what the OS enables, shows the host's x86
flags under qemu-aarch64, raises OSError (ENOEXEC) there when binfmt_misc is not set up, and raises
a bare Exception on platforms it does not know. So: imported only on first use (never at
``import qsdpa``), called once, every failure recorded as a string, and the dispatcher confirms every
feature with the native check in ``qsdpa._kernels_scalar``.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import FrozenSet, Iterable, Optional

# Other spellings of one feature -> the registry's canonical name (codegen/registry.py).
_SYNONYMS = {
    "avx512vnni": "avx512_vnni",  # CPUID path; /proc/cpuinfo says avx512_vnni and get_cpu_info() unions both
    "fma3": "fma",
    "avx1.0": "avx",              # macOS sysctl machdep.cpu.features
    "avxvnni": "avx_vnni",
    "dotprod": "asimddp",         # the ARM ARM / compiler name; Linux HWCAP and py-cpuinfo say asimddp
}


def canonicalize(flags: Iterable[object]) -> FrozenSet[str]:
    """Lower-case every flag and map known synonyms to the canonical spelling."""
    out = set()
    for flag in flags:
        name = str(flag).strip().lower()
        if name:
            out.add(_SYNONYMS.get(name, name))
    return frozenset(out)


@dataclass(frozen=True)
class CpuinfoResult:
    """What py-cpuinfo said, or why it said nothing (``error``)."""

    brand: str
    arch: str                  # py-cpuinfo's arch_string_raw (e.g. "x86_64"), "" when unknown
    flags: FrozenSet[str]      # canonical spelling
    raw_count: int             # number of flags as py-cpuinfo reported them, before canonicalising
    version: str               # py-cpuinfo's version string, "" when unknown
    seconds: float             # wall time of the one call
    error: Optional[str]       # None when py-cpuinfo produced flags

    @property
    def ok(self) -> bool:
        return self.error is None


_lock = threading.Lock()
_result: Optional[CpuinfoResult] = None


def cpuinfo_flags() -> CpuinfoResult:
    """py-cpuinfo's view of the CPU; the first call pays for it, later calls return the same record."""
    global _result
    with _lock:  # a lock, not lru_cache: two threads racing must still cause a single call
        if _result is None:
            _result = _query()
        return _result


def _query() -> CpuinfoResult:
    start = time.perf_counter()
    info: object = None
    error: Optional[str] = None
    try:
        import cpuinfo  # deferred: importing it is cheap, but nothing at import qsdpa may touch it

        info = cpuinfo.get_cpu_info()
    except Exception as exc:  # OSError under qemu-user, bare Exception on unknown arches, ...
        error = f"{type(exc).__name__}: {exc}"
    seconds = time.perf_counter() - start
    if error is None and not isinstance(info, dict):
        error = f"py-cpuinfo returned {type(info).__name__}, not a dict"
    data = info if isinstance(info, dict) else {}
    raw_flags = data.get("flags")
    if error is None and not data:
        error = "py-cpuinfo returned no data (its helper subprocess failed)"
    elif error is None and not isinstance(raw_flags, (list, tuple)):
        error = "py-cpuinfo reported no flags"  # e.g. macOS arm64 has no 'flags' key
    flags = list(raw_flags) if isinstance(raw_flags, (list, tuple)) else []
    return CpuinfoResult(
        brand=str(data.get("brand_raw", "") or ""),
        arch=str(data.get("arch_string_raw", "") or data.get("arch", "") or ""),
        flags=canonicalize(flags),
        raw_count=len(flags),
        version=str(data.get("cpuinfo_version_string", "") or ""),
        seconds=seconds,
        error=error,
    )
