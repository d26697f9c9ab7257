"""The environment for a child interpreter that runs a script from this tree: it must import the
qsdpa under test. A script's sys.path starts at its own folder, so a tree that is importable but
not installed (the emulated CI runs: the cross-built aarch64 tree) is otherwise not on it."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict

import qsdpa


def child_env(**extra: str) -> Dict[str, str]:
    root = str(Path(qsdpa.__file__).resolve().parents[1])
    path = os.pathsep.join([root] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    return dict(os.environ, PYTHONPATH=path, **extra)
