"""One decode step of the chosen serving layout, per GPU (:mod:`mapper.serving`).

The first decode step's graph is split as the layout says (tensor ranks with
their all-reduces, pipeline stages at the layout's block boundaries,
micro-batches) by the same rewrite as ``--parallel`` splits
(:func:`mapper.parallel.rewrite.split_graph`), fused, priced, scheduled and
validated. Every task is pinned to its GPU, and each GPU runs its tasks in the
order a pipeline runtime issues them, micro-batch after micro-batch (the greedy
list scheduler in index order: the split numbers the tasks micro-batch by
micro-batch; HEFT's upward ranks would run a layer of every micro-batch before
the next layer and hold the next stage back). Its Gantt shows what the stage
times of the request graph are made of; its makespan, a step of one micro-batch
wave (the stages' sum plus ``m - 1`` times the slowest), is reported beside
them. A layout over several nodes is built on those nodes' devices joined by
the fabric (:func:`mapper.platform.cluster.flat_platform`), up to
:data:`~mapper.platform.cluster.MAX_FLAT_NODES` nodes. With the eager
runtime each kernel lasts, on its GPU, as long as it holds back the rank's
stream of kernels issued by the CPU (:func:`mapper.serving.request.stream_finishes`),
so the step is host-bound where the closed form is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from mapper.core.graph import TaskGraph
from mapper.costing.cost import CostTable, build_cost_table
from mapper.engine.validate import validate
from mapper.mapping import get_mapper
from mapper.mapping.base import MapOptions, MapResult
from mapper.parallel.plan import Plan
from mapper.parallel.rewrite import split_graph
from mapper.platform.cluster import MAX_FLAT_NODES, flat_name, flat_platform, with_nodes
from mapper.platform.devices import Platform
from mapper.serving.model import ServingEstimate, ServingModel
from mapper.serving.request import framework_ops, stream_finishes

#: The most tasks a decode step's split graph may have to be built (beyond, the notes say so).
MAX_STEP_TASKS = 40_000


def decode_step(model: ServingModel, est: ServingEstimate, platform: Platform,
                prepare: Callable[[TaskGraph], TaskGraph]) -> tuple[MapResult | None, str]:
    """The validated schedule of one decode step (the prefill when there is no decode) under
    ``est``'s layout, or None and why not."""
    lay = est.layout
    gpus = model.peers
    if lay.gpus > len(gpus):  # the nodes the layout spans, each device named after its node
        nodes = -(-lay.gpus // len(gpus))
        if platform.cluster is None or nodes > min(platform.cluster.nodes, MAX_FLAT_NODES):
            return None, f"its {lay.gpus} GPUs span more than {MAX_FLAT_NODES} nodes"
        platform = flat_platform(with_nodes(platform, nodes))
        gpus = tuple(flat_name("", n, g) for n in range(nodes) for g in model.peers)
    phase = "first" if "first" in model.graphs else "prefill"
    graph = model.graphs[phase]
    if len(graph.tasks) * lay.tensor > MAX_STEP_TASKS:
        return None, f"its split graph would hold some {len(graph.tasks) * lay.tensor:,} tasks"
    blocks = model.profiles[phase].blocks
    cuts = tuple(blocks[b].tasks[0] for b in est.stages[1:])
    plan = Plan(data=1, tensor=lay.tensor, stages=lay.pipeline, micro_batches=lay.micro_batches,
                devices=tuple(gpus[:lay.gpus]), cuts=cuts, vocab=True)
    split = split_graph(graph, plan, platform)
    cost = build_cost_table(prepare(split.graph), platform)
    if model.dispatch > 0:
        cost = with_dispatch(cost, model.dispatch, decode=phase != "prefill")
    result = get_mapper("greedy").map(cost, MapOptions())
    if validate(result.schedule):
        return None, "its schedule did not validate"
    return result, ""


def with_dispatch(cost: CostTable, dispatch: float, decode: bool) -> CostTable:
    """``cost`` with each task pinned to a GPU lasting, there, as long as it holds back its rank's
    stream of kernels (index order) issued by a CPU thread at ``dispatch`` seconds per framework op;
    a collective is one op. The kernels' times are never shortened."""
    time = [list(row) for row in cost.time]
    bound = [list(row) for row in cost.bound]
    chains: dict[int, list[int]] = {}
    for task in cost.graph.tasks:
        allow = task.placement.allow
        if len(allow) == 1:
            chains.setdefault(cost.platform.device_index(allow[0]), []).append(task.index)
    for d, tasks in chains.items():
        kernels = [(cost.time[t][d], 1 if cost.graph.tasks[t].explicit_cost else
                    framework_ops(tuple(p.op for p in (cost.graph.tasks[t].parts or (cost.graph.tasks[t],))), decode))
                   for t in tasks]
        before = 0.0
        for t, end in zip(tasks, stream_finishes(kernels, dispatch)):
            if end - before > time[t][d]:
                time[t][d], bound[t][d] = end - before, "launch"
            before = end
    return replace(cost, time=tuple(map(tuple, time)), bound=tuple(map(tuple, bound)))
