"""The SIMDe-emulated AVX-512 and NEON variants under the per-ISA kernel tests (test_kernels,
test_attention, test_properties).

    python tests/emulated/build.py build/emulated
    QSDPA_TEST_EMULATED_DIR=build/emulated python -m pytest tests/emulated
    (ASan: see README.md)

For the tests collected in this directory, `kmod` is the emulated module of each variant built
by build.py (test ids "avx512~simde", "avx512_vnni~simde", "neon~simde", "neon_dotprod~simde";
"...~simde-asan" for a sanitizer build).
It overrides tests/conftest.py's `kmod` here only, and does not touch `isa_name`: the emulated
modules are not installable variants (no QSDPA_ISA, whoami() shows no AVX-512/NEON macros), so they stay
out of the native matrix and of test_dispatch.py.

Without QSDPA_TEST_EMULATED_DIR nothing here is collected. With it set to a directory that holds
no build, collection fails (a CI job that forgot to build must not pass by testing nothing).
"""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from emulated_modules import emulated_variants, load_emulated  # noqa: E402

ENV = "QSDPA_TEST_EMULATED_DIR"
_VARIANTS = emulated_variants(os.environ.get(ENV))

if not _VARIANTS:
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(params=[pytest.param(v, id=v.test_id) for v in _VARIANTS])
def kmod(request):
    """The SIMDe-emulated module of one AVX-512 or NEON variant (tests/emulated/build.py)."""
    return load_emulated(request.param)
