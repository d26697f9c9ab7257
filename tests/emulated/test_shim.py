"""The SIMDe shims' own self-tests (shim_selftest.cpp for x86, shim_neon_selftest.cpp for NEON),
built by build.py next to the modules: one per emulated family in the build."""
import json
import os
import pathlib
import subprocess

import pytest

from emulated_modules import selected_family


def _selftests():
    root = os.environ.get("QSDPA_TEST_EMULATED_DIR")
    if not root:
        return []
    info = json.loads((pathlib.Path(root) / "emulated.json").read_text())
    family = selected_family()  # QSDPA_TEST_EMULATED_FAMILY, as for the modules
    return sorted((f, exe) for f, exe in info["selftests"].items() if not family or f == family)


@pytest.mark.parametrize("family, exe", _selftests(), ids=[f"shim_{f}" for f, _ in _selftests()])
def test_shim_selftest(family, exe):
    path = pathlib.Path(os.environ["QSDPA_TEST_EMULATED_DIR"]) / exe
    proc = subprocess.run([str(path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "self-test: ok" in proc.stdout
