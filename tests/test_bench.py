"""The benchmark's plumbing (no timing assertions: speed is measured by `python -m qsdpa bench`)."""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from qsdpa import _bench
from qsdpa._threads import get_num_threads, set_num_threads


@pytest.fixture(autouse=True)
def _restore_threads():
    """run_case sets qsdpa's thread count; the CLI takes "all cores" from it."""
    saved = get_num_threads()
    yield
    set_num_threads(saved)


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
    # The floor is read in the same rounds, not taken from the bandwidth passed in (kept beside it)
    assert res.floor_samples >= 3 and _bench.FLOOR not in res.median_us and _bench.FLOOR not in res.parallelism
    assert not res.step_us and not res.step_missing  # the least-work step runs in cold cases only
    cold = _bench.run_case(_bench.Case("small", "decode", 64, 1, 1, "cold"), peers, rounds=3, budget_s=1.0,
                           rng=np.random.default_rng(0), llc_bytes=1 << 20, bandwidth=1e10)
    # timed in the same rounds under both prefetch forms, kept out of the implementations' columns
    assert set(cold.step_us) == {"L1", "L2"} and all(us > 0 for us in cold.step_us.values())
    assert not set(_bench.STEPS) & (set(cold.median_us) | set(cold.parallelism))
    assert "least-work step" in _bench.format_row(cold)
    hq, hkv, d = _bench.MODELS["small"]
    assert res.floor_bytes == 2 * (64 + 1) * hkv * (d + 4 + 1)
    assert res.start_floor_us == pytest.approx(res.floor_bytes / 1e10 * 1e6)
    assert res.median_us["qsdpa"] > 0
    for name in ("torch fp32", "ET int8", "ET fp32"):
        assert (name in res.median_us) != (name in res.missing), f"{name} neither timed nor reported missing"
    assert "qsdpa" in _bench.format_row(res)
    if sys.platform.startswith("linux"):  # per-thread clocks: every implementation's CPU/wall, even
        # over a few sub-millisecond calls (process_time() would need 50 ms of them)
        assert set(res.parallelism) == set(res.median_us)
        assert all(v > 0 for v in res.parallelism.values()), res.parallelism


def test_floor_reads_rotate_through_twice_the_llc():
    reads = _bench.FloorReads(1000, 1, llc_bytes=4096)
    assert len(reads.buffers) == 9 and all(b.nbytes == 1000 for b in reads.buffers)  # 9 x 1000 >= 2 x 4096
    want = int(np.ones(1000, np.int8)[:960].view(np.uint64).sum(dtype=np.uint64)) + 40  # words, then tail bytes
    for _ in range(10):
        assert reads(0) == want
    assert reads.next == 10 % 9
    assert len(_bench.FloorReads(10 << 20, 2, llc_bytes=1 << 20).buffers) == 2  # never fewer than 2


def test_cli_writes_json(tmp_path, capsys):
    out = tmp_path / "b.json"
    assert _bench.main(["--quick", "--rounds", "2", "--threads", "1", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["results"] and all("qsdpa" in r["median_us"] for r in data["results"])
    assert "qsdpa bench" in capsys.readouterr().out


# --- targets, markdown, plot, arguments (synthetic results: no timing) --------------------------

import sys  # noqa: E402

T = 2  # "all cores" in the synthetic runs below


def _res(kind, ctx, threads, regime="hot", qsdpa=100.0, floor=None, missing=(), model="llama3-8b", **peers):
    case = _bench.Case(model, kind, ctx, 1, threads, regime)
    times = {"qsdpa": qsdpa}
    times.update({k.replace("_", " "): v for k, v in peers.items()})
    r = _bench.Result(case, median_us=times, spread={k: 0.05 for k in times},
                      missing={m: "not installed" for m in missing}, floor_us=floor)
    return r


def _full_run(**over):
    """Every target case, each target passing by a margin unless overridden."""
    fast = dict(torch_fp32=600.0, ET_fp32=700.0, ET_int8=6000.0)
    rs = []
    for ctx in (2048, 8192):
        for t in (1, T):
            q = 100.0 if t == 1 else 50.0
            rs.append(_res("decode", ctx, t, qsdpa=q, **{k: v * q / 100 for k, v in fast.items()}))
            rs.append(_res("decode", ctx, t, "cold", qsdpa=120.0, floor=100.0))
    rs.append(_res("prefill", 512, 1, qsdpa=1000.0, torch_fp32=3000.0, ET_int8=50000.0))
    rs.append(_res("prefill", 512, T, qsdpa=500.0, torch_fp32=1500.0, ET_int8=25000.0))
    return rs


def _by_name(targets):
    return {t.target: t for t in targets}


def test_targets_plan_is_exactly_what_the_targets_need():
    cases = _bench.plan_targets([1, T])
    assert len(cases) == len(set(cases)) == 10
    assert {c.model for c in cases} == {"llama3-8b"} and {c.batch for c in cases} == {1}
    assert {(c.kind, c.context, c.regime) for c in cases} == {
        ("decode", 2048, "hot"), ("decode", 2048, "cold"), ("decode", 8192, "hot"), ("decode", 8192, "cold"),
        ("prefill", 512, "hot")}
    assert {c.threads for c in cases} == {1, T}
    # every target is measurable from that plan
    results = [_res(c.kind, c.context, c.threads, c.regime, floor=80.0 if c.kind == "decode" else None,
                    torch_fp32=1e3, ET_fp32=1e3, ET_int8=1e4) for c in cases]
    assert all(t.status != _bench.NOT_MEASURED for t in _bench.evaluate_targets(results, T))


def test_targets_all_pass():
    targets = _bench.evaluate_targets(_full_run(), T)
    assert len(targets) == 16
    assert [t.status for t in targets] == [_bench.PASS] * 16, _bench.format_targets(targets)
    got = _by_name(targets)
    # min(torch, ET fp32) / qsdpa: torch is the faster one here
    t = got["decode ctx=2048 t=1 hot: vs min(torch fp32, ET fp32)"]
    assert t.measured == pytest.approx(6.0) and "torch fp32" in t.note
    assert got["decode ctx=8192 t=2 hot: vs ET int8"].measured == pytest.approx(60.0)
    assert got["decode ctx=2048 t=1 cold: qsdpa time / floor"].measured == pytest.approx(1.2)
    # the cold target's note says how far the same call from cache already is from that floor
    assert "the same case hot: 100.0 µs, 1.00× the judged floor" in got["decode ctx=2048 t=1 cold: qsdpa time / floor"].note
    assert "the same case hot: 50.0 µs, 0.50× the judged floor" in got["decode ctx=8192 t=2 cold: qsdpa time / floor"].note
    assert got["prefill 512 t=2 (all cores): vs torch fp32"].measured == pytest.approx(3.0)
    assert got["decode 8192 hot: qsdpa time(t=1) / time(t=2)"].measured == pytest.approx(2.0)
    assert got["prefill 512: qsdpa time(t=1) / time(t=2)"].measured == pytest.approx(2.0)


def test_cold_target_note_gives_the_least_work_step_and_its_verdict():
    rs = _full_run()
    by_key = {(r.case.context, r.case.threads, r.case.regime): r for r in rs}
    by_key[(2048, 1, "cold")].median_us["qsdpa"] = 200.0      # 2x the floor: a miss ...
    by_key[(2048, 1, "cold")].step_us = {"L1": 180.0, "L2": 170.0}  # ... that the step misses too
    by_key[(8192, 1, "cold")].median_us["qsdpa"] = 200.0      # a miss the step does not share
    by_key[(8192, 1, "cold")].step_us = {"L1": 130.0, "L2": 140.0}
    by_key[(2048, T, "cold")].step_us = {"L1": 110.0}          # a pass
    by_key[(8192, T, "cold")].step_missing = "the step probe needs ..."
    targets = _bench.evaluate_targets(rs, T)
    got = _by_name(targets)
    assert _bench.targets_summary(targets) == ("14 pass, 2 fail (1 of them out of reach in this run: the least-work "
                                               "step misses them too), 0 missing a peer, 0 not measured")
    assert _bench.format_targets(targets)[-1].strip() == _bench.targets_summary(targets)
    out = got["decode ctx=2048 t=1 cold: qsdpa time / floor"]
    assert out.status == _bench.FAIL  # the verdict is in the note; the status stays the target's
    assert "130.0" not in out.note and "180.0 µs (L1) / 170.0 µs (L2), the faster 1.70× the judged floor: " \
        "out of reach in this run" in out.note
    missed = got["decode ctx=8192 t=1 cold: qsdpa time / floor"].note
    assert "the faster 1.30× the judged floor: within reach of that step, missed by qsdpa" in missed
    passed = got["decode ctx=2048 t=2 cold: qsdpa time / floor"].note
    assert passed.endswith("110.0 µs (L1), the faster 1.10× the judged floor")
    assert "least-work step not run (the step probe needs ...)" in got["decode ctx=8192 t=2 cold: qsdpa time / floor"].note


def test_cold_target_is_judged_against_the_faster_floor():
    """A floor read while the memory bus was busy (slower than the start-up bandwidth's) must not
    turn a slow call into a pass; a start-up floor slower than the rounds' leaves the rounds' in force."""
    rs = _full_run()
    slow_rounds = _res("decode", 2048, 1, "cold", qsdpa=140.0, floor=100.0)
    slow_rounds.start_floor_us = 50.0   # the start-up bandwidth says 2.8x, the disturbed rounds 1.4x
    fast_rounds = _res("decode", 8192, 1, "cold", qsdpa=140.0, floor=100.0)
    fast_rounds.start_floor_us = 300.0
    rs[1] = slow_rounds
    rs = [fast_rounds if (r.case.context, r.case.threads, r.case.regime) == (8192, 1, "cold") else r for r in rs]
    got = _by_name(_bench.evaluate_targets(rs, T))
    t = got["decode ctx=2048 t=1 cold: qsdpa time / floor"]
    assert (t.status, t.measured) == (_bench.FAIL, pytest.approx(2.8))
    assert t.note.startswith("judged against the start-up bandwidth's floor")
    t = got["decode ctx=8192 t=1 cold: qsdpa time / floor"]
    assert (t.status, t.measured) == (_bench.PASS, pytest.approx(1.4))
    assert not t.note.startswith("judged against")


def test_targets_fail_at_the_thresholds():
    rs = _full_run()
    # decode 2048 t=1: ET fp32 faster than torch, only 4.9x slower than qsdpa -> FAIL (the min counts)
    rs[0] = _res("decode", 2048, 1, qsdpa=100.0, torch_fp32=600.0, ET_fp32=490.0, ET_int8=4999.0)
    rs[1] = _res("decode", 2048, 1, "cold", qsdpa=151.0, floor=100.0)            # 1.51x floor
    rs[-1] = _res("prefill", 512, T, qsdpa=600.0, torch_fp32=1199.0, ET_int8=24000.0)  # 1.67x scaling
    got = _by_name(_bench.evaluate_targets(rs, T))
    t = got["decode ctx=2048 t=1 hot: vs min(torch fp32, ET fp32)"]
    assert (t.status, t.measured) == (_bench.FAIL, pytest.approx(4.9)) and "ET fp32" in t.note
    assert got["decode ctx=2048 t=1 hot: vs ET int8"].status == _bench.FAIL
    assert got["decode ctx=2048 t=1 cold: qsdpa time / floor"].status == _bench.FAIL
    assert got["prefill 512 t=2 (all cores): vs torch fp32"].status == _bench.FAIL
    assert got["prefill 512 t=2 (all cores): vs ET int8"].status == _bench.PASS   # 40x exactly passes
    assert got["prefill 512: qsdpa time(t=1) / time(t=2)"].status == _bench.FAIL
    # the rest still pass
    assert got["decode ctx=8192 t=1 hot: vs min(torch fp32, ET fp32)"].status == _bench.PASS


def test_missing_peer_is_missing_not_passed():
    rs = [_res("decode", 2048, 1, qsdpa=100.0, torch_fp32=900.0, missing=("ET fp32", "ET int8"))]
    got = _by_name(_bench.evaluate_targets(rs, T))
    t = got["decode ctx=2048 t=1 hot: vs min(torch fp32, ET fp32)"]
    assert t.status == _bench.MISSING and t.measured is None
    assert "ET fp32 missing (not installed)" in t.note and "9.00x" in t.note  # the partial bound, as a note
    t = got["decode ctx=2048 t=1 hot: vs ET int8"]
    assert t.status == _bench.MISSING and "ET int8" in t.note
    # everything else was not run at all
    others = [t for name, t in got.items() if not name.startswith("decode ctx=2048 t=1 hot")]
    assert {t.status for t in others} == {_bench.NOT_MEASURED}
    lines = _bench.format_targets(list(got.values()))
    assert "0 pass, 0 fail, 2 missing a peer, 14 not measured" in lines[-1]


def test_over_threaded_peer_is_missing_not_judged():
    """ExecuTorch on its default pool (its thread control not importable) at a 1-thread case: its
    ratio is not at the case's thread count, so the targets it decides are not judged on it."""
    rs = _full_run()
    rs[0].parallelism = {"qsdpa": 0.97, "torch fp32": 0.99, "ET int8": 1.95, "ET fp32": 1.87}
    rs[0].median_us["ET fp32"] = 550.0   # the fastest fp32 peer, but only on two threads
    twin = _res("decode", 2048, T, qsdpa=50.0, torch_fp32=300.0, ET_fp32=350.0, ET_int8=3000.0)
    twin.parallelism = {"qsdpa": 1.9, "torch fp32": 1.9, "ET int8": 2.0, "ET fp32": 2.0}  # at t=2: in bounds
    rs[2] = twin
    got = _by_name(_bench.evaluate_targets(rs, T))
    t = got["decode ctx=2048 t=1 hot: vs ET int8"]
    assert (t.status, t.measured) == (_bench.MISSING, None)
    assert "ET int8 not at t=1: its calls kept 1.95 threads busy (60.00x as timed)" in t.note
    t = got["decode ctx=2048 t=1 hot: vs min(torch fp32, ET fp32)"]
    assert (t.status, t.measured) == (_bench.MISSING, None)
    assert "ET fp32 not at t=1" in t.note and "vs torch fp32 alone: 6.00x" in t.note
    assert got["decode ctx=2048 t=2 hot: vs ET int8"].status == _bench.PASS
    assert got["decode ctx=8192 t=1 hot: vs ET int8"].status == _bench.PASS  # no parallelism measured: judged
    assert "ET int8  60.00x (on 1.95 threads)" in _bench.format_row(rs[0])
    assert "(on" not in _bench.format_row(twin)
    assert "| 60.00x (on 1.95 threads) |" in _bench.markdown_report(_meta(), rs, _bench.evaluate_targets(rs, T))


def test_scaling_flags_a_peer_over_threaded_at_one_thread():
    """A peer that kept two threads busy in its t=1 case (ExecuTorch on its default pool) shows a
    scaling ratio that is not its scaling: the table says so, for that peer only."""
    rs = _full_run()
    rs[0].parallelism = {"qsdpa": 0.97, "torch fp32": 1.4, "ET int8": 1.97}  # torch within the margin
    rs[2].parallelism = {"qsdpa": 1.9, "torch fp32": 1.9, "ET int8": 2.0}
    rows = dict(_bench.thread_scaling(rs, T))
    row = rows["decode llama3-8b B=1 ctx=2048 hot"]
    assert _bench.scaling_cell(row["ET int8"]) == "2.00 [2.0] (t=1 on 1.97 threads)"
    assert _bench.scaling_cell(row["torch fp32"]) == "2.00 [1.9]"
    assert _bench.scaling_cell(row["qsdpa"]) == "2.00 [1.9]"
    assert _bench.scaling_cell(row["ET fp32"]) == "2.00"  # no CPU clocks for it: no bracket
    md = _bench.markdown_report(_meta(), rs, _bench.evaluate_targets(rs, T), _bench.thread_scaling(rs, T))
    assert "| `decode llama3-8b B=1 ctx=2048 hot` | 2.00 [1.9] | 2.00 [1.9] | 2.00 [2.0] (t=1 on 1.97 threads) | 2.00 |" in md
    assert _bench.format_scaling_row("decode llama3-8b B=1 ctx=2048 hot", row) == (
        "decode llama3-8b B=1 ctx=2048 hot: qsdpa 2.00 [1.9]  torch fp32 2.00 [1.9]  ET fp32 2.00  "
        "ET int8 2.00 [2.0] (t=1 on 1.97 threads)")
    rs[0].parallelism["qsdpa"] = 1.6  # the same rule for qsdpa: over the margin is flagged
    row = dict(_bench.thread_scaling(rs, T))["decode llama3-8b B=1 ctx=2048 hot"]
    assert _bench.scaling_cell(row["qsdpa"]) == "2.00 [1.9] (t=1 on 1.60 threads)"


def test_targets_not_measured_cases():
    rs = _full_run()
    # no floor (bandwidth not measured), no t=2 prefill, other model's cases ignored
    rs = [r for r in rs if not (r.case.kind == "prefill" and r.case.threads == T)]
    for r in rs:
        r.floor_us = None
    rs.append(_res("prefill", 512, T, model="small", qsdpa=1.0, torch_fp32=100.0, ET_int8=100.0))
    got = _by_name(_bench.evaluate_targets(rs, T))
    assert got["decode ctx=8192 t=2 cold: qsdpa time / floor"].status == _bench.NOT_MEASURED
    assert got["prefill 512 t=2 (all cores): vs ET int8"].status == _bench.NOT_MEASURED
    assert got["prefill 512: qsdpa time(t=1) / time(t=2)"].status == _bench.NOT_MEASURED
    assert got["decode 8192 hot: qsdpa time(t=1) / time(t=2)"].status == _bench.PASS
    # one core: no scaling targets, and the "all cores" targets are at t=1
    one = _by_name(_bench.evaluate_targets(_full_run(), 1))
    assert one["decode 8192 hot: qsdpa time(t=1) / time(t=1)"].status == _bench.NOT_MEASURED
    assert one["prefill 512 t=1 (all cores): vs torch fp32"].status == _bench.PASS
    assert len(one) == 10


def _meta():
    return {"date": "2030-01-01 00:00 UTC", "command": "python -m qsdpa bench --targets", "env": "",
            "isa": "avx2", "qsdpa_version": "0.0.test", "load_start": "0.1 0.1 0.1", "load_end": "0.2 0.1 0.1",
            "machine": _bench.machine_info([1, 2], {1: 10e9, 2: 12e9}, 32 << 20, {1: 6e9, 2: 11.4e9}),
            "fma_end": {1: 6e9, 2: 8.4e9},
            "peer_versions": {"torch": "2.13.0", "executorch": "missing (not installed)"}}


def test_fma_probe_rate_and_reports():
    one = _bench.fma_rate(1, seconds=0.01, repeats=2)
    assert one > 1e7  # vector FMAs per second: far more than any interpreter loop could reach
    text = _bench.fma_summary({1: 6e9, 2: 11.4e9}, {1: 6e9, 2: 8.4e9})
    assert "1 thread 6.0 G/s, 2 threads 11.4 G/s (×1.90 at 2 threads) at the start" in text
    assert "(×1.40 at 2 threads) at the end" in text
    assert _bench.fma_scaling_note({1: 6e9, 2: 11.4e9}, {1: 6e9, 2: 8.4e9}, 2) == \
        "machine: FMA probe ×1.90 / ×1.40 (start / end of run)"
    assert _bench.fma_scaling_note({1: 6e9}, {}, 1) == ""
    rs = _full_run()
    scaling = [t for t in _bench.evaluate_targets(rs, T, "machine: FMA probe ×1.90") if "time(t=1)" in t.target]
    assert scaling and all(t.note == "machine: FMA probe ×1.90" for t in scaling)


def test_fma_probe_every_variant(kmod):
    # 8 chains x 1000 steps of a = a * 0.999999 + 1e-7 from a ~ 1: finite, just below the start
    lanes_sum = kmod._fma_probe(1000)
    assert 0 < lanes_sum < 8 * 64 * 1.01


def test_read_probe_every_variant(kmod):
    # The probe's sum is of the data read as native 64-bit words (mod 2**64) plus the tail bytes:
    # checking it against numpy shows every byte was read exactly once.
    rng = np.random.default_rng(0)
    for n in (0, 7, 64, 1000, 4099):
        data = rng.integers(-128, 128, n, dtype=np.int8)
        whole = n // 64 * 64
        words = data[:whole].view(np.uint64).sum(dtype=np.uint64) if whole else np.uint64(0)
        want = (int(words) + int(data[whole:].view(np.uint8).sum())) % (1 << 64)
        assert kmod._read_probe(data) == want, n
        for threads in (2, 3):  # each thread reads its share of the lines: the same sum
            assert kmod._read_probe(data, threads) == want, (n, threads)
    with pytest.raises(TypeError, match="data"):
        kmod._read_probe(np.zeros(64, np.float32))
    with pytest.raises(TypeError, match="data"):
        kmod._read_probe([1, 2, 3])
    with pytest.raises(ValueError, match="data"):
        kmod._read_probe(np.zeros((8, 8), np.int8))
    with pytest.raises(ValueError, match="data"):
        kmod._read_probe(np.zeros(128, np.int8)[::2])
    with pytest.raises(ValueError, match="threads"):
        kmod._read_probe(np.zeros(128, np.int8), 0)


def test_stream_read_bandwidth_is_a_rate():
    bw = _bench.stream_read_bandwidth(1, nbytes=1 << 20, repeats=2)
    assert 1e8 < bw < 1e13  # bytes/s: above any interpreter loop, below any memory


def test_measured_text_never_prints_a_fail_as_the_limit():
    t = _bench.TargetResult("x", ">= 2x", 1.996, _bench.FAIL)
    assert _bench.measured_text(t) == "1.996x"
    assert _bench.measured_text(_bench.TargetResult("x", ">= 2x", 1.9999, _bench.FAIL)) == "1.9999x"
    assert _bench.measured_text(_bench.TargetResult("x", ">= 5x", 6.394, _bench.PASS)) == "6.39x"
    assert _bench.measured_text(_bench.TargetResult("x", "<= 1.5x", 1.5042, _bench.FAIL), "×") == "1.504×"
    assert _bench.measured_text(_bench.TargetResult("x", ">= 5x")) == "-"


def test_markdown_has_header_table_and_targets():
    rs = _full_run()
    rs[0].missing = {"numpy": "x"}
    targets = _bench.evaluate_targets(rs, T)
    text = _bench.markdown_report(_meta(), rs, targets, _bench.thread_scaling(rs, T))
    for needle in ("2030-01-01", "`python -m qsdpa bench --targets`", "LLC 32 MiB", "1 thread 10.0 GB/s",
                   "2 threads 12.0 GB/s", "variant `avx2`", "torch 2.13.0", "executorch missing (not installed)",
                   "## Targets", "## Thread scaling", "**PASS**", "≥ 5", "**Compute:**", "(×1.40 at 2 threads) at the end"):
        assert needle in text, needle
    assert _bench.machine_info([1], {}, 1)["cpu"] in text
    lines = text.splitlines()
    header = next(l for l in lines if l.startswith("| case |"))
    assert header.split("|")[2:6] == [" qsdpa µs ", " spread ", " × floor ", " torch fp32 "]
    row = next(l for l in lines if "`decode llama3-8b B=1 ctx=2048 t=1 hot`" in l)
    assert "| 100.0 | 5% | - | 6.00x | 60.00x | 7.00x | missing |" in row
    cold = next(l for l in lines if "`decode llama3-8b B=1 ctx=2048 t=1 cold`" in l)
    assert "| 120.0 | 5% | 1.20 | - |" in cold
    target_rows = lines[lines.index("## Targets"):]
    assert sum(l.startswith("| ") and l.count("|") == 6 for l in target_rows) == 1 + 16  # header + targets
    assert lines[-1] == _bench.targets_summary(targets) + "."  # the counts, after the table


def test_busy_machine_is_flagged():
    assert _bench.others_cores((0.0, 10.0, 1.0), (2.0, 13.0, 2.0)) == pytest.approx(1.0)  # 3 busy - 1 own, over 2 s
    assert _bench.others_cores((0.0, 10.0, 1.0), (2.0, 11.0, 2.0)) == 0.0
    assert _bench.others_cores(None, (2.0, 11.0, 2.0)) is None
    rs = _full_run()
    assert _bench.busy_warning(rs) == ""
    rs[0].others_cores, rs[1].others_cores = 1.2, 0.1
    assert "up to 1.2 CPUs busy during 1 of 10 cases" in _bench.busy_warning(rs)
    text = _bench.markdown_report(_meta(), rs, _bench.evaluate_targets(rs, T))
    assert "WARNING: other processes" in text
    row = next(l for l in text.splitlines() if "`decode llama3-8b B=1 ctx=2048 t=1 hot`" in l)
    assert row.endswith("| 1.2 |")
    assert "others 1.2" not in _bench.format_row(rs[0])  # the CLI appends _busy_note to the progress line
    assert "1.2 CPUs busy" in _bench._busy_note(rs[0]) and _bench._busy_note(rs[1]) == ""


def test_plot_groups_need_two_context_lengths():
    cases = _bench.plan_cases(True, [1, 2])
    assert _bench.plot_groups(cases) == {}
    groups = _bench.plot_groups(_bench.plan_targets([1, 2]))
    assert set(groups) == {("llama3-8b", "decode", 1, t, r) for t in (1, 2) for r in ("hot", "cold")}


def test_plot_writes_png(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "p.png"
    assert _bench.write_plot(str(out), _full_run(), "title") == 4
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_plot_markdown_filter(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png, md, js = tmp_path / "p.png", tmp_path / "r.md", tmp_path / "r.json"
    argv = ["--filter", "decode small B=1 ", "--filter", "ctx=512 |ctx=2048 ", "--filter", "t=1 hot", "--threads", "1",
            "--rounds", "2", "--budget", "0.1", "--plot", str(png), "--markdown", str(md), "--json", str(js)]
    assert _bench.main(argv) == 0
    out = capsys.readouterr().out
    assert "running decode small B=1 ctx=2048 t=1 hot" in out and "targets (issue 4): none measured" in out
    assert png.read_bytes()[:4] == b"\x89PNG"
    text = md.read_text()
    assert "`decode small B=1 ctx=512 t=1 hot`" in text and "`decode small B=1 ctx=2048 t=1 hot`" in text
    assert "--filter 'decode small B=1 '" in text and "## Targets" in text and "not measured" in text
    data = json.loads(js.read_text())
    assert [r["key"] for r in data["results"]] == ["decode small B=1 ctx=512 t=1 hot", "decode small B=1 ctx=2048 t=1 hot"]
    assert len(data["targets"]) == 16 and {t["status"] for t in data["targets"]} == {"not measured"}
    assert data["command"].startswith("python -m qsdpa bench --filter")


def test_markdown_rewrite_keeps_the_notes(tmp_path):
    """README's command rewrites docs/benchmarks.md in place: the new table replaces the old one and
    the hand-written notes (the NOTES_HEADING line on) stay, in order, below it."""
    md = tmp_path / "r.md"
    assert _bench.write_markdown(str(md), "# new table\n\n| a |\n") == 0  # no file yet: nothing kept
    assert md.read_text() == "# new table\n\n| a |\n"
    notes = [_bench.NOTES_HEADING + " (notes by hand)", "", "- first note", "- second note"]
    md.write_text("# old table\n\n| old |\n\n" + "\n".join(notes) + "\n")
    assert _bench.write_markdown(str(md), "# new table\n\n| b |\n") == len(notes)
    assert md.read_text() == "# new table\n\n| b |\n\n" + "\n".join(notes) + "\n"
    md.write_bytes(b"# old\n" + _bench.NOTES_HEADING.encode() + b"\n\xff latin-1 bytes\n")  # not UTF-8: kept as bytes
    assert _bench.write_markdown(str(md), "# new\n") == 2
    assert md.read_bytes() == b"# new\n\n" + _bench.NOTES_HEADING.encode() + b"\n\xff latin-1 bytes\n"
    md.write_bytes(b"# old\r\n" + _bench.NOTES_HEADING.encode() + b" (CRLF)\r\n- a note\r\n")  # line ends kept too
    assert _bench.write_markdown(str(md), "# new\n") == 2
    assert md.read_bytes() == b"# new\n\n" + _bench.NOTES_HEADING.encode() + b" (CRLF)\r\n- a note\r\n"
    md.write_text("# old table without notes\n## Reading these numbersX\n")  # not the heading
    assert _bench.write_markdown(str(md), "# new\n") == 0
    assert md.read_text() == "# new\n"


def _exit_code(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        _bench.main(argv)
    return exc.value.code, capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--quick", "--targets"], "not allowed with"),
    (["--rounds", "0"], "--rounds"),
    (["--budget", "0"], "--budget"),
    (["--threads", "1,x"], "--threads"),
    (["--threads", "0"], "--threads"),
    (["--quick", "--filter", "no-such-case"], "matches no case"),
    (["--quick", "--json", "/nonexistent-dir/x.json"], "does not exist"),
    (["--quick", "--markdown", "/nonexistent-dir/x.md"], "does not exist"),
])
def test_argument_errors_exit_2_before_running(argv, message, capsys):
    code, err = _exit_code(argv, capsys)
    assert code == 2 and message in err


def test_plot_without_matplotlib_is_a_clear_error(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    code, err = _exit_code(["--targets", "--plot", str(tmp_path / "p.png")], capsys)
    assert code == 2 and "needs matplotlib" in err and "pip install" in err


def test_plot_argument_errors(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    code, err = _exit_code(["--quick", "--plot", str(tmp_path / "p.png")], capsys)
    assert code == 2 and "nothing to plot" in err
    code, err = _exit_code(["--targets", "--plot", str(tmp_path / "p.nosuchformat")], capsys)
    assert code == 2 and "unsupported image type" in err


def test_paired_scaling_times_both_thread_counts_alternately():
    set_num_threads(2)
    p = _bench.paired_scaling("decode", 64, 2, rounds=_bench.MIN_SAMPLES, budget_s=0.0,
                              rng=__import__("numpy").random.default_rng(0), model="small")
    assert (p.kind, p.context, p.threads, p.rounds) == ("decode", 64, 2, _bench.MIN_SAMPLES)
    assert p.t1_us > 0 and p.tn_us > 0 and p.ratio == pytest.approx(p.t1_us / p.tn_us)
    if sys.platform.startswith("linux"):  # per-thread clocks: how busy the t=2 calls kept the threads
        assert p.tn_cpu is not None and p.tn_cpu > 0


def test_scaling_targets_judged_on_the_paired_measurement():
    rs = _full_run()  # the table's rows scale 2x
    paired = [_bench.PairedScaling("decode", 8192, T, 300.0, 200.0, 40),   # 1.5x: fails
              _bench.PairedScaling("prefill", 512, T, 1800.0, 1000.0, 12)]  # 1.8x: passes
    got = _by_name(_bench.evaluate_targets(rs, T, "machine: FMA probe ×1.90", paired))
    dec = got[f"decode 8192 hot: qsdpa time(t=1) / time(t={T})"]
    pre = got[f"prefill 512: qsdpa time(t=1) / time(t={T})"]
    assert (dec.status, round(dec.measured, 2)) == (_bench.FAIL, 1.5)
    assert (pre.status, round(pre.measured, 2)) == (_bench.PASS, 1.8)
    assert "40 rounds: 300 / 200 µs" in dec.note and "the table's rows: 2.00×" in dec.note
    assert dec.note.endswith("machine: FMA probe ×1.90") and "cores probe" not in dec.note
    paired[0].cores_probe = 1.97
    paired[0].tn_cpu = 1.41
    dec = _by_name(_bench.evaluate_targets(rs, T, "", paired))[f"decode 8192 hot: qsdpa time(t=1) / time(t={T})"]
    assert "300 / 200 µs (cores probe ×1.97 before it)" in dec.note
    assert f"the t={T} calls' threads busy: 1.4 (CPU / wall, median call)" in dec.note
    # without a paired measurement the table's rows decide, as before
    plain = _by_name(_bench.evaluate_targets(rs, T))[f"decode 8192 hot: qsdpa time(t=1) / time(t={T})"]
    assert plain.status == _bench.PASS and plain.measured == pytest.approx(2.0)


def test_wait_for_cores_probes_until_every_core_is_free(monkeypatch):
    assert _bench.wait_for_cores(1, 30.0) == (None, 0.0)     # one thread: nothing to wait for
    assert _bench.wait_for_cores(2, 0.0) == (None, 0.0)      # turned off
    rates = iter([6.0, 6.0, 6.0, 6.0, 11.9, 6.0])            # (2 threads, 1 thread) per probe: x1.0, x1.0, x1.98
    monkeypatch.setattr(_bench, "fma_rate", lambda threads, seconds=0.05, repeats=5: next(rates))
    monkeypatch.setattr(_bench.time, "sleep", lambda s: None)
    ratio, waited = _bench.wait_for_cores(2, 30.0)
    assert ratio == pytest.approx(11.9 / 6.0) and waited < 30.0
    monkeypatch.setattr(_bench, "fma_rate", lambda threads, seconds=0.05, repeats=5: 6.0)  # never free
    ratio, waited = _bench.wait_for_cores(2, 0.01)
    assert ratio == pytest.approx(1.0) and waited >= 0.01  # gives up after the wait, says what it saw


def test_cores_note_reports_the_waits():
    rs = _full_run()
    assert _bench.cores_note(_meta(), rs) == ""  # not probed
    for r in rs:
        r.cores_probe, r.cores_wait_s = 1.95, 0.5
    rs[3].cores_probe, rs[3].cores_wait_s = 1.02, 30.0
    meta = dict(_meta(), all_threads=2, cores_wait_max_s=30.0)
    note = _bench.cores_note(meta, rs)
    assert "up to 30 s" in note and "≥ 1.8×" in note and "34 s waited in all" in note
    assert "×1.02–×1.95" in note and f"started without the cores after the wait: {rs[3].case.key}." in note
    assert note in _bench.markdown_report(meta, rs, _bench.evaluate_targets(rs, T))


def test_wait_for_cores_argument_is_checked(capsys):
    code, err = _exit_code(["--quick", "--wait-for-cores", "-1"], capsys)
    assert code == 2 and "--wait-for-cores" in err


def test_settle_busies_every_core_it_is_given_until_the_deadline(monkeypatch):
    import threading
    import time

    callers = []

    def probe(steps):  # stands in for the FMA probe: who ran it; like it, lets go of the GIL
        callers.append(threading.get_ident())
        time.sleep(1e-4)

    _bench._spin_probe()  # the real calibration, then the stand-in probe
    monkeypatch.setitem(_bench._spin_state, "probe", probe)
    for threads, seconds in ((1, 0.01), (2, 0.02), (3, 0.02)):
        callers.clear()
        t0 = time.perf_counter()
        _bench._settle(seconds, threads)
        assert time.perf_counter() - t0 >= seconds
        if threads == 1:
            assert callers == []  # this thread's busy loop only
        else:
            assert threading.get_ident() in callers and len(set(callers)) == threads


def test_settle_waits_for_spinning_threads_up_to_the_cap(monkeypatch):
    """With the process's thread clocks, _settle waits while another thread of the process is
    still running (a thread pool's spin-wait), and stops once it is quiet or at the cap. The other
    threads' CPU time is a stand-in here (one core's worth until `busy_until`, then none): with real
    threads the test would time the scheduler, and under CI's parallel suites a spinning thread
    gets the CPU in bursts. That the real clocks see other threads is test_thread_cpu's."""
    import time

    monkeypatch.setattr(_bench, "QUIET_CAP_S", 0.3)
    busy_until = {"t": 0.0}

    def others_cpu(clocks, me):
        now = time.perf_counter()
        return min(now, busy_until["t"])  # CPU seconds: they grow at one a second while busy

    monkeypatch.setattr(_bench, "_others_cpu", others_cpu)

    class Clocks:  # what _settle asks of a ThreadClocks before it reads the clocks
        exact = True

    # quiet process: about the pause alone
    t0 = time.perf_counter()
    waited = _bench._settle(0.005, 1, Clocks())
    assert waited < 0.05 and time.perf_counter() - t0 >= 0.005

    # a thread that spins 80 ms more: waited for, not past it by much
    busy_until["t"] = time.perf_counter() + 0.08
    waited = _bench._settle(0.005, 1, Clocks())
    assert time.perf_counter() >= busy_until["t"] and 0.04 < waited < 0.3

    # one that outlasts the cap: the cap
    busy_until["t"] = time.perf_counter() + 0.6
    waited = _bench._settle(0.005, 2, Clocks())
    assert busy_until["t"] > time.perf_counter()  # still spinning when it gave up
    assert 0.29 <= waited < 0.45
    assert _bench._quiet_wait_capped(waited)


def test_last_level_cache_skips_entries_without_a_size(tmp_path):
    # Linux's cache folder holds a `uevent` file beside the index* folders; it must not end the scan.
    for name, size in (("index0", "48K"), ("index2", "2048K"), ("index3", "491520K")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "size").write_text(size + "\n")
    (tmp_path / "uevent").write_text("")
    (tmp_path / "index9").mkdir()  # no size file at all
    assert _bench.last_level_cache_bytes(str(tmp_path)) == 491520 << 10
    assert _bench.last_level_cache_bytes(str(tmp_path / "missing")) == 32 << 20


def _vm_flags(address: int) -> list:
    """The VmFlags of the mapping holding `address` (/proc/self/smaps)."""
    mapping = None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                mapping = lo <= address < hi
            elif mapping and line.startswith("VmFlags:"):
                return line.split()[1:]
    return []


def test_on_huge_pages_copies_aligned_and_asks_for_huge_pages():
    a = np.arange(10, dtype=np.float32).reshape(2, 5)
    b = np.arange(7, dtype=np.int8)
    big = np.ones(6 << 20, dtype=np.int8)
    x, y, z = _bench.on_huge_pages((a, b, big))
    assert x.shape == a.shape and x.dtype == a.dtype and (x == a).all() and (y == b).all() and (z == big).all()
    assert all(v.flags.writeable and v.ctypes.data % 64 == 0 for v in (x, y, z))
    x[0, 0] = 42.0
    assert a[0, 0] == 0.0  # copies, not views
    if sys.platform == "linux":
        assert x.ctypes.data % _bench.HUGE_PAGE == 0  # the buffer starts on a 2 MiB boundary
        assert "hg" in _vm_flags(z.ctypes.data)  # madvise(MADV_HUGEPAGE) on the mapping
