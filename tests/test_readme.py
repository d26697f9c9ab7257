"""The README's Python examples run as written (a new user copies them first)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.S)


def _block(first_line: str) -> str:
    found = [b for b in BLOCKS if b.startswith(first_line)]
    assert len(found) == 1, f"README has {len(found)} python blocks starting with {first_line!r}"
    return found[0]


def test_numpy_and_cache_examples_run(capsys):
    scope = {}
    exec(_block("import numpy as np, qsdpa\n\nB, S_max"), scope)
    assert scope["out"].shape == scope["out2"].shape == (1, 1, 32, 128)
    exec(_block("import numpy as np, qsdpa\n\nrng"), {})
    assert capsys.readouterr().out.split()[:3] == ["1016", "8.3125", "MiB"]


def test_torch_example_runs():
    pytest.importorskip("torch")
    scope = {}
    exec(_block("import numpy as np, qsdpa\n\nB, S_max"), scope)  # the torch example continues the numpy one
    exec(_block("import torch, qsdpa, qsdpa.torch"), scope)
    assert tuple(scope["out"].shape) == (1, 1, 32, 128) and type(scope["out"]).__module__ == "torch"
