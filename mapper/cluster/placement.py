"""Where a layout's parallel groups land on nodes: Megatron-Core's rank order, group by group.

Megatron-Core numbers a job's ranks tensor innermost, then context, expert, data and pipeline
outermost (``megatron/core/parallel_state.py``: ``initialize_model_parallel(...,
order="tp-cp-ep-dp-pp")`` and its ``RankGenerator``); the dense layers' groups use that order
with the expert degree folded away, the experts' groups the same ranks as expert-tensor, expert,
expert-data, pipeline. Nodes hold consecutive ranks, ``G`` a node (an NVLink domain of several
trays is one node to the collectives: a job's segment of a rack, :func:`mapper.platform.cluster.domain_size`;
a last node with fewer ranks is looked at as it is). A group of one kind is ``k`` ranks ``s``
apart (the product of the degrees inside it) in blocks of ``s k``; it straddles when its ranks
sit on more than one node.

A synchronous step waits for its slowest group, so a kind's collective is priced for each
distinct way its groups lie (:meth:`Ranks.shares`) and the slowest kept. A group on one node is
``k`` ranks a node; one on several is priced as ``g`` a node, ``g`` its fewest ranks on one node:
that node's ``g`` NIC shares carry all the group's traffic in and out of it. Where ``G`` is a
multiple of ``s k`` (a tensor group of 4 on nodes of 8 or 72), or ``s k`` of ``G`` with ``s`` a
divisor or multiple of ``G`` (a data group over whole nodes), every group lies alike: the aligned
``min(k, G / s)`` a node, as the planner priced every group before it looked. Tensor, context and
expert collectives run inside a block, so the slowest way over all stages prices them; the gradient
synchronisation and ZeRO-3's gathers are a stage's, so each stage's own groups price its.

A pipeline send goes from each rank of a stage to the rank at the same offset of the next
stage, ``N / p`` ranks on; it crosses the fabric when any such pair is on two nodes
(:meth:`Ranks.send_crosses`), and the stage whose send crosses waits for it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from mapper.parallel.layout import Layout


@dataclass(frozen=True)
class Ranks:
    """``gpus`` ranks in Megatron-Core's order on nodes of ``per_node`` consecutive ranks."""

    gpus: int
    per_node: int
    _shares: dict[tuple[int, int, int, int], tuple[int, ...]] = field(default_factory=dict, compare=False, repr=False)

    def shares(self, stride: int, size: int, stage: int = 0, stages: int = 1) -> tuple[int, ...]:
        """The distinct ways groups of ``size`` ranks ``stride`` apart lie (module docstring), among
        those of pipeline stage ``stage`` of ``stages`` (its ``N / stages`` ranks): for each,
        ``size`` when it is on one node, else its fewest ranks on one node; sorted, no repeats.
        The node pattern repeats every ``lcm(stride size, G)`` ranks, so only the groups that start
        in the stage's first such period are looked at."""
        key = (stride, size, stage, stages)
        if key not in self._shares:
            self._shares[key] = self._look(stride, size, stage, stages)
        return self._shares[key]

    def _look(self, stride: int, size: int, stage: int, stages: int) -> tuple[int, ...]:
        if size <= 1:
            return (1,)
        block, g, span = stride * size, self.per_node, self.gpus // stages
        if block <= 0 or self.gpus % stages or span % block:
            raise ValueError(f"groups of {size} ranks {stride} apart do not tile a stage of {span} ranks")
        if g % block == 0:
            return (size,)  # every group inside a node
        if block % g == 0 and (stride % g == 0 or g % stride == 0) and span * stage % g == 0:
            return (max(1, g // stride),)  # every group over whole nodes, alike
        first = stage * span
        end = first + min(span, math.lcm(block, g))
        out = set()
        for start in range(first, end, block):
            for lane in range(stride):
                counts: dict[int, int] = {}
                for j in range(size):
                    node = (start + lane + j * stride) // g
                    counts[node] = counts.get(node, 0) + 1
                out.add(size if len(counts) == 1 else min(counts.values()))
        return tuple(sorted(out))

    def send_crosses(self, src: int, dst: int, stages: int) -> bool:
        """Whether a pipeline send from stage ``src`` to stage ``dst`` (of ``stages``) crosses the
        fabric for any of the stage's ranks (module docstring)."""
        span, g = self.gpus // stages, self.per_node
        a, b = src * span, dst * span
        if abs(b - a) >= g:
            return True
        return any((a + j) // g != (b + j) // g for j in range(span))


def groups(lay: Layout) -> dict[str, tuple[int, int]]:
    """Each parallel group kind of ``lay`` as ``(stride, size)`` in Megatron-Core's rank order
    (module docstring): tensor; context (``tensor`` apart), and ``cp=a2a+p2p``'s all-to-all groups
    of ``cp_a2a`` consecutive context ranks and its rings of the rest, ``tensor x cp_a2a`` apart
    (Megatron-Core's ``create_hierarchical_groups``); the gradients' data x context ranks; the
    experts' tensor, expert (``expert_tensor`` apart) and expert-data ranks."""
    return {kind: group(lay) for kind, group in GROUPS.items()}


#: :func:`groups`, kind by kind (a lookup builds only the one asked for).
GROUPS: dict[str, Callable[[Layout], tuple[int, int]]] = {
    "tensor": lambda lay: (1, lay.tensor), "context": lambda lay: (lay.tensor, lay.context),
    "cp_a2a": lambda lay: (lay.tensor, lay.cp_a2a),
    "cp_p2p": lambda lay: (lay.tensor * lay.cp_a2a, lay.context // lay.cp_a2a),
    "data": lambda lay: (lay.tensor, lay.replicas), "expert_tensor": lambda lay: (1, lay.etp),
    "expert": lambda lay: (lay.etp, lay.expert), "expert_data": lambda lay: (lay.etp * lay.expert, lay.expert_data)}


class Placement:
    """The :class:`Ranks` of each job size on nodes of ``per_node`` ranks, kept (a plan model's)."""

    def __init__(self, per_node: int) -> None:
        self.per_node = per_node
        self._ranks: dict[int, Ranks] = {}

    def ranks(self, gpus: int) -> Ranks:
        """``gpus`` ranks on these nodes."""
        if gpus not in self._ranks:
            self._ranks[gpus] = Ranks(gpus, self.per_node)
        return self._ranks[gpus]

    def shares(self, lay: Layout, kind: str, stage: int | None = None) -> tuple[int, ...]:
        """How ``lay``'s groups of ``kind`` (:func:`groups`) lie on the nodes (:meth:`Ranks.shares`),
        of every group or of pipeline stage ``stage``'s."""
        stride, size = GROUPS[kind](lay)
        if stage is None:
            return self.ranks(lay.gpus).shares(stride, size)
        return self.ranks(lay.gpus).shares(stride, size, stage, lay.pipeline)
