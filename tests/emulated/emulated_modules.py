"""Find and import the SIMDe-emulated variant modules built by tests/emulated/build.py.

The modules keep their real names (_kernels_avx512, ...) so that PyInit_* matches, but they are
imported from the build directory as a private package (qsdpa_simde.<module>), never as
qsdpa.<module>: they cannot shadow or be mistaken for the native modules. Their test ids carry
"~simde" (e.g. "avx512~simde", "neon_dotprod~simde", or "avx512~simde-asan" for a sanitizer
build): they test the generated source's logic through portable intrinsics, not the native
AVX-512 or NEON instructions. Each loaded module also gets EMULATED = "simde <version>" (native
modules have no such attribute), e.g. for tests that compare whoami() macros with the registry:
an emulated build has __AVX512F__ / __ARM_NEON == False by construction.
"""
from __future__ import annotations

import importlib
import json
import os
import pathlib
import sys
import types
from typing import List, NamedTuple, Optional

PACKAGE = "qsdpa_simde"
# Optional: test only one emulated family of a build ("x86" = the AVX-512 variants, "neon"), e.g.
# to run them as separate CI suites from one build directory. Unset or empty: every family.
FAMILY_ENV = "QSDPA_TEST_EMULATED_FAMILY"


class EmulatedVariant(NamedTuple):
    isa: str        # registry name, e.g. "avx512_vnni"
    module: str     # e.g. "_kernels_avx512_vnni"
    path: str       # the built extension module
    simde: str      # SIMDe version it was built with
    asan: bool      # built with -fsanitize=address,undefined
    family: str     # "x86" (AVX-512 via simde_x86_shim.h) or "neon" (via simde_neon_shim.h)

    @property
    def test_id(self) -> str:
        return f"{self.isa}~simde" + ("-asan" if self.asan else "")


def selected_family() -> Optional[str]:
    family = os.environ.get(FAMILY_ENV) or None
    if family not in (None, "x86", "neon"):
        raise ValueError(f"{FAMILY_ENV}={family!r}: expected x86 or neon (or unset for both)")
    return family


def emulated_variants(directory: Optional[str]) -> List[EmulatedVariant]:
    """The variants in `directory` (an output dir of build.py); [] when directory is None or ''.
    With QSDPA_TEST_EMULATED_FAMILY set, only that family's.

    A directory that is given but holds no build (of the selected family) is an error, not an empty
    list, so that a CI job that forgot to build cannot pass by testing nothing.
    """
    if not directory:
        return []
    root = pathlib.Path(directory)
    manifest = root / "emulated.json"
    if not manifest.is_file():
        raise FileNotFoundError(f"{manifest} not found: run python tests/emulated/build.py {directory}")
    info = json.loads(manifest.read_text())
    family = selected_family()
    out = []
    for isa, m in info["modules"].items():
        if family and m["family"] != family:
            continue
        path = root / m["path"]
        if not path.is_file():
            raise FileNotFoundError(f"{path} listed in {manifest} but missing")
        out.append(EmulatedVariant(isa, m["module"], str(path), info["simde"], bool(info["asan"]), m["family"]))
    if not out:
        raise FileNotFoundError(f"{manifest} lists no modules" + (f" of family {family}" if family else ""))
    return out


def _package(directory: str):
    """The pseudo-package qsdpa_simde, whose __path__ is the build directory.

    The generated bindings import their sibling "<package>._kernels_scalar" at init (the scratch
    arena's owner), so the emulated modules must live in a package with that sibling: build.py puts
    a support _kernels_scalar next to them, and this package makes the directory importable as one.
    """
    directory = str(pathlib.Path(directory).resolve())
    pkg = sys.modules.get(PACKAGE)
    if pkg is None:
        pkg = types.ModuleType(PACKAGE, "SIMDe-emulated qsdpa variant modules (tests/emulated); not qsdpa.")
        pkg.__path__ = [directory]
        sys.modules[PACKAGE] = pkg
    elif list(pkg.__path__) != [directory]:
        raise ImportError(f"{PACKAGE} is already bound to {pkg.__path__}; one emulated build per process ({directory})")
    return pkg


def load_emulated(v: EmulatedVariant):
    """Import (once) and return the module of one emulated variant."""
    _package(str(pathlib.Path(v.path).parent))
    mod = importlib.import_module(f"{PACKAGE}.{v.module}")
    if pathlib.Path(mod.__file__).resolve() != pathlib.Path(v.path).resolve():
        raise ImportError(f"{PACKAGE}.{v.module} loaded from {mod.__file__}, expected {v.path}")
    if mod.ISA != v.isa:
        raise ImportError(f"{v.path} reports ISA {mod.ISA!r}, expected {v.isa!r}")
    mod.EMULATED = f"simde {v.simde}"
    return mod
