"""Which kernel variant runs here: decided once, before any variant module is imported.

A variant module built with -mavx512f can die with SIGILL while it is being imported, and a signal
is not an ImportError, so nothing may import a variant module until the native check in
``qsdpa._kernels_scalar`` (built without ISA flags, safe on every CPU of its architecture) has
confirmed every feature the registry says it needs. All imports of variant modules go through
``load_variant``.

Two cached steps:
  * ``probe()``: what this machine offers (built modules, native features, py-cpuinfo's opinion),
    independent of any setting.
  * ``selection()``: the variant to use, from the probe and ``QSDPA_ISA`` (read at the first call).
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import platform
import threading
from dataclasses import dataclass
from types import MappingProxyType, ModuleType
from typing import Dict, List, Mapping, Optional, Tuple

from . import _cpu
from ._errors import VariantUnavailableError
from ._variants import VARIANTS, Variant

ENV_ISA = "QSDPA_ISA"
_PACKAGE = __name__.rpartition(".")[0]
_NATIVE_VARIANT = "scalar"  # hosts cpu_features(); built without ISA flags on every arch

_ARCH_ALIASES = {"x86_64": "x86_64", "amd64": "x86_64", "x64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def normalize_arch(machine: str) -> str:
    """platform.machine() spelling -> registry arch ("x86_64", "aarch64"); other arches pass through."""
    m = machine.strip().lower()
    return _ARCH_ALIASES.get(m, m)


def variants_for_arch(arch: str) -> List[Variant]:
    """Registry variants that can exist on ``arch``, highest rank first."""
    return sorted((v for v in VARIANTS if v.arch in ("any", arch)), key=lambda v: -v.rank)


@dataclass(frozen=True)
class FeatureStatus:
    """One CPU feature as each source sees it. The native check is authoritative."""

    name: str
    native: Optional[bool]   # None: the native check could not run
    cpuinfo: Optional[bool]  # None: py-cpuinfo failed

    @property
    def enabled(self) -> bool:
        return bool(self.native)

    @property
    def disagreement(self) -> Optional[str]:
        if self.native is None or self.cpuinfo is None or self.native == self.cpuinfo:
            return None
        if self.cpuinfo:
            return ("py-cpuinfo reports it, the native check denies it (not enabled by the OS or "
                    "hypervisor, or py-cpuinfo read another CPU's flags); native check wins")
        return "the native check confirms it, py-cpuinfo misses it; native check wins"


@dataclass(frozen=True)
class VariantStatus:
    """Whether one variant of this arch can be loaded, decided without importing it."""

    variant: Variant
    built: bool
    supported: bool               # every required feature confirmed by the native check
    missing: Tuple[str, ...]      # required features the native check denies
    reason: str                   # "" when usable, else "<name>: why not"

    @property
    def name(self) -> str:
        return self.variant.name

    @property
    def rank(self) -> int:
        return self.variant.rank

    @property
    def usable(self) -> bool:
        return self.built and self.supported


@dataclass(frozen=True)
class Probe:
    """What this machine and installation offer, whatever QSDPA_ISA says."""

    machine: str                               # platform.machine()
    arch: str                                  # normalised
    variants: Tuple[VariantStatus, ...]        # this arch's variants, highest rank first
    features: Mapping[str, FeatureStatus]
    native_source: str                         # e.g. "cpuid+xgetbv", "getauxval"
    native_error: Optional[str]                # why the native check could not run
    native_raw: Mapping[str, object]
    omp_max_threads: Optional[int]             # None when the native module is unavailable
    openmp: int                                # _OPENMP of the native module, 0 without OpenMP
    cpuinfo: _cpu.CpuinfoResult

    def status(self, name: str) -> Optional[VariantStatus]:
        return next((s for s in self.variants if s.name == name), None)

    @property
    def usable(self) -> Tuple[VariantStatus, ...]:
        return tuple(s for s in self.variants if s.usable)

    @property
    def best(self) -> Optional[VariantStatus]:
        return next(iter(self.usable), None)


@dataclass(frozen=True)
class Selection:
    """The variant qsdpa uses in this process, and everything that explains the choice."""

    name: str
    module: ModuleType
    reason: str
    requested: Optional[str]                   # QSDPA_ISA as given, None when unset or empty
    arch: str
    variants: Tuple[VariantStatus, ...]
    features: Mapping[str, FeatureStatus]
    cpuinfo: _cpu.CpuinfoResult
    native_raw: Mapping[str, object]


# One re-entrant lock guards both caches: selection() probes and loads while holding it.
_lock = threading.RLock()
_probe: Optional[Probe] = None
_selection: Optional[Selection] = None


def _is_built(variant: Variant) -> bool:
    # find_spec locates the extension file without executing it (importing could SIGILL).
    try:
        return importlib.util.find_spec(f"{_PACKAGE}.{variant.module}") is not None
    except (ImportError, ValueError):
        return False


def _native() -> Tuple[Optional[Dict[str, bool]], Mapping[str, object], Optional[int], int, Optional[str]]:
    """(features, raw, omp_max_threads, openmp, error) from the scalar module's native check."""
    scalar = next(v for v in VARIANTS if v.name == _NATIVE_VARIANT)
    if not _is_built(scalar):
        return None, {}, None, 0, f"{_PACKAGE}.{scalar.module} is not built"
    try:
        # Safe to import on any CPU: the scalar module is compiled without ISA flags.
        mod = importlib.import_module(f"{_PACKAGE}.{scalar.module}")
        features = {str(k): bool(v) for k, v in mod.cpu_features().items()}
        raw = dict(mod.cpu_raw())
        return features, raw, int(mod.omp_max_threads()), int(getattr(mod, "OPENMP", 0)), None
    except (ImportError, AttributeError) as exc:
        return None, {}, None, 0, f"{_PACKAGE}.{scalar.module}: {type(exc).__name__}: {exc}"


def _status(variant: Variant, built: bool, features: Mapping[str, FeatureStatus],
            native_error: Optional[str], native_source: str) -> VariantStatus:
    problems = []
    if not built:
        problems.append(f"not built (no module {_PACKAGE}.{variant.module} in this installation)")
    missing = tuple(f for f in variant.features if not (f in features and features[f].enabled))
    if variant.features and native_error is not None:
        problems.append(f"its CPU features cannot be confirmed ({native_error})")
    elif missing:
        text = f"CPU/OS lacks {', '.join(missing)}"
        claimed = [f for f in missing if f in features and features[f].cpuinfo]
        if claimed:
            text += (f" (py-cpuinfo reports {', '.join(claimed)}, but the native {native_source} check "
                     f"denies {'it' if len(claimed) == 1 else 'them'})")
        problems.append(text)
    supported = not variant.features or (native_error is None and not missing)
    reason = f"{variant.name}: {'; '.join(problems)}" if problems else ""
    return VariantStatus(variant, built, supported, missing, reason)


def _compute_probe() -> Probe:
    machine = platform.machine()
    arch = normalize_arch(machine)
    native, raw, omp, openmp, native_error = _native()
    info = _cpu.cpuinfo_flags()
    variants = variants_for_arch(arch)
    # Report every feature the native check knows, then any the registry needs that it does not.
    names = list(native or {})
    for v in variants:
        names += [f for f in v.features if f not in names]
    features = {
        f: FeatureStatus(f, None if native is None else native.get(f, False),
                         (f in info.flags) if info.ok else None)
        for f in names
    }
    source = str(raw.get("source", "native"))
    statuses = tuple(_status(v, _is_built(v), features, native_error, source) for v in variants)
    return Probe(machine=machine, arch=arch, variants=statuses, features=MappingProxyType(features),
                 native_source=source, native_error=native_error, native_raw=MappingProxyType(raw),
                 omp_max_threads=omp, openmp=openmp, cpuinfo=info)


def probe() -> Probe:
    """This machine's facts, computed on first use (imports only the scalar module, calls py-cpuinfo once)."""
    global _probe
    with _lock:
        if _probe is None:
            _probe = _compute_probe()
        return _probe


def _lookup(name: str, p: Probe, what: str) -> VariantStatus:
    """Status of a requested variant; ValueError for unknown names, VariantUnavailableError otherwise."""
    key = name.strip().lower()
    status = p.status(key)
    if status is not None:
        if not status.usable:
            raise VariantUnavailableError(f"{what} cannot be used: {status.reason}", key)
        return status
    valid = ", ".join(s.name for s in p.variants)
    other = next((v for v in VARIANTS if v.name == key), None)
    if other is not None:
        raise VariantUnavailableError(
            f"{what} cannot be used: {key}: an {other.arch} variant, this machine is {p.arch} "
            f"(variants for {p.arch}: {valid})", key)
    raise ValueError(f"{what} is not a qsdpa variant; valid names on {p.arch}: {valid}")


def load_variant(name: str) -> ModuleType:
    """Import and return the module of variant ``name`` once the native check has confirmed it.

    Raises ValueError for a name the registry does not know, and VariantUnavailableError (without
    importing anything) when the variant is for another arch, not built, or not supported here."""
    with _lock:
        status = _lookup(name, probe(), f"variant {name!r}")
        try:
            return importlib.import_module(f"{_PACKAGE}.{status.variant.module}")
        except ImportError as exc:  # built and supported but broken: an installation problem
            raise VariantUnavailableError(
                f"variant {status.name!r} is built and supported but failed to import: {exc}", status.name) from exc


def _choose(p: Probe) -> Tuple[VariantStatus, Optional[str], str]:
    raw = os.environ.get(ENV_ISA, "")
    best = p.best
    if not raw.strip():  # unset and empty both mean "the best"
        if best is None:
            reasons = "; ".join(s.reason for s in p.variants)
            raise VariantUnavailableError(f"no qsdpa kernel variant can run here: {reasons}")
        return best, None, "highest-ranked variant that is built and supported by this CPU/OS"
    status = _lookup(raw, p, f"{ENV_ISA}={raw!r}")
    # A usable variant can never rank above the best usable one, so QSDPA_ISA can only lower the choice.
    assert best is not None and status.rank <= best.rank
    note = "" if status.name == best.name else f"; the best available is {best.name}"
    return status, raw, f"requested by {ENV_ISA}={raw!r}{note}"


def selection() -> Selection:
    """The variant this process uses: resolved on first call, then fixed.

    Raises ValueError when QSDPA_ISA names no variant, VariantUnavailableError when it names one
    that cannot run here (or when none can). Failures are not cached."""
    global _selection
    resolved = _selection  # fast path for every kernel call after the first: no lock
    if resolved is not None:
        return resolved
    with _lock:
        if _selection is None:
            p = probe()
            status, requested, reason = _choose(p)
            _selection = Selection(name=status.name, module=load_variant(status.name), reason=reason,
                                   requested=requested, arch=p.arch, variants=p.variants,
                                   features=p.features, cpuinfo=p.cpuinfo, native_raw=p.native_raw)
        return _selection


def get_isa() -> str:
    """Name of the kernel variant in use (e.g. "avx2"), resolving the selection if needed."""
    return selection().name
