"""examples/decode_loop.py runs as a new user would run it (tiny sizes, in a subprocess)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from child_env import child_env

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "decode_loop.py"
TINY = ["--context", "9", "--steps", "3", "--layers", "2", "--q-heads", "4", "--kv-heads", "2", "--head-dim", "16",
        "--dim", "8", "--threads", "1"]


ENV = child_env()  # the child imports the qsdpa under test


def _run(*extra):
    proc = subprocess.run([sys.executable, str(EXAMPLE), *TINY, *extra], capture_output=True, text=True, timeout=300,
                          env=ENV)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_decode_loop_runs_and_reports():
    out = _run()
    assert "prompt 9 tokens (prefilled), then 3 decode steps" in out
    row = next(line for line in out.splitlines() if line.startswith("qsdpa int8 cache, int8 q"))
    prefill_s, tok_s, attn_ms, size = (float(x) for x in row.split()[-5:-1])
    assert tok_s > 0 and attn_ms > 0 and size > 0
    if "PyTorch is not installed" not in out:  # the child's view of torch, not this process's
        assert "torch fp32 cache + SDPA" in out
        assert float(out.split("x smaller")[0].split()[-1]) > 2.5  # int8 + 5 bytes a row against fp32, D = 16
        err = float(out.split("max|qsdpa - torch| / max|torch| = ")[1].split()[0])
        assert err < 0.05, out  # int8 K/V against fp32: close, not equal


def test_decode_loop_without_torch():
    """With torch unimportable the example still runs qsdpa (here with float32 queries) and says the
    baseline is missing."""
    code = ("import runpy, sys; sys.modules['torch'] = None; sys.argv = sys.argv[1:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code, str(EXAMPLE), *TINY, "--query", "float32"],
                          capture_output=True, text=True, timeout=300, env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert "PyTorch is not installed" in proc.stdout and "qsdpa int8 cache, float32 q" in proc.stdout
    assert "torch fp32" not in proc.stdout


def test_decode_loop_rejects_bad_sizes():
    proc = subprocess.run([sys.executable, str(EXAMPLE), "--q-heads", "6", "--kv-heads", "4"], capture_output=True,
                          text=True, timeout=120, env=ENV)
    assert proc.returncode == 2 and "--q-heads must be a multiple of --kv-heads" in proc.stderr
