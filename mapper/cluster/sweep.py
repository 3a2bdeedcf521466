"""Scoring a plan space fast: layouts that cannot fit or cannot win are set aside before their
estimate (:mod:`mapper.cluster.search`).

Two floors, each no larger than what :meth:`mapper.cluster.model.PlanModel.estimate` would
answer, so setting a layout aside by them never changes the layout kept:

* memory (:meth:`~mapper.cluster.model.PlanModel.memory_floor`): a layout whose fullest GPU
  must hold more than the GPU has cannot fit; it is priced only when nothing fits (to report the
  one that needs least memory);
* time (:meth:`~mapper.cluster.model.PlanModel.time_floor`): the layouts are estimated in the
  order of their floors, and once a floor passes the :data:`KEPT`-th fastest fitting step
  found, the rest can neither win nor be a runner-up the reports list. Since the leaders are
  then simulated (:func:`mapper.cluster.model.refine`), which may lengthen their step, the
  planner estimates the layouts set aside whose floor is below the simulated best before it
  ranks (:func:`more`).

Estimates come back in the plan space's order, so ties are broken as a full sweep breaks them.
"""

from __future__ import annotations

import bisect
import heapq
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate

from mapper.cluster.model import Estimate, PlanModel, lower_bound
from mapper.cluster.schedule import step_time
from mapper.cluster.space import Variants
from mapper.core.progress import Progress
from mapper.parallel.layout import Layout
from mapper.parallel.rewrite import SplitError

#: Seconds between progress reports.
PROGRESS_EVERY = 0.5
#: Fitting layouts estimated before the time floor may set the rest aside: the one kept and the
#: runners-up the reports list (:data:`mapper.cluster.search.RUNNERS_UP` after the best).
KEPT = 9
#: Relative margin on the time floor: a layout whose step may tie the best is always estimated.
SLACK = 1e-9


@dataclass(slots=True)
class Sweep:
    """What scoring found: estimates (with their index in the plan space), the reasons layouts
    could not be cut, and the layouts set aside (index, time floor), over memory or not yet
    estimated."""

    found: list[tuple[tuple[int, int], Estimate]] = field(default_factory=list)  # (layout, variant): estimate
    reasons: list[str] = field(default_factory=list)
    over: list[int] = field(default_factory=list)
    waiting: list[tuple[float, int, int]] = field(default_factory=list)  # (floor, layout, variant or -1)
    variants: Variants | None = None

    def estimates(self) -> list[Estimate]:
        return [e for _, e in sorted(self.found, key=lambda x: x[0])]

    def expand(self, lay: Layout) -> list[Layout]:
        """``lay`` and the layouts it stands for (:class:`mapper.cluster.space.Variants`)."""
        return self.variants.all(lay) if self.variants is not None else [lay]


def score(model: PlanModel, cands: Sequence[Layout], progress: Callable[[Progress], None] | None = None,
          start: float = 0.0, variants: Variants | None = None) -> Sweep:
    """Estimates of the layouts ``cands`` (each with its ``variants``) that may fit and may win
    (module docstring). The memory floor holds for every variant of a layout (it depends on neither
    the cut nor the context ranks' kind), the time floor for every cut: a layout's floor is the
    least of its kinds'."""
    out = Sweep(variants=variants)
    fit: list[int] = []
    shown = time.perf_counter()
    for i, lay in enumerate(cands):
        (out.over if model.memory_floor(lay) > model.capacity else fit).append(i)
    queue = []
    floors: dict[tuple, float] = {}  # by what a time floor depends on (not ZeRO, interleaving or the cut)
    for k, i in enumerate(fit):  # the time floors price the blocks of each tensor degree and micro-batch
        lay = cands[i]
        key = (lay.tensor, lay.micro_batch, lay.recompute, lay.sequence, lay.expert, lay.etp, lay.overlap,
               lay.context, lay.cp, lay.cp_a2a, lay.data, lay.pipeline)
        if key not in floors:
            kinds = variants.kinds(lay) if variants is not None else [lay]
            floors[key] = min(model.time_floor(x) for x in kinds)
        queue.append((floors[key], i, -1))
        now = time.perf_counter()
        if progress is not None and now - shown >= PROGRESS_EVERY:
            shown = now
            progress(Progress(now - start, None, None, f"cluster layouts: floors {k + 1:,} of {len(fit):,} "
                                                       f"({len(out.over):,} over memory)"))
    queue.sort()
    best = _run(model, cands, queue, out, progress, start, len(cands), stop=True)
    if best is None:  # nothing fits: the layouts over memory too, for the least memory among them
        _run(model, cands, [(0.0, i, -1) for i in out.over], out, progress, start, len(cands), stop=False)
        out.over = []
    return out


def more(model: PlanModel, cands: Sequence[Layout], out: Sweep, below: float, bound: float = math.inf,
         leaders: int = KEPT - 1) -> None:
    """Estimate the layouts set aside whose time floor is below ``below`` (module docstring), but
    none that can change what the planner reports: a variant is dropped unestimated when the floor
    of any cut of its kind (:func:`fill_floor`) or its own :func:`cut_floor` is above both the
    :data:`KEPT`-th fastest fitting step found and ``bound`` (the plan space's bound over what is
    estimated: :func:`mapper.cluster.search._space_bound`), each lowered as estimates come in
    (the bound by the lower bound of each estimate that can no longer join the ``leaders``
    fastest, which are simulated). Its closed-form step is at least its floor, so it could only
    rank after the runners-up the reports list; its lower bound
    (:func:`~mapper.cluster.model.lower_bound`) is at least its floor too (sends, ZeRO-3's gathers
    and the synchronisation only add), above a bound that only falls as estimates are added, so
    the bound reported stays the one every estimate gives."""
    todo = [w for w in out.waiting if w[0] <= below * (1 + SLACK)]
    out.waiting = [w for w in out.waiting if w[0] > below * (1 + SLACK)]
    steps = sorted(e.step for _, e in out.found if e.fits)[:KEPT]  # the KEPT fastest, ascending
    for _, i, which in todo:
        group = out.expand(cands[i])
        for j, lay in enumerate(group) if which < 0 else [(which, group[which])]:
            kth = steps[-1] if len(steps) == KEPT else math.inf
            above = max(kth, bound) * (1 + SLACK)
            if above < math.inf and (fill_floor(model, lay) > above or cut_floor(model, lay) > above):
                continue  # ranks after the runners-up, and cannot lower the bound (the floor of any cut first)
            try:
                est = model.estimate(lay)
            except SplitError as err:
                out.reasons.append(err.message)
                continue
            if est is None:
                continue
            out.found.append(((i, j), est))
            if not est.fits:
                continue
            if len(steps) >= leaders and est.step > steps[leaders - 1]:  # never among the leaders simulated
                bound = min(bound, lower_bound(est))
            if len(steps) < KEPT or est.step < steps[-1]:
                bisect.insort(steps, est.step)
                del steps[KEPT:]


def fill_floor(model: PlanModel, lay: Layout) -> float:
    """Seconds no step of ``lay``'s kind goes below, whatever its cut: without interleaving,
    :func:`cut_floor`'s bound ``X = max_r (sum_{c<r} T_c + m T_r)`` over ranks of ``T_r`` seconds
    a micro-batch, ``S`` in all, holds ``T_r <= (X - sum_{c<r} T_c) / m`` for each ``r``, so the
    chunks before ``r`` sum to at most ``X (1 - (1 - 1/m)^r)`` and ``S <= X (1 - (1 - 1/m)^p)``:
    ``X >= S / (1 - (1 - 1/m)^p)``, the pipeline's fill and drain that the time floor
    (:meth:`~mapper.cluster.model.PlanModel.time_floor`, ``m S / p``) leaves out; with
    interleaving, the time floor."""
    floor = model.time_floor(lay)
    p, m = lay.pipeline, model.samples // (lay.data * lay.micro_batch)
    if lay.interleave > 1 or p == 1:
        return floor
    return floor * p / m / (1 - (1 - 1 / m) ** p) * (1 - SLACK)


def cut_floor(model: PlanModel, lay: Layout) -> float:
    """Seconds no step of ``lay`` goes below, for its own cut and kind: each pipeline rank runs its
    chunks' blocks forward and backward for each of ``m`` micro-batches, not before the first
    micro-batch has passed the chunks before its first (:func:`mapper.cluster.model.lower_bound`:
    below the simulated step; without interleaving below the closed form too, with it the lesser
    of that and the closed form of these chunks; sends, ZeRO-3's gathers and the synchronisation
    only add); infinite when its blocks cannot be cut so."""
    cut = model.cut(lay)
    if cut is None:
        return math.inf
    starts, fw, bw = cut
    p = lay.pipeline
    chunks = [sum(fw[a:e]) + sum(bw[a:e]) for a, e in zip(starts, [*starts[1:], len(fw)])]
    ranks = [sum(chunks[r::p]) for r in range(p)]
    m = model.samples // (lay.data * lay.micro_batch)
    before = [0.0, *accumulate(chunks)]  # rank r's first chunk is chunk r: the chunks before it pass micro-batch 0
    bound = max(before[r] + m * t for r, t in enumerate(ranks))
    # interleaved, the closed form may fall below that bound: the floor is the lesser of the two
    return (bound if lay.interleave == 1 else min(bound, step_time(ranks, m, lay.interleave))) * (1 - SLACK)


def _run(model: PlanModel, cands: Sequence[Layout], queue: list[tuple[float, int, int]], out: Sweep,
         progress: Callable[[Progress], None] | None, start: float, total: int, stop: bool) -> float | None:
    """Estimate ``queue`` in order (each a floor, a layout, and one of its variants or -1: all of
    them); with ``stop``, set aside the rest once a floor reaches the :data:`KEPT`-th fastest
    fitting step (the reports list that many), and each variant whose :func:`cut_floor` does.
    Returns the fastest fitting step (None: nothing fits)."""
    steps = [-e.step for _, e in out.found if e.fits]  # a max-heap of the KEPT fastest
    heapq.heapify(steps)
    while len(steps) > KEPT:
        heapq.heappop(steps)
    best = min((e.step for _, e in out.found if e.fits), default=None)
    shown = time.perf_counter()
    for k, (floor, i, which) in enumerate(queue):
        if stop and len(steps) == KEPT and floor > -steps[0] * (1 + SLACK):
            out.waiting += queue[k:]
            break
        group = out.expand(cands[i])
        for j, lay in enumerate(group) if which < 0 else [(which, group[which])]:
            if stop and len(steps) == KEPT and (own := cut_floor(model, lay)) > -steps[0] * (1 + SLACK):
                out.waiting.append((own, i, j))  # this variant's own floor already loses
                continue
            try:
                est = model.estimate(lay)
            except SplitError as err:
                out.reasons.append(err.message)
                continue
            if est is not None:
                out.found.append(((i, j), est))
                if est.fits:
                    best = est.step if best is None else min(best, est.step)
                    heapq.heappush(steps, -est.step)
                    if len(steps) > KEPT:
                        heapq.heappop(steps)
        now = time.perf_counter()
        if progress is not None and now - shown >= PROGRESS_EVERY:
            shown = now
            progress(Progress(now - start, best, None, f"cluster layouts {len(out.found):,} priced, "
                                                       f"{len(out.over):,} over memory, of {total:,}"))
    return best
