"""Loading ExecuTorch's custom ops (llama::custom_quantized_sdpa) for the tests that compare with them.

ExecuTorch is installed beside torch with `pip install --no-deps executorch==1.5.1` (see
../shared/peers.md). Its AOT library is found through the executorch package itself, so it is found
from a venv with --system-site-packages too; without it the calling test skips.
"""
from __future__ import annotations

import importlib.util
import os

import pytest


def load_llama_ops(torch, *, meta: bool = False):
    """torch.ops.llama after loading ExecuTorch's kernels (and, with meta=True, its fake kernels,
    which torch.export needs); skips the test when ExecuTorch is not installed."""
    spec = importlib.util.find_spec("executorch")
    for base in (spec.submodule_search_locations or []) if spec is not None else []:
        so = os.path.join(base, "extension", "llm", "custom_ops", "libcustom_ops_aot_lib.so")
        if os.path.exists(so):
            torch.ops.load_library(so)
            if meta:
                import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  (registers the Meta kernels)
            return torch.ops.llama
    pytest.skip("executorch custom ops are not installed (pip install --no-deps executorch==1.5.1)")
