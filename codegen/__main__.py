"""python -m codegen [--check] [--out DIR]

Without options: rewrite generated/ and qsdpa/_variants.py (only files whose text changed), and
delete orphans.  --check: render into memory and fail with a unified diff when anything on disk is
stale, missing or orphaned.  --out DIR: render the C++ tree into DIR (the build does this, so that
editing a template and rebuilding picks the change up).
"""
from __future__ import annotations

import argparse
import difflib
import pathlib
import sys

from . import render


def _write_tree(root: pathlib.Path, files: dict, prune: bool) -> list:
    changed = []
    root.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        path = root / rel
        if not path.exists() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            changed.append(str(path))
    if prune:
        for path in sorted(root.rglob("*")):
            if path.is_file() and path.relative_to(root).as_posix() not in files:
                path.unlink()
                changed.append(f"removed {path}")
    return changed


def _diff(expected: str, path: pathlib.Path, label: str) -> str:
    actual = path.read_text() if path.exists() else ""
    if actual == expected:
        return ""
    return "".join(difflib.unified_diff(actual.splitlines(True), expected.splitlines(True),
                                        fromfile=f"{label} (on disk)", tofile=f"{label} (rendered)"))


def check() -> int:
    problems = []
    files = render.render_cpp()
    for rel, text in files.items():
        d = _diff(text, render.GENERATED / rel, f"generated/{rel}")
        if d:
            problems.append(d)
    if render.GENERATED.exists():
        for path in sorted(render.GENERATED.rglob("*")):
            rel = path.relative_to(render.GENERATED).as_posix()
            if path.is_file() and rel not in files:
                problems.append(f"orphan: generated/{rel} is not produced by the registry\n")
    d = _diff(render.render_package_table(), render.PACKAGE_TABLE, "qsdpa/_variants.py")
    if d:
        problems.append(d)
    if problems:
        sys.stdout.write("".join(problems))
        sys.stdout.write("\ncodegen --check: generated files are stale; run `python -m codegen` and commit.\n")
        return 1
    print(f"codegen --check: {len(files) + 1} generated files are fresh")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m codegen", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="fail with a diff if generated files are stale")
    ap.add_argument("--out", type=pathlib.Path, help="render the C++ tree here instead of generated/")
    args = ap.parse_args(argv)
    if args.check:
        return check()
    files = render.render_cpp()
    if args.out:
        _write_tree(args.out, files, prune=False)
        return 0
    changed = _write_tree(render.GENERATED, files, prune=True)
    table = render.render_package_table()
    if not render.PACKAGE_TABLE.exists() or render.PACKAGE_TABLE.read_text() != table:
        render.PACKAGE_TABLE.write_text(table)
        changed.append(str(render.PACKAGE_TABLE))
    for c in changed:
        print("wrote", c)
    print(f"codegen: {len(files) + 1} files, {len(changed)} changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
