"""Selective activation recomputation by module, as Megatron-Core names the modules.

Megatron-Core's ``TransformerConfig.recompute_modules`` (with ``recompute_granularity =
"selective"``; default ``["core_attn"]``) checkpoints chosen parts of every layer:
``core_attn`` (the attention kernel), ``mlp`` (a dense MLP, its pre-norm fused into its
first GEMM as Transformer Engine runs it), ``moe`` (a whole mixture-of-experts sub-layer
after its norm: router, dispatch, experts, combine, shared experts), ``moe_act`` (the
experts' activation), ``layernorm`` (the norm that opens an attention or MLP sub-layer),
``mla_up_proj`` (multi-head latent attention's query and key-value up projections with
their norms) and ``shared_experts``. ``core_attn``, ``mlp``, ``moe`` and
``shared_experts`` are checkpointed: their inputs are kept, nothing inside them is, and
their forward runs again before their backward. ``moe_act``, ``layernorm`` and
``mla_up_proj`` are checkpointed *without output* (Megatron-Core's
``CheckpointWithoutOutput``): besides their insides, the copy of their output that the
ops after them keep is freed and recomputed.

Here a module is a set of ops of a block (:mod:`mapper.cluster.blocks`: a block is one
sub-layer) found by their kinds and edges (:func:`tag_block`). What one op keeps for its
backward pass (each activation input, or an attention's own scores or log-sum-exp rows;
:mod:`mapper.cluster.profile`) is dropped when its consumer and producer lie in one
recomputed module, or its producer in a recomputed module without output; an input a
recomputed module reads from outside is kept once (the checkpoint's). The recomputation
costs the modules' forward kernels and collectives once more per micro-batch.

Besides none, ``selective`` and ``full`` the planner tries one module set
(:func:`ladder`): ``core_attn`` with the modules Megatron-Core checkpoints
without output that the graph has (``layernorm``, ``moe_act``, ``mla_up_proj``:
a norm, an activation and two small up projections, cheap to run again for the
copies they free; Megatron-Core's ``CheckpointWithoutOutput``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from mapper.cluster.blocks import Block
from mapper.cluster.flops import forward_flops
from mapper.core.graph import TaskGraph
from mapper.core.ops import ATTENTION_OPS
from mapper.parallel.layout import MODULES, RECOMPUTE, SELECTIVE, WITHOUT_OUTPUT

BIT = {m: 1 << i for i, m in enumerate(MODULES)}
DISCARD = sum(BIT[m] for m in WITHOUT_OUTPUT)
NORMS = frozenset({"rmsnorm", "layernorm"})
ROUTED = frozenset({"topk", "moe_dispatch", "grouped_matmul", "moe_combine"})
#: Suffixes the tensor-parallel split adds to a task's name (micro-batch, collective, rank).
_SUFFIX = re.compile(r"(\.b\d+)?(\.(allreduce|allgather))?(\.t\d+)?$")


def mask(recompute: str) -> int:
    """The module bits a layout's ``recompute`` names (0 for none; full is not a module set)."""
    if recompute in ("none", "full"):
        return 0
    names = SELECTIVE if recompute == "selective" else recompute.split("+")
    return sum(BIT[m] for m in names)


def origin(name: str, tags: dict[str, int]) -> int:
    """The module bits of a task of the split (and fused) graph, by its block task's name."""
    if name in tags:
        return tags[name]
    return tags.get(_SUFFIX.sub("", name), 0)


def tag_block(g: TaskGraph) -> list[int]:
    """Module bits of each task of block ``g`` (module docstring), in task order."""
    tasks = g.tasks
    prod = [[o.producer for o in t.operands if o.kind == "task" and o.producer is not None] for t in tasks]
    outside = [any(o.kind == "input" for o in t.operands) for t in tasks]  # reads the block's input
    bits = [0] * len(tasks)

    def add(i: int, m: str) -> None:
        bits[i] |= BIT[m]

    def residual(i: int) -> bool:  # a norm reading the residual stream opens a sub-layer
        t = tasks[i]
        first = t.operands[0] if t.operands else None
        if first is None:
            return False
        return first.kind == "input" or (first.producer is not None and tasks[first.producer].op == "add")

    attention = any(t.op in ATTENTION_OPS for t in tasks)
    moe = any(t.op in ROUTED for t in tasks)
    gemms = sum(1 for t in tasks if t.op == "matmul")
    norms = [i for i, t in enumerate(tasks) if t.op in NORMS and residual(i)]
    opens = attention or moe or gemms >= 2  # a sub-layer, not the final norm or the LM head
    for i in norms if opens else ():
        add(i, "layernorm")
    for i, t in enumerate(tasks):
        if t.op in ATTENTION_OPS:
            add(i, "core_attn")
        if t.op == "mla_attention":  # q and kv: their up projections and the norms before them
            for o in t.operands[:2]:
                j = o.producer
                if o.kind == "task" and j is not None and tasks[j].op == "matmul":
                    add(j, "mla_up_proj")
                    for k in prod[j]:
                        if tasks[k].op in NORMS and not residual(k):
                            add(k, "mla_up_proj")
    if moe:
        routed_after = _descendants(prod, [i for i, t in enumerate(tasks) if t.op in ROUTED])
        before = _ancestors(prod, [i for i, t in enumerate(tasks) if t.op in ("topk", "moe_dispatch")])
        for i, t in enumerate(tasks):
            if i in norms or (t.op == "add" and outside[i]):
                continue  # the sub-layer's norm and its residual add
            add(i, "moe")
            if t.op not in ROUTED and any(tasks[k].op == "grouped_matmul" for k in prod[i]):
                add(i, "moe_act")
            if i not in routed_after and i not in before:
                add(i, "shared_experts")
    elif not attention and gemms >= 2:
        for i, t in enumerate(tasks):
            if not (t.op == "add" and outside[i]):
                add(i, "mlp")
    return bits


def names(g: TaskGraph) -> dict[str, int]:
    """:func:`tag_block` by task name (the tasks with some module only)."""
    return {t.name: b for t, b in zip(g.tasks, tag_block(g)) if b}


def module_flops(graph: TaskGraph, blocks: Sequence[Block],
                 reps: dict[int, TaskGraph]) -> tuple[tuple[int, float], ...]:
    """Forward FLOPs of ``graph`` (as :func:`mapper.cluster.flops.forward_flops` counts them) by
    module bits, over its ``blocks`` (``reps``: a block graph of each signature)."""
    bits_of = {sig: tag_block(g) for sig, g in reps.items()}
    out: dict[int, float] = {}
    for b in blocks:
        for t, bits in zip(b.tasks, bits_of[b.signature]):
            if bits:
                out[bits] = out.get(bits, 0.0) + forward_flops(graph.tasks[t])
    return tuple(sorted(out.items()))


def _descendants(prod: list[list[int]], start: Iterable[int]) -> set[int]:
    """Tasks reachable from ``start`` (them included), tasks in topological order."""
    seen = set(start)
    for i, ps in enumerate(prod):
        if any(p in seen for p in ps):
            seen.add(i)
    return seen


def _ancestors(prod: list[list[int]], start: Iterable[int]) -> set[int]:
    """Tasks ``start`` depends on (them included)."""
    seen = set(start)
    stack = list(seen)
    while stack:
        for p in prod[stack.pop()]:
            if p not in seen:
                seen.add(p)
                stack.append(p)
    return seen


def dropped(kept: Iterable[tuple[float, int, int, int]], bits: int) -> float:
    """Bytes no longer kept when modules ``bits`` are recomputed, of what a block's ops keep:
    ``(bytes, consumer's bits, producer's bits, tensor)`` each (module docstring)."""
    total = 0.0
    inputs: dict[int, tuple[float, float]] = {}  # tensor read from outside a recomputed module: (sum, largest)
    for nbytes, consumer, producer, tensor in kept:
        if consumer & producer & bits or producer & bits & DISCARD:
            total += nbytes
        elif consumer & bits:
            s, big = inputs.get(tensor, (0.0, 0.0))
            inputs[tensor] = (s + nbytes, max(big, nbytes))
    return total + sum(s - big for s, big in inputs.values())


def ladder(present: int) -> tuple[str, ...]:
    """The ``recompute`` values the planner tries on a graph whose blocks hold modules
    ``present`` (bits): none, selective, the set of the module docstring when it differs from
    selective on those modules, and full."""
    bits = sum(BIT[m] for m in ("core_attn", *WITHOUT_OUTPUT)) & present
    extra = () if bits in (0, BIT["core_attn"] & present) else ("+".join(m for m in MODULES if BIT[m] & bits),)
    return (*RECOMPUTE[:2], *extra, RECOMPUTE[2])
