"""qsdpa.torch: the torch.library op qsdpa::custom_quantized_sdpa, its fake kernel, torch.compile and
torch.export through it, zero-copy tensor passing, and the swap for ExecuTorch's op.

Skipped where torch is not installed (CI's emulated runs). The op calls the dispatched variant;
every variant's kernel is tested directly in test_attention.py, so here it is the layer around the
kernel that is under test, and "identical" means bit for bit against qsdpa.quantized_sdpa.
"""
from __future__ import annotations

import numpy as np
import pytest

import qsdpa
from attention_reference import make_case
from executorch_ops import load_llama_ops

torch = pytest.importorskip("torch")
qt = pytest.importorskip("qsdpa.torch")

OP = torch.ops.qsdpa.custom_quantized_sdpa


def _case(seq_dim2=False, float_query=False, shape=(1, 8, 2, 3, 40, 32), seed=0):
    return make_case(np.random.default_rng(seed), *shape, float_query=float_query, seq_dim2=seq_dim2)


def _op_args(case, start, causal, mask=None):
    """The op's positional arguments as torch tensors sharing the case's memory."""
    t = (lambda a: None if a is None else torch.from_numpy(a))
    return (t(case.query), t(case.key), t(case.value), start, t(mask), 0.0, causal, None, t(case.q_zero_points),
            t(case.q_scales), t(case.k_zero_points), t(case.k_scales), t(case.v_zero_points), t(case.v_scales),
            case.seq_dim2)


def _numpy(case, start, causal, mask=None):
    return qsdpa.quantized_sdpa(case.query, case.key, case.value, start, attn_mask=mask, is_causal=causal,
                                **case.kwargs())


def test_schema_is_executorchs_argument_for_argument():
    assert str(OP.default._schema) == "qsdpa::" + qt.SCHEMA
    assert str(OP.out._schema) == "qsdpa::" + qt.SCHEMA_OUT
    llama = load_llama_ops(torch)
    for overload in ("default", "out"):
        ours, theirs = getattr(OP, overload)._schema, getattr(llama.custom_quantized_sdpa, overload)._schema
        assert ours.overload_name == theirs.overload_name
        assert str(ours).split("::", 1)[1] == str(theirs).split("::", 1)[1]


@pytest.mark.parametrize("seq_dim2", [False, True], ids=["bshd", "bhsd"])
@pytest.mark.parametrize("float_query", [False, True], ids=["q8", "qf32"])
@pytest.mark.parametrize("causal,mask", [(True, False), (False, False), (False, True)], ids=["causal", "open", "mask"])
def test_op_is_identical_to_quantized_sdpa(seq_dim2, float_query, causal, mask):
    case = _case(seq_dim2, float_query)
    m = np.random.default_rng(1).standard_normal((3, 40)).astype(np.float32) if mask else None
    expected = _numpy(case, 30, causal, m)
    got = OP(*_op_args(case, 30, causal, m))
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    np.testing.assert_array_equal(got.numpy(), expected)
    out = torch.full(case.query.shape, 7.0)
    returned = OP.out(*_op_args(case, 30, causal, m), out=out)
    assert returned is out
    np.testing.assert_array_equal(out.numpy(), expected)
    np.testing.assert_array_equal(qt.custom_quantized_sdpa(*_op_args(case, 30, causal, m)).numpy(), expected)


def test_tensors_reach_the_kernel_without_a_copy(monkeypatch):
    """Every array the kernel gets starts at its tensor's data pointer, and the result is written
    straight into the output tensor (the op's own, or the caller's with .out)."""
    seen = {}

    def spy(*args, out):
        names = ("query", "key", "value", None, None, None, None, None, "q_zero_points", "q_scales", "k_zero_points",
                 "k_scales", "v_zero_points", "v_scales")
        seen.update({n: a.ctypes.data for n, a in zip(names, args) if n is not None})
        seen["out"] = out.ctypes.data
        return qsdpa.quantized_sdpa(*args, out=out)

    monkeypatch.setattr(qt, "_quantized_sdpa", spy)
    case = _case()
    args = _op_args(case, 30, True)
    result = OP(*args)
    tensors = dict(zip(("query", "key", "value"), args[:3]))
    tensors.update(zip(("q_zero_points", "q_scales", "k_zero_points", "k_scales", "v_zero_points", "v_scales"),
                       args[8:14]))
    assert seen == {**{n: t.data_ptr() for n, t in tensors.items()}, "out": result.data_ptr()}
    out = torch.empty(case.query.shape)
    OP.out(*args, out=out)
    assert seen["out"] == out.data_ptr()


def test_bad_input_names_the_argument_and_leaves_out_untouched():
    case = _case()
    args = list(_op_args(case, 30, True))
    out = torch.full(case.query.shape, 5.0)
    bad = list(args)
    bad[3] = 38  # start_pos + S_q past the cache
    with pytest.raises(ValueError, match="start_pos"):
        OP.out(*bad, out=out)
    bad = list(args)
    bad[11] = args[11].double()  # k_scales float64
    with pytest.raises(TypeError, match="k_scales"):
        OP.out(*bad, out=out)
    bad = list(args)
    bad[1] = args[1].to("meta")  # the dispatcher then picks the fake kernel, which checks devices
    with pytest.raises(ValueError, match="key is on meta"):
        OP.out(*bad, out=out)
    with pytest.raises(ValueError, match="out"):
        OP.out(*args, out=torch.empty(case.query.shape)[..., :-1])
    with pytest.raises(TypeError, match="out"):
        OP.out(*args, out=torch.empty(case.query.shape, dtype=torch.float64))
    assert (out == 5.0).all()


def test_backward_raises():
    case = _case(float_query=True)
    args = list(_op_args(case, 30, True))
    args[0] = args[0].clone().requires_grad_(True)
    result = OP(*args)
    np.testing.assert_array_equal(result.detach().numpy(), _numpy(case, 30, True))
    with pytest.raises(RuntimeError, match="no gradient"):
        result.sum().backward()


def test_fake_tensor_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    case = _case(seq_dim2=True)
    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in _op_args(case, 30, True)]
        result = OP(*fake)
        out = torch.empty(case.query.shape)
        returned = OP.out(*fake, out=out)
    assert tuple(result.shape) == case.query.shape and result.dtype == torch.float32
    assert returned.shape == out.shape


class _Attention(torch.nn.Module):
    """A float-query attention step over an int8 cache: projection, the op, output projection."""

    def __init__(self, dim, heads, head_dim, op=OP):
        super().__init__()
        self.heads, self.head_dim, self.op = heads, head_dim, op
        self.wq = torch.nn.Linear(dim, heads * head_dim, bias=False)
        self.wo = torch.nn.Linear(heads * head_dim, dim, bias=False)

    def forward(self, x, k8, k_scales, k_zps, v8, v_scales, v_zps, start_pos: int):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.heads, self.head_dim)
        y = self.op(q, k8, v8, start_pos, None, 0.0, True, None, None, None, k_zps, k_scales, v_zps, v_scales)
        return self.wo(y.reshape(b, s, -1))


def test_torch_compile_matches_eager():
    torch.manual_seed(0)
    case = _case(shape=(1, 4, 2, 2, 64, 32))
    cache = [torch.from_numpy(a) for a in (case.key, case.k_scales, case.k_zero_points, case.value, case.v_scales,
                                           case.v_zero_points)]
    model = _Attention(16, 4, 32).eval()
    x = torch.randn(1, 2, 16)
    compiled = torch.compile(model, fullgraph=True)
    with torch.no_grad():
        # A decode loop's start_pos changes every call: after one recompile it is a SymInt in the fake kernel.
        for start_pos in (40, 41, 42):
            torch.testing.assert_close(compiled(x, *cache, start_pos), model(x, *cache, start_pos))


def test_torch_export_traces_the_op():
    case = _case(shape=(1, 4, 2, 2, 64, 32))
    cache = tuple(torch.from_numpy(a) for a in (case.key, case.k_scales, case.k_zero_points, case.value,
                                                case.v_scales, case.v_zero_points))
    model = _Attention(16, 4, 32).eval()
    x = torch.randn(1, 2, 16)
    ep = torch.export.export(model, (x, *cache, 40))
    assert OP.default in _call_targets(ep.graph)
    node = next(n for n in ep.graph.nodes if n.target is OP.default)
    assert tuple(node.meta["val"].shape) == (1, 2, 4, 32) and node.meta["val"].dtype == torch.float32
    with torch.no_grad():
        torch.testing.assert_close(ep.module()(x, *cache, 40), model(x, *cache, 40), rtol=0, atol=0)


@pytest.mark.parametrize("seq_dim2", [False, True], ids=["bshd", "bhsd"])
def test_op_matches_executorchs_op(seq_dim2):
    llama = load_llama_ops(torch)
    case = _case(seq_dim2, shape=(1, 8, 2, 3, 80, 64))
    args = _op_args(case, 70, True)
    theirs = llama.custom_quantized_sdpa(*args)
    ours = OP(*args)
    vmax = float(np.abs(qsdpa.dequantize_per_token(case.value, case.v_scales, case.v_zero_points)).max())
    torch.testing.assert_close(ours, theirs, rtol=3e-5, atol=3e-5 * vmax)


def _llama_model():
    class Model(torch.nn.Module):
        def forward(self, q8, q_scales, q_zps, k8, k_scales, k_zps, v8, v_scales, v_zps):
            y = torch.ops.llama.custom_quantized_sdpa(q8, k8, v8, 30, None, 0.0, True, None, q_zps, q_scales, k_zps,
                                                      k_scales, v_zps, v_scales, False)
            return y * 2.0

    case = _case()
    inputs = tuple(torch.from_numpy(a) for a in (case.query, case.q_scales, case.q_zero_points, case.key,
                                                 case.k_scales, case.k_zero_points, case.value, case.v_scales,
                                                 case.v_zero_points))
    return Model(), inputs, case


def _call_targets(graph):
    return [n.target for n in graph.nodes if n.op == "call_function"]


def test_replace_executorch_ops_in_an_exported_program():
    llama = load_llama_ops(torch, meta=True)
    model, inputs, case = _llama_model()
    ep = torch.export.export(model, inputs)
    assert llama.custom_quantized_sdpa.default in _call_targets(ep.graph)
    theirs = ep.module()(*inputs)
    assert qt.replace_executorch_ops(ep) is ep
    targets = _call_targets(ep.graph)
    assert OP.default in targets and llama.custom_quantized_sdpa.default not in targets
    ours = ep.module()(*inputs)
    np.testing.assert_array_equal(ours.numpy(), 2.0 * _numpy(case, 30, True))
    vmax = float(np.abs(qsdpa.dequantize_per_token(case.value, case.v_scales, case.v_zero_points)).max())
    torch.testing.assert_close(ours, theirs, rtol=3e-5, atol=2 * 3e-5 * vmax)


def test_replace_executorch_ops_in_a_graph_module():
    llama = load_llama_ops(torch)
    model, inputs, case = _llama_model()
    gm = torch.fx.symbolic_trace(model)
    assert llama.custom_quantized_sdpa in _call_targets(gm.graph)
    wrapper = torch.nn.Sequential(gm)  # a module holding graphs is rewritten too
    assert qt.replace_executorch_ops(wrapper) is wrapper
    assert OP in _call_targets(gm.graph) and llama.custom_quantized_sdpa not in _call_targets(gm.graph)
    np.testing.assert_array_equal(gm(*inputs).numpy(), 2.0 * _numpy(case, 30, True))


def test_replace_executorch_ops_in_an_eager_module():
    """An eager model's forward is redirected: ExecuTorch's kernel never runs (bit-identical to ours)."""
    load_llama_ops(torch)
    model, inputs, case = _llama_model()
    expected = 2.0 * _numpy(case, 30, True)
    with qt.executorch_ops_replaced():
        np.testing.assert_array_equal(model(*inputs).numpy(), expected)
    assert not np.array_equal(model(*inputs).numpy(), expected)  # outside the context: ExecuTorch's own kernel
    assert qt.replace_executorch_ops(model) is model
    assert qt.replace_executorch_ops(model) is model  # a second call does not wrap twice
    np.testing.assert_array_equal(model(*inputs).numpy(), expected)


def test_replace_executorch_ops_rejects_what_it_cannot_rewrite():
    with pytest.raises(TypeError, match="model must be"):
        qt.replace_executorch_ops(lambda x: x)
