"""Render every generated file from the registry, deterministically, into memory."""
from __future__ import annotations

import pathlib
from typing import Dict

import jinja2

from . import registry

ROOT = pathlib.Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "templates"
GENERATED = ROOT / "generated"
PACKAGE_TABLE = ROOT / "qsdpa" / "_variants.py"


def _fail(message: str):
    raise jinja2.TemplateError(message)


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    # Templates assert their parameter space with {{ raise("...") }}, like XNNPACK's $assert.
    env.globals["raise"] = _fail
    return env


def _header(template: str, isa: registry.Isa, comment: str = "//") -> str:
    return (f"{comment} Generated from templates/{template} for ISA '{isa.name}' by `python -m codegen`"
            f" — do not edit.\n")


def render_cpp() -> Dict[str, str]:
    """Map of path relative to generated/ -> text, for every ISA of every architecture."""
    env = environment()
    out: Dict[str, str] = {}
    for isa in registry.ISAS:
        ctx = dict(isa=isa, v=isa.vocab, kernels=registry.KERNELS, prelude=registry.prelude_file(isa))
        out[registry.prelude_file(isa)] = (
            _header(registry.PRELUDE_TEMPLATE, isa) + env.get_template(registry.PRELUDE_TEMPLATE).render(**ctx))
        for kernel in registry.KERNELS:
            text = env.get_template(kernel.template).render(kernel=kernel, **isa.tiles[kernel.name], **ctx)
            out[registry.kernel_file(isa, kernel)] = _header(kernel.template, isa) + text
        out[registry.module_file(isa)] = (
            _header(registry.MODULE_TEMPLATE, isa) + env.get_template(registry.MODULE_TEMPLATE).render(**ctx))
    out["variants.cmake"] = render_cmake()
    return dict(sorted(out.items()))


def render_cmake() -> str:
    """Per-architecture source lists and flags, included by CMakeLists.txt."""
    lines = ["# Generated from codegen/registry.py by `python -m codegen` — do not edit.", ""]
    for arch in registry.ARCHES:
        names = [i.name for i in registry.isas_for_arch(arch)]
        lines.append(f"set(QSDPA_VARIANTS_{arch} {' '.join(names)})")
    lines.append(f"set(QSDPA_COMMON_FLAGS {' '.join(registry.COMMON_CFLAGS)})")
    lines.append("")
    for isa in registry.ISAS:
        key = isa.name
        srcs = " ".join(f"${{QSDPA_GEN_DIR}}/{s}" for s in registry.sources_for(isa))
        extra = " ".join(f"${{PROJECT_SOURCE_DIR}}/{s}" for s in registry.extra_sources_for(isa))
        lines.append(f"set(QSDPA_SOURCES_{key} {srcs}{(' ' + extra) if extra else ''})")
        lines.append(f"set(QSDPA_HEADERS_{key} ${{QSDPA_GEN_DIR}}/{registry.prelude_file(isa)})")
        lines.append(f"set(QSDPA_FLAGS_{key} {' '.join(isa.cflags)})")
    return "\n".join(lines) + "\n"


def render_package_table() -> str:
    """qsdpa/_variants.py: the dispatch table, as plain data (the package never imports codegen)."""
    rows = []
    for isa in registry.ISAS:
        rows.append(
            "    Variant(name={!r}, arch={!r}, rank={}, module={!r}, features={!r}, cflags={!r}, macros={!r},\n"
            "            description={!r}),".format(
                isa.name, isa.arch, isa.rank, isa.module, tuple(isa.features), tuple(isa.cflags),
                tuple(isa.macros), isa.description))
    kernels = ", ".join(repr(k.name) for k in registry.KERNELS)
    return (
        "# Generated from codegen/registry.py by `python -m codegen` — do not edit.\n"
        '"""The dispatch table: every variant qsdpa knows, with what it needs from the CPU."""\n'
        "from typing import NamedTuple, Tuple\n\n\n"
        "class Variant(NamedTuple):\n"
        "    name: str\n    arch: str\n    rank: int\n    module: str\n    features: Tuple[str, ...]\n"
        "    cflags: Tuple[str, ...]\n    macros: Tuple[str, ...]\n    description: str\n\n\n"
        "VARIANTS: Tuple[Variant, ...] = (\n" + "\n".join(rows) + "\n)\n\n"
        f"KERNELS: Tuple[str, ...] = ({kernels},)\n"
    )
