"""The op catalogue: operand and attribute checks, shape inference, work counts.

:data:`OPS` maps each DSL op name to its :class:`OpSpec`; :func:`infer`
checks one call (operand count, dtypes, layouts, attribute names, types and
ranges, shape compatibility) and returns an :class:`OpInfo` with the output
type and the work the call does. A FLOP is one add or one multiply (a
multiply-accumulate counts 2); ``bytes_read`` is the sum of the operands'
sizes and ``bytes_written`` the output's size unless an op says otherwise.
docs/ops.md is the reference for every formula here.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from mapper.core.graph import DTYPE_BYTES, TensorType
from mapper.core.opdefs import dnn, moe, movement, scientific
from mapper.core.opdefs.call import (
    ANY_DTYPES,
    ATTENTION_OPS,
    COMPLEX_DTYPES,
    FLAG_VARIANTS,
    FLOAT_DTYPES,
    INEXACT_DTYPES,
    INT_DTYPES,
    NUMERIC_DTYPES,
    OP_CLASSES,
    REQUIRED,
    Call,
    OpError,
    OpInfo,
    OpSpec,
)
from mapper.core.opdefs.scientific import ELEMENTWISE_FLOPS

#: Ops with no kernel: a graph with them can be mapped, not run.
KERNEL_LESS = frozenset({"opaque"})

__all__ = [
    "ANY_DTYPES", "ATTENTION_OPS", "COMPLEX_DTYPES", "ELEMENTWISE_FLOPS", "FLAG_VARIANTS", "FLOAT_DTYPES",
    "INEXACT_DTYPES", "INT_DTYPES", "KERNEL_LESS", "NUMERIC_DTYPES", "OPS", "OP_CLASSES", "REQUIRED", "OpError",
    "OpInfo", "OpSpec", "infer",
]


def _spec(name: str, n: tuple[int, int | None], op_class: str, formula: str, fn: Callable,
          signature: str, *attrs: tuple, choices: tuple = ()) -> OpSpec:
    """An :class:`OpSpec` from ``(attr, kind, default)`` triples."""
    return OpSpec(
        name=name, min_operands=n[0], max_operands=n[1],
        attrs=tuple((a, d) for a, _, d in attrs), op_class=op_class, formula=formula,
        infer_fn=fn, signature=signature, attr_kinds=tuple((a, k) for a, k, _ in attrs),
        choices=choices,
    )


_POOL_ATTRS = (("kernel", "int2", REQUIRED), ("stride", "int2", None), ("padding", "int2", 0))
_EPS = ("eps", "float", 1e-5)

#: Every op, by name.
OPS: dict[str, OpSpec] = {s.name: s for s in (
    _spec("matmul", (2, 2), "gemm", "2*batch*M*N*K", dnn.matmul, "a[..., M, K], b[K, N] or b[..., K, N]"),
    _spec("conv2d", (2, 2), "conv", "2*N*K*Ho*Wo*(C/groups)*R*S", dnn.conv2d,
          "x[N, C, H, W], w[K, C/groups, R, S]",
          ("stride", "int2", 1), ("padding", "int2", 0), ("groups", "int", 1)),
    _spec("conv_transpose2d", (2, 2), "conv", "2*N*C*H*W*(K/groups)*R*S", dnn.conv_transpose2d,
          "x[N, C, H, W], w[C, K/groups, R, S]",
          ("stride", "int2", 1), ("padding", "int2", 0), ("output_padding", "int2", 0), ("groups", "int", 1)),
    _spec("maxpool", (1, 1), "pool", "kh*kw * out.numel", dnn.pool, "x[N, C, H, W]", *_POOL_ATTRS),
    _spec("avgpool", (1, 1), "pool", "kh*kw * out.numel", dnn.pool, "x[N, C, H, W]", *_POOL_ATTRS),
    # batch norm (Ioffe and Szegedy, ICML 2015), inference form folded to scale + shift
    _spec("batchnorm", (1, 1), "norm", "2 * numel",
          dnn.per_element(2, min_ndim=2, form="at least 2-D [N, C, ...]"),
          "x[N, C, ...]", _EPS),
    _spec("relu", (1, 1), "activation", "1 * numel",
          dnn.per_element(1, INT_DTYPES + FLOAT_DTYPES, "a real tensor"), "x"),
    # GELU, tanh form (Hendrycks and Gimpel, arXiv:1606.08415)
    _spec("gelu", (1, 1), "activation", "8 * numel", dnn.per_element(8), "x"),
    _spec("softmax", (1, 1), "norm", "5 * numel", dnn.per_element(5, min_ndim=1, form="at least 1-D"), "x",
          ("axis", "int", -1)),
    # layer norm (Ba, Kiros and Hinton, arXiv:1607.06450), two-pass
    _spec("layernorm", (1, 1), "norm", "8 * numel", dnn.per_element(8, min_ndim=1, form="at least 1-D"),
          "x", _EPS),
    _spec("instancenorm", (1, 1), "norm", "8 * numel", dnn.instancenorm, "x[N, C, ...]", _EPS),
    *(_spec(op, (2, 2), "elementwise", "1 * out.numel", dnn.binary, "a, b")
      for op in ("add", "mul", "sub", "div")),
    # cache = C: each sequence's queries also attend to C earlier positions held in a KV cache;
    # window = W: each query sees its last W positions only (causal sliding window)
    _spec("attention", (1, 3), "attention", "4*B*S*(C+S)*D + 5*B*heads*S*(C+S)", dnn.attention,
          "qkv[T, 3D] or q[T, D], k[T, D], v[T, D] (grouped-query: kv_heads)",
          ("heads", "int", REQUIRED), ("seq", "int", REQUIRED), ("causal", "bool", 0),
          ("kv_heads", "int", None), ("fused", "bool", 1), ("cache", "int", 0), ("window", "int", 0)),
    # root-mean-square layer norm (Zhang and Sennrich, NeurIPS 2019); fused = 0: PyTorch's
    # composite form, whose saved tensors training keeps (mapper.cluster.profile)
    _spec("rmsnorm", (1, 1), "norm", "4 * numel", dnn.per_element(4, min_ndim=1, form="at least 1-D"),
          "x", _EPS, ("fused", "bool", 1)),
    # SwiGLU (Shazeer, arXiv:2002.05202): silu(gate) * up of x = [gate | up]; fused = 0 as rmsnorm's
    _spec("swiglu", (1, 1), "activation", "6 * out.numel", dnn.swiglu, "x[..., 2F]", ("fused", "bool", 1)),
    # rotary position embedding of the q and k heads (Su et al., RoFormer, arXiv:2104.09864); fused = 0:
    # PyTorch's composite form (x * cos + rotate_half(x) * sin), priced as its kernels (mapper.costing.eager)
    _spec("rotary", (1, 1), "elementwise", "3 * T * (heads + kv_heads) * dh", dnn.rotary,
          "qkv[T, (heads + 2 kv_heads) dh] as attention takes it",
          ("heads", "int", REQUIRED), ("seq", "int", REQUIRED), ("kv_heads", "int", None),
          ("base", "float", 10000.0), ("fused", "bool", 1)),
    _spec("embedding", (2, 2), "embedding", "0", dnn.embedding, "ids[...], table[V, D]"),
    # mixture of experts, dropless (docs/ops.md, "Mixture of experts")
    _spec("topk", (1, 1), "reduction", "rows*(k*E + k*norm + k*(norm or scale != 1))", moe.topk,
          "x[..., E]", ("k", "int", REQUIRED), ("norm", "bool", 0), ("scale", "float", 1.0)),
    _spec("moe_dispatch", (2, 2), "shape", "0", moe.moe_dispatch, "x[T, H], gates[T, E]",
          ("topk", "int", REQUIRED)),
    _spec("grouped_matmul", (3, 3), "gemm", "2*R*K*N", moe.grouped_matmul,
          "x[R = T topk, K], gates[T, E], w[E, K, N]"),
    _spec("moe_combine", (2, 2), "elementwise", "2 * R * H", moe.moe_combine, "y[R = T topk, H], gates[T, E]"),
    # multi-head latent attention's core (DeepSeek-V2, arXiv:2405.04434), decoupled rotary key
    _spec("mla_attention", (3, 3), "attention", "3*T*dr*(heads+1) + 2*B*heads*S*S*(dn+dr+dv) + 5*B*heads*S*S",
          moe.mla_attention, "q[T, heads (dn + dr)], kv[T, heads (dn + dv)], kr[T, dr]",
          ("heads", "int", REQUIRED), ("seq", "int", REQUIRED), ("causal", "bool", 0), ("fused", "bool", 1),
          ("base", "float", 10000.0)),
    # pooled lookups of DLRM's sparse features; cache_hit < 1: the table lives in host memory behind
    # an HBM cache that serves that share of the rows (the planner prices the misses over the host link)
    _spec("embedding_bag", (2, 2), "embedding", "(pooling - 1 (+1 mean)) * bags * D", dnn.embedding_bag,
          "ids[bags * pooling], table[V, D]", ("pooling", "int", REQUIRED), ("mode", "str", "sum"),
          ("cache_hit", "float", 1.0), choices=(("mode", tuple(dnn.BAG_MODES)),)),
    # the combine step of an all-reduce: each participant sums the parts (mapper.parallel)
    _spec("allreduce", (1, None), "elementwise", "(parts - 1) * numel", dnn.allreduce, "p1, p2, ...",
          ("rank", "int", 0)),
    _spec("concat", (1, None), "shape", "0", movement.concat, "x1, x2, ...", ("axis", "int", 0)),
    _spec("split", (1, 1), "shape", "0", movement.split, "x",
          ("parts", "int", REQUIRED), ("index", "int", REQUIRED), ("axis", "int", 0)),
    _spec("reshape", (1, 1), "shape", "0", movement.reshape, "x", ("shape", "ints", REQUIRED)),
    _spec("transpose", (1, 1), "shape", "0", movement.transpose, "x", ("perm", "ints", None)),
    # an op with no rule or kernel here (an imported ONNX op): shape and work as given
    _spec("opaque", (1, None), "elementwise", "flops", movement.opaque, "x1, x2, ...",
          ("shape", "ints", REQUIRED), ("flops", "float", 0.0), ("kind", "str", ""), ("dtype", "str", None)),
    # ONNX GatherND and ScatterElements (Open Neural Network Exchange, Operators.md)
    _spec("gather_nd", (2, 2), "embedding", "0", movement.gather_nd, "data, indices[..., k]",
          ("batch_dims", "int", 0)),
    _spec("scatter_elements", (3, 3), "embedding", "0 (updates.numel with a reduction)", movement.scatter_elements,
          "data, indices, updates", ("axis", "int", 0), ("reduction", "str", "none"),
          choices=(("reduction", movement.SCATTER_REDUCTIONS),)),
    _spec("stencil", (1, 1), "stencil", "steps * points * interior", scientific.stencil,
          "x[H, W] or x[D, H, W]", ("points", "int", REQUIRED), ("steps", "int", 1)),
    _spec("spmv", (2, 2), "sparse", "2 * nnz", scientific.spmv, "A[M, N] csr, x[N]"),
    _spec("fft", (1, 1), "fft", "5 * N * log2(N) * (numel / N)", scientific.fft, "x[..., N]"),
    _spec("ifft", (1, 1), "fft", "5 * N * log2(N) * (numel / N)", scientific.fft, "x[..., N]"),
    _spec("dot", (2, 2), "reduction", "2 * N", scientific.dot, "a[N], b[N]"),
    _spec("axpy", (2, 3), "elementwise", "2 * N", scientific.axpy, "x[N], y[N] or a[], x[N], y[N]",
          ("alpha", "float", None)),
    _spec("reduce", (1, 1), "reduction", "numel (+ out.numel for mean)", scientific.reduce, "x",
          ("kind", "str", "sum"), ("axis", "int", None),
          choices=(("kind", ("sum", "max", "mean")),)),
    _spec("cumsum", (1, 1), "reduction", "numel", scientific.cumsum, "x",
          ("axis", "int", 0), ("exclusive", "bool", 0), ("reverse", "bool", 0)),
    _spec("elementwise", (1, 1), "elementwise", "ELEMENTWISE_FLOPS[fn] * numel", scientific.elementwise, "x",
          ("fn", "str", REQUIRED), ("alpha", "float", None),
          choices=(("fn", tuple(ELEMENTWISE_FLOPS)),)),
)}

#: Lower bounds of integer attributes; ``axis`` has none (negative counts from the end).
_INT_LOW = {"stride": 1, "groups": 1, "kernel": 1, "heads": 1, "kv_heads": 1, "seq": 1, "steps": 1, "parts": 1,
            "points": 1, "pooling": 1, "padding": 0, "output_padding": 0, "index": 0, "cache": 0, "window": 0,
            "batch_dims": 0, "rank": 0, "k": 1, "topk": 1}


def _close(word: str, options: Iterable[str]) -> str | None:
    found = difflib.get_close_matches(word, list(options), n=1)
    return f"did you mean '{found[0]}'?" if found else None


def _check_attr(spec: OpSpec, key: str, kind: str, value: Any) -> Any:
    """The attribute's value, normalised, after its type and range checks."""
    def bad(expected: str) -> OpError:
        return OpError(f"{spec.name}: {key} must be {expected}, got {value!r}", attr=key)

    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("an integer")
        low = _INT_LOW.get(key)
        if low is not None and value < low:
            raise bad(f">= {low}")
        return value
    if kind == "int2":
        pair = isinstance(value, (list, tuple))
        items = list(value) if pair else [value]
        if (pair and len(items) != 2) or any(isinstance(v, bool) or not isinstance(v, int) for v in items):
            raise bad("an integer or a pair [h, w] of integers")
        for v in items:
            _check_attr(spec, key, "int", v)
        return tuple(items) if pair else value
    if kind == "bool":
        if value not in (0, 1) or not isinstance(value, int):
            raise bad("0 or 1")
        return int(value)
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise bad("a number")
        if key == "eps" and value < 0:
            raise bad(">= 0")
        return float(value)
    if kind == "str":
        if not isinstance(value, str):
            raise bad("a string")
        options = dict(spec.choices).get(key)
        if options is not None and value not in options:
            raise OpError(f"{spec.name}: {key} = {value!r} is not one of "
                          + ", ".join(f'"{o}"' for o in options), attr=key, hint=_close(value, options))
        return value
    # ints: a list of integers
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise bad("a list of integers")
    return tuple(value)


def infer(op: str, operands: Sequence[TensorType], attrs: Mapping[str, Any]) -> OpInfo:
    """Check one call of ``op`` and return its output type and work.

    Raises :class:`OpError` naming the operand (``arg``) or attribute
    (``attr``) at fault.
    """
    spec = OPS.get(op)
    if spec is None:
        raise OpError(f"unknown op '{op}'", hint=_close(op, OPS) or "see docs/ops.md for the op list")
    n, lo, hi = len(operands), spec.min_operands, spec.max_operands
    if n < lo or (hi is not None and n > hi):
        want = f"{lo}" if lo == hi else (f"at least {lo}" if hi is None else f"{lo} to {hi}")
        raise OpError(f"{op}: takes {want} operand{'s' if want != '1' else ''} "
                      f"({spec.signature}), got {n}", arg=min(n, hi) if hi is not None and n > hi else None)
    kinds = dict(spec.attr_kinds)
    resolved: dict[str, Any] = {}
    for key in sorted(attrs):
        if key not in kinds:
            valid = ", ".join(kinds) if kinds else "none"
            hint = _close(key, kinds)
            raise OpError(f"{op}: unknown attribute '{key}' (valid: {valid})", attr=key, hint=hint)
        if attrs[key] is None and spec.default(key) is None:  # left out, as infer resolves it
            resolved[key] = None
            continue
        resolved[key] = _check_attr(spec, key, kinds[key], attrs[key])
    for key, default in spec.attrs:
        if key not in resolved:
            if default is REQUIRED:
                raise OpError(f"{op}: missing required attribute '{key}'", attr=key,
                              hint=f"write {op}(..., {key} = ...)")
            resolved[key] = default
    for i, t in enumerate(operands):
        if t.layout != "dense" and not (op == "spmv" and i == 0):
            raise OpError(f"{op}: operand {i + 1} must be dense, got {t}", arg=i,
                          hint="only spmv takes a csr matrix (its first operand)")
        if t.dtype not in DTYPE_BYTES:
            raise OpError(f"{op}: operand {i + 1} has unknown dtype '{t.dtype}'", arg=i)
    return spec.infer_fn(Call(spec, operands, resolved))
