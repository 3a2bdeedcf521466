"""Multilevel mapping for huge task graphs (``--coarsen multilevel``).

Coarsen, map, uncoarsen, as multilevel schedulers do (the acyclic-partition
scheduler of Özkaya, Benoit, Uçar, Herrmann, Çatalyürek, IPDPS 2019):

1. partition the task graph as a hypergraph (:mod:`.hypergraph`: one net per
   produced tensor) into one block per device, block ``d``'s weight (tasks'
   mean times) targeted at device ``d``'s share of the platform's speed;
2. split the blocks into clusters whose quotient graph is acyclic
   (:mod:`.acyclic`), at most :data:`COARSE_TASKS` of them, each runnable on
   one device at least;
3. map the quotient (:func:`~mapper.mapping.coarsen.grouped`: a cluster's time
   is its members' sum) with the best of the list heuristics the ``milp``
   strategy starts from (deterministic), capacities (``--memory``) included;
4. uncoarsen: every task takes its cluster's device and its place in the
   cluster's order, and :func:`~mapper.engine.schedule.build_schedule` re-times
   the full graph (a task starts when its own inputs arrive, never later than
   its cluster would); the best of that, an earliest-finish placement guided
   by it (:func:`_guided`) and, on small graphs, one guided by the partition and HEFT is
   refined by MILP-window LNS along the critical path
   (:func:`~mapper.mapping.lns.improve`) while time is left.

When a device of the platform has ``max_tasks`` or ``max_inbound`` the
partition is the mapping: its blocks are repaired to meet the limits exactly
(:mod:`.limits`) or the mapping is reported infeasible, and the devices' task
orders come from list scheduling.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import replace

from mapper.costing.cost import INF, CostTable
from mapper.engine.schedule import Assignment, Schedule, build_schedule, timing
from mapper.errors import InfeasibleError, MapperError, OptionsError
from mapper.mapping import get_mapper
from mapper.mapping.acyclic import convex_clusters
from mapper.mapping.base import MapOptions, Mapper, MapResult, check_options
from mapper.mapping.coarsen import expand, grouped
from mapper.mapping.exact.incumbent import best_heuristic, schedule_order, value_of
from mapper.mapping.exact.result import NAME, gap_of, lower_bound_for
from mapper.mapping.hypergraph import Nets, available, nets_of, partition
from mapper.mapping.limits import Limits, limits_of, repair
from mapper.mapping.objectives import pipeline_notes
from mapper.mapping.placer import Placer
from mapper.mapping.ranks import mean_comm, mean_times, priority_order, upward_rank

#: Clusters of the coarse graph at most (the list heuristics map about a thousand tasks in seconds).
COARSE_TASKS = 1000
#: Mt-KaHyPar's allowed imbalance over each block's target weight.
EPSILON = 0.03
#: HEFT on the full graph, and the earliest-finish placement near the partition, join the candidates
#: up to this many task-device pairs (their time grows with them and with the edges: seconds at 10^5
#: pairs in pure Python); past it the placement near the uncoarsened devices is the one refinement.
HEFT_MAX_CELLS = 100_000
#: The objectives the final LNS refines (the others keep the best candidate).
LNS_OBJECTIVES = ("makespan", "energy")
#: The lower bound is computed up to this many task-device pairs.
BOUND_MAX_CELLS = 200_000
#: Node weights are integers from 1 to this.
NODE_SCALE = 1000


def node_weights(cost: CostTable) -> list[int]:
    """Each task's mean time over its feasible devices, as an integer from 1 to :data:`NODE_SCALE`."""
    w = mean_times(cost)
    top = max(w, default=0.0)
    scale = NODE_SCALE / top if top > 0 else 0.0
    return [max(1, min(NODE_SCALE, round(x * scale))) for x in w]


def speed_targets(cost: CostTable, weight: list[int]) -> list[int]:
    """Block ``d``'s largest weight: its device's share of the total speed (tasks per second of
    time, over the tasks it can run), plus the imbalance and one heaviest task of slack."""
    speed = []
    for d in range(cost.n_devices):
        times = [row[d] for row in cost.time if row[d] < INF]
        total = sum(times)
        speed.append(len(times) / total if total > 0 else (1.0 if times else 0.0))
    whole, heaviest, share = sum(weight), max(weight, default=1), sum(speed) or 1.0
    return [math.ceil(whole * s / share * (1 + EPSILON)) + heaviest for s in speed]


class MultilevelMapper(Mapper):
    """Multilevel mapping: hypergraph partition, acyclic clusters, map, uncoarsen, LNS."""

    name = "multilevel"
    summary = ("multilevel: Mt-KaHyPar partition, acyclic clusters mapped by list heuristics, uncoarsened, "
               "LNS (huge graphs)")

    def map(self, cost: CostTable, options: MapOptions = MapOptions()) -> MapResult:
        return map_multilevel(cost, options)


def map_multilevel(cost: CostTable, options: MapOptions, t0: float | None = None,
                   notes: tuple[str, ...] = ()) -> MapResult:
    """The multilevel path (module docstring)."""
    t0 = time.perf_counter() if t0 is None else t0
    check_options(options)
    if not available():
        raise OptionsError("multilevel mapping needs Mt-KaHyPar: install the huge extra (pip install 'mapper[huge]')",
                           obj="--coarsen")
    cost.require_feasible()
    nets = nets_of(cost.graph, mean_comm(cost))
    limits = limits_of(cost)
    if limits.any:
        return _constrained(cost, options, nets, limits, t0, notes)
    weight = node_weights(cost)
    block = partition(cost.n_tasks, nets, weight, speed_targets(cost, weight), options.seed, EPSILON)
    keyed = _by_feasibility(cost, block)
    clusters = convex_clusters(cost.graph, keyed, math.ceil(cost.n_tasks / COARSE_TASKS))
    coarse = grouped(cost, clusters)
    note = [*notes, f"multilevel: Mt-KaHyPar partition into {cost.n_devices} blocks, "
                    f"{len(clusters)} acyclic clusters"]
    inner, _ = best_heuristic(coarse.cost, replace(options, progress=None))
    if inner is not None:
        note.append(f"coarse graph mapped by {inner.name} ({inner.schedule.makespan:.6g} s)")
    dev, order = expand(coarse, inner.schedule.device_of, schedule_order(inner.schedule)) if inner else (block, None)
    rank = priority_order(cost, upward_rank(cost, mean_times(cost), mean_comm(cost)))
    # (value, the schedule or its maker, origin): the uncoarsened mapping's schedule is made only if it wins
    seeds: list[tuple[float, Schedule | Callable[[], Schedule], str]] = []
    timed = _timed(cost, dev, order, options)
    if timed is not None:
        seeds.append((*timed, "the uncoarsened mapping"))
    fastest = [min(cost.feasible_devices(t), key=row.__getitem__) for t, row in enumerate(cost.time)]
    hints = ((dev, "the uncoarsened devices"), (block, "the partition"))
    for hint, name in hints if cost.n_tasks * cost.n_devices <= HEFT_MAX_CELLS else hints[:1]:
        guided = _guided(cost, hint, fastest, rank, options)
        if guided is not None:
            seeds.append((value_of(guided, options.objective), guided, f"earliest finish near {name}"))
    if cost.n_tasks * cost.n_devices <= HEFT_MAX_CELLS:
        heft = get_mapper("heft").map(cost, options).schedule
        seeds.append((value_of(heft, options.objective), heft, "heft on the full graph"))
    if not seeds:
        raise InfeasibleError("the multilevel mapping found no valid schedule", obj=cost.graph.name)
    value, best, origin = min(seeds, key=lambda p: p[0])
    del seeds, timed  # the losers' times and schedules
    note.append(f"start: {origin} at {value:.6g}")
    return _refined(cost, options, best if isinstance(best, Schedule) else best(), note, t0)


def _guided(cost: CostTable, hint, fastest: list[int], rank: tuple[int, ...], options: MapOptions) -> Schedule | None:
    """HEFT's placement (upward rank, insertion, earliest finish) over a few devices per task: its
    ``hint``, its fastest, the one where it would end first after the tasks placed there, and that of
    its predecessor with the latest input. Its cost follows the edges, not the edges times the devices
    (the refinement step of the uncoarsening)."""
    g = cost.graph
    placer = Placer(cost, options.schedule)
    comm = mean_comm(cost)
    end, edges, last_end = placer.end, g.edges, placer.timeline.last_end
    last = [last_end(d) for d in range(cost.n_devices)]  # each device's last end, kept as tasks are placed
    try:
        for t in rank:
            row = cost.time[t]
            soon, soon_at = -1, INF  # where t would end first after the tasks placed there (ties: lowest)
            for d in cost.feasible_devices(t):
                at = last[d] + row[d]
                if soon < 0 or at < soon_at:
                    soon, soon_at = d, at
            cand = {hint[t], fastest[t], soon}
            late, at = -1, -INF  # the edge of the input arriving last (ties: the lowest edge)
            for e in g.preds[t]:
                x = end[edges[e].src] + comm[e]
                if x > at or (x == at and e < late):
                    late, at = e, x
            if late >= 0:
                cand.add(placer.device[edges[late].src])
            if not any(placer.fits(t, d) for d in cand):
                cand = set(cost.feasible_devices(t))
            d = placer.place_best(t, devices=sorted(cand))
            last[d] = last_end(d)
        return placer.schedule()
    except MapperError:
        return None


def _by_feasibility(cost: CostTable, block: tuple[int, ...]) -> list[int]:
    """Block ids refined by each task's feasible devices, so every cluster runs somewhere."""
    ids: dict[tuple[int, tuple[int, ...]], int] = {}
    return [ids.setdefault((b, cost.feasible_devices(t)), len(ids)) for t, b in enumerate(block)]


def _timed(cost: CostTable, device, order, options: MapOptions
           ) -> tuple[float, Schedule | Callable[[], Schedule]] | None:
    """The objective's value of ``device`` with per-device ``order`` and its schedule (under the
    makespan, a maker of it: :func:`~mapper.engine.schedule.timing`), else None."""
    if any(cost.time[t][d] == INF for t, d in enumerate(device)):
        return None
    assignment = Assignment(tuple(device), order)
    try:
        if options.objective == "makespan":
            return timing(cost, assignment, options.schedule)
        schedule = build_schedule(cost, assignment, options.schedule)
    except MapperError:
        return None
    return value_of(schedule, options.objective), schedule


def _refined(cost: CostTable, options: MapOptions, start: Schedule, notes: list[str], t0: float) -> MapResult:
    from mapper.mapping.lns import describe_change, improve

    deadline = t0 + options.time_limit
    final = start
    if options.objective in LNS_OBJECTIVES and time.perf_counter() < deadline and not options.should_stop():
        improved, stats = improve(cost, start, options.objective, options.schedule, deadline, seed=options.seed,
                                  makespan_bound=options.makespan_bound, stop=options.stop)
        if stats.accepted:
            try:
                final = build_schedule(cost, Assignment(improved.device_of, schedule_order(improved)),
                                       options.schedule)
            except MapperError:
                final = start
        notes.append(f"LNS on the full graph: {stats.windows} windows, {stats.accepted} accepted, "
                     f"{describe_change(stats.start_value, value_of(final, options.objective), options.objective)}")
    return _result(cost, options, final, t0, notes)


def _constrained(cost: CostTable, options: MapOptions, nets: Nets, limits: Limits, t0: float,
                 notes: tuple[str, ...]) -> MapResult:
    """The partition as the mapping, repaired to meet ``max_tasks`` and ``max_inbound``."""
    n, nd = cost.n_tasks, cost.n_devices
    room = sum(min(x, n) for x in limits.tasks)
    if room < n:
        raise InfeasibleError(f"the devices hold {room:g} tasks at most (max_tasks), the graph has {n}",
                              obj=cost.graph.name)
    even = math.ceil(n / nd * (1 + EPSILON))
    caps = [int(min(x, even)) if math.isfinite(x) else even for x in limits.tasks]
    if sum(caps) < n:
        caps = [int(min(x, n)) for x in limits.tasks]
    block = partition(n, nets, [1] * n, caps, options.seed, EPSILON)
    left = max(0.5, options.time_limit - (time.perf_counter() - t0))
    device = repair(cost, nets, block, limits, left, options.seed)
    moved = sum(a != b for a, b in zip(block, device))
    note = [*notes, f"multilevel: Mt-KaHyPar partition into {nd} blocks, {moved} tasks moved to meet "
                    "max_tasks and max_inbound"]
    sched = build_schedule(cost, Assignment(device, None), options.schedule)
    return _result(cost, options, sched, t0, note)


def _result(cost: CostTable, options: MapOptions, schedule: Schedule, t0: float, notes: list[str]) -> MapResult:
    """The result, with the lower bound of :mod:`mapper.mapping.bounds` up to :data:`BOUND_MAX_CELLS`."""
    value = value_of(schedule, options.objective)
    bound = None
    if cost.n_tasks * cost.n_devices <= BOUND_MAX_CELLS:
        bound = lower_bound_for(cost, options.objective, options.schedule, None)
    else:
        notes.append(f"no lower bound: {cost.n_tasks} tasks x {cost.n_devices} devices is past the "
                     f"{BOUND_MAX_CELLS:,} pairs its path bound takes seconds for")
    if options.should_stop():
        notes.append("interrupted: the search was stopped early; this is the best schedule found by then")
    return MapResult(schedule=schedule, mapper=NAME, status="heuristic", objective=options.objective,
                     objective_value=value, lower_bound=bound, gap=gap_of(value, bound),
                     solve_time=time.perf_counter() - t0, notes=(*notes, *pipeline_notes(schedule, options.objective)))
