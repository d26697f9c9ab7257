"""fork() after a multi-threaded call (docs/reliability.md, tools/repro/fork_hang.py).

libgomp's thread pool does not survive fork(): a child's next region of more than one thread
waits forever for threads that exist only in the parent. qsdpa._threads records the first kernel
call handed more than one thread, and a process forked after it (and its own children) runs every
kernel call on 1 thread. A process forked before any such call keeps its threads.

Each scenario runs in a child interpreter of its own (this file, run as a script), which forks;
every forked process has a SIGALRM deadline and the interpreter a timeout, so a regression fails
instead of hanging the suite. Forked processes send their results back through a pipe and the
scenario compares them with the same calls made by the process they were forked from.
"""
from __future__ import annotations

import json
import os
import pathlib
import pickle
import subprocess
import sys

import pytest

if __name__ != "__main__":
    from child_env import child_env

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or not hasattr(os, "register_at_fork"),
                                reason="os.fork / os.register_at_fork are not available on this platform")

DEADLINE = 20  # seconds a forked process may take before SIGALRM ends it (a hang)


def run_scenario(name: str) -> dict:
    env = child_env(QSDPA_ISA=os.environ.get("QSDPA_ISA", ""))
    if not env["QSDPA_ISA"]:
        del env["QSDPA_ISA"]
    try:
        proc = subprocess.run([sys.executable, str(pathlib.Path(__file__)), name], env=env, capture_output=True,
                              text=True, timeout=4 * DEADLINE)
    except OSError as exc:  # qemu-user without binfmt cannot exec a child interpreter
        pytest.skip(f"cannot run a child interpreter here: {exc}")
    assert proc.returncode == 0, f"scenario exited with {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_child_of_a_multithreaded_parent_runs_on_one_thread_and_is_right():
    r = run_scenario("after-parallel")
    print(r)
    child = r["child"]
    assert child["exit"] == 0, child
    assert child["threads_at_start"] == 1
    assert child["attention_max_diff"] <= 1e-5 and child["attention_out_max_diff"] <= 1e-5
    assert child["quantize_equal"] and child["cache_equal"]
    # set_num_threads(4) and (3): clamped, one RuntimeWarning naming fork and the start methods
    assert child["threads_after_set"] == 1 and child["again_max_diff"] <= 1e-5
    assert len(child["warnings"]) == 1, child["warnings"]
    category, message = child["warnings"][0]
    assert category == "RuntimeWarning"
    assert message.startswith("qsdpa.set_num_threads(4): the kernels run on 1 thread: this process was forked")
    assert "libgomp" in message and "'spawn'" in message and "'forkserver'" in message
    assert "not 3 (set_num_threads(3))" in child["show_runtime"] and "forked" in child["show_runtime"]
    grandchild = r["grandchild"]
    assert grandchild["exit"] == 0, grandchild
    assert grandchild["threads_at_start"] == 1 and grandchild["attention_max_diff"] <= 1e-5
    assert grandchild["quantize_equal"]
    mp_child = r["multiprocessing_fork"]
    assert mp_child["exit"] == 0, mp_child
    assert mp_child["threads_at_start"] == 1 and mp_child["attention_max_diff"] <= 1e-5
    # set_num_threads(1) in such a child: no warning
    assert r["set_one"]["exit"] == 0 and r["set_one"]["warnings"] == []


def test_child_of_a_parent_that_never_ran_multithreaded_keeps_its_threads():
    r = run_scenario("before-parallel")
    print(r)
    child = r["child"]
    assert child["exit"] == 0, child
    assert child["threads_at_start"] == 2, "a fork before any multi-threaded call must keep the threads"
    assert child["attention_max_diff"] <= 1e-5 and child["attention_out_max_diff"] <= 1e-5
    assert child["quantize_equal"] and child["cache_equal"]
    assert child["warnings"] == []
    if child["os_threads_after"] is not None:  # Linux: libgomp's pool threads are still there
        assert child["os_threads_after"] > child["os_threads_before"], "the child's calls ran on 1 thread"
    assert "keeps its threads" in r["parent_show_before"]
    # That child ran a 2-thread call, so its own children are on 1 thread.
    assert r["grandchild"]["exit"] == 0 and r["grandchild"]["threads_at_start"] == 1
    assert r["grandchild"]["attention_max_diff"] <= 1e-5


# ---- the scenarios, run as `python tests/test_fork.py NAME` -------------------------------------------------------

def _workload(np, qsdpa):
    rng = np.random.default_rng(0)
    k8, ks, kz = qsdpa.quantize_per_token(rng.standard_normal((1, 4096, 2, 64)).astype(np.float32))
    q = rng.standard_normal((1, 1, 8, 64)).astype(np.float32)
    x = rng.standard_normal((4096, 128)).astype(np.float32)  # large: quantize_per_token goes parallel
    kv = rng.standard_normal((1, 2048, 2, 64)).astype(np.float32)
    kw = dict(k_zero_points=kz, k_scales=ks, v_zero_points=kz, v_scales=ks)

    def run():
        out = np.empty(q.shape, np.float32)
        qsdpa.quantized_sdpa(q, k8, k8, 4000, **kw, out=out)  # the C entry's call
        cache = qsdpa.QuantizedKVCache(1, 4096, 2, 64)
        cache.update(0, kv, kv)
        return {"attention": qsdpa.quantized_sdpa(q, k8, k8, 4000, **kw), "attention_out": out,
                "quantize": qsdpa.quantize_per_token(x), "cache": cache.attend(q, 2047)}

    return run


def _compare(np, got, want) -> dict:
    return {"attention_max_diff": float(np.abs(got["attention"] - want["attention"]).max()),
            "attention_out_max_diff": float(np.abs(got["attention_out"] - want["attention_out"]).max()),
            "quantize_equal": all(np.array_equal(a, b) for a, b in zip(got["quantize"], want["quantize"])),
            "cache_equal": bool(np.allclose(got["cache"], want["cache"], rtol=1e-5, atol=1e-6))}


def _in_child(fn) -> dict:
    """fn() in a forked process (SIGALRM after DEADLINE s); its dict, plus 'exit'."""
    import signal

    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(rfd)
            signal.alarm(DEADLINE)
            data = pickle.dumps(fn())
            with os.fdopen(wfd, "wb") as f:
                f.write(data)
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 3
        finally:
            os._exit(code)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    result = pickle.loads(data) if data else {}
    result["exit"] = os.waitstatus_to_exitcode(status)
    return result


def _os_threads():
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


def _child_calls(np, qsdpa, run, reference, extra=None) -> dict:
    import warnings

    result = {"threads_at_start": qsdpa.get_num_threads(), "os_threads_before": _os_threads()}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = run()
        result["os_threads_after"] = _os_threads()
        if extra is not None:
            result.update(extra(run))
    result.update(_compare(np, got, reference))
    result["warnings"] = [(w.category.__name__, str(w.message)) for w in caught]
    return result


def scenario_after_parallel() -> dict:
    import numpy as np

    import qsdpa
    from qsdpa import _show

    run = _workload(np, qsdpa)
    qsdpa.set_num_threads(2)
    reference = run()  # 2-thread calls: libgomp's pool now exists

    def show_line():
        return next(line for line in _show.runtime_report().splitlines() if line.startswith("qsdpa kernel threads"))

    def set_more(run_again):
        qsdpa.set_num_threads(4)
        qsdpa.set_num_threads(3)  # no second warning
        again = run_again()
        return {"threads_after_set": qsdpa.get_num_threads(), "show_runtime": show_line(),
                "again_max_diff": float(np.abs(again["attention"] - reference["attention"]).max())}

    def child():
        out = _child_calls(np, qsdpa, run, reference, set_more)
        out_grandchild = _in_child(lambda: _child_calls(np, qsdpa, run, reference))
        return {"child": out, "grandchild": out_grandchild}

    r = _in_child(child)
    result = {"child": dict(r.get("child", {}), exit=r["exit"]), "grandchild": r.get("grandchild", {"exit": None})}

    def set_one(run_again):
        qsdpa.set_num_threads(1)
        run_again()
        return {}

    result["set_one"] = _in_child(lambda: _child_calls(np, qsdpa, run, reference, set_one))

    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)

    def target():
        import signal

        signal.alarm(DEADLINE)
        send.send(_child_calls(np, qsdpa, run, reference))

    proc = ctx.Process(target=target)
    proc.start()
    mp_result = receive.recv() if receive.poll(2 * DEADLINE) else {}
    proc.join(DEADLINE)
    mp_result["exit"] = proc.exitcode
    result["multiprocessing_fork"] = mp_result
    return result


def scenario_before_parallel() -> dict:
    import numpy as np

    import qsdpa
    from qsdpa import _show

    qsdpa.set_num_threads(1)
    run = _workload(np, qsdpa)  # its inputs, quantized on 1 thread
    qsdpa.set_num_threads(2)
    qsdpa.get_num_threads()  # asking is not running
    show = next(line for line in _show.runtime_report().splitlines() if line.startswith("qsdpa kernel threads"))

    def child():
        import warnings

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            threads, before = qsdpa.get_num_threads(), _os_threads()
            results = run()
            after = _os_threads()
        grandchild = _in_child(lambda: {"threads_at_start": qsdpa.get_num_threads(), "attention": run()["attention"]})
        return {"child_results": results, "threads_at_start": threads, "os_threads_before": before,
                "os_threads_after": after, "warnings": [str(w.message) for w in caught], "grandchild": grandchild}

    raw = _in_child(child)  # before the parent runs anything multi-threaded
    reference = run()  # now the parent's 2-thread calls, to compare with
    out = {key: raw.get(key) for key in ("exit", "threads_at_start", "os_threads_before", "os_threads_after",
                                         "warnings")}
    if raw["exit"] == 0:
        out.update(_compare(np, raw["child_results"], reference))
    grandchild = raw.get("grandchild", {"exit": None})
    if "attention" in grandchild:
        grandchild["attention_max_diff"] = float(np.abs(grandchild.pop("attention") - reference["attention"]).max())
    return {"child": out, "grandchild": grandchild, "parent_show_before": show}


if __name__ == "__main__":
    scenarios = {"after-parallel": scenario_after_parallel, "before-parallel": scenario_before_parallel}
    print(json.dumps(scenarios[sys.argv[1]]()))
