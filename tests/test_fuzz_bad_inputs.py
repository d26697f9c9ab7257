"""Issue 6, bad-input fuzz: garbage for every argument of quantized_sdpa, in a child process.

tests/fuzz_bad_inputs.py tries every bad-input class once, then random combinations of 1-3 of them;
every call must return (a float32 array of the query's shape, finite unless a scale near FLT_MAX
makes it overflow) or raise TypeError/ValueError/MemoryError/OverflowError, leaving `out` untouched.
The child must exit normally: a signal or an abort fails the test, with the input that killed it.
One child per variant (QSDPA_ISA). QSDPA_FUZZ_CALLS sets the number of calls.
"""
from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys

import pytest
from child_env import child_env

FUZZER = pathlib.Path(__file__).with_name("fuzz_bad_inputs.py")
MIN_CLASSES = 40
# Fewer under qemu-user emulation, where a call costs ~30x more; still every class at least once.
CALLS = int(os.environ.get("QSDPA_FUZZ_CALLS") or (150 if os.environ.get("QSDPA_CI_PYTHON_WRAPPER") else 3000))


def test_bad_inputs_never_crash(isa_name, tmp_path):
    report = tmp_path / "fuzz.json"
    env = child_env(QSDPA_ISA=isa_name)
    try:
        proc = subprocess.run([sys.executable, str(FUZZER), "--calls", str(CALLS), "--seed", "6",
                               "--json", str(report)], env=env, capture_output=True, text=True, timeout=1200)
    except OSError as exc:  # qemu-user without binfmt cannot exec a child interpreter
        pytest.skip(f"cannot run a child interpreter here: {exc}")
    if proc.returncode != 0:
        last = [line for line in proc.stderr.splitlines() if line.startswith("call ")][-1:]
        how = f"signal {signal.Signals(-proc.returncode).name}" if proc.returncode < 0 else f"exit {proc.returncode}"
        pytest.fail(f"the fuzz child died ({how}) at {last}:\n{proc.stderr[-3000:]}")
    r = json.loads(report.read_text())
    print(f"{isa_name}: {r['calls']} calls, {r['classes_tried']} bad-input classes tried, outcomes {r['outcomes']}")
    assert r["variant"] == isa_name
    assert r["classes_tried"] == r["classes"] >= MIN_CLASSES
    assert not r["unexpected"], "\n".join(r["unexpected"])
    assert not r["out_written"], "\n".join(r["out_written"])
