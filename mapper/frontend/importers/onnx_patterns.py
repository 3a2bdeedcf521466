"""Subgraphs of exported models that are one DSL op: the erf and tanh forms of
GELU (Hendrycks and Gimpel, arXiv:1606.08415), layer normalisation written as
ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div (Ba, Kiros and Hinton,
arXiv:1607.06450), and multi-head attention written as MatMul, Softmax,
MatMul with the head reshapes and transposes (Vaswani et al., NeurIPS 2017),
as PyTorch and TensorFlow export them, including the form torch's exporter
writes for ``scaled_dot_product_attention`` (Q and K^T scaled apart, a
``Where(IsNaN(p), 0, p)`` guard after the softmax) and causal masks.

Each matcher looks at an :class:`~mapper.frontend.importers.onnx_model.OnnxGraph` and
returns :class:`Match` es: the nodes a match replaces (none of whose
intermediate tensors is used elsewhere), the tensor it produces, and the DSL
op that computes it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mapper.frontend.importers.onnx_model import OnnxGraph, OnnxNode


@dataclass(frozen=True, slots=True)
class Match:
    """``kind`` (gelu, layernorm, rmsnorm, attention) replaces ``nodes`` and produces ``output``
    from ``inputs``; ``attrs`` are the DSL op's attributes."""

    kind: str
    nodes: tuple[OnnxNode, ...]
    inputs: tuple[str, ...]
    output: str
    attrs: Mapping[str, Any]


class Index:
    """Producers and consumers of the graph's tensors."""

    def __init__(self, g: OnnxGraph) -> None:
        self.g = g
        self.producer = {o: n for n in g.nodes for o in n.outputs}
        self.consumers: dict[str, list[OnnxNode]] = {}
        for n in g.nodes:
            for i in n.inputs:
                self.consumers.setdefault(i, []).append(n)
        self.outputs = set(g.outputs)

    def only_consumer(self, tensor: str) -> OnnxNode | None:
        """The single node that reads ``tensor`` (None when several, none, or a graph output)."""
        users = self.consumers.get(tensor, [])
        return users[0] if len(users) == 1 and tensor not in self.outputs else None

    def made_by(self, tensor: str, op: str) -> OnnxNode | None:
        node = self.producer.get(tensor)
        return node if node is not None and node.op == op and not node.folded else None

    def const(self, tensor: str) -> float | None:
        """The value of a constant scalar (or one-element) tensor, else None."""
        t = self.g.tensors.get(tensor)
        if t is None or not t.const or t.value is None or t.value.size != 1:
            return None
        return float(t.value.reshape(-1)[0])

    def other(self, node: OnnxNode, tensor: str) -> str | None:
        """The input of a two-input ``node`` that is not ``tensor``."""
        if len(node.inputs) != 2 or tensor not in node.inputs:
            return None
        return node.inputs[1] if node.inputs[0] == tensor else node.inputs[0]


def find_patterns(g: OnnxGraph, extra: Mapping[str, Callable[[Index, OnnxNode], Match | None]] | None = None
                  ) -> list[Match]:
    """Every non-overlapping GELU, layer-norm, RMS-norm and attention subgraph, in node order;
    ``extra`` matchers by the op type they start from are tried where these find nothing."""
    ix = Index(g)
    found: list[Match] = []
    used: set[int] = set()
    for n in g.nodes:
        if n.folded:
            continue
        m = None
        if n.op == "Erf":
            m = _gelu(ix, n)
        elif n.op == "Tanh":
            m = _gelu_tanh(ix, n)
        elif n.op == "ReduceMean":
            m = _layernorm(ix, n) or _rmsnorm(ix, n)
        elif n.op == "Softmax":
            m = _attention(ix, n)
        if m is None and extra and n.op in extra:
            m = extra[n.op](ix, n)
        if m is not None and not any(id(x) in used for x in m.nodes):
            used.update(id(x) for x in m.nodes)
            found.append(m)
    return found


def close(value: float | None, want: float, rel: float = 1e-3) -> bool:
    return value is not None and math.isclose(value, want, rel_tol=rel)


def _gelu(ix: Index, erf: OnnxNode) -> Match | None:
    """x * 0.5 * (1 + erf(x / sqrt(2))), in either order of the two multiplies."""
    scale = ix.producer.get(erf.inputs[0])
    if scale is None or scale.op not in ("Div", "Mul") or ix.only_consumer(erf.inputs[0]) is not erf:
        return None
    x = next((i for i in scale.inputs if ix.const(i) is None), None)
    c = ix.const(ix.other(scale, x) or "") if x is not None else None
    if x is None or not (close(c, math.sqrt(2)) if scale.op == "Div" else close(c, 1 / math.sqrt(2))):
        return None
    return _gelu_tail(ix, x, [scale, erf])


def _gelu_tanh(ix: Index, tanh: OnnxNode) -> Match | None:
    """x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))), the approximation GPT-2 uses
    (Hendrycks and Gimpel, arXiv:1606.08415, section 2), in either order of the multiplies."""
    scale = ix.made_by(tanh.inputs[0], "Mul")
    if scale is None or ix.only_consumer(tanh.inputs[0]) is not tanh:
        return None
    inner = next((i for i in scale.inputs if ix.const(i) is None), None)
    if inner is None or not close(ix.const(ix.other(scale, inner) or ""), math.sqrt(2 / math.pi)):
        return None
    plus = ix.made_by(inner, "Add")
    if plus is None or ix.only_consumer(inner) is not scale:
        return None
    for x in plus.inputs:
        cubic = ix.made_by(ix.other(plus, x) or "", "Mul")
        if cubic is None or ix.only_consumer(cubic.outputs[0]) is not plus:
            continue
        power = next((ix.made_by(i, "Pow") for i in cubic.inputs if ix.made_by(i, "Pow") is not None), None)
        if power is None or power.inputs[0] != x or not close(ix.const(power.inputs[1]), 3.0) \
                or ix.only_consumer(power.outputs[0]) is not cubic \
                or not close(ix.const(ix.other(cubic, power.outputs[0]) or ""), 0.044715):
            continue
        return _gelu_tail(ix, x, [power, cubic, plus, scale, tanh])
    return None


def _gelu_tail(ix: Index, x: str, head: list[OnnxNode]) -> Match | None:
    """The end both GELU forms share: 0.5 * x * (1 + f), f the output of ``head``'s last node."""
    f = head[-1].outputs[0]
    plus = ix.only_consumer(f)
    if plus is None or plus.op != "Add" or not close(ix.const(ix.other(plus, f) or ""), 1.0):
        return None
    mul = ix.only_consumer(plus.outputs[0])
    if mul is None or mul.op != "Mul":
        return None
    partner = ix.other(mul, plus.outputs[0])
    if partner == x:  # (x * (1 + f)) * 0.5
        half = ix.only_consumer(mul.outputs[0])
        if half is None or half.op != "Mul" or not close(ix.const(ix.other(half, mul.outputs[0]) or ""), 0.5):
            return None
        nodes = (*head, plus, mul, half)
    else:  # (x * 0.5) * (1 + f)
        half = ix.made_by(partner or "", "Mul")
        if half is None or ix.only_consumer(half.outputs[0]) is not mul or x not in half.inputs:
            return None
        if not close(ix.const(ix.other(half, x) or ""), 0.5):
            return None
        nodes = (half, *head, plus, mul)
    return Match("gelu", nodes, (x,), nodes[-1].outputs[0] if partner == x else mul.outputs[0], {})


def _last_axis(node: OnnxNode, ix: Index) -> bool:
    axes = node.attrs.get("axes")
    if axes is None and len(node.inputs) > 1:
        t = ix.g.tensors.get(node.inputs[1])
        axes = None if t is None or t.value is None else [int(a) for a in t.value.reshape(-1)]
    rank = len(ix.g.tensors[node.inputs[0]].shape)
    return axes is not None and len(axes) == 1 and axes[0] % rank == rank - 1


def _layernorm(ix: Index, mean: OnnxNode) -> Match | None:
    """(x - mean(x)) / sqrt(mean((x - mean(x))**2) + eps) [* gamma] [+ beta], over the last axis."""
    x = mean.inputs[0]
    sub = ix.only_consumer(mean.outputs[0])
    if sub is None or sub.op != "Sub" or sub.inputs != (x, mean.outputs[0]) or not _last_axis(mean, ix):
        return None
    users = ix.consumers.get(sub.outputs[0], [])
    power = next((u for u in users if u.op in ("Pow", "Mul")), None)
    div = next((u for u in users if u.op == "Div"), None)
    if power is None or div is None or len(users) != 2:
        return None
    if power.op == "Pow" and not close(ix.const(power.inputs[1] if len(power.inputs) > 1 else ""), 2.0):
        return None
    if power.op == "Mul" and power.inputs != (sub.outputs[0], sub.outputs[0]):
        return None
    var = ix.only_consumer(power.outputs[0])
    if var is None or var.op != "ReduceMean" or not _last_axis(var, ix):
        return None
    add = ix.only_consumer(var.outputs[0])
    eps = ix.const(ix.other(add, var.outputs[0]) or "") if add is not None and add.op == "Add" else None
    if add is None or eps is None:
        return None
    root = ix.only_consumer(add.outputs[0])
    if root is None or root.op != "Sqrt" or ix.only_consumer(root.outputs[0]) is not div:
        return None
    if div.inputs != (sub.outputs[0], root.outputs[0]):
        return None
    nodes = [mean, sub, power, var, add, root, div]
    last = div
    for op in ("Mul", "Add"):  # the affine part, when its parameters are constant
        nxt = ix.only_consumer(last.outputs[0])
        partner = ix.other(nxt, last.outputs[0]) if nxt is not None and nxt.op == op else None
        if nxt is None or partner is None or not ix.g.tensors[partner].const:
            break
        nodes.append(nxt)
        last = nxt
    return Match("layernorm", tuple(nodes), (x,), last.outputs[0], {"eps": eps})


def _rmsnorm(ix: Index, var: OnnxNode) -> Match | None:
    """x / sqrt(mean(x**2) + eps) [* gamma] over the last axis (Zhang and Sennrich, NeurIPS 2019),
    as exporters write Llama's and T5's: the inverse root as ``Reciprocal``, ``Div(1, .)`` or ``x / .``."""
    square = ix.made_by(var.inputs[0], "Pow") or ix.made_by(var.inputs[0], "Mul")
    if square is None or ix.only_consumer(square.outputs[0]) is not var or not _last_axis(var, ix):
        return None
    x = square.inputs[0]
    if square.op == "Pow" and not close(ix.const(square.inputs[1] if len(square.inputs) > 1 else ""), 2.0):
        return None
    if square.op == "Mul" and square.inputs != (x, x):
        return None
    add = ix.only_consumer(var.outputs[0])
    if add is None or add.op != "Add":
        return None
    eps = ix.const(ix.other(add, var.outputs[0]) or "")
    root = ix.only_consumer(add.outputs[0])
    if eps is None or root is None or root.op != "Sqrt":
        return None
    inv = ix.only_consumer(root.outputs[0])
    if inv is None:
        return None
    nodes: list[OnnxNode] = [square, var, add, root, inv]
    if inv.op == "Div" and inv.inputs == (x, root.outputs[0]):
        last = inv
    else:
        one = inv.op == "Reciprocal" or (inv.op == "Div" and inv.inputs[1] == root.outputs[0]
                                         and close(ix.const(inv.inputs[0]), 1.0))
        mul = ix.only_consumer(inv.outputs[0]) if one else None
        if mul is None or mul.op != "Mul" or ix.other(mul, inv.outputs[0]) != x:
            return None
        nodes.append(mul)
        last = mul
    back = ix.only_consumer(last.outputs[0])  # a float32 norm of 16-bit activations: Cast in and back
    ahead = ix.made_by(x, "Cast")
    if back is not None and back.op == "Cast" and ahead is not None and len(ix.consumers.get(x, [])) == 2 \
            and x not in ix.outputs and ix.g.tensors[back.outputs[0]].dtype == ix.g.tensors[ahead.inputs[0]].dtype:
        nodes = [ahead, *nodes, back]
        x, last = ahead.inputs[0], back
    nxt = ix.only_consumer(last.outputs[0])  # the gain, when it is constant
    partner = ix.other(nxt, last.outputs[0]) if nxt is not None and nxt.op == "Mul" else None
    if nxt is not None and partner is not None and ix.g.tensors[partner].const:
        nodes.append(nxt)
        last = nxt
    return Match("rmsnorm", tuple(nodes), (x,), last.outputs[0], {"eps": eps})


def _heads(ix: Index, tensor: str, perm: tuple[int, ...]) -> tuple[str, int, int, int, list[OnnxNode]] | None:
    """``tensor`` = Transpose(perm)(Reshape(x[B, S, D] -> [B, S, H, dh])): (x, B, S, H, nodes)."""
    tr = ix.made_by(tensor, "Transpose")
    if tr is None or tuple(tr.attrs.get("perm", ())) != perm or ix.only_consumer(tensor) is None:
        return None
    rs = ix.made_by(tr.inputs[0], "Reshape")
    if rs is None or ix.only_consumer(rs.outputs[0]) is not tr:
        return None
    x = rs.inputs[0]
    src, dst = ix.g.tensors[x].shape, ix.g.tensors[rs.outputs[0]].shape
    if len(src) != 3 or len(dst) != 4 or src[:2] != dst[:2] or dst[2] * dst[3] != src[2]:
        return None
    return x, src[0], src[1], dst[2], [rs, tr]


def _scaled(ix: Index, tensor: str) -> tuple[str, list[OnnxNode]]:
    """``tensor`` = Mul(x, scalar constant) read only here: (x, [the Mul]); else (tensor, [])."""
    mul = ix.made_by(tensor, "Mul")
    if mul is None or ix.only_consumer(tensor) is None or ix.const(mul.inputs[1]) is None:
        return tensor, []
    return mul.inputs[0], [mul]


def _keys_transposed(ix: Index, tensor: str) -> tuple[str, int, int, int, list[OnnxNode]] | None:
    """K^T as torch's scaled_dot_product_attention exports it: Reshape to [B*H, S, dh],
    Transpose(0, 2, 1), Reshape to [B, H, dh, S], of the keys' heads [B, H, S, dh]."""
    back = ix.made_by(tensor, "Reshape")
    if back is None or ix.only_consumer(tensor) is None:
        return None
    tr = ix.made_by(back.inputs[0], "Transpose")
    if tr is None or tuple(tr.attrs.get("perm", ())) != (0, 2, 1) or ix.only_consumer(back.inputs[0]) is None:
        return None
    flat = ix.made_by(tr.inputs[0], "Reshape")
    if flat is None or ix.only_consumer(tr.inputs[0]) is None:
        return None
    heads = _heads(ix, flat.inputs[0], (0, 2, 1, 3))
    if heads is None:
        return None
    x, b, s, h, nodes = heads
    dh = ix.g.tensors[x].shape[2] // h
    if ix.g.tensors[tensor].shape != (b, h, dh, s):
        return None
    return x, b, s, h, [*nodes, flat, tr, back]


def nan_guarded(ix: Index, soft: OnnxNode) -> tuple[str, list[OnnxNode]]:
    """The probabilities after ``soft``: Where(IsNaN(p), 0, p) as torch exports a fully masked row's
    guard (the tensor and [IsNaN, Where]), or the softmax output itself."""
    p = soft.outputs[0]
    users = ix.consumers.get(p, [])
    isnan = next((u for u in users if u.op == "IsNaN" and not u.folded), None)
    where = next((u for u in users if u.op == "Where" and not u.folded), None)
    if len(users) != 2 or isnan is None or where is None or p in ix.outputs:
        return p, []
    if where.inputs[0] != isnan.outputs[0] or where.inputs[2] != p or ix.only_consumer(isnan.outputs[0]) is not where:
        return p, []
    return where.outputs[0], [isnan, where]


def score_inputs(ix: Index, soft: OnnxNode) -> tuple[OnnxNode, str | None, list[OnnxNode]] | None:
    """The ``Q K^T`` MatMul before ``soft`` (a softmax over the last axis of 4-D scores), the
    additive mask (or None) and the mask and scale nodes between them (as exported:
    (QK^T / sqrt(dh)) + mask), or None."""
    rank = len(ix.g.tensors[soft.inputs[0]].shape)
    if rank != 4 or int(soft.attrs.get("axis", -1)) % rank != 3:
        return None
    nodes: list[OnnxNode] = []
    t = soft.inputs[0]
    mask = None
    for op in ("Add", "Div", "Mul"):
        node = ix.made_by(t, op)
        if node is None or ix.only_consumer(t) is None:
            continue
        if op == "Add":
            t_next, mask = node.inputs[0], node.inputs[1]
        else:
            if ix.const(node.inputs[1]) is None:
                return None
            t_next = node.inputs[0]
        nodes.insert(0, node)
        t = t_next
    scores = ix.made_by(t, "MatMul")
    if scores is None or ix.only_consumer(t) is None:
        return None
    return scores, mask, nodes


def _attention(ix: Index, soft: OnnxNode) -> Match | None:
    """softmax(Q K^T [* or / scale] [+ mask]) V over heads, back to [B, S, D]."""
    scored = score_inputs(ix, soft)
    if scored is None:
        return None
    scores, mask, nodes = scored
    q_in, q_scale = _scaled(ix, scores.inputs[0])
    k_in, k_scale = _scaled(ix, scores.inputs[1])
    q = _heads(ix, q_in, (0, 2, 1, 3))
    k = _heads(ix, k_in, (0, 2, 3, 1)) or _keys_transposed(ix, k_in)
    probs, guard = nan_guarded(ix, soft)
    ctx = ix.only_consumer(probs)
    if q is None or k is None or ctx is None or ctx.op != "MatMul" or ctx.inputs[0] != probs:
        return None
    nodes = [*q_scale, *k_scale, *nodes, *guard]
    v = _heads(ix, ctx.inputs[1], (0, 2, 1, 3))
    back = ix.only_consumer(ctx.outputs[0])
    same = back if back is not None and back.op == "Reshape" and \
        ix.g.tensors[back.outputs[0]].shape == ix.g.tensors[ctx.outputs[0]].shape else None
    if same is not None:  # a reshape to the shape it has (torch's legacy exporter writes one)
        nodes.append(same)
        back = ix.only_consumer(same.outputs[0])
    if v is None or back is None or back.op != "Transpose" or tuple(back.attrs.get("perm", ())) != (0, 2, 1, 3):
        return None
    merge = ix.only_consumer(back.outputs[0])
    if merge is None or merge.op != "Reshape":
        return None
    (xq, b, s, h, nq), (xk, *_, nk), (xv, *_, nv) = q, k, v
    d = ix.g.tensors[xq].shape[2]
    if ix.g.tensors[merge.outputs[0]].shape not in ((b, s, d), (b * s, d)) or \
            any(ix.g.tensors[x].shape != (b, s, d) for x in (xk, xv)):
        return None
    nodes = [*nq, *nk, *nv, scores, *nodes, soft, ctx, back, merge]
    return Match("attention", tuple(nodes), (xq, xk, xv), merge.outputs[0],
                 {"heads": h, "seq": s, "batch": b, "width": d, "causal": int(_causal(ix, mask, s))})


def _causal(ix: Index, mask: str | None, s: int) -> bool:
    """True when the additive ``mask`` is a constant that hides every later position
    (large negative above the diagonal of its last two axes, zero on and below)."""
    import numpy as np

    t = ix.g.tensors.get(mask or "")
    if t is None or not t.const or len(t.shape) < 2 or t.shape[-2:] != (s, s):
        return False
    value = ix.g.value(t.name, 2**22)
    if value is None:
        return False
    above = np.triu(np.ones((s, s), dtype=bool), 1)
    rows = np.asarray(value, dtype=np.float64).reshape(-1, s, s)
    return bool((rows[:, above] < -1e4).all() and (rows[:, ~above] == 0).all())
