"""Agreement with ExecuTorch's llama::custom_quantized_sdpa on the same inputs (when installed).

ExecuTorch is installed beside torch with `pip install --no-deps executorch==1.5.1` (see
../shared/peers.md; tests/executorch_ops.py loads it); without it these tests skip. ExecuTorch
writes 'No temp allocator provided' to stderr on every call; that is its noise, not ours.
"""
from __future__ import annotations

import numpy as np
import pytest

import qsdpa
from attention_reference import make_case
from executorch_ops import load_llama_ops

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def llama():
    return load_llama_ops(torch)


@pytest.mark.parametrize("shape,start,causal", [
    ((1, 32, 8, 1, 512, 128), 511, True),      # decode
    ((1, 8, 2, 37, 300, 64), 200, True),       # chunked prefill
    ((2, 4, 4, 5, 60, 32), 30, False),         # B > 1, non-causal
])
@pytest.mark.parametrize("seq_dim2", [False, True])
def test_matches_executorch(llama, shape, start, causal, seq_dim2):
    case = make_case(np.random.default_rng(list(shape) + [start]), *shape, seq_dim2=seq_dim2)
    t = torch.from_numpy
    theirs = llama.custom_quantized_sdpa(
        t(case.query), t(case.key), t(case.value), start, None, 0.0, causal, None, t(case.q_zero_points),
        t(case.q_scales), t(case.k_zero_points), t(case.k_scales), t(case.v_zero_points), t(case.v_scales),
        seq_dim2).numpy()
    ours = qsdpa.quantized_sdpa(case.query, case.key, case.value, start, is_causal=causal, **case.kwargs())
    vmax = float(np.abs(qsdpa.dequantize_per_token(case.value, case.v_scales, case.v_zero_points)).max())
    np.testing.assert_allclose(ours, theirs, rtol=3e-5, atol=3e-5 * vmax)
