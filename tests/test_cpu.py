"""CPU feature detection: the native check (qsdpa._kernels_scalar) and the py-cpuinfo wrapper."""
from __future__ import annotations

import importlib
import importlib.util
import pathlib
import platform

import pytest

from qsdpa import _cpu, _dispatch
from qsdpa._variants import VARIANTS

ARCH = _dispatch.normalize_arch(platform.machine())
BUILT = importlib.util.find_spec("qsdpa._kernels_scalar") is not None
needs_build = pytest.mark.skipif(not BUILT, reason="qsdpa._kernels_scalar is not built")


def _scalar():
    return importlib.import_module("qsdpa._kernels_scalar")


def test_canonicalize():
    flags = _cpu.canonicalize(["AVX2", "fma3", "avx512vnni", "avx512_vnni", " f16c ", "", "dotprod", "asimd"])
    assert flags == {"avx2", "fma", "avx512_vnni", "f16c", "asimddp", "asimd"}


def test_normalize_arch():
    assert _dispatch.normalize_arch("AMD64") == "x86_64"
    assert _dispatch.normalize_arch("x86_64") == "x86_64"
    assert _dispatch.normalize_arch("arm64") == "aarch64"
    assert _dispatch.normalize_arch("aarch64") == "aarch64"
    assert _dispatch.normalize_arch("riscv64") == "riscv64"


@needs_build
def test_native_features_cover_registry():
    """The native check answers for every feature a variant of this arch needs."""
    native = _scalar().cpu_features()
    assert all(isinstance(v, bool) for v in native.values())
    needed = {f for v in VARIANTS if v.arch == ARCH for f in v.features}
    assert needed <= set(native), f"native check does not report {sorted(needed - set(native))}"


@needs_build
def test_native_implications():
    """A feature can only be on if its register state is: AVX-512 needs ZMM state, AVX2/FMA need YMM."""
    native, raw = _scalar().cpu_features(), _scalar().cpu_raw()
    if raw.get("source") != "cpuid+xgetbv":
        pytest.skip("x86 only")
    if raw["osxsave"]:
        assert raw["ymm_state"] == ((raw["xcr0"] & 0x6) == 0x6)
        assert raw["zmm_state"] == ((raw["xcr0"] & 0xE6) == 0xE6)
    for f in ("avx", "avx2", "fma", "f16c"):
        assert not native[f] or raw["ymm_state"]
    for f in ("avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni"):
        assert not native[f] or raw["zmm_state"]
    assert isinstance(raw["vendor"], str) and raw["max_leaf"] >= 1


@needs_build
def test_native_agrees_with_proc_cpuinfo():
    """Linux filters /proc/cpuinfo by what the kernel enables, like the native check (numpy does this too)."""
    path = pathlib.Path("/proc/cpuinfo")
    if not path.exists():
        pytest.skip("no /proc/cpuinfo")
    text = path.read_text(errors="replace")
    key = {"x86_64": "flags", "aarch64": "Features"}.get(ARCH)
    lines = [l for l in text.splitlines() if key and l.split(":")[0].strip() == key]
    if not lines:  # e.g. qemu-user: /proc/cpuinfo is the host's, of another arch
        pytest.skip(f"/proc/cpuinfo has no '{key}' line for {ARCH}")
    proc = _cpu.canonicalize(lines[0].split(":", 1)[1].split())
    native = _scalar().cpu_features()
    for f, on in native.items():
        if on:  # the native check never claims more than the kernel enables
            assert f in proc, f"native check says {f}, /proc/cpuinfo does not"
    # The other direction holds only when both see the same CPU (not under qemu-x86_64, which shows
    # the host's /proc/cpuinfo): compare the brand strings first.
    model = [l.split(":", 1)[1].strip() for l in text.splitlines() if l.startswith("model name")]
    brand = _scalar().cpu_raw().get("brand")
    if ARCH == "x86_64" and (not model or model[0] != brand):
        pytest.skip(f"/proc/cpuinfo describes {model[:1]}, CPUID says {brand!r}")
    for f, on in native.items():
        assert on == (f in proc), f"{f}: native {on}, /proc/cpuinfo {f in proc}"


@needs_build
def test_omp_max_threads():
    n = _scalar().omp_max_threads()
    assert isinstance(n, int) and n >= 1
    if not _scalar().OPENMP:
        assert n == 1


def test_cpuinfo_flags_is_cached():
    first = _cpu.cpuinfo_flags()
    assert _cpu.cpuinfo_flags() is first
    assert first.ok or first.error  # either flags or a recorded reason, never an exception
