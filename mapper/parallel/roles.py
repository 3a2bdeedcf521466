"""Which ops a split plan may cut, and how (:mod:`mapper.parallel`).

Two questions about the forward graph:

* **Batch**: may a task run on a slice of the batch? Activations carry the
  batch in their leading axis (``[B*S, H]`` for a Transformer, ``[N, C, H,
  W]`` for a CNN); an op may be cut along it when each output row depends only
  on the same input rows (:func:`batch_blocker`).
* **Tensor**: Megatron-LM's intra-layer splits (Shoeybi et al., "Megatron-LM",
  arXiv:1909.08053, section 3): a GEMM whose weight is cut by columns,
  followed by ops that work column by column (bias, activation, attention by
  heads), ending in a GEMM whose weight is cut by rows, whose partial sums an
  all-reduce combines (:func:`tensor_regions`); and a convolution cut by output
  channels with the channel-wise ops after it, whose pieces an all-gather
  joins. Everything else runs whole on every rank, as in Megatron.
"""

from __future__ import annotations

from dataclasses import dataclass

from mapper.core.graph import Operand, Task, TaskGraph

#: Ops whose output element depends only on the same input element.
POINTWISE = frozenset({"relu", "gelu", "elementwise", "add", "sub", "mul", "div", "allreduce"})
#: Ops that work per channel of an ``[N, C, ...]`` tensor (conv regions).
CHANNELWISE = frozenset({"batchnorm", "instancenorm", "relu", "gelu", "elementwise", "maxpool", "avgpool"})


def _axis(axis: int, ndim: int) -> int:
    return axis + ndim if axis < 0 else axis


#: Opaque kinds (imported ONNX ops) that carry state along their leading axis.
RECURRENT = frozenset({"LSTM", "GRU", "RNN", "Scan", "Loop"})


def spans_batch(task: Task, o: Operand) -> bool:
    """True for a constant operand of a pointwise op or a concat laid out like its output, batch
    axis and all (a mask or an embedding an exporter expanded to the batch): cut along the batch
    with the activations, each piece holding its rows."""
    out = task.output
    return (task.op in POINTWISE or task.op in ("concat", "opaque")) and out is not None \
        and len(o.type.shape) == len(out.shape) and o.type.shape[0] == out.shape[0] > 1


def batch_blocker(task: Task, parts: int) -> str | None:
    """Why ``task`` cannot run on 1/``parts`` of the batch (its leading axis), or None."""
    op, out = task.op, task.output
    if op == "task" or task.explicit_cost:
        return "it has explicit costs, not an op the split can cut"
    if out is None or not out.shape or out.shape[0] % parts:
        return f"its output's leading axis {out.shape[:1] if out else ()} does not divide by {parts}"
    nd = len(out.shape)
    acts = [o for o in task.operands if o.kind != "weight"]
    for o in acts:
        if not o.type.shape or o.type.shape[0] % parts:
            return f"operand {o.name} ({o.type}) has no leading axis that divides by {parts}"
        if o.type.layout != "dense":
            return f"operand {o.name} is sparse"
    if op in POINTWISE:
        for o in task.operands:
            if o.kind == "weight" and len(o.type.shape) == nd and o.type.shape[0] != 1 and not spans_batch(task, o):
                return f"weight {o.name} ({o.type}) spans the batch axis"
        return None
    if op == "matmul":
        w = task.operands[1]
        if w.kind == "weight" and len(w.type.shape) == nd and nd >= 3 and w.type.shape[0] != 1:
            return (f"weight {w.name} ({w.type}) spans the batch axis: each of its {w.type.shape[0]} "
                    "matrices multiplies its own batch row")
        if w.kind == "weight" or len(w.type.shape) >= 3:
            return None
        return "its second operand is an activation whose leading axis is not the batch"
    if op in ("conv2d", "conv_transpose2d", "maxpool", "avgpool", "batchnorm", "instancenorm", "embedding"):
        return None
    if op in ("layernorm", "rmsnorm", "swiglu", "fft", "ifft"):
        return None if nd >= 2 else "it works along the only axis"
    if op == "softmax":
        return None if _axis(task.attr("axis", -1), nd) != 0 else "it normalises along the batch axis"
    if op == "topk":
        return None if nd >= 2 else "it works along the only axis"
    if op in ("moe_dispatch", "grouped_matmul", "moe_combine"):
        return None  # each token's rows, routed within the slice (the routing is per token)
    if op in ("attention", "rotary", "mla_attention"):
        seq = task.attr("seq")
        return None if (out.shape[0] // parts) % seq == 0 else f"a slice would cut a sequence of {seq} tokens"
    if op in ("concat", "split"):
        return None if _axis(task.attr("axis", 0), nd) != 0 else "it joins or cuts along the batch axis"
    if op == "transpose":
        perm = task.attr("perm")
        return None if perm is not None and perm[0] == 0 else "it moves the batch axis"
    if op == "reshape":
        return None  # a leading axis that divides: checked on the output above
    if op == "opaque":  # an op of unknown rule (an imported mask, cast, comparison or gather)
        if task.attr("kind") in RECURRENT:
            return "it carries state along its leading (sequence) axis"
        for o in task.operands:
            if o.kind != "weight" and o.type.shape[0] != out.shape[0]:
                return f"operand {o.name} ({o.type}) does not lead with the output's batch axis"
            if o.kind == "weight" and len(o.type.shape) == nd and o.type.shape[0] != 1 and not spans_batch(task, o):
                return f"weight {o.name} ({o.type}) spans the batch axis"
        return None  # every operand leads with the batch: rows are cut with the activations
    if op == "gather_nd":  # a table's rows picked by a batch of indices, or each batch row's own
        data, idx = task.operands
        if data.kind == "weight":
            return None if task.attr("batch_dims", 0) == 0 and len(idx.type.shape) >= 2 else \
                "its indices' leading axis is not the batch"
        return None if task.attr("batch_dims", 0) >= 1 else "its indices pick across the batch axis"
    if op == "scatter_elements":
        if _axis(task.attr("axis", 0), nd) == 0:
            return "it writes along the batch axis"
        for o in task.operands:
            if o.kind == "weight" or o.type.shape[0] != out.shape[0]:
                return f"operand {o.name} ({o.type}) does not lead with the output's batch axis"
        return None
    if op == "cumsum":
        return None if _axis(task.attr("axis", 0), nd) != 0 else "it sums along the batch axis"
    if op == "reduce":
        axis = task.attr("axis")
        return None if axis is not None and _axis(axis, len(acts[0].type.shape)) != 0 else \
            "it reduces along the batch axis"
    return f"op {op} has no batch rule"


@dataclass(frozen=True, slots=True)
class Region:
    """Tasks cut together by a tensor-parallel split.

    ``members`` are cut along ``axis`` of their outputs (the last for GEMM
    regions, the channels for a convolution region); ``groups[i]`` is the
    number of blocks that axis holds for ``members[i]`` (3 for a fused Q|K|V
    projection before attention). ``row`` is the GEMM whose weight is cut by
    rows (its output is partial: an all-reduce follows); None for a
    convolution region, whose last member's pieces an all-gather joins.
    """

    members: tuple[int, ...]
    groups: tuple[int, ...]
    row: int | None
    axis: int

    @property
    def end(self) -> int:
        return self.row if self.row is not None else self.members[-1]


def _gemm_weight(task: Task) -> bool:
    """A GEMM of an activation by a weight: ``matmul`` by a 2-D weight, or ``grouped_matmul`` by
    its experts' ``[E, K, N]`` weights (each expert's matrix cut alike: Megatron-Core's expert
    tensor parallelism, ``expert_tensor_parallel_size``)."""
    if task.op == "grouped_matmul":
        return (len(task.operands) == 3 and task.operands[2].kind == "weight" and task.operands[0].kind != "weight"
                and len(task.operands[2].type.shape) == 3)
    return (task.op == "matmul" and len(task.operands) == 2 and task.operands[1].kind == "weight"
            and len(task.operands[1].type.shape) == 2 and task.operands[0].kind != "weight")


def _weight(task: Task) -> Operand:
    """The weight operand of a :func:`_gemm_weight` task."""
    return task.operands[2 if task.op == "grouped_matmul" else 1]


#: Ops a tensor split must cut: left whole, every rank would repeat a layer's main work. Multi-head
#: latent attention is cut by heads: its query and key-value up-projections by columns, the
#: output projection by rows (Megatron-Core's MLA under tensor parallelism).
MUST_CUT = frozenset({"grouped_matmul", "mla_attention"})


def uncut(g: TaskGraph, regions: tuple[Region, ...]) -> tuple[int, str] | None:
    """The first task of :data:`MUST_CUT` that no region cuts, and why, or None."""
    cut = {m for reg in regions for m in reg.members} | {reg.row for reg in regions if reg.row is not None}
    for t in g.topo_order:
        task = g.tasks[t]
        if task.op in MUST_CUT and t not in cut:
            why = ("its query and key-value up-projections, heads and output projection are not a column-then-row "
                   "region whose heads divide by the ranks" if task.op == "mla_attention" else
                   "its experts' GEMMs are not a column-then-row pair whose widths divide by the ranks")
            return t, why
    return None


def _gemm_region(g: TaskGraph, start: int, k: int, taken: set[int]) -> Region | None:
    """The Megatron pair starting at column GEMM ``start``, or None."""
    members = [start]
    inside = {start}
    row: int | None = None
    queue = [start]
    while queue:
        m = queue.pop(0)
        for v in g.succ_tasks(m):
            if v in inside or v == row:
                continue
            task = g.tasks[v]
            if v in taken:
                return None
            if _gemm_weight(task) and task.operands[0].producer in inside:
                if row is not None or _weight(task).type.shape[-2] % k:
                    return None
                row = v
                continue
            if task.op == "mla_attention":
                partner = _mla_partner(g, task, v, inside, taken, k)
                if partner is None:
                    return None
                if partner >= 0:  # the other up-projection: a second column GEMM of the region
                    members.append(partner)
                    inside.add(partner)
            elif not _column_local(g, task, inside):
                return None
            members.append(v)
            inside.add(v)
            queue.append(v)
    if row is None or any(g.tasks[m].name in g.outputs for m in members):
        return None
    members.sort(key=g.topo_order.index)
    attention = [m for m in members if g.tasks[m].op in ("attention", "mla_attention")]
    glu = [m for m in members if g.tasks[m].op == "swiglu"]
    if len(attention) + len(glu) > 1:
        return None
    # what a rank's columns hold before the op that mixes them: q|k|v (3 blocks), a grouped-query
    # qkv (whole groups: 1), gate|up (2)
    before = _ancestors(g, (attention or glu)[0], inside) if attention or glu else set()
    blocks = 2 if glu else 3
    if attention:
        att = g.tasks[attention[0]]
        heads, kv = att.attr("heads"), att.attr("kv_heads") or att.attr("heads")
        if heads % k or kv % k:
            return None
        blocks = 3 if kv == heads and att.op == "attention" else 1  # MLA's q and kv hold whole heads
    groups = tuple(blocks if m in before else 1 for m in members)
    starts = region_starts(g, members)
    for m, grp in zip(members, groups):
        task = g.tasks[m]
        out = task.output
        if out is None or out.shape[-1] % (grp * k):
            return None
        if task.op not in ("attention", "mla_attention") and m not in starts and any(
                o.kind == "task" and o.producer not in inside for o in task.operands):
            return None
    return Region(tuple(members), groups, row, -1)


def _mla_partner(g: TaskGraph, task: Task, v: int, inside: set[int], taken: set[int], k: int) -> int | None:
    """For ``mla_attention`` ``v`` reached from one of its up-projections: the other (a column GEMM
    that feeds only it), -1 when both are inside already, None when it cannot join. Its shared
    rotary key ``kr`` stays whole on every rank (Megatron-Core's MLA under tensor parallelism)."""
    partner = -1
    for o in task.operands[:2]:
        p = o.producer
        if p is None or p in inside:
            continue
        other = g.tasks[p]
        if (p in taken or not _gemm_weight(other) or g.succ_tasks(p) != (v,) or other.output is None
                or other.output.shape[-1] % k or partner >= 0):
            return None
        partner = p
    return partner


def region_starts(g: TaskGraph, members: tuple[int, ...] | list[int]) -> set[int]:
    """The members of a region that read its input from outside it: its first, and the other
    column GEMMs that do (the key-value up-projection of multi-head latent attention); each
    rank's input gradients of theirs are summed in the backward pass (Megatron's ``f``)."""
    inside = set(members)
    first = set(members[:1])  # a region's first member always is one (a convolution's too)
    return first | {m for m in members if _gemm_weight(g.tasks[m]) and g.tasks[m].operands[0].producer not in inside}


def _column_local(g: TaskGraph, task: Task, inside: set[int]) -> bool:
    """Whether ``task`` works column by column on region tensors."""
    if task.op in ("attention", "rotary", "swiglu"):  # by heads, groups of heads, gate|up pairs
        return len(task.operands) == 1 and task.operands[0].producer in inside
    if task.op not in POINTWISE or task.op == "allreduce" or task.output is None:
        return False
    width = task.output.shape[-1]
    for o in task.operands:
        if o.kind == "task" and o.producer not in inside:
            return False
        if o.kind != "task" and (len(o.type.shape) != 1 or o.type.shape[0] != width):
            return False
    return True


def _ancestors(g: TaskGraph, t: int, inside: set[int]) -> set[int]:
    seen: set[int] = set()
    stack = [p for p in g.pred_tasks(t) if p in inside]
    while stack:
        p = stack.pop()
        if p not in seen:
            seen.add(p)
            stack.extend(q for q in g.pred_tasks(p) if q in inside)
    return seen


def _conv_region(g: TaskGraph, start: int, k: int, taken: set[int]) -> Region | None:
    """A convolution cut by output channels with the channel-wise chain after it."""
    task = g.tasks[start]
    w = task.operands[1]
    if w.kind != "weight" or task.attr("groups", 1) != 1 or w.type.shape[0] % k:
        return None
    members = [start]
    while True:
        succ = g.succ_tasks(members[-1])
        if len(succ) != 1 or g.tasks[members[-1]].name in g.outputs:
            break
        v = succ[0]
        nxt = g.tasks[v]
        if v in taken or nxt.op not in CHANNELWISE or len(nxt.operands) != 1:
            break
        members.append(v)
    return Region(tuple(members), (1,) * len(members), None, 1)


def tensor_regions(g: TaskGraph, k: int, vocab: bool = False) -> tuple[Region, ...]:
    """The graph's Megatron pairs and convolution regions for ``k`` ranks, in topological order.

    With ``vocab``, also Megatron's vocabulary-parallel ends (Shoeybi et al., section 3): an
    embedding whose table is cut by rows (each rank looks up its share of the vocabulary, an
    all-reduce sums them) and a GEMM that gives a graph output (the LM head) cut by columns,
    its pieces gathered."""
    regions: list[Region] = []
    taken: set[int] = set()
    for t in g.topo_order:
        if t in taken:
            continue
        task = g.tasks[t]
        region = None
        out = task.output
        if vocab and task.op == "embedding" and task.operands[1].kind == "weight" \
                and task.operands[1].type.shape[0] % k == 0:
            region = Region((), (), t, -1)
        elif vocab and _gemm_weight(task) and out is not None and task.name in g.outputs and out.shape[-1] % k == 0:
            region = Region((t,), (1,), None, -1)
        elif _gemm_weight(task) and task.output is not None and task.output.shape[-1] % k == 0:
            region = _gemm_region(g, t, k, taken)
        elif task.op == "conv2d" and len(task.operands) == 2:
            region = _conv_region(g, t, k, taken)
        if region is not None:
            regions.append(region)
            taken.update(region.members)
            if region.row is not None:
                taken.add(region.row)
    return tuple(regions)
