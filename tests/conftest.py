"""Per-ISA test parametrisation, driven by the registry's table (qsdpa._variants).

A test that takes ``kmod`` runs once per variant of this machine's arch, with the variant in its id
(``test_x[avx2]``, ``test_x[avx2-3-7]`` with its own parametrize), Highway-style. ``kmod`` is the
variant's module itself, not the dispatcher's choice, so every variant the CPU can run is tested
whatever QSDPA_ISA says. Whether a variant can run is decided BEFORE its module is imported (an
AVX-512 module can SIGILL at import on an AVX2 machine); variants that cannot are skipped with the
reason, e.g. "avx512: CPU/OS lacks avx512f, avx512bw, avx512dq, avx512vl".
"""
from __future__ import annotations

import os
from types import ModuleType
from typing import List

import pytest


def _hypothesis_profiles() -> None:
    """QSDPA_HYPOTHESIS_PROFILE picks the property tests' size (cases per variant): "local" (default,
    200), "ci" (.ci/run's native run, 10 000), "simde" and "qemu" (.ci/run's emulated runs). No
    deadline: the machines are shared, and a slow case is not a wrong one."""
    try:
        from hypothesis import HealthCheck, settings
    except ImportError:  # only tests/test_properties.py needs it, and it says so when collected
        return
    common = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    settings.register_profile("local", max_examples=200, **common)
    settings.register_profile("ci", max_examples=10_000, **common)
    # .ci/run's emulated suites, sized to their cost per case (measured, docs/reliability.md): the
    # SIMDe AVX-512 and NEON modules ~10-14 ms of CPU a case, about native (issue 6's 10 000 per
    # variant); qemu-user (TCG) ~30-50x native.
    settings.register_profile("simde", max_examples=10_000, **common)
    settings.register_profile("qemu", max_examples=50, **common)
    settings.load_profile(os.environ.get("QSDPA_HYPOTHESIS_PROFILE", "local"))


_hypothesis_profiles()


def _variant_params() -> List[object]:
    try:
        from qsdpa import _dispatch
    except ImportError as exc:  # not built/installed: kernel tests skip, codegen tests still run
        return [pytest.param("unavailable", marks=pytest.mark.skip(reason=f"qsdpa is not importable: {exc}"))]
    probe = _dispatch.probe()  # imports only the scalar module; no variant module is imported here
    params: List[object] = []
    for status in reversed(probe.variants):  # lowest rank first: scalar fails first if the reference is off
        marks = [] if status.usable else [pytest.mark.skip(reason=status.reason)]
        params.append(pytest.param(status.name, id=status.name, marks=marks))
    return params


VARIANT_PARAMS = _variant_params()


@pytest.fixture(params=VARIANT_PARAMS)
def isa_name(request: pytest.FixtureRequest) -> str:
    """Name of the variant under test; one test instance per variant of this arch."""
    return request.param


@pytest.fixture
def kmod(isa_name: str) -> ModuleType:
    """The kernel module of the variant under test (qsdpa._kernels_<isa>)."""
    from qsdpa import _dispatch

    return _dispatch.load_variant(isa_name)


def pytest_report_header(config: pytest.Config) -> List[str]:
    try:
        from qsdpa import _dispatch

        probe = _dispatch.probe()
    except ImportError as exc:
        return [f"qsdpa: not importable ({exc})"]
    lines = [f"qsdpa variants on {probe.arch}: " + ", ".join(
        f"{s.name} ({'runs' if s.usable else 'skipped'})" for s in probe.variants)]
    lines += [f"  {s.reason}" for s in probe.variants if not s.usable]
    return lines
