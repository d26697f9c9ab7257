"""Find and import the SIMDe-emulated variant modules built by tests/emulated/build.py.

The modules keep their real names (_kernels_avx512, ...) so that PyInit_* matches, but they are
imported from the build directory as a private package (qsdpa_simde.<module>), never as
qsdpa.<module>: they cannot shadow or be mistaken for the native modules. Their test ids carry
"~simde" (e.g. "avx512~simde", or "avx512~simde-asan" for a sanitizer build): they test the
generated source's logic through portable intrinsics, not the native AVX-512 instructions.
Each loaded module also gets EMULATED = "simde <version>" (native modules have no such attribute),
e.g. for tests that compare whoami() macros with the registry: an emulated build has
__AVX512F__ == False by construction.
"""
from __future__ import annotations

import importlib
import json
import pathlib
import sys
import types
from typing import List, NamedTuple, Optional

PACKAGE = "qsdpa_simde"


class EmulatedVariant(NamedTuple):
    isa: str        # registry name, e.g. "avx512_vnni"
    module: str     # e.g. "_kernels_avx512_vnni"
    path: str       # the built extension module
    simde: str      # SIMDe version it was built with
    asan: bool      # built with -fsanitize=address,undefined

    @property
    def test_id(self) -> str:
        return f"{self.isa}~simde" + ("-asan" if self.asan else "")


def emulated_variants(directory: Optional[str]) -> List[EmulatedVariant]:
    """The variants in `directory` (an output dir of build.py); [] when directory is None or ''.

    A directory that is given but holds no build is an error, not an empty list, so that a CI job
    that forgot to build cannot pass by testing nothing.
    """
    if not directory:
        return []
    root = pathlib.Path(directory)
    manifest = root / "emulated.json"
    if not manifest.is_file():
        raise FileNotFoundError(f"{manifest} not found: run python tests/emulated/build.py {directory}")
    info = json.loads(manifest.read_text())
    out = []
    for isa, m in info["modules"].items():
        path = root / m["path"]
        if not path.is_file():
            raise FileNotFoundError(f"{path} listed in {manifest} but missing")
        out.append(EmulatedVariant(isa, m["module"], str(path), info["simde"], bool(info["asan"])))
    if not out:
        raise FileNotFoundError(f"{manifest} lists no modules")
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
