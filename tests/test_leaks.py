"""Issue 6, leaks: resident memory stays flat (< 1 MiB growth) over 10 000 calls after warm-up.

Mixed shapes, with and without out=, and every ninth call failing in C++ (the exception path), in a
fresh child process per variant (tests/child_workloads.py), so other tests' allocations do not blur
the figure. Leaks the RSS cannot show (small, or freed at exit) are LeakSanitizer's job:
tools/sanitize.py runs the whole suite with it.
"""
from __future__ import annotations

import os

import pytest

from test_threads import run_child

CALLS, WARMUP, LIMIT = 10_000, 2_000, 1 << 20

pytestmark = [
    pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="RSS is read from /proc/self/statm (Linux)"),
    pytest.mark.skipif(bool(os.environ.get("QSDPA_CI_PYTHON_WRAPPER")),
                       reason="under qemu-user the RSS is the emulator's (its code cache grows); measured natively"),
    pytest.mark.skipif(bool(os.environ.get("QSDPA_SANITIZED")),
                       reason="ASan's quarantine holds freed memory, so RSS grows; LeakSanitizer covers this run"),
]


def test_rss_is_flat_over_10000_calls(isa_name):
    r = run_child(isa_name, "rss", "--calls", str(CALLS), "--warmup", str(WARMUP))
    print(r)
    assert r["variant"] == isa_name and r["calls"] == CALLS
    assert r["growth_bytes"] < LIMIT, f"RSS grew by {r['growth_bytes']} bytes over {CALLS} calls: {r['samples']}"
