"""qsdpa for PyTorch: the ``qsdpa::custom_quantized_sdpa`` custom op and a swap for ExecuTorch's op.

``import qsdpa.torch`` (needs torch; ``import qsdpa`` alone never imports it) registers, with
``torch.library``:

- ``torch.ops.qsdpa.custom_quantized_sdpa``: the schema of ExecuTorch's
  ``llama::custom_quantized_sdpa`` argument for argument (names, order, defaults, fp32 result),
  including ExecuTorch's spelling ``drpout_p``, so a graph node calling one can call the other;
- ``torch.ops.qsdpa.custom_quantized_sdpa.out``: the same with ``*, Tensor(a!) out``;
- fake (meta) kernels for both, so ``torch.compile`` and ``torch.export`` trace through them.

The CPU kernels view every tensor as a numpy array sharing its memory (``Tensor.numpy()`` on a CPU
tensor copies nothing) and the qsdpa kernel writes the result straight into the output tensor, so a
contiguous input is never copied. Non-contiguous inputs are copied once, as in ``qsdpa.quantized_sdpa``;
invalid ones raise its ``TypeError``/``ValueError`` naming the argument, before anything is written.
The kernels use ``qsdpa.set_num_threads`` (qsdpa's own OpenMP threads), not ``torch.set_num_threads``.
There is no gradient: backpropagating through the op raises (it is an inference op).

Swapping a model over from ExecuTorch's op::

    import qsdpa.torch
    ep = torch.export.export(model, example_inputs)     # model calls torch.ops.llama.custom_quantized_sdpa
    qsdpa.torch.replace_executorch_ops(ep)              # now it calls torch.ops.qsdpa.custom_quantized_sdpa
    out = ep.module()(*inputs)

    qsdpa.torch.replace_executorch_ops(eager_model)     # an eager model: its forward is redirected
"""
from __future__ import annotations

import functools
from typing import ContextManager, Optional, TypeVar

import torch
from torch.overrides import TorchFunctionMode

from . import _attention, _interop

__all__ = ["custom_quantized_sdpa", "executorch_ops_replaced", "replace_executorch_ops", "SCHEMA", "SCHEMA_OUT"]

# ExecuTorch 1.5.1's llama::custom_quantized_sdpa, read from
# torch.ops.llama.custom_quantized_sdpa.default._schema (tests compare the two when ExecuTorch is there).
_ARGS = ("Tensor query, Tensor key, Tensor value, SymInt start_pos, Tensor? attn_mask=None, float drpout_p=0., "
         "bool is_causal=False, float? scale=None, Tensor? q_zero_points=None, Tensor? q_scales=None, "
         "Tensor? k_zero_points=None, Tensor? k_scales=None, Tensor? v_zero_points=None, Tensor? v_scales=None, "
         "bool is_seq_at_dim_2=False")
SCHEMA = f"custom_quantized_sdpa({_ARGS}) -> Tensor"
SCHEMA_OUT = f"custom_quantized_sdpa.out({_ARGS}, *, Tensor(a!) out) -> Tensor(a!)"

_TENSOR_ARGS = ("query", "key", "value", "attn_mask", "q_zero_points", "q_scales", "k_zero_points", "k_scales",
                "v_zero_points", "v_scales")

# Kept for the life of the process: dropping a torch.library.Library deregisters its ops.
_lib = torch.library.Library("qsdpa", "DEF")
_lib.define(SCHEMA)
_lib.define(SCHEMA_OUT)


def _into(out: torch.Tensor, query, key, value, start_pos, attn_mask, drpout_p, is_causal, scale, q_zero_points,
          q_scales, k_zero_points, k_scales, v_zero_points, v_scales, is_seq_at_dim_2) -> None:
    """Run qsdpa on numpy views of the tensors, writing into ``out``'s memory."""
    tensors = dict(query=query, key=key, value=value, attn_mask=attn_mask, q_zero_points=q_zero_points,
                   q_scales=q_scales, k_zero_points=k_zero_points, k_scales=k_scales, v_zero_points=v_zero_points,
                   v_scales=v_scales)
    # detach: the dispatcher calls these kernels below autograd, where .numpy() would refuse a
    # tensor that requires grad.
    arrays = {name: (None if t is None else _interop.torch_to_numpy(name, t, detach=True))
              for name, t in tensors.items()}
    _quantized_sdpa(arrays["query"], arrays["key"], arrays["value"], start_pos, arrays["attn_mask"], drpout_p,
                    is_causal, scale, arrays["q_zero_points"], arrays["q_scales"], arrays["k_zero_points"],
                    arrays["k_scales"], arrays["v_zero_points"], arrays["v_scales"], is_seq_at_dim_2,
                    out=_interop.torch_to_numpy("out", out, detach=True))


_quantized_sdpa = _attention.quantized_sdpa  # module-level, so a test can watch what the kernel receives


@torch.library.impl(_lib, "custom_quantized_sdpa", "CPU")
def _cpu(query, key, value, start_pos, attn_mask=None, drpout_p=0.0, is_causal=False, scale=None,
         q_zero_points=None, q_scales=None, k_zero_points=None, k_scales=None, v_zero_points=None, v_scales=None,
         is_seq_at_dim_2=False):
    out = torch.empty(query.shape, dtype=torch.float32)
    _into(out, query, key, value, start_pos, attn_mask, drpout_p, is_causal, scale, q_zero_points, q_scales,
          k_zero_points, k_scales, v_zero_points, v_scales, is_seq_at_dim_2)
    return out


@torch.library.impl(_lib, "custom_quantized_sdpa.out", "CPU")
def _cpu_out(query, key, value, start_pos, attn_mask=None, drpout_p=0.0, is_causal=False, scale=None,
             q_zero_points=None, q_scales=None, k_zero_points=None, k_scales=None, v_zero_points=None,
             v_scales=None, is_seq_at_dim_2=False, *, out):
    _into(out, query, key, value, start_pos, attn_mask, drpout_p, is_causal, scale, q_zero_points, q_scales,
          k_zero_points, k_scales, v_zero_points, v_scales, is_seq_at_dim_2)
    return out


def _check_fake(tensors, out=None) -> None:
    # What can be known from shapes and devices alone; the values are checked when the real kernel runs.
    query = tensors["query"]
    if query.dim() != 4:
        raise ValueError(f"query must be 4-D, got {query.dim()}-D")
    for name in _TENSOR_ARGS:
        t = tensors[name]
        if t is not None and t.device != query.device:
            raise ValueError(f"{name} is on {t.device} but query is on {query.device}: all must be CPU tensors")
    if out is not None and (out.dtype != torch.float32 or tuple(out.shape) != tuple(query.shape)):
        raise ValueError(f"out must be float32 shaped like query {tuple(query.shape)}, "
                         f"got {out.dtype} {tuple(out.shape)}")


@torch.library.register_fake("qsdpa::custom_quantized_sdpa", lib=_lib)
def _fake(query, key, value, start_pos, attn_mask=None, drpout_p=0.0, is_causal=False, scale=None,
          q_zero_points=None, q_scales=None, k_zero_points=None, k_scales=None, v_zero_points=None, v_scales=None,
          is_seq_at_dim_2=False):
    _check_fake(locals())
    return query.new_empty(query.shape, dtype=torch.float32)


@torch.library.register_fake("qsdpa::custom_quantized_sdpa.out", lib=_lib)
def _fake_out(query, key, value, start_pos, attn_mask=None, drpout_p=0.0, is_causal=False, scale=None,
              q_zero_points=None, q_scales=None, k_zero_points=None, k_scales=None, v_zero_points=None,
              v_scales=None, is_seq_at_dim_2=False, *, out):
    _check_fake(locals(), out)
    return out


def _no_backward(ctx, grad):
    # Registered so that backpropagating through the op fails loudly; without it torch only warns
    # and treats the op as if it had no effect on the gradient.
    raise RuntimeError("qsdpa::custom_quantized_sdpa has no gradient: it is an inference op")


torch.library.register_autograd("qsdpa::custom_quantized_sdpa", _no_backward, lib=_lib)


def custom_quantized_sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, start_pos: int,
                          attn_mask: Optional[torch.Tensor] = None, drpout_p: float = 0.0, is_causal: bool = False,
                          scale: Optional[float] = None, q_zero_points: Optional[torch.Tensor] = None,
                          q_scales: Optional[torch.Tensor] = None, k_zero_points: Optional[torch.Tensor] = None,
                          k_scales: Optional[torch.Tensor] = None, v_zero_points: Optional[torch.Tensor] = None,
                          v_scales: Optional[torch.Tensor] = None, is_seq_at_dim_2: bool = False, *,
                          out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``torch.ops.qsdpa.custom_quantized_sdpa`` (or its ``.out`` overload when ``out`` is given).

    Arguments as ``qsdpa.quantized_sdpa`` and ExecuTorch's ``llama::custom_quantized_sdpa``, as CPU
    tensors: ``query`` int8 ``[B, S_q, H_q, D]`` with ``q_scales`` float32 / ``q_zero_points`` int8
    ``[B, S_q, H_q, 1]``, or float32 without them; ``key``/``value`` int8 ``[B, S_kv, H_kv, D]`` with
    ``k_/v_scales`` float32 and ``k_/v_zero_points`` int8 ``[B, S_kv, H_kv, 1]`` (``[B, H, S, D]``
    layouts with ``is_seq_at_dim_2=True``). Returns float32 shaped like ``query``.
    """
    args = (query, key, value, start_pos, attn_mask, drpout_p, is_causal, scale, q_zero_points, q_scales,
            k_zero_points, k_scales, v_zero_points, v_scales, is_seq_at_dim_2)
    if out is None:
        return torch.ops.qsdpa.custom_quantized_sdpa.default(*args)
    return torch.ops.qsdpa.custom_quantized_sdpa.out(*args, out=out)


_Graph = TypeVar("_Graph")


def _qsdpa_overload(target):
    """The qsdpa op standing in for ``target`` if it is ExecuTorch's custom_quantized_sdpa, else None."""
    packet = torch.ops.qsdpa.custom_quantized_sdpa
    if isinstance(target, torch._ops.OpOverload):
        if target.namespace == "llama" and target._schema.name == "llama::custom_quantized_sdpa":
            return getattr(packet, target._overloadname)
    elif isinstance(target, torch._ops.OpOverloadPacket):
        if target._qualified_op_name == "llama::custom_quantized_sdpa":
            return packet
    return None


def _rewrite(gm: torch.fx.GraphModule) -> int:
    replaced = 0
    for node in gm.graph.nodes:
        if node.op == "call_function":
            ours = _qsdpa_overload(node.target)
            if ours is not None:
                node.target = ours  # same schema, so args and kwargs (even "drpout_p") carry over as they are
                replaced += 1
    if replaced:
        gm.graph.lint()
        gm.recompile()
    return replaced


class _RedirectExecuTorchOps(TorchFunctionMode):
    """While active, every call of ExecuTorch's custom_quantized_sdpa runs qsdpa's instead (torch
    function modes see custom-op calls before dispatch, so ExecuTorch's kernel never runs)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        ours = _qsdpa_overload(func)
        return (func if ours is None else ours)(*args, **(kwargs or {}))


def executorch_ops_replaced() -> ContextManager[None]:
    """A context in which eager calls of ``torch.ops.llama.custom_quantized_sdpa`` (either overload)
    run ``qsdpa::custom_quantized_sdpa``: ``with qsdpa.torch.executorch_ops_replaced(): model(x)``.

    It is a ``TorchFunctionMode``, so every torch call made inside pays a small interception cost
    (about a microsecond); rewriting an exported graph with ``replace_executorch_ops`` costs nothing
    per call.
    """
    return _RedirectExecuTorchOps()


def replace_executorch_ops(model: _Graph) -> _Graph:
    """Make ``model`` call ``qsdpa::custom_quantized_sdpa`` wherever it calls ExecuTorch's
    ``llama::custom_quantized_sdpa`` (either overload); in place, and returns ``model``.

    - ``torch.export.ExportedProgram``, ``torch.fx.GraphModule``: the graph nodes are retargeted (the two
      ops share a schema, so their arguments carry over unchanged); no per-call cost.
    - any other ``nn.Module``: the GraphModules inside it are rewritten; if it holds none (an eager
      model), its ``forward`` is wrapped to run under ``executorch_ops_replaced()``.

    ExecuTorch's library need not stay loaded for the rewritten model to run.
    """
    if isinstance(model, torch.export.ExportedProgram):
        gms = [m for m in model.graph_module.modules() if isinstance(m, torch.fx.GraphModule)]
    elif isinstance(model, torch.nn.Module):
        gms = [m for m in model.modules() if isinstance(m, torch.fx.GraphModule)]
        if not gms and not getattr(model, "_qsdpa_redirected", False):
            _redirect_forward(model)
    else:
        raise TypeError("model must be a torch.export.ExportedProgram or a torch.nn.Module (a GraphModule or "
                        f"an eager model), got {type(model).__name__}")
    for gm in gms:
        _rewrite(gm)
    return model


def _redirect_forward(module: torch.nn.Module) -> None:
    forward = module.forward

    @functools.wraps(forward)
    def forward_on_qsdpa(*args, **kwargs):
        with _RedirectExecuTorchOps():
            return forward(*args, **kwargs)

    module.forward = forward_on_qsdpa  # an instance attribute: nn.Module.__call__ finds it first
    module._qsdpa_redirected = True
