"""The generator: committed generated/ is fresh, --check catches staleness and orphans, rendering is
strict and deterministic, and the registry's promises hold."""
from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
if not (REPO / "codegen" / "registry.py").exists():
    pytest.skip("codegen/ is not beside the tests (installed-package run)", allow_module_level=True)
jinja2 = pytest.importorskip("jinja2")
sys.path.insert(0, str(REPO))
from codegen import registry, render  # noqa: E402


def _run_check(root: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "codegen", "--check"], cwd=root, capture_output=True, text=True)


@pytest.fixture
def repo_copy(tmp_path):
    """The generator's inputs and outputs in a scratch tree, so tests can break them."""
    for part in ("codegen", "templates", "generated"):
        shutil.copytree(REPO / part, tmp_path / part)
    (tmp_path / "qsdpa").mkdir()
    shutil.copy(REPO / "qsdpa" / "_variants.py", tmp_path / "qsdpa" / "_variants.py")
    return tmp_path


def test_committed_generated_files_are_fresh():
    result = _run_check(REPO)
    assert result.returncode == 0, result.stdout + result.stderr


def test_check_fails_with_a_diff_when_a_template_changes(repo_copy):
    template = repo_copy / "templates" / "dequant_gemm.cpp.j2"
    template.write_text(template.read_text().replace("// {{ kernel.doc }}", "// {{ kernel.doc }} (edited)"))
    result = _run_check(repo_copy)
    assert result.returncode != 0
    assert "(edited)" in result.stdout and "+++" in result.stdout, result.stdout[-2000:]


def test_check_fails_on_orphans_and_hand_edits(repo_copy):
    (repo_copy / "generated" / "avx2" / "stray-avx2.cpp").write_text("// not from the registry\n")
    result = _run_check(repo_copy)
    assert result.returncode != 0 and "orphan: generated/avx2/stray-avx2.cpp" in result.stdout
    (repo_copy / "generated" / "avx2" / "stray-avx2.cpp").unlink()
    edited = repo_copy / "generated" / "scalar" / "qk-gemm-s8s8-scalar.cpp"
    edited.write_text(edited.read_text() + "// hand edit\n")
    assert _run_check(repo_copy).returncode != 0


def test_regenerating_restores_a_fresh_tree(repo_copy):
    (repo_copy / "generated" / "neon" / "simd-neon.h").unlink()
    assert _run_check(repo_copy).returncode != 0
    subprocess.run([sys.executable, "-m", "codegen"], cwd=repo_copy, check=True, capture_output=True)
    assert _run_check(repo_copy).returncode == 0


def test_rendering_is_deterministic_and_headed():
    first, second = render.render_cpp(), render.render_cpp()
    assert first == second
    for rel, text in first.items():
        head = text.splitlines()[0]
        assert "Generated from" in head and "do not edit" in head, rel
        if rel.endswith((".cpp", ".h")):
            assert "templates/" in head, rel


def test_templates_are_strict():
    env = render.environment()
    with pytest.raises(jinja2.UndefinedError):
        env.from_string("{{ missing }}").render()
    isa = registry.isa_by_name("avx2")
    kernel = registry.KERNELS[0]
    with pytest.raises(jinja2.TemplateError, match="tile out of range"):
        env.get_template(kernel.template).render(isa=isa, v=isa.vocab, kernels=registry.KERNELS, kernel=kernel,
                                                 prelude="x.h", MR=99, NR=1)


def test_gemm_qk_is_refused_without_the_vnni_dot():
    """The GEMM-form Q.K^T's key panels are laid out for vpdpbusd: a registry entry asking for it
    on another dot scheme fails to render (and registry.validate() refuses it first)."""
    import dataclasses
    env = render.environment()
    base = registry.isa_by_name("avx512")
    isa = dataclasses.replace(base, vocab=dict(base.vocab, gemm_qk=True))
    kernel = next(k for k in registry.KERNELS if k.name == "flash_attention")
    ctx = dict(isa=isa, v=isa.vocab, kernels=registry.KERNELS, prelude=registry.prelude_file(isa))
    with pytest.raises(jinja2.TemplateError, match="gemm_qk"):
        env.get_template(kernel.template).render(kernel=kernel, **isa.tiles[kernel.name], **ctx)
    assert [i.name for i in registry.ISAS if i.vocab["gemm_qk"]] == ["avx512_vnni"]


def test_registry_names_and_flags():
    for isa in registry.ISAS:
        assert "-march=native" not in isa.cflags
        for kernel in registry.KERNELS:
            path = registry.kernel_file(isa, kernel)
            assert isa.name.replace("_", "-") in path and path.startswith(isa.name + "/")
            text = render.render_cpp()[path]
            assert f"{kernel.symbol}__{isa.name}(" in text, "symbols carry the ISA after a double underscore"
    assert registry.isa_by_name("scalar").cflags == ()


def test_package_table_matches_registry():
    import importlib.util
    spec = importlib.util.spec_from_file_location("variants_table", REPO / "qsdpa" / "_variants.py")
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    assert [v.name for v in table.VARIANTS] == [i.name for i in registry.ISAS]
    assert table.KERNELS == tuple(k.name for k in registry.KERNELS)
    for v in table.VARIANTS:
        isa = registry.isa_by_name(v.name)
        assert (v.features, v.cflags, v.rank, v.module) == (isa.features, isa.cflags, isa.rank, isa.module)


def test_cmake_lists_come_from_the_registry():
    cmake = render.render_cmake()
    for isa in registry.ISAS:
        for src in registry.sources_for(isa):
            assert f"${{QSDPA_GEN_DIR}}/{src}" in cmake
        assert f"set(QSDPA_FLAGS_{isa.name} {' '.join(isa.cflags)})" in cmake
