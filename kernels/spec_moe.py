"""Kernel-call checks of the mixture-of-experts ops and multi-head latent attention
(:mod:`mapper.kernels.spec`; docs/ops.md, "Mixture of experts")."""

from __future__ import annotations

import numpy as np

from mapper.kernels.checks import REQUIRED, _float, _int, _ndim, _shape, fail


def _gates(op, gates, tokens, rows):
    """``gates[T, E]`` for ``tokens`` tokens and ``rows`` routed rows; the routing's K."""
    _ndim(op, gates, "gates", (2,))
    t, e = gates.shape
    if t != tokens or (t and (rows % t or not 1 <= rows // t <= e)):
        raise fail(op, f"gates {_shape(gates)} must have a row per token and T K rows routed, 1 <= K <= E "
                       f"(got {rows} rows)")
    if gates.size and not np.all(gates >= 0):
        raise fail(op, "gates must be non-negative (the weights topk keeps of softmax or sigmoid scores)")
    return rows // t if t else 1


def _topk(op, xs, at):
    if xs[0].ndim < 1:
        raise fail(op, "x must be at least 1-D [..., E]")
    if at["k"] is REQUIRED:
        raise fail(op, "missing attribute k")
    k = _int(op, "k", at["k"], 1)
    if k > xs[0].shape[-1]:
        raise fail(op, f"k = {k} is larger than the rows of {_shape(xs[0])}")
    if at["norm"] not in (0, 1, True, False):
        raise fail(op, f"norm must be 0 or 1, got {at['norm']!r}")
    return {"k": k, "norm": bool(at["norm"]), "scale": _float(op, "scale", at["scale"])}


def _moe_dispatch(op, xs, at):
    x, gates = xs
    _ndim(op, x, "x", (2,))
    if at["topk"] is REQUIRED:
        raise fail(op, "missing attribute topk")
    k = _int(op, "topk", at["topk"], 1)
    _gates(op, gates, x.shape[0], x.shape[0] * k)
    return {"topk": k}


def _grouped_matmul(op, xs, at):
    x, gates, w = xs
    _ndim(op, x, "x", (2,))
    _ndim(op, w, "w", (3,))
    _ndim(op, gates, "gates", (2,))
    if w.shape[0] != gates.shape[1] or w.shape[1] != x.shape[1]:
        raise fail(op, f"w {_shape(w)} must be [E, K, N] for gates {_shape(gates)} and x {_shape(x)}")
    _gates(op, gates, gates.shape[0], x.shape[0])
    return {}


def _moe_combine(op, xs, at):
    y, gates = xs
    _ndim(op, y, "y", (2,))
    _ndim(op, gates, "gates", (2,))
    _gates(op, gates, gates.shape[0], y.shape[0])
    return {}


def _mla_attention(op, xs, at):
    for x in xs:
        _ndim(op, x, "each operand", (2,))
    for key in ("heads", "seq"):
        if at[key] is REQUIRED:
            raise fail(op, f"missing attribute {key}")
    h, s = _int(op, "heads", at["heads"], 1), _int(op, "seq", at["seq"], 1)
    q, kv, kr = xs
    t, dr = kr.shape
    dn = q.shape[1] // h - dr
    if q.shape[1] % h or kv.shape[1] % h or dn < 1 or kv.shape[1] // h - dn < 1 or dr % 2 \
            or q.shape[0] != t or kv.shape[0] != t or t % s:
        raise fail(op, f"q {_shape(q)}, kv {_shape(kv)}, kr {_shape(kr)} are not [T, heads (dn + dr)], "
                       f"[T, heads (dn + dv)], [T, dr] (dr even, T = batch * {s}) for heads = {h}")
    for key in ("causal", "fused"):
        if at[key] not in (0, 1, True, False):
            raise fail(op, f"{key} must be 0 or 1, got {at[key]!r}")
    return {"heads": h, "seq": s, "causal": bool(at["causal"]), "fused": bool(at["fused"]),
            "base": _float(op, "base", at["base"])}
