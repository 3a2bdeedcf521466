"""The plan space of ``--parallel`` on a cluster: every layout the keys given allow
(:mod:`mapper.cluster.search` scores them).

Tensor ``t`` (powers of two up to a node's GPUs), pipeline ``p`` and data ``d`` with ``t p c
d`` = the cluster's GPUs, context ``c`` (:func:`contexts`), micro-batch ``b`` (powers of two
dividing the per-replica batch), interleaving ``v`` in 1, 2, 4 (``m`` a multiple of ``p``),
the context ranks' kind (``cp``: the ring, the all-gather, and the all-to-all where ``tensor x
context`` divides every attention's heads and key-value heads; with ``context`` given, the ring
unless ``cp`` is given, Megatron-Core's default; ``cp=a2a+p2p`` given, its all-to-all degree
``cp_a2a`` unless given: :func:`a2a_levels`),
recomputation (:func:`mapper.cluster.recompute.ladder`), ZeRO 0-3 (3 without a pipeline),
sequence parallelism with ``t > 1``, experts folded inside ``t c d``, and with ``p`` chosen
the chunks cut by time or by Transformer layers with uneven ends (``first``, ``last``); layouts whose pipeline
schedule has more than :data:`MAX_SCHEDULE_OPS` forward and backward ops are left out (each is
simulated, and the chosen one becomes a task graph of that many tasks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from mapper.cluster import overlap
from mapper.cluster.layers import auto_ends
from mapper.cluster.profile import MAX_TENSOR
from mapper.parallel.layout import CP_KINDS, RECOMPUTE, Layout, LayoutSpec

#: The most ops a layout's pipeline schedule may have, ``2 m v p`` (Megatron-LM's 1T row,
#: p = 64 and 512 micro-batches per replica, interleaved twice: SC'21, Table 1).
MAX_SCHEDULE_OPS = 2**17


def pow2(limit: int) -> list[int]:
    """Powers of two up to ``limit``."""
    out, k = [], 1
    while k <= limit:
        out.append(k)
        k *= 2
    return out


def _fixed_or(value: Any, options: list[Any]) -> list[Any]:
    """``[value]`` when a layout key is given, else every option."""
    return options if value is None else [value]


def divisors(n: int, most: int) -> list[int]:
    """The divisors of ``n`` up to ``most``, ascending (trial division to the square root)."""
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return sorted({x for k in small for x in (k, n // k) if x <= most})


#: What the planner tries of ``cp=a2a+p2p`` when it chooses the kind: its all-to-all degrees (:func:`a2a_levels`).
HIERARCHY = LayoutSpec(cp="a2a+p2p")
#: The fewest tokens of a context-parallel chunk the planner tries: one query tile of
#: FlashAttention-2's kernels (blocks of 64 or 128 rows: Dao, arXiv 2307.08691, section 3.3). A
#: shorter chunk runs part-empty tiles that the block prices do not see.
MIN_CHUNK = 128


def contexts(gpus: int, seq: int) -> list[int]:
    """Context degrees the planner tries for sequences of ``seq`` tokens on ``gpus`` GPUs: 1, and
    powers of two ``C`` dividing the GPUs whose sequence cuts into ``2 C`` equal chunks (the
    load-balanced causal split of :mod:`mapper.cluster.context`) of at least :data:`MIN_CHUNK`
    tokens; none but 1 without attention."""
    return [c for c in pow2(gpus) if c == 1 or seq and seq % (2 * c) == 0 and seq // (2 * c) >= MIN_CHUNK
            and gpus % c == 0]


def _experts(options: list[int], t: int, d: int, experts: int, given: LayoutSpec) -> list[tuple[int, int]]:
    """(expert, expert_tensor) pairs for ``t x d`` ranks of a graph of ``experts`` experts: the given
    ones, or powers of two dividing the experts and the ranks (expert_tensor 1, NVIDIA's recipes')."""
    out = []
    for e in options:
        et = given.expert_tensor or (1 if e > 1 else 0)
        if (t * d) % (e * (et or t)) == 0 and (e == 1 or experts % e == 0):
            out.append((e, et))
    return out


def layouts(gpus: int, per_node: int, samples: int, units: int, given: LayoutSpec, experts: int = 0,
            seq: int = 0, recompute: tuple[str, ...] = RECOMPUTE, heads: int = 0) -> list[Layout]:
    """The layouts of the plan space that ``given`` allows (module docstring), each standing for
    its :class:`Variants` (the ring and the cut by time, unless ``given`` says); ``experts``: the
    graph's experts per MoE layer (0 without any); ``seq``: its sequence length (0: no context
    parallelism); ``recompute``: the values tried when ``given`` has none; ``heads``: what ``tensor
    x context`` must divide for a given ``cp=a2a`` (:func:`mapper.cluster.context.a2a_heads`).
    Context degrees run outermost, 1 first, so ties go to the layout without context parallelism."""
    out = []
    for c in _fixed_or(given.context, contexts(gpus, seq)):
        for k in a2a_levels(c, given):
            out += _grid(gpus // c, c, given.cp or "ring", per_node, samples, units, given, experts, recompute, heads,
                         k)
    return out


def a2a_levels(c: int, given: LayoutSpec, proper: bool = False) -> list[int]:
    """The all-to-all degrees (``cp_a2a``) of context ``c`` the planner tries: 1 unless ``cp=a2a+p2p``
    is given; with it the given one where it divides ``c``, else every divisor of ``c`` (with
    ``proper``, none but those between 1 and ``c``: the ends are the ring and Ulysses, priced as
    such, :mod:`mapper.cluster.ulysses`)."""
    if given.cp != "a2a+p2p":
        return [1]
    if given.cp_a2a is not None:
        return [given.cp_a2a] if c % given.cp_a2a == 0 else []
    return [k for k in divisors(c, c) if not proper or 1 < k < c]


def _grid(gpus: int, c: int, cp: str, per_node: int, samples: int, units: int, given: LayoutSpec, experts: int,
          recompute: tuple[str, ...], heads: int = 0, k: int = 1) -> list[Layout]:
    """:func:`layouts` of context ``c`` of kind ``cp`` (all-to-alls over ``k`` ranks for
    ``a2a+p2p``), ``gpus`` the GPUs over ``c``."""
    out = []
    for t in _fixed_or(given.tensor, pow2(min(per_node, gpus, MAX_TENSOR))):
        if gpus % t or c > 1 and cp in ("a2a", "a2a+p2p") and heads % (t * (c if cp == "a2a" else k)):
            continue
        for p in _fixed_or(given.pipeline, divisors(gpus // t, units)):
            if (gpus // t) % p:
                continue
            d = gpus // (t * p)
            if given.data is not None and given.data != d:
                continue
            if samples % d:
                continue
            for b in _fixed_or(given.micro_batch, pow2(samples // d)):
                if samples % (d * b):
                    continue
                m = samples // (d * b)
                for v in _fixed_or(given.interleave, [1, 2, 4]):
                    if v > 1 and (p == 1 or m % p or p * v > units) or 2 * m * v * p > MAX_SCHEDULE_OPS:
                        continue
                    for rc in _fixed_or(given.recompute, list(recompute)):
                        for z in _fixed_or(given.zero, [0, 1, 2, 3]):
                            if given.zero is None and (z and d == 1 or z == 3 and p > 1):
                                continue
                            for sp in _fixed_or(given.sequence, [False, True] if t > 1 else [False]):
                                for e, et in _experts(_fixed_or(given.expert, pow2(min(experts, t * d * c)) or [1]),
                                                      t, d * c, experts, given):
                                    lay = Layout(t, p, d, b, v, rc, z, sp, e, et, given.first, given.last,
                                                 overlap=given.overlap or "none", context=c, cp=cp, cp_a2a=k)
                                    out += [] if overlap.why_not(lay) else [lay]
    return out


@dataclass(frozen=True, slots=True)
class Variants:
    """The layouts a layout of :func:`layouts` stands for, which differ from it only in keys no
    floor of :mod:`mapper.cluster.sweep` depends on but the time floor's kind: the context ranks'
    kind (:data:`CP_KINDS`; Ulysses where ``tensor x context`` divides ``heads``, ``a2a+p2p`` at each
    proper divisor ``cp_a2a`` of the context degree where ``tensor x cp_a2a`` divides them) when
    ``given`` leaves the context degree and kind to the planner, and the cuts by Transformer
    layers with uneven ends (:func:`mapper.cluster.layers.auto_ends` of the graph's ``layers``)
    beside the cut by time when it leaves the pipeline and the ends to it. Expanded only for the
    layouts the floors let through, so the plan space grows in what is estimated, not listed."""

    given: LayoutSpec
    heads: int = 0
    layers: int = 0

    def kinds(self, lay: Layout) -> list[Layout]:
        """``lay`` under each kind of context parallelism searched (``lay``'s own first)."""
        return [lay, *(replace(lay, cp=k, cp_a2a=a) for k, a in self._kinds(lay))]

    def _kinds(self, lay: Layout) -> list[tuple[str, int]]:
        """The kinds (``cp``, ``cp_a2a``) :meth:`kinds` adds to ``lay``'s own."""
        if lay.context == 1 or self.given.context is not None or self.given.cp is not None:
            return []
        t, c = lay.tensor, lay.context
        out = [(k, 1) for k in CP_KINDS if k not in (lay.cp, "a2a+p2p") and (k != "a2a" or self.heads % (t * c) == 0)]
        return out + [("a2a+p2p", k) for k in a2a_levels(c, HIERARCHY, proper=True) if self.heads % (t * k) == 0]

    def cuts(self, lay: Layout) -> list[Layout]:
        """``lay`` and its uneven cuts by layers."""
        return [lay, *(replace(lay, first=f, last=x) for f, x in self._ends(lay))]

    def _ends(self, lay: Layout) -> list[tuple[int, int]]:
        """The uneven ends (``first``, ``last``) :meth:`cuts` adds to ``lay``'s cut by time."""
        g = self.given
        if g.pipeline is not None or g.first is not None or g.last is not None:
            return []
        return auto_ends(self.layers, lay.pipeline * lay.interleave)

    def all(self, lay: Layout) -> list[Layout]:
        """Every variant of ``lay``, itself first (kinds outer, cuts inner)."""
        return [x for k in self.kinds(lay) for x in self.cuts(k)]

    def count(self, lay: Layout) -> int:
        """``len(self.all(lay))`` without building them."""
        return (1 + len(self._kinds(lay))) * (1 + len(self._ends(lay)))
