"""The benchmark's plumbing (no timing assertions: speed is measured by `python -m qsdpa bench`)."""
from __future__ import annotations

import json

from qsdpa import _bench


def test_quick_plan_is_small_and_full_plan_covers_the_issue():
    assert len(_bench.plan_cases(True, [1, 2])) <= 4
    full = _bench.plan_cases(False, [1, 2])
    kinds = {(c.model, c.kind, c.context, c.batch, c.threads) for c in full}
    for t in (1, 2):
        for ctx in (512, 2048, 8192, 32768):
            assert ("llama3-8b", "decode", ctx, 1, t) in kinds
        assert ("llama3-8b", "decode", 2048, 8, t) in kinds
        for n in (128, 512, 2048):
            assert ("small", "prefill", n, 1, t) in kinds


def test_one_case_runs_and_reports_every_peer(tmp_path):
    peers = _bench._Peers()
    case = _bench.Case("small", "decode", 64, 1, 1)
    res = _bench.run_case(case, peers, rounds=3, budget_s=1.0, rng=__import__("numpy").random.default_rng(0), bandwidth=1e10)
    assert res.floor_us and res.floor_us > 0
    assert res.median_us["qsdpa"] > 0
    for name in ("torch fp32", "ET int8", "ET fp32"):
        assert (name in res.median_us) != (name in res.missing), f"{name} neither timed nor reported missing"
    assert "qsdpa" in _bench.format_row(res)


def test_cli_writes_json(tmp_path, capsys):
    out = tmp_path / "b.json"
    assert _bench.main(["--quick", "--rounds", "2", "--threads", "1", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["results"] and all("qsdpa" in r["median_us"] for r in data["results"])
    assert "qsdpa bench" in capsys.readouterr().out
