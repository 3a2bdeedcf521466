"""Context parallelism: every sequence cut over ``C`` ranks (``--parallel ...,context=C``).

Megatron-Core's context parallelism (``context_parallel_size``; its
"Context parallelism" guide) splits each sequence of ``S`` tokens over the
``C`` ranks of a context group, placed between the tensor and data ranks
(``world = tensor x pipeline x context x data``). Every op but attention
sees ``S / C`` tokens of each sequence, so the plan model prices a block at
``S / C`` tokens (:func:`context_graph` marks attention and the rotary
embedding with sequences of ``S / C``; :func:`context_profile` prices it).

Attention runs as Transformer Engine's ring (``cp_comm_type = "p2p"``,
Megatron-Core's default; TE's ``AttnFuncWithCPAndKVP2P``): the sequence is cut
in ``2C`` chunks and rank ``r`` holds chunks ``r`` and ``2C - 1 - r``, so
under a causal mask every rank does the same work. In ``C`` steps each rank
attends its queries to one rank's keys and values while it passes them on to
the next rank. Every step covers half of an ``S/C x S/C`` block of the score
matrix (the diagonal step causally, the others half the queries or half the
keys), which is what a causal attention over ``S / C`` tokens costs: the block
price holds one step, ``a_f`` forward and ``a_b`` backward. A step's
send of ``n`` bytes (the rank's K and V of ``S / C`` positions) is priced by
:func:`mapper.parallel.collectives.send` (across nodes once the group's ranks,
``tensor`` apart, span more than a node) and overlaps the step's attention
only as far as that compute lasts::

    forward   a_f + (C - 1) max(a_f, send(n))
    backward  2 max(a_b, send(n)) + (C - 2) max(a_b, send(2 n))

(the backward's buffer holds K, V and the partial dK, dV of the chunk it
visits: its first step sends K and V on, the middle ones both, the last the
finished dK and dV to their owner, each send beside that step's attention:
TE's ``AttnFuncWithCPAndKVP2P.backward``). The Llama 3 paper's all-gather of
K and V before attention (Grattafiori et al., arXiv 2407.21783, section
3.3.2) is the other form (``cp=allgather``; Megatron-Core's ``cp_comm_type =
"all_gather"``, TE's ``AttnFuncWithCPAndKVAllGather``): each rank all-gathers
the K and V of the whole sequence, ``C n`` bytes, over its context group, then
attends its two load-balanced chunks' queries to them, ``C`` steps' worth of
attention; the backward gathers K and V again and reduce-scatters their
gradients. Llama 3 leaves the collectives exposed ("the all-gather
communication latency is exposed in the critical path"; small under
grouped-query attention, where K and V are a fraction of Q), so::

    forward   C a_f + allgather(C n)
    backward  C a_b + allgather(C n) + reducescatter(C n)

each priced by :func:`mapper.parallel.collectives.collective` over the ``C``
ranks, ``tensor`` apart (so ``gpus_per_node / tensor`` of them a node). The
third form is DeepSpeed-Ulysses (Jacobs et al., arXiv 2309.14509; ``cp=a2a``,
Megatron-Core's ``cp_comm_type = "a2a"``), the fourth Megatron-Core's hierarchical
``a2a+p2p`` (an all-to-all over ``K`` of the ranks, a ring over the others): both in
:mod:`mapper.cluster.ulysses`, which prices their attention at the shape it runs. Every rank of
an all-to-all needs whole heads of Q, K and V: the heads and the key-value heads of each of the
``tensor`` ranks must divide by the all-to-all's ranks (TE asserts ``num_heads % cp_size == 0``
for Q, K and V; no key-value head is replicated), else exit 2 (:func:`a2a_reason`). The ring is
Megatron-Core's default and what NVIDIA's published long-sequence runs use; the planner tries
all four when it chooses ``context`` itself (the all-to-alls where the heads allow them,
:class:`mapper.cluster.space.Variants`).

Memory: activations are those of ``S / C`` tokens (the block priced there),
plus the ring's buffers while a layer runs, once per rank (not per
micro-batch in flight): forward, TE keeps each step's received K and V in a
list of ``C`` buffers until the layer's forward returns (``C n``); backward,
K, V and their gradients, double-buffered (``4 n``): ``max(C, 4) n``; the all-gather
holds the gathered K and V forward (``C n``), and backward those and their
gradients before the reduce-scatter (``2 C n``). The all-to-alls' (:mod:`mapper.cluster.ulysses`)
keep one pass's tensors while a layer runs and the output once more per micro-batch in flight
(none where ``core_attn`` is recomputed: the checkpoint keeps the inputs alone). Gradients are reduced, and the
distributed optimizer sharded, over the ``data x context`` ranks that hold
the same weights (Megatron-Core's ``data_parallel_group_with_cp``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from mapper.cluster.profile import BlockCost, Profile
from mapper.core.graph import DTYPE_BYTES, Task, TaskGraph
from mapper.core.ops import ATTENTION_OPS, infer
from mapper.errors import OptionsError
from mapper.parallel.collectives import Network, collective, send
from mapper.parallel.layout import Layout, LayoutSpec

#: Ops that carry the sequence length as ``seq``: under context parallelism a rank's sequences are ``S / C``.
SEQ_OPS = frozenset({"attention", "mla_attention", "rotary"})
#: Buffers of K and V and their gradients the ring's backward holds, in units of one step's send
#: (double-buffered; the forward holds ``C``: module docstring).
RING_BUFFERS = 4


def sequence_of(graph: TaskGraph) -> int:
    """The sequence length of ``graph``'s attention (0 without attention)."""
    return next((int(t.attr("seq")) for t in graph.tasks if t.op in ATTENTION_OPS), 0)


def check_context(graph: TaskGraph, gpus: int, given: LayoutSpec) -> None:
    """An OptionsError (exit 2) for a ``context`` the graph or the GPUs cannot take: a graph
    without attention, a sequence that does not cut into ``2 C`` chunks (Transformer Engine's
    load-balanced ring needs that), or ``C`` not dividing the GPUs; and :func:`check_hierarchy`."""
    check_hierarchy(graph, given)
    c = given.context
    if given.cp is not None and c == 1:
        raise OptionsError(f"cp={given.cp} says how context-parallel ranks share keys and values; context=1 has "
                           "none (give context=C > 1, or leave context out)", obj="--parallel")
    if c is None or c == 1:
        return
    seq = sequence_of(graph)
    if not seq:
        raise OptionsError(f"context={c} cuts sequences over ranks; this graph has no attention op",
                           obj="--parallel")
    if seq % (2 * c):
        raise OptionsError(f"context={c}: the sequence of {seq:,} tokens does not cut into 2 x {c} = {2 * c} equal "
                           "chunks (the load-balanced causal ring gives each rank two)", obj="--parallel")
    ranks = (given.tensor or 1) * (given.pipeline or 1) * c * (given.data or 1)
    if gpus % ranks:
        raise OptionsError(f"context={c}: tensor x pipeline x context{' x data' if given.data else ''} = "
                           f"{ranks:,} does not divide the {gpus:,} GPUs", obj="--parallel")
    if given.cp == "a2a" and (why := a2a_reason(graph, given.tensor or 1, c)):
        raise OptionsError(why, obj="--parallel")
    k = given.cp_a2a
    if given.cp == "a2a+p2p" and k is not None and c % k:
        raise OptionsError(f"cp_a2a={k} must divide context={c} (its all-to-all groups of {k} ranks times its "
                           f"rings make the context ranks)", obj="--parallel")


def check_hierarchy(graph: TaskGraph, given: LayoutSpec) -> None:
    """An OptionsError (exit 2) for ``cp_a2a`` without ``cp=a2a+p2p``, or ``cp=a2a+p2p`` whose
    all-to-all cannot cut the heads of a given tensor degree (:mod:`mapper.cluster.ulysses`)."""
    k = given.cp_a2a
    if k is not None and given.cp != "a2a+p2p":
        raise OptionsError(f"cp_a2a={k} is the all-to-all level of cp=a2a+p2p (Megatron-Core's "
                           "hierarchical_context_parallel_sizes); give cp=a2a+p2p with it", obj="--parallel")
    if k is not None and given.tensor is not None and (why := a2a_reason(graph, given.tensor, k, "a2a+p2p")):
        raise OptionsError(why, obj="--parallel")


def head_counts(task: Task) -> tuple[int, int]:
    """Query heads and key-value heads of attention ``task`` (multi-head latent attention: one
    key and value per query head once up-projected)."""
    heads = int(task.attr("heads"))
    return heads, int(task.attr("kv_heads") or heads) if task.op == "attention" else heads


def a2a_heads(graph: TaskGraph) -> int:
    """What ``tensor x context`` must divide for ``cp=a2a``: the greatest common divisor of every
    attention op's heads and key-value heads (0 without attention)."""
    return math.gcd(0, *(math.gcd(*head_counts(t)) for t in graph.tasks if t.op in ATTENTION_OPS))


def a2a_reason(graph: TaskGraph, tensor: int, c: int, kind: str = "a2a") -> str:
    """Why ``cp=kind`` cannot cut ``graph``'s heads over ``tensor x c`` ranks ("" when it can): ``c``
    the context degree for ``a2a``, the all-to-all's ``cp_a2a`` for ``a2a+p2p``."""
    task = next((t for t in graph.tasks if t.op in ATTENTION_OPS and math.gcd(*head_counts(t)) % (tensor * c)),
                None)
    if task is None:
        return ""
    heads, kv = head_counts(task)
    level = "context" if kind == "a2a" else "cp_a2a"
    return (f"cp={kind} gives each of tensor x {level} = {tensor} x {c} ranks whole heads of Q, K and V (DeepSpeed-"
            f"Ulysses; Transformer Engine asserts it); {task.name} has {heads} heads and {kv} key-value heads, "
            f"which do not divide by {tensor * c} (give a {level} or tensor degree that divides them, or cp=ring)")


def context_ranks(lay: Layout) -> str:
    """``4 context-parallel ranks x `` for the reports' GPU count of a layout with context parallelism."""
    return f"{lay.context} context-parallel ranks x " if lay.context > 1 else ""


def context_graph(graph: TaskGraph, c: int) -> TaskGraph:
    """``graph`` with every sequence-carrying op's ``seq`` cut to ``S / C`` (the same rows): a
    batch of ``B`` sequences becomes ``B C`` of ``S / C``, so a micro-batch cut of it holds one
    rank's share of a context group, and a causal attention over it costs one ring step."""
    if c == 1:
        return graph
    tasks = []
    for t in graph.tasks:
        if t.op in SEQ_OPS and t.output is not None:
            attrs = {**dict(t.attrs), "seq": int(t.attr("seq")) // c}
            info = infer(t.op, [o.type for o in t.operands], attrs)
            t = replace(t, attrs=info.attrs, flops=info.flops, bytes_read=info.bytes_read,
                        bytes_written=info.bytes_written)
        tasks.append(t)
    return replace(graph, tasks=tuple(tasks))


def context_profile(profile: Profile, c: int) -> Profile:
    """The block prices of ``profile``'s graph at ``S / C`` tokens a sequence (module docstring)."""
    return Profile(context_graph(profile.graph, c), profile.node, profile.gpu, profile.prepare, profile.optimizer)


def kv_per_position(task: Task, tensor: int) -> float:
    """Bytes of keys and values one of ``tensor`` ranks holds per position of a sequence for
    attention ``task``: ``2 kv_heads/t head_dim`` elements (whole heads; at least one) for
    ``attention``; for multi-head latent attention its up-projected keys (``heads (dn + dr)``, the
    shared rotary part per head) and values (``heads dv``) over ``t``; 0 for other ops."""
    if task.output is None:
        return 0.0
    size = DTYPE_BYTES.get(task.output.dtype, 2)
    heads = int(task.attr("heads"))
    if task.op == "attention":
        kv = int(task.attr("kv_heads") or heads)
        return 2.0 * max(kv // tensor, 1) * (task.output.shape[1] // heads) * size
    if task.op == "mla_attention":
        kv, kr = task.operands[1].type.shape[1], task.operands[2].type.shape[1]
        return (kv + heads * kr) / tensor * size
    return 0.0


def block_kv(graph: TaskGraph, tasks: tuple[int, ...], tensor: int) -> tuple[float, ...]:
    """:func:`kv_per_position` of each attention op among ``graph``'s ``tasks`` (a block's)."""
    return tuple(kv_per_position(graph.tasks[i], tensor) for i in tasks if graph.tasks[i].op in ATTENTION_OPS)


def qkvo_per_position(task: Task, tensor: int) -> tuple[float, float, float, float]:
    """Bytes of Q, K, V and the output one of ``tensor`` ranks holds per position for attention
    ``task`` (what ``cp=a2a``'s four all-to-alls move): ``heads/t``, ``kv_heads/t``, ``kv_heads/t``
    and ``heads/t`` heads of ``head_dim``; for multi-head latent attention the query heads' ``dn +
    dr`` columns, each head's key ``[k_nope | kr]`` (the shared rotary key expanded, as
    Megatron-Core's MLA hands it to attention), and ``dv`` columns of value and output."""
    size = DTYPE_BYTES.get(task.output.dtype, 2) / tensor if task.output is not None else 0.0
    heads, kv = head_counts(task)
    if task.op == "mla_attention":
        qw, kvw, dr = (o.type.shape[1] for o in task.operands)
        dq = qw // heads
        dv = kvw // heads - (dq - dr)
        return qw * size, heads * dq * size, heads * dv * size, heads * dv * size
    dh = task.output.shape[1] // heads if task.output is not None else 0
    return heads * dh * size, kv * dh * size, kv * dh * size, heads * dh * size


@dataclass(frozen=True, slots=True)
class Ring:
    """What the ring adds to a block priced at ``S / C`` tokens (which holds one step of each
    attention): seconds forward and backward, of which sends not hidden under a step's attention,
    the bytes of the largest step's send, and of the buffers held while the layer runs."""

    forward: float = 0.0
    backward: float = 0.0
    exposed_forward: float = 0.0
    exposed_backward: float = 0.0
    step_bytes: float = 0.0
    buffers: float = 0.0
    kept: float = 0.0  # bytes each micro-batch in flight keeps besides the block's own (cp=a2a's output copy)


def ring_pass(a_f: float, a_b: float, n: float, steps: int, net: Network, across: bool) -> tuple[float, float]:
    """Forward and backward seconds of a ring of ``steps`` ranks whose every step attends for
    ``a_f`` (``a_b``) beside the send of ``n`` bytes of K and V (module docstring; one step alone
    sends nothing)."""
    if steps <= 1:
        return a_f, a_b
    k, k2 = send(net, n, across), send(net, 2 * n, across)
    return a_f + (steps - 1) * max(a_f, k), 2 * max(a_b, k) + (steps - 2) * max(a_b, k2)


def ring_times(cost: BlockCost, kv: tuple[float, ...], positions: int, c: int, net: Network,
               across: bool) -> Ring:
    """The :class:`Ring` of block price ``cost``: ``kv`` bytes per position of each attention op,
    ``positions`` = the micro-batch's sequences x ``S / C``, ``across``: the group's ranks span
    nodes (module docstring)."""
    if c <= 1 or not kv:
        return Ring()
    a_f, a_b = cost.attention / len(kv), cost.attention_backward / len(kv)
    fwd = bwd = hid_f = hid_b = 0.0
    for per in kv:
        f, b = ring_pass(a_f, a_b, per * positions, c, net, across)
        fwd += f - a_f  # the block holds one step already
        bwd += b - a_b
        hid_f += (c - 1) * a_f
        hid_b += (c - 1) * a_b
    step = max(kv) * positions
    return Ring(fwd, bwd, fwd - hid_f, bwd - hid_b, step, max(c, RING_BUFFERS) * step)


def gather_times(cost: BlockCost, kv: tuple[float, ...], positions: int, c: int, net: Network,
                 per_node: int) -> Ring:
    """The :class:`Ring` of the all-gather form (``cp=allgather``, module docstring): ``kv``
    bytes per position of each attention op, ``positions`` = the micro-batch's sequences x ``S /
    C``, ``per_node`` of the ``c`` ranks on a node; the gathered bytes are the largest step's."""
    if c <= 1 or not kv:
        return Ring()
    a_f, a_b = cost.attention / len(kv), cost.attention_backward / len(kv)
    fwd = bwd = exp_f = exp_b = 0.0
    for per in kv:
        whole = per * positions * c  # the K and V of whole sequences
        ag = collective(net, "allgather", whole, c, per_node)[0]
        rs = collective(net, "reducescatter", whole, c, per_node)[0]
        fwd += (c - 1) * a_f + ag
        bwd += (c - 1) * a_b + ag + rs
        exp_f += ag
        exp_b += ag + rs
    step = max(kv) * positions * c
    return Ring(fwd, bwd, exp_f, exp_b, step, 2 * step)


def cp_times(cost: BlockCost, graph: TaskGraph, tasks: tuple[int, ...], positions: int, c: int, net: Network,
             tensor: int, kind: str, share: int = 0) -> Ring:
    """What context parallelism of kind ``kind`` (:data:`~mapper.parallel.layout.CP_KINDS`) adds to
    block price ``cost`` (of ``graph``'s ``tasks``) on ``c`` ranks ``tensor`` apart
    (:func:`ring_times`, :func:`gather_times`; the all-to-all forms are
    :func:`mapper.cluster.ulysses.alltoall_times`), the group's fewest ranks on one
    node ``share`` (:mod:`mapper.cluster.placement`; 0: a group aligned to nodes, ``gpus_per_node /
    tensor`` a node); the ring crosses the fabric where that is under ``c``."""
    share = share or min(c, max(1, net.gpus_per_node // tensor))
    kv = block_kv(graph, tasks, tensor)
    if kind == "allgather":
        return gather_times(cost, kv, positions, c, net, share)
    return ring_times(cost, kv, positions, c, net, share < c)
