"""The all-to-all forms of context parallelism: DeepSpeed-Ulysses (``cp=a2a``) and Megatron-Core's
hierarchical ``a2a+p2p`` (``cp=a2a+p2p,cp_a2a=K``), priced as the kernels they run.

**Ulysses** (Jacobs et al., arXiv 2309.14509; Megatron-Core's ``cp_comm_type = "a2a"``,
Transformer Engine's ``AttnFuncWithCPAndQKVOA2A``): an all-to-all each of Q, K and V over the ``C``
context ranks turns a rank's ``S / C`` positions of its ``heads / t`` heads into all ``S``
positions of ``heads / (t C)`` of them; attention runs whole sequences on those heads, and an
all-to-all of the output turns it back. The kernel it runs is attention over sequences of ``S``
on ``heads / (t C)`` heads, so it is priced as the cost model prices that shape
(:class:`AttentionPrices`: the op cut to those heads, at sequence ``S``, through the same fusion,
training step and cost table as a block): a fused kernel's rate grows with the sequence (its
half-length, ``rate x s / (s + L)``, :mod:`mapper.costing.efficiency`), so the same FLOPs as the
ring's ``C`` steps of ``S / C`` run faster. The block (priced at ``S / C``) holds one ring step's
attention; the difference is added.

**Hierarchical** (Megatron-Core's ``cp_comm_type = "a2a+p2p"`` with
``hierarchical_context_parallel_sizes = [K, C / K]``; Transformer Engine's
``AttnFuncWithCPAndKVP2P`` given ``cp_group = [a2a group, p2p group]``): the ``C`` ranks form
groups of ``K`` consecutive context ranks (``tensor`` apart: Megatron-Core's
``create_hierarchical_groups``, level 0) and rings of ``P = C / K`` ranks ``tensor x K`` apart
(level 1). Q, K and V go through an all-to-all over the ``K`` ranks first, so a rank holds ``S /
P`` positions of ``heads / (t K)`` heads; the ring of ``P`` ranks then runs as ``cp=ring`` does
(:mod:`mapper.cluster.context`), each step's attention over ``S / P`` positions on those heads
(``a'_f``, ``a'_b``, priced at that shape) beside the send of the step's K and V (``n`` bytes),
and the output goes back through an all-to-all over the ``K`` ranks; the backward mirrors it (the
output's gradient in, dQ, dK, dV out). With ``A`` the four all-to-alls of a pass (Q, K, V and
the output, ``q, k, v, o`` bytes of ``S / C`` positions a rank), each priced by
:func:`mapper.parallel.collectives.collective` over the ``K`` ranks as placed
(:mod:`mapper.cluster.placement`), and each send by :func:`~mapper.parallel.collectives.send`
(across nodes where a ring's ranks span more than one)::

    forward   A + a'_f + (P - 1) max(a'_f, send(n))
    backward  A + 2 max(a'_b, send(n)) + (P - 2) max(a'_b, send(2 n))     (P > 1; a'_b for P = 1)

``K = C`` is Ulysses (``P = 1``: one step, the whole sequence), ``K = 1`` the ring (no
all-to-all; its step is the block's). Transformer Engine reshapes each tensor's heads into ``K``
groups, so ``heads / t`` and ``kv_heads / t`` must divide by ``K``, else exit 2.

Memory while a layer runs: the all-to-alls' new tensors (one pass's ``q + k + v + o``, where ``K
> 1``) beside the ring's buffers (``max(P, 4) n``, where ``P > 1``: :mod:`mapper.cluster.context`);
each micro-batch in flight keeps the output once more in the heads' layout where ``K > 1``
(FlashAttention's copy for its backward, the output projection's in the sequence's).
"""

from __future__ import annotations

from dataclasses import replace

from mapper.cluster.context import RING_BUFFERS, Ring, head_counts, kv_per_position, qkvo_per_position, ring_pass
from mapper.cluster.profile import BlockCost, Profile
from mapper.core.graph import Operand, Placement, Task, TaskGraph, TensorType
from mapper.core.ops import ATTENTION_OPS, infer
from mapper.costing.cost import build_cost_table
from mapper.costing.training import training_step
from mapper.parallel.collectives import Network, collective

#: The kinds of context parallelism priced here (an all-to-all of Q, K, V and the output).
KINDS = ("a2a", "a2a+p2p")


def cut_attention(task: Task, cut: int, seq: int, sequences: int) -> Task:
    """Attention ``task`` as one rank runs it with its heads cut ``cut`` ways, over ``sequences``
    sequences of ``seq`` positions: every operand's columns cut as the heads are (multi-head latent
    attention's shared rotary key, every head's, whole), the op's own FLOPs and bytes."""
    heads, kv = head_counts(task)
    ops = []
    for i, o in enumerate(task.operands):
        whole = task.op == "mla_attention" and i == 2
        width = o.type.shape[1] if whole else o.type.shape[1] // cut
        ops.append(Operand("input", o.name, TensorType(o.type.dtype, (sequences * seq, width))))
    attrs = {**dict(task.attrs), "seq": seq, "heads": heads // cut}
    if task.attr("kv_heads"):
        attrs["kv_heads"] = kv // cut
    info = infer(task.op, [o.type for o in ops], attrs)
    return replace(task, index=0, operands=tuple(ops), attrs=info.attrs, output=info.output, flops=info.flops,
                   bytes_read=info.bytes_read, bytes_written=info.bytes_written, parts=(), backward=False)


class AttentionPrices:
    """Forward and backward seconds of an attention op on one GPU of ``profile``'s node at a shape
    of :func:`cut_attention`, priced as a block is (the profile's fusion, the training step of its
    optimizer, the cost table: :mod:`mapper.cluster.profile`), kept."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self._seen: dict[tuple, tuple[float, float]] = {}

    def __call__(self, task: Task, cut: int, seq: int, sequences: int) -> tuple[float, float]:
        key = (task.op, task.attrs, tuple(o.type for o in task.operands), task.precision, cut, seq, sequences)
        if key not in self._seen:
            self._seen[key] = self._price(cut_attention(task, cut, seq, sequences))
        return self._seen[key]

    def _price(self, task: Task) -> tuple[float, float]:
        node, mesh = self.profile.platform(1)
        task = replace(task, placement=Placement(allow=mesh))
        graph = TaskGraph(f"{task.name}.alone", (task,), (), tuple((o.name, o.type) for o in task.operands),
                          (task.name,))
        g = self.profile.prepare(graph)
        if self.profile.optimizer is not None:
            g = training_step(g, self.profile.optimizer)
        table = build_cost_table(g, node)
        d = node.device_index(mesh[0])
        fwd = bwd = 0.0
        for t in g.tasks:
            if any(p.op in ATTENTION_OPS for p in t.parts or (t,)):
                if t.backward:
                    bwd += table.time[t.index][d]
                else:
                    fwd += table.time[t.index][d]
        return fwd, bwd


def alltoall_times(cost: BlockCost, graph: TaskGraph, tasks: tuple[int, ...], sequences: int, seq: int, c: int,
                   k: int, tensor: int, net: Network, a2a_shares: tuple[int, ...], across: bool,
                   attend: AttentionPrices) -> Ring:
    """What the all-to-all forms add to block price ``cost`` (of ``graph``'s ``tasks``, priced at
    ``S / c`` positions): ``sequences`` sequences of ``seq`` a micro-batch, all-to-alls over ``k``
    of the ``c`` context ranks (``k = c``: Ulysses), each group of them lying as ``a2a_shares``
    says (:meth:`mapper.cluster.placement.Placement.shares`, the slowest priced), rings of ``c / k``
    ranks crossing the fabric where ``across`` (module docstring)."""
    ops = [graph.tasks[i] for i in tasks if graph.tasks[i].op in ATTENTION_OPS]
    if c <= 1 or not ops:
        return Ring()
    p, positions = c // k, sequences * seq // c
    fwd = bwd = exp_f = exp_b = step = buffers = kept = 0.0
    for task in ops:
        widths = qkvo_per_position(task, tensor)
        comm = sum(max(collective(net, "alltoall", w * positions, k, g)[0] for g in a2a_shares)
                   for w in widths) if k > 1 else 0.0
        a_f, a_b = attend(task, tensor * k, seq // p, sequences)
        n = kv_per_position(task, tensor * k) * sequences * (seq // p)  # a ring step's K and V
        ring_f, ring_b = ring_pass(a_f, a_b, n, p, net, across)
        fwd += comm + ring_f
        bwd += comm + ring_b
        exp_f += comm + ring_f - p * a_f
        exp_b += comm + ring_b - p * a_b
        moved = sum(widths) * positions if k > 1 else 0.0
        held = moved + (max(p, RING_BUFFERS) * n if p > 1 else 0.0)
        step, buffers = max(step, moved, n if p > 1 else 0.0), max(buffers, held)
        kept += widths[3] * positions if k > 1 else 0.0
    # the block holds one ring step's attention at S / c (its own price): the rest is added
    return Ring(fwd - cost.attention, bwd - cost.attention_backward, exp_f, exp_b, step, buffers, kept)
