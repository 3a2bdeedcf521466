"""The layers of exported decoder-only language models (Llama, Qwen2, Mistral as torch exports
them, by either exporter) that are one DSL op each, so an imported model splits by tensor and
carries a KV cache as a written one does (docs/importers.md, "Decoder layers").

* :func:`rotary_attention`: the Q, K and V projections of one input (with or without biases),
  their head reshapes and transposes, rotary position embedding (Su et al., arXiv:2104.09864)
  written as ``x * cos + rotate_half(x) * sin`` with ``rotate_half`` a Slice, Neg, Concat,
  grouped-query attention's ``repeat_kv`` (Ainslie et al., EMNLP 2023) written as Unsqueeze,
  Expand, Reshape, the KV cache's Concat of past and new keys and values, the scaled, masked
  softmax of ``Q K^T`` and its product with V, the merge of the heads and the output
  projection. The mask is read for causality and a sliding window (Beltagy et al.,
  "Longformer", arXiv:2004.05150; Mistral 7B, arXiv:2310.06825).
* :func:`swiglu`: ``down(silu(gate(x)) * up(x))`` (Shazeer, arXiv:2002.05202) with SiLU written
  as ``x * Sigmoid(x)``.

Both return :class:`~mapper.frontend.importers.onnx_patterns.Match` es whose ``attrs`` carry the
sizes and the weights the DSL ops are declared from (:mod:`.onnx_dsl`).
"""

from __future__ import annotations

from dataclasses import dataclass

from mapper.frontend.importers.onnx_model import OnnxNode
from mapper.frontend.importers.onnx_patterns import Index, Match, nan_guarded, score_inputs


@dataclass(frozen=True, slots=True)
class _Proj:
    """``x @ weight [+ bias]`` cut into ``heads`` heads of ``dh``: ``[B, heads, S, dh]``."""

    x: str
    weight: str
    bias: str | None
    heads: int
    dh: int
    nodes: tuple[OnnxNode, ...]


def _linear(ix: Index, tensor: str) -> tuple[str, str, str | None, list[OnnxNode]] | None:
    """``tensor`` = MatMul(x, W) [+ b] with W a constant 2-D and b a constant 1-D: (x, W, b, nodes)."""
    bias = None
    nodes: list[OnnxNode] = []
    add = ix.made_by(tensor, "Add")
    if add is not None:
        b = next((i for i in add.inputs if ix.g.tensors[i].const and len(ix.g.tensors[i].shape) == 1), None)
        inner = ix.other(add, b) if b is not None else None
        if inner is None or ix.only_consumer(inner) is not add:
            return None
        bias, tensor, nodes = b, inner, [add]
    mm = ix.made_by(tensor, "MatMul")
    if mm is None or not ix.g.tensors[mm.inputs[1]].const or len(ix.g.tensors[mm.inputs[1]].shape) != 2:
        return None
    return mm.inputs[0], mm.inputs[1], bias, [mm, *nodes]


def _projected_heads(ix: Index, tensor: str) -> _Proj | None:
    """``tensor`` = Transpose(0, 2, 1, 3)(Reshape(x @ W [+ b] -> [B, S, heads, dh]))."""
    tr = ix.made_by(tensor, "Transpose")
    if tr is None or tuple(tr.attrs.get("perm", ())) != (0, 2, 1, 3):
        return None
    rs = ix.made_by(tr.inputs[0], "Reshape")
    if rs is None or ix.only_consumer(tr.inputs[0]) is not tr or ix.only_consumer(rs.inputs[0]) is not rs:
        return None
    src, dst = ix.g.tensors[rs.inputs[0]].shape, ix.g.tensors[rs.outputs[0]].shape
    if len(src) != 3 or len(dst) != 4 or src[:2] != dst[:2] or dst[2] * dst[3] != src[2]:
        return None
    lin = _linear(ix, rs.inputs[0])
    if lin is None:
        return None
    x, w, b, nodes = lin
    return _Proj(x, w, b, dst[2], dst[3], (*nodes, rs, tr))


def _rotated(ix: Index, tensor: str) -> tuple[str, list[OnnxNode]] | None:
    """``tensor`` = x * cos + rotate_half(x) * sin (either order of each product and of the sum),
    ``rotate_half(x)`` = Concat(-x[..., d/2:], x[..., :d/2]) on the last axis: (x, nodes)."""
    add = ix.made_by(tensor, "Add")
    if add is None or len(add.inputs) != 2:
        return None
    muls = [ix.made_by(i, "Mul") for i in add.inputs]
    if any(m is None or ix.only_consumer(m.outputs[0]) is not add for m in muls):
        return None
    for plain, turned in (muls, muls[::-1]):
        assert plain is not None and turned is not None
        for x in plain.inputs:
            table = ix.other(plain, x)
            if table is None or not ix.g.tensors[table].const:
                continue
            half = _rotate_half(ix, turned, x)
            if half is not None:
                return x, [plain, *half, turned, add]
    return None


def _rotate_half(ix: Index, mul: OnnxNode, x: str) -> list[OnnxNode] | None:
    """The nodes of ``mul`` = Concat(Neg(Slice(x, d/2:)), Slice(x, :d/2)) * a constant, or None."""
    for cat_out in mul.inputs:
        table = ix.other(mul, cat_out)
        cat = ix.made_by(cat_out, "Concat")
        if cat is None or table is None or not ix.g.tensors[table].const or len(cat.inputs) != 2:
            continue
        rank = len(ix.g.tensors[cat_out].shape)
        neg = ix.made_by(cat.inputs[0], "Neg")
        low = ix.made_by(cat.inputs[1], "Slice")
        high = ix.made_by(neg.inputs[0], "Slice") if neg is not None else None
        if int(cat.attrs.get("axis", 0)) % rank != rank - 1 or neg is None or low is None or high is None:
            continue
        if low.inputs[0] != x or high.inputs[0] != x or ix.only_consumer(cat_out) is not mul:
            continue
        d = ix.g.tensors[x].shape[-1]
        if ix.g.tensors[low.outputs[0]].shape[-1] * 2 != d or ix.g.tensors[high.outputs[0]].shape[-1] * 2 != d:
            continue
        if any(ix.only_consumer(n.outputs[0]) is None for n in (low, high, neg)):
            continue
        return [low, high, neg, cat]
    return None


def _repeated(ix: Index, tensor: str, groups: int) -> tuple[str, list[OnnxNode]]:
    """``tensor`` = repeat_kv(x, groups) as Reshape(Expand(Unsqueeze(x, 2))) (x itself when there is
    nothing to repeat): (x, nodes)."""
    rs = ix.made_by(tensor, "Reshape")
    ex = ix.made_by(rs.inputs[0], "Expand") if rs is not None else None
    un = ix.made_by(ex.inputs[0], "Unsqueeze") if ex is not None else None
    if rs is None or ex is None or un is None:
        return tensor, []
    src, out = ix.g.tensors[un.inputs[0]].shape, ix.g.tensors[tensor].shape
    if len(src) != 4 or out != (src[0], src[1] * groups, *src[2:]):
        return tensor, []
    if any(ix.only_consumer(n.outputs[0]) is None for n in (un, ex)):
        return tensor, []
    return un.inputs[0], [un, ex, rs]


def _cached(ix: Index, tensor: str) -> tuple[str, int, list[OnnxNode]]:
    """``tensor`` = Concat(past, new) along the sequence axis of [B, kv, S, dh] (a KV cache; its
    output may also be the model's ``present`` output), or a one-input Concat (an empty cache):
    (new, past positions, nodes); else (tensor, 0, [])."""
    cat = ix.made_by(tensor, "Concat")
    if cat is None or len(ix.g.tensors[tensor].shape) != 4 or int(cat.attrs.get("axis", 0)) % 4 != 2:
        return tensor, 0, []
    if len(cat.inputs) == 1:
        return cat.inputs[0], 0, [cat]
    if len(cat.inputs) != 2:
        return tensor, 0, []
    past = ix.g.tensors[cat.inputs[0]].shape[2]
    nodes = [cat]
    alias = ix.made_by(cat.inputs[0], "Concat")  # the past through a one-input Concat read for its length
    if alias is not None and len(alias.inputs) == 1 and cat.inputs[0] not in ix.outputs \
            and all(n is cat or n.folded for n in ix.consumers.get(cat.inputs[0], [])):
        nodes.append(alias)
    return cat.inputs[1], past, nodes


def _keys(ix: Index, tensor: str, groups: int) -> tuple[str, int, list[OnnxNode]]:
    """The keys' or values' heads before the cache and repeat_kv: (tensor, past, nodes)."""
    rep, nodes = _repeated(ix, tensor, groups)
    head, past, cat = _cached(ix, rep)
    return head, past, [*cat, *nodes]


def rotary_attention(ix: Index, soft: OnnxNode) -> Match | None:
    """A decoder layer's attention from its projections to its output projection (module docstring)."""
    scored = score_inputs(ix, soft)
    if scored is None:
        return None
    scores, mask, around = scored
    b, h, s, keys = ix.g.tensors[soft.inputs[0]].shape
    q_in = scores.inputs[0]
    scale = ix.made_by(q_in, "Mul")
    q_nodes: list[OnnxNode] = []
    if scale is not None and ix.const(scale.inputs[1]) is not None and ix.only_consumer(scale.inputs[0]) is scale:
        q_in, q_nodes = scale.inputs[0], [scale]
    keys_t = _transposed(ix, scores.inputs[1])
    if keys_t is None:
        return None
    qr = _rotated(ix, q_in)
    if qr is None:
        return None
    q = _projected_heads(ix, qr[0])
    if q is None or q.heads != h:
        return None
    probs, guard = _softmax_out(ix, soft)
    ctx = ix.only_consumer(probs)
    if ctx is None or ctx.op != "MatMul" or ctx.inputs[0] != probs:
        return None
    k_heads, past, k_nodes = _keys_side(ix, keys_t[0], h)
    v_heads, v_past, v_nodes = _keys_side(ix, ctx.inputs[1], h)
    kr = _rotated(ix, k_heads)
    k = _projected_heads(ix, kr[0]) if kr is not None else None
    v = _projected_heads(ix, v_heads)
    if kr is None or k is None or v is None or past != v_past or keys != past + s:
        return None
    if len({q.x, k.x, v.x}) != 1 or k.heads != v.heads or h % k.heads or len({q.dh, k.dh, v.dh}) != 1:
        return None
    if (q.bias is None) != (k.bias is None) or (k.bias is None) != (v.bias is None):
        return None
    back = ix.only_consumer(ctx.outputs[0])
    if back is None or back.op != "Transpose" or tuple(back.attrs.get("perm", ())) != (0, 2, 1, 3):
        return None
    merge = ix.only_consumer(back.outputs[0])
    if merge is None or merge.op != "Reshape" or ix.g.tensors[merge.outputs[0]].shape != (b, s, h * q.dh):
        return None
    out_proj = ix.only_consumer(merge.outputs[0])
    if out_proj is None or out_proj.op != "MatMul" or out_proj.inputs[0] != merge.outputs[0]:
        return None
    wo = out_proj.inputs[1]
    if not ix.g.tensors[wo].const or ix.g.tensors[wo].shape[:1] != (h * q.dh,):
        return None
    tail: list[OnnxNode] = [out_proj]
    bias_o = None
    add = ix.only_consumer(out_proj.outputs[0])
    partner = ix.other(add, out_proj.outputs[0]) if add is not None and add.op == "Add" else None
    if add is not None and partner is not None and ix.g.tensors[partner].const \
            and len(ix.g.tensors[partner].shape) == 1:
        bias_o = partner
        tail.append(add)
    if ix.g.tensors[q.x].shape[:2] != (b, s):
        return None
    causal, window = _mask_kind(ix, mask, s, past)
    nodes = (*q.nodes, *k.nodes, *v.nodes, *qr[1], *kr[1], *k_nodes, *v_nodes, *q_nodes, *keys_t[1], scores, *around,
             soft, *guard, ctx, back, merge, *tail)
    attrs = {"heads": h, "kv_heads": k.heads, "head_dim": q.dh, "batch": b, "seq": s, "cache": past,
             "causal": int(causal), "window": window, "weights": (q.weight, k.weight, v.weight, wo),
             "biases": (q.bias, k.bias, v.bias) if q.bias is not None else None, "out_bias": bias_o}
    return Match("rotary_attention", nodes, (q.x,), tail[-1].outputs[0], attrs)


def _transposed(ix: Index, tensor: str) -> tuple[str, list[OnnxNode]] | None:
    """``tensor`` = K^T [* scale]: Transpose(0, 1, 3, 2) of K, or as torch exports
    ``scaled_dot_product_attention``: K through [B*H, S, dh], Transpose(0, 2, 1), back to
    [B, H, dh, S], scaled apart (its Q too). (K, nodes) or None."""
    nodes: list[OnnxNode] = []
    scale = ix.made_by(tensor, "Mul")
    if scale is not None and ix.const(scale.inputs[1]) is not None and ix.only_consumer(scale.inputs[0]) is scale:
        tensor, nodes = scale.inputs[0], [scale]
    if ix.only_consumer(tensor) is None:
        return None
    tr = ix.made_by(tensor, "Transpose")
    if tr is not None and tuple(tr.attrs.get("perm", ())) == (0, 1, 3, 2):
        return tr.inputs[0], [tr, *nodes]
    back = ix.made_by(tensor, "Reshape")
    tr = ix.made_by(back.inputs[0], "Transpose") if back is not None else None
    flat = ix.made_by(tr.inputs[0], "Reshape") if tr is not None else None
    if back is None or tr is None or flat is None or tuple(tr.attrs.get("perm", ())) != (0, 2, 1):
        return None
    if ix.only_consumer(back.inputs[0]) is None or ix.only_consumer(tr.inputs[0]) is None:
        return None
    b, h, s, dh = ix.g.tensors[flat.inputs[0]].shape if len(ix.g.tensors[flat.inputs[0]].shape) == 4 else (0,) * 4
    if ix.g.tensors[tensor].shape != (b, h, dh, s) or b == 0:
        return None
    return flat.inputs[0], [flat, tr, back, *nodes]


def _keys_side(ix: Index, tensor: str, heads: int) -> tuple[str, int, list[OnnxNode]]:
    """The keys' (or values') heads behind ``tensor`` [B, heads, keys, dh]: repeat_kv undone for
    every grouping that divides ``heads``, the cache's Concat, (heads tensor, past, nodes)."""
    shape = ix.g.tensors[tensor].shape
    for groups in range(heads, 0, -1):
        if heads % groups:
            continue
        got = _keys(ix, tensor, groups)
        if got[2] or groups == 1:
            base = ix.g.tensors[got[0]].shape
            if len(base) == 4 and base[1] * groups == shape[1]:
                return got
    return tensor, 0, []


def _softmax_out(ix: Index, soft: OnnxNode) -> tuple[str, list[OnnxNode]]:
    """The probabilities after ``soft``: through a NaN guard (:func:`nan_guarded`) and the Casts an
    exporter writes around a float32 softmax of 16-bit scores."""
    p, nodes = nan_guarded(ix, soft)
    while True:
        cast = ix.only_consumer(p)
        if cast is None or cast.op != "Cast":
            return p, nodes
        nodes.append(cast)
        p = cast.outputs[0]


def _mask_kind(ix: Index, mask: str | None, s: int, past: int) -> tuple[bool, int]:
    """(causal, window) of an additive constant ``mask`` [..., S, past + S]: causal when every
    later key is hidden and every earlier one seen; a window ``W`` when each query sees exactly its
    last ``W`` positions (itself included) and at least one query's view is cut. (False, 0) else."""
    import numpy as np

    t = ix.g.tensors.get(mask or "")
    keys = past + s
    if t is None or not t.const or len(t.shape) < 2 or t.shape[-2:] != (s, keys):
        return False, 0
    value = ix.g.value(t.name, 2**22)
    if value is None:
        return False, 0
    hidden = np.asarray(value, dtype=np.float64).reshape(-1, s, keys) < -1e4
    row = np.arange(s)[:, None] + past  # each query's own position
    col = np.arange(keys)[None, :]
    if not (hidden[:, col > row]).all():
        return False, 0
    seen = (~hidden).sum(axis=2)
    widest = int(seen.max())
    if widest >= keys or widest < 1:
        return True, 0
    inside = (col <= row) & (col > row - widest)
    if (hidden == ~inside).all():
        return True, widest
    return False, 0


def swiglu(ix: Index, sig: OnnxNode) -> Match | None:
    """``down(gate(x) * Sigmoid(gate(x)) * up(x))``, the products in either order (module docstring)."""
    gate_out = sig.inputs[0]
    gate = _linear(ix, gate_out)
    users = ix.consumers.get(gate_out, [])
    silu = ix.only_consumer(sig.outputs[0])
    if gate is None or gate[2] is not None or silu is None or silu.op != "Mul" or len(users) != 2 \
            or ix.other(silu, sig.outputs[0]) != gate_out or gate_out in ix.outputs:
        return None
    prod = ix.only_consumer(silu.outputs[0])
    up_out = ix.other(prod, silu.outputs[0]) if prod is not None and prod.op == "Mul" else None
    up = _linear(ix, up_out) if up_out is not None else None
    if prod is None or up is None or up[2] is not None or up[0] != gate[0] or ix.only_consumer(up_out or "") is None:
        return None
    down = ix.only_consumer(prod.outputs[0])
    if down is None or down.op != "MatMul" or down.inputs[0] != prod.outputs[0] \
            or not ix.g.tensors[down.inputs[1]].const or len(ix.g.tensors[down.inputs[1]].shape) != 2:
        return None
    if ix.g.tensors[gate[1]].shape != ix.g.tensors[up[1]].shape:
        return None
    nodes = (*gate[3], sig, silu, *up[3], prod, down)
    return Match("swiglu", nodes, (gate[0],), down.outputs[0],
                 {"weights": (gate[1], up[1], down.inputs[1])})


#: The decoder matchers by the op type each starts from (:func:`~.onnx_patterns.find_patterns`).
DECODER = {"Softmax": rotary_attention, "Sigmoid": swiglu}
