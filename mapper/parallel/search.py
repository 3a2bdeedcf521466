"""``--parallel``: the split plans tried, and the one kept.

:func:`choose_plan` enumerates plans on meshes of the platform's fastest
devices and scores each one by simulation, as FlexFlow does (Jia, Zaharia,
Aiken, "Beyond Data and Model Parallelism for Deep Neural Networks", MLSys
2019): the forward graph is cut (:func:`mapper.parallel.rewrite.split_graph`),
fused, turned into a training step when asked (with its gradient collectives,
:mod:`mapper.parallel.gradients`), priced, and list-scheduled with HEFT; its
makespan is the plan's step time and its peak memory per device
(:func:`mapper.engine.memory.peak_memory`) must fit. The plans:

* meshes of the ``m`` fastest devices (ranked by the unsplit graph's time on
  each), ``m`` from 1 (the best single device) through the powers of two to
  all of them;
* every ``stages x data x tensor = m`` with ``tensor`` where the graph has
  tensor-parallel regions, and ``stages`` up to the graph's size;
* ``micro_batches`` of ``stages`` and ``4 stages`` for a pipeline (GPipe's
  bubble shrinks as ``(S-1)/(M+S-1)``: Huang et al., "GPipe", NeurIPS 2019);
* pipeline stages cut where the forward graph's times balance: the
  contiguous split of the topological order with the smallest largest stage
  (Bokhari, "Partitioning problems in parallel, pipelined, and distributed
  computing", IEEE TC 37(1), 1988), by bisection on the largest stage with a
  greedy check, at positions no tensor-parallel region spans.

``data``, ``tensor`` and ``pipeline`` keep the plans of that kind only; the
best plan that fits wins; when none fits, :class:`~mapper.errors.InfeasibleError`
(exit 3) names the plan that needs least memory, its fullest device and the bytes. The
single device is scored first, then the largest meshes; a plan on ``m``
devices is skipped when the single device's time over ``m`` (its time with
perfect scaling) is no better than the best plan found so far.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mapper.core.graph import TaskGraph
from mapper.core.heap import collection_paused, settle_paused
from mapper.core.progress import Progress, ProgressFn
from mapper.core.units import fmt_bytes, fmt_bytes_pair, fmt_n, fmt_time
from mapper.costing.cost import CostTable, build_cost_table
from mapper.engine.memory import peak_memory
from mapper.errors import InfeasibleError, OptionsError
from mapper.mapping.pipeline import partition
from mapper.parallel.gradients import synchronise
from mapper.parallel.plan import Plan, check_parallel
from mapper.parallel.rewrite import Split, SplitError, split_graph
from mapper.parallel.roles import tensor_regions
from mapper.platform.devices import Platform

#: Candidates listed in reports besides the chosen one.
RUNNERS_UP = 8


@dataclass(frozen=True, slots=True)
class Candidate:
    """One plan, scored: its step time (HEFT makespan) and peak memory per device."""

    plan: Plan
    step_time: float
    peak: tuple[tuple[str, float], ...]  # (device, bytes) over the plan's devices
    fits: bool

    @property
    def max_peak(self) -> float:
        return max((b for _, b in self.peak), default=0.0)

    def to_json(self) -> dict[str, Any]:
        return {"plan": {**self.plan.to_json(), "label": self.plan.label()}, "step_time": self.step_time,
                "peak_memory": {d: b for d, b in self.peak}, "fits": self.fits}


@dataclass(frozen=True, slots=True)
class Choice:
    """The plan kept, its graph (split, fused, trained), and every plan scored."""

    mode: str
    split: Split
    graph: TaskGraph
    best: Candidate
    candidates: tuple[Candidate, ...]  # by step time
    single: Candidate | None  # the best single device
    skipped: int = 0  # plans not built: their ideal time could not beat the best found
    dropped: tuple[str, ...] = ()  # plans that cannot cut the graph: "label: why", naming the task
    cost: CostTable | None = None  # ``graph`` priced on the platform, as it was scored (None: not kept)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": self.mode, **self.best.to_json(), "exact": self.split.exact,
                               "candidates": [c.to_json() for c in self.candidates[:RUNNERS_UP + 1]],
                               "plans_scored": len(self.candidates), "plans_skipped": self.skipped,
                "plans_dropped": list(self.dropped)}
        if self.single is not None:
            out["single_device"] = self.single.to_json()
            out["speedup"] = self.single.step_time / self.best.step_time if self.best.step_time > 0 else None
        return out


    def notes(self) -> tuple[str, ...]:
        """What the reports say about the plan (text, JSON ``notes``, HTML)."""
        b = self.best
        out = [f"parallel {self.mode}: {b.plan.label()} on {', '.join(b.plan.devices)}: step "
               f"{fmt_time(b.step_time)} scored with heft, peak memory {fmt_bytes(b.max_peak)} per device"]
        if self.single is not None and b.step_time > 0:
            out.append(f"parallel: best single device {self.single.plan.devices[0]} "
                       f"{fmt_time(self.single.step_time)}, speedup {self.single.step_time / b.step_time:.3g}x")
        others = [c for c in self.candidates if c is not b][:3]
        if others:
            out.append("parallel: runners-up " + "; ".join(
                f"{c.plan.label()} on {', '.join(c.plan.devices)} {fmt_time(c.step_time)}"
                + ("" if c.fits else " (too big)") for c in others))
        if self.dropped:
            kinds: dict[str, str] = {}  # one layout per kind of reason (the reason without its sizes)
            for why in self.dropped:
                kinds.setdefault(re.sub(r"\d+", "#", why.split(": ", 1)[-1]), why)
            shown = list(kinds.values())[:3]
            more = len(self.dropped) - len(shown)
            out.append(f"parallel: {len(self.dropped)} layout{'s' if len(self.dropped) > 1 else ''} dropped, a task "
                       f"cannot be split as they cut it: {'; '.join(shown)}" + (f" (and {more} more)" if more else ""))
        if not self.split.exact:
            out.append("parallel: batch norm statistics are per replica (as data-parallel training without "
                       "synchronised batch norm), so the outputs differ from the unsplit graph's")
        return tuple(out)

    def plan_facts(self) -> tuple[tuple[str, str], ...]:
        """The plan section of the reports: the plan, its devices, stages and the step it was scored at."""
        b = self.best
        p = b.plan
        rows = [("layout", p.label()),
                ("devices", f"{len(p.devices)}: {', '.join(p.devices)}"),
                ("groups", f"{fmt_n(p.data, 'data-parallel replica')} x {fmt_n(p.tensor, 'tensor-parallel device')}"
                           f" x {fmt_n(p.stages, 'pipeline stage')}")]
        per = p.data * p.tensor
        starts = (0, *p.cuts)
        for s in range(p.stages if p.stages > 1 else 0):
            rows.append((f"stage {s}", f"{', '.join(p.devices[s * per:(s + 1) * per])}: forward tasks from "
                                       f"position {starts[s]} of the topological order"))
        if p.micro_batches > 1:
            rows.append(("batch", f"{p.micro_batches} micro-batches per replica"))
        rows += [("step", f"{fmt_time(b.step_time)} (scored with heft)"
                  + (f", speedup {self.single.step_time / b.step_time:.3g}x over {self.single.plan.devices[0]} alone"
                     if self.single is not None and b.step_time > 0 else "")),
                 ("memory", f"{fmt_bytes(b.max_peak)} on the fullest device")]
        return tuple(rows)


def build(graph: TaskGraph, plan: Plan, platform: Platform, prepare: Callable[[TaskGraph], TaskGraph],
          train: str | None, step: Callable[[TaskGraph], TaskGraph]) -> tuple[Split, TaskGraph]:
    """The graph of ``plan``: split, then ``prepare`` (fusion), then the training ``step`` and its collectives."""
    split = split_graph(graph, plan, platform)
    g = prepare(split.graph)
    if train is not None:
        g = synchronise(step(g), split, platform, train)
    return split, g


def score(plan: Plan, cost: CostTable) -> Candidate:
    """``plan``'s step time and memory from a HEFT schedule of its priced graph."""
    from mapper.mapping import get_mapper
    from mapper.mapping.base import MapOptions

    result = get_mapper("heft").map(cost, MapOptions())
    peaks = peak_memory(result.schedule)
    names = [d.name for d in cost.platform.devices]
    peak = tuple((names[d], peaks[d].bytes) for d in range(len(names)) if names[d] in plan.devices)
    fits = all(p.bytes <= cap for p, cap in zip(peaks, cost.memory_capacity))
    return Candidate(plan, result.schedule.makespan, peak, fits)


def ranked_devices(cost: CostTable) -> list[str]:
    """Devices that can run every task, fastest first (the graph's total time on each)."""
    totals = []
    for d, dev in enumerate(cost.platform.devices):
        total = sum(row[d] for row in cost.time)
        if total < float("inf"):
            totals.append((total, d, dev.name))
    return [name for _, _, name in sorted(totals)]


def balanced_cuts(graph: TaskGraph, weights: list[float], stages: int, allowed: set[int]) -> tuple[int, ...] | None:
    """Cut positions (in ``graph.topo_order``) for ``stages`` contiguous stages whose largest weight sum is
    least, each at a position of ``allowed`` (:func:`mapper.mapping.pipeline.partition`)."""
    if stages == 1:
        return ()
    starts = partition([weights[t] for t in graph.topo_order], stages, sorted(allowed))
    return starts[1:] if starts is not None else None


def _allowed_cuts(graph: TaskGraph, tensor: int) -> set[int]:
    """Positions where a stage may begin: inside no tensor-parallel region."""
    pos = {t: i for i, t in enumerate(graph.topo_order)}
    allowed = set(range(1, len(graph.tasks)))
    for reg in tensor_regions(graph, tensor) if tensor > 1 else ():
        span = [pos[m] for m in reg.members] + ([pos[reg.row]] if reg.row is not None else [])
        allowed -= set(range(min(span) + 1, max(span) + 1))
    return allowed


def plans(graph: TaskGraph, mode: str, devices: list[str], weights: Callable[[], list[float]]) -> list[Plan]:
    """The plans ``mode`` tries on meshes of ``devices`` (fastest first); ``weights()`` (each
    task's time, asked only when a plan has pipeline stages to cut)."""
    sizes = sorted({m for m in (1, 2, 4, 8, 16, 32, 64, len(devices)) if m <= len(devices)})
    out: list[Plan] = []
    tensor_ok: dict[int, bool] = {1: True}
    for m in sizes:
        mesh = tuple(devices[:m])
        for stages in (s for s in range(1, m + 1) if m % s == 0):
            for tensor in (k for k in range(1, m // stages + 1) if (m // stages) % k == 0):
                data = m // (stages * tensor)
                if tensor not in tensor_ok:
                    tensor_ok[tensor] = bool(tensor_regions(graph, tensor))
                if not tensor_ok[tensor]:
                    continue
                kind = ("data" if data > 1 else "") + ("tensor" if tensor > 1 else "") + \
                       ("pipeline" if stages > 1 else "")
                if mode != "auto" and m > 1 and kind != mode:
                    continue
                cuts = balanced_cuts(graph, weights() if stages > 1 else [], stages, _allowed_cuts(graph, tensor))
                if cuts is None:
                    continue
                for micro in ((1,) if stages == 1 else (stages, 4 * stages)):
                    out.append(Plan(data, tensor, stages, micro, mesh, cuts))
    return out


def _none_fits(mode: str, graph: TaskGraph, base: CostTable, least: Candidate, tried: int) -> InfeasibleError:
    """Exit 3 when no plan fits: the plan that needs least memory, its fullest device and the bytes,
    and why the devices left out of every mesh could not take the graph unsplit."""
    capacity = {d.name: base.memory_capacity[d.index] for d in base.platform.devices}
    device, held = max(least.peak, key=lambda p: p[1] - capacity[p[0]])
    need, has = fmt_bytes_pair(held, capacity[device])
    left_out = [d for d in base.platform.devices if d.name not in least.plan.devices
                and any(base.time[t][d.index] == float("inf") for t in range(base.n_tasks))]
    why = ""
    if left_out:
        dev = left_out[0]
        t = next(t for t in range(base.n_tasks) if base.time[t][dev.index] == float("inf"))
        why = (f"; {', '.join(d.name for d in left_out)} cannot run the unsplit graph "
               f"({dev.name}: task {base.graph.tasks[t].name}: {base.reason(t, dev.index)})")
    return InfeasibleError(
        f"--parallel {mode}: no plan of {graph.name} fits the devices' memory ({tried} scored): the smallest, "
        f"{least.plan.label()} on {', '.join(least.plan.devices)}, needs {need} on {device}, which has {has}{why}",
        obj="--parallel",
        hint="a cluster platform (--platform selene --nodes N), or smaller sizes (--param BATCH=...)")


def choose_plan(graph: TaskGraph, platform: Platform, mode: str, *, prepare: Callable[[TaskGraph], TaskGraph],
                train: str | None, step: Callable[[TaskGraph], TaskGraph],
                progress: ProgressFn | None = None) -> Choice:
    """The best plan of ``mode`` for ``graph`` on ``platform`` (module docstring); ``progress`` hears
    each plan as it is built and scored. The cyclic collector pauses meanwhile: building a plan's
    graph allocates many acyclic objects (its tasks, edges and table rows), which reference
    counting frees, and a full collection among them walks them all for nothing; in a one-shot
    process the kept plan's objects are then frozen (:func:`mapper.core.heap.settle_paused`)."""
    with collection_paused():
        choice = _choose_plan(graph, platform, mode, prepare=prepare, train=train, step=step, progress=progress)
        settle_paused()
    return choice


def _choose_plan(graph: TaskGraph, platform: Platform, mode: str, *, prepare: Callable[[TaskGraph], TaskGraph],
                 train: str | None, step: Callable[[TaskGraph], TaskGraph], progress: ProgressFn | None) -> Choice:
    check_parallel(mode)
    base = build_cost_table(prepare(graph), platform)
    devices = ranked_devices(base)
    if not devices:
        base.require_feasible()
        raise OptionsError(f"--parallel: no device of {platform.name} can run every task of {graph.name}")
    first = platform.device_index(devices[0])
    cached: list[list[float]] = []

    def weights() -> list[float]:  # the unsplit graph's times on the fastest device, priced once
        if not cached:
            cached.append([row[first] for row in build_cost_table(graph, platform).time])
        return cached[0]

    scored: list[tuple[Candidate, Split, TaskGraph, CostTable]] = []
    reasons: list[str] = []
    single = best_time = float("inf")
    skipped = 0
    dropped: list[str] = []
    # the single device first, then the largest meshes: a mesh of m devices whose
    # ideal time (the best single device's over m) cannot beat the best plan found is skipped
    start = time.perf_counter()
    todo = sorted(plans(graph, mode, devices, weights), key=lambda p: (len(p.devices) > 1, -len(p.devices)))
    for i, plan in enumerate(todo):
        m = len(plan.devices)
        if m > 1 and single / m >= best_time:
            skipped += 1
            continue
        if progress is not None:
            so_far = f", best step {fmt_time(best_time)}" if best_time < float("inf") else ""
            progress(Progress(time.perf_counter() - start, None, None,
                              f"parallel plans: {i + 1} of {len(todo)}{so_far}; now {plan.label()}"))
        try:
            split, g = build(graph, plan, platform, prepare, train, step)
        except SplitError as err:
            reasons.append(f"{plan.label()}: {err.message}")
            dropped.append(reasons[-1])
            continue
        try:
            priced = build_cost_table(g, platform)
            cand = score(plan, priced)
        except InfeasibleError as err:  # a piece too big for its device: the plan cannot run
            reasons.append(f"{plan.label()}: {err.message}")
            continue
        scored.append((cand, split, g, priced))
        if m == 1:
            single = min(single, cand.step_time)
        if cand.fits:
            best_time = min(best_time, cand.step_time)
    pool = scored if mode == "auto" else [s for s in scored if len(s[0].plan.devices) > 1]
    if not pool:
        why = "; ".join(list(dict.fromkeys(reasons))[:3])
        if not why and len(devices) > 1 and mode == "tensor":
            why = ("no part of it splits by tensor: a matmul with a weight whose output reaches a second such matmul "
                   "through elementwise ops (Megatron-LM's pair), or a convolution region")
        why = why or "the platform has one device that runs the graph"
        raise SplitError(f"--parallel {mode}: no plan splits graph {graph.name} ({why})", obj="--parallel")
    fitting = [s for s in pool if s[0].fits]
    if not fitting:
        raise _none_fits(mode, graph, base, min((s[0] for s in pool), key=lambda c: (c.max_peak, c.step_time)),
                         len(scored))
    best = min(fitting, key=lambda s: (s[0].step_time, len(s[0].plan.devices)))
    singles = [s[0] for s in scored if len(s[0].plan.devices) == 1]
    ranked = tuple(sorted((s[0] for s in scored), key=lambda c: (c.step_time, len(c.plan.devices))))
    return Choice(mode, best[1], best[2], best[0], ranked, min(singles, key=lambda c: c.step_time) if singles else None,
                  skipped, tuple(dropped), best[3])
