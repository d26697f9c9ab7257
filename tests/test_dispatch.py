"""Dispatch: which variant runs, QSDPA_ISA, what `import qsdpa` may touch, py-cpuinfo at most once.

End-to-end checks run in a fresh interpreter (``sys.executable -c ...``) because the selection is
resolved once per process and import side effects are only visible in a clean one; they skip when
the interpreter cannot be re-executed (qemu-user without binfmt_misc: ENOEXEC). Expectations come
from an oracle written here from the registry table, find_spec and the native check, not from the
dispatcher's own code. Variations of the decision logic run in-process on a freshly computed probe.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import os
import pathlib
import platform
import subprocess
import sys
import textwrap
from typing import Any, Dict, List, NamedTuple, Optional

import pytest

import qsdpa
from qsdpa import _cpu, _dispatch, _show
from qsdpa._variants import VARIANTS, Variant

MARK = "@@RESULT@@"  # children print one JSON line after this marker


# ---------------------------------------------------------------- oracle (independent of _dispatch)

def _oracle_arch() -> str:
    m = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(m, m)


class Oracle(NamedTuple):
    arch: str
    mine: List[Variant]      # this arch's variants, highest rank first
    usable: List[Variant]    # built and every feature confirmed natively
    others: List[Variant]    # other arches' variants
    native: Dict[str, bool]


def _oracle() -> Optional[Oracle]:
    """What dispatch should conclude, or None if qsdpa is not built."""
    if importlib.util.find_spec("qsdpa._kernels_scalar") is None:
        return None
    native = dict(importlib.import_module("qsdpa._kernels_scalar").cpu_features())
    arch = _oracle_arch()
    mine = sorted((v for v in VARIANTS if v.arch in ("any", arch)), key=lambda v: -v.rank)
    usable = [v for v in mine if importlib.util.find_spec(f"qsdpa.{v.module}") is not None
              and all(native.get(f, False) for f in v.features)]
    return Oracle(arch, mine, usable, [v for v in VARIANTS if v not in mine], native)


ORACLE = _oracle()
needs_build = pytest.mark.skipif(ORACLE is None, reason="qsdpa._kernels_scalar is not built")


def _usable() -> List[Variant]:
    return ORACLE.usable if ORACLE else []


def _mine() -> List[Variant]:
    return ORACLE.mine if ORACLE else []


def _unrunnable() -> List[Any]:
    """Variants this machine cannot use: this arch's unusable ones, then other arches' (always some)."""
    if ORACLE is None:
        return [pytest.param("none", marks=pytest.mark.skip(reason="qsdpa._kernels_scalar is not built"))]
    names = [v.name for v in ORACLE.mine if v not in ORACLE.usable] + [v.name for v in ORACLE.others]
    return [pytest.param(n, id=n) for n in names]


# ---------------------------------------------------------------- subprocess helpers

@functools.lru_cache(maxsize=None)
def _exec_problem() -> Optional[str]:
    """Why sys.executable cannot be re-executed, or None; probed once per test session."""
    try:
        proc = subprocess.run([sys.executable, "-c", "pass"], capture_output=True, timeout=120)
    except OSError as exc:  # ENOEXEC under qemu-user without binfmt_misc
        return f"cannot exec {sys.executable}: {exc}"
    except subprocess.TimeoutExpired:
        return f"{sys.executable} -c pass timed out"
    if proc.returncode != 0:
        return f"{sys.executable} -c pass exited {proc.returncode}: {proc.stderr.decode(errors='replace')[:200]}"
    return None


def _child_env(isa: Optional[str]) -> Dict[str, str]:
    env = dict(os.environ)
    env.pop("QSDPA_ISA", None)  # CI may run the whole suite under QSDPA_ISA=...; children decide for themselves
    if isa is not None:
        env["QSDPA_ISA"] = isa
    # The child runs in a scratch directory; make it import the same qsdpa as this process.
    root = os.path.dirname(os.path.dirname(os.path.abspath(qsdpa.__file__)))  # no resolve(): keep symlinked layouts
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


@pytest.fixture
def run_py(tmp_path: pathlib.Path):
    """run_py(code | ["-m", ...], isa=None) -> CompletedProcess in a fresh interpreter."""
    problem = _exec_problem()
    if problem:
        pytest.skip(f"subprocess tests need to re-execute the interpreter: {problem}")

    def run(code, isa: Optional[str] = None) -> subprocess.CompletedProcess:
        args = list(code) if isinstance(code, (list, tuple)) else ["-c", textwrap.dedent(code)]
        return subprocess.run([sys.executable, *args], cwd=tmp_path, env=_child_env(isa),
                              capture_output=True, text=True, timeout=300)
    return run


def _result(proc: subprocess.CompletedProcess, rc: int = 0) -> Any:
    assert proc.returncode == rc, f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    line = next(l for l in reversed(proc.stdout.splitlines()) if l.startswith(MARK))
    return json.loads(line[len(MARK):])


_KERNEL_MODULES = "sorted(m for m in sys.modules if m.startswith('qsdpa._kernels') or m.split('.')[0] == 'cpuinfo')"


# ---------------------------------------------------------------- subprocess tests

def test_import_is_cheap(run_py):
    """`import qsdpa` imports no kernel module and does not touch py-cpuinfo."""
    res = _result(run_py(f"""
        import json, sys
        import qsdpa
        print({MARK!r} + json.dumps(dict(loaded={_KERNEL_MODULES}, all=sorted(qsdpa.__all__))))
    """))
    assert res["loaded"] == []
    assert {"get_isa", "show_runtime", "VariantUnavailableError", "__version__"} <= set(res["all"])


@needs_build
def test_default_is_best_built_and_supported(run_py):
    res = _result(run_py(f"""
        import json, sys
        import qsdpa
        isa = qsdpa.get_isa()
        print({MARK!r} + json.dumps(dict(isa=isa, loaded={_KERNEL_MODULES})))
    """))
    best = _usable()[0]
    assert res["isa"] == best.name
    # Only the native-check module and the selected one were imported: nothing that could SIGILL.
    expected = {"qsdpa._kernels_scalar", f"qsdpa.{best.module}"}
    assert {m for m in res["loaded"] if m.startswith("qsdpa.")} == expected


@needs_build
def test_isa_override(run_py, isa_name):
    """QSDPA_ISA=<any usable variant> selects it (case and surrounding blanks ignored)."""
    for spelling in (isa_name, f"  {isa_name.upper()} "):
        res = _result(run_py(f"""
            import json, sys
            import qsdpa
            from qsdpa import _dispatch
            sel = _dispatch.selection()
            print({MARK!r} + json.dumps(dict(isa=qsdpa.get_isa(), module=sel.module.__name__, reason=sel.reason)))
        """, isa=spelling))
        assert res["isa"] == isa_name
        assert res["module"] == f"qsdpa._kernels_{isa_name}"
        assert "QSDPA_ISA" in res["reason"]


@needs_build
def test_empty_isa_means_unset(run_py):
    res = _result(run_py(f"import json, qsdpa; print({MARK!r} + json.dumps(qsdpa.get_isa()))", isa="  "))
    assert res == _usable()[0].name


def test_unknown_isa_raises_value_error(run_py):
    proc = run_py(f"""
        import json, sys
        import qsdpa
        try:
            qsdpa.get_isa()
        except ValueError as exc:
            print({MARK!r} + json.dumps(str(exc)))
            sys.exit(3)
    """, isa="avx9000")
    message = _result(proc, rc=3)
    assert "avx9000" in message
    for v in _mine():
        assert v.name in message  # the valid names for this arch are listed


@pytest.mark.parametrize("name", _unrunnable())
def test_unrunnable_isa_raises_not_sigill(run_py, name):
    """A variant this machine cannot run is refused before import: an exception, never a signal."""
    proc = run_py(f"""
        import json, sys
        import qsdpa
        from qsdpa import _dispatch
        out = {{}}
        try:
            qsdpa.get_isa()
        except qsdpa.VariantUnavailableError as exc:
            out["get_isa"] = [exc.variant, str(exc)]
        try:
            _dispatch.load_variant({name!r})
        except qsdpa.VariantUnavailableError as exc:
            out["load_variant"] = [exc.variant, str(exc)]
        out["loaded"] = {_KERNEL_MODULES}
        print({MARK!r} + json.dumps(out))
        sys.exit(3)
    """, isa=name)
    assert proc.returncode >= 0, f"child died of signal {-proc.returncode}"
    res = _result(proc, rc=3)
    assert res["get_isa"][0] == name and "QSDPA_ISA" in res["get_isa"][1]
    assert res["load_variant"][0] == name
    assert f"qsdpa._kernels_{name}" not in res["loaded"]
    variant = next(v for v in VARIANTS if v.name == name)
    assert ORACLE is not None
    if variant.arch in ("any", ORACLE.arch):
        missing = [f for f in variant.features if not ORACLE.native.get(f, False)]
        for f in missing:  # the reason names what the CPU/OS lacks
            assert f in res["load_variant"][1]
    else:
        assert variant.arch in res["load_variant"][1]


@needs_build
def test_cli_info(run_py):
    proc = run_py(["-m", "qsdpa", "info"])
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    best = _usable()[0].name
    assert f"selected: {best}" in out
    assert "QSDPA_ISA: (unset)" in out
    for v in _mine():
        assert v.name in out
    assert "OMP_NUM_THREADS" in out and qsdpa.__version__ in out


@pytest.mark.parametrize("isa", ["avx9000", pytest.param(None, id="unrunnable", marks=needs_build)])
def test_cli_info_bad_isa_exits_2(run_py, isa):
    if isa is None:
        isa = _unrunnable()[0].values[0]
    proc = run_py(["-m", "qsdpa", "info"], isa=isa)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("qsdpa: error:") and isa in err[0]
    assert "selected: none" in proc.stdout  # the report is still printed, explaining the rejection


@needs_build
def test_cpuinfo_called_at_most_once(run_py):
    res = _result(run_py(f"""
        import io, json, sys, threading
        import cpuinfo
        calls = []
        real = cpuinfo.get_cpu_info
        def counting():
            calls.append(threading.get_ident())
            return real()
        cpuinfo.get_cpu_info = counting
        import qsdpa
        from qsdpa import _cpu, _dispatch
        before = len(calls)
        threads = [threading.Thread(target=qsdpa.get_isa) for _ in range(4)]
        for t in threads: t.start()
        for t in threads: t.join()
        qsdpa.show_runtime(file=io.StringIO())
        _cpu.cpuinfo_flags(); _cpu.cpuinfo_flags()
        for s in _dispatch.probe().usable:
            _dispatch.load_variant(s.name)
        print({MARK!r} + json.dumps(dict(before=before, calls=len(calls), ok=_cpu.cpuinfo_flags().ok)))
    """))
    assert res["before"] == 0
    assert res["calls"] == 1


@needs_build
@pytest.mark.parametrize("failure", [
    pytest.param("raise OSError(8, 'Exec format error')", id="enoexec"),  # qemu-user, no binfmt
    pytest.param("raise Exception('py-cpuinfo currently only works on X86 and some ARM')", id="bare-exception"),
    pytest.param("return {}", id="empty"),                                # its helper subprocess failed
    pytest.param("return {'brand_raw': 'x'}", id="no-flags"),             # macOS arm64
])
def test_cpuinfo_failure_is_contained(run_py, failure):
    res = _result(run_py(f"""
        import io, json
        import cpuinfo
        def broken():
            {failure}
        cpuinfo.get_cpu_info = broken
        import qsdpa
        from qsdpa import _cpu
        buf = io.StringIO()
        qsdpa.show_runtime(file=buf)
        print({MARK!r} + json.dumps(dict(isa=qsdpa.get_isa(), error=_cpu.cpuinfo_flags().error, report=buf.getvalue())))
    """))
    assert res["isa"] == _usable()[0].name  # the native check alone decides
    assert res["error"]
    assert "py-cpuinfo: unavailable" in res["report"]


@needs_build
def test_cpuinfo_not_installed(run_py):
    res = _result(run_py(f"""
        import json, sys
        sys.modules["cpuinfo"] = None  # makes `import cpuinfo` raise ImportError
        import qsdpa
        from qsdpa import _cpu
        print({MARK!r} + json.dumps(dict(isa=qsdpa.get_isa(), error=_cpu.cpuinfo_flags().error)))
    """))
    assert res["isa"] == _usable()[0].name
    assert "ImportError" in res["error"] or "ModuleNotFoundError" in res["error"]


# ---------------------------------------------------------------- in-process tests

def test_public_api():
    assert set(qsdpa.__all__) >= {"get_isa", "show_runtime", "VariantUnavailableError", "__version__"}
    assert issubclass(qsdpa.VariantUnavailableError, RuntimeError)


def test_installed_metadata_version():
    """pyproject.toml reads the version from qsdpa/_version.py; installed metadata must agree."""
    from importlib import metadata

    try:
        installed = metadata.version("qsdpa")
    except metadata.PackageNotFoundError:
        pytest.skip("qsdpa is on sys.path without installed metadata (e.g. the cross-built aarch64 tree)")
    assert installed == qsdpa.__version__


# Macros every compiler for the arch defines with no flags at all: ASIMD is mandatory in ARMv8-A, so
# __ARM_NEON is on even in the scalar module (harmless: every aarch64 CPU runs it).
_BASELINE_MACROS = {"aarch64": {"__ARM_NEON"}, "x86_64": {"__SSE2__"}}


def test_every_variant_of_this_arch_is_built():
    """Fails (never skips) on a missing build, so a broken install cannot pass as 'all skipped'."""
    arch = _oracle_arch()
    expected = [v for v in VARIANTS if v.arch in ("any", arch)] if arch in ("x86_64", "aarch64") else [
        v for v in VARIANTS if v.arch == "any"]
    missing = [v.module for v in expected if importlib.util.find_spec(f"qsdpa.{v.module}") is None]
    assert not missing, f"not built for {arch}: {missing} (qsdpa imported from {os.path.dirname(qsdpa.__file__)})"


def test_whoami_matches_registry(kmod, isa_name):
    """The module really was built with the registry's flags, and with none of a higher tier's."""
    me = kmod.whoami()
    assert me["isa"] == isa_name
    variant = next(v for v in VARIANTS if v.name == isa_name)
    for macro in variant.macros:
        assert me["macros"].get(macro) is True, f"{isa_name} lacks {macro}"
    arch = _dispatch.normalize_arch(platform.machine())
    higher = {m for v in VARIANTS if v.arch in ("any", arch) and v.rank > variant.rank for m in v.macros}
    higher -= _BASELINE_MACROS.get(arch, set())
    for macro in sorted(higher - set(variant.macros)):
        assert me["macros"].get(macro) is False, f"{isa_name} was built with {macro}, a higher tier's macro"


@needs_build
def test_selection_record():
    requested = os.environ.get("QSDPA_ISA", "").strip().lower()
    if requested and requested not in {v.name for v in _usable()}:  # this run's own QSDPA_ISA is unusable
        with pytest.raises((ValueError, qsdpa.VariantUnavailableError)):
            _dispatch.selection()
        return
    sel = _dispatch.selection()
    assert sel.name == (requested or _usable()[0].name)
    assert sel.name == qsdpa.get_isa() and sel.module.ISA == sel.name
    with pytest.raises(Exception):  # frozen
        sel.name = "scalar"  # type: ignore[misc]
    assert [s.name for s in sel.variants] == [v.name for v in _mine()]
    assert {s.name for s in sel.variants if s.usable} == {v.name for v in _usable()}
    for s in sel.variants:
        assert s.usable == (s.reason == "")
        assert s.reason == "" or s.reason.startswith(f"{s.name}: ")
    assert ORACLE is not None
    for name, f in sel.features.items():
        assert f.native == ORACLE.native.get(name, False)


def test_load_variant_errors():
    with pytest.raises(ValueError, match="not a qsdpa variant"):
        _dispatch.load_variant("avx9000")
    if ORACLE is None:
        return
    for v in ORACLE.others:
        with pytest.raises(qsdpa.VariantUnavailableError, match=v.arch):
            _dispatch.load_variant(v.name)
        assert f"qsdpa.{v.module}" not in sys.modules


def _fake_cpuinfo(flags) -> _cpu.CpuinfoResult:
    return _cpu.CpuinfoResult(brand="fake", arch="", flags=frozenset(flags), raw_count=len(flags),
                              version="", seconds=0.0, error=None)


@needs_build
def test_cpuinfo_overclaim_is_rejected(monkeypatch):
    """Emulator/VM case: py-cpuinfo claims every feature, the native check denies some."""
    everything = {f for v in VARIANTS for f in v.features}
    monkeypatch.setattr(_cpu, "cpuinfo_flags", lambda: _fake_cpuinfo(everything))
    p = _dispatch._compute_probe()
    assert [s.name for s in p.usable] == [v.name for v in _usable()]
    denied = [s for s in p.variants if s.missing]
    if not denied:
        pytest.skip("this CPU/OS enables every feature the registry knows; nothing to deny")
    for s in denied:
        assert "py-cpuinfo reports" in s.reason and "native" in s.reason
        assert all(p.features[f].disagreement for f in s.missing)


@needs_build
def test_cpuinfo_underclaim_native_wins(monkeypatch):
    """qemu-aarch64 case: py-cpuinfo shows the host's (wrong) flags; the native check still decides."""
    monkeypatch.setattr(_cpu, "cpuinfo_flags", lambda: _fake_cpuinfo({"some_other_cpu_flag"}))
    p = _dispatch._compute_probe()
    assert [s.name for s in p.usable] == [v.name for v in _usable()]
    for f in p.features.values():
        if f.native:
            assert f.cpuinfo is False and "native check wins" in (f.disagreement or "")


@needs_build
def test_choose_respects_env(monkeypatch):
    """The QSDPA_ISA rules on the cached probe, without a subprocess per case."""
    p = _dispatch.probe()
    best = _usable()[0].name
    monkeypatch.delenv("QSDPA_ISA", raising=False)
    assert _dispatch._choose(p)[0].name == best
    for v in _usable():
        monkeypatch.setenv("QSDPA_ISA", f" {v.name.upper()}\t")
        assert _dispatch._choose(p)[0].name == v.name
    monkeypatch.setenv("QSDPA_ISA", "")
    assert _dispatch._choose(p)[0].name == best
    monkeypatch.setenv("QSDPA_ISA", "bogus")
    with pytest.raises(ValueError, match="valid names"):
        _dispatch._choose(p)
    for param in _unrunnable():
        monkeypatch.setenv("QSDPA_ISA", param.values[0])
        with pytest.raises(qsdpa.VariantUnavailableError):
            _dispatch._choose(p)


def test_show_runtime_names_the_openmp_runtime(capsys):
    """The report names the OpenMP runtime the process has mapped: the kernels' (after a variant
    has been loaded), wherever it came from (torch's wheel ships its own libgomp.so.1)."""
    _dispatch.load_variant(_dispatch.get_isa())  # first, so the report and `found` see the same maps
    qsdpa.show_runtime()
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("OpenMP runtime in this process: "))
    found = _show.openmp_runtimes()
    if found is None:
        assert line.endswith("n/a (no /proc/self/maps)")
        return
    if _dispatch.probe().openmp:  # kernels built with OpenMP: its runtime is mapped now
        assert found and all(os.path.basename(p).startswith(("libgomp", "libomp", "libiomp5")) for p in found)
        assert all(p in line for p in found)


def test_show_runtime_prints_report(capsys):
    qsdpa.show_runtime()
    out = capsys.readouterr().out
    for needle in ("qsdpa ", "python ", "cpu: ", "native check", "py-cpuinfo", "variants for", "QSDPA_ISA", "threads:",
                   "decode prefetch", "prefill int8 Q.K^T: ", "quantized_sdpa calls so far: "):
        assert needle in out
