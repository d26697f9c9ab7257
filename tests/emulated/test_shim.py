"""The SIMDe shim's own self-test (shim_selftest.cpp, built by build.py next to the modules)."""
import json
import os
import pathlib
import subprocess


def test_shim_selftest():
    root = pathlib.Path(os.environ["QSDPA_TEST_EMULATED_DIR"])
    exe = root / json.loads((root / "emulated.json").read_text())["selftest"]
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "shim self-test: ok" in proc.stdout
